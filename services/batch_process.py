"""A batch evaluation as a separate process, followed through its JSON-lines progress.

`ptxbench eval --db PATH --sample ID … --json-progress` is the only writer of
evaluations while it runs (docs/eval-progress.md); the explorer's Live view starts
it, reads one typed event per line (services/progress.py), and can end it with
SIGTERM (the batch stops after the current sample's row is committed or rolled
back). A process that dies or prints garbage cannot take its caller or the store
with it.

One engine at a time per GPU: a lock file taken with flock, so two explorers
(for example two browser sessions of `ptxbench-tui --serve`) never time on the
same device at once.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path

from ptxbench.services import progress as ev

TERMINATE_GRACE_S = 15.0


class GpuLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return True

    def holder(self) -> str:
        try:
            return self.path.read_text().strip() or "?"
        except OSError:
            return "?"

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def gpu_lock_path(folder: Path, device: str | None = None) -> Path:
    device = device or os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    return folder / f"ptxbench-engine-gpu{device}.lock"


def default_engine_cmd() -> list[str]:
    """`ptxbench eval`, from the same environment as the caller."""
    beside = Path(sys.executable).with_name("ptxbench")
    if beside.exists():
        return [str(beside), "eval"]
    found = shutil.which("ptxbench")
    return [found or "ptxbench", "eval"]


def engine_command(base: list[str], db_path: Path, sample_ids: list[int]) -> list[str]:
    cmd = [*base, "--db", str(db_path)]
    for sid in sample_ids:
        cmd += ["--sample", str(int(sid))]
    return [*cmd, "--json-progress"]


class BatchProcess:
    def __init__(self, cmd: list[str]) -> None:
        self.cmd = cmd
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr_tail: deque[str] = deque(maxlen=20)
        self.saw_done = False
        self.cancelled = False
        self._stderr_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.cmd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=1 << 24,  # one event line may carry a long message
        )
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self.proc and self.proc.stderr
        while line := await self.proc.stderr.readline():
            self.stderr_tail.append(line.decode("utf-8", "replace").rstrip())

    async def events(self) -> AsyncIterator[ev.Event]:
        """Each stdout line as an event; a line that is not a JSON object becomes a `log` event."""
        assert self.proc and self.proc.stdout
        while line := await self.proc.stdout.readline():
            text = line.decode("utf-8", "replace").strip()
            if not text:
                continue
            event = ev.parse_line(text)
            if event is None:
                yield ev.Log(level="warning", message=f"engine printed: {text[:500]}")
                continue
            if isinstance(event, ev.Done):
                self.saw_done = True
            yield event

    def terminate(self) -> bool:
        """SIGTERM: the engine finishes or rolls back the current sample and stops."""
        if self.proc is None or self.proc.returncode is not None:
            return False
        self.cancelled = True
        try:
            self.proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            return False
        return True

    async def wait(self) -> int:
        assert self.proc is not None
        try:
            rc = await asyncio.wait_for(self.proc.wait(), timeout=TERMINATE_GRACE_S if self.cancelled else None)
        except asyncio.TimeoutError:
            self.proc.kill()
            rc = await self.proc.wait()
        if self._stderr_task is not None:
            await self._stderr_task
        return rc

    async def kill(self) -> None:
        """On the explorer's way out: end the child so it never outlives us."""
        if self.proc is not None and self.proc.returncode is None:
            self.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), timeout=5.0)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()
