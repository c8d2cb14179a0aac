"""A batch over many GPU workers: a pool on this host (services/pool.py) or a Dask cluster (services/cluster.py).

The same contract as the one-worker batch (services/batch.py), with the judging spread out:

- the static stages of the next samples run on this process's CPU threads while the workers
  judge (static-only batches send the candidate, and the workers run the static stages);
- every row is written here, by this process alone, in the order the results arrive: one
  evaluation (with its measurements) per sample, committed one by one, so a batch that is
  killed loses nothing it finished and `--all-unjudged` resumes it exactly as before;
- a result that comes back twice under one attempt key (a cluster job run again after its
  worker went away) is written once;
- SIGTERM/SIGINT (or the caller's flag) stop the submitting: jobs no worker has begun are
  withdrawn (left unjudged, for a resume), and the batch waits for the running ones, each at
  most its deadline from when it began (services/dispatch.py), and writes their rows; a second
  stop, or the deadline, abandons those still running (left for a resume too). Log events say
  what the stop waits for, and at the end what was kept and what is left;
- with every worker gone (the pool took them all out of service) the samples not yet judged
  stay unjudged, and the batch ends saying so;
- a store that will not take a row (another writer holds it past the patience, a stop comes
  while waiting, the disk is full) does not lose it: it goes to the store's recovery journal
  (db/recovery.py), the batch stops as a stop does, the rows of the jobs still running go to the
  journal without waiting again, and it exits EXIT_UNFINISHED. The next writer writes the journal.

Rows carry evidence `worker` (which worker, which physical GPU, the attempt key); timing made
while another worker shared the GPU is flagged (services/shared_gpu.py).
"""

from __future__ import annotations

import os
import time
import uuid
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from ptxbench.services import progress as ev
from ptxbench.services.batch import (
    EXIT_OK,
    EXIT_TOOL,
    EXIT_UNFINISHED,
    PREFETCH,
    SOURCE,
    SignalStop,
    Stop,
    stopped_by_the_store,
)
from ptxbench.services.dispatch import (
    Backend,
    BackendUnavailable,
    JudgeOutcome,
    JudgeRequest,
    finished_judgement,
    worker_evidence,
)
from ptxbench.services.pool import UNJUDGED

POLL_S = 0.2


@dataclass
class _Prepared:
    index: int
    sample_id: int
    task_id: str
    arch: str
    extracted: Any
    static: Future[Any] | None
    req: JudgeRequest | None = None  # once submitted


def batch_archs(store: sqlite_utils.Database, ids: list[int]) -> set[str]:
    """The archs of the tasks a batch judges (which GPUs `--gpus all` takes)."""
    from ptxbench.tasks.spec import get_task

    archs: set[str] = set()
    task_ids: set[str] = set()
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        rows = store.execute(
            f"SELECT DISTINCT task_id FROM samples WHERE id IN ({','.join('?' * len(chunk))})", chunk
        ).fetchall()
        task_ids.update(r[0] for r in rows)
    for t in task_ids:
        try:
            archs.add(get_task(t).arch)
        except KeyError:
            pass
    return archs


def run_parallel_batch(
    store: sqlite_utils.Database,
    ids: list[int],
    progress: ev.Sink,
    backend: Backend,
    *,
    static_only: bool = False,
    sanitize: bool = False,
    executed: bool = False,
    stop: Stop | None = None,
    source: str = SOURCE,
    static_threads: int = PREFETCH,
) -> int:
    """Judge `ids` on `backend`'s workers, writing each row here as it arrives; 0, or EXIT_TOOL when the
    tool failed on every sample it tried (or no worker could be had)."""
    return _Batch(
        store,
        ids,
        progress,
        backend,
        static_only=static_only,
        sanitize=sanitize,
        executed=executed,
        source=source,
        static_threads=static_threads,
    ).run(stop)


class _Batch:
    def __init__(
        self,
        store: sqlite_utils.Database,
        ids: list[int],
        progress: ev.Sink,
        backend: Backend,
        *,
        static_only: bool,
        sanitize: bool,
        executed: bool,
        source: str,
        static_threads: int,
    ) -> None:
        self.store, self.ids, self.progress, self.backend = store, list(ids), progress, backend
        self.static_only, self.sanitize, self.executed, self.source = static_only, sanitize, executed, source
        self.static_threads = max(1, static_threads)
        self.batch_id = uuid.uuid4().hex[:12]
        self.judged = self.failed = self.kept = 0
        self.refused: str | None = None  # why the store would not take a row
        self.written: set[str] = set()
        self.workers = 1
        self.stopped_at: float | None = None  # when a stop was asked (time.monotonic)
        self.done_at_stop = 0  # samples with an answer by then
        self.abandoned: list[int] = []  # samples whose running jobs the stop gave up on
        self.abandoned_why = ""

    # -- the loop ----------------------------------------------------------------------------

    def run(self, stop: Stop | None) -> int:
        try:
            started = self.backend.start(batch_archs(self.store, self.ids), self.static_only)
        except BackendUnavailable as exc:
            self.progress.emit(ev.Start(total=len(self.ids), device=None, static_only=self.static_only))
            self.progress.emit(ev.Error(sample_id=None, message=str(exc)[:2000]))
            self.progress.emit(ev.Done(judged=0, failed_tool=len(self.ids), cancelled=False))
            return EXIT_TOOL
        self.workers = max(1, len(started))
        self.progress.emit(
            ev.Start(
                total=len(self.ids),
                device=self.backend.device_label(),
                static_only=self.static_only,
                workers=len(started),
            )
        )
        for event in started:
            self.progress.emit(event)
        from ptxbench.db.store import set_wait_notice

        cancelled = False
        statics = ThreadPoolExecutor(max_workers=self.static_threads, thread_name_prefix="ptxbench-static")
        said_before = set_wait_notice(lambda message: self.progress.emit(ev.Log("warning", message)))
        try:
            with stop or SignalStop() as stopping:
                cancelled = self._loop(stopping, statics)
        finally:
            set_wait_notice(said_before)
            statics.shutdown(wait=False, cancel_futures=True)
            self._drain()
            self.backend.close()
            self._drain()
        if self.stopped_at is not None:
            self._say_what_the_stop_kept()
        if self.refused is not None:
            left = len(self.ids) - self.judged - self.failed - self.kept
            self.progress.emit(ev.Log("error", stopped_by_the_store(self.kept, left)))
        self.progress.emit(ev.Done(judged=self.judged, failed_tool=self.failed, cancelled=cancelled))
        if self.refused is not None:
            return EXIT_UNFINISHED
        return EXIT_TOOL if self.failed and not self.judged else EXIT_OK

    def _loop(self, stopping: Stop, statics: ThreadPoolExecutor) -> bool:
        order = deque(enumerate(self.ids))
        prepared: deque[_Prepared] = deque()
        inflight: dict[Future[JudgeOutcome], _Prepared] = {}
        cancelled = False
        while True:
            self._drain()
            if (stopping.requested or self.refused is not None) and not cancelled:
                cancelled = True
                self._stop(prepared, inflight)
            if cancelled and inflight and self._give_up(stopping, inflight):
                return self.judged + self.failed + self.kept < len(self.ids)
            if not cancelled and not self.backend.alive():
                left = len(order) + len(prepared)
                if left:
                    self.failed += left
                    self.progress.emit(
                        ev.Error(
                            sample_id=None,
                            message=f"no worker is left: {left} sample(s) not judged (run the batch again to resume)",
                        )
                    )
                order.clear()
                prepared.clear()
            if not cancelled:
                window = self.backend.capacity() + self.static_threads
                while order and len(prepared) < window:
                    ready = self._prepare(*order.popleft(), statics)
                    if ready is not None:
                        prepared.append(ready)
                while prepared and len(inflight) < self.backend.capacity():
                    head = prepared[0]
                    if head.static is not None and not head.static.done():
                        break
                    prepared.popleft()
                    future = self._submit(head)
                    if future is not None:
                        inflight[future] = head
            if not inflight and (cancelled or not (order or prepared)):
                return cancelled and self.judged + self.failed + self.kept < len(self.ids)
            waiting: list[Future[Any]] = list(inflight)
            if prepared and prepared[0].static is not None and len(inflight) < self.backend.capacity():
                waiting.append(prepared[0].static)
            done, _ = wait(waiting, timeout=POLL_S, return_when=FIRST_COMPLETED)
            self._collect(done, inflight)

    def _collect(self, done: set[Future[Any]], inflight: dict[Future[JudgeOutcome], _Prepared]) -> None:
        self._drain()  # a job's stage events are queued before its result: they go out first
        for future in done:
            p = inflight.pop(future, None)  # a static's future is not a key
            if p is None or future.cancelled():
                continue  # withdrawn: left unjudged for a resume
            try:
                outcome = future.result()
            except Exception as exc:  # the backend's own failure for one job: recorded like any tool failure
                outcome = JudgeOutcome(p.sample_id, self._attempt(p), "", error=f"{type(exc).__name__}: {exc}")
            self._write(outcome)

    # -- a stop ------------------------------------------------------------------------------------

    def _stop(self, prepared: deque[_Prepared], inflight: dict[Future[JudgeOutcome], _Prepared]) -> None:
        """Withdraw what no worker has begun; the running jobs go on, to write their rows."""
        self.stopped_at = time.monotonic()
        self.done_at_stop = self.judged + self.failed + self.kept
        self.backend.cancel_pending()
        for p in prepared:
            if p.static is not None:
                p.static.cancel()
        prepared.clear()
        begun = self.backend.running()
        running = sum(1 for f, p in inflight.items() if not f.done() and self._attempt(p) in begun)
        left = len(self.ids) - self.done_at_stop - running
        message = f"stopping: {left} sample(s) not begun are left unjudged for a resume"
        if running:
            message += (
                f"; waiting up to {self._deadline(inflight) - self.stopped_at:.0f} s for the {running} running "
                "job(s) to write their rows (stop again to leave them for a resume too)"
            )
        self.progress.emit(ev.Log("info", message))

    def _deadline(self, inflight: dict[Future[JudgeOutcome], _Prepared]) -> float:
        """When the last running job is past its deadline (one not yet begun counts from the stop)."""
        assert self.stopped_at is not None
        begun = self.backend.running()
        return max(
            (
                begun.get(self._attempt(p), self.stopped_at) + (p.req.deadline_s if p.req else 0.0)
                for f, p in inflight.items()
                if not f.done()
            ),
            default=self.stopped_at,
        )

    def _give_up(self, stopping: Stop, inflight: dict[Future[JudgeOutcome], _Prepared]) -> bool:
        """After a stop: True when the batch stops waiting for its running jobs (a second stop, or their deadline)."""
        if not stopping.abandoned and time.monotonic() < self._deadline(inflight):
            return False
        self._collect({f for f in inflight if f.done()}, inflight)  # answers already in are still written
        self.backend.abandon()
        self.abandoned = sorted(p.sample_id for p in inflight.values())
        self.abandoned_why = "stopped again" if stopping.abandoned else "past their deadline"
        inflight.clear()
        return True

    def _say_what_the_stop_kept(self) -> None:
        kept = self.judged + self.failed + self.kept - self.done_at_stop
        left = len(self.ids) - self.judged - self.failed - self.kept
        message = (
            f"stopped: {kept} job(s) running at the stop wrote their rows; {left} sample(s) left unjudged for a resume"
        )
        if self.abandoned:
            shown = ", ".join(str(i) for i in self.abandoned[:20]) + (" …" if len(self.abandoned) > 20 else "")
            message += f", {len(self.abandoned)} of them abandoned while running ({self.abandoned_why}): {shown}"
        self.progress.emit(ev.Log("warning" if self.abandoned else "info", message))

    def _drain(self) -> None:
        events = self.backend.events
        while True:
            try:
                event = events.get_nowait()
            except Exception:  # queue.Empty
                return
            self.progress.emit(event)

    # -- samples in, rows out --------------------------------------------------------------------

    def _attempt(self, p: _Prepared) -> str:
        return f"{self.batch_id}:{p.sample_id}"

    def _prepare(self, index: int, sid: int, statics: ThreadPoolExecutor) -> _Prepared | None:
        from ptxbench.db.queries import get_sample
        from ptxbench.engine.static import judge_static
        from ptxbench.models.judging import candidate_of
        from ptxbench.tasks.spec import get_task

        sample = get_sample(self.store, sid)
        if sample is None:
            self.progress.emit(ev.Error(sample_id=sid, message=f"no sample with id {sid}"))
            self.failed += 1
            return None
        extracted = candidate_of(sample)
        try:
            spec = get_task(sample.task_id)
        except KeyError as exc:
            self._tool_failed(sid, None, f"KeyError: {exc}", None, "")
            return None
        static = None if self.static_only else statics.submit(judge_static, extracted, spec)
        return _Prepared(index, sid, sample.task_id, spec.arch, extracted, static)

    def _submit(self, p: _Prepared) -> Future[JudgeOutcome] | None:
        static = None
        if p.static is not None:
            try:
                static = p.static.result()
            except Exception as exc:  # ptxas missing, a tool crash: the tool failed, not the candidate
                self._tool_failed(p.sample_id, None, f"{type(exc).__name__}: {exc}", None, "")
                return None
        req = JudgeRequest(
            sample_id=p.sample_id,
            index=p.index,
            attempt=self._attempt(p),
            task_id=p.task_id,
            arch=p.arch,
            extracted=p.extracted if static is None else None,
            static=static,
            gpu=not self.static_only,
            sanitize=self.sanitize,
            executed=self.executed,
        )
        p.req = req
        return self.backend.submit(req)

    def _write(self, outcome: JudgeOutcome) -> None:
        from ptxbench.db.judgement import evaluation_records

        if outcome.attempt in self.written:
            return  # the same job's second answer (run again after its worker went away)
        self.written.add(outcome.attempt)
        sid = outcome.sample_id
        if outcome.extra.get(UNJUDGED):
            if self.stopped_at is not None:
                return  # withdrawn by the stop: left for a resume, not a failure
            self.failed += 1
            self.progress.emit(ev.Error(sample_id=sid, message=f"not judged: {outcome.error}"))
            return
        if not outcome.ok:
            self._tool_failed(
                sid, outcome.static, outcome.error or "the worker gave no judgement", outcome.device, outcome.worker
            )
            return
        try:
            judgement = finished_judgement(self.backend, outcome)
            records = evaluation_records(judgement, sid, self.source, worker_evidence(outcome, self.workers))
        except (KeyError, OSError, ValueError, RuntimeError) as exc:
            self._tool_failed(sid, outcome.static, f"{type(exc).__name__}: {exc}", outcome.device, outcome.worker)
            return
        row = self._add(sid, records.evaluation, records.measurements, outcome.worker)
        if row is None:
            return
        self.judged += 1
        self.progress.emit(ev.Result.of_row(sid, row, outcome.worker or None))

    def _add(self, sid: int, evaluation: Any, measurements: list[Any], worker: str) -> Any | None:
        """The row written, or None: kept in the recovery journal (said, counted) or refused for good."""
        from ptxbench.db.recovery import Kept, add_evaluation_kept
        from ptxbench.db.store import StoreError, set_patience
        from ptxbench.db.writes import InvalidRecord

        try:
            return add_evaluation_kept(self.store, evaluation, measurements, by=f"{self.source} (pid {os.getpid()})")
        except Kept as exc:
            self.kept += 1
            if self.refused is None:
                self.refused = str(exc)
                set_patience(self.store, 0.0)  # the rows still coming go to the journal without waiting again
            self.progress.emit(ev.Error(sample_id=sid, message=str(exc)[:2000], worker=worker or None))
        except InvalidRecord as exc:  # the sample went away meanwhile
            self.failed += 1
            self.progress.emit(ev.Error(sample_id=sid, message=f"not stored: {exc}"[:2000], worker=worker or None))
        except StoreError as exc:  # not written, and not kept either (the journal could not be written)
            self.failed += 1
            if self.refused is None:
                self.refused = str(exc)
                set_patience(self.store, 0.0)
            self.progress.emit(ev.Error(sample_id=sid, message=str(exc)[:2000], worker=worker or None))
        return None

    def _tool_failed(self, sid: int, static: Any, message: str, device: str | None, worker: str) -> None:
        """The attempt is recorded too: nothing the batch tried is silently left unjudged."""
        from ptxbench.db.judgement import tool_error_record

        message = message[:2000]
        record = tool_error_record(sid, static, message, device, self.source)
        if worker:
            record.evidence["worker"] = {"name": worker, "attempt": f"{self.batch_id}:{sid}"}
        row = self._add(sid, record, [], worker)
        if row is None:
            return
        self.failed += 1
        self.progress.emit(ev.Error(sample_id=sid, message=message, evaluation_id=row.id, worker=worker or None))


def make_backend(
    archs: set[str],
    *,
    gpus: str | None = None,
    workers_per_gpu: int = 1,
    cluster: str | None = None,
    static_only: bool = False,
    without_gpu: str = "a --static batch",
) -> Backend | None:
    """What `--gpus` / `--workers-per-gpu` / `--cluster` ask for, for work on tasks of `archs` (which GPUs
    `--gpus all` takes): a pool, a Dask backend, or None for one worker. `without_gpu` names the option that
    turned the GPU stages off, for the refusal of `--gpus` then. UsageError says what is wrong with the options.
    `ptxbench eval` and `ptxbench run` both build their backend here."""
    from ptxbench.services.errors import UsageError

    if workers_per_gpu < 1:
        raise UsageError("--workers-per-gpu: give at least 1")
    if cluster is not None:
        if gpus is not None or workers_per_gpu != 1:
            raise UsageError(
                "--cluster: the cluster's workers declare their GPUs; leave out --gpus and --workers-per-gpu"
            )
        from ptxbench.services.cluster import DaskBackend

        return DaskBackend(cluster)  # parses the address: a UsageError before any connection is tried
    if gpus is None:
        if workers_per_gpu != 1:
            raise UsageError("--workers-per-gpu needs --gpus (which GPUs to put the workers on)")
        return None
    if static_only:
        raise UsageError(f"--gpus: {without_gpu} needs no GPU (use --cluster local:N to spread it over processes)")
    from ptxbench.services.gpuset import choose, visible_gpus
    from ptxbench.services.pool import GpuPool, slot_specs

    chosen = choose(gpus, visible_gpus(), archs or None)
    per_gpu = [g for g in chosen for _ in range(workers_per_gpu)]
    return GpuPool(slot_specs(per_gpu))
