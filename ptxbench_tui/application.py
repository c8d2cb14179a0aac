"""The explorer's App: top-level views are `App.MODES` switched by number keys;
a sample, a diff and the dialogs are screens pushed on top. All keys come
from keys.py."""

from __future__ import annotations

import getpass
from pathlib import Path

from textual import work
from textual.app import App
from textual.reactive import reactive

from ptxbench.db import browse
from ptxbench.db import browse_summary as summary
from ptxbench.themes.ptxbench import DEFAULT_THEME, THEMES
from ptxbench.tui import keys
from ptxbench.tui.commands import BindingCommands
from ptxbench.tui.config import Config
from ptxbench.tui.messages import (
    CellsLoaded, LabelSaved, Reverify, ShowDiff, ShowSample, ShowSamples, StoreFailed,
)
from ptxbench.tui.screens.overview import OverviewScreen


def _lazy(module: str, name: str):  # noqa: ANN202
    """A screen factory that imports its view on first use (startup imports only the overview)."""

    def make():  # noqa: ANN202
        import importlib

        return getattr(importlib.import_module(f"ptxbench.tui.screens.{module}"), name)()

    return make


def _css_path() -> Path:
    import ptxbench.themes

    return Path(ptxbench.themes.__file__).resolve().parent / "ptxbench.tcss"


class PtxbenchApp(App[int]):
    TITLE = "PTXBench"
    CSS_PATH = _css_path()
    SCREENS = {
        "overview": OverviewScreen,
        "tasks": _lazy("tasks", "TasksScreen"),
        "samples": _lazy("samples", "SamplesScreen"),
        "triage": _lazy("triage", "TriageScreen"),
        "compare": _lazy("compare", "CompareScreen"),
        "live": _lazy("live", "LiveScreen"),
        "plots": _lazy("plots", "PlotsScreen"),
        "fixit": _lazy("fixit", "FixitScreen"),
    }
    MODES = {name: name for name in SCREENS}
    DEFAULT_MODE = "overview"
    BINDINGS = keys.bindings("app")
    COMMANDS = App.COMMANDS | {BindingCommands}

    data_version: reactive[int] = reactive(0)

    def __init__(self, config: Config, prefetch=None) -> None:  # noqa: ANN001 - app.Prefetch
        super().__init__()
        self._prefetch = prefetch
        self.config = config
        self.db_path = Path(config.db_path)
        self.engine_cmd = list(config.engine_cmd)
        self.gpu_lock_dir = config.gpu_lock_dir or self.db_path.parent
        self.cells: list[summary.Cell] | None = None
        self.facets: summary.Facets | None = None
        for theme in THEMES:
            self.register_theme(theme)
        self.theme = config.theme if config.theme in self.available_themes else DEFAULT_THEME
        if config.keymap:
            self.set_keymap(config.keymap)

    def on_mount(self) -> None:
        self.reload_store()

    # -- store -------------------------------------------------------------------------
    def reload_store(self) -> None:
        self.load_cells()

    def action_reload_store(self) -> None:
        self.reload_store()
        self.notify("Re-reading the store…")

    @work(thread=True, exclusive=True, group="cells", exit_on_error=False, description="store summary")
    def load_cells(self, recheck: bool = False) -> None:
        from ptxbench.tui import summary_cache

        prefetch, self._prefetch = self._prefetch, None
        try:
            if prefetch is not None:
                # Started before Textual was imported: usually done by now.
                summary, saved = prefetch.take()
                self.post_message(CellsLoaded(*summary, saved=saved))
                return
            self.post_message(CellsLoaded(*summary_cache.compute(self.db_path), recheck=recheck))
        except Exception as exc:  # noqa: BLE001 - a store that breaks while open is reported, not fatal
            self.post_message(StoreFailed(str(exc)))

    def on_cells_loaded(self, message: CellsLoaded) -> None:
        if message.recheck and message.cells == self.cells and message.facets == self.facets:
            return
        self.cells = message.cells
        self.facets = message.facets
        self.data_version += 1
        if message.saved:
            # Shown from the last start's summary; read the store again once this frame is painted.
            self.call_after_refresh(self.load_cells, True)

    def on_store_failed(self, message: StoreFailed) -> None:
        self.notify(message.error, title="Store", severity="error", timeout=8)

    # -- navigation --------------------------------------------------------------------
    async def on_show_samples(self, message: ShowSamples) -> None:
        await self.switch_mode("samples")
        screen = self.get_screen("samples")
        while self.screen is not screen:
            self.pop_screen()
        screen.apply_filter(message.filter)

    def on_show_sample(self, message: ShowSample) -> None:
        from ptxbench.tui.screens.sample import SampleScreen

        self.push_screen(SampleScreen(message.sample_id))

    def on_show_diff(self, message: ShowDiff) -> None:
        from ptxbench.tui.screens.diff import DiffScreen

        self.push_screen(DiffScreen(message.left, message.right, target=message.target))

    async def on_reverify(self, message: Reverify) -> None:
        await self.switch_mode("live")
        screen = self.get_screen("live")
        screen.enqueue(message.sample_ids, start=True)

    def action_help(self) -> None:
        from ptxbench.tui.screens.dialogs import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    # -- labels (a person's triage, beside the automatic category) -------------------------
    def ask_label(self, sample_id: int) -> None:
        self.load_label_context(sample_id)

    @work(thread=True, group="labels", exit_on_error=False, description="current label")
    def load_label_context(self, sample_id: int) -> None:
        detail = self._read_detail(sample_id)
        if detail is None:
            return
        self.call_from_thread(self._open_label_dialog, detail)

    def _read_detail(self, sample_id: int) -> browse.SampleDetail | None:
        """One sample's detail, read in a worker thread; a failure is reported, not raised."""
        try:
            detail = browse.sample_detail(browse.connect(self.db_path), sample_id)
        except Exception as exc:  # noqa: BLE001 - a store that breaks while open is reported
            self.post_message(StoreFailed(str(exc)))
            return None
        if detail is None:
            self.post_message(StoreFailed(f"no sample {sample_id}"))
        return detail

    def _open_label_dialog(self, detail: browse.SampleDetail) -> None:
        from ptxbench.tui.screens.dialogs import LabelChoice, LabelDialog

        label = detail.label
        current = LabelChoice(label.category, label.note, label.fixit_candidate) if label else None

        def saved(choice: LabelChoice | None) -> None:
            if choice is not None:
                self.save_label(detail.id, choice, "label")

        self.push_screen(LabelDialog(detail.id, detail.latest.category if detail.latest else None, current), saved)

    def toggle_fixit(self, sample_id: int) -> None:
        self.flip_fixit(sample_id)

    @work(thread=True, group="labels", exit_on_error=False, description="fixit mark")
    def flip_fixit(self, sample_id: int) -> None:
        from ptxbench.tui.screens.dialogs import LabelChoice

        detail = self._read_detail(sample_id)
        if detail is None:
            return
        label = detail.label
        choice = LabelChoice(label.category if label else None, label.note if label else "",
                             not (label.fixit_candidate if label else False))
        self._write_label(sample_id, choice, "fixit on" if choice.fixit else "fixit off")

    @work(thread=True, group="labels", exit_on_error=False, description="save label")
    def save_label(self, sample_id: int, choice, what: str) -> None:  # noqa: ANN001 - dialogs.LabelChoice
        self._write_label(sample_id, choice, what)

    def _write_label(self, sample_id: int, choice, what: str) -> None:  # noqa: ANN001 - dialogs.LabelChoice
        """In a worker thread: one new row in `labels`; nothing else changes."""
        from ptxbench.db.records import Label
        from ptxbench.db.store import open_store
        from ptxbench.db.writes import add_label

        try:
            db = open_store(self.db_path, migrate=False)
            try:
                add_label(db, Label(sample_id=sample_id, author=_author(), category=choice.category,
                                    note=choice.note, fixit_candidate=choice.fixit))
            finally:
                db.conn.close()
        except Exception as exc:  # noqa: BLE001
            self.post_message(StoreFailed(f"label not saved: {exc}"))
            return
        self.post_message(LabelSaved(sample_id, what))

    def on_label_saved(self, message: LabelSaved) -> None:
        self.notify(f"Sample {message.sample_id}: {message.what} saved.")
        self.reload_store()


def _author() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in some containers
        return "unknown"


