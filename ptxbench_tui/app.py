"""ptxbench-tui: the explorer over a PTXBench store (command line and app factory).

This module stays light: the store is opened and its summary query started
in a thread before Textual and the views are imported, so the query and the
imports overlap and the overview paints sooner.

The store a person names is checked and migrated once, before any
connection of this process exists (db/reader.py `prepare_store`); from then
on one StoreReader owns every connection and is handed to the app.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ptxbench.db.reader import StoreReader
from ptxbench.db.store import StoreError

DEFAULT_THEME = "ptxbench"  # themes/ptxbench.py; not imported here, it pulls in Textual

if TYPE_CHECKING:
    from ptxbench.db.browse_summary import Cell, Facets
    from ptxbench.tui.application import PtxbenchApp

EXIT_STORE = 2
EXIT_USAGE = 2  # argparse's code for a bad command line


class Prefetch:
    """The overview's summary of the store, from a thread started before Textual loads.

    A summary saved by an earlier start (summary_cache.py) is offered when the
    store has not changed; the app then re-reads it after the first paint."""

    def __init__(self, reader: StoreReader) -> None:
        self.reader = reader
        self.cached: tuple | None = None
        self.fresh: tuple | None = None
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._run, name="ptxbench-prefetch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from ptxbench.tui import summary_cache

        try:
            self.cached = summary_cache.cached(self.reader)
            if self.cached is None:
                self.fresh = summary_cache.compute(self.reader)
        except Exception as exc:  # handed to the app, which shows it
            self.error = exc

    def take(self) -> tuple[tuple[list[Cell], Facets], bool]:
        """(summary, whether it is the saved one): the app re-reads a saved one after the first paint."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        if self.cached is not None:
            return self.cached, True
        assert self.fresh is not None
        return self.fresh, False


def make_app(
    db_path: str | Path,
    engine_cmd: list[str] | None = None,
    theme: str | None = None,
    keymap: dict[str, str] | None = None,
    gpu_lock_dir: Path | None = None,
    prefetch: Prefetch | None = None,
    reader: StoreReader | None = None,
) -> "PtxbenchApp":
    """The app over an existing store; tests hand in a small store and an engine command.
    `reader` (made from `db_path` when not given) is the app's only way into the store."""
    from ptxbench.tui.application import PtxbenchApp
    from ptxbench.services.batch_process import default_engine_cmd
    from ptxbench.tui.config import Config

    return PtxbenchApp(
        Config(
            db_path=Path(db_path),
            engine_cmd=list(engine_cmd) if engine_cmd else default_engine_cmd(),
            theme=theme or DEFAULT_THEME,
            keymap=keymap or {},
            gpu_lock_dir=gpu_lock_dir,
        ),
        reader=reader or (prefetch.reader if prefetch else None),
        prefetch=prefetch,
    )


def prepare_store(db: str | None) -> Path:
    """The store to open, migrated (after a backup) when it is older and writable; the
    default store is created and seeded on first start. A missing, empty, foreign or
    damaged file is a StoreError that says what is wrong."""
    from ptxbench.db.reader import prepare_store as prepare

    if db is None:
        from ptxbench.db.access import store_access
        from ptxbench.db.seed import ensure_default_store
        from ptxbench.db.store import default_store_path

        path = default_store_path()
        if not path.exists() or store_access(path).writable:  # a read-only one is read as it is, unseeded
            ensure_default_store(path).conn.close()
    else:
        path = Path(db).expanduser()
        if not path.exists():
            raise StoreError(f"no store at {path} (leave out --db to use the default store)")
    prepare(path)
    return path.resolve()


def parse_args(argv: list[str] | None = None, prog: str = "ptxbench-tui") -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description="Explore a PTXBench store.")
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
        print("ptxbench-tui: --serve needs textual-serve, one of ptxbench's own dependencies: "
              "reinstall ptxbench (pip install ptxbench) in this environment", file=sys.stderr)
        return EXIT_STORE
    command = [sys.executable, "-m", "ptxbench.tui.app", "--db", str(path), "--theme", args.theme]
    if args.engine:
        command += ["--engine", args.engine]
    server = Server(shlex.join(command), host=args.host, port=args.port, title="PTXBench")
    server.serve()
    return 0


def create_app(args: argparse.Namespace, path: Path) -> "PtxbenchApp":
    """The app for a prepared store, its summary query already running."""
    prefetch = Prefetch(StoreReader(path))  # before Textual is imported: the query and the imports overlap
    from ptxbench.tui.config import load_keymap

    app = make_app(path, shlex.split(args.engine) if args.engine else None, args.theme, load_keymap(), prefetch=prefetch)
    if args.theme not in app.available_themes:
        print(f"ptxbench-tui: unknown theme {args.theme!r}; using {DEFAULT_THEME}", file=sys.stderr)
    return app


def no_terminal() -> str | None:
    """Why the explorer cannot take keys here, or None. Textual's terminal driver polls
    standard input; at end of file (`< /dev/null`, a closed pipe) that poll returns at once,
    for ever, and the explorer would spin a core doing nothing."""
    if os.environ.get("TEXTUAL_DRIVER"):
        return None  # another driver (textual-serve's web driver) brings its own input
    if sys.stdin is None or not sys.stdin.isatty():
        return "standard input is not a terminal, and the explorer reads its keys there; run it in a terminal (or use --serve)"
    return None


def main(argv: list[str] | None = None, prog: str = "ptxbench-tui") -> None:
    """`ptxbench-tui` and `ptxbench tui`: `prog` names the command in its messages."""
    args = parse_args(argv, prog)
    try:
        path = prepare_store(args.db)
    except StoreError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_STORE)
    why = None if args.serve else no_terminal()
    if why:
        print(f"{prog}: error: {why}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    if args.serve:
        sys.exit(serve(args, path))
    app = create_app(args, path)
    app.run()
    for item in app.unsaved:  # the person chose to quit without them: the text is not lost
        print(f"{prog}: label not saved, {item.describe()}", file=sys.stderr)
    sys.exit(app.return_code or 0)


if __name__ == "__main__":
    main()
