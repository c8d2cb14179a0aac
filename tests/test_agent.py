"""Agent episodes against a real chat-completions server on loopback that speaks function calling.

The server (tests/llm_server.py) is a child process; the client goes through the openai SDK and a
socket; the tools are the real static engine (ptxas). Replies call tools — several in one reply,
with malformed arguments, a tool that does not exist — and submit the repository's expert
kernel after checking a mutation of it; other episodes never submit, or meet an endpoint without
function calling. Nothing inside PTXBench is replaced.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llm_server import LoopbackLLM, expert_arguments, mutation_arguments
from ptxbench.db.queries import get_sample, latest_evaluation
from ptxbench.db.seed import ensure_default_store
from ptxbench.db.trajectories import episode_for_sample, run_episodes, step_arguments, steps_of
from ptxbench.models.agent import AgentBudget, AgentConfig, ToolCallingUnsupported, run_agent
from ptxbench.models.agent_tools import GpuAccess, JudgeTools, scrub, tool_schemas
from ptxbench.services.hardware import gpu_archs
from ptxbench.tasks.spec import get_task

FAST = dict(backoff_s=0.01, backoff_max_s=0.05, timeout_s=20.0, retries=1)
TASK = "vector_add_smoke"
NO_GPU = not gpu_archs()


@pytest.fixture
def store(tmp_path: Path):
    db = ensure_default_store(tmp_path / "store.sqlite")
    yield db
    db.conn.close()


def _config(server: LoopbackLLM, **budget) -> AgentConfig:
    return AgentConfig(model="loopback", base_url=server.base_url, tasks=(TASK,), budget=AgentBudget(**budget), **FAST)


def _scripted() -> dict:
    """Reply 1: two calls at once on a broken variant; reply 2: broken JSON and an unknown tool;
    reply 3: submit the expert (with usage that reports a cost)."""
    bad, good = mutation_arguments("add-wrong-op"), expert_arguments(TASK)
    return {"replies": {TASK: {
        "1": [{"content": "Checking a first attempt.", "tool_calls": [
            {"name": "assemble", "arguments": json.dumps(bad)}, {"name": "check", "arguments": json.dumps(bad)}]}],
        "2": [{"tool_calls": [{"name": "check", "arguments": '{"code": "unterminated'},
                              {"name": "profile", "arguments": "{}"}]}],
        "3": [{"tool_calls": [{"name": "submit", "arguments": json.dumps(good)}],
               "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "cost": 0.0125}}],
    }}}


def test_an_episode_lands_a_judged_kernel_and_its_trajectory(tmp_path: Path, store) -> None:
    with LoopbackLLM(_scripted(), tmp_path) as server:
        report = run_agent(store, _config(server))
        requests = server.requests()
    assert report.finished and report.submitted == 1 and report.judged == 1 and report.tool_calls == 5
    [episode] = run_episodes(store, report.run_id)
    assert episode.status == "submitted" and episode.turns == 3 and episode.tool_calls == 5
    assert episode.cost == pytest.approx(0.0125) and episode.tokens_in and episode.tokens_in >= 1000
    steps = steps_of(store, episode.id)
    assert [(s.kind, s.tool) for s in steps] == [
        ("model", None), ("tool", "assemble"), ("tool", "check"), ("model", None), ("tool", "check"),
        ("tool", "profile"), ("model", None), ("tool", "submit")]
    assert [s.step for s in steps] == list(range(1, 9))
    assemble, check = steps[1], steps[2]
    assert assemble.status == "ok" and assemble.result["category"] == "ok"  # the wrong add assembles fine
    if NO_GPU:
        # Honest without a GPU: nothing ran, and the answer says so.
        assert check.status == "skipped: no sm_90a device" and check.result["status"] == check.status
        assert "correct_at_train_sizes" not in check.result
    assert steps[4].status == "error: bad arguments" and "not valid JSON" in steps[4].result["error"]
    assert steps[5].status == "error: unknown tool" and "assemble, check, time, submit" in steps[5].result["error"]
    assert step_arguments(steps[5]) == {} and step_arguments(steps[4]) == '{"code": "unterminated'
    # The submitted kernel is a sample of the run, judged in full, and points back at its episode.
    sample = get_sample(store, episode.sample_id)
    assert sample.language == "ptx" and sample.code == expert_arguments(TASK)["code"] and sample.turn == 3
    evaluation = latest_evaluation(store, sample.id)
    assert evaluation.category == "ok" and evaluation.source == "ptxbench run --agent"
    assert evaluation.evidence["agent"]["episode_id"] == episode.id
    assert episode_for_sample(store, sample.id).id == episode.id
    # The protocol on the wire: tools offered, both parallel calls answered by id in the next request.
    assert requests[0]["tools"] == ["write_file", "edit_file", "apply_patch", "read_file",
                                    "assemble", "check", "time", "submit"]
    second = requests[1]["messages"]
    calls = second[-3]["tool_calls"]
    answers = [m for m in second if m["role"] == "tool"]
    assert len(calls) == 2 and [a["tool_call_id"] for a in answers] == [c["id"] for c in calls]
    # Held-out sizes never reach the model.
    held_out = str(get_task(TASK).heldout[0]["N"])
    assert all(held_out not in json.dumps(r["messages"]) for r in requests)


def test_an_episode_that_never_submits_is_a_failure_that_says_why(tmp_path: Path, store) -> None:
    rec = {"replies": {TASK: {"*": [{"content": "I would write a kernel like this.", "usage": None}]}}}
    with LoopbackLLM(rec, tmp_path) as server:
        report = run_agent(store, _config(server))
    [episode] = run_episodes(store, report.run_id)
    assert episode.status == "ended: the model stopped calling tools without a submit"
    assert episode.turns == 2 and episode.tokens_in is None  # the endpoint reported no usage
    kinds = [(s.kind, s.status) for s in steps_of(store, episode.id)]
    assert kinds == [("model", "ok"), ("note", "ok"), ("model", "ok"), ("note", "ok")]
    evaluation = latest_evaluation(store, episode.sample_id)
    assert evaluation.category == "no_candidate" and "never called submit" in evaluation.evidence["extract"]["reason"]
    assert report.finished  # a model's failure, not the run's


def test_budgets_end_an_episode(tmp_path: Path, store) -> None:
    good = json.dumps(expert_arguments(TASK))
    rec = {"replies": {TASK: {"*": [{"tool_calls": [{"name": "assemble", "arguments": good}] * 2}]}}}
    with LoopbackLLM(rec, tmp_path) as server:
        report = run_agent(store, _config(server, tool_calls=3))
    [episode] = run_episodes(store, report.run_id)
    assert episode.status.startswith("ended: tool-call budget used up (3 calls)")
    statuses = [s.status for s in steps_of(store, episode.id) if s.kind == "tool"]
    assert statuses == ["ok", "ok", "ok", "skipped: budget used up"] and episode.tool_calls == 3
    with LoopbackLLM(rec, tmp_path) as server:
        report = run_agent(store, AgentConfig(model="loopback", base_url=server.base_url, tasks=(TASK,),
                                              budget=AgentBudget(tokens=10), run_name="tokens", **FAST))
    [episode] = run_episodes(store, report.run_id)
    assert episode.turns == 1 and episode.status.startswith("ended: token budget used up")


def test_a_rerun_skips_finished_episodes(tmp_path: Path, store) -> None:
    with LoopbackLLM(_scripted(), tmp_path) as server:
        first = run_agent(store, _config(server))
        again = run_agent(store, _config(server))
        assert len(server.requests()) == 3
    assert again.run_id == first.run_id and again.resumed and again.already_done == 1 and again.episodes == 0


def test_an_endpoint_without_function_calling_is_said_plainly(tmp_path: Path, store) -> None:
    rec = {"refuse_tools": True, "replies": {TASK: {"*": [{"content": "no tools here"}]}}}
    with LoopbackLLM(rec, tmp_path) as server:
        with pytest.raises(ToolCallingUnsupported, match="does not support function calling"):
            run_agent(store, _config(server))
        db = tmp_path / "cli.sqlite"
        base = [sys.executable, "-m", "ptxbench.cli.main", "run", "--agent", "--model", "m", "--base-url",
                server.base_url, "--tasks", TASK, "--db", str(db), "--create", "--retries", "0"]
        refused = subprocess.run(base, capture_output=True, text=True, timeout=120)
        fell_back = subprocess.run(base + ["--agent-fallback", "turns", "--turns", "2"], capture_output=True,
                                   text=True, timeout=120)
    assert refused.returncode == 4 and "--agent-fallback turns" in refused.stderr
    assert fell_back.returncode == 0, fell_back.stderr
    assert "ran the plain multi-turn mode instead" in fell_back.stderr and "no_candidate" in fell_back.stdout


def test_the_tools_hide_seeds_and_say_what_they_need() -> None:
    assert scrub("trial failed (seed 4242424242): wrong", (4242424242,)) == "trial failed (a trial input): wrong"
    assert "seed" not in scrub("seeds [12, 34] differ")
    names = [t["function"]["name"] for t in tool_schemas()]
    assert names == ["write_file", "edit_file", "apply_patch", "read_file", "assemble", "check", "time", "submit"]
    tools = JudgeTools(get_task(TASK), GpuAccess(archs=("sm_100a",), enabled=True))
    out = tools.call("time", json.dumps(expert_arguments(TASK)))
    assert out.status == "skipped: no sm_90a device" and out.gpu_s == 0
    out = tools.call("check", {"code": expert_arguments(TASK)["code"], "manifest": {"launches": "x"}})
    assert out.result["category"] == "bad_manifest"


def test_plain_feedback_keeps_the_trial_seeds_out_too() -> None:
    from ptxbench.db.records import Evaluation, Measurement
    from ptxbench.models.refine import feedback_message

    spec = get_task(TASK)
    sizes = dict(spec.train[0])
    evaluation = Evaluation(sample_id=1, engine_version="t", status="judged", category="unwritten_output",
                            source="t", evidence={"seeds": [987654321987], "sizes": [
                                {"split": "train", "sizes": sizes, "message": "3 elements unwritten (seed 987654321987)"}]})
    text = feedback_message(spec, evaluation, [Measurement(split="train", sizes=sizes, category="unwritten_output")])
    assert "unwritten" in text and "987654321987" not in text and "seed" not in text
