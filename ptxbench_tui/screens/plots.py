"""Plots (7): speedup distribution per model, rates by context level, train vs held-out."""

from __future__ import annotations

import math

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Select, Static, TabbedContent, TabPane
from textual_plot import HiResMode, LegendLocation, PlotWidget

from ptxbench.db import browse
from ptxbench.db import browse_summary as summary
from ptxbench.tui import keys
from ptxbench.tui.messages import PlotsLoaded, StoreFailed
from ptxbench.tui.screens.base import ViewScreen
from ptxbench.tui.widgets.code_view import resolve_color

TABS = ("plot-speedup", "plot-levels", "plot-split")
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


class PlotsScreen(ViewScreen):
    MODE = "plots"
    AUTO_FOCUS = "#plot-speedup-widget"
    BINDINGS = keys.bindings("plots")

    def __init__(self) -> None:
        super().__init__()
        self.task_id = ""
        self.data: summary.PlotData | None = None

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="plots-bar"):
            yield Select[str]([], prompt="Task (all)", id="plots-task")
            yield Static("", id="plots-status", classes="status")
        with TabbedContent(id="plot-tabs"):
            with TabPane("Speedup distribution", id="plot-speedup"):
                yield PlotWidget(id="plot-speedup-widget")
            with TabPane("Rates by context level", id="plot-levels"):
                yield PlotWidget(id="plot-levels-widget")
            with TabPane("Train vs held-out", id="plot-split"):
                yield PlotWidget(id="plot-split-widget")

    def refresh_data(self) -> None:
        facets = self.ptx.facets
        if facets is not None:
            select = self.query_one("#plots-task", Select)
            select.set_options([(t, t) for t in facets.tasks])
            if self.task_id:
                select.value = self.task_id
        self.load()

    def load(self) -> None:
        if self.ptx.cells is not None:
            self.fetch(self.task_id)

    @work(thread=True, exclusive=True, group="plots", exit_on_error=False, description="plot data")
    def fetch(self, task_id: str) -> None:
        try:
            data = self.ptx.reader.read(summary.plot_data, self.ptx.cells or [], task_id)
        except Exception as exc:  # noqa: BLE001
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
        # Speedup distribution: share of each model's correct samples per (log) bin.
        plot = self.query_one("#plot-speedup-widget", PlotWidget)
        plot.clear()
        values = [v for vs in data.speedups.values() for v in vs]
        if values:
            lo, hi = max(min(values) * 0.9, 1e-3), max(values) * 1.1
            for i, (model, vs) in enumerate(sorted(data.speedups.items())):
                x, y = histogram(vs, lo, hi)
                plot.plot(x, y, line_style=colours[i % len(colours)], hires_mode=HiResMode.BRAILLE, label=f"{model} (n={len(vs)})")
            plot.add_v_line(1.0, line_style=colours[-1], label="library (1.0×)")
            plot.set_xlabel("speedup over the library (×, log bins)")
            plot.set_ylabel("share of correct samples")
            plot.show_legend(LegendLocation.TOPRIGHT)
        # Rates by context level: one bar per (model, level), correct rate; compiled and fast₁ as lines.
        plot = self.query_one("#plot-levels-widget", PlotWidget)
        plot.clear()
        labels, compiled, correct, fast = [], [], [], []
        for model in sorted(data.by_level):
            for level in ("none", "brief", "full"):
                if level in data.by_level[model]:
                    c, k, f = data.by_level[model][level]
                    labels.append(f"{model}/{level}")
                    compiled.append(c)
                    correct.append(k)
                    fast.append(f)
        if labels:
            plot.bar(labels, correct, bar_style=colours[0], label="correct")
            xs = list(range(1, len(labels) + 1))
            plot.plot(xs, compiled, line_style=colours[1 % len(colours)], hires_mode=HiResMode.BRAILLE, label="compiled")
            plot.plot(xs, fast, line_style=colours[2 % len(colours)], hires_mode=HiResMode.BRAILLE, label="fast₁.₀")
            plot.set_ylimits(0, 1.05)
            plot.set_ylabel("rate")
            plot.show_legend(LegendLocation.TOPRIGHT)
        # Train vs held-out: share of measurements judged ok, per model and split.
        plot = self.query_one("#plot-split-widget", PlotWidget)
        plot.clear()
        labels, values, styles = [], [], []
        for model in sorted(data.by_split):
            for i, split in enumerate(("train", "heldout")):
                if split in data.by_split[model]:
                    labels.append(f"{model}/{split}")
                    values.append(data.by_split[model][split])
                    styles.append(colours[i % len(colours)])
        if labels:
            plot.bar(labels, values, bar_style=styles, label="ok share")
            plot.set_ylimits(0, 1.05)
            plot.set_ylabel("share of sizes judged ok")
        n = sum(len(v) for v in data.speedups.values())
        empty = " (speedups come from the GPU stages: none timed yet)" if n == 0 else ""
        self.query_one("#plots-status", Static).update(
            f"{self.task_id or 'all tasks'} · {n:,} correct samples with a speedup{empty} · \\[ and ] switch plots"
        )

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
