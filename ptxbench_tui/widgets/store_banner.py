"""A line above every view that says what is wrong with the store, for as long as it is.

A toast vanishes after a few seconds; a damaged store, a read-only one or a
label still waiting for a locked store is true until it is not, so it stays
said here. The app owns the text (`PtxbenchApp.store_notice`); empty hides
the line.
"""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from ptxbench.engine.inert import inert


class StoreBanner(Static):
    DEFAULT_CSS = """
    StoreBanner {
        height: auto;
        width: 1fr;
        padding: 0 1;
        background: $warning 25%;
        color: $text;
        display: none;
    }
    StoreBanner.-error {
        background: $error 40%;
    }
    """

    def on_mount(self) -> None:
        self.watch(self.app, "store_notice", self._show)

    def _show(self, notice: tuple[str, bool]) -> None:
        text, is_error = notice
        self.update(Content(inert(text)))  # plain text: paths may hold [brackets], errors quote the store
        self.set_class(is_error, "-error")
        self.display = bool(text)
