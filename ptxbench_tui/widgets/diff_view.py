"""A scrolling diff, side by side or unified, painted line by line."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ptxbench.tui.diffing import DiffRow
from ptxbench.tui.widgets.code_view import resolve_color


class DiffView(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    DiffView {
        background: $surface;
        height: 1fr;
    }
    """

    split: reactive[bool] = reactive(True)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[DiffRow] = []
        self._lines: list[tuple[str, DiffRow]] = []  # (side/kind, row) per painted line
        self._styles: dict[str, Style] | None = None

    def show(self, rows: list[DiffRow]) -> None:
        self.rows = rows
        self._layout()

    def watch_split(self) -> None:
        self._layout()

    def on_mount(self) -> None:
        self.watch(self.app, "theme", lambda _: self._restyle(), init=False)

    def _restyle(self) -> None:
        self._styles = None
        self.refresh()

    def _layout(self) -> None:
        lines: list[tuple[str, DiffRow]] = []
        for row in self.rows:
            if self.split or row.kind in ("equal", "skip", "delete", "insert"):
                lines.append((row.kind, row))
            else:  # unified replace: the old line, then the new one
                lines.append(("delete", row))
                lines.append(("insert", row))
        self._lines = lines
        width = max((len(r.left) + len(r.right) for r in self.rows), default=0) + 16
        self.virtual_size = Size(width if not self.split else 0, len(lines))
        self.scroll_to(0, 0, animate=False)
        self.refresh()

    @property
    def styles_by_kind(self) -> dict[str, Style]:
        if self._styles is None:
            v = self.app.theme_variables
            def bg(name: str) -> str:
                c = resolve_color(v, name)
                return f"on {c.hex6}" if c else "reverse"
            fg = resolve_color(v, "foreground")
            muted = resolve_color(v, "foreground-muted")
            base = Style.parse(fg.hex6) if fg else Style()
            self._styles = {
                "equal": base,
                "delete": base + Style.parse(bg("error-muted")),
                "insert": base + Style.parse(bg("success-muted")),
                "gutter": Style.parse(muted.hex6) if muted else Style(dim=True),
                "skip": Style.parse(f"italic {muted.hex6}") if muted else Style(dim=True),
            }
        return self._styles

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        if index >= len(self._lines):
            return Strip.blank(width)
        kind, row = self._lines[index]
        st = self.styles_by_kind
        if kind == "skip":
            text = Text("  ⋯", style=st["skip"])
        elif self.split:
            half = max(10, (width - 1) // 2)
            text = Text()
            text.append_text(self._side(row.left_no, row.left, "delete" if row.kind in ("delete", "replace") else "equal", half))
            text.append("│", style=st["gutter"])
            text.append_text(self._side(row.right_no, row.right, "insert" if row.kind in ("insert", "replace") else "equal", half))
        else:
            if kind == "delete" or (kind == "replace"):
                text = self._unified("-", row.left_no, row.left, "delete")
            elif kind == "insert":
                text = self._unified("+", row.right_no, row.right, "insert")
            else:
                text = self._unified(" ", row.right_no, row.right, "equal")
            text = text[scroll_x:] if scroll_x else text
        segments = [Segment(t.text, t.style) for t in text.render(self.app.console)]
        return Strip(segments).crop_extend(0, width, None)

    def _side(self, number: int | None, line: str, kind: str, width: int) -> Text:
        st = self.styles_by_kind
        gutter = f"{number:>5} " if number is not None else "      "
        body = line.expandtabs(4)
        text = Text(gutter, style=st["gutter"])
        body_width = width - len(gutter)
        shown = body[:body_width].ljust(body_width)
        text.append(shown, style=st[kind] if number is not None else st["equal"])
        return text

    def _unified(self, sign: str, number: int | None, line: str, kind: str) -> Text:
        st = self.styles_by_kind
        text = Text(f"{number if number is not None else '':>5} {sign} ", style=st["gutter"])
        text.append(line.expandtabs(4), style=st[kind])
        return text

    @property
    def line_count(self) -> int:
        return len(self._lines)
