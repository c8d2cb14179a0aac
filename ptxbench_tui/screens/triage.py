"""Triage (4): verdicts counted by model, task or context level, or a person's labels.

Rows are the automatic verdicts (a category and what it does not say: held-out
failures and kernels that never ran are rows of their own), or with `L` the
labels people gave (and the failures no one has labelled yet). Enter on a count
drills into those samples; there a sample is relabelled (l) or marked for Fixit (f).
"""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from ptxbench.db import browse, triage
from ptxbench.db import browse_summary as summary
from ptxbench.db import verdict as evaluation_rule  # which evaluation speaks (db/verdict.py)
from ptxbench.engine.categories import DESCRIPTIONS, STAGE_OF
from ptxbench.tui import keys
from ptxbench.tui.messages import StoreFailed
from ptxbench.tui.screens.base import ViewScreen
from ptxbench.tui.screens.moves import KernelMoves
from ptxbench.tui.untrusted import markup_value
from ptxbench.tui.verdict import NOTE_HELDOUT, NOTE_NOT_RUN, NOTE_TEXT, legend, verdict
from ptxbench.tui.widgets.common import Table

FIXED_COLUMNS = ("Verdict", "Stage", "Total")
LABEL_COLUMNS = ("Label", "Stage", "Total")
FILTER_FIELD = {"model": "model", "task": "task_id", "level": "context_level"}


class TriageScreen(KernelMoves, ViewScreen):
    MODE = "triage"
    AUTO_FOCUS = "#triage-table"
    BINDINGS = keys.bindings("triage")

    def __init__(self) -> None:
        super().__init__()
        self.dimension = "model"
        self.include_ok = False
        self.by_label = False
        self.table_data: summary.TriageTable | None = None

    def compose_body(self) -> ComposeResult:
        yield Static("", id="triage-status", classes="status")
        yield Table(id="triage-table", cursor_type="cell")
        yield Static("", id="triage-help", classes="status")
        yield Static("", id="triage-legend", classes="legend")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(Table).focus()

    def refresh_data(self) -> None:
        if self.by_label:
            self.load_labels(self.dimension)
            return
        cells = self.ptx.cells
        if cells is None:
            return
        self.show(summary.triage(cells, self.dimension, include_ok=self.include_ok))

    @work(thread=True, exclusive=True, group="triage-labels", exit_on_error=False, description="label counts")
    def load_labels(self, dimension: str) -> None:
        try:
            data = self.ptx.reader.read(triage.label_triage, dimension)
        except Exception as exc:
            self.post_message(StoreFailed(f"triage: {exc}"))
            return
        self.app.call_from_thread(self.show, data)

    def show(self, data: summary.TriageTable) -> None:
        self.table_data = data
        table = self.query_one(Table)
        table.clear(columns=True)
        table.add_columns(*(LABEL_COLUMNS if self.by_label else FIXED_COLUMNS), *data.columns)
        for category, note, total, counts in data.rows:
            name = category if self.by_label else verdict(category, note)
            stage = "—" if self.by_label else _stage(category, note)
            table.add_row(name, stage, str(total), *[str(n) if n else "·" for n in counts])
        n = sum(total for _, _, total, _ in data.rows)
        if self.by_label:
            what = "samples by a person's latest label, and the failures no one has labelled"
        else:
            what = "verdicts, ok included" if self.include_ok else "verdicts to look at (failures, held-out failures, never run)"
        self.query_one("#triage-status", Static).update(
            f"{n:,} {what} by [b]{self.dimension}[/b] · per sample ({evaluation_rule.describe(self.ptx.reader.newest_evaluation)}; "
            "static verdicts included where the GPU stages did not run) · L: " + ("automatic verdicts" if self.by_label else "by label")
        )
        notes = set() if self.by_label else {note for _, note, _, _ in data.rows if note}
        self.query_one("#triage-legend", Static).update(legend(notes) if notes else "")
        self.query_one("#triage-legend", Static).display = bool(notes)
        self._describe()

    def _describe(self) -> None:
        table = self.query_one(Table)
        data = self.table_data
        text = ""
        if data and data.rows and 0 <= table.cursor_row < len(data.rows):
            category, note = data.rows[table.cursor_row][:2]
            shown = markup_value(category)  # a label's category is whatever the store holds
            if self.by_label:
                text = (f"[b]{shown}[/b]: failures with no label yet (n and p in Samples step through them)"
                        if category == triage.UNLABELLED else f"labelled [b]{shown}[/b]: {DESCRIPTIONS.get(category, '')}")
            else:
                extra = "".join(f" — [b]{NOTE_TEXT.get(w, markup_value(w))}[/b]" for w in note.split())
                text = f"[b]{shown}[/b]: {DESCRIPTIONS.get(category, 'passes')}{extra}"
        self.query_one("#triage-help", Static).update(text)

    def on_data_table_cell_highlighted(self, _event: DataTable.CellHighlighted) -> None:
        self._describe()

    def on_data_table_cell_selected(self, event: DataTable.CellSelected) -> None:
        self.drill(event.coordinate.row, event.coordinate.column)

    def drill(self, row: int, column: int) -> None:
        data = self.table_data
        if data is None or not 0 <= row < len(data.rows):
            return
        category, note = data.rows[row][:2]
        if self.by_label and category == triage.UNLABELLED:
            flt = browse.SampleFilter()
            self.notify("Every sample: n and p step through the failures no one has labelled.")
        elif self.by_label:
            flt = browse.SampleFilter(label=category)
        else:
            flt = browse.SampleFilter(category=category, note=note)
        value_index = column - len(FIXED_COLUMNS)
        if 0 <= value_index < len(data.columns):
            flt = flt.with_(**{FILTER_FIELD[self.dimension]: data.columns[value_index]})
        self.show_samples(flt)

    # -- actions ---------------------------------------------------------------------
    def action_cycle_dimension(self) -> None:
        dims = summary.TRIAGE_DIMENSIONS
        self.dimension = dims[(dims.index(self.dimension) + 1) % len(dims)]
        self.refresh_data()

    def action_toggle_ok(self) -> None:
        self.include_ok = not self.include_ok
        self.refresh_data()

    def action_toggle_labels(self) -> None:
        self.by_label = not self.by_label
        self.refresh_data()

    def action_fixit_list(self) -> None:
        self.show_samples(browse.SampleFilter(fixit_only=True))

    def action_export(self) -> None:
        data = self.table_data
        if data is None:
            return
        first = "label" if self.by_label else "category"
        columns = [first, "verdict", "verdict_note", "total", *data.columns]
        rows = [dict(zip(columns, [c, c if self.by_label else verdict(c, n), n, t, *counts]))
                for c, n, t, counts in data.rows]
        self.export_rows(f"triage-{'labels' if self.by_label else 'verdicts'}-by-{self.dimension}",
                         f"the triage counts by {self.dimension} ({len(rows)} rows)", columns, rows)


def _stage(category: str, note: str) -> str:
    """Where a triage row's verdict was reached: a note says more than the category's stage."""
    words = note.split()
    if NOTE_NOT_RUN in words:
        return "static only"
    if NOTE_HELDOUT in words:
        return "verify (held-out)"
    return STAGE_OF.get(category, "—")
