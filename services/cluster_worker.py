"""The Dask worker's side of services/cluster.py: one long-lived Runner per worker process.

A Dask worker for PTXBench judges on one GPU (CUDA_VISIBLE_DEVICES names it; PTXBENCH_DEVICE
picks another index where several are visible). Its first job starts the GPU worker process
(engine/runner.py) and later jobs reuse it, so a job does not pay a worker start; RunnerPlugin
closes it when the Dask worker shuts down. Each worker's GPU process has its own cache folder,
so two workers on one host never write one cache entry from two processes.

A job says when it begins (an event on topic BEGAN, read by the submitting side): a stop then
waits for the jobs that have begun and withdraws the others.

This module imports distributed at the top: only a Dask worker, or a batch given `--cluster`,
imports it.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any

from distributed import WorkerPlugin, get_worker

from ptxbench.services.dispatch import JudgeOutcome, JudgeRequest, judge_request

_LOCK = threading.Lock()
_RUNNER: Any = None  # this process's Runner
BEGAN = "ptxbench-job-began"  # the topic of the events that say a job has begun: {"attempt": …, "worker": …}


def worker_name() -> str:
    try:
        w = get_worker()
    except ValueError:  # not inside a Dask worker
        return f"pid{os.getpid()}"
    return str(w.name if w.name is not None else w.address)


def _device_index() -> int:
    return int(os.environ.get("PTXBENCH_DEVICE", "0"))


def _runner() -> Any:
    """This process's Runner, made on first use."""
    global _RUNNER
    from ptxbench.engine.cache import default_dir
    from ptxbench.engine.runner import Runner, RunnerConfig

    if _RUNNER is None:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", worker_name())
        env = {"PTXBENCH_CACHE": str(default_dir() / "workers" / f"dask-{name}")}
        _RUNNER = Runner(RunnerConfig(device_index=_device_index(), env=env))
    return _RUNNER


def _gpu_key() -> str:
    from ptxbench.services.gpuset import gpu_key

    return gpu_key(_device_index())


def worker_identity(static_only: bool) -> dict[str, Any]:
    """At the start of a batch: who this worker is, and for a GPU batch, its GPU worker started."""
    out: dict[str, Any] = {
        "name": worker_name(),
        "pid": os.getpid(),
        "gpu": _gpu_key(),
        "device": None,
        "arch": None,
        "error": None,
    }
    if static_only:
        return out
    from ptxbench.engine.runner import WorkerUnavailable

    with _LOCK:
        runner = _runner()
        try:
            device = runner.start()
        except WorkerUnavailable as exc:
            out["error"] = str(exc)[:1000]
            return out
    if device is None:
        out["error"] = f"no GPU: {runner.no_device_reason or 'the worker found no device'}"
    else:
        out["device"], out["arch"] = device.name, device.arch
    return out


def judge_on_worker(req: JudgeRequest, static_only: bool) -> JudgeOutcome:
    """One job; its stage notes go back with the outcome (`extra["notes"]`), said on the submitting side."""
    notes: list[tuple[str, str, str | None]] = []

    def note(stage: str, status: str, category: str | None = None) -> None:
        notes.append((stage, status, category))

    with _LOCK:  # one GPU worker process: one job at a time, whatever the Dask worker's thread count
        say_began(req)
        runner = None if static_only or not req.needs_gpu else _runner()
        starts = runner.starts if runner is not None else 0
        outcome = judge_request(req, runner, worker_name(), note, gpu_key=_gpu_key())
        if runner is not None:
            outcome.extra["fresh_workers"] = runner.starts - starts
    outcome.extra["notes"] = notes
    return outcome


def say_began(req: JudgeRequest) -> None:
    """Tell the submitting side this job has begun here (nothing outside a Dask worker)."""
    try:
        worker = get_worker()
    except ValueError:
        return
    worker.log_event(BEGAN, {"attempt": req.attempt, "worker": worker_name()})


class RunnerPlugin(WorkerPlugin):
    """Closes the worker's Runner (and its GPU process) when the Dask worker shuts down."""

    name = "ptxbench-runner"

    def teardown(self, worker: Any) -> None:
        global _RUNNER
        with _LOCK:
            if _RUNNER is not None:
                _RUNNER.close()
                _RUNNER = None
