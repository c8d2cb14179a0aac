"""`ptxbench mcp` with several clients: the official SDK's clients over streamable HTTP at once, each its
own session (run, episodes, workspace, rate, GPU budget); names that cannot reach another model's
samples; concurrent submits that lose nothing and store nothing twice; sessions that end by their
client, by expiry, or by the server's stop; a bearer token; the tools' schemas. The server is the
command a person runs, in its own process; the store is real SQLite.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from llm_server import expert_arguments

mcp = pytest.importorskip("mcp")
import httpx2  # noqa: E402  (comes with mcp)
import mcp_types  # noqa: E402
from mcp.client.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

pytestmark = pytest.mark.timeout(300)
TASK, OTHER = "vector_add_smoke", "gemm_bf16_sm90a"
TOKEN = "a-test-token-of-some-length-0123"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """`ptxbench mcp --transport streamable-http` as a child process."""

    def __init__(self, db: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ptxbench.cli.main", "mcp", "--db", str(db), "--create", "--transport",
             "streamable-http", "--port", str(self.port), "--tasks", f"{TASK},{OTHER}", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"the server did not listen: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=30)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code

    def __enter__(self) -> HttpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(signal.SIGKILL)


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def _answer(result) -> dict[str, Any]:
    assert not result.is_error, _text(result)
    return json.loads(_text(result))


def _client(url: str, name: str, token: str | None = None) -> Client:
    info = mcp_types.Implementation(name=name, version="1")
    if token is None:
        return Client(url, client_info=info)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60.0, read=300.0))
    return Client(streamable_http_client(url, http_client=http), client_info=info)


def _db(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path)


# -- two clients at once --------------------------------------------------------------------------------


async def _agent_session(url: str, name: str, token: str | None = None) -> dict[str, Any]:
    """What one agent does: writes the kernel, judges it, submits three times at once (two bare, one with
    the code), leaves a second task open; then spends its rate."""
    good = expert_arguments(TASK)
    async with _client(url, name, token) as c:
        wrote = _answer(await c.call_tool("write_file", {"task": TASK, **good}))
        assembled = _answer(await c.call_tool("assemble", {"task": TASK}))
        submits = await asyncio.gather(
            c.call_tool("submit", {"task": TASK}),
            c.call_tool("submit", {"task": TASK, **good}),
            c.call_tool("submit", {"task": TASK, **good}),
        )
        _answer(await c.call_tool("assemble", {"task": OTHER, "code": ".version 9.0"}))
        rest = [await c.call_tool("read_file", {"task": OTHER}) for _ in range(3)]
        return {"wrote": wrote, "assembled": assembled, "submits": submits, "reads": rest,
                "version": c.server_info.version if c.server_info else None}


def test_two_clients_over_http_are_two_sessions(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    with HttpServer(db, "--rate", "7") as server:
        async def both():
            return await asyncio.gather(_agent_session(server.url, "expert"), _agent_session(server.url, "gpt-x (agent)"))

        first, second = asyncio.run(both())
        assert server.stop() in (0, -signal.SIGTERM)
    conn = _db(db)
    runs = conn.execute("SELECT r.id, m.name, m.kind, r.finished_at IS NOT NULL FROM runs r JOIN models m "
                        "ON m.id = r.model_id WHERE r.params LIKE '%\"mode\": \"mcp\"%' ORDER BY m.name").fetchall()
    assert [(name, kind, done) for _, name, kind, done in runs] == [("expert (mcp)", "agent", 1),
                                                                     ("gpt-x (agent) (mcp)", "agent", 1)]
    # The models a client named itself after got nothing.
    assert conn.execute("SELECT COUNT(*) FROM samples s JOIN runs r ON r.id = s.run_id JOIN models m ON "
                        "m.id = r.model_id WHERE m.name IN ('expert', 'gpt-x (agent)')").fetchone()[0] == 0
    for (run_id, _name, _kind, _done), seen in zip(runs, (first, second)):
        assert seen["version"] and "engine" in seen["version"]
        assert seen["wrote"]["file"]["bytes"] > 1000 and seen["assembled"]["category"] == "ok"
        assert "budget_left" in seen["assembled"]
        # Three submits at once: one at a time, each its own episode. The bare one that found an empty
        # workspace (an episode already ended by another submit) is an error answer, never a KeyError.
        answers = [json.loads(_text(r)) if not r.is_error else None for r in seen["submits"]]
        judged = [a for a in answers if a is not None]
        assert all(a["category"] == "ok" and a["submitted"] for a in judged) and len(judged) >= 2
        errors = [_text(r) for r in seen["submits"] if r.is_error]
        assert all("there is no kernel yet" in e for e in errors)
        episodes = conn.execute("SELECT task_id, status, sample_id FROM agent_episodes WHERE run_id = ? ORDER BY id",
                                [run_id]).fetchall()
        submitted = [e for e in episodes if e[1] == "submitted"]
        assert len(submitted) == len(judged)
        # Every sample of the session is judged once, and none is stored twice.
        samples = conn.execute("SELECT s.id, COUNT(e.id) FROM samples s LEFT JOIN evaluations e ON e.sample_id = s.id "
                               "WHERE s.run_id = ? GROUP BY s.id", [run_id]).fetchall()
        assert all(n == 1 for _, n in samples)
        assert sorted(s for s, _ in samples) == sorted(e[2] for e in episodes if e[2] is not None)
        assert {a["sample_id"] for a in judged} == {e[2] for e in submitted}
        # The task left open ended with its session (the client's DELETE): without a kernel.
        assert (OTHER, "ended: the session closed without a submit") in [(e[0], e[1]) for e in episodes]
        # Rate per session: 7 calls a minute; reading the file is free.
        assert all(not r.is_error for r in seen["reads"])


def test_the_rate_is_per_session(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    with HttpServer(db, "--rate", "2") as server:
        async def go():
            async with _client(server.url, "a") as a, _client(server.url, "b") as b:
                spent = [await a.call_tool("assemble", {"task": TASK, "code": ".version 9.0"}) for _ in range(3)]
                other = await b.call_tool("assemble", {"task": TASK, "code": ".version 9.0"})
                return spent, other

        spent, other = asyncio.run(go())
    assert [r.is_error for r in spent] == [False, False, True] and "rate limit" in _text(spent[2])
    assert not other.is_error and _answer(other)["budget_left"]["calls_this_minute"] == 1


# -- how sessions end -----------------------------------------------------------------------------------

_HOLDER = textwrap.dedent("""
    import asyncio, sys
    import mcp_types
    from mcp.client.client import Client

    async def main():
        async with Client(sys.argv[1], client_info=mcp_types.Implementation(name=sys.argv[2], version="1")) as c:
            await c.call_tool("write_file", {"task": "vector_add_smoke", "code": ".version 9.0"})
            print("HOLDING", flush=True)
            await asyncio.sleep(3600)

    asyncio.run(main())
""")


def _holder(tmp_path: Path, url: str, name: str) -> subprocess.Popen:
    script = tmp_path / "holder.py"
    script.write_text(_HOLDER)
    proc = subprocess.Popen([sys.executable, str(script), url, name], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "HOLDING"
    return proc


def _statuses(db: Path) -> dict[str, list[tuple[str, int | None]]]:
    rows = _db(db).execute("SELECT m.name, a.status, a.sample_id FROM agent_episodes a JOIN runs r ON r.id = a.run_id "
                           "JOIN models m ON m.id = r.model_id ORDER BY a.id").fetchall()
    out: dict[str, list[tuple[str, int | None]]] = {}
    for name, status, sample in rows:
        out.setdefault(name, []).append((status, sample))
    return out


def test_a_vanished_client_expires_and_sigterm_interrupts(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    with HttpServer(db, "--session-idle", "2") as server:
        crashed = _holder(tmp_path, server.url, "crashes")
        crashed.kill()  # gone without a word: no DELETE
        crashed.wait()
        holding = _holder(tmp_path, server.url, "holds")
        deadline = time.monotonic() + 30
        while _statuses(db).get("crashes (mcp)", [("running", None)])[0][0] == "running" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert _statuses(db)["holds (mcp)"] == [("running", None)]  # its open stream keeps it alive
        started = time.monotonic()
        assert server.stop(signal.SIGTERM) == -signal.SIGTERM
        assert time.monotonic() - started < 15
        holding.kill()
        holding.wait()
    seen = _statuses(db)
    assert seen["crashes (mcp)"] == [("ended: interrupted (the session expired after 2 s idle)", None)]
    assert seen["holds (mcp)"] == [("ended: interrupted (the server was stopped (SIGTERM))", None)]
    assert _db(db).execute("SELECT COUNT(*) FROM runs WHERE finished_at IS NULL AND params LIKE '%mcp%'").fetchone() == (0,)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_sigterm_to_a_stdio_server_interrupts_its_episode(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    params = mcp.StdioServerParameters(command=sys.executable, args=[
        "-m", "ptxbench.cli.main", "mcp", "--db", str(db), "--create", "--tasks", TASK])

    async def go():
        before = set(_children(os.getpid()))
        async with Client(params, client_info=mcp_types.Implementation(name="stdio-agent", version="1")) as c:
            await c.call_tool("write_file", {"task": TASK, "code": ".version 9.0"})
            [server_pid] = set(_children(os.getpid())) - before
            os.kill(server_pid, signal.SIGTERM)
            for _ in range(100):
                if not Path(f"/proc/{server_pid}").exists() or "Z" in Path(f"/proc/{server_pid}/stat").read_text().split()[2]:
                    break
                await asyncio.sleep(0.1)
            with pytest.raises(Exception):  # the SDK's error for a server that went away
                await asyncio.wait_for(c.call_tool("read_file", {"task": TASK}), 10)

    try:
        asyncio.run(go())
    except BaseException as exc:  # the client's own teardown after its server died
        if isinstance(exc, AssertionError):
            raise
    assert _statuses(db)["stdio-agent (mcp)"] == [("ended: interrupted (the server was stopped (SIGTERM))", None)]


# -- the front door -------------------------------------------------------------------------------------


def test_a_bearer_token_keeps_others_out(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    with HttpServer(db, "--auth-token-env", "PTXBENCH_TEST_TOKEN", env={"PTXBENCH_TEST_TOKEN": TOKEN}) as server:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        without = httpx2.post(server.url, json=init, headers=headers)
        wrong = httpx2.post(server.url, json=init, headers={**headers, "Authorization": "Bearer not-the-token-at-all"})
        assert without.status_code == 401 and wrong.status_code == 401

        async def with_token():
            async with _client(server.url, "trusted", TOKEN) as c:
                return await c.call_tool("list_tasks", {})

        assert TASK in _text(asyncio.run(with_token()))
    assert TOKEN not in " ".join(server.proc.args)  # the token never on the command line


def test_a_token_is_refused_on_the_command_line_forms_it_cannot_guard(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "ptxbench.cli.main", "mcp", "--db", str(tmp_path / "s.sqlite"), "--create"]
    stdio = subprocess.run(base + ["--auth-token-env", "PTXBENCH_TEST_TOKEN"], capture_output=True, text=True,
                           env={**os.environ, "PTXBENCH_TEST_TOKEN": TOKEN}, timeout=60)
    unset = subprocess.run(base + ["--transport", "streamable-http", "--auth-token-env", "PTXBENCH_NO_SUCH_VAR"],
                           capture_output=True, text=True, timeout=60)
    short = subprocess.run(base + ["--transport", "streamable-http", "--auth-token-env", "PTXBENCH_TEST_TOKEN"],
                           capture_output=True, text=True, env={**os.environ, "PTXBENCH_TEST_TOKEN": "short"}, timeout=60)
    assert stdio.returncode == 2 and "streamable-http or sse" in stdio.stderr
    assert unset.returncode == 2 and "not set" in unset.stderr
    assert short.returncode == 2 and "at least 16 characters" in short.stderr


def test_the_tools_describe_themselves(tmp_path: Path) -> None:
    params = mcp.StdioServerParameters(command=sys.executable, args=[
        "-m", "ptxbench.cli.main", "mcp", "--db", str(tmp_path / "s.sqlite"), "--create", "--tasks", TASK])

    async def go():
        async with Client(params) as c:
            return (await c.list_tools()).tools, c.server_info

    tools, info = asyncio.run(go())
    by_name = {t.name: t for t in tools}
    assert info is not None and info.name == "ptxbench" and "engine" in info.version
    for tool in tools:
        assert tool.description and tool.annotations is not None and tool.annotations.open_world_hint is False
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert prop.get("description"), (tool.name, name)
    for name in ("list_tasks", "describe_task", "read_file"):
        assert by_name[name].annotations.read_only_hint is True and by_name[name].annotations.idempotent_hint is True
    for name in ("assemble", "check", "time"):
        assert by_name[name].annotations.idempotent_hint is True and by_name[name].annotations.destructive_hint is False
    assert by_name["submit"].annotations.idempotent_hint is False
    language = by_name["check"].input_schema["properties"]["language"]
    assert "ptx" in json.dumps(language) and "cuda" in json.dumps(language) and "enum" in json.dumps(language)
    assert by_name["check"].input_schema.get("required") == ["task"]


# -- the GPU budget, read and charged under the GPU lock --------------------------------------------------


def test_concurrent_gpu_calls_never_overspend_a_shared_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four `check`s at once on two tasks' tools sharing one 2 s budget (an MCP session's): with each
    judgement taking 1 s, two run and two are refused. The GPU stage is stood in for here (no GPU in CI):
    a judgement that takes its second."""
    import ptxbench.engine.pipeline as pipeline
    from ptxbench.models.agent_tools import GpuAccess, GpuBudget, JudgeTools
    from ptxbench.tasks.spec import get_task

    class Judged:
        status, category, measurements, evidence, device = "judged", "ok", [], {}, None

    def one_second(*_args: Any, budget_s: float, **_kwargs: Any) -> Judged:
        assert budget_s > 0
        time.sleep(1.0)
        return Judged()

    monkeypatch.setattr(pipeline, "judge", one_second)
    shared = GpuBudget(2.0)
    spec = get_task(TASK)
    tools = [JudgeTools(spec, GpuAccess((spec.arch,), True), budget=shared) for _ in range(4)]
    for t in tools:
        t.call("write_file", expert_arguments(TASK))
    outcomes: list[Any] = [None] * 4

    def run(i: int) -> None:
        outcomes[i] = tools[i].call("check", {})

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(o.status for o in outcomes)
    assert statuses == ["ok", "ok", "skipped: the GPU-time budget of 2 s is used up",
                        "skipped: the GPU-time budget of 2 s is used up"]
    assert 2.0 <= shared.spent < 2.5 and sum(o.gpu_s for o in outcomes) == pytest.approx(shared.spent)


def test_a_client_name_is_made_safe_and_namespaced() -> None:
    from ptxbench.services.mcp_server import model_name_for

    assert model_name_for("expert") == "expert (mcp)"
    assert model_name_for("gpt-x (agent)") == "gpt-x (agent) (mcp)"
    assert model_name_for(None) == model_name_for("  \x00\x1b\u200b ") == "mcp-client (mcp)"
    assert model_name_for("\x1b[2Jclear") == "[2Jclear (mcp)"  # no control character reaches a terminal
    assert model_name_for("a\nb\tc") == "a b c (mcp)"
    assert len(model_name_for("x" * 10_000)) == 64 + len(" (mcp)")


def test_a_long_call_sends_progress_while_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import anyio

    from ptxbench.models.agent_tools import ToolOutcome
    from ptxbench.services import mcp_server

    monkeypatch.setattr(mcp_server, "PROGRESS_EVERY_S", 0.1)
    said: list[tuple[float, str]] = []

    async def progress(elapsed: float, message: str) -> None:
        said.append((elapsed, message))

    def slow() -> ToolOutcome:
        time.sleep(0.45)
        return ToolOutcome("check", "ok", {})

    out = anyio.run(mcp_server._in_thread, slow, "check", progress)
    assert out.status == "ok" and len(said) >= 3
    assert [e for e, _ in said] == sorted(e for e, _ in said) and said[0][1].startswith("check: running for")
