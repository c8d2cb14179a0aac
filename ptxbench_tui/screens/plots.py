"""Plots (7): speedup distribution per model, rates by context level, train vs held-out, and the
headline by turn budget (db/headline.py) with the paper's published numbers beside it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Select, Static, TabbedContent, TabPane
from textual_plot import HiResMode, PlotWidget
from textual_plot.axis_formatter import CategoricalAxisFormatter

from ptxbench.db import browse_summary as summary
from ptxbench.engine.inert import inert
from ptxbench.tui import keys
from ptxbench.tui.messages import PlotsLoaded, StoreFailed
from ptxbench.tui.screens.base import ViewScreen
from ptxbench.tui.untrusted import markup_value
from ptxbench.tui.widgets.code_view import resolve_color
from ptxbench.tui.widgets.common import options_of
from ptxbench.tui.widgets.plot import Plot

TABS = ("plot-speedup", "plot-levels", "plot-split", "plot-headline")
SERIES_VARIABLES = ("primary", "accent", "success", "error", "warning", "secondary", "foreground")
BINS = 24


def histogram(values: list[float], lo: float, hi: float, bins: int = BINS) -> tuple[list[float], list[float]]:
    """Bin centres and the share of values in each bin (log-spaced: speedups are ratios)."""
    if not values:
        return [], []
    llo, lhi = math.log10(lo), math.log10(hi)
    width = (lhi - llo) / bins
    counts = [0] * bins
    for v in values:
        i = int((math.log10(min(max(v, lo), hi * 0.9999)) - llo) / width)
        counts[min(max(i, 0), bins - 1)] += 1
    centres = [10 ** (llo + (i + 0.5) * width) for i in range(bins)]
    return centres, [c / len(values) for c in counts]


@dataclass
class HeadlineLoaded(Message):
    rows: list
    task_id: str


class PlotsScreen(ViewScreen):
    MODE = "plots"
    AUTO_FOCUS = "#plot-speedup-widget"
    BINDINGS = keys.bindings("plots")

    def __init__(self) -> None:
        super().__init__()
        self.task_id = ""
        self.data: summary.PlotData | None = None
        self.headline: list = []  # db.headline.HeadlineRow

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="plots-bar"):
            yield Select[str]([], prompt="Task (all)", id="plots-task")
            yield Static("", id="plots-status", classes="status")
        with TabbedContent(id="plot-tabs"):
            for pane, title in (("plot-speedup", "Speedup distribution"), ("plot-levels", "Rates by context level"),
                                ("plot-split", "Train vs held-out"), ("plot-headline", "Headline")):
                with TabPane(title, id=pane):
                    yield Static("", id=f"{pane}-legend", classes="plot-legend")
                    yield Plot(id=f"{pane}-widget")

    def refresh_data(self) -> None:
        facets = self.ptx.facets
        if facets is not None:
            select = self.query_one("#plots-task", Select)
            select.set_options(options_of(facets.tasks))
            if self.task_id:
                select.value = self.task_id
        self.load()

    def load(self) -> None:
        if self.ptx.cells is not None:
            self.fetch(self.task_id)
            self.fetch_headline(self.task_id)

    @work(thread=True, exclusive=True, group="plots-headline", exit_on_error=False, description="headline")
    def fetch_headline(self, task_id: str) -> None:
        from ptxbench.db.headline import headline

        try:
            rows = self.ptx.reader.read(headline, tasks=[task_id] if task_id else None)
        except Exception as exc:  # reported, never fatal
            self.post_message(StoreFailed(f"headline: {exc}"))
            return
        self.post_message(HeadlineLoaded(rows, task_id))

    def on_headline_loaded(self, message: "HeadlineLoaded") -> None:
        self.headline = message.rows
        self._headline(self.colours())

    @work(thread=True, exclusive=True, group="plots", exit_on_error=False, description="plot data")
    def fetch(self, task_id: str) -> None:
        try:
            data = self.ptx.reader.read(summary.plot_data, self.ptx.cells or [], task_id)
        except Exception as exc:
            self.post_message(StoreFailed(f"plots: {exc}"))
            return
        self.post_message(PlotsLoaded(data))

    def colours(self) -> list[str]:
        v = self.app.theme_variables
        out = []
        for name in SERIES_VARIABLES:
            c = resolve_color(v, name)
            if c is not None:
                out.append(c.hex6)
        return out or ["white"]

    def on_plots_loaded(self, message: PlotsLoaded) -> None:
        self.data = message.data
        self.draw()

    def on_mount(self) -> None:
        super().on_mount()
        self.watch(self.app, "theme", lambda _: self.draw(), init=False)

    def draw(self) -> None:
        data = self.data
        if data is None:
            return
        colours = self.colours()
        self._speedups(data, colours)
        self._levels(data, colours)
        self._split(data, colours)
        self._headline(colours)
        n = sum(len(v) for v in data.speedups.values())
        empty = " (speedups come from the GPU stages: none timed yet)" if n == 0 else ""
        self.query_one("#plots-status", Static).update(
            f"{markup_value(self.task_id or 'all tasks')} · {n:,} correct samples with a speedup{empty}"
        )

    def _legend(self, pane: str, title: str, entries: list[tuple[str, str, str]]) -> None:
        """The plot's title and legend, above it (a legend inside the plot would cover the curves)."""
        parts = [f"[b]{markup_value(title)}[/b]"] + [f"[{colour}]{mark}[/] {markup_value(name)}" for mark, colour, name in entries]
        self.query_one(f"#{pane}-legend", Static).update("   ".join(parts))

    def _speedups(self, data: summary.PlotData, colours: list[str]) -> None:
        """Share of each model's correct samples per (log) speedup bin; the bins are ordered, so lines join them."""
        plot = self.query_one("#plot-speedup-widget", PlotWidget)
        plot.clear()
        plot.show_legend(is_visible=False)
        values = [v for vs in data.speedups.values() for v in vs]
        entries = []
        if values:
            lo, hi = max(min(values) * 0.9, 1e-3), max(values) * 1.1
            for i, (model, vs) in enumerate(sorted(data.speedups.items())):
                x, y = histogram(vs, lo, hi)
                colour = colours[i % len(colours)]
                plot.plot(x, y, line_style=colour, hires_mode=HiResMode.BRAILLE)
                entries.append(("━━", colour, f"{model} (n={len(vs)})"))
            plot.add_v_line(1.0, line_style=colours[-1])
            entries.append(("│", colours[-1], "the library (1.0×)"))
            plot.set_xlabel("speedup over the library (×, log bins)")
            plot.set_ylabel("share")
        self._legend("plot-speedup", "Share of each model's samples correct on the train sizes, by speedup", entries)

    def _levels(self, data: summary.PlotData, colours: list[str]) -> None:
        """Compiled, correct and fast₁.₀ per model and context level: bars side by side, never lines,
        because neighbouring categories are not a sequence."""
        plot = self.query_one("#plot-levels-widget", PlotWidget)
        plot.clear()
        plot.show_legend(is_visible=False)
        labels: list[str] = []
        rates: list[tuple[float, float, float]] = []
        for model in sorted(data.by_level):
            for level in ("none", "brief", "full"):
                if level in data.by_level[model]:
                    labels.append(inert(f"{model}/{level}"))
                    rates.append(data.by_level[model][level])
        names = ("compiled", "correct", "fast₁.₀")
        entries = [("██", colours[k % len(colours)], name) for k, name in enumerate(names)]
        if labels:
            xs = list(range(1, len(labels) + 1))
            for k in range(3):
                plot.bar([x + (k - 1) * 0.27 for x in xs], [r[k] for r in rates], width=0.25,
                         bar_style=colours[k % len(colours)])
            plot.set_x_formatter(CategoricalAxisFormatter(labels))
            plot.set_xticks(xs)
            plot.set_xlimits(0.4, len(labels) + 0.6)
            plot.set_ylimits(0, 1.05)
            plot.set_ylabel("rate")
        self._legend("plot-levels", "Rates per sample by model and context level (train sizes; held-out: next plot)", entries)

    def _split(self, data: summary.PlotData, colours: list[str]) -> None:
        """Share of measured sizes judged ok, train beside held-out, per model."""
        plot = self.query_one("#plot-split-widget", PlotWidget)
        plot.clear()
        plot.show_legend(is_visible=False)
        labels, values, styles = [], [], []
        for model in sorted(data.by_split):
            for i, split in enumerate(("train", "heldout")):
                if split in data.by_split[model]:
                    labels.append(inert(f"{model}/{split}"))
                    values.append(data.by_split[model][split])
                    styles.append(colours[i % len(colours)])
        if labels:
            plot.bar(labels, values, bar_style=styles)
            plot.set_ylimits(0, 1.05)
            plot.set_ylabel("share")
        self._legend("plot-split", "Share of measured sizes judged ok (each size of the evaluation that speaks for each sample)",
                     [("██", colours[0], "train sizes"), ("██", colours[1 % len(colours)], "held-out sizes")])

    def _headline(self, colours: list[str]) -> None:
        """Per model (and context level): with a task chosen, its best speedup by turn budget beside the
        paper's best published one (theirs); for all tasks, the share solved (correct at train and held-out sizes, every family used)."""
        from ptxbench.tasks.published import TURN_LIMITS, best_published

        plot = self.query_one("#plot-headline-widget", PlotWidget)
        plot.clear()
        plot.show_legend(is_visible=False)
        series: dict[str, dict[int, list[float]]] = {}
        for r in self.headline:
            value = r.best_speedup if self.task_id else r.correct_sass
            if value is not None:
                series.setdefault(f"{r.model}/{r.context}", {}).setdefault(r.turn_budget, []).append(value)
        entries = []
        for i, (name, by_budget) in enumerate(sorted(series.items())):
            xs = sorted(by_budget)
            ys = [sum(by_budget[x]) / len(by_budget[x]) for x in xs]
            colour = colours[i % len(colours)]
            plot.plot(xs, ys, line_style=colour, hires_mode=HiResMode.BRAILLE)
            plot.scatter(xs, ys, marker_style=colour, marker="●")
            entries.append(("━●", colour, name))
        paper = [best_published(self.task_id, t) for t in TURN_LIMITS] if self.task_id else []
        if any(p is not None for p in paper):
            xs = [t for t, p in zip(TURN_LIMITS, paper) if p is not None]
            ys = [p.best_speedup for p in paper if p is not None]
            plot.scatter(xs, ys, marker_style=colours[-1], marker="◆")
            best = max((p for p in paper if p is not None), key=lambda p: p.best_speedup)
            entries.append(("◆", colours[-1], f"the paper's best (theirs: {best.model} and others, {best.device})"))
        plot.set_xlabel("turn budget")
        plot.set_ylabel("best speedup over the library (×)" if self.task_id else "solved (train + held-out, every family)")
        if series or paper:
            plot.set_xticks([1, 2, 4, 8])
        title = (f"{self.task_id}: best speedup by turn budget" if self.task_id
                 else "All tasks: share of trajectories correct with every requested family in SASS")
        if not series:
            title += " (no model runs judged yet)"
        self._legend("plot-headline", title, entries)

    @on(Select.Changed, "#plots-task")
    def _task(self, event: Select.Changed) -> None:
        value = event.value if isinstance(event.value, str) else ""
        if value != self.task_id:
            self.task_id = value
            self.load()

    def _tabs(self) -> TabbedContent:
        return self.query_one("#plot-tabs", TabbedContent)

    def action_next_tab(self) -> None:
        tabs = self._tabs()
        tabs.active = TABS[(TABS.index(tabs.active) + 1) % len(TABS)]

    def action_prev_tab(self) -> None:
        tabs = self._tabs()
        tabs.active = TABS[(TABS.index(tabs.active) - 1) % len(TABS)]
