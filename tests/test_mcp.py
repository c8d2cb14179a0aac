"""`ptxbench mcp` against the official SDK's own client: a real session over stdio (and one over
streamable HTTP on loopback), the server started as the command a person would configure."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llm_server import expert_arguments, mutation_arguments
from ptxbench.services.hardware import gpu_archs
from ptxbench.services.mcp_server import RateLimit

mcp = pytest.importorskip("mcp")
import mcp_types  # noqa: E402  (comes with mcp)
from mcp.client.client import Client  # noqa: E402

TASK = "vector_add_smoke"
NO_GPU = not gpu_archs()


def _server(db: Path, *extra: str) -> mcp.StdioServerParameters:
    return mcp.StdioServerParameters(command=sys.executable, args=[
        "-m", "ptxbench.cli.main", "mcp", "--db", str(db), "--create", "--tasks", f"{TASK},gemm_bf16_sm90a", *extra])


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def _session(db: Path, calls, *extra: str, name: str = "test-agent"):
    async def go():
        async with Client(_server(db, *extra), client_info=mcp_types.Implementation(name=name, version="1")) as c:
            return await calls(c)

    return asyncio.run(go())


def test_an_mcp_client_lists_and_calls_the_tools(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"

    async def calls(c):
        tools = await c.list_tools()
        listed = await c.call_tool("list_tasks", {})
        described = await c.call_tool("describe_task", {"task": TASK})
        assembled = await c.call_tool("assemble", {"task": TASK, **mutation_arguments("add-wrong-op")})
        checked = await c.call_tool("check", {"task": TASK, **mutation_arguments("add-wrong-op")})
        broken = await c.call_tool("check", {"task": TASK, "code": "x", "manifest": {"launches": 3}})
        unknown = await c.call_tool("check", {"task": "no_such_task", "code": "x"})
        submitted = await c.call_tool("submit", {"task": TASK, **expert_arguments(TASK)})
        left_open = await c.call_tool("assemble", {"task": "gemm_bf16_sm90a", "code": ".version 9.0"})
        return tools, listed, described, assembled, checked, broken, unknown, submitted, left_open

    tools, listed, described, assembled, checked, broken, unknown, submitted, left_open = _session(db, calls)
    assert {t.name for t in tools.tools} == {"list_tasks", "describe_task", "write_file", "edit_file", "apply_patch",
                                            "read_file", "assemble", "check", "time", "submit"}
    assert TASK in _text(listed) and "sm_90a" in _text(listed)
    from ptxbench.tasks.spec import get_task

    spec = get_task(TASK)
    prompt = _text(described)
    assert str(spec.train[0]["N"]) in prompt and str(spec.heldout[0]["N"]) not in prompt and "submit" in prompt
    assert not assembled.is_error and json.loads(_text(assembled))["category"] == "ok"
    if NO_GPU:
        assert json.loads(_text(checked))["status"] == "skipped: no sm_90a device"
    assert json.loads(_text(broken))["category"] == "bad_manifest"
    assert unknown.is_error and "no task 'no_such_task'" in _text(unknown)
    answer = json.loads(_text(submitted))
    assert answer["submitted"] and answer["category"] == "ok" and "correct_heldout" not in answer
    assert not left_open.is_error

    # What the store holds: a run of the agent named by its client, an episode per task, every call.
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT m.name, m.kind FROM runs r JOIN models m ON m.id = r.model_id "
                        "WHERE r.params LIKE '%\"mode\": \"mcp\"%'").fetchall()
    assert rows == [("test-agent (mcp)", "agent")]  # namespaced: a client never names itself into another model
    episodes = conn.execute("SELECT task_id, status, tool_calls, sample_id FROM agent_episodes ORDER BY id").fetchall()
    assert episodes[0][:3] == (TASK, "submitted", 4)
    # The episode the session left open ended with it, without a kernel.
    assert episodes[1][:3] == ("gemm_bf16_sm90a", "ended: the session closed without a submit", 1)
    category = conn.execute("SELECT category FROM evaluations WHERE sample_id = ?", [episodes[1][3]]).fetchone()
    assert category == ("no_candidate",)
    tools_called = [r[0] for r in conn.execute("SELECT tool FROM agent_steps WHERE episode_id = 1 ORDER BY step")]
    assert tools_called == ["assemble", "check", "check", "submit"]


def test_calls_past_the_rate_are_refused_and_the_agent_name_can_be_given(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"

    async def calls(c):
        return [await c.call_tool("assemble", {"task": TASK, "code": "x"}) for _ in range(3)]

    results = _session(db, calls, "--rate", "2", "--agent-name", "my-agent")
    assert [r.is_error for r in results] == [False, False, True]
    assert "rate limit: at most 2 calls a minute" in _text(results[2])
    names = sqlite3.connect(db).execute("SELECT name FROM models WHERE kind = 'agent'").fetchall()
    assert names == [("my-agent (mcp)",)]


def test_the_rate_limit_refills_with_time() -> None:
    now = [0.0]
    limit = RateLimit(6, clock=lambda: now[0])
    assert [limit.take() for _ in range(6)] == [0.0] * 6
    assert limit.take() == pytest.approx(10.0)
    now[0] = 10.0
    assert limit.take() == 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> list[str]:
    """Local addresses listening on `port`, from the kernel's own table (IPv4 and IPv6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if int(hex_port, 16) == port and state == "0A":
                found.append(address)
    return found


def test_the_http_transport_listens_on_loopback_only(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ptxbench.cli.main", "mcp", "--db", str(tmp_path / "s.sqlite"), "--create",
                             "--transport", "streamable-http", "--port", str(port), "--tasks", TASK],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _listening(port) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert _listening(port) == ["0100007F"], proc.stderr.read().decode() if proc.poll() is not None else ""

        async def go():
            async with Client(f"http://127.0.0.1:{port}/mcp") as c:
                return await c.list_tools()

        assert "submit" in {t.name for t in asyncio.run(go()).tools}
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        for stream in (proc.stdout, proc.stderr):
            stream.close()
