"""One judging job, as a pool slot or a cluster worker runs it, and what comes back.

A job is a sample's candidate and its task, with the static verdict when the submitting side
already made it (GPU batches run the static stages on its CPU threads while the GPUs judge);
without one, the worker runs the static stages itself (static-only batches). What comes back is
the engine's Judgement, or the tool's failure, with the worker and the physical GPU it was made
on. Nothing here writes the store: the submitting process is the one writer (services/parallel.py).

Jobs carry an attempt key, `<batch>:<sample>`: a job the cluster ran twice (a worker that went
away after finishing) comes back twice under one key, and only the first is written.

A stop withdraws the jobs not yet begun and waits for the running ones, each for at most its
deadline from when it began (`JudgeRequest.deadline_s`), so that what a worker already spent
time on is written rather than judged again on resume.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from ptxbench.engine.extract import ExtractResult
from ptxbench.engine.static import StaticVerdict
from ptxbench.services import progress as ev

Note = Callable[[str, str, "str | None"], None]  # the pipeline's stage callback: (stage, status, category)

# What the tool itself can raise while judging (engine errors, a worker that cannot start, a task id the
# worker's install does not know): a failed attempt, never a verdict.
TOOL_FAILURES: tuple[type[BaseException], ...] = (RuntimeError, KeyError, OSError, ValueError)

# How long a running job may still take, as far as a stop waits for it: the static stages take seconds (a cold
# nvcc and ptxas included); a GPU job is bounded by the candidate's GPU budget (engine.pipeline.DEFAULT_BUDGET_S,
# 300 s) and as long again for the worker's own steps (references, the library's timing, a worker restart).
STATIC_JOB_DEADLINE_S = 120.0
GPU_JOB_DEADLINE_S = 600.0


@dataclass
class JudgeRequest:
    sample_id: int
    index: int  # the sample's place in the batch
    attempt: str  # "<batch id>:<sample id>": one write per key
    task_id: str
    arch: str
    extracted: ExtractResult | None  # the candidate, when the worker runs the static stages
    static: StaticVerdict | None = None
    gpu: bool = True
    sanitize: bool = False
    executed: bool = False

    @property
    def needs_gpu(self) -> bool:
        return self.gpu and (self.static is None or self.static.cubin is not None)

    @property
    def deadline_s(self) -> float:
        """The longest this job may run once begun (what a stop waits for it)."""
        return GPU_JOB_DEADLINE_S if self.needs_gpu else STATIC_JOB_DEADLINE_S


@dataclass
class JudgeOutcome:
    sample_id: int
    attempt: str
    worker: str
    judgement: Any = None  # a pipeline Judgement (None when the tool failed)
    error: str | None = None  # the tool's failure
    static: StaticVerdict | None = None  # what the static stages found, for the row of a failed attempt
    device: str | None = None  # the device name the worker opened
    gpu_key: str | None = None  # the physical GPU (services/gpuset.py)
    seconds: float = 0.0
    worker_dead: bool = False  # the failure was the worker's process (start, hello, stall)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and self.judgement is not None


def _silent(stage: str, status: str, category: str | None = None) -> None:
    pass


def judge_request(
    req: JudgeRequest, runner: Any, worker: str, note: Note | None = None, gpu_key: str | None = None
) -> JudgeOutcome:
    """Judge one job on `runner` (None for static-only work); never raises for the tool's failures."""
    from ptxbench.engine.pipeline import EngineError, judge
    from ptxbench.engine.runner import WorkerUnavailable
    from ptxbench.engine.static import judge_static
    from ptxbench.tasks.spec import get_task

    started = time.monotonic()
    out = JudgeOutcome(req.sample_id, req.attempt, worker, static=req.static, gpu_key=gpu_key)
    say: Note = note or _silent
    try:
        spec = get_task(req.task_id)
        static = req.static
        if static is not None:
            # Made on the submitting side while earlier jobs ran; said here so each sample's events read in order.
            say("assemble", "begin", None)
            say("inspect", "end", static.category)
        else:
            say("assemble", "begin", None)
            if req.extracted is None:
                raise ValueError("a job without a static verdict must carry its candidate")
            static = judge_static(req.extracted, spec)
            say("inspect", "end", static.category)
            out.static = static
        # With `static` given the pipeline reads the candidate from it (which is None where extraction failed).
        out.judgement = judge(
            static.candidate or "",
            spec,
            gpu=req.gpu,
            sanitize=req.sanitize,
            executed=req.executed,
            runner=runner,
            static=static,
            progress=note,
        )
        device = getattr(out.judgement, "device", None)
        out.device = device.name if device is not None else None
    except (EngineError, WorkerUnavailable) as exc:
        out.error = f"{type(exc).__name__}: {exc}"[:2000]
        out.worker_dead = True
    except TOOL_FAILURES as exc:
        out.error = f"{type(exc).__name__}: {exc}"[:2000]
    if out.device is None and getattr(runner, "device", None) is not None:
        out.device = runner.device.name
    out.seconds = time.monotonic() - started
    return out


class BackendUnavailable(RuntimeError):
    """No worker could be had: the pool's GPUs would not start, or the cluster has no GPU worker."""


class Backend(Protocol):
    """Where a parallel batch's jobs are judged: a pool of local GPU workers or a Dask cluster."""

    events: Any  # queue.SimpleQueue[ev.Event]: stage and worker events, drained by the writer

    def start(self, archs: set[str], static_only: bool) -> list[ev.WorkerChanged]: ...

    def submit(self, req: JudgeRequest) -> Future[JudgeOutcome]: ...

    def capacity(self) -> int: ...

    def cancel_pending(self) -> None:
        """Withdraw the jobs not yet begun on a worker (their futures cancelled); the running ones go on."""
        ...

    def running(self) -> dict[str, float]:
        """The jobs begun on a worker and not yet answered: attempt key → when it began (time.monotonic)."""
        ...

    def abandon(self) -> None:
        """Withdraw every job not yet answered, the running ones too: their answers are dropped."""
        ...

    def alive(self) -> bool: ...

    def shared(self, outcome: JudgeOutcome) -> int: ...

    def device_label(self) -> str | None: ...

    def close(self) -> None: ...


def finished_judgement(backend: Backend, outcome: JudgeOutcome) -> Any:
    """The outcome's judgement, its timing flagged where its GPU was shared by other workers."""
    from ptxbench.services.shared_gpu import flag_shared

    j = outcome.judgement
    workers = backend.shared(outcome)
    if j is not None and workers > 1 and getattr(j, "device", None) is not None:
        j = flag_shared(j, workers, outcome.worker)
    return j


def worker_evidence(outcome: JudgeOutcome, workers: int) -> dict[str, Any]:
    """What a parallel batch's row says about where it was judged."""
    return {
        "worker": {
            "name": outcome.worker,
            "gpu": outcome.gpu_key,
            "attempt": outcome.attempt,
            "workers": workers,
            "seconds": round(outcome.seconds, 4),
        }
    }
