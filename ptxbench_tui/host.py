"""What a view needs from the explorer's App, as a protocol.

Screens and widgets ask the App for the store reader, the summary of the store and a few moves
(labels, Fixit marks, re-reading the store); they name this protocol instead of the App class,
so no view imports application.py (which imports the views) and a test can stand in for the App.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from textual.dom import DOMNode

if TYPE_CHECKING:
    from ptxbench.db import browse_summary as summary
    from ptxbench.db.reader import StoreReader


class ExplorerHost(Protocol):
    reader: StoreReader
    db_path: Path  # named in the view bar and handed to the engine process
    engine_cmd: list[str]
    gpu_lock_dir: Path
    cells: list[summary.Cell] | None
    facets: summary.Facets | None
    data_version: int

    @property
    def writable(self) -> bool: ...

    def can_write(self, what: str) -> bool: ...

    def reload_store(self) -> None: ...

    def ask_label(self, sample_id: int) -> None: ...

    def ask_labels(self, sample_ids: list[int]) -> None: ...

    def toggle_fixit(self, sample_id: int) -> None: ...


def host(node: DOMNode) -> ExplorerHost:
    """The App a view runs in, as the explorer it is."""
    return cast(ExplorerHost, node.app)
