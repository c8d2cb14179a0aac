"""A pool of GPU workers on one host: one slot per GPU (or two on one GPU, flagged as shared).

Each slot is a thread that owns one `Runner` (engine/runner.py: one worker process on one GPU,
its own deadlines, restarted after a crash) and takes the next job it can run from one queue:
a job of its arch, or any job whose arch no live slot has (it is then judged `skipped: no …
device`, as one worker would), or any static-only job. Jobs are handed back as futures; the
pool never writes the store.

A tool failure is not charged to a GPU blindly. After one, the slot starts a fresh worker at
once (a start involves no candidate): if that fails (no hello, no device), the GPU is at fault —
a strike, and the slot keeps trying; either way the job is tried once more on another slot, and
only where it fails there too does it come back as the tool's failure (its row says so). A job
that then succeeds elsewhere is a strike against the slot it failed on. Three strikes in a row
take the slot out of the pool with a message; the batch goes on with the others. With every slot out,
the jobs still queued come back unjudged (no row: the batch can be resumed).

A stop withdraws the queued jobs (`cancel_pending`) and lets the running ones end (`running` says
which, and since when); `abandon` stops waiting for them, and `close` then ends their workers.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.engine.runner import Runner, RunnerConfig, WorkerUnavailable
from ptxbench.services import progress as ev
from ptxbench.services.dispatch import BackendUnavailable, JudgeOutcome, JudgeRequest, judge_request

RETIRE_AFTER = 3  # strikes in a row that take a slot out of the pool
RESTART_BACKOFF_S = 1.0  # between the fresh-worker checks of a slot whose worker would not start
UNJUDGED = "unjudged"  # an outcome's extra key: no slot was left to judge the job


@dataclass
class SlotSpec:
    name: str  # "gpu0"; a second worker on one GPU is "gpu0b"
    config: RunnerConfig
    key: str  # the physical GPU (services/gpuset.py)
    arch: str | None = None  # the GPU's arch, when known before its worker says hello
    runner: Runner | None = None  # a worker already started (a benchmark's warm one) to use


def slot_specs(gpus: list[Any], *, cache_root: Path | None = None, base: RunnerConfig | None = None) -> list[SlotSpec]:
    """One slot per entry of `gpus` (services/gpuset.Gpu); each worker gets its own cache folder."""
    from ptxbench.engine.cache import default_dir

    root = cache_root or (default_dir() / "workers")
    base = base or RunnerConfig()
    seen: dict[int, int] = {}
    specs = []
    for g in gpus:
        n = seen.get(g.index, 0)
        seen[g.index] = n + 1
        name = f"gpu{g.index}" + ("" if n == 0 else chr(ord("a") + n))
        env = {**base.env, "PTXBENCH_CACHE": str(root / name)}
        config = RunnerConfig(
            device_index=g.index,
            command=base.command,
            start_timeout_s=base.start_timeout_s,
            default_deadline_s=base.default_deadline_s,
            max_deadline_s=base.max_deadline_s,
            env=env,
        )
        specs.append(SlotSpec(name, config, g.key, g.arch))
    return specs


def withdraw(future: Future[Any]) -> None:
    """Cancel a job not yet begun, and tell its waiters: `concurrent.futures.wait` counts a cancelled
    future as done only once `set_running_or_notify_cancel` has seen it."""
    if future.cancel():
        future.set_running_or_notify_cancel()


def _begin(future: Future[JudgeOutcome]) -> bool:
    """Mark a job's future running (a job tried again is already); False when it was withdrawn."""
    return future.running() or future.set_running_or_notify_cancel()


@dataclass
class _Item:
    req: JudgeRequest
    future: Future[JudgeOutcome]
    tried: list[str] = field(default_factory=list)  # slots it failed on
    last: JudgeOutcome | None = None


class _Slot:
    def __init__(self, spec: SlotSpec, pool: GpuPool) -> None:
        self.spec = spec
        self.name = spec.name
        self.pool = pool
        self.runner = spec.runner or Runner(spec.config)
        self.arch = spec.arch
        self.device: str | None = None
        self.ready = threading.Event()
        self.retired = False
        self.retire_reason: str | None = None  # set by a strike; the slot's thread acts on it
        self.strikes = 0
        self.starts_seen = 0
        self.jobs = 0
        self.busy_since: float | None = None  # when the job in hand began
        self.thread = threading.Thread(target=self._main, name=f"ptxbench-{spec.name}", daemon=True)

    # -- life cycle -----------------------------------------------------------------------

    def _start_worker(self) -> str | None:
        """Start (or keep) this slot's worker; None when it is up with a device, else why not."""
        try:
            device = self.runner.start()
        except WorkerUnavailable as exc:
            return str(exc)
        if device is None:
            return f"no GPU: {self.runner.no_device_reason or 'the worker found no device'}"
        self.device = device.name
        self.arch = device.arch
        self.starts_seen = self.runner.starts
        return None

    def _main(self) -> None:
        try:
            if not self.pool.static_only:
                why = self._start_worker()
                if why is not None:
                    self._retire(f"its worker would not start: {why}", announce=False)
                    self.pool._say(ev.WorkerChanged(self.name, "retired", None, None, why[:500]))
            self.ready.set()
            if not self.retired:
                self._serve()
        finally:
            self.ready.set()

    def _serve(self) -> None:
        while True:
            if self.retire_reason is not None:
                self._retire(self.retire_reason)
                return
            item = self.pool._take(self)
            if item is None:
                if self.retire_reason is not None:
                    continue
                return
            if not _begin(item.future):
                continue
            with self.pool._cond:
                self.busy_since = self.pool._running[item.req.attempt] = time.monotonic()
            try:
                self._run(item)
            except Exception as exc:  # a bug of the pool's own: the job still gets an answer, the batch goes on
                if not item.future.done():
                    item.future.set_result(
                        JudgeOutcome(
                            item.req.sample_id,
                            item.req.attempt,
                            self.name,
                            error=f"{type(exc).__name__}: {exc}"[:2000],
                            static=item.req.static,
                        )
                    )
            finally:
                with self.pool._cond:
                    self.pool._running.pop(item.req.attempt, None)
                    self.busy_since = None

    def _retire(self, why: str, announce: bool = True) -> None:
        """Only the slot's own thread retires it: its runner is never closed under a running job."""
        self.retired = True
        try:
            self.runner.close()
        except Exception:  # a worker that will not even exit cleanly is killed by close's own timeout
            pass
        if announce:
            message = f"{self.name} is taken out of the pool: {why}"
            self.pool._say(ev.WorkerChanged(self.name, "retired", self.device, None, message[:1000]))
            self.pool._say(ev.Log("warning", message[:1000]))
        self.pool._slot_retired(self)

    # -- one job --------------------------------------------------------------------------

    def _run(self, item: _Item) -> None:
        req = item.req
        runner = self.runner if req.needs_gpu and not self.pool.static_only else None
        self.pool._say(
            ev.SampleStarted(sample_id=req.sample_id, task_id=req.task_id, index=req.index, worker=self.name)
        )

        def note(stage: str, status: str, category: str | None = None) -> None:
            self.pool._say(
                ev.StageChanged(
                    sample_id=req.sample_id, stage=stage, status=status, category=category, worker=self.name
                )
            )

        outcome = judge_request(
            req,
            _RunnerUntilClose(runner, self.pool) if runner is not None else None,
            self.name,
            note,
            gpu_key=self.spec.key,
        )
        self.jobs += 1
        outcome.extra["workers_on_gpu"] = self.pool._workers_on(self.spec.key)
        if runner is not None and self.runner.starts > self.starts_seen:
            fresh = self.runner.starts - self.starts_seen
            self.starts_seen = self.runner.starts
            self.pool._say(
                ev.WorkerChanged(
                    self.name, "restarted", self.device, None, f"{fresh} fresh worker(s) during sample {req.sample_id}"
                )
            )
        if outcome.ok or not outcome.worker_dead:
            self.strikes = 0
            for name in item.tried:
                self.pool._strike(name, f"sample {req.sample_id} failed there and was judged on {self.name}")
            item.future.set_result(outcome)
            return
        item.tried.append(self.name)
        item.last = outcome
        healthy = self._health_check()
        self.pool._requeue_or_finish(item)
        if not healthy:
            self._recover()

    def _health_check(self) -> bool:
        """After a tool failure: does a fresh worker start? If not, that is the GPU's strike."""
        if self.runner is None or self.pool.static_only or self.pool._closing:
            return True  # closing: the failure was close ending an abandoned job's worker; start none again
        why = self._start_worker()
        if why is None:
            return True
        self._strike_self(f"its worker would not start again: {why}")
        return False

    def _recover(self) -> None:
        """Keep trying a fresh worker until one starts or the slot is out of strikes."""
        while self.retire_reason is None and not self.pool._closing:
            time.sleep(RESTART_BACKOFF_S)
            if self._health_check():
                self.pool._say(ev.WorkerChanged(self.name, "ready", self.device, None, "a fresh worker started"))
                return

    def _strike_self(self, why: str) -> None:
        self.strikes += 1
        if self.strikes >= RETIRE_AFTER and self.retire_reason is None:
            self.retire_reason = f"{why} ({self.strikes} failures in a row)"
            self.pool._wake()


class _RunnerUntilClose:
    """A slot's Runner as the pipeline sees it: no job once the pool is closing. After a crash the pipeline starts
    a fresh worker for the sizes left; a worker that close ended under an abandoned job must not get one."""

    def __init__(self, runner: Runner, pool: GpuPool) -> None:
        self._runner, self._pool = runner, pool

    def judge(self, job: Any, on_event: Any = None) -> Any:
        if self._pool._closing:
            raise WorkerUnavailable("the pool is closing: the job was abandoned")
        return self._runner.judge(job, on_event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)


class GpuPool:
    """The pool: `submit` a JudgeRequest, get a future of its JudgeOutcome (services/dispatch.py)."""

    def __init__(self, slots: list[SlotSpec], *, static_only: bool = False) -> None:
        if not slots:
            raise BackendUnavailable("a pool needs at least one slot")
        self.static_only = static_only
        self.events: queue.SimpleQueue[ev.Event] = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._queue: deque[_Item] = deque()
        self._closing = False
        self._abandoned = False
        self._running: dict[str, float] = {}  # attempt -> when its slot began it
        self._specs = slots
        self.slots: list[_Slot] = []

    # -- Backend -------------------------------------------------------------------------

    def start(self, archs: set[str] | None = None, static_only: bool | None = None) -> list[ev.WorkerChanged]:
        """Start every slot's worker at once and wait for each to say hello (or fail)."""
        if static_only is not None:
            self.static_only = static_only
        self.slots = [_Slot(spec, self) for spec in self._specs]
        for slot in self.slots:
            slot.thread.start()
        for slot in self.slots:
            slot.ready.wait()
        ready = [s for s in self.slots if not s.retired]
        if not ready:
            reasons = []
            while not self.events.empty():
                e = self.events.get_nowait()
                if isinstance(e, ev.WorkerChanged) and e.message:
                    reasons.append(f"{e.worker}: {e.message}")
            self.close()
            raise BackendUnavailable("no GPU worker of the pool could start: " + "; ".join(reasons)[:1500])
        return [ev.WorkerChanged(s.name, "ready", s.device, self._workers_on(s.spec.key) > 1 or None) for s in ready]

    def submit(self, req: JudgeRequest) -> Future[JudgeOutcome]:
        future: Future[JudgeOutcome] = Future()
        with self._cond:
            if not self.alive():
                future.set_result(self._unjudged(req, "no worker is left in the pool"))
                return future
            self._queue.append(_Item(req, future))
            self._cond.notify_all()
        return future

    def capacity(self) -> int:
        return 2 * max(1, sum(1 for s in self.slots if not s.retired))

    def alive(self) -> bool:
        return any(not s.retired for s in self.slots)

    def cancel_pending(self) -> None:
        with self._cond:
            items = list(self._queue)
            self._queue.clear()
        for item in items:
            if item.future.running():
                # Waiting for its second try after a tool failure: not begun again, so left for a resume too.
                item.future.set_result(self._unjudged(item.req, "withdrawn by a stop before its second try"))
            else:
                withdraw(item.future)

    def running(self) -> dict[str, float]:
        with self._cond:
            return dict(self._running)

    def abandon(self) -> None:
        """Stop waiting for the running jobs: `close` ends their workers at once instead of letting them finish."""
        self._abandoned = True
        self.cancel_pending()

    def shared(self, outcome: JudgeOutcome) -> int:
        return int(outcome.extra.get("workers_on_gpu", 1))

    def device_label(self) -> str | None:
        names = sorted({s.device for s in self.slots if s.device and not s.retired})
        return ", ".join(names) if names else None

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self.cancel_pending()
        if self._abandoned:
            self._end_running_workers()
        for slot in self.slots:
            slot.thread.join(timeout=5.0)
        for slot in self.slots:
            if slot.spec.runner is None:  # a runner handed in belongs to its caller
                slot.runner.close()

    def _end_running_workers(self) -> None:
        """After `abandon`: kill the workers still in a job (their process group, as the Runner kills one), so that
        close does not wait their jobs out; their slots see the worker die, and start no other (`_RunnerUntilClose`)."""
        for slot in self.slots:
            pid = slot.runner.worker_pid
            if slot.busy_since is None or pid is None or slot.spec.runner is not None:
                continue  # idle, or a runner handed in: its caller's
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    # -- for the slots ---------------------------------------------------------------------

    def _say(self, event: ev.Event) -> None:
        self.events.put(event)

    def _workers_on(self, key: str) -> int:
        return sum(1 for s in self.slots if s.spec.key == key and not s.retired) or 1

    def _fits(self, slot: _Slot, item: _Item) -> bool:
        if slot.name in item.tried:
            return False
        req = item.req
        if not req.needs_gpu or self.static_only or slot.arch == req.arch:
            return True
        # No live slot of the job's arch: any slot judges it (the pipeline records the skip).
        return not any(s.arch == req.arch and self._live(s) for s in self.slots)

    @staticmethod
    def _live(slot: _Slot) -> bool:
        return not slot.retired and slot.retire_reason is None

    def _take(self, slot: _Slot) -> _Item | None:
        with self._cond:
            while True:
                if self._closing or slot.retired or slot.retire_reason is not None:
                    return None
                for i, item in enumerate(self._queue):
                    if item.future.cancelled():
                        continue
                    if self._fits(slot, item):
                        del self._queue[i]
                        return item
                self._cond.wait(timeout=1.0)

    def _requeue_or_finish(self, item: _Item) -> None:
        """A job the tool failed on: once more on another slot, else back as the failure it was."""
        with self._cond:
            others = [s for s in self.slots if self._live(s) and self._fits(s, item)]
            if others and len(item.tried) < 2:
                self._queue.appendleft(item)
                self._cond.notify_all()
                return
        # It failed on every slot it met, each of which started a fresh worker after it: the candidate's doing.
        assert item.last is not None
        item.future.set_result(item.last)

    def _strike(self, name: str, why: str) -> None:
        for s in self.slots:
            if s.name == name and not s.retired:
                s._strike_self(why)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _slot_retired(self, slot: _Slot) -> None:
        with self._cond:
            self._cond.notify_all()
            if any(not s.retired for s in self.slots):
                stuck = [i for i in self._queue if not any(self._fits(s, i) for s in self.slots if not s.retired)]
                for item in stuck:
                    self._queue.remove(item)
            else:
                stuck = list(self._queue)
                self._queue.clear()
        for item in stuck:
            if item.last is not None:
                item.future.set_result(item.last)
            elif _begin(item.future):
                item.future.set_result(self._unjudged(item.req, "every GPU worker was taken out of the pool"))

    @staticmethod
    def _unjudged(req: JudgeRequest, why: str) -> JudgeOutcome:
        return JudgeOutcome(req.sample_id, req.attempt, "", error=why, static=req.static, extra={UNJUDGED: True})
