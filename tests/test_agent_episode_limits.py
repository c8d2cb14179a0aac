"""Agent episodes against an endpoint that misbehaves: a context that overflows, a reply that reports
millions of tokens, a reply that never comes in time, reasoning on every reply, a kernel too large to
resend; and a run stopped by SIGTERM. A real endpoint process on loopback (tests/agent_loopback.py),
the real tools (ptxas), a real store; nothing inside PTXBench is replaced.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_loopback import ScriptedLLM
from llm_server import expert_arguments
from ptxbench.db.queries import get_sample, latest_evaluation
from ptxbench.db.seed import ensure_default_store
from ptxbench.db.trajectories import run_episodes, steps_of
from ptxbench.models.agent import AgentBudget, AgentConfig, run_agent
from ptxbench.models.agent_context import is_overflow
from ptxbench.models.agent_tools import GpuAccess, JudgeTools
from ptxbench.tasks.spec import get_task

pytestmark = pytest.mark.timeout(300)
TASK = "vector_add_smoke"
FAST = dict(backoff_s=0.01, backoff_max_s=0.05, timeout_s=60.0, retries=0)


@pytest.fixture
def store(tmp_path: Path):
    db = ensure_default_store(tmp_path / "store.sqlite")
    yield db
    db.conn.close()


def _config(server: ScriptedLLM, **budget) -> AgentConfig:
    return AgentConfig(model="scripted", base_url=server.base_url, tasks=(TASK,), budget=AgentBudget(**budget), **FAST)


def call(name: str, arguments: dict | None = None) -> dict:
    return {"name": name, "arguments": json.dumps(arguments or {})}


def reply(*calls: dict, **extra) -> dict:
    return {"content": extra.pop("content", ""), "tool_calls": list(calls), **extra}


WRITE = call("write_file", expert_arguments(TASK))


def _tool_messages(request: dict) -> list[dict]:
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


# -- context ------------------------------------------------------------------------------------------


def test_an_overflow_is_compacted_and_the_episode_goes_on(tmp_path: Path, store) -> None:
    script = [reply(WRITE)] + [reply(call("assemble"))] * 5 + [reply(call("submit"))]
    with ScriptedLLM({"script": script, "context_chars": 12_000}, tmp_path) as server:
        report = run_agent(store, _config(server))
        requests = server.requests()
    refused = [r for r in requests if r["refused"]]
    assert refused and requests[-1]["refused"] is False
    after = requests[requests.index(refused[0]) + 1]
    assert after["chars"] < refused[0]["chars"] * 0.7  # the same turn sent again, compacted
    assert "compacted to fit the model's context" in after["messages"][-1]["content"]
    assert report.finished and report.aborted is None and report.submitted == 1
    [episode] = run_episodes(store, report.run_id)
    assert episode.status == "submitted"
    notes = [s.result for s in steps_of(store, episode.id) if s.kind == "note"]
    assert any("compacted" in n for n in notes)
    assert latest_evaluation(store, episode.sample_id).category == "ok"


def test_a_stated_context_budget_compacts_before_any_refusal(tmp_path: Path, store) -> None:
    script = [reply(WRITE)] + [reply(call("assemble"))] * 6 + [reply(call("submit"))]
    with ScriptedLLM({"script": script}, tmp_path) as server:
        report = run_agent(store, _config(server, context_tokens=4_500))
        requests = server.requests()
    [episode] = run_episodes(store, report.run_id)
    notes = [s.result["compacted"] for s in steps_of(store, episode.id) if s.kind == "note" and "compacted" in s.result]
    assert episode.status == "submitted" and notes and all(n["tokens_after"] < n["budget_tokens"] for n in notes)
    assert not any(r["refused"] for r in requests)
    # The stated budget holds for what is sent: the conversation and the tools' schemas, at 4 characters a token.
    assert max(r["chars"] for r in requests) + 5_955 < 4_500 * 4


def test_an_unworded_refusal_after_tools_worked_is_compacted_too(tmp_path: Path, store) -> None:
    """A 400 that does not say why, once tool calls have gone through, is the conversation's length:
    never 'the endpoint does not support function calling'."""
    script = [reply(WRITE)] + [reply(call("assemble"))] * 5 + [reply(call("submit"))]
    rec = {"script": script, "context_chars": 12_000, "overflow_message": "Bad Request"}
    with ScriptedLLM(rec, tmp_path) as server:
        report = run_agent(store, _config(server))
    [episode] = run_episodes(store, report.run_id)
    assert episode.status == "submitted" and report.finished


def test_a_prompt_longer_than_the_context_ends_the_episode_with_a_sample(tmp_path: Path, store) -> None:
    with ScriptedLLM({"script": [reply(WRITE)], "context_chars": 1000}, tmp_path) as server:
        report = run_agent(store, _config(server))
        again = run_agent(store, _config(server))  # the same every time: the slot is not tried again
    [episode] = run_episodes(store, report.run_id)
    assert episode.status.startswith("ended: context overflow: the task's prompt alone is about")
    assert report.finished and report.aborted is None
    assert latest_evaluation(store, episode.sample_id).category == "no_candidate"
    assert again.already_done == 1 and again.episodes == 0


def test_overflow_words_are_recognised() -> None:
    for text in ("This model's maximum context length is 32768 tokens. However, you requested 40000 tokens",
                 "prompt is too long: 210000 tokens > 200000 maximum", "context_length_exceeded",
                 "Input tokens exceed the configured limit", "the request exceeds the available context size (n_ctx)"):
        assert is_overflow(400, text), text
    assert not is_overflow(400, "tool calling is not enabled on this server")
    assert not is_overflow(500, "maximum context length")


# -- a kernel is sent once ----------------------------------------------------------------------------


def test_a_large_kernel_is_sent_once_and_edited_in_place(tmp_path: Path, store) -> None:
    args = expert_arguments(TASK)
    padding = "".join(f"// padding line {i:06d} of a large module\n" for i in range(3000))  # 123,000 characters
    big = padding + args["code"]
    line = next(ln for ln in args["code"].splitlines() if "add.f32" in ln)
    script = [reply(call("write_file", {**args, "code": big})),
              reply(call("edit_file", {"old": "// padding line 000007 of a large module\n", "new": ""})),
              reply(call("assemble")), reply(call("check")), reply(call("submit"))]
    with ScriptedLLM({"script": script}, tmp_path) as server:
        report = run_agent(store, _config(server))
        requests = server.requests()
    assert len(requests) == 5 and all(r["chars"] < 30_000 for r in requests)  # the 126 KB kernel never went back
    [episode] = run_episodes(store, report.run_id)
    sample = get_sample(store, episode.sample_id)
    assert sample.code == big.replace("// padding line 000007 of a large module\n", "") and line in sample.code
    assert latest_evaluation(store, sample.id).category == "ok"
    stored = store.execute("SELECT SUM(LENGTH(arguments)) FROM agent_steps WHERE episode_id = ?",
                           [episode.id]).fetchone()[0]
    assert len(big) < stored < len(big) + 5_000  # the kernel once, in the write_file step


# -- budgets inside a step ----------------------------------------------------------------------------


def test_a_reply_past_the_token_budget_runs_none_of_its_tools(tmp_path: Path, store) -> None:
    greedy = reply(WRITE, call("submit"), usage={"prompt_tokens": 10_000_000, "completion_tokens": 5})
    with ScriptedLLM({"script": [greedy]}, tmp_path) as server:
        report = run_agent(store, _config(server, tokens=100_000))
    [episode] = run_episodes(store, report.run_id)
    assert episode.turns == 1 and episode.tool_calls == 0
    assert episode.status.startswith("ended: token budget used up (100,000 tokens)")
    assert [s.status for s in steps_of(store, episode.id) if s.kind == "tool"] == ["skipped: token budget used up"] * 2
    assert latest_evaluation(store, episode.sample_id).category == "no_candidate"


def test_the_wall_budget_bounds_the_wait_for_a_reply(tmp_path: Path, store) -> None:
    with ScriptedLLM({"script": [{"content": "thinking…", "delay_s": 60}]}, tmp_path) as server:
        started = time.monotonic()
        report = run_agent(store, _config(server, wall_s=2))
        took = time.monotonic() - started
    [episode] = run_episodes(store, report.run_id)
    assert took < 15 and episode.status.startswith("ended: wall-time budget used up (2 s) waiting for a reply")


def test_the_wall_budget_is_each_tool_calls_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    import ptxbench.engine.static as static

    seen: list[float] = []
    real = static.judge_static

    def spy(*args, **kwargs):
        seen.append(kwargs["timeout"])
        return real(*args, **kwargs)

    monkeypatch.setattr(static, "judge_static", spy)
    tools = JudgeTools(get_task(TASK), GpuAccess())
    tools.call("assemble", expert_arguments(TASK), deadline=time.monotonic() + 7.0)
    assert seen and 5.0 < seen[0] <= 7.0  # the assembler's deadline cut to the episode's
    late = tools.call("assemble", {}, deadline=time.monotonic() - 1)
    assert late.status == "skipped: the episode's time is used up" and len(seen) == 1


def test_every_answer_says_the_budget_left_and_warns_before_the_last_call(tmp_path: Path, store) -> None:
    script = [reply(WRITE), reply(call("assemble")), reply(call("submit"))]
    with ScriptedLLM({"script": script}, tmp_path) as server:
        report = run_agent(store, _config(server, tool_calls=3, turns=3, tokens=1_000_000))
        requests = server.requests()
    answers = _tool_messages(requests[-1])
    assert [a["budget_left"]["tool_calls"] for a in answers] == [2, 1]
    assert [a["budget_left"]["replies"] for a in answers] == [2, 1]
    assert all({"tokens", "seconds", "gpu_seconds"} <= set(a["budget_left"]) for a in answers)
    assert "warning" not in answers[0]
    assert "one tool call is left: make it `submit`" in answers[1]["warning"]
    assert "your next reply is your last" in answers[1]["warning"]
    [episode] = run_episodes(store, report.run_id)
    assert episode.status == "submitted"


# -- one prompt, and no reasoning sent back -------------------------------------------------------------


def test_one_prompt_and_no_reasoning_sent_back(tmp_path: Path, store) -> None:
    script = [reply(WRITE, content="Writing it.", reasoning="PRIVATE-CHAIN-OF-THOUGHT-42"), reply(call("submit"))]
    with ScriptedLLM({"script": script}, tmp_path) as server:
        report = run_agent(store, _config(server))
        requests = server.requests()
    system, user = requests[0]["messages"][0]["content"], requests[0]["messages"][1]["content"]
    assert "fenced code block" not in system and "one fenced code block" not in user
    assert "`submit`" in system and "write_file" in user and "Budget:" in user
    second = json.dumps(requests[1]["messages"])
    assert "PRIVATE-CHAIN-OF-THOUGHT-42" not in second and "Writing it." in second
    [episode] = run_episodes(store, report.run_id)
    first_reply = next(s for s in steps_of(store, episode.id) if s.kind == "model")
    assert "PRIVATE-CHAIN-OF-THOUGHT-42" in first_reply.result["content"]  # kept in the store


# -- a stop ---------------------------------------------------------------------------------------------


def test_sigterm_marks_the_episodes_interrupted_and_a_rerun_resumes(tmp_path: Path) -> None:
    db = tmp_path / "cli.sqlite"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with ScriptedLLM({"script": [{"content": "…", "delay_s": 120}]}, tmp_path / "slow") as slow:
        base = [sys.executable, "-m", "ptxbench.cli.main", "run", "--agent", "--model", "m", "--tasks", TASK,
                "--db", str(db), "--retries", "0"]
        proc = subprocess.Popen(base + ["--base-url", slow.base_url, "--create"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 90
        while not slow.requests() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert slow.requests(), proc.stderr.read() if proc.poll() is not None else "no request came"
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3 and "interrupted" in err
    import sqlite3

    rows = sqlite3.connect(db).execute("SELECT status, sample_id FROM agent_episodes").fetchall()
    assert rows == [("ended: interrupted", None)]
    with ScriptedLLM({"script": [reply(WRITE), reply(call("submit"))]}, tmp_path / "fast") as fast:
        resumed = subprocess.run(base + ["--base-url", fast.base_url], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    rows = sqlite3.connect(db).execute("SELECT status FROM agent_episodes ORDER BY id").fetchall()
    assert rows == [("ended: interrupted",), ("submitted",)]
