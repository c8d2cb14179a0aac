"""The GPU pool (services/pool.py) and the parallel batch (services/parallel.py) with no GPU.

Static-only batches run the real static stages on the pool's threads; GPU batches run stand-in
workers that speak the real protocol (as tests/test_runner.py and tests/test_pipeline.py do)
through real Runners, and misbehave on request: die in their own step, refuse to start again,
crash in a candidate's launch. Every row is read back from a real store.
"""

from __future__ import annotations

import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from ptxbench.db.queries import evaluations_for, measurements_for
from ptxbench.db.records import Sample
from ptxbench.db.seed import seed_store
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_sample
from ptxbench.engine.runner import RunnerConfig
from ptxbench.services import dispatch
from ptxbench.services import pool as pool_mod
from ptxbench.services import progress as ev
from ptxbench.services.batch import StopFlag, run_batch, select_samples
from ptxbench.services.gpuset import Gpu, choose, gpu_key, shared_keys, spread, visible_gpus
from ptxbench.services.parallel import run_parallel_batch
from ptxbench.services.pool import GpuPool, SlotSpec
from ptxbench.services.errors import UsageError

DATA = Path(__file__).resolve().parent / "data" / "gpu"

STUB = textwrap.dedent(r"""
    import json, os, signal, sys, time
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    env = os.environ
    if env.get("STUB_NO_START_IF") and os.path.exists(env["STUB_NO_START_IF"]):
        sys.exit(7)                                     # the GPU will not come up again

    def emit(obj):
        proto.write(json.dumps(obj) + "\n")

    def mark(path):
        if not path or os.path.exists(path):
            return False
        open(path, "w").close()
        return True

    def size(i, plan):
        out = {"index": i, "split": plan["split"], "sizes": plan["sizes"], "category": "ok", "max_error": 1e-8,
               "trials": [{"seed": s, "category": "ok"} for s in plan["seeds"]]}
        if plan["time"]:
            out["timing"] = {"reps": 30, "time_ms": 2.0, "p10_ms": 1.9, "p90_ms": 2.1, "spread": 0.1,
                             "tflops": 1.0, "baseline": "torch.add", "baseline_ms": 2.0, "speedup": 1.0}
        return out

    jobs = 0
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "exit":
            break
        if msg["op"] == "hello":
            emit({"event": "hello", "ok": True, "device": {
                "name": env.get("STUB_NAME", "Stub GPU"), "arch": env.get("STUB_ARCH", "sm_90a"),
                "compute_capability": [9, 0], "num_sms": 132, "l2_bytes": 1, "memory_bytes": 1, "driver": "stub",
                "versions": {"pid": str(os.getpid())}}})
            continue
        jobs += 1
        plans = msg["job"]["sizes"]
        time.sleep(float(env.get("STUB_SLEEP", "0")))
        if env.get("STUB_DIE_AT_JOB") == str(jobs) and mark(env.get("STUB_MARK")):
            emit({"event": "phase", "phase": "prepare", "size": 0, "deadline_s": 30, "untrusted": False})
            os.kill(os.getpid(), signal.SIGKILL)        # the worker's own step: a tool failure
        if env.get("STUB_CRASH_ONCE") and plans[0]["split"] == "train" and mark(env["STUB_CRASH_ONCE"]):
            emit({"event": "phase", "phase": "launch", "size": 0, "deadline_s": 30, "untrusted": True})
            os.kill(os.getpid(), signal.SIGSEGV)        # the candidate's launch: a verdict
        emit({"event": "done", "result": {"sizes": [size(i, p) for i, p in enumerate(plans)]}})
""")


@pytest.fixture(autouse=True)
def _quick(monkeypatch, tmp_path_factory):
    monkeypatch.setattr(pool_mod, "RESTART_BACKOFF_S", 0.01)
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "asm-cache"))


@pytest.fixture
def stub(tmp_path):
    path = tmp_path / "stub_worker.py"
    path.write_text(STUB)
    return path


def _store(tmp_path: Path, n: int, kernels=("vadd_ok", "vadd_wrong")) -> tuple[object, list[int]]:
    db = open_store(tmp_path / "store.db")
    empty = tmp_path / "seed"
    empty.mkdir(exist_ok=True)
    seed_store(db, empty)
    ids = []
    for i in range(n):
        name = kernels[i % len(kernels)]
        code = (DATA / f"{name}.ptx").read_text() + f"\n// copy {i}\n"
        ids.append(
            add_sample(db, Sample(task_id="vector_add_smoke", language="ptx", code=code, source=f"test:{name}")).id
        )
    return db, ids


class Collect:
    def __init__(self, stop_after: int | None = None, stop: StopFlag | None = None) -> None:
        self.events: list[ev.Event] = []
        self.stop_after, self.stop = stop_after, stop

    def emit(self, event: ev.Event) -> None:
        self.events.append(event)
        if self.stop is not None and self.stop_after is not None and len(self.of(ev.Result)) >= self.stop_after:
            self.stop.set()

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


def _slot(stub: Path, name: str, key: str, **env: str) -> SlotSpec:
    config = RunnerConfig(command=[sys.executable, str(stub)], start_timeout_s=30, env=dict(env))
    return SlotSpec(name, config, key)


def _static_slots(n: int) -> list[SlotSpec]:
    return [SlotSpec(f"cpu{i}", RunnerConfig(), f"cpu{i}") for i in range(n)]


def _one_row_each(db, ids: list[int]) -> list:
    rows = [evaluations_for(db, i) for i in ids]
    assert [len(r) for r in rows] == [1] * len(ids)
    return [r[0] for r in rows]


# -- choosing GPUs -------------------------------------------------------------------------------------

ROWS = [
    ("0", "GPU-aaa", "9.0", "NVIDIA H200"),
    ("1", "GPU-bbb", "9.0", "NVIDIA H200"),
    ("2", "GPU-ccc", "10.0", "NVIDIA B200"),
]


def test_gpus_all_count_and_indices_and_what_is_refused():
    gpus = visible_gpus(ROWS, env={})
    assert [(g.index, g.arch, g.key) for g in gpus] == [
        (0, "sm_90a", "GPU-aaa"),
        (1, "sm_90a", "GPU-bbb"),
        (2, "sm_100a", "GPU-ccc"),
    ]
    assert [g.index for g in choose("all", gpus, {"sm_90a"})] == [0, 1]
    assert [g.index for g in choose("1", gpus, {"sm_90a"})] == [0]
    assert [g.index for g in choose("0,2", gpus)] == [0, 2]
    assert shared_keys([g.key for g in choose("0,0", gpus)]) == {"GPU-aaa"}
    with pytest.raises(UsageError, match="list it twice"):
        choose("3", gpus, {"sm_90a"})
    with pytest.raises(UsageError, match="not a visible GPU"):
        choose("0,7", gpus)
    with pytest.raises(UsageError, match="no NVIDIA GPU"):
        choose("all", [], {"sm_90a"})
    assert [g.key for g in spread(3, choose("1", gpus, {"sm_90a"}))] == ["GPU-aaa"] * 3


def test_cuda_visible_devices_renumbers_and_names_the_physical_gpu():
    gpus = visible_gpus(ROWS, env={"CUDA_VISIBLE_DEVICES": "2,GPU-bbb"})
    assert [(g.index, g.key) for g in gpus] == [(0, "GPU-ccc"), (1, "GPU-bbb")]
    assert gpu_key(1, env={"CUDA_VISIBLE_DEVICES": "2,GPU-bbb"}, rows=ROWS) == "GPU-bbb"
    assert gpu_key(0, env={"CUDA_VISIBLE_DEVICES": "GPU-zzz"}, rows=[]) == "GPU-zzz"


# -- static-only: scheduling and resume ----------------------------------------------------------------


def test_a_static_pool_judges_each_sample_once_as_one_worker_would(tmp_path):
    db, ids = _store(tmp_path, 8)
    sink = Collect()
    assert run_parallel_batch(db, ids, sink, GpuPool(_static_slots(2), static_only=True), static_only=True) == 0
    rows = _one_row_each(db, ids)
    assert [r.category for r in rows] == ["ok", "wrong_result"] * 4 or {r.category for r in rows} <= {"ok"}
    start = sink.of(ev.Start)[0]
    assert start.workers == 2 and start.static_only is True
    results = sink.of(ev.Result)
    assert sorted(r.sample_id for r in results) == sorted(ids)
    assert {r.worker for r in results} <= {"cpu0", "cpu1"}
    assert {r.evidence["worker"]["name"] for r in rows} <= {"cpu0", "cpu1"}
    assert len({r.evidence["worker"]["attempt"] for r in rows}) == len(ids)
    assert sink.events[-1] == ev.Done(judged=8, failed_tool=0, cancelled=False)
    # The same verdicts as the one-worker batch.
    db2, ids2 = _store(tmp_path / "one", 8)
    assert run_batch(db2, ids2, Collect(), static_only=True, stop=StopFlag()) == 0
    assert [r.category for r in rows] == [evaluations_for(db2, i)[0].category for i in ids2]
    # Each sample's events read in order on the wire: sample, its stages, its result.
    for sid in ids[:2]:
        mine = [e for e in sink.events if getattr(e, "sample_id", None) == sid]
        assert isinstance(mine[0], ev.SampleStarted) and isinstance(mine[-1], ev.Result)
        assert mine[0].worker == mine[-1].worker


def test_a_stopped_pool_batch_resumes_with_all_unjudged(tmp_path):
    db, ids = _store(tmp_path, 10)
    stop = StopFlag()
    sink = Collect(stop_after=3, stop=stop)
    run_parallel_batch(db, ids, sink, GpuPool(_static_slots(2), static_only=True), static_only=True, stop=stop)
    done = sink.events[-1]
    assert isinstance(done, ev.Done) and done.cancelled is True
    judged = [i for i in ids if evaluations_for(db, i)]
    assert 3 <= len(judged) < len(ids) and done.judged == len(judged)
    left = [i for i in select_samples(db, None, None, True, True) if i in ids]  # the store has experts too
    assert sorted(left) == sorted(set(ids) - set(judged))
    run_parallel_batch(
        db, left, Collect(), GpuPool(_static_slots(2), static_only=True), static_only=True, stop=StopFlag()
    )
    _one_row_each(db, ids)
    assert not set(select_samples(db, None, None, True, True)) & set(ids)


# -- a stop ---------------------------------------------------------------------------------------------


def _again(event: ev.Event, stop: StopFlag) -> None:
    """The second stop, once the batch has said what it waits for."""
    if isinstance(event, ev.Log) and event.message.startswith("stopping:"):
        stop.abandon()


class StopWhileBusy(Collect):
    """Stops the batch at a row that comes in while `busy` is in the middle of a job."""

    def __init__(self, stop: StopFlag, busy: str) -> None:
        super().__init__()
        self.stop, self.busy = stop, busy

    def emit(self, event: ev.Event) -> None:
        super().emit(event)
        began = any(e.worker == self.busy for e in self.of(ev.SampleStarted))
        if isinstance(event, ev.Result) and event.worker != self.busy and began and self.stop is not None:
            self.stop.set()


def _logs(sink: Collect, prefix: str) -> list[str]:
    return [e.message for e in sink.of(ev.Log) if e.message.startswith(prefix)]


def _resume_completes(db, ids: list[int], stub: Path) -> None:
    """The samples a stop left are judged by the next batch, and no sample ever has two rows."""
    left = [i for i in select_samples(db, None, None, True, False) if i in ids]
    assert left
    run_parallel_batch(db, left, Collect(), GpuPool([_slot(stub, "gpu0", "GPU-x")]), stop=StopFlag())
    assert {r.status for r in _one_row_each(db, ids)} == {"judged"}


def test_a_stop_waits_for_the_running_jobs_and_writes_their_rows(tmp_path, stub):
    db, ids = _store(tmp_path, 8, kernels=("vadd_ok",))
    stop = StopFlag()
    # gpu0 answers at once, gpu1 slowly: the stop comes at a row of gpu0's while gpu1 is in the middle of a job.
    sink = StopWhileBusy(stop, "gpu1")
    slots = [_slot(stub, "gpu0", "GPU-x"), _slot(stub, "gpu1", "GPU-y", STUB_SLEEP="0.7")]
    run_parallel_batch(db, ids, sink, GpuPool(slots), stop=stop)
    done = sink.events[-1]
    assert isinstance(done, ev.Done) and done.cancelled and done.judged < len(ids)
    judged = [i for i in ids if evaluations_for(db, i)]
    assert len(judged) == done.judged and all(len(evaluations_for(db, i)) == 1 for i in judged)
    busy = next(e.sample_id for e in sink.of(ev.SampleStarted) if e.worker == "gpu1")
    assert busy in judged and evaluations_for(db, busy)[0].evidence["worker"]["name"] == "gpu1"
    (stopping,) = _logs(sink, "stopping:")
    assert "running job(s) to write their rows" in stopping and "stop again" in stopping
    at_stop = sink.events.index(next(e for e in sink.of(ev.Log) if e.message == stopping))
    before = sum(isinstance(e, ev.Result) for e in sink.events[:at_stop])
    (stopped,) = _logs(sink, "stopped:")
    assert stopped == (
        f"stopped: {done.judged - before} job(s) running at the stop wrote their rows; "
        f"{len(ids) - done.judged} sample(s) left unjudged for a resume"
    )
    _resume_completes(db, ids, stub)


@pytest.mark.parametrize("how", ["stopped again", "past their deadline"])
def test_a_second_stop_or_the_deadline_leaves_the_running_jobs_for_a_resume(tmp_path, stub, monkeypatch, how):
    if how == "past their deadline":
        monkeypatch.setattr(dispatch, "GPU_JOB_DEADLINE_S", 1.0)
    db, ids = _store(tmp_path, 6, kernels=("vadd_ok",))
    stop = StopFlag()
    sink = StopWhileBusy(stop, "gpu1")
    if how == "stopped again":
        sink.emit = lambda e, emit=sink.emit: (emit(e), _again(e, stop))  # type: ignore[method-assign]
    slots = [_slot(stub, "gpu0", "GPU-x"), _slot(stub, "gpu1", "GPU-y", STUB_SLEEP="60")]
    began = time.monotonic()
    run_parallel_batch(db, ids, sink, GpuPool(slots), stop=stop)
    assert time.monotonic() - began < 20  # not the 60 s gpu1's job would take
    stuck = [e.sample_id for e in sink.of(ev.SampleStarted) if e.worker == "gpu1"]
    assert stuck and all(not evaluations_for(db, i) for i in stuck)
    (stopped,) = _logs(sink, "stopped:")
    assert f"abandoned while running ({how}): {stuck[0]}" in stopped
    assert [e.level for e in sink.of(ev.Log) if e.message == stopped] == ["warning"]
    _resume_completes(db, ids, stub)


# -- GPU batches with stand-in workers ------------------------------------------------------------------


def test_two_workers_on_one_gpu_never_store_a_clean_speedup(tmp_path, stub):
    db, ids = _store(tmp_path, 4, kernels=("vadd_ok",))
    sink = Collect()
    slots = [_slot(stub, "gpu0", "GPU-x"), _slot(stub, "gpu0b", "GPU-x")]
    assert run_parallel_batch(db, ids, sink, GpuPool(slots), stop=StopFlag()) == 0
    assert all(w.shared for w in sink.of(ev.WorkerChanged) if w.state == "ready")
    for row in _one_row_each(db, ids):
        assert row.status == "judged" and row.device == "Stub GPU"
        assert row.category == "no_baseline" and row.speedup is None and row.time_ms is None
        shared = row.evidence["shared_gpu"]
        assert shared["workers_on_gpu"] == 2 and shared["figures"]["speedup"] == 1.0
        assert shared["category_from_shared_timing"] == "ok"
        assert "shared by 2 workers" in row.evidence["baseline_missing"]
        assert all(m.speedup is None and m.time_ms is None for m in measurements_for(db, row.id))


def test_two_gpus_time_cleanly_and_share_the_work(tmp_path, stub):
    db, ids = _store(tmp_path, 6, kernels=("vadd_ok",))
    sink = Collect()
    slots = [_slot(stub, "gpu0", "GPU-x", STUB_SLEEP="0.2"), _slot(stub, "gpu1", "GPU-y", STUB_SLEEP="0.2")]
    assert run_parallel_batch(db, ids, sink, GpuPool(slots), stop=StopFlag()) == 0
    rows = _one_row_each(db, ids)
    assert all(r.category == "ok" and r.speedup == 1.0 and "shared_gpu" not in r.evidence for r in rows)
    assert {r.evidence["worker"]["name"] for r in rows} == {"gpu0", "gpu1"}
    assert {r.evidence["worker"]["gpu"] for r in rows} == {"GPU-x", "GPU-y"}


def test_jobs_go_to_a_worker_of_their_arch(tmp_path, stub):
    db, ids = _store(tmp_path, 4, kernels=("vadd_ok",))
    slots = [_slot(stub, "gpu0", "GPU-x", STUB_ARCH="sm_100a", STUB_NAME="Stub B"), _slot(stub, "gpu1", "GPU-y")]
    run_parallel_batch(db, ids, Collect(), GpuPool(slots), stop=StopFlag())
    rows = _one_row_each(db, ids)
    assert {r.evidence["worker"]["name"] for r in rows} == {"gpu1"} and {r.category for r in rows} == {"ok"}
    # With no worker of the task's arch, any worker records the skip, as one worker would.
    db2, ids2 = _store(tmp_path / "b", 2, kernels=("vadd_ok",))
    run_parallel_batch(db2, ids2, Collect(), GpuPool([slots[0]]), stop=StopFlag())
    assert {r.status for r in _one_row_each(db2, ids2)} == {"skipped: no sm_90a device"}


def test_a_crashing_candidate_restarts_its_worker_and_the_batch_goes_on(tmp_path, stub):
    db, ids = _store(tmp_path, 4, kernels=("vadd_ok",))
    sink = Collect()
    slots = [_slot(stub, "gpu0", "GPU-x", STUB_CRASH_ONCE=str(tmp_path / "crashed"))]
    assert run_parallel_batch(db, ids, sink, GpuPool(slots), stop=StopFlag()) == 0
    rows = _one_row_each(db, ids)
    assert sorted(r.category for r in rows) == ["ok", "ok", "ok", "runtime_other"]
    restarted = [w for w in sink.of(ev.WorkerChanged) if w.state == "restarted"]
    assert restarted and restarted[0].worker == "gpu0"


def test_a_gpu_that_keeps_dying_is_taken_out_and_its_job_judged_elsewhere(tmp_path, stub):
    db, ids = _store(tmp_path, 6, kernels=("vadd_ok",))
    sink = Collect()
    dead = tmp_path / "gpu0-dead"
    slots = [
        _slot(stub, "gpu0", "GPU-x", STUB_DIE_AT_JOB="1", STUB_MARK=str(dead), STUB_NO_START_IF=str(dead)),
        _slot(stub, "gpu1", "GPU-y", STUB_SLEEP="0.1"),
    ]
    assert run_parallel_batch(db, ids, sink, GpuPool(slots), stop=StopFlag()) == 0
    rows = _one_row_each(db, ids)  # nothing lost, nothing twice, no error rows
    assert {r.status for r in rows} == {"judged"} and {r.evidence["worker"]["name"] for r in rows} == {"gpu1"}
    retired = [w for w in sink.of(ev.WorkerChanged) if w.state == "retired"]
    assert [w.worker for w in retired] == ["gpu0"] and "taken out of the pool" in (retired[0].message or "")
    assert any(isinstance(e, ev.Log) and "gpu0" in e.message for e in sink.events)
    assert sink.events[-1] == ev.Done(judged=6, failed_tool=0, cancelled=False)


def test_with_every_gpu_out_the_rest_stays_unjudged_for_a_resume(tmp_path, stub):
    db, ids = _store(tmp_path, 5, kernels=("vadd_ok",))
    sink = Collect()
    dead = tmp_path / "dead"
    slots = [_slot(stub, "gpu0", "GPU-x", STUB_DIE_AT_JOB="2", STUB_MARK=str(dead), STUB_NO_START_IF=str(dead))]
    assert run_parallel_batch(db, ids, sink, GpuPool(slots), stop=StopFlag()) == 0
    judged = [i for i in ids if evaluations_for(db, i)]
    assert len(judged) >= 1
    assert all(
        evaluations_for(db, i)[0].status in ("judged",) or evaluations_for(db, i)[0].status.startswith("error")
        for i in judged
    )
    unjudged = set(ids) - set(judged)
    assert unjudged and set(select_samples(db, None, None, True, False)) >= unjudged
    done = sink.events[-1]
    assert isinstance(done, ev.Done) and done.judged + done.failed_tool == len(ids)


def test_no_worker_that_starts_is_a_tool_failure_with_no_rows(tmp_path, stub):
    db, ids = _store(tmp_path, 2, kernels=("vadd_ok",))
    never = tmp_path / "never"
    never.touch()
    sink = Collect()
    code = run_parallel_batch(
        db, ids, sink, GpuPool([_slot(stub, "gpu0", "GPU-x", STUB_NO_START_IF=str(never))]), stop=StopFlag()
    )
    assert code == 1 and all(not evaluations_for(db, i) for i in ids)
    assert "could start" in sink.of(ev.Error)[0].message


def test_the_assembly_cache_takes_parallel_writers(tmp_path):
    """Several threads filling one cache entry at once: every reader finds a whole entry."""
    from ptxbench.engine.cache import Cache

    cache = Cache(tmp_path / "cache")
    blob = bytes(range(256)) * 4096
    errors: list[str] = []

    def fill(i: int) -> None:
        for _ in range(20):
            cache.put("ab" * 32, {"n": 1}, {"cubin": blob})
            got = cache.get("ab" * 32, ("cubin",))
            if got is not None and got[1].get("cubin") not in (None, blob):
                errors.append(f"thread {i}: torn blob")

    threads = [threading.Thread(target=fill, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and cache.get("ab" * 32, ("cubin",))[1]["cubin"] == blob
    assert not list((tmp_path / "cache").glob("*/.tmp-*"))


def test_new_event_fields_stay_off_a_one_worker_line():
    assert "worker" not in ev.to_wire(ev.Result(1, 2, "ok", "judged", None, None), 0.0)
    assert "workers" not in ev.to_wire(ev.Start(1, None, False), 0.0)
    line = ev.dumps(ev.WorkerChanged("gpu1", "retired", "NVIDIA H200", None, "taken out"), 2.0)
    assert ev.parse_line(line) == ev.WorkerChanged("gpu1", "retired", "NVIDIA H200", None, "taken out")
    assert '"shared"' not in line
    assert ev.parse_line(ev.dumps(ev.SampleStarted(3, "t", 0, worker="gpu0"), 0.0)).worker == "gpu0"
    _ = Gpu  # the dataclass the pool is built from
