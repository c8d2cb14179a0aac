"""Text the explorer did not write (a kernel, a model's reply, a tool's message, a name from the
store) on its way to the screen: made inert (engine/inert.py) and never read as markup.

- `plain(text)`: a `Content` for a `Static`, a `Label`, a `Select` prompt: shown as it is.
- `markup_value(text)` (engine/inert.py `inert_markup`): a value to put into Textual markup.
- `rich_markup_value(text)`: the same for rich markup (a `RichLog`).
- `InertCells`: a `DataTable` whose string cells and labels are shown as text, not markup.
- `InertLines`: the app's last line filter. Whatever was missed above, a control or bidi character
  left in a painted line is dropped before the driver writes it, so it cannot reach the terminal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.segment import Segment
from rich.text import Text
from textual.content import Content
from textual.filter import LineFilter

from ptxbench.engine.inert import inert, inert_markup, strip

if TYPE_CHECKING:
    from textual.color import Color
    from textual.widgets import DataTable

    _Table = DataTable
else:
    _Table = object

markup_value = inert_markup


def plain(text: object) -> Content:
    """`text` as a Content that is shown as it is: inert, no markup."""
    return Content(inert(text))


def rich_markup_value(text: object) -> str:
    """`text` to put into rich markup (RichLog): inert, then rich's own escape."""
    return escape(inert(text))


def cell(value: object) -> object:
    """A DataTable cell: a string as inert text (DataTable reads a string as markup); anything
    else (a number, a `Text` the view styled) as it is."""
    if isinstance(value, str):
        return Text(inert(value), end="", no_wrap=True)
    return value


class InertCells(_Table):
    """A mixin for `DataTable`: the strings it is given are shown as text."""

    def add_column(self, label: Any, *args: Any, **kwargs: Any) -> Any:
        return super().add_column(Text(inert(label)) if isinstance(label, str) else label, *args, **kwargs)

    def add_row(self, *cells: Any, **kwargs: Any) -> Any:
        if isinstance(kwargs.get("label"), str):
            kwargs["label"] = Text(inert(kwargs["label"]), end="")
        return super().add_row(*(cell(c) for c in cells), **kwargs)

    def update_cell(self, row_key: Any, column_key: Any, value: Any, **kwargs: Any) -> None:
        super().update_cell(row_key, column_key, cell(value), **kwargs)

    def update_cell_at(self, coordinate: Any, value: Any, **kwargs: Any) -> None:
        super().update_cell_at(coordinate, cell(value), **kwargs)


class InertLines(LineFilter):
    """Drops control and invisible formatting characters from painted lines (they take no
    cells, so the line keeps its width). The segments Textual itself makes hold none."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        line = "".join(s.text for s in segments)
        if strip(line, keep_lines=False) is line:  # one search for the usual, clean line
            return segments
        return [Segment(strip(s.text, keep_lines=False), s.style, s.control) for s in segments]
