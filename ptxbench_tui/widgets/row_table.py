"""A light, read-only table with a row cursor, for pages of query results.

Textual's DataTable measures every cell through Rich as rows are added and
takes ~100 ms to refill with one page; a filter change must land faster than
that. This table computes column widths once per page from plain string
lengths and paints only the visible lines, so a refill costs about a
millisecond plus one frame.

On a narrow terminal the columns that do not fit fold away, least important
first (the view says which must stay), and the highlighted row's folded
cells are written in a detail line under the rows: nothing is cut off
silently. A header click asks the view to sort by that column (the view sorts,
in SQL or in memory, and says so with `show_sort`); space selects rows. The
first rows after a new order start at the top: a sorted table that kept its
cursor (and its scroll) on the row it was on would hide the rows the sort put first.
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

from ptxbench.engine.inert import inert
from ptxbench.tui import keys
from ptxbench.tui.widgets.code_view import resolve_color

MAX_WIDTH = 44
FLEX_MIN = 16  # the flexible column's narrowest width before it folds
GAP = 2


@dataclass
class TableMessage(Message):
    table: "RowTable"

    @property
    def control(self) -> "RowTable":
        return self.table


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
    class RowSelected(TableMessage):
        cursor_row: int

    @dataclass
    class RowHighlighted(TableMessage):
        cursor_row: int

    @dataclass
    class HeaderClicked(TableMessage):
        """A person clicked a column's title: the view sorts by it."""

        column: str

    @dataclass
    class MarksChanged(TableMessage):
        marked: frozenset[int]  # row indices

    def __init__(self, *, id: str | None = None, classes: str | None = None, selectable: bool = False) -> None:
        super().__init__(id=id, classes=classes)
        self.labels: list[str] = []
        self.rows: list[tuple[str, ...]] = []
        self.widths: list[int] = []  # natural width of each column on this page
        self.right: set[int] = set()
        self.keep: set[int] = set()  # never folded
        self.fold_order: list[int] = []  # folded first to last
        self.flex: int | None = None  # takes the width left over, down to FLEX_MIN
        self.shown: list[int] = []  # columns on screen, in order
        self.shown_widths: dict[int, int] = {}
        self.sort: tuple[str, bool] | None = None  # (column title, descending)
        self._new_order = False  # the sort changed: the next rows start at the top
        self.selectable = selectable
        self.marked: set[int] = set()
        self._styles: dict[str, Style] | None = None

    # -- content -----------------------------------------------------------------
    def set_columns(self, labels: list[str], *, right: tuple[int, ...] = (), keep: tuple[int, ...] = (),
                    fold_order: tuple[int, ...] | None = None, flex: int | None = None) -> None:
        """Column titles; `keep` never fold; the others fold in `fold_order` (default: right to left)."""
        self.labels = list(labels)
        self.right = set(right)
        self.keep = set(keep)
        self.flex = flex
        order = list(fold_order) if fold_order is not None else list(range(len(labels) - 1, -1, -1))
        self.fold_order = [i for i in order if i not in self.keep]
        self.set_rows([])

    def set_rows(self, rows: list[tuple[str, ...]], *, cursor: int | None = None) -> None:
        # Painted as raw segments: a cell from the store is made inert here, where the widths are measured.
        self.rows = [tuple(inert(c) for c in r) for r in rows]
        widths = [cell_len(self._title(i)) for i in range(len(self.labels))]
        for row in self.rows:
            for i, cell in enumerate(row[: len(widths)]):
                n = len(cell)
                if n > widths[i]:
                    widths[i] = min(n, MAX_WIDTH)
        self.widths = widths
        self.marked = set()
        self._fit()
        if self._new_order and self.rows:
            cursor, self._new_order = None, False
        target = 0 if cursor is None else cursor
        self.cursor_row = max(0, min(target, len(self.rows) - 1))
        if cursor is None:
            self.scroll_to(0, 0, animate=False, immediate=True)
        self.refresh()

    def show_sort(self, column: str | None, descending: bool = True) -> None:
        """Mark the column the rows are sorted by (the view did the sorting); after a change,
        the next rows set start at the top, cursor and view."""
        sort = (column, descending) if column else None
        if sort != self.sort:
            self._new_order = True
        self.sort = sort
        self._fit()
        self.refresh()

    def set_marks(self, rows: set[int]) -> None:
        self.marked = {r for r in rows if 0 <= r < len(self.rows)}
        self.refresh()

    @property
    def row_count(self) -> int:
        return len(self.rows)

    @property
    def folded(self) -> list[int]:
        """The columns folded away, the most important (the last to fold) first."""
        order = [i for i in reversed(self.fold_order) if i not in self.shown_widths]
        return order + [i for i in range(len(self.labels)) if i not in self.shown_widths and i not in order]

    def get_row_at(self, index: int) -> tuple[str, ...]:
        return self.rows[index]

    def move_cursor(self, *, row: int) -> None:
        if self.rows:
            self.cursor_row = max(0, min(row, len(self.rows) - 1))

    def detail_text(self, index: int | None = None) -> str:
        """The folded cells of a row (the cursor's by default): `Arch sm_90a · Level none · …`."""
        index = self.cursor_row if index is None else index
        if not self.folded or not 0 <= index < len(self.rows):
            return ""
        row = self.rows[index]
        return " · ".join(f"{self.labels[i]} {row[i] if i < len(row) and row[i] else '—'}" for i in self.folded)

    # -- layout --------------------------------------------------------------------
    def _title(self, i: int) -> str:
        label = self.labels[i]
        if self.sort and self.sort[0] == label:
            return f"{label} {'▼' if self.sort[1] else '▲'}"
        return label

    def _fit(self) -> None:
        """Choose the columns that fit the width; fold the rest."""
        available = max(0, self.size.width - 2) if self.size.width else 10_000
        shown = list(range(len(self.labels)))
        need = lambda cols: sum(self._natural(i) for i in cols) + GAP * max(0, len(cols) - 1) + 2
        for i in self.fold_order:
            if need(shown) <= available:
                break
            shown.remove(i)
        widths = {i: self._natural(i) for i in shown}
        if self.flex in widths:
            rest = available - (need(shown) - widths[self.flex])
            widths[self.flex] = max(FLEX_MIN, min(self.widths[self.flex] if self.widths else FLEX_MIN, rest))
        self.shown = shown
        self.shown_widths = widths
        total = sum(widths.values()) + GAP * max(0, len(shown) - 1) + 2
        self.virtual_size = Size(total, len(self.rows) + 1 + self._detail_lines())

    def _natural(self, i: int) -> int:
        width = self.widths[i] if i < len(self.widths) else cell_len(self._title(i))
        if i == self.flex:
            return min(width, FLEX_MIN)
        return width

    def _detail_lines(self) -> int:
        return 1 if self.folded and self.rows else 0

    def on_resize(self) -> None:
        self._fit()
        self.refresh()

    # -- cursor ------------------------------------------------------------------
    def watch_cursor_row(self, old: int, new: int) -> None:
        self._scroll_cursor_into_view()
        self.refresh()
        if self.rows:
            self.post_message(self.RowHighlighted(self, new))

    def _body_height(self) -> int:
        return max(1, self.scrollable_content_region.height - 1 - self._detail_lines())

    def _scroll_cursor_into_view(self) -> None:
        body = self._body_height()
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

    def action_toggle_mark(self) -> None:
        if not (self.selectable and self.rows):
            return
        self.marked ^= {self.cursor_row}
        self.post_message(self.MarksChanged(self, frozenset(self.marked)))
        self.refresh()  # the cursor stays: space selects, the arrows move

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "toggle_mark" and not self.selectable:
            return False  # not offered (hidden): this table has nothing to select for
        return True

    def on_click(self, event) -> None:
        if event.y == 0:
            column = self._column_at(event.x + self.scroll_offset.x)
            if column is not None:
                self.post_message(self.HeaderClicked(self, self.labels[column]))
            return
        row = self.scroll_offset.y + event.y - 1
        if event.y >= 1 and 0 <= row < len(self.rows) and event.y <= self._body_height():
            if row == self.cursor_row and event.chain >= 2:
                self.action_select_cursor()
            self.cursor_row = row

    def _column_at(self, x: int) -> int | None:
        pos = 1 + (1 if self.selectable else 0)
        for i in self.shown:
            width = self.shown_widths[i]
            if pos <= x < pos + width + GAP:
                return i
            pos += width + GAP
        return None

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
            accent = resolve_color(v, "text-accent") or fg
            muted = resolve_color(v, "foreground-muted")
            base = Style.parse(fg.hex6) if fg else Style()
            self._styles = {
                "cell": base,
                "stripe": base + (Style.parse(f"on {stripe.hex6}") if stripe else Style()),
                "header": Style.parse(f"bold {head.hex6}" + (f" on {panel.hex6}" if panel else "")) if head else Style(bold=True),
                "cursor": Style.parse(f"bold {fg.hex6 if fg else 'white'} on {cursor.hex6}") if cursor else Style(reverse=True),
                "cursor_dim": Style.parse(f"on {panel.hex6}") if panel else Style(underline=True),
                "mark": Style.parse(f"bold {accent.hex6}") if accent else Style(bold=True),
                "detail": Style.parse((f"{muted.hex6}" if muted else "") + (f" on {panel.hex6}" if panel else "")),
            }
        return self._styles

    def _format(self, cells: tuple[str, ...], *, header: bool = False) -> str:
        parts = []
        for i in self.shown:
            width = self.shown_widths[i]
            cell = self._title(i) if header else (cells[i] if i < len(cells) else "")
            if len(cell) > width:
                cell = cell[: max(0, width - 1)] + "…"
            parts.append(cell.rjust(width) if i in self.right else cell.ljust(width))
        return " " + (" " * GAP).join(parts) + " "

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        st = self.styles_by_part
        mark = ""
        if y == 0:
            text, style = self._format((), header=True), st["header"]
            mark = " " if self.selectable else ""
        elif self._detail_lines() and y == self.size.height - 1:
            detail = self.detail_text()
            return Strip([Segment(f" ↳ {detail}" if detail else "", st["detail"])]).crop_extend(0, width, st["detail"])
        else:
            index = scroll_y + y - 1
            if index >= len(self.rows) or y > self._body_height():
                return Strip.blank(width, st["cell"])
            text = self._format(self.rows[index])
            if index == self.cursor_row:
                style = st["cursor"] if self.has_focus else st["cursor_dim"]
            else:
                style = st["stripe"] if index % 2 else st["cell"]
            if self.selectable:
                mark = "●" if index in self.marked else " "
        segments = [Segment(mark, st["mark"] + Style(bgcolor=style.bgcolor))] if mark else []
        text = (text if not mark else text)[scroll_x:]
        return Strip([*segments, Segment(text, style)]).crop_extend(0, width, style)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()
