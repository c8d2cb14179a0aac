"""ptxbench-tui: the explorer over a PTXBench store.

Top-level views are `App.MODES` switched by number keys; a sample, a diff
and the dialogs are screens pushed on top. All keys come from keys.py.
"""

from __future__ import annotations

import argparse
import getpass
import shlex
import sys
from pathlib import Path

from textual import work
from textual.app import App
from textual.reactive import reactive

from ptxbench.db import browse
from ptxbench.db.store import StoreError
from ptxbench.themes.ptxbench import DEFAULT_THEME, THEMES
from ptxbench.tui import keys
from ptxbench.tui.commands import BindingCommands
from ptxbench.tui.config import Config, default_engine_cmd, load_keymap
from ptxbench.tui.messages import (
    CellsLoaded, LabelSaved, Reverify, ShowDiff, ShowSample, ShowSamples, StoreFailed,
)
from ptxbench.tui.screens.compare import CompareScreen
from ptxbench.tui.screens.dialogs import HelpScreen, LabelChoice, LabelDialog
from ptxbench.tui.screens.diff import DiffScreen
from ptxbench.tui.screens.live import LiveScreen
from ptxbench.tui.screens.overview import OverviewScreen
from ptxbench.tui.screens.plots import PlotsScreen
from ptxbench.tui.screens.sample import SampleScreen
from ptxbench.tui.screens.samples import SamplesScreen
from ptxbench.tui.screens.tasks import TasksScreen
from ptxbench.tui.screens.triage import TriageScreen

EXIT_STORE = 2


def _css_path() -> Path:
    import ptxbench.themes

    return Path(ptxbench.themes.__file__).resolve().parent / "ptxbench.tcss"


class PtxbenchApp(App[int]):
    TITLE = "PTXBench"
    CSS_PATH = _css_path()
    SCREENS = {
        "overview": OverviewScreen,
        "tasks": TasksScreen,
        "samples": SamplesScreen,
        "triage": TriageScreen,
        "compare": CompareScreen,
        "live": LiveScreen,
        "plots": PlotsScreen,
    }
    MODES = {name: name for name in SCREENS}
    DEFAULT_MODE = "overview"
    BINDINGS = keys.bindings("app")
    COMMANDS = App.COMMANDS | {BindingCommands}

    data_version: reactive[int] = reactive(0)

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.db_path = Path(config.db_path)
        self.engine_cmd = list(config.engine_cmd)
        self.gpu_lock_dir = config.gpu_lock_dir or self.db_path.parent
        self.cells: list[browse.Cell] | None = None
        self.facets: browse.Facets | None = None
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
    def load_cells(self) -> None:
        try:
            conn = browse.connect(self.db_path, cached=False)
            try:
                cells = browse.cells(conn)
                facets = browse.facets(conn)
            finally:
                conn.close()
        except Exception as exc:  # noqa: BLE001 - a store that breaks while open is reported, not fatal
            self.post_message(StoreFailed(str(exc)))
            return
        self.post_message(CellsLoaded(cells, facets))

    def on_cells_loaded(self, message: CellsLoaded) -> None:
        self.cells = message.cells
        self.facets = message.facets
        self.data_version += 1

    def on_store_failed(self, message: StoreFailed) -> None:
        self.notify(message.error, title="Store", severity="error", timeout=8)

    # -- navigation --------------------------------------------------------------------
    async def on_show_samples(self, message: ShowSamples) -> None:
        await self.switch_mode("samples")
        screen = self.get_screen("samples")
        assert isinstance(screen, SamplesScreen)
        while self.screen is not screen:
            self.pop_screen()
        screen.apply_filter(message.filter)

    def on_show_sample(self, message: ShowSample) -> None:
        self.push_screen(SampleScreen(message.sample_id))

    def on_show_diff(self, message: ShowDiff) -> None:
        self.push_screen(DiffScreen(message.left, message.right))

    async def on_reverify(self, message: Reverify) -> None:
        await self.switch_mode("live")
        screen = self.get_screen("live")
        assert isinstance(screen, LiveScreen)
        screen.enqueue(message.sample_ids, start=True)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    # -- labels (a person's triage, beside the automatic category) -------------------------
    def ask_label(self, sample_id: int) -> None:
        self.load_label_context(sample_id)

    @work(thread=True, group="labels", exit_on_error=False, description="current label")
    def load_label_context(self, sample_id: int) -> None:
        try:
            detail = browse.sample_detail(browse.connect(self.db_path), sample_id)
        except Exception as exc:  # noqa: BLE001
            self.post_message(StoreFailed(str(exc)))
            return
        if detail is None:
            self.post_message(StoreFailed(f"no sample {sample_id}"))
            return
        self.call_from_thread(self._open_label_dialog, detail)

    def _open_label_dialog(self, detail: browse.SampleDetail) -> None:
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
        try:
            detail = browse.sample_detail(browse.connect(self.db_path), sample_id)
        except Exception as exc:  # noqa: BLE001
            self.post_message(StoreFailed(str(exc)))
            return
        if detail is None:
            self.post_message(StoreFailed(f"no sample {sample_id}"))
            return
        label = detail.label
        choice = LabelChoice(label.category if label else None, label.note if label else "",
                             not (label.fixit_candidate if label else False))
        self._write_label(sample_id, choice, "fixit on" if choice.fixit else "fixit off")

    @work(thread=True, group="labels", exit_on_error=False, description="save label")
    def save_label(self, sample_id: int, choice: LabelChoice, what: str) -> None:
        self._write_label(sample_id, choice, what)

    def _write_label(self, sample_id: int, choice: LabelChoice, what: str) -> None:
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


def make_app(
    db_path: str | Path,
    engine_cmd: list[str] | None = None,
    theme: str | None = None,
    keymap: dict[str, str] | None = None,
    gpu_lock_dir: Path | None = None,
) -> PtxbenchApp:
    """The app over an existing store; tests hand in a small store and an engine command."""
    return PtxbenchApp(
        Config(
            db_path=Path(db_path),
            engine_cmd=list(engine_cmd) if engine_cmd else default_engine_cmd(),
            theme=theme or DEFAULT_THEME,
            keymap=keymap or {},
            gpu_lock_dir=gpu_lock_dir,
        )
    )


def prepare_store(db: str | None) -> Path:
    """The store to open, migrated (after a backup) when it is older; the default
    store is created and seeded on first start. StoreError says what is wrong."""
    from ptxbench.db.store import open_store

    if db is None:
        from ptxbench.db.seed import ensure_default_store
        from ptxbench.db.store import default_store_path

        path = default_store_path()
        handle = ensure_default_store(path)
    else:
        path = Path(db).expanduser()
        if not path.exists():
            raise StoreError(f"no store at {path} (leave out --db to use the default store)")
        handle = open_store(path, timeout=2.0)
    try:
        # Read what the explorer reads first, so a damaged file fails here, with a message.
        handle.execute("SELECT COUNT(*) FROM samples").fetchone()
        handle.execute("SELECT COUNT(*) FROM evaluations").fetchone()
    except Exception as exc:  # noqa: BLE001
        raise StoreError(f"the store {path} cannot be read: {exc}") from None
    finally:
        handle.conn.close()
    return path.resolve()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ptxbench-tui", description="Explore a PTXBench store.")
    parser.add_argument("--db", metavar="PATH", help="the store to open (default: the default store, created and seeded on first start)")
    parser.add_argument("--theme", metavar="NAME", default=DEFAULT_THEME, help="ptxbench, ptxbench-light or any Textual theme")
    parser.add_argument("--engine", metavar="CMD", help="the engine command for Live (default: ptxbench eval)")
    parser.add_argument("--serve", action="store_true", help="serve the explorer in a browser (textual-serve)")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port to serve on (default 8000)")
    return parser.parse_args(argv)


def serve(args: argparse.Namespace, path: Path) -> int:
    try:
        from textual_serve.server import Server
    except ImportError:
        print("ptxbench-tui: --serve needs textual-serve (pip install 'ptxbench[serve]')", file=sys.stderr)
        return EXIT_STORE
    command = [sys.executable, "-m", "ptxbench.tui.app", "--db", str(path), "--theme", args.theme]
    if args.engine:
        command += ["--engine", args.engine]
    server = Server(shlex.join(command), host=args.host, port=args.port, title="PTXBench")
    server.serve()
    return 0


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        path = prepare_store(args.db)
    except StoreError as exc:
        print(f"ptxbench-tui: {exc}", file=sys.stderr)
        sys.exit(EXIT_STORE)
    if args.serve:
        sys.exit(serve(args, path))
    themes = {t.name for t in THEMES}
    app = make_app(path, shlex.split(args.engine) if args.engine else None, args.theme, load_keymap())
    if args.theme not in themes and args.theme not in app.available_themes:
        print(f"ptxbench-tui: unknown theme {args.theme!r}; using {DEFAULT_THEME}", file=sys.stderr)
    app.run()
    sys.exit(app.return_code or 0)


if __name__ == "__main__":
    main()
