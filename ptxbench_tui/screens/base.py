"""What every top-level view shares: the view bar, the footer, store reloads."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.screen import Screen

from ptxbench.tui.host import ExplorerHost, host
from ptxbench.tui.widgets.common import FilterPanel, ModeBar
from ptxbench.tui.widgets.key_bar import KeyBar
from ptxbench.tui.widgets.store_banner import StoreBanner

class ViewScreen(Screen):
    MODE = ""

    @property
    def ptx(self) -> ExplorerHost:
        return host(self)

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        yield StoreBanner()
        yield from self.compose_body()
        yield KeyBar()

    def compose_body(self) -> ComposeResult:
        yield from ()

    def on_mount(self) -> None:
        self.watch(self.app, "data_version", self._data_changed, init=False)
        if self.ptx.cells is not None:
            self.call_after_refresh(self.refresh_data)

    def on_resize(self, event: events.Resize) -> None:
        for panel in self.query(FilterPanel):
            panel.fit(event.size.width)

    def _data_changed(self, _version: int) -> None:
        self.refresh_data()

    def refresh_data(self) -> None:
        """The store's data changed (or was loaded): redraw from it."""
