"""Fixit (8): the store's fix pairs, paged and filtered, beside the set's statistics.

Each row is a failed sample and the sample that fixes it (docs/fixit.md): Enter
diffs the two, `i` reads the explanation in full, `v` keeps only the pairs that
count (their fix passed the engine), `o` sorts every pair by a column. Below 120
columns the statistics fold away (`S` shows them) and so do the less needed columns. Reads run in thread workers on their own
connection; the workers only post the messages below.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Label, Select, Static

from ptxbench.db import triage
from ptxbench.db import fixit as fixit_db
from ptxbench.engine.categories import DESCRIPTIONS
from ptxbench.engine.inert import inert
from ptxbench.tui import keys
from ptxbench.tui.messages import ShowDiff, StoreFailed
from ptxbench.tui.screens.base import ViewScreen
from ptxbench.tui.screens.moves import KernelMoves
from ptxbench.tui.untrusted import markup_value
from ptxbench.tui.widgets.common import FilterBar, FilterPanel
from ptxbench.tui.widgets.key_bar import KeyBar
from ptxbench.tui.kernel_files import write_table
from ptxbench.tui.widgets.row_table import RowTable

PAGE_SIZE = 200
# The columns a reader needs first come first; the fixes row's id is last.
COLUMNS = ("Failed", "Fixed", "Task", "Category", "Kind", "Changes", "Verified", "Counts", "Explanation source", "Expl.",
           "Model", "Arch", "Fix")
FILTERS = [("task_id", "Task"), ("category", "Category"), ("kind", "Kind")]
KEEP = tuple(COLUMNS.index(c) for c in ("Failed", "Task", "Category", "Kind", "Changes", "Verified"))
FOLD_ORDER = tuple(COLUMNS.index(c) for c in ("Fix", "Arch", "Model", "Expl.", "Explanation source", "Counts", "Fixed"))
BAR_WIDTH = 12
NAME_WIDTH = 28
TABLE_ROWS = 8  # rows of each count table in the panel; the rest are summed as "others"


def _css_path() -> Path:
    import ptxbench.themes

    return Path(ptxbench.themes.__file__).resolve().parent / "fixit.tcss"


@dataclass(frozen=True)
class PairFilter:
    task_id: str = ""
    category: str = ""
    kind: str = ""
    verified_only: bool = False

    def with_(self, **changes: Any) -> "PairFilter":
        return replace(self, **changes)

    def query_args(self) -> dict[str, Any]:
        return {"task_id": self.task_id or None, "category": self.category or None, "kind": self.kind or None,
                "verified_only": self.verified_only}

    def describe(self) -> str:
        parts = [f"{name}={value}" for name, value in (("task", self.task_id), ("category", self.category),
                                                        ("kind", self.kind)) if value]
        if self.verified_only:
            parts.append("verified only")
        return ", ".join(parts) or "every pair"


@dataclass
class FixitPageLoaded(Message):
    request: int
    rows: list[fixit_db.FixitPairRow]
    total: int
    changes: dict[tuple[int, int], tuple[bool, bool]]  # (failed, fixed) → (code changed, manifest changed)


@dataclass
class FixitStatsLoaded(Message):
    stats: dict[str, Any]
    lengths: dict[str, Any]
    facets: fixit_db.FixitFacets


class FixitScreen(KernelMoves, ViewScreen):
    MODE = "fixit"
    AUTO_FOCUS = "#fixit-table"
    CSS_PATH = _css_path()
    BINDINGS = keys.bindings("fixit")

    def __init__(self) -> None:
        super().__init__()
        self.filter = PairFilter()
        self.page_offset = 0
        self.rows: list[fixit_db.FixitPairRow] = []
        self.changes: dict[tuple[int, int], tuple[bool, bool]] = {}
        self.total: int | None = None
        self.request = 0
        self.stats: dict[str, Any] | None = None
        self.lengths: dict[str, Any] | None = None
        self._version_read: int | None = None  # the store version last read
        self.sort: triage.Sort | None = None  # None: by task, category, id

    def compose_body(self) -> ComposeResult:
        with FilterPanel(id="fixit-bar"):
            yield FilterBar(FILTERS, id="fixit-filters")
        yield Static("", id="fixit-status", classes="status")
        with Horizontal(id="fixit-body"):
            with Vertical(id="fixit-main"):
                yield RowTable(id="fixit-table")
                yield Static("", id="fixit-preview")
            with VerticalScroll(id="fixit-stats-pane"):
                yield Static("reading the set's statistics…", id="fixit-stats")

    def on_mount(self) -> None:
        # ViewScreen's own on_mount runs too (Textual dispatches it along the MRO) and
        # watches the store's version; this view reads its data itself, at once.
        self.query_one(RowTable).set_columns(list(COLUMNS), right=(0, 1, 9, 12), keep=KEEP, fold_order=FOLD_ORDER)
        self.refresh_data()

    def refresh_data(self) -> None:
        """The store changed (or the view opened): read the page and the statistics again."""
        version = self.ptx.data_version
        if version == self._version_read:
            return  # already read for this version of the store
        self._version_read = version
        self.load(keep_offset=True)
        self.load_stats()

    # -- loading ---------------------------------------------------------------------
    def load(self, *, keep_offset: bool = False) -> None:
        if not keep_offset:
            self.page_offset = 0
        self.request += 1
        self.total = None
        self.fetch_page(self.request, self.filter, self.sort, self.page_offset)

    @work(thread=True, exclusive=True, group="fixit-page", exit_on_error=False, description="fixit pairs")
    def fetch_page(self, request: int, flt: PairFilter, sort: triage.Sort | None, offset: int) -> None:
        try:
            rows, total, changes = self.ptx.reader.read(triage.fixit_page, sort=sort, offset=offset, limit=PAGE_SIZE,
                                                        **flt.query_args())
        except Exception as exc:  # shown to the user, the view stays usable
            self.post_message(StoreFailed(f"fixit: {exc}"))
            return
        self.post_message(FixitPageLoaded(request, rows, total, changes))

    @work(thread=True, exclusive=True, group="fixit-stats", exit_on_error=False, description="fixit statistics")
    def load_stats(self) -> None:
        try:
            read = self.ptx.reader.read
            message = FixitStatsLoaded(read(fixit_db.fixit_stats), read(fixit_db.fixit_lengths),
                                       read(fixit_db.fixit_facets))
        except Exception as exc:
            self.post_message(StoreFailed(f"fixit statistics: {exc}"))
            return
        self.post_message(message)

    def on_fixit_page_loaded(self, message: FixitPageLoaded) -> None:
        if message.request != self.request:
            return  # an answer to an older filter
        keep = self.selected()
        self.rows = message.rows
        self.total = message.total
        self.changes = message.changes
        cursor = next((i for i, r in enumerate(self.rows) if keep and r.fix_id == keep.fix_id), None)
        self.query_one(RowTable).set_rows([_cells(r, self.changed(r)) for r in self.rows], cursor=cursor)
        self._status()
        self._preview()

    def on_fixit_stats_loaded(self, message: FixitStatsLoaded) -> None:
        self.stats, self.lengths = message.stats, message.lengths
        facets = message.facets
        self.query_one(FilterBar).set_options(
            {"task_id": facets.tasks, "category": facets.categories, "kind": facets.kinds})
        self.query_one("#fixit-stats", Static).update(stats_text(message.stats, message.lengths))

    def _status(self) -> None:
        first = self.page_offset + 1 if self.rows else 0
        last = self.page_offset + len(self.rows)
        total = "…" if self.total is None else f"{self.total:,}"
        order = self.sort.describe() if self.sort else "by task, category"
        self.query_one("#fixit-status", Static).update(
            f"pairs {first:,}–{last:,} of {total} · {markup_value(self.filter.describe())} · {order} · / filters"
        )

    def _preview(self) -> None:
        row = self.selected()
        text = ""
        if row is not None:
            what = DESCRIPTIONS.get(row.category, "")
            head = f"[b]#{row.failed_sample_id} → #{row.fixed_sample_id}[/b] {markup_value(row.category)}"
            head += f" [dim]({markup_value(what)})[/dim]" if what else ""
            if self.changed(row) == "manifest":
                head += " · [b]the fix is in the launch manifest[/b] [dim](the code is the same)[/dim]"
            body = markup_value(row.explanation) if row.explanation else "[dim]no explanation stored[/dim]"
            text = f"{head}\n{body}"
        self.query_one("#fixit-preview", Static).update(text)

    def on_row_table_row_highlighted(self, _event: RowTable.RowHighlighted) -> None:
        self._preview()

    def on_row_table_row_selected(self, _event: RowTable.RowSelected) -> None:
        self.action_diff()

    def changed(self, row: fixit_db.FixitPairRow) -> str:
        """What the pair's fix changes: the code, the launch manifest or both."""
        return triage.changes_text(self.changes.get((row.failed_sample_id, row.fixed_sample_id), (False, False)))

    def selected(self) -> fixit_db.FixitPairRow | None:
        table = self.query_one(RowTable)
        if not self.rows or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row]

    # -- filters ---------------------------------------------------------------------
    @on(Select.Changed, "FilterBar Select")
    def _filters_changed(self, _event: Select.Changed) -> None:
        values = self.query_one(FilterBar).user_change()
        if values is not None:
            self.filter = self.filter.with_(**values)
            self.load()

    def apply_filter(self, flt: PairFilter) -> None:
        self.filter = flt
        self.query_one(FilterBar).set_values({"task_id": flt.task_id, "category": flt.category, "kind": flt.kind})
        self.load()

    def move_targets(self) -> list[int]:
        row = self.selected()
        return [row.failed_sample_id, row.fixed_sample_id] if row else []

    def on_row_table_header_clicked(self, event: RowTable.HeaderClicked) -> None:
        self.set_sort(event.column)

    def set_sort(self, column: str) -> None:
        self.sort = self.sort.flipped_or(column) if self.sort else triage.Sort(column, True)
        self.query_one(RowTable).show_sort(self.sort.column, self.sort.descending)
        self.load()

    # -- actions ---------------------------------------------------------------------
    def action_sort(self) -> None:
        self.ask_sort(list(COLUMNS), self.sort.column if self.sort else None,
                      self.sort.descending if self.sort else True, "every pair the filter selects")

    def action_toggle_stats(self) -> None:
        pane = self.query_one("#fixit-stats-pane")
        pane.set_class(not pane.has_class("-toggled"), "-toggled")

    def action_export(self) -> None:
        flt, sort, read = self.filter, self.sort, self.ptx.reader.read

        def produce(path, fmt: str) -> int:
            rows, _, changes = read(triage.fixit_page, sort=sort, offset=0, limit=1 << 31, **flt.query_args())
            dicts = [{**fixit_db.row_dict(r), "changes": triage.changes_text(
                changes.get((r.failed_sample_id, r.fixed_sample_id), (False, False)))} for r in rows]
            return write_table(path, list(dicts[0]) if dicts else ["fix_id"], dicts, fmt)

        self.ask_export("fixit-pairs", f"the Fixit pairs ({flt.describe()})", produce)

    def action_diff(self) -> None:
        if (row := self.selected()) is not None:
            # A fix made only in the launch manifest opens on the manifest: its PTX is the same.
            target = "manifest" if self.changed(row) == "manifest" else "ptx"
            self.post_message(ShowDiff(row.failed_sample_id, row.fixed_sample_id, target))

    def action_explain(self) -> None:
        if (row := self.selected()) is not None:
            self.app.push_screen(ExplanationScreen(row))

    def action_toggle_verified(self) -> None:
        self.filter = self.filter.with_(verified_only=not self.filter.verified_only)
        self.load()

    def action_clear_filters(self) -> None:
        self.sort = None
        self.query_one(RowTable).show_sort(None)
        self.apply_filter(PairFilter())

    def action_next_page(self) -> None:
        if self.total is None or self.page_offset + PAGE_SIZE >= self.total:
            self.notify("This is the last page.")
            return
        self.page_offset += PAGE_SIZE
        self.load(keep_offset=True)

    def action_prev_page(self) -> None:
        if self.page_offset == 0:
            return
        self.page_offset = max(0, self.page_offset - PAGE_SIZE)
        self.load(keep_offset=True)


class ExplanationScreen(ModalScreen[None]):
    """One pair's explanation in full, with where it came from."""

    CSS_PATH = _css_path()
    BINDINGS = keys.bindings("dialog")[:1]

    def __init__(self, row: fixit_db.FixitPairRow) -> None:
        super().__init__()
        self.row = row

    def compose(self) -> ComposeResult:
        r = self.row
        with VerticalScroll(id="fixit-explanation", classes="dialog"):
            yield Label(f"[b]Sample {r.failed_sample_id} → {r.fixed_sample_id}[/b] · {markup_value(r.task_id)} · "
                        f"{markup_value(r.category)} · {markup_value(r.kind)}")
            more = f" · {r.explanations} explanations stored, this is the preferred one" if r.explanations > 1 else ""
            yield Static(f"explanation: {markup_value(r.explanation_source or 'unknown source')}{more}", classes="dim")
            yield Static(markup_value(r.explanation) if r.explanation else "[dim]no explanation stored[/dim]",
                         id="fixit-explanation-text")
        yield KeyBar()

    def action_cancel(self) -> None:
        self.dismiss(None)


def _cells(r: fixit_db.FixitPairRow, changes: str) -> tuple[str, ...]:
    return (str(r.failed_sample_id), str(r.fixed_sample_id), r.task_id,
            r.category + (" (held-out)" if r.heldout_only else ""), r.kind, changes, r.verification,
            "yes" if r.counts else "no", r.explanation_source or "—", str(r.explanations), r.model or "—", r.arch,
            str(r.fix_id))


# -- the statistics panel ---------------------------------------------------------------


def stats_text(stats: dict[str, Any], lengths: dict[str, Any]) -> str:
    lines = [
        "[b]The Fixit set[/b]",
        f"{stats['pairs']:,} pairs · [b]{stats['verified']:,}[/b] count ({stats['gpu_verified']:,} on a GPU)"
        f" · {stats['unverified']:,} do not",
        f"{stats['failed_samples']:,} failed samples, {stats['failed_with_a_verified_pair']:,} with a pair that counts",
    ]
    for title, key in (("per category", "per_category"), ("per task", "per_task"), ("per arch", "per_arch"),
                       ("per kind", "per_kind"), ("explanation source", "per_explanation_source")):
        lines += ["", f"[b]{title}[/b] [dim](pairs that count)[/dim]", *_count_table(stats.get(key) or {})]
    lines += ["", "[b]lengths[/b] [dim](every stored pair)[/dim]",
              f"[dim]{'':<18}{'p10':>7}{'p50':>7}{'p90':>7}{'max':>7}[/dim]"]
    for title, key in (("failed lines", "failed_lines"), ("fixed lines", "fixed_lines"),
                       ("explanation chars", "explanation_chars")):
        d = lengths.get(key) or {}
        if d.get("n"):
            lines.append(f"{title:<18}" + "".join(f"{d[q]:>7,}" for q in ("p10", "p50", "p90", "max")))
        else:
            lines.append(f"{title:<18}[dim]{'—':>7}[/dim]")
    lines += ["", "[b]last export[/b]", *_last_export(stats.get("last_export"))]
    return "\n".join(lines)


def _count_table(counts: dict[str, int]) -> list[str]:
    if not counts:
        return ["[dim]none[/dim]"]
    items = list(counts.items())
    top = max(n for _, n in items)
    shown, rest = items[:TABLE_ROWS], items[TABLE_ROWS:]
    out = []
    for name, n in shown:
        bar = "█" * max(1, round(BAR_WIDTH * n / top))
        shown = _cut(inert(name or "—"), NAME_WIDTH)  # padded to what is shown, not to its markup
        out.append(f"{markup_value(shown)}{' ' * (NAME_WIDTH - len(shown))} {n:>4} [$accent]{bar}[/]")
    if rest:
        others = f"{len(rest)} others"
        out.append(f"[dim]{others:<{NAME_WIDTH}} {sum(n for _, n in rest):>4}[/dim]")
    return out


def _last_export(last: Any) -> list[str]:
    if not isinstance(last, dict):
        return ["[dim]none yet (ptxbench fixit export)[/dim]"]
    out = [markup_value(str(last.get("path", "?")))]
    splits = [(name, last.get(name)) for name in ("train", "val", "heldout")]
    counts = " · ".join(f"{name} {part.get('pairs', 0):,}" for name, part in splits if isinstance(part, dict))
    whole = last.get("all") if isinstance(last.get("all"), dict) else {}
    if counts:
        out.append(f"{whole.get('pairs', 0):,} pairs: {counts}")
    if whole.get("category_entropy_bits") is not None:
        out.append(f"category entropy {markup_value(whole['category_entropy_bits'])} bits")
    chars = whole.get("length_chars")
    if isinstance(chars, dict) and chars.get("n"):
        out.append(f"chars per example: p50 {chars['p50']:,} · p90 {chars['p90']:,} · max {chars['max']:,}")
    dropped = last.get("dropped")
    if isinstance(dropped, dict) and dropped:
        out.append("dropped: " + markup_value(", ".join(f"{k} {v}" for k, v in dropped.items())))
    return out


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
