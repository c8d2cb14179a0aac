"""A scrolling diff made for kernels, side by side or unified, painted line by line.

Both sides are highlighted with the explorer's PTX (or SASS) lexer, lazily, as
the code view does; a changed line is shaded and, inside it, the tokens that
differ are shaded harder. Side by side, the two halves scroll sideways together
(`←`/`→`, 40 columns with `shift`, `home`/`end`: widgets/sideways.py, or the
scroll bar) and a line cut at either edge says so with `‹` or `›`. The lines are
laid out in the width left of the vertical scroll bar, so the right half's `›`
is never under it. `next_hunk` / `prev_hunk` bring the next run of changes to the top.
"""

from __future__ import annotations

from pygments.lexer import Lexer
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ptxbench.tui.diffing import DiffResult, DiffRow, Spans
from ptxbench.tui.widgets import sideways
from ptxbench.tui.widgets.code_view import LazyHighlighter, resolve_color, role_styles

GUTTER = 6  # "12345 "
CONTEXT_ABOVE = 3  # lines kept above a hunk brought to the top


class DiffView(sideways.Sideways, ScrollView, can_focus=True):
    DEFAULT_CSS = """
    DiffView {
        background: $surface;
        height: 1fr;
    }
    """
    BINDINGS = sideways.BINDINGS

    split: reactive[bool] = reactive(True)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.result = DiffResult()
        self.rows: list[DiffRow] = []
        self._lines: list[tuple[str, DiffRow]] = []  # (what this painted line shows, its row)
        self.hunk_lines: list[int] = []  # painted lines where a run of changes starts
        self.hunk = -1  # the hunk last jumped to
        self._highlighters: tuple[LazyHighlighter, LazyHighlighter] | None = None
        self._texts: dict[tuple[int, str], Text] = {}
        self._changed: dict[int, tuple[Spans, Spans]] = {}  # id of a replace row → its changed tokens
        self._styles: dict[str, Style] | None = None
        self._roles: dict[str, Style] | None = None
        self._widest = 0

    def show(self, result: DiffResult, lexer: type[Lexer] | None = None) -> None:
        """A new diff; `lexer` highlights both sides (None: plain text, for logs and JSON)."""
        self.result = result
        self.rows = result.rows
        self._highlighters = None
        if lexer is not None:
            self._highlighters = (LazyHighlighter("\n".join(result.left_lines), lexer(stripnl=False, ensurenl=False)),
                                  LazyHighlighter("\n".join(result.right_lines), lexer(stripnl=False, ensurenl=False)))
        self._widest = max((max(len(r.left), len(r.right)) for r in self.rows), default=0)
        self._changed = {}
        self.hunk = -1
        self._layout()

    def watch_split(self) -> None:
        self._layout()

    def on_mount(self) -> None:
        self.watch(self.app, "theme", lambda _: self._restyle(), init=False)

    def on_resize(self) -> None:
        self._size_virtual()

    def _restyle(self) -> None:
        self._styles = self._roles = None
        self._texts.clear()
        self.refresh()

    def _layout(self) -> None:
        lines: list[tuple[str, DiffRow]] = []
        starts = set(self.result.hunks)
        self.hunk_lines = []
        for i, row in enumerate(self.rows):
            if i in starts:
                self.hunk_lines.append(len(lines))
            if self.split or row.kind in ("equal", "skip", "delete", "insert"):
                lines.append((row.kind, row))
            else:  # unified replace: the old line, then the new one
                lines.append(("delete", row))
                lines.append(("insert", row))
        self._lines = lines
        self._texts.clear()
        self._size_virtual()
        self.scroll_to(0, 0, animate=False)
        self.refresh()

    # -- geometry ------------------------------------------------------------------
    @property
    def text_width(self) -> int:
        """Columns the lines are painted in: the width less the vertical scroll bar, which would
        cover the right half's last columns (and its `›`)."""
        return self.scrollable_content_region.width

    def _halves(self) -> tuple[int, int]:
        """Widths of the left and right halves in split mode (a one-column bar between)."""
        width = max(2 * (GUTTER + 4) + 1, self.text_width)
        left = (width - 1) // 2
        return left, width - 1 - left

    def body_width(self) -> int:
        """Columns of code each side shows: the narrower half, less its line numbers."""
        if not self.split:
            return max(1, self.text_width - GUTTER)
        return max(1, min(self._halves()) - GUTTER)

    def _size_virtual(self) -> None:
        # Sideways room for the widest line; both halves move by the same scroll_x.
        extra = max(0, self._widest - self.body_width() + 1)
        self.virtual_size = Size(self.text_width + extra, len(self._lines))

    # -- sideways (widgets/sideways.py) -----------------------------------------------
    def code_width(self) -> int:
        return self.body_width()

    def visible_widths(self) -> list[int]:
        top = round(self.scroll_y)
        rows = self._lines[top:top + self.scrollable_content_region.height]
        return [max(len(row.left), len(row.right)) for _, row in rows]

    # -- hunks ---------------------------------------------------------------------
    def next_hunk(self, *, backwards: bool = False) -> int | None:
        """Bring the next (previous) run of changes to the top; its 0-based number, or None."""
        if not self.hunk_lines:
            return None
        top = self.scroll_offset.y + CONTEXT_ABOVE
        if backwards:
            before = [i for i, line in enumerate(self.hunk_lines) if line < top]
            index = before[-1] if before else len(self.hunk_lines) - 1
        else:
            after = [i for i, line in enumerate(self.hunk_lines) if line > top]
            index = after[0] if after else 0
        if self.scroll_offset.y == 0 and not backwards and self.hunk < 0 and self.hunk_lines[0] <= top:
            index = 0  # the first hunk is already on screen: say so, then move on next time
        self.hunk = index
        self.scroll_to(y=max(0, self.hunk_lines[index] - CONTEXT_ABOVE), animate=False)
        return index

    # -- styles --------------------------------------------------------------------
    @property
    def styles_by_kind(self) -> dict[str, Style]:
        if self._styles is None:
            v = self.app.theme_variables

            def shade(name: str, strong: float | None = None) -> Style:
                colour = resolve_color(v, name if strong is None else name.removesuffix("-muted"))
                if colour is None:
                    return Style(reverse=True)
                if strong is not None:
                    ground = resolve_color(v, "surface") or resolve_color(v, "background")
                    colour = ground.blend(colour, strong) if ground else colour
                return Style(bgcolor=colour.rich_color)

            fg = resolve_color(v, "foreground")
            muted = resolve_color(v, "foreground-muted")
            accent = resolve_color(v, "text-accent")
            self._styles = {
                "equal": Style(color=fg.rich_color) if fg else Style(),
                "delete": shade("error-muted"),
                "insert": shade("success-muted"),
                "delete-token": shade("error-muted", 0.5) + Style(bold=True),
                "insert-token": shade("success-muted", 0.5) + Style(bold=True),
                "gutter": Style(color=muted.rich_color) if muted else Style(dim=True),
                "skip": Style(color=muted.rich_color, italic=True) if muted else Style(dim=True),
                "cut": Style(color=accent.rich_color, bold=True) if accent else Style(bold=True),
            }
        return self._styles

    @property
    def roles(self) -> dict[str, Style]:
        if self._roles is None:
            self._roles = role_styles(self.app.theme_variables)
        return self._roles

    def _code(self, side: str, index: int | None, line: str, kind: str, changed: Spans) -> Text:
        """One side's line, highlighted and shaded, uncut (cached)."""
        key = (index if index is not None else -1, f"{side}{kind}")
        cached = self._texts.get(key)
        if cached is not None:
            return cached
        st = self.styles_by_kind
        text = Text(line, style=st["equal"], end="", no_wrap=True)
        if self._highlighters is not None and index is not None:
            roles = self.roles
            for start, end, role in self._highlighters[0 if side == "left" else 1].spans(index):
                if role in roles and role not in ("marked", "evidence"):
                    text.stylize(roles[role], start, end)
        if kind in ("delete", "insert"):
            text.stylize(st[kind], 0, len(line))
            for start, end in changed:
                text.stylize(st[f"{kind}-token"], start, end)
        self._texts[key] = text
        return text

    def changed(self, row: DiffRow) -> tuple[Spans, Spans]:
        """A changed row's differing tokens, found when the row is first painted (cheap for a
        screenful, and a 5 000-line diff need not find them all before it opens)."""
        found = self._changed.get(id(row))
        if found is None:
            found = self._changed[id(row)] = row.changed(whitespace=self.result.whitespace)
        return found

    def _cut(self, code: Text, width: int) -> Text:
        """The window of a line that scroll_x shows, `‹`/`›` where it is cut."""
        x = self.scroll_offset.x
        length = len(code.plain)
        shown = code[x:x + width]
        shown.pad_right(width - len(shown.plain))
        if not shown.plain:
            shown = Text(" " * width)
        if x > 0 and length > 0:
            shown = Text("‹", style=self.styles_by_kind["cut"]) + shown[1:]
        if length > x + width:
            shown = shown[:-1] + Text("›", style=self.styles_by_kind["cut"])
        return shown

    # -- painting ------------------------------------------------------------------
    empty_hint = "The two sides are the same after the filters: ] diffs what else they hold (the launch manifest, SASS, …), N shows the noise."

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        width = self.text_width
        if not self._lines and y == 1 and not self.loading:
            return Strip([Segment(f"  {self.empty_hint}", self.styles_by_kind["skip"])]).crop_extend(0, width, None)
        if index >= len(self._lines):
            return Strip.blank(width)
        kind, row = self._lines[index]
        st = self.styles_by_kind
        if kind == "skip":
            text = Text("  ⋯", style=st["skip"])
        elif self.split:
            left_w, right_w = self._halves()
            text = self._half("left", row, left_w)
            text.append("│", style=st["gutter"])
            text.append_text(self._half("right", row, right_w))
        else:
            left_changed, right_changed = self.changed(row)
            if kind == "delete":
                sign, number, line, idx, changed, side = "-", row.left_no, row.left, row.left_index, left_changed, "left"
            elif kind == "insert":
                sign, number, line, idx, changed, side = "+", row.right_no, row.right, row.right_index, right_changed, "right"
            else:
                sign, number, line, idx, changed, side = " ", row.right_no, row.right, row.right_index, (), "right"
            text = Text(f"{number if number is not None else '':>5}{sign}", style=st["gutter"])
            text.append_text(self._cut(self._code(side, idx, line, kind, changed), self.body_width()))
        segments = [Segment(t.text, t.style) for t in text.render(self.app.console)]
        return Strip(segments).crop_extend(0, width, None)

    def _half(self, side: str, row: DiffRow, width: int) -> Text:
        st = self.styles_by_kind
        left_changed, right_changed = self.changed(row)
        if side == "left":
            number, line, idx, changed = row.left_no, row.left, row.left_index, left_changed
            kind = "delete" if row.kind in ("delete", "replace") else "equal"
        else:
            number, line, idx, changed = row.right_no, row.right, row.right_index, right_changed
            kind = "insert" if row.kind in ("insert", "replace") else "equal"
        gutter = f"{number:>5} " if number is not None else " " * GUTTER
        text = Text(gutter, style=st["gutter"])
        body = width - GUTTER
        if number is None:
            return text + Text(" " * body)
        text.append_text(self._cut(self._code(side, idx, line, kind, changed), body))
        return text

    @property
    def line_count(self) -> int:
        return len(self._lines)
