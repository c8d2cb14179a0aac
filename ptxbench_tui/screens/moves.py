"""The moves every view that shows kernels or tables offers: copy an id or a
kernel, open kernels in `$EDITOR`, export a table, sort it, open its filters.
A view says which samples its move is about (`move_targets`) and how it sorts
(`set_sort`); reading code runs in a worker thread, and the clipboard and the
editor are then driven from the event loop."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.screen import Screen

from ptxbench.db import triage
from ptxbench.db.files import check_output
from ptxbench.tui.host import host
from ptxbench.tui.kernel_files import open_in_editor, write_table
from ptxbench.tui.messages import StoreFailed


# A mixin of screens: typed as one, a plain class at run time (the screen brings its own base).
if TYPE_CHECKING:
    _Screen = Screen
else:
    _Screen = object


class KernelMoves(_Screen):
    """A mixin for screens (it uses `self.app`, `self.notify`, workers)."""

    def move_targets(self) -> list[int]:
        """The sample ids a copy or editor move is about (the cursor's, or the selected ones)."""
        return []

    def editor_line(self) -> int | None:
        """The line to open the editor at, if the view shows one."""
        return None

    def set_sort(self, column: str) -> None:
        """Sort by a column's title (again: the other direction). Views with a sortable table define it."""

    def ask_sort(self, columns: list[str], current: str | None, descending: bool, where: str) -> None:
        from ptxbench.tui.screens.pickers import SortDialog

        def chosen(column: str | None) -> None:
            if column is not None:
                self.set_sort(column)

        self.app.push_screen(SortDialog(columns, current, descending, where), chosen)

    def action_filter(self) -> None:
        from ptxbench.tui.widgets.common import FilterPanel

        self.query_one(FilterPanel).open()

    def action_copy_id(self) -> None:
        ids = self.move_targets()
        if not ids:
            self.notify("No sample here to copy.")
            return
        text = " ".join(str(i) for i in ids)
        self.app.copy_to_clipboard(text)
        self.notify(f"Copied {'ids ' if len(ids) > 1 else 'id '}{text}")

    def action_copy_code(self) -> None:
        if ids := self.move_targets()[:1]:
            self.read_codes(ids, self._copy_code)

    def action_editor(self) -> None:
        if ids := self.move_targets():
            self.read_codes(ids[:4], self._edit)

    @work(thread=True, exclusive=True, group="kernel-move", exit_on_error=False, description="read kernels")
    def read_codes(self, ids: list[int], then: Callable[[dict[int, str]], None]) -> None:
        try:
            codes = host(self).reader.read(triage.sample_codes, ids)
        except Exception as exc:  # reported, the view stays usable
            self.post_message(StoreFailed(f"kernel: {exc}"))
            return
        self.app.call_from_thread(then, {i: codes[i] for i in ids if i in codes})

    def _copy_code(self, codes: dict[int, str]) -> None:
        for sid, code in codes.items():
            self.app.copy_to_clipboard(code)
            self.notify(f"Copied sample {sid}'s PTX ({len(code.splitlines()):,} lines)")

    def _edit(self, codes: dict[int, str]) -> None:
        files = [(f"sample-{sid}.ptx", code) for sid, code in codes.items()]
        error = open_in_editor(self.app, files, line=self.editor_line())
        if error:
            self.notify(error, severity="warning")

    # -- exports -----------------------------------------------------------------------
    def ask_export(self, what: str, describe: str, produce: Callable[[Path, str], int]) -> None:
        """Ask where and in which format, then `produce(path, fmt)` (in a worker thread; it
        writes the file and says how many rows)."""
        from ptxbench.tui.screens.pickers import ExportDialog

        def chosen(choice) -> None:
            if choice is not None:
                self.write_export(choice.path, choice.fmt, produce)

        self.app.push_screen(ExportDialog(what, describe), chosen)

    def export_rows(self, what: str, describe: str, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
        """Export rows already in memory (a table the view computed)."""
        rows = list(rows)
        self.ask_export(what, describe, lambda path, fmt: write_table(path, columns, rows, fmt))

    @work(thread=True, exclusive=True, group="export", exit_on_error=False, description="export")
    def write_export(self, path: Path, fmt: str, produce: Callable[[Path, str], int]) -> None:
        try:
            check_output(path, stores=[host(self).db_path])  # never over the store or any SQLite file
            n = produce(path, fmt)
        except Exception as exc:  # a path that cannot be written is said, not fatal
            self.post_message(StoreFailed(f"export: {exc}"))
            return
        self.app.call_from_thread(self.notify, f"Wrote {n:,} rows to {path}")
