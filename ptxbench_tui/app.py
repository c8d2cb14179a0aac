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
from ptxbench.engine.inert import inert

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
    parser.add_argument("--serve", action="store_true",
                        help="serve the explorer in a browser (textual-serve): open the address it prints, "
                             "whose token is new at each start")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port to serve on (default 8000)")
    return parser.parse_args(argv)


LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def make_server(command: str, host: str, port: int, token: str | None = None):  # -> textual_serve Server
    """textual-serve's Server, guarded: the page answers only with the start's token (`/?token=…`),
    and the WebSocket that drives the explorer is accepted only at `/ws/<token>` and only from the
    page's own origin. A browser sends Origin on every WebSocket handshake and no page can forge
    it, so another site cannot drive the explorer even from the person's own browser; a handshake
    without Origin (not a browser's) is refused too, for none is needed. The Host header must name
    this server (when bound to an address rather than to every interface), which keeps a
    DNS-rebound name from reaching it. Raises ImportError without textual-serve."""
    import hmac
    import logging
    import secrets

    from aiohttp import web
    from textual_serve.server import Server
    from yarl import URL

    token = token or secrets.token_urlsafe(32)
    names = None if host in WILDCARD_HOSTS else ({host.lower()} | (LOOPBACK_NAMES if host in LOOPBACK_NAMES else set()))

    def same_token(given: str | None) -> bool:
        try:
            return given is not None and hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))
        except (UnicodeError, TypeError):
            return False

    def origin_of(url: str) -> tuple[str, str, int] | None:
        try:
            parsed = URL(url)
        except (ValueError, TypeError):
            return None
        if parsed.scheme not in ("http", "https") or not parsed.host or parsed.port is None:
            return None
        return parsed.scheme, parsed.host.lower().strip("[]"), parsed.port

    def own_origin(request: web.Request) -> tuple[str, str, int] | None:
        """The page's scheme://host:port as the browser reached it, when that names this server."""
        found = origin_of(f"{request.scheme}://{request.host}")
        if found is None or found[2] != port or (names is not None and found[1] not in names):
            return None
        return found

    @web.middleware
    async def only_this_host(request: web.Request, handler):
        if own_origin(request) is None:
            raise web.HTTPForbidden(text="this server answers only at the address it printed")
        return await handler(request)

    class GuardedServer(Server):
        token: str

        def initialize_logging(self) -> None:
            super().initialize_logging()
            logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # its lines would show the token

        async def on_startup(self, app: web.Application) -> None:
            pass  # the address is said once the socket listens (serve)

        def serve(self, debug: bool = False) -> None:
            self.debug = debug
            self.initialize_logging()
            # run_app calls `print` once its socket listens: the address printed then opens at once.
            web.run_app(self._make_app(), host=self.host, port=self.port, handle_signals=True,
                        print=lambda *_: self.announce())

        def announce(self) -> None:
            print(f"Serving the PTXBench explorer at {self.url}", flush=True)
            print("Open that address (the token is new at each start); press Ctrl+C to stop.", flush=True)

        @property
        def url(self) -> str:
            return f"{self.public_url}/?token={self.token}"

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(only_this_host)
            app.router.add_get("/ws/{token}", self.handle_websocket)
            return app

        async def handle_index(self, request: web.Request) -> web.StreamResponse:
            import aiohttp_jinja2

            if not same_token(request.query.get("token")):
                raise web.HTTPForbidden(text="open the address the server printed at its start (it has the token)")
            try:
                font_size = min(64, max(6, int(request.query.get("fontsize", "16"))))
            except ValueError:
                font_size = 16
            scheme = "wss" if request.scheme == "https" else "ws"
            context = {
                "font_size": font_size,
                "app_websocket_url": f"{scheme}://{request.host}/ws/{self.token}",  # same origin as the page
                "config": {"static": {"url": "/static/"}},
                "application": {"name": self.title},
            }
            response = aiohttp_jinja2.render_template("app_index.html", request, context)
            response.headers["Referrer-Policy"] = "no-referrer"  # the address has the token
            return response

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            if not same_token(request.match_info.get("token")):
                raise web.HTTPForbidden(text="no or wrong token")
            origin = request.headers.get("Origin")
            if origin is None or origin_of(origin) != own_origin(request):
                raise web.HTTPForbidden(text="a WebSocket from another origin, or without one, is refused")
            return await super().handle_websocket(request)

    server = GuardedServer(command, host=host, port=port, title="PTXBench",
                           public_url=f"http://{_url_host(host)}:{port}")
    server.token = token
    return server


def serve(args: argparse.Namespace, path: Path) -> int:
    try:
        import textual_serve.server  # noqa: F401
    except ImportError:
        print("ptxbench-tui: --serve needs textual-serve, one of ptxbench's own dependencies: "
              "reinstall ptxbench (pip install ptxbench) in this environment", file=sys.stderr)
        return EXIT_STORE
    command = [sys.executable, "-m", "ptxbench.tui.app", "--db", str(path), "--theme", args.theme]
    if args.engine:
        command += ["--engine", args.engine]
    make_server(shlex.join(command), args.host, args.port).serve()
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
        print(f"{prog}: error: {inert(exc)}", file=sys.stderr)
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
        print(f"{prog}: label not saved, {inert(item.describe())}", file=sys.stderr)
    sys.exit(app.return_code or 0)


if __name__ == "__main__":
    main()
