"""The explorer's App: top-level views are `App.MODES` switched by number keys;
a sample, a diff and the dialogs are screens pushed on top. All keys come
from keys.py.

The store is reached only through the `StoreReader` handed in (db/reader.py):
every view reads through `app.reader.read(...)`, the labels are written
through it (labelling.py), and what is wrong with the store (damaged,
read-only, labels waiting for a locked store) stays said in each view's
StoreBanner."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from textual import work
from textual.app import App
from textual.filter import LineFilter
from textual.notifications import SeverityLevel
from textual.reactive import reactive

from ptxbench.db import browse_summary as summary
from ptxbench.db import verdict
from ptxbench.db.reader import StoreReader
from ptxbench.engine.inert import inert
from ptxbench.themes.ptxbench import DEFAULT_THEME, THEMES
from ptxbench.tui import keys
from ptxbench.tui.commands import BindingCommands
from ptxbench.tui.config import Config
from ptxbench.tui.labelling import Labelling
from ptxbench.tui.messages import (
    CellsLoaded, Reverify, ShowDiff, ShowSample, ShowSamples, StepUnlabelled, StoreFailed,
)
from ptxbench.tui.screens.overview import OverviewScreen
from ptxbench.tui.untrusted import InertLines

if TYPE_CHECKING:
    from ptxbench.tui.screens.live import LiveScreen
    from ptxbench.tui.screens.samples import SamplesScreen


def _lazy(module: str, name: str):
    """A screen factory that imports its view on first use (startup imports only the overview)."""

    def make():
        import importlib

        return getattr(importlib.import_module(f"ptxbench.tui.screens.{module}"), name)()

    return make


def _css_path() -> Path:
    import ptxbench.themes

    return Path(ptxbench.themes.__file__).resolve().parent / "ptxbench.tcss"


class PtxbenchApp(Labelling, App[int]):
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
    # Below 120 columns a screen is `-narrow`: the Fixit statistics fold away.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = keys.bindings("app")
    COMMANDS = App.COMMANDS | {BindingCommands}

    data_version: reactive[int] = reactive(0)
    # (text, is it an error): what StoreBanner shows above every view; "" hides it.
    store_notice: reactive[tuple[str, bool]] = reactive(("", False))

    def __init__(self, config: Config, reader: StoreReader | None = None, prefetch=None) -> None:
        super().__init__()
        self._prefetch = prefetch
        self.config = config
        self.reader = reader or StoreReader(config.db_path)
        self.db_path = self.reader.path  # named in the view bar and handed to the engine process
        self.engine_cmd = list(config.engine_cmd)
        self.gpu_lock_dir = config.gpu_lock_dir or self.db_path.parent
        self.cells: list[summary.Cell] | None = None
        self.facets: summary.Facets | None = None
        for theme in THEMES:
            self.register_theme(theme)
        self.theme = config.theme if config.theme in self.available_themes else DEFAULT_THEME
        if config.keymap:
            self.set_keymap(config.keymap)

    _inert_lines = InertLines()

    def get_line_filters(self) -> Sequence[LineFilter]:
        """Textual's filters, then one that keeps control characters from the terminal: text the
        explorer did not write is made inert where it is shown, and this catches what was missed."""
        return [*super().get_line_filters(), self._inert_lines]

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """A toast's text is plain: its messages quote store errors and sample text (`markup` is
        accepted and ignored, so that no caller can turn it back on)."""
        super().notify(inert(message), title=inert(title), severity=severity, timeout=timeout, markup=False)

    def on_mount(self) -> None:
        self.update_notice()
        self.reload_store()
        self.call_after_refresh(self.check_store)

    def on_unmount(self) -> None:
        self.reader.close()

    # -- store -------------------------------------------------------------------------
    def reload_store(self) -> None:
        self.load_cells()

    @property
    def writable(self) -> bool:
        return self.reader.writable

    def can_write(self, what: str) -> bool:
        """True on a writable store; else say why `what` cannot happen here."""
        if self.reader.writable:
            return True
        self.notify(f"This store is read-only ({self.reader.readonly_reason}), so {what} is off here.",
                    title="Read-only", severity="warning")
        return False

    def update_notice(self) -> None:
        """What StoreBanner says: damage first, then unsaved labels, then read-only."""
        if self.reader.damage:
            self.store_notice = (f"Damaged store: {self.reader.damage}", True)
        elif self.unsaved:
            self.store_notice = (self.unsaved_notice(), True)
        elif not self.reader.writable:
            self.store_notice = (f"Read-only: {self.reader.readonly_reason}. "
                                 "Labels, Fixit marks and re-verifying are off; everything else works.", False)
        else:
            self.store_notice = ("", False)

    @work(thread=True, exclusive=True, group="integrity", exit_on_error=False, description="integrity check")
    def check_store(self) -> None:
        """SQLite's quick check over the whole file (0.4 s for 300 MB), so a store damaged
        where the first views do not read says so at once."""
        try:
            self.reader.check()
        except Exception as exc:  # reported, never fatal
            self.post_message(StoreFailed(str(exc)))

    def action_toggle_newest(self) -> None:
        self.reader.newest_evaluation = not self.reader.newest_evaluation
        self.notify(f"Each sample now speaks through its {verdict.describe(self.reader.newest_evaluation)}.")
        self.reload_store()

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
                (cells, facets), saved = prefetch.take()
                self.post_message(CellsLoaded(cells, facets, saved=saved))
                return
            self.post_message(CellsLoaded(*summary_cache.compute(self.reader), recheck=recheck))
        except Exception as exc:  # a store that breaks while open is reported, not fatal
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
        if self.reader.damage:
            # Said once as a toast; the banner keeps saying it.
            if self.store_notice[0] != f"Damaged store: {self.reader.damage}":
                self.notify(self.reader.damage, title="Damaged store", severity="error", timeout=8)
            self.update_notice()
            return
        self.notify(message.error, title="Store", severity="error", timeout=8)

    # -- navigation --------------------------------------------------------------------
    async def on_show_samples(self, message: ShowSamples) -> None:
        await self.switch_mode("samples")
        screen = cast("SamplesScreen", self.get_screen("samples"))
        while self.screen is not screen:
            self.pop_screen()
        screen.apply_filter(message.filter)

    def on_show_sample(self, message: ShowSample) -> None:
        from ptxbench.tui.screens.sample import SampleScreen

        self.push_screen(SampleScreen(message.sample_id, line=message.line))

    async def on_step_unlabelled(self, message: StepUnlabelled) -> None:
        """`n`/`p` on a sample's screen: the samples table finds the next one and opens it in its place."""
        from ptxbench.tui.screens.sample import SampleScreen

        if isinstance(self.screen, SampleScreen):
            self.pop_screen()
        if self.current_mode != "samples":
            await self.switch_mode("samples")
        cast("SamplesScreen", self.get_screen("samples")).step(backwards=message.backwards, from_sample=message.sample_id, open_it=True)

    def ask_labels(self, sample_ids: list[int]) -> None:
        """One label for several selected samples: each gets its own row in `labels` (labelling.py)."""
        from ptxbench.tui.screens.bulk_label import BulkLabelDialog

        if not self.can_write("labels"):
            return

        def saved(choice) -> None:
            if choice is None:
                return
            for i, sid in enumerate(sample_ids):
                # One message for the lot, when the last is in the store.
                what = f"the label of {len(sample_ids)} samples" if i == len(sample_ids) - 1 else ""
                self.save_label(sid, choice.category, choice.note, choice.fixit, what)

        self.push_screen(BulkLabelDialog(sample_ids), saved)

    def on_show_diff(self, message: ShowDiff) -> None:
        from ptxbench.tui.screens.diff import DiffScreen

        self.push_screen(DiffScreen(message.left, message.right, target=message.target))

    async def on_reverify(self, message: Reverify) -> None:
        """Re-verify in Live; more than one sample is said and asked first."""
        if not self.can_write("re-verifying"):
            return
        ids = message.sample_ids
        if len(ids) <= 1:
            await self.start_reverify(ids)
            return
        from ptxbench.tui.screens.dialogs import ConfirmDialog

        more = ""
        if message.selected and message.selected > len(ids):
            more = f" The filter selects {message.selected:,}; the newest {len(ids):,} are queued."
        question = (f"Re-verify {len(ids):,} samples?{more}\n\nThe engine judges them one after another in the Live "
                    "view (x cancels); each result is a new evaluation beside the old ones.")

        def answered(yes: bool | None) -> None:
            if yes:
                self.call_later(self.start_reverify, ids)

        self.push_screen(ConfirmDialog(question, yes=f"Start {len(ids):,}"), answered)

    async def start_reverify(self, ids: list[int]) -> None:
        await self.switch_mode("live")
        screen = cast("LiveScreen", self.get_screen("live"))
        screen.enqueue(ids, start=True)

    def action_agent_steps(self) -> None:
        """`A`: on a sample made by an agent, its episode step by step; anywhere else, every episode."""
        from ptxbench.tui.screens.sample import SampleScreen

        if isinstance(self.screen, SampleScreen):
            self.open_episode_of(self.screen.sample_id)
            return
        from ptxbench.tui.screens.agents import AgentEpisodesScreen

        self.push_screen(AgentEpisodesScreen())

    @work(thread=True, exclusive=True, group="episode-of", exit_on_error=False, description="agent episode")
    def open_episode_of(self, sample_id: int) -> None:
        from ptxbench.db.trajectories import episode_for_sample
        from ptxbench.tui.screens.agents import AgentStepsScreen

        try:
            episode = self.reader.read(episode_for_sample, sample_id)
        except Exception as exc:  # reported, never fatal
            self.post_message(StoreFailed(str(exc)))
            return
        if episode is None:
            self.call_from_thread(self.notify, f"Sample {sample_id} was not made by an agent episode.")
        else:
            self.call_from_thread(self.push_screen, AgentStepsScreen(episode.id))  # type: ignore[arg-type]

    def action_help(self) -> None:
        from ptxbench.tui.screens.dialogs import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))
