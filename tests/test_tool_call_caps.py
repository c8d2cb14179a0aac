"""Hostile tool calls: arguments nested 100 000 deep, 30 MB of code, a huge manifest, values of the
wrong type, a tool name that is not a string. Each is an `error: …` answer, nothing raises out of the
tool layer, nothing oversized is stored or sent back to the endpoint, and an episode given such
calls ends (never stays `running`). The same on the MCP server's path.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from llm_server import LoopbackLLM, expert_arguments
from ptxbench.db.seed import ensure_default_store
from ptxbench.db.trajectories import RUNNING, run_episodes, step_arguments, steps_of
from ptxbench.models import agent_tools
from ptxbench.models.agent import AgentBudget, AgentConfig, run_agent
from ptxbench.models.agent_tools import (
    MAX_ARGUMENT_BYTES, MAX_CODE_BYTES, MAX_DEPTH, ArgumentError, GpuAccess, JudgeTools, json_depth, parse_arguments,
    read_submission, recorded_arguments,
)
from ptxbench.models.client import ChatResult
from ptxbench.tasks.spec import get_task

pytestmark = pytest.mark.timeout(300)

TASK = "vector_add_smoke"
DEEP = 100_000
FAST = dict(backoff_s=0.01, backoff_max_s=0.05, timeout_s=60.0, retries=0)


def deep_dict(levels: int) -> dict[str, Any]:
    """{"a": {"a": … }} `levels` deep, built with a loop (building it by recursion would fail first)."""
    top: dict[str, Any] = {}
    node = top
    for _ in range(levels - 1):
        child: dict[str, Any] = {}
        node["a"] = child
        node = child
    return top


def deep_list(levels: int) -> list[Any]:
    top: list[Any] = []
    node = top
    for _ in range(levels - 1):
        child: list[Any] = []
        node.append(child)
        node = child
    return top


DEEP_TEXT = '{"code": "x", "extra": ' + "[" * DEEP + "]" * DEEP + "}"
HUGE_CODE = "// " + "x" * (30 << 20)


def cyclic() -> dict[str, Any]:
    args: dict[str, Any] = {"code": "x"}
    args["manifest"] = args
    return args


HOSTILE: dict[str, tuple[Any, Any]] = {
    "nested 100 000 deep, as text": ("check", DEEP_TEXT),
    "nested 100 000 deep, text with no object around it": ("check", "[" * DEEP),
    "nested 100 000 deep, already parsed": ("check", {"code": "x", "extra": deep_dict(DEEP)}),
    "a list nested 100 000 deep, already parsed": ("check", {"code": "x", "extra": deep_list(DEEP)}),
    "the whole arguments nested 100 000 deep": ("assemble", deep_dict(DEEP)),
    "a manifest nested 40 deep": ("check", {"code": "x", "manifest": deep_dict(40)}),
    "a cycle": ("check", cyclic()),
    "30 MB of code, as text": ("submit", json.dumps({"code": HUGE_CODE})),
    "30 MB of code, already parsed": ("submit", {"code": HUGE_CODE}),
    "30 MB of whitespace around nothing": ("submit", " " * (30 << 20)),
    "code just over the engine's limit": ("submit", {"code": "x" * (MAX_CODE_BYTES + 1)}),
    "a huge manifest string": ("check", json.dumps({"code": "x", "manifest": '{"a": "' + "y" * (3 << 20) + '"}'})),
    "a manifest string nested 100 000 deep": ("check", json.dumps({"code": "x", "manifest": "[" * DEEP + "]" * DEEP})),
    "a manifest string that is a number": ("check", {"code": "x", "manifest": "5"}),
    "code that is a number": ("check", {"code": 5}),
    "code that is a list": ("check", '{"code": ["x"]}'),
    "code that is an object": ("check", {"code": {"text": "x"}}),
    "code that is null": ("check", '{"code": null}'),
    "no code": ("check", "{}"),
    "language that is a list": ("check", {"code": "x", "language": ["ptx"] * 1000}),
    "arguments that are a JSON number": ("check", "5"),
    "arguments that are a JSON array": ("check", "[1, 2]"),
    "arguments that are a JSON string": ("check", '"code"'),
    "arguments that are JSON null": ("check", "null"),
    "arguments that are a Python number": ("check", 5),
    "arguments that are a Python list": ("check", ["code"]),
    "no arguments": ("check", None),
    "an integer too long to read": ("check", '{"code": "x", "n": ' + "9" * 10_000 + "}"),
    "a value that is not JSON": ("check", {"code": "x", "extra": object()}),
    "a key that is not a string": ("check", {"code": "x", 5: "y"}),
    "broken JSON": ("check", '{"code": "unterminated'),
    "a tool name that is a number": (5, {"code": "x"}),
    "a tool name that is None": (None, {"code": "x"}),
    "a tool name that is a list nested 100 000 deep": (deep_list(DEEP), {"code": "x"}),
    "a tool name of 30 MB": ("t" * (30 << 20), {"code": "x"}),
}


@pytest.fixture(scope="module")
def tools() -> JudgeTools:
    return JudgeTools(get_task(TASK), GpuAccess())


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_call_is_an_error_answer(case: str, tools: JudgeTools) -> None:
    name, arguments = HOSTILE[case]
    out = tools.call(name, arguments)
    assert out.status.startswith("error: "), (case, out.status, out.result)
    assert out.submission is None and out.gpu_s == 0
    assert isinstance(out.tool, str) and len(out.tool) <= agent_tools.MAX_NAME_CHARS + 1
    text = out.text()  # what the agent reads: short, and says what to do
    assert len(text) < 2000 and out.result["error"]


def test_the_messages_say_what_is_wrong(tools: JudgeTools) -> None:
    def said(name: Any, arguments: Any) -> str:
        return tools.call(name, arguments).result["error"]

    assert f"over the limit of {MAX_DEPTH} levels" in said("check", DEEP_TEXT)
    assert "100,001 levels deep" in said("check", DEEP_TEXT)  # the object around the array is one more
    assert f"over the limit of {MAX_DEPTH} levels" in said("check", {"code": "x", "extra": deep_dict(DEEP)})
    assert f"over the limit of {MAX_ARGUMENT_BYTES:,} bytes" in said("submit", json.dumps({"code": HUGE_CODE}))
    assert f"over the limit of {MAX_CODE_BYTES:,} bytes" in said("submit", {"code": "x" * (MAX_CODE_BYTES + 1)})
    assert "`manifest`" in said("check", json.dumps({"code": "x", "manifest": '{"a": "' + "y" * (3 << 20) + '"}'}))
    assert "`code` must be the kernel's source text" in said("check", {"code": 5})
    assert "must be a JSON object" in said("check", "[1, 2]") and "must be a JSON object" in said("check", "5")
    assert "must be a string, not a int" in said(5, {"code": "x"})
    assert "must be a string, not a list" in said(deep_list(DEEP), {"code": "x"})


def test_calls_within_the_caps_still_work(tools: JudgeTools) -> None:
    good = expert_arguments(TASK)
    for arguments in (good, json.dumps(good), {**good, "manifest": json.dumps({"launches": [{"args": [[[1]]]}]})}):
        out = tools.call("submit", arguments)
        assert out.status == "ok" and out.submission is not None and out.submission.code == good["code"]
    # Code right at the engine's limit is read (the engine, not the tool layer, judges it).
    sub = read_submission({"code": "x" * MAX_CODE_BYTES})
    assert len(sub.code) == MAX_CODE_BYTES and len(sub.stored_response()) < 200
    assert "x" * 100 not in sub.stored_response() and json.loads(sub.stored_response())["language"] == "ptx"
    # Nesting up to the cap is read.
    nested = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert parse_arguments('{"code": "x", "n": ' + nested + "}")["code"] == "x"
    with pytest.raises(ArgumentError):
        parse_arguments('{"code": "x", "n": ' + "[" + nested + "]" + "}")


def test_the_code_cap_is_the_engines() -> None:
    from ptxbench.engine.assemble import MAX_CODE_BYTES as ENGINE_LIMIT
    from ptxbench.engine.manifest import MAX_MANIFEST_BYTES

    assert MAX_CODE_BYTES == ENGINE_LIMIT
    assert ENGINE_LIMIT + MAX_MANIFEST_BYTES < MAX_ARGUMENT_BYTES < ENGINE_LIMIT + MAX_MANIFEST_BYTES + (1 << 20)


@pytest.mark.parametrize(("text", "depth"), [
    ("5", 0), ('"[[[{{{"', 0), ("{}", 1), ("[[]]", 2), ('{"a": [1, {"b": []}]}', 4),
    (r'{"a": "\"[[["}', 1), (r'{"a": "\\", "b": [[]]}', 3), (r'["\\\"]]]", [1]]', 2),
    ('{"a": "open [[[', 1), ('{"a": "cut\\', 1), ('["é", "\u2028", [["ü"]]]', 3),
])
def test_json_depth_skips_strings_and_their_escapes(text: str, depth: int) -> None:
    assert json_depth(text) == depth


def test_json_depth_is_linear() -> None:
    import time

    for text in ("[" * (5 << 20), "[]" * (5 << 19), json.dumps({"code": '\\"[{' * (1 << 20)})):
        started = time.perf_counter()
        json_depth(text)
        assert time.perf_counter() - started < 2.0


def test_what_is_recorded_is_bounded_and_readable() -> None:
    assert recorded_arguments('{"code": "unterminated') == '{"code": "unterminated'  # small: kept as sent
    assert recorded_arguments({"code": "x"}) == '{"code": "x"}'
    for arguments in (DEEP_TEXT, {"code": "x", "extra": deep_dict(DEEP)}, json.dumps({"code": HUGE_CODE}), cyclic()):
        kept = recorded_arguments(arguments)
        assert len(kept) < 1000 and "not kept" in json.loads(kept)["omitted"]


@pytest.mark.parametrize("fault", [KeyError("boom"), RecursionError(), MemoryError(), AssertionError("bug")])
def test_a_fault_inside_the_judge_is_an_error_answer(fault: BaseException, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = JudgeTools(get_task(TASK), GpuAccess())

    def broken(self: JudgeTools, sub: Any) -> Any:
        raise fault

    monkeypatch.setattr(JudgeTools, "_assemble", broken)
    out = tools.call("assemble", {"code": "x"})
    assert out.status.startswith("error: ") and out.result["error"]


# -- an agent episode given such calls ----------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path):
    db = ensure_default_store(tmp_path / "store.sqlite")
    yield db
    db.conn.close()


def test_an_episode_with_hostile_calls_ends_and_stores_nothing_oversized(tmp_path: Path, store) -> None:
    """Through a real endpoint on loopback: deep, huge and ill-typed calls, then the expert kernel."""
    huge = json.dumps({"code": HUGE_CODE})
    recording = {"replies": {TASK: {
        "1": [{"tool_calls": [
            {"name": "check", "arguments": DEEP_TEXT},
            {"name": "check", "arguments": "5"},
            {"name": "check", "arguments": "[1, 2]"},
            {"name": 5, "arguments": {"code": "x"}},
            {"name": "assemble", "arguments": {"code": 5}},
            {"name": "check", "arguments": json.dumps({"code": "x", "manifest": "[" * DEEP + "]" * DEEP})},
        ]}],
        "2": [{"tool_calls": [{"name": "submit", "arguments": huge}]}],
        "3": [{"tool_calls": [{"name": "submit", "arguments": json.dumps(expert_arguments(TASK))}]}],
    }}}
    with LoopbackLLM(recording, tmp_path) as server:
        config = AgentConfig(model="loopback", base_url=server.base_url, tasks=(TASK,), budget=AgentBudget(), **FAST)
        report = run_agent(store, config)
        requests = server.requests()
    [episode] = run_episodes(store, report.run_id)
    assert episode.status == "submitted" and episode.tool_calls == 8
    tool_steps = [s for s in steps_of(store, episode.id) if s.kind == "tool"]
    assert [s.status for s in tool_steps] == ["error: bad arguments"] * 3 + ["error: unknown tool"] + \
        ["error: bad arguments"] * 3 + ["ok"]
    assert f"over the limit of {MAX_ARGUMENT_BYTES:,} bytes" in tool_steps[6].result["error"]
    for step in steps_of(store, episode.id):
        step_arguments(step)  # every stored step reads back (the explorer parses them)
        assert len(step.arguments or "") < 20_000 and len(json.dumps(step.result)) < 20_000
    # The 30 MB went nowhere: not into the store, not back to the endpoint.
    assert all(len(json.dumps(r["messages"])) < 1 << 20 for r in requests)
    size = store.execute("SELECT SUM(LENGTH(arguments)) FROM agent_steps").fetchone()[0]
    assert size < 1 << 20
    # The submitted kernel is stored once: the sample's code, not again in its response.
    sample = store.execute("SELECT code, response FROM samples WHERE id = ?", [episode.sample_id]).fetchone()
    assert sample[0] == expert_arguments(TASK)["code"] and sample[0] not in sample[1]


class FakeClient:
    """An endpoint stand-in that hands tool calls over already parsed, as an SDK could."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies
        self.sent: list[list[dict[str, Any]]] = []

    async def complete(self, messages: list[dict[str, Any]], tools: Any = None) -> ChatResult:
        self.sent.append(json.loads(json.dumps(messages)))  # what would go on the wire
        reply = self.replies[min(len(self.sent) - 1, len(self.replies) - 1)]
        if isinstance(reply, BaseException):
            raise reply
        return ChatResult(ok=True, content="", tool_calls=reply, attempts=1)

    async def close(self) -> None:
        pass


def _run(store, replies: list[Any], **budget: Any):
    client = FakeClient(replies)
    config = AgentConfig(model="fake", base_url="http://127.0.0.1:9/v1", tasks=(TASK,),
                         budget=AgentBudget(**budget), **FAST)
    return client, config, lambda: run_agent(store, config, client=client)  # type: ignore[arg-type]


def test_an_episode_given_parsed_hostile_calls_ends(store) -> None:
    calls = [
        {"id": "a", "name": "check", "arguments": {"code": "x", "extra": deep_dict(DEEP)}},
        {"id": "b", "name": deep_list(DEEP), "arguments": {"code": "x"}},
        {"id": "c", "name": "submit", "arguments": {"code": HUGE_CODE}},
        {"id": "d" * 10_000, "name": "assemble", "arguments": cyclic()},
        "not a call",
    ]
    client, _config, go = _run(store, [calls], turns=2)
    report = go()
    [episode] = run_episodes(store, report.run_id)
    assert episode.status != RUNNING and episode.status.startswith("ended: ")
    statuses = [s.status for s in steps_of(store, episode.id) if s.kind == "tool"]
    assert statuses and all(s.startswith("error: ") for s in statuses)
    assert all(len(json.dumps(m)) < 1 << 20 for m in client.sent[-1])
    assert report.finished


def test_a_reply_too_deep_for_the_client_is_a_malformed_reply(store) -> None:
    _client, _config, go = _run(store, [RecursionError()], turns=2)
    report = go()
    [episode] = run_episodes(store, report.run_id)
    assert episode.status.startswith("ended: reply budget used up")
    assert [s.status for s in steps_of(store, episode.id) if s.kind == "model"] == \
        ["error: the reply is not a chat completion"] * 2


def test_a_fault_of_the_run_never_leaves_the_episode_running(store) -> None:
    _client, _config, go = _run(store, [KeyError("a bug")])
    with pytest.raises(KeyError):
        go()
    [episode] = store.execute("SELECT status FROM agent_episodes").fetchall()
    assert episode[0].startswith("ended: the run failed: KeyError")


# -- the MCP server ------------------------------------------------------------------------------------------


def test_the_mcp_judge_refuses_hostile_arguments_and_records_them_bounded(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from ptxbench.services.errors import UsageError
    from ptxbench.services.mcp_server import Judge, McpSettings

    judge = Judge(McpSettings(db_path=tmp_path / "mcp.sqlite", create=True, tasks=(TASK,), rate_per_minute=1000))
    try:
        session = judge.session("s", "test")
        hostile = [
            {"code": "x", "language": "ptx", "manifest": deep_dict(DEEP)},  # a parsed dict from the SDK
            {"code": HUGE_CODE, "language": "ptx"},
            {"code": "x", "language": "ptx", "manifest": deep_list(DEEP)},
        ]
        for arguments in hostile:
            with pytest.raises(UsageError, match="over the limit"):
                asyncio.run(judge.call(session, "check", TASK, arguments))
        with pytest.raises(UsageError, match="no task of that name"):
            asyncio.run(judge.call(session, "check", "t" * (30 << 20), {"code": "x"}))
        answer = asyncio.run(judge.call(session, "submit", TASK, expert_arguments(TASK)))
        assert answer["submitted"]
        rows = judge.db.execute("SELECT status, arguments FROM agent_steps ORDER BY id").fetchall()
        assert [r[0] for r in rows] == ["error: bad arguments"] * 3 + ["ok"]
        assert all(len(r[1]) < 20_000 for r in rows[:3])
        code, response = judge.db.execute("SELECT code, response FROM samples WHERE id = ?",
                                          [answer["sample_id"]]).fetchone()
        assert code == expert_arguments(TASK)["code"] and code not in response
    finally:
        judge.close()
        judge.db.conn.close()


def test_an_mcp_client_sending_hostile_arguments_gets_errors(tmp_path: Path) -> None:
    """The real server over stdio, the SDK's own client: what the SDK lets through reaches the caps."""
    mcp = pytest.importorskip("mcp")
    import sys

    import mcp_types
    from mcp.client.client import Client

    params = mcp.StdioServerParameters(command=sys.executable, args=[
        "-m", "ptxbench.cli.main", "mcp", "--db", str(tmp_path / "s.sqlite"), "--create", "--tasks", TASK])

    async def go():
        async with Client(params, client_info=mcp_types.Implementation(name="hostile", version="1")) as c:
            deep = await c.call_tool("check", {"task": TASK, "code": "x", "manifest": deep_dict(60)})
            huge = await c.call_tool("check", {"task": TASK, "code": "x" * (6 << 20)})
            fine = await c.call_tool("assemble", {"task": TASK, "code": ".version 9.0"})
            return deep, huge, fine

    deep, huge, fine = asyncio.run(go())
    text = lambda r: "".join(getattr(c, "text", "") for c in r.content)
    assert deep.is_error and "over the limit of 32 levels" in text(deep)
    assert huge.is_error and "over the limit" in text(huge)
    assert not fine.is_error
