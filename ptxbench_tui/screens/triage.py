"""Triage (4): failure categories counted by model, task or context level.

Enter on a count drills into those samples (category × the column's model,
task or level); there a sample is relabelled (l) or marked for Fixit (f).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from ptxbench.db import browse
from ptxbench.db import browse_summary as summary
from ptxbench.db import verdict
from ptxbench.engine.categories import DESCRIPTIONS, STAGE_OF
from ptxbench.tui import keys
from ptxbench.tui.messages import ShowSamples
from ptxbench.tui.screens.base import ViewScreen
from ptxbench.tui.widgets.common import Table

FIXED_COLUMNS = ("Category", "Stage", "Total")
FILTER_FIELD = {"model": "model", "task": "task_id", "level": "context_level"}


class TriageScreen(ViewScreen):
    MODE = "triage"
    AUTO_FOCUS = "#triage-table"
    BINDINGS = keys.bindings("triage")

    def __init__(self) -> None:
        super().__init__()
        self.dimension = "model"
        self.include_ok = False
        self.table_data: summary.TriageTable | None = None

    def compose_body(self) -> ComposeResult:
        yield Static("", id="triage-status", classes="status")
        yield Table(id="triage-table", cursor_type="cell")
        yield Static("", id="triage-help", classes="status")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(Table).focus()

    def refresh_data(self) -> None:
        cells = self.ptx.cells
        if cells is None:
            return
        self.table_data = summary.triage(cells, self.dimension, include_ok=self.include_ok)
        table = self.query_one(Table)
        table.clear(columns=True)
        table.add_columns(*FIXED_COLUMNS, *self.table_data.columns)
        for category, total, counts in self.table_data.rows:
            table.add_row(category, STAGE_OF.get(category, "—"), str(total), *[str(n) if n else "·" for n in counts])
        n = sum(total for _, total, _ in self.table_data.rows)
        what = "all verdicts" if self.include_ok else "failures"
        self.query_one("#triage-status", Static).update(
            f"{n:,} {what} by [b]{self.dimension}[/b] ({verdict.describe(self.ptx.reader.newest_evaluation)} of each sample, static verdicts included where the GPU stages were skipped)"
        )
        self._describe()

    def _describe(self) -> None:
        table = self.query_one(Table)
        data = self.table_data
        text = ""
        if data and data.rows and 0 <= table.cursor_row < len(data.rows):
            category = data.rows[table.cursor_row][0]
            text = f"[b]{category}[/b]: {DESCRIPTIONS.get(category, 'passes')}"
        self.query_one("#triage-help", Static).update(text)

    def on_data_table_cell_highlighted(self, _event: DataTable.CellHighlighted) -> None:
        self._describe()

    def on_data_table_cell_selected(self, event: DataTable.CellSelected) -> None:
        self.drill(event.coordinate.row, event.coordinate.column)

    def drill(self, row: int, column: int) -> None:
        data = self.table_data
        if data is None or not 0 <= row < len(data.rows):
            return
        category = data.rows[row][0]
        flt = browse.SampleFilter(category=category)
        value_index = column - len(FIXED_COLUMNS)
        if 0 <= value_index < len(data.columns):
            flt = flt.with_(**{FILTER_FIELD[self.dimension]: data.columns[value_index]})
        self.post_message(ShowSamples(flt))

    # -- actions ---------------------------------------------------------------------
    def action_cycle_dimension(self) -> None:
        dims = summary.TRIAGE_DIMENSIONS
        self.dimension = dims[(dims.index(self.dimension) + 1) % len(dims)]
        self.refresh_data()

    def action_toggle_ok(self) -> None:
        self.include_ok = not self.include_ok
        self.refresh_data()

    def action_labelled(self) -> None:
        self.post_message(ShowSamples(browse.SampleFilter(labelled_only=True)))

    def action_fixit_list(self) -> None:
        self.post_message(ShowSamples(browse.SampleFilter(fixit_only=True)))
