"""`ptxbench run` judged on many workers (`--gpus`, `--cluster`) with no GPU.

The model is the loopback chat server (tests/llm_server.py) replaying the repository's expert
kernels and their mutations; judging is the real static engine on a pool of CPU slots, on
stand-in GPU workers that speak the real protocol, and on a Dask LocalCluster. Every run is
compared with the same run judged on this process's own worker, row by row.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from llm_server import LoopbackLLM, expert_reply, mutation_reply
from ptxbench.cli.main import app
from ptxbench.db.generation import run_samples
from ptxbench.db.queries import evaluations_for, latest_evaluation
from ptxbench.db.seed import ensure_default_store
from ptxbench.models.generate import RunConfig, run_model
from ptxbench.services import runs
from ptxbench.services.pool import GpuPool
from ptxbench.services.turn_judging import ParallelJudge
from test_pool import _slot, _static_slots
from test_pool import stub as stub  # the stand-in GPU worker fixture
from proc_rest import rest_of

pytestmark = pytest.mark.timeout(60)

TASKS = ("vector_add_smoke", "gemm_bf16_sm90a", "attn_fwd_sm90a")
FAST = dict(backoff_s=0.01, backoff_max_s=0.05, timeout_s=20.0)


@pytest.fixture(autouse=True)
def _cache(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "asm-cache"))


def _recording() -> dict:
    """Turn 1 fails (a syntax error, a wrong target, prose), turn 2 fixes vector add and GEMM; attention
    never gets a kernel, so its trajectories use every turn."""
    return {
        "replies": {
            "vector_add_smoke": {
                "1": [{"content": mutation_reply("add-missing-semicolon")}],
                "*": [{"content": expert_reply("vector_add_smoke")}],
            },
            "gemm_bf16_sm90a": {
                "1": [{"content": mutation_reply("gemm-wrong-target")}],
                "*": [{"content": expert_reply("gemm_bf16_sm90a")}],
            },
            "*": {"*": [{"content": "I would tile it and use tensor cores; no code yet."}]},
        }
    }


def _store(path: Path):
    return ensure_default_store(path)


def _verdicts(db, run_id: int) -> dict[tuple[str, int, int], str]:
    """(task, sample index, turn) → the category of its one row; every turn has exactly one row."""
    out = {}
    for s in run_samples(db, run_id):
        rows = evaluations_for(db, s.id)
        assert len(rows) == 1, f"sample {s.id} has {len(rows)} rows"
        out[(s.task_id, s.sample_index, s.turn)] = rows[0].category
    return out


def _config(server: LoopbackLLM, **kw) -> RunConfig:
    return RunConfig(model="loopback", base_url=server.base_url, tasks=TASKS, turns=3, samples=2, **{**FAST, **kw})


def test_a_run_on_a_pool_stores_what_one_worker_stores(tmp_path: Path) -> None:
    one, pooled = _store(tmp_path / "one.sqlite"), _store(tmp_path / "pool.sqlite")
    events: list[dict] = []
    with LoopbackLLM(_recording(), tmp_path) as server:
        alone = run_model(one, _config(server))
        judge = ParallelJudge(GpuPool(_static_slots(2), static_only=True), gpu=False, progress=events.append)
        judge.start({"sm_90a"})
        try:
            spread = runs.run(pooled, _config(server), progress=events.append, judge=judge)
        finally:
            judge.close()
    assert alone.finished and spread.finished and spread.judged == alone.judged == spread.stored
    verdicts = _verdicts(pooled, spread.run_id)
    assert verdicts == _verdicts(one, alone.run_id)
    assert verdicts[("vector_add_smoke", 0, 1)] == "syntax" and verdicts[("gemm_bf16_sm90a", 1, 2)] == "ok"
    assert ("gemm_bf16_sm90a", 0, 3) not in verdicts and verdicts[("attn_fwd_sm90a", 1, 3)] == "no_candidate"
    workers = {latest_evaluation(pooled, s.id).evidence["worker"]["name"] for s in run_samples(pooled, spread.run_id)}
    assert workers <= {"cpu0", "cpu1"} and workers
    assert [e["worker"] for e in events if e["event"] == "worker" and e["state"] == "ready"] == ["cpu0", "cpu1"]
    # A turn's row comes before the next turn of its trajectory is asked for: each turn's parent is judged.
    for s in run_samples(pooled, spread.run_id):
        if s.parent_id is not None:
            assert latest_evaluation(pooled, s.parent_id).id < latest_evaluation(pooled, s.id).id


def test_a_gpu_run_on_two_stand_in_gpus_feeds_their_verdicts_back(tmp_path: Path, stub: Path) -> None:
    db = _store(tmp_path / "store.sqlite")
    recording = {
        "replies": {
            "*": {
                "1": [{"content": mutation_reply("add-missing-semicolon")}],
                "*": [{"content": expert_reply("vector_add_smoke")}],
            }
        }
    }
    slots = [_slot(stub, "gpu0", "GPU-x"), _slot(stub, "gpu1", "GPU-y")]
    with LoopbackLLM(recording, tmp_path) as server:
        judge = ParallelJudge(GpuPool(slots), gpu=True)
        judge.start({"sm_90a"})
        try:
            config = RunConfig(
                model="loopback",
                base_url=server.base_url,
                tasks=("vector_add_smoke",),
                turns=2,
                samples=4,
                gpu=True,
                **FAST,
            )
            report = runs.run(db, config, judge=judge)
        finally:
            judge.close()
        second_turns = [r for r in server.requests() if r["turn"] == 2]
    assert report.finished and report.judged == 8
    rows = {(s.sample_index, s.turn): latest_evaluation(db, s.id) for s in run_samples(db, report.run_id)}
    assert {rows[(i, 1)].category for i in range(4)} == {"syntax"}
    for i in range(4):
        row = rows[(i, 2)]
        assert row.status == "judged" and row.device == "Stub GPU" and row.category == "ok" and row.speedup == 1.0
        assert row.evidence["worker"]["name"] in ("gpu0", "gpu1") and "shared_gpu" not in row.evidence
    assert len(second_turns) == 4 and all("syntax" in r["messages"][-1]["content"] for r in second_turns)


def _run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ptxbench.cli.main", "run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.timeout(120)
def test_run_on_a_dask_cluster_from_the_command_line_and_resume(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    path = tmp_path / "cluster.sqlite"
    one = _store(tmp_path / "one.sqlite")
    env = {"PTXBENCH_CACHE": str(tmp_path / "cache")}
    with LoopbackLLM(_recording(), tmp_path) as server:
        args = [
            "--model",
            "loopback",
            "--base-url",
            server.base_url,
            "--tasks",
            ",".join(TASKS),
            "--samples",
            "2",
            "--turns",
            "3",
            "--backoff",
            "0.01",
            "--gpu",
            "off",
            "--db",
            str(path),
            "--create",
            "--json",
        ]
        proc = _run_cli(*args, "--cluster", "local:2", env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        alone = run_model(one, _config(server))
        asked = len(server.requests())
        again = _run_cli(*args, "--cluster", "local:1", env=env)
        asked_again = len(server.requests()) - asked
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert {e["worker"] for e in events if e["event"] == "worker" and e["state"] == "ready"} and any(
        e["event"] == "log" and "2 worker(s)" in e["message"] for e in events
    )
    done = next(e for e in events if e["event"] == "done")
    db = _store(path)
    verdicts = _verdicts(db, done["run_id"])
    assert verdicts == _verdicts(one, alone.run_id)
    assert {
        latest_evaluation(db, s.id).evidence["worker"]["attempt"].split(":")[1] for s in run_samples(db, done["run_id"])
    } == {str(s.id) for s in run_samples(db, done["run_id"])}
    # The same command again resumes: nothing asked, nothing judged twice.
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = [json.loads(line) for line in again.stdout.splitlines() if line.strip()]
    finished = next(e for e in resumed if e["event"] == "done")
    assert finished["requests"] == 0 and finished["judged"] == 0 and finished["already_done"] == len(verdicts)
    assert _verdicts(db, done["run_id"]) == verdicts and asked_again == 0
    db.conn.close()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--gpu", "off", "--gpus", "0"], "needs no GPU"),
        (["--gpu", "off", "--workers-per-gpu", "2"], "needs --gpus"),
        (["--gpu", "off", "--cluster", "10.0.0.1:8786"], "scheduler's address"),
        (["--gpu", "off", "--cluster", "local:2", "--gpus", "all"], "leave out --gpus"),
        (["--agent", "--cluster", "local:2"], "do not apply to --agent"),
    ],
)
def test_run_refuses_options_that_do_not_fit(tmp_path: Path, args: list[str], says: str) -> None:
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--tasks",
            "vector_add_smoke",
            "--db",
            str(tmp_path / "s.sqlite"),
            "--create",
            *args,
        ],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split()), result.output


# -- a stop ------------------------------------------------------------------------------------------------


def test_a_stop_keeps_the_running_judgements_and_a_resume_judges_the_rest(tmp_path: Path, stub: Path) -> None:
    from ptxbench.services.batch import StopFlag

    db = _store(tmp_path / "store.sqlite")
    recording = {"replies": {"*": {"*": [{"content": expert_reply("vector_add_smoke")}]}}}
    # gpu0 judges in a fraction of a second, gpu1 in seconds: the stop comes at a row of gpu0's while gpu1 is busy.
    pool = GpuPool([_slot(stub, "gpu0", "GPU-x", STUB_SLEEP="0.3"), _slot(stub, "gpu1", "GPU-y", STUB_SLEEP="2")])
    stop = StopFlag()
    events: list[dict] = []

    def progress(event: dict) -> None:
        events.append(event)
        if event["event"] == "turn" and pool.slots[1].busy_since is not None:
            stop.set()

    with LoopbackLLM(recording, tmp_path) as server:
        config = RunConfig(
            model="loopback", base_url=server.base_url, tasks=("vector_add_smoke",), samples=6, gpu=True, **FAST
        )
        judge = ParallelJudge(pool, gpu=True, progress=progress, stop=stop)
        judge.start({"sm_90a"})
        try:
            first = runs.run(db, config, progress=progress, judge=judge, stop=stop)
        finally:
            judge.close()
        assert first.stopped and not first.finished and first.stored == 6 and first.unjudged >= 1
        rows = {s.id: evaluations_for(db, s.id) for s in run_samples(db, first.run_id)}
        judged = [sid for sid, r in rows.items() if r]
        assert len(judged) == first.judged == 6 - first.unjudged and all(len(rows[sid]) == 1 for sid in judged)
        assert "gpu1" in {rows[sid][0].evidence["worker"]["name"] for sid in judged}  # running at the stop: kept
        logs = [e["message"] for e in events if e["event"] == "log"]
        assert any(m.startswith("stopping:") for m in logs)
        assert any(m.startswith("stopped:") and f"{first.unjudged} stored turn(s) left unjudged" in m for m in logs)
        # The same run again judges what the stop left, asks nothing, and judges nothing twice.
        judge = ParallelJudge(GpuPool([_slot(stub, "gpu0", "GPU-x")]), gpu=True)
        judge.start({"sm_90a"})
        try:
            second = runs.run(db, config, judge=judge)
        finally:
            judge.close()
    assert second.finished and second.requests == 0 and second.judged == first.unjudged
    assert all(len(evaluations_for(db, s.id)) == 1 for s in run_samples(db, first.run_id))


def test_sigint_stops_a_run_drops_the_requests_in_flight_and_a_resume_asks_them_again(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    slow_after_the_first = {
        "replies": {
            "*": {
                "*": [
                    {"content": expert_reply("vector_add_smoke")},
                    {"content": expert_reply("vector_add_smoke"), "delay_s": 15},
                ]
            }
        }
    }
    env = {**os.environ, "PTXBENCH_CACHE": str(tmp_path / "cache")}
    with LoopbackLLM(slow_after_the_first, tmp_path / "slow") as server:
        args = [
            "--model",
            "loopback",
            "--base-url",
            server.base_url,
            "--tasks",
            "vector_add_smoke",
            "--samples",
            "3",
            "--gpu",
            "off",
            "--db",
            str(path),
            "--create",
            "--backoff",
            "0.01",
        ]
        proc = subprocess.Popen(
            [sys.executable, "-m", "ptxbench.cli.main", "run", *args, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if '"event": "turn"' in line:
                proc.send_signal(signal.SIGINT)
                break
        out, err = rest_of(proc, timeout=60)
    assert proc.returncode == 3, err[-3000:]
    events = [json.loads(line) for line in "".join(lines + [out]).splitlines() if line.strip()]
    done = next(e for e in events if e["event"] == "done")
    assert done["stopped"] and done["dropped"] == 2 and done["stored"] == done["judged"] == 1
    assert any(e["event"] == "log" and e["message"].startswith("stopped:") for e in events)
    with LoopbackLLM({"replies": {"*": {"*": [{"content": expert_reply("vector_add_smoke")}]}}}, tmp_path) as server:
        again = _run_cli(*args[:3], server.base_url, *args[4:], env=env)
        asked = len(server.requests())
    assert again.returncode == 0, again.stderr[-3000:]
    assert asked == 2  # only the two requests the stop dropped
    db = _store(path)
    assert _verdicts(db, done["run_id"]) == {("vector_add_smoke", i, 1): "ok" for i in range(3)}
    db.conn.close()
