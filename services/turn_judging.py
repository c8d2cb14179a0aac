"""A model run's turns judged on many workers: the pool on this host or a Dask cluster (`ptxbench run --gpus`, `--cluster`).

The backend is the one `ptxbench eval` uses (services/parallel.make_backend); only the rows'
writer differs: the run writes each turn's row itself, on its own thread, as it always does
(models/generate.py). What can go in parallel and what cannot:

- a trajectory's next message is made from its last turn's verdict, so a trajectory waits for
  its turn's row before it asks again: the turns of one trajectory stay in order;
- trajectories (samples, tasks) do not wait for each other: their turns are judged at once,
  one job per worker, while the other trajectories' requests go on.

As in a parallel batch, a GPU run's static stages run here on CPU threads and the workers run the
GPU stages; a run without the GPU stages sends the candidate and the workers run the static
stages. A job the tool failed on (a worker that would not start, the cluster's own failure) is
the turn's JudgeFailed: no row, the run stays unfinished and resuming judges it again. Each row
keeps evidence `worker` (which worker, which GPU), and timing made on a GPU shared by two
workers is flagged as in a batch (services/shared_gpu.py).

A stop (the run's `stop`) is met as a parallel batch meets it: the jobs no worker has begun are
withdrawn, the running ones are waited for, each at most its deadline from when it began, and
write their rows; a second stop, or the deadline, gives them up. A withdrawn or given-up turn is
the run's JudgeWithdrawn: left unjudged, for a resume.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ptxbench.db.records import Sample
from ptxbench.engine.extract import ExtractResult
from ptxbench.models.generate import Progress, RunStop
from ptxbench.models.judging import JudgeFailed, JudgeWithdrawn
from ptxbench.services import progress as ev
from ptxbench.services.batch import PREFETCH
from ptxbench.services.dispatch import Backend, BackendUnavailable, JudgeRequest, finished_judgement, worker_evidence
from ptxbench.services.errors import ToolError
from ptxbench.services.pool import UNJUDGED
from ptxbench.tasks.spec import TaskSpec

POLL_S = 0.2


class ParallelJudge:
    """A run's TurnJudge (models/generate.py) on `backend`'s workers. `start` before the first turn, `close` after
    the last run; one judge serves every run of a command (one per context level)."""

    def __init__(
        self, backend: Backend, *, gpu: bool, progress: Progress | None = None, stop: RunStop | None = None
    ) -> None:
        self.backend = backend
        self.static_only = not gpu
        self.progress: Progress = progress or (lambda event: None)
        self.stop = stop
        self._inflight: dict[str, JudgeRequest] = {}  # attempt -> job, submitted and not yet answered
        self._stopped_at: float | None = None
        self._gave_up = False
        self.batch_id = uuid.uuid4().hex[:12]
        self.workers = 1
        self._order = itertools.count()
        self._statics = ThreadPoolExecutor(max_workers=PREFETCH, thread_name_prefix="ptxbench-static")

    def start(self, archs: set[str]) -> None:
        """Start the workers and say which are ready; ToolError when none could be had."""
        try:
            started = self.backend.start(archs, self.static_only)
        except BackendUnavailable as exc:
            self.close()
            raise ToolError(str(exc)) from None
        self.workers = max(1, len(started))
        where = self.backend.device_label() or ("static stages only" if self.static_only else "no GPU")
        self.progress({"event": "log", "level": "info", "message": f"judging on {len(started)} worker(s): {where}"})
        for event in started:
            self._say(event)

    async def __call__(self, extracted: ExtractResult, spec: TaskSpec, sample: Sample) -> tuple[Any, dict[str, Any]]:
        from ptxbench.engine.static import judge_static

        assert sample.id is not None
        static = None
        if not self.static_only:
            try:
                static = await asyncio.get_running_loop().run_in_executor(self._statics, judge_static, extracted, spec)
            except Exception as exc:  # ptxas missing, a tool crash: the tool failed, not the candidate
                raise JudgeFailed(f"{type(exc).__name__}: {exc}") from None
        # As many jobs out as the batch keeps (a few queued per worker): the rest wait here, where a stop costs nothing.
        while len(self._inflight) >= self.backend.capacity():
            if self.stop is not None and self.stop.requested:
                break
            await asyncio.sleep(POLL_S)
        if self.stop is not None and self.stop.requested:
            raise JudgeWithdrawn("a stop came before its job was sent")
        req = JudgeRequest(
            sample_id=sample.id,
            index=next(self._order),
            attempt=f"{self.batch_id}:{sample.id}",
            task_id=spec.id,
            arch=spec.arch,
            extracted=extracted if static is None else None,
            static=static,
            gpu=not self.static_only,
        )
        answer = asyncio.wrap_future(self.backend.submit(req))
        self._inflight[req.attempt] = req
        try:
            while not answer.done():
                await asyncio.wait({answer}, timeout=POLL_S)
                if not answer.done() and self._mind_the_stop():
                    raise JudgeWithdrawn("a stop gave up waiting for its running job")
        finally:
            self._inflight.pop(req.attempt, None)
            self.drain()
        if answer.cancelled():
            raise JudgeWithdrawn("a stop withdrew its job before a worker began it")
        outcome = answer.result()
        if outcome.extra.get(UNJUDGED) and self._stopped_at is not None:
            raise JudgeWithdrawn(f"a stop withdrew its job: {outcome.error}")
        if outcome.extra.get(UNJUDGED) or not outcome.ok:
            raise JudgeFailed(outcome.error or "the worker gave no judgement")
        return finished_judgement(self.backend, outcome), worker_evidence(outcome, self.workers)

    def _mind_the_stop(self) -> bool:
        """After a stop: withdraw the jobs no worker has begun (once); True once the wait for the running ones is
        given up (a second stop, or past the last one's deadline)."""
        if self.stop is None or not self.stop.requested:
            return False
        now = time.monotonic()
        if self._stopped_at is None:
            self._stopped_at = now
            self.backend.cancel_pending()
        if not self._gave_up and (self.stop.abandoned or now > self._deadline()):
            self._gave_up = True
            self.backend.abandon()
            why = "stopped again" if self.stop.abandoned else "past their deadline"
            self.progress(
                {
                    "event": "log",
                    "level": "warning",
                    "message": f"gave up waiting for {len(self._inflight)} running judgement(s) ({why}): "
                    "their turns are left unjudged for a resume",
                }
            )
        return self._gave_up

    def _deadline(self) -> float:
        """When the last running job is past its deadline (one not yet seen to begin counts from the stop)."""
        assert self._stopped_at is not None
        begun = self.backend.running()
        return max(
            (begun.get(a, self._stopped_at) + req.deadline_s for a, req in self._inflight.items()),
            default=self._stopped_at,
        )

    def drain(self) -> None:
        """The backend's worker events as the run's progress events (its stage events are the batch's business)."""
        while True:
            try:
                event = self.backend.events.get_nowait()
            except Exception:  # queue.Empty
                return
            self._say(event)

    def _say(self, event: ev.Event) -> None:
        if isinstance(event, ev.WorkerChanged):
            wire = ev.to_wire(event, 0.0)  # {"event": "worker", "worker": …, "state": …}, as a batch writes it
            del wire["t"]
            self.progress(wire)
        elif isinstance(event, ev.Log):
            self.progress({"event": "log", "level": event.level, "message": event.message})

    def close(self) -> None:
        self._statics.shutdown(wait=False, cancel_futures=True)
        self.backend.close()
        self.drain()
