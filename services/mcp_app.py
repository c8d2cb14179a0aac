"""`ptxbench mcp` on the SDK: the tools' schemas, each transport's session, the HTTP front, the signals.

The server's state (settings, sessions, what each tool does) is services/mcp_server.py; this module
binds it to the official `mcp` package and is imported only when a server is built.

Session keys come from the transport: `stdio` (one client), `http:<Mcp-Session-Id>`, `sse:<session_id>`.
The end of an HTTP or SSE session is read from the SDK's per-connection teardown (mcp 2.3.0 keeps
the connection on a private attribute of its session object: the pin holds it there). Over HTTP a
front (`_Gate`) checks the bearer token, refuses the stateless 2026-07-28 protocol (no session to
belong to; the SDK's clients then use the handshake), and ends at once a session its client DELETEs.
A stop signal interrupts every open episode before the process ends by that signal.
"""

# No `from __future__ import annotations`: the SDK reads the tools' signatures, whose annotations
# name `Context` from inside build_server, so they must be evaluated where they are written.
import hmac
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ptxbench.services.errors import UsageError
from ptxbench.services.mcp_server import (
    CLOSED,
    HOST,
    SERVER_NAME,
    SHUTDOWN_GRACE_S,
    TRANSPORTS,
    Judge,
    McpSettings,
    Session,
    server_version,
)


# -- the transport's session -------------------------------------------------------------------------


def _session_key(ctx: Any) -> tuple[str, Any]:
    """(key, connection) of the request's session: `stdio`, `http:<Mcp-Session-Id>` or `sse:<session_id>`.
    The connection is the SDK's per-session object, whose teardown tells the session ended."""
    rc = ctx.request_context
    connection = getattr(rc.session, "_connection", None)  # mcp 2.3.0 keeps no public handle on it
    request = rc.request
    if request is None:
        return "stdio", None
    headers = getattr(request, "headers", None) or {}
    sid = headers.get("mcp-session-id")
    if sid:
        return f"http:{sid}", connection
    query = getattr(request, "query_params", None) or {}
    sid = query.get("session_id")
    if sid:
        return f"sse:{sid}", connection
    raise UsageError("this server keeps a session per client: connect with the initialize handshake")


def _client_name(ctx: Any) -> str | None:
    try:
        params = ctx.session.client_params
        info = params.client_info if params is not None else None
        return str(info.name) if info is not None and info.name else None
    except (AttributeError, LookupError, RuntimeError):  # a client that sent nothing about itself
        return None


def build_server(settings: McpSettings, judge: Judge | None = None) -> Any:
    """The MCPServer with the tools bound to a Judge over the store. Raises ImportError without `mcp`."""
    from typing import Annotated, Literal

    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations
    from pydantic import Field

    judge = judge or Judge(settings)

    @asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[Judge]:
        # Entered per connection on SSE: sessions are closed by their own connections and by serve().
        yield judge

    server = MCPServer(
        SERVER_NAME,
        version=server_version(),
        instructions=(
            "PTXBench judges GPU kernels written in architecture-specific PTX. list_tasks and describe_task "
            "say what to write. Each task has a workspace file: write_file, edit_file and apply_patch change it, "
            "read_file shows it; assemble, check and time judge it as you work; submit hands it in as the final "
            "kernel for the task (judged in full; the episode ends)."
        ),
        lifespan=lifespan,
        log_level="WARNING",
    )

    def session_of(ctx: Context) -> Session:
        key, connection = _session_key(ctx)
        fresh = key not in judge.sessions
        session = judge.session(key, _client_name(ctx))
        if fresh and connection is not None and key != "stdio":
            connection.exit_stack.push_async_callback(judge.connection_closed, key)
        return session

    async def episode_call(ctx: Context, name: str, task: str, arguments: dict[str, Any]) -> dict[str, Any]:
        async def progress(elapsed: float, message: str) -> None:
            await ctx.report_progress(elapsed, None, message)

        try:
            return await judge.call(session_of(ctx), name, task, arguments, progress)
        except UsageError as exc:
            raise ToolError(str(exc)) from None

    def candidate(code: str | None, language: str | None, manifest: dict[str, Any] | None) -> dict[str, Any]:
        given = {"code": code, "language": language, "manifest": manifest}
        return {k: v for k, v in given.items() if v is not None}

    Task = Annotated[str, Field(description="The task's id, as list_tasks names it.")]
    Code = Annotated[
        str | None,
        Field(
            description="The whole kernel: a PTX module, or CUDA C++ device code with inline PTX. Left out: the "
            "task's workspace file as it is. Given: it is written to the file first."
        ),
    ]
    Language = Annotated[
        Literal["ptx", "cuda"] | None,
        Field(description="ptx or cuda. Left out: ptx with `code`, else the file's language."),
    ]
    Manifest = Annotated[
        dict[str, Any] | None,
        Field(
            description="The launch manifest (launches, scratch, tensor maps) when the task's default launch "
            "does not fit. Left out: the default launch with `code`, else the file's manifest."
        ),
    ]
    reading = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
    judging = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
    editing = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)

    @server.tool(
        annotations=reading, description="The tasks this server judges: id, title, arch, requested families, GPU here."
    )
    def list_tasks() -> list[dict[str, Any]]:
        return judge.list_tasks()

    @server.tool(
        annotations=reading,
        description="A task's prompt: what to compute, the interface, train sizes, the candidate format, "
        "and how the tools work.",
    )
    def describe_task(task: Task) -> str:
        try:
            return judge.describe_task(task)
        except UsageError as exc:
            raise ToolError(str(exc)) from None

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
        description="Write the whole kernel into the task's workspace file (replacing it), with its "
        "language and launch manifest.",
    )
    async def write_file(
        task: Task,
        code: Annotated[str, Field(description="The whole kernel; it replaces the file.")],
        ctx: Context,
        language: Language = None,
        manifest: Annotated[
            dict[str, Any] | None, Field(description="The launch manifest; left out: the default.")
        ] = None,
    ) -> dict[str, Any]:
        return await episode_call(ctx, "write_file", task, candidate(code, language, manifest))

    @server.tool(
        annotations=editing,
        description="Replace one exact span of the task's workspace file: `old` must occur in it once.",
    )
    async def edit_file(
        task: Task,
        old: Annotated[str, Field(description="Text that occurs exactly once in the file, whitespace included.")],
        new: Annotated[str, Field(description="The text that takes its place (empty to delete it).")],
        ctx: Context,
    ) -> dict[str, Any]:
        return await episode_call(ctx, "edit_file", task, {"old": old, "new": new})

    @server.tool(
        annotations=editing,
        description="Apply a unified diff (@@ hunks) to the task's workspace file; all hunks or none.",
    )
    async def apply_patch(
        task: Task,
        patch: Annotated[
            str, Field(description="A unified diff of the file whose context and removed lines match it.")
        ],
        ctx: Context,
    ) -> dict[str, Any]:
        return await episode_call(ctx, "apply_patch", task, {"patch": patch})

    @server.tool(annotations=reading, description="Show lines of the task's workspace file, numbered (400 at most).")
    async def read_file(
        task: Task,
        ctx: Context,
        start_line: Annotated[int | None, Field(ge=1, description="First line (1 when left out).")] = None,
        end_line: Annotated[int | None, Field(ge=1, description="Last line.")] = None,
    ) -> dict[str, Any]:
        args = {k: v for k, v in {"start_line": start_line, "end_line": end_line}.items() if v is not None}
        return await episode_call(ctx, "read_file", task, args)

    @server.tool(
        annotations=judging,
        description="Assemble the kernel for the task with ptxas and inspect it: messages, resources, "
        "requested families in the PTX and the machine code (runs nothing).",
    )
    async def assemble(
        task: Task, ctx: Context, code: Code = None, language: Language = None, manifest: Manifest = None
    ) -> dict[str, Any]:
        return await episode_call(ctx, "assemble", task, candidate(code, language, manifest))

    @server.tool(
        annotations=judging,
        description="Run and verify the kernel at the task's train sizes on the GPU: per size the error, "
        "how many elements are wrong and where the first is (no timing).",
    )
    async def check(
        task: Task, ctx: Context, code: Code = None, language: Language = None, manifest: Manifest = None
    ) -> dict[str, Any]:
        return await episode_call(ctx, "check", task, candidate(code, language, manifest))

    @server.tool(
        name="time",
        annotations=judging,
        description="Time the kernel at the headline size against the library (speedup, speed of light).",
    )
    async def time_kernel(
        task: Task, ctx: Context, code: Code = None, language: Language = None, manifest: Manifest = None
    ) -> dict[str, Any]:
        return await episode_call(ctx, "time", task, candidate(code, language, manifest))

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        ),
        description="Submit the kernel (the workspace file, or `code`) as the task's final kernel: judged "
        "in full; the task's episode ends.",
    )
    async def submit(
        task: Task, ctx: Context, code: Code = None, language: Language = None, manifest: Manifest = None
    ) -> dict[str, Any]:
        return await episode_call(ctx, "submit", task, candidate(code, language, manifest))

    return server


# -- serving -----------------------------------------------------------------------------------------


class _Gate:
    """The HTTP front: a bearer token when one is set, sessions only (a stateless 2026-07-28 request is
    refused, so the SDK's clients fall back to the initialize handshake), and a note of each session its
    client ends with DELETE (an ended session, not an expired one)."""

    def __init__(self, app: Any, judge: Judge, token: str | None) -> None:
        self.app, self.judge = app, judge
        self.token = token.encode() if token else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        headers = {k.lower(): v for k, v in scope.get("headers") or ()}
        if self.token is not None:
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, b"Bearer " + self.token):
                await _refuse(
                    send,
                    401,
                    "a bearer token is required (Authorization: Bearer …)",
                    {b"www-authenticate": b'Bearer realm="ptxbench"'},
                )
                return
        version = headers.get(b"mcp-protocol-version", b"").decode("latin-1")
        if version in MODERN_PROTOCOL_VERSIONS:
            await _refuse(
                send,
                400,
                "this server keeps a session per client: connect with the initialize handshake "
                "(protocol 2025-11-25 or earlier)",
            )
            return
        sid = headers.get(b"mcp-session-id")
        if scope.get("method") != "DELETE" or not sid:
            await self.app(scope, receive, send)
            return
        key = "http:" + sid.decode("latin-1")
        self.judge.ended_by_client.add(key)
        status: list[int] = []

        async def noting(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                status.append(int(message.get("status", 500)))
            await send(message)

        await self.app(scope, receive, noting)
        if status and status[0] < 300:  # the SDK ended the session: its episodes end now, not at its teardown
            self.judge.end_session(key, CLOSED)
        else:
            self.judge.ended_by_client.discard(key)


async def _refuse(send: Any, status: int, message: str, extra: dict[bytes, bytes] | None = None) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += list((extra or {}).items())
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _stopped_by(sig: int) -> str:
    return f"the server was stopped ({signal.Signals(sig).name})"


def serve(settings: McpSettings, transport: str = "stdio", port: int = 8765) -> None:
    """Run the server until the client goes away (stdio) or the process is stopped. A stop signal
    interrupts every open episode before the process ends by it."""
    if transport not in TRANSPORTS:
        raise UsageError(f"--transport: use {', '.join(TRANSPORTS)}")
    if settings.auth_token is not None and transport == "stdio":
        raise UsageError("--auth-token-env is for the HTTP transports (a stdio server has one client, its parent)")
    judge = Judge(settings)
    server = build_server(settings, judge)
    try:
        if transport == "stdio":
            import anyio

            anyio.run(_serve_stdio, server, judge)
        else:
            _serve_http(server, judge, transport, port)
    finally:
        judge.close()


async def _serve_stdio(server: Any, judge: Judge) -> None:
    import anyio

    async with anyio.create_task_group() as tg:

        async def on_signal() -> None:
            with anyio.open_signal_receiver(*_STOP_SIGNALS) as signals:
                async for sig in signals:
                    judge.stop(_stopped_by(sig))
                    # Ended as the signal asks, even while a thread still waits on stdin.
                    signal.signal(sig, signal.SIG_DFL)
                    signal.raise_signal(sig)

        tg.start_soon(on_signal)
        await server.run_stdio_async()
        tg.cancel_scope.cancel()


def _serve_http(server: Any, judge: Judge, transport: str, port: int) -> None:
    import uvicorn

    settings = judge.settings
    if transport == "streamable-http":
        app = server.streamable_http_app(session_idle_timeout=settings.session_idle_s, host=HOST)
    else:
        app = server.sse_app(host=HOST)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            judge.stopping = judge.stopping or _stopped_by(sig)
            super().handle_exit(sig, frame)

        async def shutdown(self, sockets: Any = None) -> None:
            await super().shutdown(sockets)
            judge.close()  # before uvicorn raises the signal again to end the process

    config = uvicorn.Config(
        _Gate(app, judge, settings.auth_token),
        host=HOST,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        lifespan="on",
    )
    Server(config).run()
