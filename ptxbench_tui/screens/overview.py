"""Overview (1): rates per model × task × arch × context level; Enter drills into the samples."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.widgets import Select, Static

from ptxbench.db import browse
from ptxbench.db import browse_summary as summary
from ptxbench.db import verdict
from ptxbench.tui import keys
from ptxbench.tui.messages import MetricsLoaded, ShowSamples, StoreFailed
from ptxbench.tui.screens.base import ViewScreen
from ptxbench.tui.widgets.common import FilterBar, pct, speed
from ptxbench.tui.widgets.row_table import RowTable

COLUMNS = ("Model", "Task", "Arch", "Level", "Samples", "Judged", "Compiled", "Correct", "Uses req.", "fast₁.₀", "Best", "Geomean")
TRAJ_COLUMNS = ("Model", "Task", "Arch", "Level", "Traj.", "Samples", "Compiled", "Correct", "Uses req.", "fast₁.₀", "Best", "Geomean", "pass@1")


class OverviewScreen(ViewScreen):
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

    def compose_body(self) -> ComposeResult:
        yield FilterBar([("model", "Model"), ("task_id", "Task"), ("arch", "Arch"), ("context_level", "Level")], id="overview-filters")
        yield Static("", id="overview-status", classes="status")
        yield RowTable(id="overview-table")

    def on_mount(self) -> None:
        super().on_mount()
        table = self.query_one(RowTable)
        table.set_columns(list(COLUMNS))
        table.loading = self.ptx.cells is None

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
        if self.trajectories:
            table.set_columns(list(TRAJ_COLUMNS), right=tuple(range(4, len(TRAJ_COLUMNS))))
            if self.metrics_rows is None:
                table.loading = True
                self._status("per trajectory (db.metrics): computing…")
                return
            f = self.filter
            self.rows = [
                r for r in self.metrics_rows
                if (not f.model or r.model == f.model) and (not f.task_id or r.task == f.task_id)
                and (not f.arch or r.arch == f.arch) and (not f.context_level or r.context == f.context_level)
            ]
            table.set_rows([
                (r.model, r.task, r.arch, r.context, str(r.trajectories), str(r.samples), pct(r.compile_rate),
                 pct(r.correct_rate), pct(r.uses_rate), pct(r.fast.get(1.0)), speed(r.best_speedup),
                 speed(r.geomean_speedup), pct(r.pass_at.get(1)))
                for r in self.rows
            ], cursor=cursor)
            self._status(f"{len(self.rows)} rows · per trajectory, train split, every turn (db.metrics) · m: per sample")
        else:
            table.set_columns(list(COLUMNS), right=tuple(range(4, len(COLUMNS))))
            self.rows = summary.overview(cells, self.filter, by_level=self.by_level)
            table.set_rows([
                (r.model, r.task_id, r.arch, r.context_level, str(r.samples), str(r.judged), pct(r.compiled),
                 pct(r.correct), pct(r.uses), pct(r.fast_1), speed(r.best_speedup), speed(r.geomean_speedup))
                for r in self.rows
            ], cursor=cursor)
            levels = "split by context level" if self.by_level else "context levels folded"
            hint = "Enter: samples of a row"
            if self.rows and not any(r.judged or r.skipped for r in self.rows):
                hint = "nothing judged yet: in Samples (3) press R to judge them all (static stages where there is no GPU)"
            self._status(f"{len(self.rows)} rows · per sample ({verdict.describe(self.ptx.reader.newest_evaluation)}) · {levels} · {hint}")

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
        self.post_message(ShowSamples(flt))

    def on_metrics_loaded(self, message: MetricsLoaded) -> None:
        self.metrics_rows = message.rows
        self.redraw()

    # -- actions ---------------------------------------------------------------------
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
        self.redraw()

    @work(thread=True, exclusive=True, group="overview-metrics", exit_on_error=False, description="trajectory metrics")
    def load_metrics(self) -> None:
        from ptxbench.db.metrics import compute_metrics

        try:
            rows = self.ptx.reader.read(compute_metrics, group_by=("task", "model", "arch", "context"), include_reference=True)
        except Exception as exc:  # noqa: BLE001 - a failed read is shown, never fatal
            self.post_message(StoreFailed(f"metrics: {exc}"))
            return
        self.post_message(MetricsLoaded(rows))
