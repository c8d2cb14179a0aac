"""`ptxbench mcp`: serve the judge's tools over the Model Context Protocol (docs/agents.md).

stdio by default (an MCP client starts `ptxbench mcp` itself); `--transport streamable-http` or
`sse` listens on 127.0.0.1 only, with an optional bearer token (`--auth-token-env NAME`: the token is
read from that environment variable, never from the command line, which other local users can see).
Each client's session is recorded as its own run of the agent.

Exit status: 0 when the client went away; 2 for a usage mistake (or no `mcp` package, or a
`--db` that is not a store, unless `--create`); 1 when the tool failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ptxbench.cli.conventions import ExitCode, fail, reported


def mcp_command(
    db_path: Annotated[Optional[Path], typer.Option("--db", help="store (default: $PTXBENCH_DB or the user data folder)")] = None,
    create: Annotated[bool, typer.Option("--create", help="make a new store at --db if there is none (without it a --db that is not a store is refused)")] = False,
    agent_name: Annotated[Optional[str], typer.Option("--agent-name", help="the agent's name in the store (default: the name the client gives)")] = None,
    context: Annotated[str, typer.Option("--context", help="context level of the prompts describe_task gives: none, brief, full")] = "none",
    tasks: Annotated[str, typer.Option("--tasks", help="task ids, comma-separated, or all")] = "all",
    gpu: Annotated[str, typer.Option("--gpu", help="auto, on or off: check and time run on a GPU of the task's arch")] = "auto",
    rate: Annotated[int, typer.Option("--rate", min=1, help="judge calls a minute per session")] = 30,
    gpu_seconds: Annotated[float, typer.Option("--gpu-seconds", min=0, help="GPU time per session for check and time")] = 600.0,
    transport: Annotated[str, typer.Option("--transport", help="stdio, streamable-http or sse (the last two on 127.0.0.1)")] = "stdio",
    auth_token_env: Annotated[Optional[str], typer.Option("--auth-token-env", help="HTTP: require the bearer token held by this environment variable (at least 16 characters)")] = None,
    session_idle: Annotated[float, typer.Option("--session-idle", min=1, help="streamable HTTP: seconds without a request after which a session expires")] = 1800.0,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="port for streamable-http and sse")] = 8765,
) -> None:
    """Serve the workspace file and the judge (assemble, check, time, submit) to external agents over MCP."""
    from ptxbench.services import mcp_server

    with reported("mcp"):
        settings = mcp_server.settings_for(db_path=db_path, create=create, agent_name=agent_name, context=context, tasks=tasks,
                                           gpu=gpu, rate_per_minute=rate, gpu_budget_s=gpu_seconds,
                                           auth_token_env=auth_token_env, session_idle_s=session_idle)
        if transport not in mcp_server.TRANSPORTS:
            raise fail("mcp", f"--transport: use {', '.join(mcp_server.TRANSPORTS)}")
        if auth_token_env is not None and transport == "stdio":
            raise fail("mcp", "--auth-token-env is for --transport streamable-http or sse")
        try:
            import mcp  # noqa: F401
        except ImportError:
            raise fail("mcp", "the MCP server needs the `mcp` package: pip install 'ptxbench[agents]'",
                       ExitCode.USAGE) from None
        from ptxbench.services import mcp_app

        mcp_app.serve(settings, transport, port)
