"""A light, read-only table with a row cursor, for pages of query results.

Textual's DataTable measures every cell through Rich as rows are added and
takes ~100 ms to refill with one page; a filter change must land faster than
that. This table computes column widths once per page from plain string
lengths and paints only the visible lines, so a refill costs about a
millisecond plus one frame.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ptxbench.tui import keys
from ptxbench.tui.widgets.code_view import resolve_color

MAX_WIDTH = 44


class RowTable(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    RowTable {
        height: 1fr;
        background: $surface;
    }
    """

    BINDINGS = [
        *keys.bindings("table"),
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "first", "First", show=False),
        Binding("end", "last", "Last", show=False),
    ]

    cursor_row: reactive[int] = reactive(0)

    @dataclass
    class RowSelected(Message):
        table: "RowTable"
        cursor_row: int

        @property
        def control(self) -> "RowTable":
            return self.table

    @dataclass
    class RowHighlighted(Message):
        table: "RowTable"
        cursor_row: int

        @property
        def control(self) -> "RowTable":
            return self.table

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.labels: list[str] = []
        self.rows: list[tuple[str, ...]] = []
        self.widths: list[int] = []
        self.right: set[int] = set()
        self._styles: dict[str, Style] | None = None

    # -- content -----------------------------------------------------------------
    def set_columns(self, labels: list[str], *, right: tuple[int, ...] = ()) -> None:
        self.labels = list(labels)
        self.right = set(right)
        self.set_rows([])

    def set_rows(self, rows: list[tuple[str, ...]], *, cursor: int | None = None) -> None:
        self.rows = [tuple(str(c) for c in r) for r in rows]
        widths = [cell_len(label) for label in self.labels]
        for row in self.rows:
            for i, cell in enumerate(row[: len(widths)]):
                n = len(cell)
                if n > widths[i]:
                    widths[i] = min(n, MAX_WIDTH)
        self.widths = widths
        self.virtual_size = Size(sum(widths) + 2 * len(widths) + 1, len(self.rows) + 1)
        target = 0 if cursor is None else cursor
        self.cursor_row = max(0, min(target, len(self.rows) - 1))
        if cursor is None:
            self.scroll_to(0, 0, animate=False)
        self.refresh()

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def get_row_at(self, index: int) -> tuple[str, ...]:
        return self.rows[index]

    def move_cursor(self, *, row: int) -> None:
        if self.rows:
            self.cursor_row = max(0, min(row, len(self.rows) - 1))

    # -- cursor ------------------------------------------------------------------
    def watch_cursor_row(self, old: int, new: int) -> None:
        self._scroll_cursor_into_view()
        self.refresh()
        if self.rows:
            self.post_message(self.RowHighlighted(self, new))

    def _scroll_cursor_into_view(self) -> None:
        body = max(1, self.scrollable_content_region.height - 1)
        top = self.scroll_offset.y
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + body:
            self.scroll_to(y=self.cursor_row - body + 1, animate=False)

    def action_cursor_up(self) -> None:
        self.move_cursor(row=self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(row=self.cursor_row + 1)

    def action_page_up(self) -> None:
        self.move_cursor(row=self.cursor_row - max(1, self.size.height - 2))

    def action_page_down(self) -> None:
        self.move_cursor(row=self.cursor_row + max(1, self.size.height - 2))

    def action_first(self) -> None:
        self.move_cursor(row=0)

    def action_last(self) -> None:
        self.move_cursor(row=len(self.rows) - 1)

    def action_select_cursor(self) -> None:
        if self.rows:
            self.post_message(self.RowSelected(self, self.cursor_row))

    def on_click(self, event) -> None:  # noqa: ANN001
        row = self.scroll_offset.y + event.y - 1
        if event.y >= 1 and 0 <= row < len(self.rows):
            if row == self.cursor_row and event.chain >= 2:
                self.action_select_cursor()
            self.cursor_row = row

    # -- painting ----------------------------------------------------------------
    def on_mount(self) -> None:
        self.watch(self.app, "theme", lambda _: self._restyle(), init=False)

    def _restyle(self) -> None:
        self._styles = None
        self.refresh()

    @property
    def styles_by_part(self) -> dict[str, Style]:
        if self._styles is None:
            v = self.app.theme_variables
            fg = resolve_color(v, "foreground")
            head = resolve_color(v, "text-primary") or fg
            panel = resolve_color(v, "panel")
            cursor = resolve_color(v, "primary")
            stripe = resolve_color(v, "boost")
            base = Style.parse(fg.hex6) if fg else Style()
            self._styles = {
                "cell": base,
                "stripe": base + (Style.parse(f"on {stripe.hex6}") if stripe else Style()),
                "header": Style.parse(f"bold {head.hex6}" + (f" on {panel.hex6}" if panel else "")) if head else Style(bold=True),
                "cursor": Style.parse(f"bold {fg.hex6 if fg else 'white'} on {cursor.hex6}") if cursor else Style(reverse=True),
                "cursor_dim": Style.parse(f"on {panel.hex6}") if panel else Style(underline=True),
            }
        return self._styles

    def _format(self, cells: tuple[str, ...]) -> str:
        parts = []
        for i, width in enumerate(self.widths):
            cell = cells[i] if i < len(cells) else ""
            if len(cell) > width:
                cell = cell[: max(0, width - 1)] + "…"
            parts.append(cell.rjust(width) if i in self.right else cell.ljust(width))
        return " " + "  ".join(parts) + " "

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        st = self.styles_by_part
        if y == 0:
            text, style = self._format(tuple(self.labels)), st["header"]
        else:
            index = scroll_y + y - 1
            if index >= len(self.rows):
                return Strip.blank(width, st["cell"])
            text = self._format(self.rows[index])
            if index == self.cursor_row:
                style = st["cursor"] if self.has_focus else st["cursor_dim"]
            else:
                style = st["stripe"] if index % 2 else st["cell"]
        text = text[scroll_x:]
        return Strip([Segment(text, style)]).crop_extend(0, width, style)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()
