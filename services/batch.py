"""Evaluate a batch of stored samples: one evaluation row each, committed one by one.

An evaluation and its per-size measurements go in one transaction, so a batch that is killed
loses nothing it finished, and the same selection run again resumes (`select_samples` with
`all_unjudged` leaves out what is already judged). A stop request (SIGTERM, SIGHUP, SIGINT, or
a caller's flag) ends the batch after the current sample, whose judgement is still written.

A store that will not take a judgement (another writer holds it past the patience, a stop
comes while waiting for it, the disk is full) does not lose it: it is kept in the store's
recovery journal (db/recovery.py), the batch says so and stops, and exits EXIT_UNFINISHED;
the next writer of the store writes the journal first. Progress is a stream of typed events
(services/progress.py) handed to a sink: the CLI writes them as JSON lines or a progress bar,
tests collect them.

While the GPU judges one sample, the static stages of the next few run on CPU threads.
"""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import sqlite_utils

from ptxbench.services import progress as ev
from ptxbench.services.hardware import gpu_archs

SOURCE = "ptxbench eval"
PREFETCH = 4  # static stages of the next samples run on CPU threads while the GPU judges
EXIT_OK = 0
EXIT_TOOL = 1  # the tool failed on every sample it tried (or the worker would not start)
EXIT_UNFINISHED = 3  # the store refused a judgement: it is in the recovery journal; run again to resume


class Stop(Protocol):
    """What a batch asks between samples; a context manager around the loop. `abandoned`: asked again, so a
    parallel batch stops waiting for its running jobs (services/parallel.py)."""

    requested: bool
    abandoned: bool

    def __enter__(self) -> Stop: ...

    def __exit__(self, *exc: object) -> None: ...


class SignalStop:
    """SIGTERM, SIGHUP and SIGINT ask the batch to stop after the current sample (main thread only); a second
    one abandons what is still running. A write waiting for a locked store stops waiting at once: what it
    held goes to the recovery journal (db/store.py `stop_waiting`)."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)

    def __init__(self) -> None:
        self.requested = False
        self.abandoned = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> SignalStop:
        for sig in self.SIGNALS:
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        from ptxbench.db.store import stop_waiting

        stop_waiting()
        if self.requested:
            self.abandoned = True
        self.requested = True

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


class StopFlag:
    """A stop a caller sets itself (another thread, a pool that shuts down)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._abandon = threading.Event()

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    @property
    def abandoned(self) -> bool:
        return self._abandon.is_set()

    def set(self) -> None:
        self._event.set()

    def abandon(self) -> None:
        """The second stop: leave what is still running for a resume."""
        self._event.set()
        self._abandon.set()

    def __enter__(self) -> StopFlag:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def select_samples(
    db: sqlite_utils.Database, samples: list[int] | None, task: str | None, all_unjudged: bool, static_only: bool
) -> list[int]:
    """The ids a batch judges: the ones named, or every sample of a task (or of the store), less
    the judged ones with `all_unjudged` (any evaluation counts with `static_only`, else a GPU one)."""
    from ptxbench.db.browse import SampleFilter, sample_ids
    from ptxbench.db.queries import evaluations_for

    if samples:
        ids = list(dict.fromkeys(samples))
    elif task or all_unjudged:
        ids = sorted(sample_ids(db.conn, SampleFilter(task_id=task or ""), limit=10_000_000))
    else:
        return []
    if all_unjudged:

        def judged(sid: int) -> bool:
            rows = evaluations_for(db, sid)
            return bool(rows) if static_only else any(e.status == "judged" and e.device for e in rows)

        ids = [i for i in ids if not judged(i)]
    return ids


class NoGpu:
    """The GPU worker's stand-in where nvidia-smi finds no GPU: the engine records `skipped: no <arch>
    device`, as the worker would say, without starting a process that spends seconds importing torch to
    learn the same."""

    no_device_reason = "no NVIDIA GPU (nvidia-smi finds none)"

    def start(self) -> None:
        return None

    def close(self) -> None:
        pass


def run_batch(
    store: sqlite_utils.Database,
    ids: list[int],
    progress: ev.Sink,
    *,
    static_only: bool = False,
    sanitize: bool = False,
    executed: bool = False,
    runner: Any = None,
    stop: Stop | None = None,
    source: str = SOURCE,
) -> int:
    """Judge `ids` in order, committing each row; returns 0, EXIT_TOOL when the tool failed on every
    sample it tried, or EXIT_UNFINISHED when the store refused a judgement (kept in the recovery journal;
    the batch stops there). `stop` defaults to SIGTERM/SIGHUP/SIGINT (which needs the main thread)."""
    from ptxbench.db.judgement import evaluation_records, tool_error_record
    from ptxbench.db.queries import get_sample
    from ptxbench.db.recovery import Kept, add_evaluation_kept
    from ptxbench.db.store import StoreError, set_wait_notice
    from ptxbench.db.writes import InvalidRecord
    from ptxbench.engine.pipeline import EngineError, judge
    from ptxbench.engine.runner import Runner, WorkerUnavailable
    from ptxbench.engine.static import judge_static
    from ptxbench.models.judging import candidate_of
    from ptxbench.tasks.spec import get_task

    judged = failed = 0
    cancelled = False
    refused: str | None = None  # why the store would not take a judgement
    kept = 0  # judgements kept in the recovery journal instead
    own_runner = runner is None and not static_only
    device_name = None
    if not static_only:
        runner = runner or (Runner() if gpu_archs() else NoGpu())
        try:
            device = runner.start()
            device_name = device.name if device is not None else None
        except WorkerUnavailable as exc:
            # The tool is broken, not the samples: say so once instead of failing every sample slowly.
            progress.emit(ev.Start(total=len(ids), device=None, static_only=static_only))
            progress.emit(ev.Error(sample_id=None, message=f"the GPU worker cannot start: {exc}"[:2000]))
            progress.emit(ev.Done(judged=0, failed_tool=len(ids), cancelled=False))
            return EXIT_TOOL
    progress.emit(ev.Start(total=len(ids), device=device_name, static_only=static_only))

    samples: dict[int, Any] = {}
    pool = ThreadPoolExecutor(max_workers=PREFETCH, thread_name_prefix="ptxbench-static")
    futures: dict[int, Future[Any]] = {}

    def submit(i: int) -> None:
        sid = ids[i]
        s = get_sample(store, sid)
        samples[sid] = s
        if s is None:
            return
        try:
            spec = get_task(s.task_id)
        except KeyError:
            return
        futures[sid] = pool.submit(judge_static, candidate_of(s), spec)

    said_before = set_wait_notice(lambda message: progress.emit(ev.Log("warning", message)))
    try:
        with stop or SignalStop() as stopping:
            for i in range(min(PREFETCH, len(ids))):
                submit(i)
            for index, sid in enumerate(ids):
                if stopping.requested:
                    cancelled = True
                    break
                if index + PREFETCH < len(ids):
                    submit(index + PREFETCH)
                s = samples.pop(sid, None)
                if s is None:
                    progress.emit(ev.Error(sample_id=sid, message=f"no sample with id {sid}"))
                    failed += 1
                    continue
                progress.emit(ev.SampleStarted(sample_id=sid, task_id=s.task_id, index=index))

                def note(stage: str, status: str, category: str | None = None, _sid: int = sid) -> None:
                    progress.emit(ev.StageChanged(sample_id=_sid, stage=stage, status=status, category=category))

                static = None
                tool_failure: str | None = None
                try:
                    spec = get_task(s.task_id)
                    note("assemble", "begin")
                    static = futures.pop(sid).result()
                    note("inspect", "end", static.category)
                    j = judge(
                        static.candidate,
                        spec,
                        gpu=not static_only,
                        sanitize=sanitize,
                        executed=executed,
                        runner=runner,
                        static=static,
                        progress=note,
                    )
                    records = evaluation_records(j, sid, source)
                    record, measurements = records.evaluation, records.measurements
                except (EngineError, WorkerUnavailable, KeyError, OSError, ValueError, RuntimeError) as exc:
                    tool_failure = f"{type(exc).__name__}: {exc}"[:2000]
                    # The attempt is recorded too: nothing the batch tried is silently left unjudged.
                    record, measurements = tool_error_record(sid, static, tool_failure, device_name, source), []
                try:
                    row = add_evaluation_kept(store, record, measurements, by=f"{source} (pid {os.getpid()})")
                except Kept as exc:
                    refused, kept = str(exc), 1
                    progress.emit(ev.Error(sample_id=sid, message=refused[:2000]))
                    break
                except StoreError as exc:  # not written, and not kept either (the journal could not be written)
                    refused = str(exc)
                    progress.emit(ev.Error(sample_id=sid, message=refused[:2000]))
                    break
                except InvalidRecord as exc:  # the sample went away meanwhile
                    failed += 1
                    progress.emit(ev.Error(sample_id=sid, message=f"not stored: {exc}"[:2000]))
                    continue
                if tool_failure is not None:
                    failed += 1
                    progress.emit(ev.Error(sample_id=sid, message=tool_failure, evaluation_id=row.id))
                    continue
                judged += 1
                assert row.id is not None  # committed just now
                progress.emit(ev.Result.of_row(sid, row))
            cancelled = (stopping.requested or refused is not None) and judged + failed < len(ids)
    finally:
        set_wait_notice(said_before)
        pool.shutdown(wait=False, cancel_futures=True)
        if own_runner and runner is not None:
            runner.close()
    if refused is not None:
        left = len(ids) - judged - failed - 1
        progress.emit(ev.Log("error", stopped_by_the_store(kept, left)))
    progress.emit(ev.Done(judged=judged, failed_tool=failed, cancelled=cancelled))
    if refused is not None:
        return EXIT_UNFINISHED
    return EXIT_TOOL if failed and not judged else EXIT_OK


def stopped_by_the_store(kept: int, left: int) -> str:
    """What a batch says when the store refused its judgements."""
    return (
        f"the store would not take a judgement, so the batch stopped: {kept} judgement(s) are kept in the store's "
        f"recovery journal and {left} sample(s) were not judged. Run the same command again once the store is "
        "free: it writes the journal first, then judges the rest"
    )
