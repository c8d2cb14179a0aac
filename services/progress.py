"""The events of a batch evaluation, typed.

`ptxbench eval --json-progress` writes them as JSON lines and the explorer's Live view reads
them back (docs/eval-progress.md is the contract on the wire, unchanged): every line is
`{"event": KIND, "t": seconds, ...fields}`, the fields in the order of the dataclass below.
An optional field that is None is left off the line, as it always was.

A batch spread over several GPU workers (services/parallel.py: a pool on one host, or a Dask
cluster) adds what a one-worker batch never writes: the optional `worker` field on the events of
one sample, `workers` on `start`, and `worker` events when a worker becomes ready, restarts,
leaves or is taken out of the pool. A reader of an older version ignores the fields and keeps
the new kind as `Unknown`, so a one-worker batch's lines are the same as before.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Protocol, TextIO, Union


@dataclass(frozen=True)
class Start:
    kind: ClassVar[str] = "start"
    total: int
    device: str | None
    static_only: bool
    workers: int | None = None  # GPU workers (or judging threads) of a parallel batch; optional on the wire


@dataclass(frozen=True)
class SampleStarted:
    kind: ClassVar[str] = "sample"
    sample_id: int
    task_id: str
    index: int
    worker: str | None = None  # which worker judges it (parallel batches); optional on the wire


@dataclass(frozen=True)
class StageChanged:
    kind: ClassVar[str] = "stage"
    sample_id: int
    stage: str
    status: str  # "begin" or "end"
    category: str | None = None  # optional on the wire
    worker: str | None = None  # optional on the wire


@dataclass(frozen=True)
class Result:
    kind: ClassVar[str] = "result"
    sample_id: int
    evaluation_id: int
    category: str
    status: str
    speedup: float | None
    time_ms: float | None
    worker: str | None = None  # optional on the wire

    @classmethod
    def of_row(cls, sample_id: int, row: Any, worker: str | None = None) -> Result:
        """The event for an evaluation row just committed."""
        return cls(
            sample_id=sample_id,
            evaluation_id=row.id,
            category=row.category,
            status=row.status,
            speedup=row.speedup,
            time_ms=row.time_ms,
            worker=worker,
        )


@dataclass(frozen=True)
class Log:
    kind: ClassVar[str] = "log"
    level: str  # info, warning, error
    message: str


@dataclass(frozen=True)
class Error:
    kind: ClassVar[str] = "error"
    sample_id: int | None
    message: str
    evaluation_id: int | None = None  # the row that records the failed attempt; optional on the wire
    worker: str | None = None  # optional on the wire


@dataclass(frozen=True)
class Done:
    kind: ClassVar[str] = "done"
    judged: int
    failed_tool: int
    cancelled: bool


@dataclass(frozen=True)
class WorkerChanged:
    """A GPU worker of a parallel batch changed state: `ready`, `restarted`, `retired` (taken out of the pool
    for good), `joined` or `lost` (a cluster worker came or went)."""

    kind: ClassVar[str] = "worker"
    worker: str
    state: str
    device: str | None = None  # the device's name, where known
    shared: bool | None = None  # another worker judges on the same GPU: its timing is not clean
    message: str | None = None


WORKER_STATES = ("ready", "restarted", "retired", "joined", "lost")


@dataclass(frozen=True)
class Unknown:
    """A well-formed line of a kind this version does not know (a newer engine): kept whole."""

    kind: ClassVar[str] = "unknown"
    raw: dict[str, Any]


Event = Union[Start, SampleStarted, StageChanged, Result, Log, Error, Done, WorkerChanged, Unknown]
KINDS: dict[str, type] = {
    c.kind: c for c in (Start, SampleStarted, StageChanged, Result, Log, Error, Done, WorkerChanged)
}
OPTIONAL = frozenset(
    {
        (StageChanged, "category"),
        (Error, "evaluation_id"),
        (Start, "workers"),
        (SampleStarted, "worker"),
        (StageChanged, "worker"),
        (Result, "worker"),
        (Error, "worker"),
        (WorkerChanged, "device"),
        (WorkerChanged, "shared"),
        (WorkerChanged, "message"),
    }
)


class Sink(Protocol):
    """Where a batch's events go: a JSON-lines writer, a progress bar, a test's list."""

    def emit(self, event: Event) -> None: ...


class JsonLines:
    """A sink that writes each event as one line (docs/eval-progress.md), `t` counted from its making."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.t0 = time.monotonic()

    def emit(self, event: Event) -> None:
        out = self.stream or sys.stdout
        out.write(dumps(event, round(time.monotonic() - self.t0, 3)) + "\n")
        out.flush()


def to_wire(event: Event, t: float) -> dict[str, Any]:
    """The event as the JSON object of docs/eval-progress.md."""
    if isinstance(event, Unknown):
        return dict(event.raw)
    out: dict[str, Any] = {"event": event.kind, "t": t}
    for f in fields(event):
        value = getattr(event, f.name)
        if value is None and (type(event), f.name) in OPTIONAL:
            continue
        out[f.name] = value
    return out


def dumps(event: Event, t: float) -> str:
    """One line of the stream (no newline)."""
    return json.dumps(to_wire(event, t), default=str)


def from_wire(obj: dict[str, Any]) -> Event:
    """A decoded line → its event. Missing fields take a neutral value, so a line from an older or
    newer engine is still shown rather than refused."""
    cls = KINDS.get(str(obj.get("event", "")))
    if cls is None:
        return Unknown(dict(obj))
    # Annotations are strings here (postponed evaluation); an optional one has no neutral value but None.
    neutral = {"int": 0, "bool": False, "str": ""}
    values = {f.name: obj[f.name] if f.name in obj else neutral.get(str(f.type)) for f in fields(cls)}
    return cls(**values)


def parse_line(text: str) -> Event | None:
    """A line of the stream → its event; None for a line that is not a JSON object with an `event`."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or "event" not in obj:
        return None
    return from_wire(obj)
