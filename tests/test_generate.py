"""Model runs against a real chat-completions server on loopback (tests/llm_server.py).

The server is a child process speaking HTTP; the client goes through the
openai SDK and a socket. Replies are the repository's expert kernels and
their mutations, plus rate limits, server errors, slow and truncated replies
and replies with no code. Judging is the real static engine (ptxas).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from llm_server import LoopbackLLM, expert_reply, mutation_reply
from ptxbench.db.generation import run_samples, update_run_params
from ptxbench.db.metrics import compute_metrics
from ptxbench.db.queries import get_run, latest_evaluation
from ptxbench.db.records import Sample
from ptxbench.db.seed import ensure_default_store
from ptxbench.db.writes import add_sample
from ptxbench.models.client import ChatClient, ClientConfig, EndpointError, backoff_delay
from ptxbench.models.generate import RunConfig, RunMismatch, run_model
from ptxbench.tasks.prompts import PROMPT_VERSION
from ptxbench.tasks.spec import all_tasks

HOPPER = tuple(t.id for t in all_tasks() if t.arch == "sm_90a")
FAST = dict(backoff_s=0.01, backoff_max_s=0.05, timeout_s=20.0)


@pytest.fixture
def store(tmp_path: Path):
    db = ensure_default_store(tmp_path / "store.sqlite")
    yield db
    db.conn.close()


def _complete(server: LoopbackLLM, messages=None, **overrides):
    cfg = ClientConfig(base_url=server.base_url, model="loopback", **{**FAST, "retries": 4, **overrides})

    async def go():
        client = ChatClient(cfg, rng=random.Random(0))
        try:
            if isinstance(messages, list) and messages and isinstance(messages[0], list):
                return await asyncio.gather(*(client.complete(m) for m in messages))
            return await client.complete(messages or [{"role": "user", "content": "# Task `vector_add_smoke`"}])
        finally:
            await client.close()

    return asyncio.run(go())


# -- the client ------------------------------------------------------------------------------

def test_client_rides_out_429_500_drop_and_slow_reply(tmp_path: Path) -> None:
    rec = {"replies": {"vector_add_smoke": {"1": [
        {"status": 429, "retry_after": 0}, {"status": 500}, {"drop": True}, {"content": "late", "delay_s": 2.0},
        {"content": expert_reply("vector_add_smoke")}]}}}
    with LoopbackLLM(rec, tmp_path) as server:
        result = _complete(server, timeout_s=0.5)
        kinds = [r["reply"] for r in server.requests()]
    assert result.ok and result.attempts == 5 and "```ptx" in result.content
    assert kinds == ["status", "status", "drop", "content", "content"]
    assert [r.split(": ", 1)[1][:8] for r in result.retried] == ["HTTP 429", "HTTP 500", "connecti", "timed ou"]
    assert result.tokens_in and result.tokens_out and result.latency_s is not None and result.finish_reason == "stop"


def test_client_gives_up_after_its_retries(tmp_path: Path) -> None:
    with LoopbackLLM({"replies": {"*": {"*": [{"status": 503}]}}}, tmp_path) as server:
        result = _complete(server, retries=2)
        assert len(server.requests()) == 3
    assert not result.answered and result.attempts == 3 and "HTTP 503" in (result.error or "")


@pytest.mark.parametrize("reply, why", [({"truncated": "```ptx\n.version 9.0\n```"}, "not valid JSON"),
                                        ({"no_choices": True}, "no choices")])
def test_client_keeps_a_malformed_body_as_the_response(tmp_path: Path, reply, why) -> None:
    with LoopbackLLM({"replies": {"*": {"*": [reply]}}}, tmp_path) as server:
        result = _complete(server)
    assert not result.ok and result.answered and why in (result.malformed or "")
    assert result.content and result.content.startswith("{")  # the raw body, as it came


def test_client_refusal_is_an_endpoint_error(tmp_path: Path) -> None:
    with LoopbackLLM({"replies": {"*": {"*": [{"status": 401}]}}}, tmp_path) as server:
        with pytest.raises(EndpointError, match="HTTP 401"):
            _complete(server)
        assert len(server.requests()) == 1  # never retried


def test_client_bounds_requests_in_flight(tmp_path: Path) -> None:
    with LoopbackLLM({"replies": {"*": {"*": [{"content": "x", "delay_s": 0.3}]}}}, tmp_path) as server:
        results = _complete(server, [[{"role": "user", "content": f"q{i}"}] for i in range(6)], concurrency=2)
        peak = max(r["in_flight"] for r in server.requests())
    assert all(r.ok for r in results) and peak == 2


def test_backoff_grows_exponentially_with_jitter_and_honours_retry_after() -> None:
    rng = random.Random(1)
    delays = [backoff_delay(a, 1.0, 10.0, rng=rng) for a in range(6)]
    for attempt, d in enumerate(delays):
        full = min(10.0, 2.0 ** attempt)
        assert full / 2 <= d <= full
    assert backoff_delay(3, 1.0, 10.0, retry_after=2.5) == 2.5
    assert backoff_delay(3, 1.0, 10.0, retry_after=99) == 10.0


# -- whole runs --------------------------------------------------------------------------------

def _recording() -> dict:
    """Turn 1 fails in a realistic way, turn 2 fixes GEMM and vector add; attention gets prose, then a
    truncated reply, then a kernel without the requested families."""
    return {"replies": {
        "vector_add_smoke": {"1": [{"status": 429, "retry_after": 0}, {"content": mutation_reply("add-missing-semicolon")}],
                             "*": [{"content": expert_reply("vector_add_smoke")}]},
        "gemm_bf16_sm90a": {"1": [{"status": 500}, {"content": mutation_reply("gemm-wrong-target")}],
                            "*": [{"content": expert_reply("gemm_bf16_sm90a")}]},
        "rmsnorm_bf16_sm90a": {"*": [{"content": expert_reply("rmsnorm_bf16_sm90a")}]},
        "*": {"1": [{"content": "I would tile the problem and use tensor cores, but here is only the idea."}],
              "2": [{"truncated": "```ptx\n.version 9.0\n```"}],
              "*": [{"content": expert_reply("vector_add_smoke")}]},
    }}


def test_run_over_hopper_tasks_three_turns_two_contexts(tmp_path: Path, store) -> None:
    with LoopbackLLM(_recording(), tmp_path) as server:
        reports = [run_model(store, RunConfig(model="loopback-replay", base_url=server.base_url, tasks=HOPPER,
                                              context=level, turns=3, temperature=0.2, max_tokens=4096,
                                              api_key_env="PTXBENCH_TEST_KEY", **FAST))
                   for level in ("brief", "full")]
        requests = server.requests()
    for report in reports:
        assert report.finished and not report.failures and report.judged == report.stored
    by_run = {}
    for report in reports:
        run = get_run(store, report.run_id)
        assert run.prompt_version == PROMPT_VERSION and run.finished_at
        assert run.params["temperature"] == 0.2 and run.params["api_key_env"] == "PTXBENCH_TEST_KEY"
        assert set(run.params["prompt_digests"]) == set(HOPPER)
        samples = run_samples(store, report.run_id)
        by_run[run.context_level] = samples
        for s in samples:
            assert s.source == f"model:loopback-replay via {server.base_url}"
            evaluation = latest_evaluation(store, s.id)
            assert evaluation is not None and evaluation.source == "ptxbench run"
            assert s.response is not None and s.latency_s is not None
        turns = {(s.task_id, s.turn): s for s in samples}
        # Fixed at turn 2, so no third turn; attention tasks use all three turns.
        assert turns[("gemm_bf16_sm90a", 1)].response == mutation_reply("gemm-wrong-target")  # as it came
        assert latest_evaluation(store, turns[("gemm_bf16_sm90a", 1)].id).category == "arch_unsupported"
        assert latest_evaluation(store, turns[("gemm_bf16_sm90a", 2)].id).category == "ok"
        assert ("gemm_bf16_sm90a", 3) not in turns and ("rmsnorm_bf16_sm90a", 2) not in turns
        assert latest_evaluation(store, turns[("vector_add_smoke", 1)].id).category == "syntax"
        for task in HOPPER:
            if task not in _recording()["replies"]:       # the attention tasks, LayerNorm, softmax
                t1, t2, t3 = (turns[(task, n)] for n in (1, 2, 3))
                assert (t2.parent_id, t3.parent_id) == (t1.id, t2.id) and t1.parent_id is None
                # Turn 3 answers with the vector-add expert, whose manifest passes tensors (X, Y, Z) the
                # attention task does not have: bad_manifest, as the GPU stage would say before launching.
                assert [latest_evaluation(store, t.id).category for t in (t1, t2, t3)] == [
                    "no_candidate", "no_candidate", "bad_manifest"]
                assert t2.response.startswith("{") and t2.language == "none"   # the truncated body, kept raw
                assert t3.language == "ptx" and ".entry vector_add" in t3.code
    # The endpoint saw the parameters, the key and, at turn 2, the judgement of turn 1.
    assert all(r["temperature"] == 0.2 and r["max_tokens"] == 4096 and r["model"] == "loopback-replay"
               for r in requests)
    vec2 = next(r for r in requests if r["task"] == "vector_add_smoke" and r["turn"] == 2)
    assert [m["role"] for m in vec2["messages"]] == ["system", "user", "assistant", "user"]
    assert "syntax" in vec2["messages"][-1]["content"] and "ptxas rejected it" in vec2["messages"][-1]["content"]
    attn3 = next(r for r in requests if r["task"] == "attn_fwd_sm90a" and r["turn"] == 3)
    assert "did not arrive intact" in attn3["messages"][4]["content"]
    assert "not a chat completion" in attn3["messages"][5]["content"]
    # Metrics per context level and split come straight from what was stored.
    rows = compute_metrics(store, group_by=("context", "split"))
    assert {(r.context, r.split) for r in rows} == {(c, s) for c in ("brief", "full") for s in ("train", "heldout")}
    for r in rows:
        assert r.trajectories == len(HOPPER) and r.compile_rate == pytest.approx(1.0)
        # gemm, rmsnorm and vector add end up using what was asked; the rest (answered by the vector-add
        # expert) do not.
        assert r.uses_rate == pytest.approx(3 / len(HOPPER))


def test_run_survives_the_endpoint_dying_and_resumes(tmp_path: Path, store, monkeypatch) -> None:
    monkeypatch.setenv("PTXBENCH_TEST_KEY", "sk-loopback")
    tasks = ("vector_add_smoke", "gemm_bf16_sm90a", "attn_fwd_sm90a")
    config = dict(model="loopback-replay", tasks=tasks, context="brief", turns=3, samples=2, concurrency=2,
                  retries=1, api_key_env="PTXBENCH_TEST_KEY", **FAST)
    dying = {**_recording(), "die_after": 4}
    with LoopbackLLM(dying, tmp_path) as server:
        first = run_model(store, RunConfig(base_url=server.base_url, **config))
        assert not server.alive()
        assert server.requests()[0]["authorization"] == "Bearer sk-loopback"
    assert not first.finished and first.failures and all(f["kind"] == "request" for f in first.failures)
    stored_before = {s.id: (s.task_id, s.sample_index, s.turn, s.response) for s in run_samples(store, first.run_id)}
    assert stored_before and all(latest_evaluation(store, sid) is not None for sid in stored_before)
    assert get_run(store, first.run_id).finished_at is None

    with LoopbackLLM(_recording(), tmp_path) as server:   # a new server, on another port
        second = run_model(store, RunConfig(base_url=server.base_url, **config))
        asked = {(r["task"], r["turn"]) for r in server.requests() if r["reply"] == "content"}
    assert second.resumed and second.run_id == first.run_id and second.finished
    assert second.already_done == len(stored_before)
    samples = run_samples(store, first.run_id)
    slots = [(s.task_id, s.sample_index, s.turn) for s in samples]
    assert len(slots) == len(set(slots))                      # nothing stored twice
    for s in samples:                                         # nothing lost, everything judged
        if s.id in stored_before:
            assert (s.task_id, s.sample_index, s.turn, s.response) == stored_before[s.id]
        assert latest_evaluation(store, s.id) is not None
    trajectories = {(s.task_id, s.sample_index) for s in samples}
    assert trajectories == {(t, i) for t in tasks for i in range(2)}
    assert asked  # the second server only answered what was missing
    assert second.requests == len(samples) - len(stored_before)


def test_a_stored_response_without_a_verdict_is_judged_not_asked_again(tmp_path: Path, store) -> None:
    with LoopbackLLM(_recording(), tmp_path) as server:
        config = RunConfig(model="loopback-replay", base_url=server.base_url, tasks=("gemm_bf16_sm90a",),
                           context="none", turns=1, **FAST)
        # A crash right after the reply was stored: the sample holds the raw response only.
        from ptxbench.models.generate import ModelRun

        run = ModelRun(store, config)
        run.open_run()
        add_sample(store, Sample(task_id="gemm_bf16_sm90a", language="none", source=config.source,
                                 response=expert_reply("gemm_bf16_sm90a"), run_id=run.report.run_id))
        report = run_model(store, config)
        assert server.requests() == []
    (sample,) = run_samples(store, report.run_id)
    assert report.resumed and report.judged == 1 and report.requests == 0
    assert sample.language == "ptx" and ".entry gemm_bf16_tn_tma" in sample.code and sample.manifest["launches"]
    assert latest_evaluation(store, sample.id).category == "ok"


def test_endpoint_refusal_stops_the_run(tmp_path: Path, store) -> None:
    with LoopbackLLM({"replies": {"*": {"*": [{"status": 401}]}}}, tmp_path) as server:
        report = run_model(store, RunConfig(model="m", base_url=server.base_url, tasks=HOPPER[:2], **FAST))
    assert report.aborted and "HTTP 401" in report.aborted and not report.finished
    assert run_samples(store, report.run_id) == []


def test_resuming_with_a_changed_prompt_is_refused(tmp_path: Path, store) -> None:
    with LoopbackLLM(_recording(), tmp_path) as server:
        config = RunConfig(model="m", base_url=server.base_url, tasks=("vector_add_smoke",), **FAST)
        report = run_model(store, config)
        run = get_run(store, report.run_id)
        update_run_params(store, run.id, {**run.params, "prompt_digests": {"vector_add_smoke": "0" * 64}})
        with pytest.raises(RunMismatch, match="vector_add_smoke"):
            run_model(store, config)
        # Another name starts a fresh run instead.
        fresh = run_model(store, RunConfig(model="m", base_url=server.base_url, tasks=("vector_add_smoke",),
                                           run_name="second try", **FAST))
    assert fresh.run_id != report.run_id and not fresh.resumed


def test_nothing_below_the_model_layer_imports_it() -> None:
    import ast

    root = Path(__file__).resolve().parents[1]
    for folder in ("engine", "db", "tasks"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                assert not any(n.startswith("ptxbench.models") for n in names), f"{path} imports ptxbench.models"
    for path in (root / "models").rglob("*.py"):
        text = path.read_text()
        assert "textual" not in text and "ptxbench.tui" not in text and "ptxbench.cli" not in text, path


def test_a_reply_is_extracted_off_the_event_loop(tmp_path: Path, store, monkeypatch) -> None:
    """Extracting reads the whole reply (up to 4 MiB); a run does it in a thread, so that no reply
    holds up the event loop the other requests and judgements share."""
    import threading

    from ptxbench.models import judging

    on_loop: list[bool] = []
    real = judging.extract

    def watched(response):
        on_loop.append(threading.current_thread() is threading.main_thread())
        return real(response)

    monkeypatch.setattr(judging, "extract", watched)
    with LoopbackLLM(_recording(), tmp_path) as server:
        config = RunConfig(model="loopback-replay", base_url=server.base_url, tasks=("rmsnorm_bf16_sm90a",),
                           context="none", turns=1, **FAST)
        report = run_model(store, config)
    assert report.judged == 1 and on_loop == [False]
