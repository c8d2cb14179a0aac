"""Overview (1): rates per model × task × arch × context level; Enter drills into the samples."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.widgets import Select, Static

from ptxbench.db import browse
from ptxbench.db import browse_summary as summary
from ptxbench.db import verdict
from ptxbench.tui import keys
from ptxbench.tui.messages import MetricsLoaded, StoreFailed
from ptxbench.tui.screens.base import ViewScreen
from ptxbench.tui.screens.moves import KernelMoves
from ptxbench.tui.untrusted import markup_value
from ptxbench.tui.widgets.common import FilterBar, FilterPanel, pct, speed
from ptxbench.tui.widgets.row_table import RowTable

# (title, value of a summary.OverviewRow); the value sorts, the title names it. Correctness and
# fast₁.₀ are per split, apart: the plain column is the train sizes, `h-o` the held-out sizes.
COLUMNS: tuple[tuple[str, Any], ...] = (
    ("Model", lambda r: r.model), ("Task", lambda r: r.task_id), ("Arch", lambda r: r.arch),
    ("Level", lambda r: r.context_level), ("Samples", lambda r: r.samples), ("Judged", lambda r: r.judged),
    ("Compiled", lambda r: r.compiled), ("Correct", lambda r: r.correct), ("Correct h-o", lambda r: r.correct_heldout),
    ("Uses req.", lambda r: r.uses), ("fast₁.₀", lambda r: r.fast_1), ("fast₁.₀ h-o", lambda r: r.fast_1_heldout),
    ("Best", lambda r: r.best_speedup), ("Geomean", lambda r: r.geomean_speedup),
)


class TrajectoryRow:
    """A db.metrics.MetricsRow of the train split with its held-out twin beside it."""

    def __init__(self, train: Any, heldout: Any | None) -> None:
        self.train = train
        self.heldout = heldout

    def __getattr__(self, name: str) -> Any:
        return getattr(self.train, name)

    def held(self, get: Any) -> Any:
        return None if self.heldout is None else get(self.heldout)

    def as_dict(self) -> dict[str, Any]:
        d = self.train.as_dict()
        d.pop("split", None)
        held = self.heldout.as_dict() if self.heldout is not None else {}
        for key in ("correct_rate", "correct_and_uses_rate", "fast_1", "fast_1.5", "fast_0", "pass@1", "pass@5",
                    "pass@10", "judged"):
            if key in d:
                d[f"{key}_heldout"] = held.get(key)
        return d


def pair_splits(rows: list[Any]) -> list[TrajectoryRow]:
    """db.metrics rows grouped by split → one row per group, train beside held-out."""
    key = lambda r: (r.task, r.model, r.arch, r.context, r.turn_budget)
    held = {key(r): r for r in rows if r.split == "heldout"}
    return [TrajectoryRow(r, held.get(key(r))) for r in rows if r.split == "train"]


# The same for a TrajectoryRow (per trajectory).
TRAJ_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("Model", lambda r: r.model), ("Task", lambda r: r.task), ("Arch", lambda r: r.arch),
    ("Level", lambda r: r.context), ("Traj.", lambda r: r.trajectories), ("Samples", lambda r: r.samples),
    ("Compiled", lambda r: r.compile_rate), ("Correct", lambda r: r.correct_rate),
    ("Correct h-o", lambda r: r.held(lambda h: h.correct_rate)), ("Uses req.", lambda r: r.uses_rate),
    ("fast₁.₀", lambda r: r.fast.get(1.0)), ("fast₁.₀ h-o", lambda r: r.held(lambda h: h.fast.get(1.0))),
    ("Best", lambda r: r.best_speedup), ("Geomean", lambda r: r.geomean_speedup),
    ("pass@1", lambda r: r.pass_at.get(1)), ("pass@1 h-o", lambda r: r.held(lambda h: h.pass_at.get(1))),
)
_RATES = {"Compiled", "Correct", "Correct h-o", "Uses req.", "fast₁.₀", "fast₁.₀ h-o", "pass@1", "pass@1 h-o"}
_SPEEDS = {"Best", "Geomean"}
KEEP = ("Model", "Task", "Correct", "Correct h-o", "fast₁.₀", "fast₁.₀ h-o")
FOLD_FIRST = ("Arch", "Judged", "Traj.", "Samples", "Compiled", "Uses req.", "pass@1 h-o", "pass@1", "Level", "Geomean",
              "Best")

# What each rate counts: the footnote under the table.
PER_SAMPLE_NOTE = (
    "Rates per sample, unknowns (not run) left out · Correct, fast₁.₀, Best, Geomean: train sizes; h-o: held-out · "
    "Uses req.: every requested family in SASS (not assembled: no) · fast₁.₀: correct, uses, > 1× (h-o: geomean of "
    "its sizes) · Judged: GPU stages ran or it failed before them"
)
PER_TRAJECTORY_NOTE = (
    "Rates per trajectory (a first turn and its follow-ups; a fact holds if any turn has it) · plain: train sizes, "
    "h-o: held-out sizes · Traj.: trajectories, Samples: their judged turns · Uses req., fast₁.₀ as per sample · "
    "pass@1: correct and uses"
)


def _cell(title: str, value: Any) -> str:
    if title in _RATES:
        return pct(value)
    if title in _SPEEDS:
        return speed(value)
    return "—" if value is None else str(value)


class OverviewScreen(KernelMoves, ViewScreen):
    MODE = "overview"
    AUTO_FOCUS = "#overview-table"
    BINDINGS = keys.bindings("overview")

    def __init__(self) -> None:
        super().__init__()
        self.filter = summary.OverviewFilter()
        self.by_level = True
        self.trajectories = False  # per trajectory, from db.metrics (slower; computed on demand)
        self.metrics_rows: list | None = None
        self.rows: list = []  # what the table shows, in order
        self.sort: tuple[str, bool] | None = None  # (column title, descending); None: the summary's order

    def compose_body(self) -> ComposeResult:
        with FilterPanel(id="overview-bar"):
            yield FilterBar([("model", "Model"), ("task_id", "Task"), ("arch", "Arch"), ("context_level", "Level")],
                            id="overview-filters")
        yield Static("", id="overview-status", classes="status")
        yield RowTable(id="overview-table")
        yield Static("", id="overview-note", classes="legend")

    def on_mount(self) -> None:
        super().on_mount()
        table = self.query_one(RowTable)
        self._set_columns()
        table.loading = self.ptx.cells is None

    @property
    def columns(self) -> tuple[tuple[str, Any], ...]:
        return TRAJ_COLUMNS if self.trajectories else COLUMNS

    def _set_columns(self) -> None:
        titles = [t for t, _ in self.columns]
        table = self.query_one(RowTable)
        if table.labels != titles:
            table.set_columns(
                titles, right=tuple(i for i, t in enumerate(titles) if i >= 4), keep=tuple(titles.index(t) for t in KEEP),
                fold_order=tuple(titles.index(t) for t in FOLD_FIRST if t in titles))
        table.show_sort(*(self.sort or (None,)))

    def refresh_data(self) -> None:
        facets = self.ptx.facets
        if facets is not None:
            self.query_one(FilterBar).set_options(
                {"model": facets.models, "task_id": facets.tasks, "arch": facets.archs, "context_level": facets.levels}
            )
        if self.trajectories:
            self.metrics_rows = None
            self.load_metrics()
        self.redraw()

    def redraw(self) -> None:
        table = self.query_one(RowTable)
        cells = self.ptx.cells
        if cells is None:
            return
        table.loading = False
        cursor = table.cursor_row
        self._set_columns()
        described = markup_value(self._describe_filter())  # filter values are names from the store
        if self.trajectories:
            if self.metrics_rows is None:
                table.loading = True
                self._status("per trajectory (db.metrics): computing…")
                return
            f = self.filter
            rows = [
                r for r in self.metrics_rows
                if (not f.model or r.model == f.model) and (not f.task_id or r.task == f.task_id)
                and (not f.arch or r.arch == f.arch) and (not f.context_level or r.context == f.context_level)
            ]
            self.rows = self._sorted(rows)
            self._status(f"{len(self.rows)} rows · [b]per trajectory[/b] (db.metrics) · {described} · t: per sample")
            self.query_one("#overview-note", Static).update(PER_TRAJECTORY_NOTE)
        else:
            self.rows = self._sorted(summary.overview(cells, self.filter, by_level=self.by_level))
            levels = "by level" if self.by_level else "levels folded"
            hint = "t: per trajectory"
            if self.rows and not any(r.judged or r.skipped for r in self.rows):
                hint = "nothing judged yet: in Samples (3) press R to judge them all (static stages where there is no GPU)"
            self._status(f"{len(self.rows)} rows · [b]per sample[/b] ({verdict.describe(self.ptx.reader.newest_evaluation)}) · {levels} · {described} · {hint}")
            self.query_one("#overview-note", Static).update(PER_SAMPLE_NOTE)
        table.set_rows([tuple(_cell(t, get(r)) for t, get in self.columns) for r in self.rows], cursor=cursor)

    def _sorted(self, rows: list) -> list:
        if self.sort is None:
            return rows
        title, descending = self.sort
        get = dict(self.columns).get(title)
        if get is None:
            return rows
        present = [r for r in rows if get(r) is not None]
        missing = [r for r in rows if get(r) is None]  # empty values last, either way
        return sorted(present, key=get, reverse=descending) + missing

    def _describe_filter(self) -> str:
        f = self.filter
        parts = [f"{n}={v}" for n, v in (("model", f.model), ("task", f.task_id), ("arch", f.arch), ("level", f.context_level)) if v]
        order = f" · by {self.sort[0]} {'↓' if self.sort[1] else '↑'}" if self.sort else ""
        return (", ".join(parts) or "all rows") + order + " · / filters"

    def _status(self, text: str) -> None:
        self.query_one("#overview-status", Static).update(text)

    # -- events ----------------------------------------------------------------------
    @on(Select.Changed, "FilterBar Select")
    def _filters_changed(self, event: Select.Changed) -> None:
        values = self.query_one(FilterBar).user_change()
        if values is not None:
            self.filter = summary.OverviewFilter(**values)
            self.redraw()

    def on_row_table_row_selected(self, event: RowTable.RowSelected) -> None:
        index = event.cursor_row
        if not 0 <= index < len(self.rows):
            return
        row = self.rows[index]
        if self.trajectories:
            flt = browse.SampleFilter(task_id=row.task or "", model=row.model or "", context_level=row.context or "")
        else:
            flt = row.filter()
        self.show_samples(flt)

    def on_row_table_header_clicked(self, event: RowTable.HeaderClicked) -> None:
        self.set_sort(event.column)

    def on_metrics_loaded(self, message: MetricsLoaded) -> None:
        self.metrics_rows = message.rows
        self.redraw()

    # -- actions ---------------------------------------------------------------------
    def set_sort(self, title: str) -> None:
        descending = not self.sort[1] if self.sort and self.sort[0] == title else True
        self.sort = (title, descending)
        self.redraw()

    def action_sort(self) -> None:
        current, descending = self.sort or (None, True)
        self.ask_sort([t for t, _ in self.columns], current, descending, "the rows shown")

    def action_toggle_levels(self) -> None:
        self.by_level = not self.by_level
        self.redraw()

    def action_toggle_metrics(self) -> None:
        self.trajectories = not self.trajectories
        if self.trajectories and self.metrics_rows is None:
            self.load_metrics()
        self.redraw()

    def action_clear_filters(self) -> None:
        self.query_one(FilterBar).set_values({})
        self.filter = summary.OverviewFilter()
        self.sort = None
        self.redraw()

    def action_export(self) -> None:
        dicts = [r.as_dict() if hasattr(r, "as_dict") else asdict(r) for r in self.rows]
        unit = "per-trajectory" if self.trajectories else "per-sample"
        described = self._describe_filter().removesuffix(" · / filters")
        self.export_rows(f"overview-{unit}", f"{len(dicts)} {unit} overview rows ({described})",
                         list(dicts[0]) if dicts else ["model"], dicts)

    @work(thread=True, exclusive=True, group="overview-metrics", exit_on_error=False, description="trajectory metrics")
    def load_metrics(self) -> None:
        from ptxbench.db.metrics import compute_metrics

        try:
            rows = self.ptx.reader.read(compute_metrics, group_by=("task", "model", "arch", "context", "split"),
                                        include_reference=True)
        except Exception as exc:  # a failed read is shown, never fatal
            self.post_message(StoreFailed(f"metrics: {exc}"))
            return
        self.post_message(MetricsLoaded(pair_splits(rows)))
