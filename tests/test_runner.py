"""The runner against real child processes: the protocol, deadlines, kills, crash classification.

The worker here is a small stand-in script that speaks the real protocol
(engine/gpu/protocol.py) and misbehaves on request (the job's task id says
how), so these tests need no GPU; the runner under test is the real one.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time

import pytest

from ptxbench.engine.gpu.classify import category_of_cuda_error, category_of_exit, code_from_message, is_sticky
from ptxbench.engine.gpu.protocol import (
    ArgPlan, DeviceInfo, Job, JobResult, LaunchPlan, SizePlan, SizeResult, TensorMapPlan, TimingResult, TrialResult,
    dumps,
)
from ptxbench.engine.runner import Runner, RunnerConfig, WorkerUnavailable

STUB = textwrap.dedent(r'''
    import json, os, signal, subprocess, sys, time
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    no_gpu = "--no-gpu" in sys.argv

    def emit(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    def size(index, plan, category="ok"):
        return {"index": index, "split": plan["split"], "sizes": plan["sizes"], "category": category,
                "trials": [{"seed": s, "category": category} for s in plan["seeds"]]}

    for line in sys.stdin:
        msg = json.loads(line)
        op = msg["op"]
        if op == "exit":
            sys.exit(0)
        if op == "hello":
            if no_gpu:
                emit({"event": "hello", "ok": False, "error": "no CUDA device"})
                continue
            print("library chatter on stdout must not reach the protocol")
            emit({"event": "hello", "ok": True, "device": {
                "name": "Stub GPU", "arch": "sm_90a", "compute_capability": [9, 0], "num_sms": 132,
                "l2_bytes": 50 << 20, "memory_bytes": 1 << 30, "driver": "stub", "versions": {"pid": str(os.getpid())}}})
            continue
        job = msg["job"]
        how = job["task_id"]
        plans = job["sizes"]
        proto.write("not json at all\n")
        emit({"event": "size", "result": size(0, plans[0])})
        if how == "ok":
            emit({"event": "done", "result": {"sizes": [size(i, p) for i, p in enumerate(plans)]}})
        elif how == "hang":
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
            emit({"event": "phase", "phase": "launch", "size": 1, "deadline_s": 0.5, "untrusted": True,
                  "child": child.pid})
            time.sleep(1000)
        elif how == "stall":
            emit({"event": "phase", "phase": "prepare", "size": 1, "deadline_s": 0.5, "untrusted": False})
            time.sleep(1000)
        elif how == "budget":
            emit({"event": "phase", "phase": "time", "size": 1, "deadline_s": 60, "untrusted": True})
            time.sleep(1000)
        elif how == "flood":
            for _ in range(400):
                sys.stderr.write("printf from a kernel " * 5000 + "\n")
            sys.stderr.flush()
            emit({"event": "done", "result": {"sizes": [size(i, p) for i, p in enumerate(plans)]}})
        elif how == "segv":
            emit({"event": "phase", "phase": "launch", "size": 1, "deadline_s": 30, "untrusted": True})
            os.kill(os.getpid(), signal.SIGSEGV)
        elif how == "sticky":
            emit({"event": "size", "result": size(1, plans[1], "illegal_address")})
            emit({"event": "done", "result": {"sizes": [size(0, plans[0]), size(1, plans[1], "illegal_address")],
                  "fatal": {"category": "illegal_address", "message": "CUDA_ERROR_ILLEGAL_ADDRESS",
                            "size_index": 1, "cuda_error": 700, "sticky": True}}})
            sys.exit(3)
''')


@pytest.fixture
def stub(tmp_path):
    path = tmp_path / "stub_worker.py"
    path.write_text(STUB)
    return path


def _runner(stub, *extra: str) -> Runner:
    return Runner(RunnerConfig(command=[sys.executable, str(stub), *extra], start_timeout_s=30))


def _plan(split: str, n: int) -> SizePlan:
    return SizePlan(split, {"N": n}, (LaunchPlan("k", (1, 1, 1), (32, 1, 1), args=(ArgPlan("ptr", "X"),)),))


def _job(how: str) -> Job:
    return Job(how, b"\x7fELF cubin bytes", (_plan("train", 1024), _plan("train", 4096), _plan("heldout", 999)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_hello_and_a_clean_job(stub):
    with _runner(stub) as runner:
        device = runner.start()
        assert device is not None and device.name == "Stub GPU" and device.arch == "sm_90a"
        events = []
        result = runner.judge(_job("ok"), on_event=events.append)
        assert result.fatal is None
        assert [s.category for s in result.sizes] == ["ok", "ok", "ok"]
        assert [s.split for s in result.sizes] == ["train", "train", "heldout"]
        # The worker survives for the next job.
        pid = runner.worker_pid
        assert runner.judge(_job("ok")).fatal is None
        assert runner.worker_pid == pid and runner.starts == 1


def test_no_gpu_is_reported_not_raised(stub):
    with _runner(stub, "--no-gpu") as runner:
        assert runner.start() is None
        assert "no CUDA device" in (runner.no_device_reason or "")
        with pytest.raises(WorkerUnavailable):
            runner.judge(_job("ok"))


def test_a_hang_is_killed_at_its_deadline_with_its_process_group(stub):
    with _runner(stub) as runner:
        runner.start()
        first_pid = runner.worker_pid
        events = []
        began = time.monotonic()
        result = runner.judge(_job("hang"), on_event=events.append)
        elapsed = time.monotonic() - began
        assert result.fatal is not None and result.fatal.category == "hang_timeout"
        assert result.fatal.size_index == 1
        assert elapsed < 10, "the deadline was 0.5 s"
        # What was finished before the hang is kept.
        assert [s.category for s in result.sizes] == ["ok"]
        child = next(e["child"] for e in events if e.get("event") == "phase")
        assert not _alive(first_pid)
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the worker's child outlived the kill"
        # The next job gets a fresh worker.
        assert runner.judge(_job("ok")).fatal is None
        assert runner.starts == 2 and runner.worker_pid != first_pid


def test_a_stall_in_the_workers_own_step_is_a_tool_error(stub):
    with _runner(stub) as runner:
        result = runner.judge(_job("stall"))
        assert result.fatal is not None and result.fatal.category == "tool_error"


def test_a_crash_is_classified_by_its_signal_and_the_worker_replaced(stub):
    with _runner(stub) as runner:
        result = runner.judge(_job("segv"))
        assert result.fatal is not None
        assert result.fatal.category == "runtime_other"
        assert result.fatal.signal == signal.SIGSEGV
        assert "SIGSEGV" in result.fatal.message
        assert runner.judge(_job("ok")).fatal is None
        assert runner.starts == 2


def test_a_sticky_cuda_error_replaces_the_worker(stub):
    with _runner(stub) as runner:
        runner.start()
        pid = runner.worker_pid
        result = runner.judge(_job("sticky"))
        assert result.fatal is not None and result.fatal.category == "illegal_address"
        assert result.fatal.cuda_error == 700 and result.fatal.sticky
        assert [s.category for s in result.sizes] == ["ok", "illegal_address"]
        assert runner.worker_pid is None
        assert not _alive(pid)
        runner.judge(_job("ok"))
        assert runner.starts == 2


def test_a_worker_that_cannot_start_is_a_tool_failure(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys; sys.stderr.write('boom: no module'); sys.exit(1)\n")
    runner = Runner(RunnerConfig(command=[sys.executable, str(bad)], start_timeout_s=10))
    with pytest.raises(WorkerUnavailable, match="boom"):
        runner.start()


def test_job_round_trips_through_json():
    plan = SizePlan(
        "train", {"M": 128, "N": 256, "K": 64},
        (LaunchPlan("gemm", (2, 1, 1), (128, 1, 1), (2, 1, 1), 98304,
                    (ArgPlan("tmap", "tmA"), ArgPlan("ptr", "C"), ArgPlan("scalar", dtype="i32", value=128),
                     ArgPlan("scalar", dtype="f32", value=0.5))),),
        (TensorMapPlan("tmA", "A", "bf16", (128, 64), (64, 64), "128B"),),
        seeds=(4, 5, 6), time=True,
    )
    job = Job("gemm_bf16_sm90a", bytes(range(256)), (plan,), launch_timeout_s=3.0)
    import json

    back = Job.from_json(json.loads(dumps(job)))
    assert back == job
    assert back.sizes[0].launches[0].args[0].nbytes == 128
    assert [a.nbytes for a in back.sizes[0].launches[0].args] == [128, 8, 4, 4]


def test_results_round_trip_through_json():
    import json

    size = SizeResult(0, "train", {"N": 8}, "wrong_result", "verify", "Z off",
                      [TrialResult(1, "wrong_result", {"Z": 0.5}, {"index": [3], "got": 1.0, "expected": 2.0})],
                      TimingResult(30, 1.0, 0.9, 1.1, 0.2, baseline="torch.add", baseline_ms=0.5, speedup=0.5))
    back = JobResult.from_json(json.loads(dumps(JobResult([size]))))
    assert back.sizes[0] == size
    info = DeviceInfo.from_json({"name": "NVIDIA H200", "arch": "sm_90a", "compute_capability": [9, 0],
                                 "num_sms": 132, "l2_bytes": 1, "memory_bytes": 2, "driver": "580", "extra": 1})
    assert info.compute_capability == (9, 0)


def test_cuda_errors_map_to_categories():
    assert category_of_cuda_error(700) == "illegal_address" and is_sticky(700)
    assert category_of_cuda_error(716) == "misaligned_address"
    assert category_of_cuda_error(715) == "illegal_instruction"
    assert category_of_cuda_error(719) == "runtime_other"
    assert category_of_cuda_error(1, phase="launch") == "launch_config" and not is_sticky(1)
    assert category_of_cuda_error(500, phase="load") == "entry_missing"
    assert category_of_cuda_error(200, phase="load") == "load_error"
    assert code_from_message("CUDA_ERROR_MISALIGNED_ADDRESS: misaligned address") == 716
    assert code_from_message("CUDA_ERROR_INVALID_VALUE: invalid argument") == 1
    assert category_of_exit(-signal.SIGKILL)[1].endswith("SIGKILL")


def test_the_gpu_time_budget_ends_a_step_whose_own_deadline_is_far_off(stub):
    """A kernel slow enough to stay inside each step's deadline still cannot outlast its budget."""
    from dataclasses import replace

    with _runner(stub) as runner:
        began = time.monotonic()
        result = runner.judge(replace(_job("budget"), budget_s=1.0))
        took = time.monotonic() - began
    assert result.fatal is not None and result.fatal.category == "hang_timeout"
    assert "budget of 1 s" in result.fatal.message
    assert took < 10 and result.budget_spent_s == pytest.approx(1.0, abs=0.5)


def test_a_printf_flood_is_kept_to_a_bounded_tail(stub):
    with _runner(stub) as runner:
        result = runner.judge(_job("flood"))
        assert result.fatal is None and len(result.sizes) == 3
        worker = runner._worker
        assert worker is not None
        kept = len(worker.log.head) + len(worker.log.tail)
        assert kept <= (64 << 10) and worker.log.dropped > (30 << 20)
        assert "not kept" in worker.stderr_tail(100_000)


def test_the_log_tail_keeps_the_head_and_the_end():
    from ptxbench.engine.runner import LogTail

    log = LogTail(head=10, tail=10)
    log.add(b"0123456789" + b"x" * 1000 + b"the end!!!")
    text = log.text(10_000)
    assert text.startswith("0123456789") and text.endswith("the end!!!") and log.dropped == 1000
