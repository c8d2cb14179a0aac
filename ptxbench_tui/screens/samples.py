"""Samples (3): every sample, paged, filtered and sorted in SQL, with full-text search.

The triage moves live here: sort by any column (`o`, or a click on its title),
the assembler's first error or the first bad element beside each verdict, `n`
and `p` to the next and previous failure no person has labelled, several rows
selected (space) and labelled at once, the filtered table exported whole.
After a drill from another view (Overview, Tasks, Triage) `esc` goes back to it.
"""

from __future__ import annotations

import time

from textual import on, work
from textual.app import ComposeResult
from textual.widgets import Input, Select, Static

from ptxbench.db import browse, triage
from ptxbench.engine.categories import Category
from ptxbench.tui import keys
from ptxbench.tui.messages import CountLoaded, PageLoaded, Reverify, ShowDiff, ShowSample, StoreFailed
from ptxbench.tui.screens.base import ViewScreen, take_drill_origin
from ptxbench.tui.screens.moves import KernelMoves
from ptxbench.tui.untrusted import markup_value
from ptxbench.tui.verdict import NOTE_HELDOUT, legend, verdict
from ptxbench.tui.widgets.common import FilterBar, FilterPanel, num, speed
from ptxbench.tui.kernel_files import write_table
from ptxbench.tui.widgets.row_table import RowTable

PAGE_SIZE = 200
REVERIFY_LIMIT = 500
COLUMNS = ("Id", "Task", "Arch", "Model", "Level", "Turn", "#", "Category", "Label", "Fixit", "Speedup", "ms", "Error",
           "Source")
ERROR = COLUMNS.index("Error")
# What stays on a narrow terminal, and what folds into the detail line first.
KEEP = tuple(COLUMNS.index(c) for c in ("Id", "Task", "Category", "Speedup"))
FOLD_ORDER = tuple(COLUMNS.index(c) for c in ("Source", "ms", "#", "Turn", "Fixit", "Level", "Arch", "Label", "Model", "Error"))
FILTERS = [("model", "Model"), ("task_id", "Task"), ("arch", "Arch"), ("context_level", "Level"), ("category", "Category")]


def needs_a_look(row: triage.SampleLine) -> bool:
    """An unlabelled failure (triage.UNLABELLED_FAILURE, for a row already read)."""
    failed = row.category is not None and (row.category != Category.OK or NOTE_HELDOUT in row.note.split())
    return failed and not row.labelled


class SamplesScreen(KernelMoves, ViewScreen):
    MODE = "samples"
    AUTO_FOCUS = "#samples-table"
    BINDINGS = keys.bindings("samples")

    def __init__(self) -> None:
        super().__init__()
        self.filter = browse.SampleFilter()
        self.sort = triage.Sort()
        self.page_offset = 0
        self.total: int | None = None
        self.rows: list[triage.SampleLine] = []
        self.marked: set[int] = set()  # selected sample ids, across pages
        self.request = 0
        self.requested_at = 0.0
        self.last_latency_ms: float | None = None  # filter change → page on screen (for the benchmark)
        self.rows_request = 0  # the request the table shows
        self._cursor_to: int | None = None  # the sample to put the cursor on when the page lands
        self._open_after: bool = False  # and open it (n from a sample's screen)
        # Every filtered id in the sorted column's order, read once after a sort's first page:
        # paging and the other direction then slice it instead of sorting again.
        self.order: tuple[tuple, triage.Order] | None = None
        self.back_to: str | None = None  # the view that drilled into this table (`esc` returns)

    def compose_body(self) -> ComposeResult:
        with FilterPanel(id="samples-bar"):
            yield Input(placeholder="search code, evidence, logs (full text)", id="samples-search")
            yield FilterBar(FILTERS, id="samples-filters")
        yield Static("", id="samples-status", classes="status")
        yield RowTable(id="samples-table", selectable=True)
        yield Static("", id="samples-legend", classes="legend")

    def on_mount(self) -> None:
        super().on_mount()
        self._columns()
        self.load()
        self.app.mode_change_signal.subscribe(self, self._mode_changed)

    def _mode_changed(self, mode: str) -> None:
        if mode != self.MODE:
            self.back_to = None  # left this view: a later visit is not the drill's
            self.refresh_bindings()

    def _columns(self) -> None:
        labels = list(COLUMNS)
        if self.filter.text:
            labels[ERROR] = "Match"  # a search shows where it matched (⏎ opens the sample at that line)
        self.query_one(RowTable).set_columns(labels, right=(0, 5, 6, 10, 11), keep=KEEP, fold_order=FOLD_ORDER,
                                             flex=ERROR)
        self.query_one(RowTable).show_sort(None if self.sort == triage.Sort() else self.sort.column, self.sort.descending)

    def refresh_data(self) -> None:
        facets = self.ptx.facets
        if facets is not None:
            categories = [*facets.categories, "not run", "unevaluated"]
            self.query_one(FilterBar).set_options(
                {"model": facets.models, "task_id": facets.tasks, "arch": facets.archs,
                 "context_level": facets.levels, "category": categories}
            )
        self.load(keep_offset=True)

    # -- loading ---------------------------------------------------------------------
    def load(self, *, keep_offset: bool = False) -> None:
        if not keep_offset:
            self.page_offset = 0
        self.request += 1
        self.requested_at = time.perf_counter()
        self.total = None
        key = (self.filter, self.sort.column, self.ptx.data_version)
        order = self.order[1] if self.order and self.order[0] == key and self.sort != triage.Sort() else None
        self.fetch(self.request, self.filter, self.sort, self.page_offset, order, key)

    @work(thread=True, exclusive=True, group="samples-page", exit_on_error=False, description="samples page")
    def fetch(self, request: int, flt: browse.SampleFilter, sort: triage.Sort, offset: int,
              order: triage.Order | None, key: tuple) -> None:
        try:
            read = self.ptx.reader.read
            if order is not None:
                ids = order.ids(sort.descending)
                page = browse.Page(read(triage.lines_for, ids[offset:offset + PAGE_SIZE], flt.text), offset, PAGE_SIZE)
                self.post_message(PageLoaded(request, page))
                self.post_message(CountLoaded(request, len(ids)))
                return
            self.post_message(PageLoaded(request, read(triage.sample_page, flt, sort, offset, PAGE_SIZE)))
            self.post_message(CountLoaded(request, read(browse.sample_count, flt)))
            if sort != triage.Sort():
                # Once the page is painted: reading 100 000 ids would hold the GIL the paint needs.
                self.app.call_from_thread(self.call_after_refresh, self.read_order, key, flt, sort.column)
        except Exception as exc:  # shown to the user, the view stays usable
            self.post_message(StoreFailed(f"samples: {exc}"))

    @work(thread=True, exclusive=True, group="samples-order", exit_on_error=False, description="sorted order")
    def read_order(self, key: tuple, flt: browse.SampleFilter, column: str) -> None:
        try:
            found = self.ptx.reader.read(triage.ordered, flt, column)
        except Exception as exc:
            self.post_message(StoreFailed(f"samples: {exc}"))
            return
        self.app.call_from_thread(self._keep_order, key, found)

    def _keep_order(self, key: tuple, order: triage.Order) -> None:
        self.order = (key, order)

    def on_page_loaded(self, message: PageLoaded) -> None:
        if message.request != self.request:
            return  # an answer to an older filter
        table = self.query_one(RowTable)
        keep = self._cursor_to if self._cursor_to is not None else self.selected_id()  # stay on the same sample
        self.rows_request = message.request
        self.rows = message.page.rows  # type: ignore[assignment] - triage.SampleLine rows
        cursor = next((i for i, r in enumerate(self.rows) if r.id == keep), None)
        table.set_rows([self._cells(r) for r in self.rows], cursor=cursor)
        table.set_marks({i for i, r in enumerate(self.rows) if r.id in self.marked})
        self.last_latency_ms = (time.perf_counter() - self.requested_at) * 1000
        self._status()
        notes = {r.note for r in self.rows if r.note}
        self.query_one("#samples-legend", Static).update(legend(notes) if notes else "")
        self.query_one("#samples-legend", Static).display = bool(notes)
        if self._cursor_to is not None and cursor is not None and self._open_after:
            self._open(self.rows[cursor])
        self._cursor_to, self._open_after = None, False

    def _cells(self, r: triage.SampleLine) -> tuple[str, ...]:
        third = f"L{r.match_line}: {r.match_text}" if self.filter.text and r.match_line else (
            "" if self.filter.text else r.snippet)
        return (str(r.id), r.task_id, r.arch, r.model, r.context_level, str(r.turn), str(r.sample_index),
                verdict(r.category, r.note), r.label or "", "★" if r.fixit else "", speed(r.speedup), num(r.time_ms),
                third, r.source)

    def on_count_loaded(self, message: CountLoaded) -> None:
        if message.request == self.request:
            self.total = message.count
            self._status()

    def _status(self) -> None:
        first = self.page_offset + 1 if self.rows else 0
        last = self.page_offset + len(self.rows)
        total = "…" if self.total is None else f"{self.total:,}"
        marked = f" · [b]{len(self.marked)} selected[/b] (l labels them, esc unselects)" if self.marked else ""
        self.query_one("#samples-status", Static).update(
            f"rows {first:,}–{last:,} of {total} · {markup_value(self.filter.describe())} · "
            f"{markup_value(self.sort.describe())}{marked} · / filters"
        )

    # -- filters and sort ------------------------------------------------------------
    def apply_filter(self, flt: browse.SampleFilter) -> None:
        """Show exactly this filter (a drill from another view)."""
        self.back_to = take_drill_origin(self.app)
        self.refresh_bindings()
        self._show(flt)

    def _show(self, flt: browse.SampleFilter) -> None:
        self.filter = flt
        self.query_one(FilterBar).set_values(
            {"model": flt.model, "task_id": flt.task_id, "arch": flt.arch, "context_level": flt.context_level, "category": flt.category}
        )
        self.query_one("#samples-search", Input).value = flt.text
        self._columns()
        self.load()

    @on(Select.Changed, "FilterBar Select")
    def _filters_changed(self, event: Select.Changed) -> None:
        values = self.query_one(FilterBar).user_change()
        if values is not None:
            self.filter = self.filter.with_(**values)
            self.load()

    @on(Input.Submitted, "#samples-search")
    def search(self, event: Input.Submitted) -> None:
        self.filter = self.filter.with_(text=event.value.strip())
        self._columns()
        self.load()
        self.query_one(FilterPanel).action_close()

    def set_sort(self, column: str) -> None:
        self.sort = self.sort.flipped_or(column)
        self._columns()
        self.load()

    def on_row_table_header_clicked(self, event: RowTable.HeaderClicked) -> None:
        self.set_sort(COLUMNS[event.table.labels.index(event.column)])

    def on_row_table_marks_changed(self, event: RowTable.MarksChanged) -> None:
        on_page = {r.id for r in self.rows}
        self.marked = (self.marked - on_page) | {self.rows[i].id for i in event.marked if i < len(self.rows)}
        self._status()
        self.refresh_bindings()

    def on_row_table_row_selected(self, event: RowTable.RowSelected) -> None:
        table = self.query_one(RowTable)
        if 0 <= table.cursor_row < len(self.rows):
            self._open(self.rows[table.cursor_row])

    def _open(self, row: triage.SampleLine) -> None:
        line = row.match_line if self.filter.text else None
        self.post_message(ShowSample(row.id, line=line))

    def selected_id(self) -> int | None:
        table = self.query_one(RowTable)
        if not self.rows or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row].id

    def move_targets(self) -> list[int]:
        if self.marked:
            return sorted(self.marked, reverse=True)
        sid = self.selected_id()
        return [sid] if sid is not None else []

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # esc unselects while rows are selected, else goes back to the view that drilled here.
        if action == "clear_marks" and not self.marked:
            return False
        if action == "back" and (self.marked or not self.back_to):
            return False
        return True

    # -- actions ---------------------------------------------------------------------
    def action_sort(self) -> None:
        current = None if self.sort == triage.Sort() else self.sort.column
        self.ask_sort(list(COLUMNS), current, self.sort.descending, "every filtered sample, in SQL")

    def action_next_item(self) -> None:
        self.step(backwards=False)

    def action_prev_item(self) -> None:
        self.step(backwards=True)

    def step(self, *, backwards: bool, from_sample: int | None = None, open_it: bool = False) -> None:
        """Put the cursor on the next (previous) unlabelled failure in the table's order; from a
        sample's own screen (`from_sample`) open it too. The page in view answers first; the store
        answers for the rows beyond it."""
        table = self.query_one(RowTable)
        here = table.cursor_row
        if from_sample is not None:
            here = next((i for i, r in enumerate(self.rows) if r.id == from_sample), -1)
        if here >= 0 or from_sample is None:
            span = range(here - 1, -1, -1) if backwards else range(here + 1, len(self.rows))
            for i in span:
                if needs_a_look(self.rows[i]):
                    table.move_cursor(row=i)
                    if open_it:
                        self._open(self.rows[i])
                    return
        position = self.page_offset + here if here >= 0 else None
        self.find_unlabelled(self.filter, self.sort, position, from_sample, backwards, open_it)

    @work(thread=True, exclusive=True, group="samples-step", exit_on_error=False, description="next unlabelled failure")
    def find_unlabelled(self, flt: browse.SampleFilter, sort: triage.Sort, position: int | None, from_sample: int | None,
                        backwards: bool, open_it: bool) -> None:
        try:
            read = self.ptx.reader.read
            if position is None and from_sample is not None:
                position = read(triage.position_of, flt, sort, from_sample)
            if position is None:
                position = -1 if not backwards else 1 << 62  # not in this table: from its start (or end)
            found = read(triage.next_unlabelled, flt, sort, position, backwards=backwards)
        except Exception as exc:
            self.post_message(StoreFailed(f"samples: {exc}"))
            return
        self.app.call_from_thread(self._found, found, backwards, open_it)

    def _found(self, found: tuple[int, int] | None, backwards: bool, open_it: bool) -> None:
        if found is None:
            self.notify(f"No unlabelled failure {'before' if backwards else 'after'} this one in {self.filter.describe()}.")
            return
        position, sample_id = found
        self._cursor_to, self._open_after = sample_id, open_it
        self.page_offset = position - position % PAGE_SIZE
        self.load(keep_offset=True)

    def action_next_page(self) -> None:
        if self.total is not None and self.page_offset + PAGE_SIZE >= self.total:
            self.notify("This is the last page.")
            return
        if len(self.rows) < PAGE_SIZE:
            return
        self.page_offset += PAGE_SIZE
        self.load(keep_offset=True)

    def action_prev_page(self) -> None:
        if self.page_offset == 0:
            return
        self.page_offset = max(0, self.page_offset - PAGE_SIZE)
        self.load(keep_offset=True)

    def action_clear_filters(self) -> None:
        self.sort = triage.Sort()
        self._show(browse.SampleFilter())

    def action_back(self) -> None:
        if self.back_to:
            self.app.switch_mode(self.back_to)

    def action_clear_marks(self) -> None:
        self.marked = set()
        self.query_one(RowTable).set_marks(set())
        self._status()
        self.refresh_bindings()

    def action_diff(self) -> None:
        if (sid := self.selected_id()) is not None:
            self.post_message(ShowDiff(sid, None))

    def action_label(self) -> None:
        ids = self.move_targets()
        if len(ids) > 1:
            self.ptx.ask_labels(ids)
        elif ids:
            self.ptx.ask_label(ids[0])

    def action_fixit(self) -> None:
        if (sid := self.selected_id()) is not None:
            self.ptx.toggle_fixit(sid)

    def action_reverify(self) -> None:
        if (sid := self.selected_id()) is not None:
            self.post_message(Reverify([sid]))

    def action_reverify_filtered(self) -> None:
        self.collect_ids(self.filter)

    def action_export(self) -> None:
        flt, sort, read = self.filter, self.sort, self.ptx.reader.read

        def produce(path, fmt: str) -> int:
            # In one read snapshot, a chunk of rows at a time: a whole store never sits in memory.
            return read(lambda conn: write_table(path, triage.EXPORT_FIELDS,
                                                 (triage.line_dict(r) for r in triage.iter_lines(conn, flt, sort)), fmt))

        total = "" if self.total is None else f"{self.total:,} "
        self.ask_export("samples", f"{total}samples ({flt.describe()}, {sort.describe()})", produce)

    @work(thread=True, exclusive=True, group="samples-ids", exit_on_error=False, description="ids to re-verify")
    def collect_ids(self, flt: browse.SampleFilter) -> None:
        try:
            ids = self.ptx.reader.read(browse.sample_ids, flt, limit=REVERIFY_LIMIT)
            selected = self.ptx.reader.read(browse.sample_count, flt) if len(ids) == REVERIFY_LIMIT else len(ids)
        except Exception as exc:
            self.post_message(StoreFailed(f"samples: {exc}"))
            return
        if ids:
            self.post_message(Reverify(ids, selected=selected))
