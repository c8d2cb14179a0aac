"""The parent side of the GPU worker: start it, send jobs, hold it to deadlines, replace it.

A candidate kernel is untrusted code. It runs in a worker process
(`python -m ptxbench.engine.gpu.worker`) so that a hang, an illegal address
(which poisons the CUDA context of the whole process) or a crash costs one
candidate, never the batch. The worker announces each step with a deadline; a
step that outlives its deadline gets the worker's whole process group killed
and is judged `hang_timeout`. A worker that dies is classified by its exit
(signal or status) and replaced before the next job. One `Runner` drives one
worker on one GPU (`device_index`): a pool of runners, one per GPU, is the
step to several GPUs.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ptxbench.engine.gpu.classify import category_of_exit
from ptxbench.engine.gpu.protocol import DeviceInfo, Fatal, Job, JobResult, SizeResult, dumps
from ptxbench.engine.sandbox import worker_environment

EventHandler = Callable[[dict[str, Any]], None]


@dataclass
class RunnerConfig:
    device_index: int = 0
    # The worker command; tests put a stub script here. None = the real worker.
    command: list[str] | None = None
    start_timeout_s: float = 180.0      # interpreter, torch, CUDA context
    default_deadline_s: float = 300.0   # steps the worker did not put a deadline on
    max_deadline_s: float = 1800.0      # no step, however announced, waits longer
    env: dict[str, str] = field(default_factory=dict)

    def worker_command(self) -> list[str]:
        if self.command is not None:
            return list(self.command)
        return [sys.executable, "-m", "ptxbench.engine.gpu.worker", "--device", str(self.device_index)]


class Budget:
    """The GPU time a job's untrusted steps (the candidate's launches and timing) have used."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.spent = 0.0
        self._since: float | None = None

    def enter(self, phase: dict[str, Any]) -> None:
        self._since = time.monotonic() if phase.get("untrusted") else None

    def leave(self, phase: dict[str, Any]) -> None:
        if self._since is not None:
            self.spent += time.monotonic() - self._since
            self._since = None

    def left(self) -> float:
        running = time.monotonic() - self._since if self._since is not None else 0.0
        return max(0.0, self.seconds - self.spent - running)

    def spent_up(self, phase: dict[str, Any]) -> bool:
        return bool(phase.get("untrusted")) and self.left() <= 0.05


class WorkerUnavailable(RuntimeError):
    """The worker could not be started or would not say hello: the tool, not the candidate, failed."""


class LogTail:
    """What the worker printed (its own messages, a kernel's printf), kept to a bounded size.

    The head keeps a traceback of a failed start; the tail keeps the end. Whatever falls between is
    counted, not kept, so a printf flood costs neither memory nor disk."""

    def __init__(self, head: int = 8 << 10, tail: int = 56 << 10) -> None:
        self.head_limit, self.tail_limit = head, tail
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > self.tail_limit:
            cut = len(self.tail) - self.tail_limit
            self.dropped += cut
            del self.tail[:cut]

    def text(self, limit: int) -> str:
        gap = f"\n[… {self.dropped} bytes of worker output not kept …]\n" if self.dropped else ""
        whole = (bytes(self.head) + gap.encode() + bytes(self.tail)) if (self.dropped or self.tail) else bytes(self.head)
        return whole[-limit:].decode("utf-8", "replace")


class _Worker:
    """One live worker process, a line reader over its protocol pipe, and a bounded tail of its output."""

    def __init__(self, config: RunnerConfig) -> None:
        env = worker_environment(config.env)     # an allow-list: no key or credential reaches it
        self.proc = subprocess.Popen(
            config.worker_command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,     # its own process group: a kill takes its children too
        )
        self._buffer = b""
        self.log = LogTail()
        self._selector = selectors.DefaultSelector()
        assert self.proc.stdout is not None and self.proc.stderr is not None
        for pipe in (self.proc.stdout, self.proc.stderr):
            os.set_blocking(pipe.fileno(), False)
            self._selector.register(pipe, selectors.EVENT_READ)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, message: dict[str, Any]) -> bool:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def read_line(self, deadline: float) -> dict[str, Any] | str:
        """The next JSON object, or "timeout" / "eof"; lines that are not JSON objects are skipped."""
        assert self.proc.stdout is not None
        while True:
            nl = self._buffer.find(b"\n")
            if nl >= 0:
                line, self._buffer = self._buffer[:nl], self._buffer[nl + 1:]
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    return obj
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            ready = self._selector.select(timeout=remaining)
            if not ready:
                return "timeout"
            for key, _ in ready:
                if key.fileobj is self.proc.stderr:
                    self._drain_stderr()
                    continue
                try:
                    chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    return "eof"
                self._buffer += chunk

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        while True:
            try:
                chunk = os.read(self.proc.stderr.fileno(), 1 << 16)
            except (BlockingIOError, OSError, ValueError):
                return
            if not chunk:
                try:
                    self._selector.unregister(self.proc.stderr)
                except (KeyError, ValueError):
                    pass
                return
            self.log.add(chunk)

    def kill(self) -> None:
        """SIGKILL the worker's whole process group and reap it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._reap(5.0)

    def _reap(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_exit(self, timeout: float = 10.0) -> int | None:
        code = self._reap(timeout)
        if code is None:
            self.kill()
            code = self.proc.returncode
        return code

    def stderr_tail(self, limit: int = 4000) -> str:
        self._drain_stderr()
        return self.log.text(limit)

    def close(self) -> None:
        self._selector.close()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass


class Runner:
    """Keeps one worker alive on one GPU and judges jobs through it.

    `judge` never raises for anything a candidate does; it returns a `JobResult`
    whose `fatal` says how the job ended early (a hang, a crash, a sticky CUDA
    error). It raises `WorkerUnavailable` only when no worker can be started.
    """

    def __init__(self, config: RunnerConfig | None = None) -> None:
        self.config = config or RunnerConfig()
        self._worker: _Worker | None = None
        self.device: DeviceInfo | None = None
        self.no_device_reason: str | None = None
        self.starts = 0                 # how many workers were started (each replacement counts)

    # -- life cycle ---------------------------------------------------------

    def start(self) -> DeviceInfo | None:
        """Start a worker (if none is alive) and return its device, or None when it has no GPU."""
        if self._worker is not None and self._worker.proc.poll() is None:
            return self.device
        self._discard()
        worker = _Worker(self.config)
        self.starts += 1
        if not worker.send({"op": "hello"}):
            tail = worker.stderr_tail()
            worker.kill()
            worker.close()
            raise WorkerUnavailable(f"the GPU worker did not start: {tail.strip()[-500:]}")
        deadline = time.monotonic() + self.config.start_timeout_s
        while True:
            answer = worker.read_line(deadline)
            if isinstance(answer, str):
                tail = worker.stderr_tail()
                worker.kill()
                worker.close()
                raise WorkerUnavailable(f"the GPU worker gave no hello ({answer}): {tail.strip()[-800:]}")
            if answer.get("event") == "hello":
                break
        if not answer.get("ok"):
            self.no_device_reason = str(answer.get("error", "no GPU"))
            self.device = None
            worker.send({"op": "exit"})
            worker.wait_exit(5.0)
            worker.close()
            return None
        self.device = DeviceInfo.from_json(answer["device"])
        self._worker = worker
        return self.device

    def close(self) -> None:
        if self._worker is not None:
            self._worker.send({"op": "exit"})
            self._worker.wait_exit(5.0)
            self._worker.close()
            self._worker = None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _discard(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker.close()
            self._worker = None

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker is not None else None

    # -- jobs ---------------------------------------------------------------

    def judge(self, job: Job, on_event: EventHandler | None = None) -> JobResult:
        """Run one job; sizes finished before a hang or crash are kept in the result.

        `result.budget_spent_s` says how much of the job's GPU-time budget its untrusted steps used."""
        budget = Budget(job.budget_s)
        result = self._judge(job, budget, on_event)
        budget.leave({})
        result.budget_spent_s = budget.spent
        return result

    def _judge(self, job: Job, budget: Budget, on_event: EventHandler | None) -> JobResult:
        if self.start() is None:
            raise WorkerUnavailable(self.no_device_reason or "no GPU")
        worker = self._worker
        assert worker is not None
        started = time.monotonic()
        result = JobResult()
        if not worker.send({"op": "judge", "job": job.to_json()}):
            return self._died(worker, result, None, started)
        deadline = time.monotonic() + self.config.default_deadline_s
        phase: dict[str, Any] = {"phase": "start", "untrusted": False}
        while True:
            answer = worker.read_line(deadline)
            if answer == "timeout":
                if budget.spent_up(phase):
                    phase = {**phase, "budget": job.budget_s}
                return self._timed_out(worker, result, phase, started)
            if answer == "eof":
                return self._died(worker, result, phase, started)
            assert isinstance(answer, dict)
            event = answer.get("event")
            if event == "phase":
                budget.leave(phase)
                phase = answer
                wait = min(float(answer.get("deadline_s") or self.config.default_deadline_s),
                           self.config.max_deadline_s)
                if answer.get("untrusted"):
                    wait = min(wait, budget.left())
                budget.enter(answer)
                deadline = time.monotonic() + wait
            elif event == "size":
                result.sizes.append(SizeResult.from_json(answer["result"]))
            elif event == "done":
                done = JobResult.from_json(answer["result"])
                if not done.sizes:
                    done.sizes = result.sizes   # the streamed sizes stand in for a final list left empty
                result = done
                if (result.fatal is not None and result.fatal.sticky) or result.recycle:
                    # The worker's CUDA context is unusable, or holds what the candidate left: it exits by itself.
                    worker.wait_exit(10.0)
                    self._discard()
                return result
            if on_event is not None:
                on_event(answer)

    def _timed_out(self, worker: _Worker, result: JobResult, phase: dict[str, Any], started: float) -> JobResult:
        worker.kill()
        tail = worker.stderr_tail()
        self._discard()
        size = phase.get("size")
        if phase.get("untrusted") and phase.get("budget") is not None:
            message = (f"the candidate's GPU-time budget of {phase['budget']:g} s ran out while {phase.get('phase')}"
                       f"{'' if size is None else f' at size {size}'}; the worker was killed")
            result.fatal = Fatal("hang_timeout", message, size_index=size, sticky=True)
        elif phase.get("untrusted"):
            message = (f"no answer within {phase.get('deadline_s')} s while {phase.get('phase')}"
                       f"{'' if size is None else f' at size {size}'}; the worker was killed")
            result.fatal = Fatal("hang_timeout", message, size_index=size, sticky=True)
        else:
            result.fatal = Fatal("tool_error", f"the worker stalled in its own step {phase.get('phase')!r}: "
                                 f"{tail.strip()[-800:]}", size_index=size, sticky=True)
        result.worker_s = time.monotonic() - started
        return result

    def _died(self, worker: _Worker, result: JobResult, phase: dict[str, Any] | None, started: float) -> JobResult:
        code = worker.wait_exit(10.0)
        tail = worker.stderr_tail()
        self._discard()
        category, description = category_of_exit(code)
        size = phase.get("size") if phase else None
        untrusted = bool(phase and phase.get("untrusted"))
        result.fatal = Fatal(
            category if untrusted else "tool_error",
            f"{description}{'' if phase is None else ' while ' + str(phase.get('phase'))}: {tail.strip()[-800:]}",
            size_index=size,
            signal=-code if code is not None and code < 0 else None,
            sticky=True,
        )
        result.worker_s = time.monotonic() - started
        return result
