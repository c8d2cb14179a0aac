"""textual-plot's PlotWidget with the explorer's keys (keys.py): zoom and pan as
before, the reset on `0`, so `r` keeps its one meaning (re-verify, run)."""

from __future__ import annotations

from textual_plot import PlotWidget

from ptxbench.tui import keys


class Plot(PlotWidget):
    INHERIT_BINDINGS = False
    BINDINGS = keys.bindings("plot")
