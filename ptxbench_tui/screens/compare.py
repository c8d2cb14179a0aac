"""Compare (5): models' kernels for one task side by side, one pinned as the
baseline and the others shown as deltas against it (as Nsight Compute's
baselines do). Each model is represented by its best sample: correct and
fastest, else its newest.

Every model's column has the same fixed width, so one long value never pushes
the others off screen; the column under the cursor is written out in full
below the table. The PTX panes scroll together."""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, Select, Static

from ptxbench.db import browse
from ptxbench.tui import keys
from ptxbench.tui.marks import ptx_marker
from ptxbench.tui.messages import CompareLoaded, ShowDiff, ShowSample, StoreFailed
from ptxbench.tui.screens.base import ViewScreen
from ptxbench.tui.screens.moves import KernelMoves
from ptxbench.tui.verdict import verdict
from ptxbench.tui.widgets.code_view import PtxView
from ptxbench.engine.inert import inert
from ptxbench.tui.untrusted import markup_value, plain
from ptxbench.tui.widgets.common import Table, num, options_of, pct, speed

MAX_PANES = 3
_SPEED_METRICS = {"Speedup", "Time (ms)"}
METRIC_WIDTH = 13
COLUMN_WIDTH = 24  # every model's column; what does not fit is in the detail line


def _registers(mb: browse.ModelBest) -> float | None:
    res = mb.resources or {}
    if "registers" in res:
        return res.get("registers")
    values = [v.get("registers") for v in res.values() if isinstance(v, dict) and v.get("registers") is not None]
    return max(values) if values else None


def _spills(mb: browse.ModelBest) -> float | None:
    res = mb.resources or {}
    entries = [res] if "registers" in res else [v for v in res.values() if isinstance(v, dict)]
    if not entries:
        return None
    return sum((e.get("spill_stores", e.get("spill_store_bytes")) or 0) + (e.get("spill_loads", e.get("spill_load_bytes")) or 0) for e in entries)


# metric name, getter, formatter, higher is better (None: not a number to compare)
METRICS = (
    ("Sample", lambda m: m.sample_id, str, None),
    ("Samples", lambda m: m.samples, str, None),
    ("Verdict", lambda m: verdict(m.category, m.note), str, None),
    ("Correct", lambda m: m.correct_rate, pct, True),  # train sizes
    ("Correct h-o", lambda m: m.correct_heldout_rate, pct, True),  # held-out sizes
    ("Speedup", lambda m: m.speedup, speed, True),
    ("Time (ms)", lambda m: m.time_ms, num, False),
    ("Registers", _registers, lambda v: num(v, "{:.0f}"), False),
    ("Spill bytes", _spills, lambda v: num(v, "{:.0f}"), False),
    ("PTX families", lambda m: ", ".join(m.ptx_families) or "—", str, None),
    ("SASS families", lambda m: ", ".join(m.sass_families) or "—", str, None),
)


class CompareScreen(KernelMoves, ViewScreen):
    MODE = "compare"
    AUTO_FOCUS = "#compare-table"
    BINDINGS = keys.bindings("compare")

    def __init__(self) -> None:
        super().__init__()
        self.task_id = ""
        self.level = ""
        self.models: list[browse.ModelBest] = []
        self.codes: dict[int, str] = {}
        self.baseline = ""
        self.families: list[str] = []
        self._scrolling = False  # a pane is moving the others

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="compare-bar"):
            yield Select[str]([], prompt="Task", id="compare-task")
            yield Select[str]([], prompt="Level (any)", id="compare-level")
        yield Static("Pick a task.", id="compare-status", classes="status")
        yield Table(id="compare-table", cursor_type="column")
        yield Static("", id="compare-detail", classes="legend")
        yield Horizontal(id="compare-panes")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(Table).focus()

    def refresh_data(self) -> None:
        facets = self.ptx.facets
        if facets is None:
            return
        task_select = self.query_one("#compare-task", Select)
        level_select = self.query_one("#compare-level", Select)
        task_select.set_options(options_of(facets.tasks))
        level_select.set_options(options_of(facets.levels))
        if not self.task_id and facets.tasks:
            # Start on the task most models tried.
            counts: dict[str, set[str]] = {}
            for c in self.ptx.cells or []:
                counts.setdefault(c.task_id, set()).add(c.model)
            self.task_id = max(facets.tasks, key=lambda t: (len(counts.get(t, ())), t))
        if self.task_id:
            task_select.value = self.task_id
        if self.level:
            level_select.value = self.level
        self.load()

    def load(self) -> None:
        if self.task_id:
            self.fetch(self.task_id, self.level)

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False, description="compare")
    def fetch(self, task_id: str, level: str) -> None:
        try:
            read = self.ptx.reader.read
            rows = read(browse.compare, task_id, level)
            codes = {}
            for r in rows[:50]:
                detail = read(browse.sample_detail, r.sample_id)
                codes[r.sample_id] = detail.ptx if detail else ""
            task = read(browse.task, task_id)
        except Exception as exc:
            self.post_message(StoreFailed(f"compare: {exc}"))
            return
        self.post_message(CompareLoaded(task_id, rows, codes, task.families if task else []))

    def on_compare_loaded(self, message: CompareLoaded) -> None:
        if message.task_id != self.task_id:
            return
        self.models = message.rows
        self.codes = message.codes
        self.families = message.families
        names = [m.model for m in self.models]
        if self.baseline not in names:
            # Default baseline: the expert solution where there is one.
            self.baseline = "expert" if "expert" in names else (names[0] if names else "")
        self.redraw()

    def ordered(self) -> list[browse.ModelBest]:
        base = [m for m in self.models if m.model == self.baseline]
        return base + [m for m in self.models if m.model != self.baseline]

    def redraw(self) -> None:
        table = self.query_one(Table)
        table.clear(columns=True)
        models = self.ordered()
        if not models:
            self.query_one("#compare-status", Static).update(plain(f"No samples of {self.task_id}."))
            return
        table.add_column("Metric", key="metric", width=METRIC_WIDTH)
        for m in models:
            title = f"★ {m.model}" if m.model == self.baseline else m.model
            table.add_column(_fit(title, COLUMN_WIDTH), key=m.model, width=COLUMN_WIDTH)
        base = models[0]
        for name, get, fmt, higher in METRICS:
            cells: list[Text | str] = [name]
            b = get(base)
            cells.append(_fit(fmt(b), COLUMN_WIDTH))
            for m in models[1:]:
                # A speed of a kernel wrong somewhere is no better or worse than another: no colour.
                judged = higher if name not in _SPEED_METRICS or (m.passes and base.passes) else None
                cells.append(_fit(self._delta(get(m), b, fmt, judged), COLUMN_WIDTH))
            table.add_row(*cells)
        self.query_one("#compare-status", Static).update(
            f"{markup_value(self.task_id)} · {len(models)} models · baseline [b]★ {markup_value(self.baseline)}[/b] · "
            "b: pin the column's model · d: diff it with the baseline · ⏎: open"
        )
        self._panes(models)
        self._detail()

    def _detail(self) -> None:
        """The column under the cursor in full: what a fixed-width cell may cut."""
        m = self.column_model()
        text = ""
        if m is not None:
            role = "the baseline" if m.model == self.baseline else f"against ★ {markup_value(self.baseline)}"
            parts = [f"[b]{markup_value(m.model)}[/b] ({role}) · sample {m.sample_id}"]
            for name, get, fmt, _ in METRICS[2:]:
                parts.append(f"{name}: {markup_value(fmt(get(m)))}")
            if not m.passes and m.speedup is not None:
                parts.append("its speed is not compared: it is not correct at every size it ran at")
            text = " · ".join(parts)
        self.query_one("#compare-detail", Static).update(text)

    @staticmethod
    def _delta(v, b, fmt, higher) -> Text | str:
        if higher is None or v is None or b is None or not isinstance(v, (int, float)) or not isinstance(b, (int, float)):
            return fmt(v)
        diff = v - b
        if abs(diff) < 1e-12:
            return Text(f"{fmt(v)} (=)")
        better = (diff > 0) == higher
        sign = "+" if diff > 0 else "−"
        shown = f"{abs(diff) * 100:.1f} pt" if fmt is pct else (f"{abs(diff):.3f}" if isinstance(diff, float) else str(abs(diff)))
        return Text.assemble(fmt(v), " (", (f"{sign}{shown}", "green" if better else "red"), ")")

    def _panes(self, models: list[browse.ModelBest]) -> None:
        panes = self.query_one("#compare-panes", Horizontal)
        panes.remove_children()
        marker = ptx_marker(self.families)
        for m in models[:MAX_PANES]:
            view = PtxView(classes="compare-code")
            title = plain(f"{'★ ' if m.model == self.baseline else ''}{m.model} · sample {m.sample_id}")
            box = Vertical(Label(title), view, classes="compare-pane")
            panes.mount(box)
            view.show(self.codes.get(m.sample_id, ""), marker=marker)
            self.watch(view, "scroll_y", self._follower(view), init=False)

    def _follower(self, view: PtxView):
        return lambda y: self._lock(view, y)

    def _lock(self, source: PtxView, y: float) -> None:
        """The panes scroll together: one moved, the others follow to the same line."""
        if self._scrolling:
            return
        self._scrolling = True
        try:
            for view in self.query(PtxView):
                if view is not source:
                    view.scroll_to(y=y, animate=False)
        finally:
            self._scrolling = False

    def column_model(self) -> browse.ModelBest | None:
        table = self.query_one(Table)
        col = table.cursor_column - 1
        models = self.ordered()
        return models[col] if 0 <= col < len(models) else None

    # -- events & actions ------------------------------------------------------------
    def on_data_table_column_selected(self, _event) -> None:
        self.action_open_sample()

    def on_data_table_column_highlighted(self, _event) -> None:
        self._detail()
        self.refresh_bindings()  # d is offered only on a column other than the baseline's

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "diff":
            m = self.column_model()
            # Shown but disabled on the baseline's own column (and the metric names): nothing to diff.
            return None if m is None or m.model == self.baseline else True
        return True

    def move_targets(self) -> list[int]:
        m = self.column_model()
        return [m.sample_id] if m else []

    @on(Select.Changed, "#compare-task")
    def _task(self, event: Select.Changed) -> None:
        if isinstance(event.value, str) and event.value != self.task_id:
            self.task_id = event.value
            self.load()

    @on(Select.Changed, "#compare-level")
    def _level(self, event: Select.Changed) -> None:
        value = event.value if isinstance(event.value, str) else ""
        if value != self.level:
            self.level = value
            self.load()

    def action_pin_baseline(self) -> None:
        m = self.column_model()
        if m is None:
            self.notify("Put the cursor on a model's column first.")
            return
        self.baseline = m.model
        self.redraw()
        self.query_one(Table).move_cursor(column=1)

    def action_diff(self) -> None:
        m = self.column_model()
        base = next((x for x in self.models if x.model == self.baseline), None)
        if m is None or base is None or m.model == base.model:
            self.notify("This is the baseline's column: move to another model's column to diff it with ★ the baseline.")
            return
        self.post_message(ShowDiff(base.sample_id, m.sample_id))

    def action_open_sample(self) -> None:
        m = self.column_model()
        if m is not None:
            self.post_message(ShowSample(m.sample_id))


def _fit(value: Text | str, width: int) -> Text | str:
    """A cell cut to its column (DataTable would widen the column instead); `…` marks the cut."""
    if isinstance(value, str):
        value = inert(value)  # measured as it will be shown
    plain = value.plain if isinstance(value, Text) else value
    if len(plain) <= width:
        return value
    return (value[: width - 1] + "…") if isinstance(value, Text) else plain[: width - 1] + "…"
