"""Messages between workers, screens and the app.

Workers only post these; the handlers own the state. Results carry the
request number they answer, so a late answer to an old filter is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from ptxbench.db import browse
from ptxbench.db import browse_summary as summary
from ptxbench.services import progress


# -- store data ---------------------------------------------------------------------


@dataclass
class CellsLoaded(Message):
    cells: list[summary.Cell]
    facets: summary.Facets
    saved: bool = False  # the summary saved by an earlier start: re-read after the first paint
    recheck: bool = False  # that re-read: nothing to redraw when it found the same


@dataclass
class StoreFailed(Message):
    """A read failed (corrupt, locked, vanished store): say so, keep running."""

    error: str


@dataclass
class PageLoaded(Message):
    request: int
    page: browse.Page


@dataclass
class CountLoaded(Message):
    request: int
    count: int


@dataclass
class DetailLoaded(Message):
    detail: browse.SampleDetail | None


@dataclass
class TasksLoaded(Message):
    tasks: list[browse.TaskRow]


@dataclass
class TaskDetailLoaded(Message):
    task: browse.TaskRow
    expert_code: str
    expert_sample: int | None
    prompt: str


@dataclass
class CompareLoaded(Message):
    task_id: str
    rows: list[browse.ModelBest]
    codes: dict[int, str]
    families: list[str]


@dataclass
class PlotsLoaded(Message):
    data: summary.PlotData


@dataclass
class MetricsLoaded(Message):
    rows: list[Any]  # db.metrics.MetricsRow


@dataclass
class DiffReady(Message):
    request: int
    left_title: str
    right_title: str
    result: Any  # diffing.DiffResult
    stats: str
    right: int  # the right-hand sample (resolved when it was "the fix partner")
    details: dict[int, Any]  # sample id → browse.SampleDetail, kept for the next diff


@dataclass
class LabelSaved(Message):
    key: int  # which of the app's unsaved labels was written
    sample_id: int
    what: str


@dataclass
class LabelsFlushed(Message):
    """A pass over the unsaved labels ended: all written, or stopped at `error` (kept for a retry)."""

    error: str = ""


# -- navigation ---------------------------------------------------------------------


@dataclass
class ShowSamples(Message):
    """Switch to the samples view with this filter."""

    filter: browse.SampleFilter
    origin: str = ""  # the view that drilled (`esc` in the samples returns to it)


@dataclass
class ShowSample(Message):
    sample_id: int
    line: int | None = None  # 1-based PTX line to open at (a search match)


@dataclass
class StepUnlabelled(Message):
    """From a sample's screen: open the next (previous) unlabelled failure of the samples table."""

    sample_id: int
    backwards: bool = False


@dataclass
class ShowDiff(Message):
    left: int
    right: int | None  # None: the fix partner of `left`
    target: str = "ptx"  # what to diff first (ptxbench.tui.diffing.TARGETS)


@dataclass
class Reverify(Message):
    sample_ids: list[int]
    selected: int | None = None  # how many the filter selected, when more than were queued


# -- the engine process -------------------------------------------------------------


@dataclass
class EngineEvent(Message):
    """One line of `ptxbench eval --json-progress` (docs/eval-progress.md), typed."""

    event: progress.Event

    @property
    def kind(self) -> str:
        return self.event.kind


@dataclass
class EngineProgress(Message):
    """Coalesced progress: only the newest matters."""

    done: int
    total: int
    stage: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, EngineProgress)


@dataclass
class EngineExited(Message):
    returncode: int | None
    saw_done: bool
    stderr_tail: str
    cancelled: bool
