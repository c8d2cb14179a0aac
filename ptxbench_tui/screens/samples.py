"""Samples (3): every sample, paged and filtered in SQL, with full-text search."""

from __future__ import annotations

import time

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Input, Select, Static

from ptxbench.db import browse
from ptxbench.tui import keys
from ptxbench.tui.messages import CountLoaded, PageLoaded, Reverify, ShowDiff, ShowSample, StoreFailed
from ptxbench.tui.screens.base import ViewScreen
from ptxbench.tui.widgets.common import FilterBar, num, speed
from ptxbench.tui.widgets.row_table import RowTable

PAGE_SIZE = 200
REVERIFY_LIMIT = 500
COLUMNS = ("Id", "Task", "Arch", "Model", "Level", "Turn", "#", "Category", "Label", "Fixit", "Speedup", "ms", "Source")


class SamplesScreen(ViewScreen):
    MODE = "samples"
    AUTO_FOCUS = "#samples-table"
    BINDINGS = keys.bindings("samples")

    def __init__(self) -> None:
        super().__init__()
        self.filter = browse.SampleFilter()
        self.page_offset = 0
        self.total: int | None = None
        self.rows: list[browse.SampleRow] = []
        self.request = 0
        self.requested_at = 0.0
        self.last_latency_ms: float | None = None  # filter change → page on screen (for the benchmark)
        self.rows_request = 0  # the request the table shows

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="samples-bar"):
            yield Input(placeholder="/ search code, evidence, logs (full text)", id="samples-search")
            yield FilterBar(
                [("model", "Model"), ("task_id", "Task"), ("arch", "Arch"), ("context_level", "Level"), ("category", "Category")],
                id="samples-filters",
            )
        yield Static("", id="samples-status", classes="status")
        yield RowTable(id="samples-table")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(RowTable).set_columns(list(COLUMNS), right=(0, 5, 6, 10, 11))
        self.load()

    def refresh_data(self) -> None:
        facets = self.ptx.facets
        if facets is not None:
            categories = [*facets.categories, "skipped", "unevaluated"]
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
        self.fetch(self.request, self.filter, self.page_offset)

    @work(thread=True, exclusive=True, group="samples-page", exit_on_error=False, description="samples page")
    def fetch(self, request: int, flt: browse.SampleFilter, offset: int) -> None:
        try:
            read = self.ptx.reader.read
            self.post_message(PageLoaded(request, read(browse.sample_page, flt, offset, PAGE_SIZE)))
            self.post_message(CountLoaded(request, read(browse.sample_count, flt)))
        except Exception as exc:  # noqa: BLE001 - shown to the user, the view stays usable
            self.post_message(StoreFailed(f"samples: {exc}"))

    def on_page_loaded(self, message: PageLoaded) -> None:
        if message.request != self.request:
            return  # an answer to an older filter
        table = self.query_one(RowTable)
        keep = self.selected_id()  # stay on the same sample across a reload
        self.rows_request = message.request
        self.rows = message.page.rows
        cursor = next((i for i, r in enumerate(self.rows) if r.id == keep), None)
        table.set_rows([
            (str(r.id), r.task_id, r.arch, r.model, r.context_level, str(r.turn), str(r.sample_index),
             r.category or "—", r.label or "", "★" if r.fixit else "", speed(r.speedup), num(r.time_ms), r.source)
            for r in self.rows
        ], cursor=cursor)
        self.last_latency_ms = (time.perf_counter() - self.requested_at) * 1000
        self._status()

    def on_count_loaded(self, message: CountLoaded) -> None:
        if message.request == self.request:
            self.total = message.count
            self._status()

    def _status(self) -> None:
        first = self.page_offset + 1 if self.rows else 0
        last = self.page_offset + len(self.rows)
        total = "…" if self.total is None else f"{self.total:,}"
        self.query_one("#samples-status", Static).update(
            f"rows {first:,}–{last:,} of {total} · {self.filter.describe()} · newest first"
        )

    # -- filters ---------------------------------------------------------------------
    def apply_filter(self, flt: browse.SampleFilter) -> None:
        """Show exactly this filter (a drill from another view)."""
        self.filter = flt
        self.query_one(FilterBar).set_values(
            {"model": flt.model, "task_id": flt.task_id, "arch": flt.arch, "context_level": flt.context_level, "category": flt.category}
        )
        self.query_one("#samples-search", Input).value = flt.text
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
        self.load()
        self.query_one(RowTable).focus()

    def on_row_table_row_selected(self, event: RowTable.RowSelected) -> None:
        sid = self.selected_id()
        if sid is not None:
            self.post_message(ShowSample(sid))

    def selected_id(self) -> int | None:
        table = self.query_one(RowTable)
        if not self.rows or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row].id

    # -- actions ---------------------------------------------------------------------
    def action_focus_search(self) -> None:
        self.query_one("#samples-search", Input).focus()

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
        self.apply_filter(browse.SampleFilter())

    def action_diff(self) -> None:
        if (sid := self.selected_id()) is not None:
            self.post_message(ShowDiff(sid, None))

    def action_label(self) -> None:
        if (sid := self.selected_id()) is not None:
            self.ptx.ask_label(sid)

    def action_fixit(self) -> None:
        if (sid := self.selected_id()) is not None:
            self.ptx.toggle_fixit(sid)

    def action_reverify(self) -> None:
        if (sid := self.selected_id()) is not None:
            self.post_message(Reverify([sid]))

    def action_reverify_filtered(self) -> None:
        self.collect_ids(self.filter)

    @work(thread=True, exclusive=True, group="samples-ids", exit_on_error=False, description="ids to re-verify")
    def collect_ids(self, flt: browse.SampleFilter) -> None:
        try:
            ids = self.ptx.reader.read(browse.sample_ids, flt, limit=REVERIFY_LIMIT)
            selected = self.ptx.reader.read(browse.sample_count, flt) if len(ids) == REVERIFY_LIMIT else len(ids)
        except Exception as exc:  # noqa: BLE001
            self.post_message(StoreFailed(f"samples: {exc}"))
            return
        if ids:
            self.post_message(Reverify(ids, selected=selected))
