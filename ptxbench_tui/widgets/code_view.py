"""Read-only code views (PTX, SASS) that stay fast on long kernels.

A `TextArea` asks `get_line()` only for the lines it paints, so the lexer runs
lazily, front to back, as far as the deepest line painted so far, and each
line's styled `Text` is cached. A 3 000-line kernel therefore opens as fast as
a 30-line one. Colours come from the app theme's variables (see ROLE_VARIABLES),
so every theme colours code; the style cache is dropped when the theme changes.

The view never wraps, so its document is laid out once, one row a line
(`FlatDocument`), and `←`/`→`, `shift+←`/`shift+→`, `home`/`end` scroll the view
sideways (widgets/sideways.py) instead of moving the cursor along a line.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar, overload

from pygments.lexer import Lexer
from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.geometry import Offset
from textual.document._document import Document
from textual.document._document_navigator import DocumentNavigator
from textual.document._wrapped_document import WrappedDocument
from textual.expand_tabs import get_tab_widths
from textual.widgets import TextArea

from ptxbench.engine.inert import inert
from ptxbench.tui.ptx_lexer import PtxbenchLexer, SassLexer, role_of
from ptxbench.tui.widgets import sideways

T = TypeVar("T")

# role → (theme variable, rich style attributes). A theme may define
# `ptx-<role>` to override the colour (the ptxbench theme does).
ROLE_VARIABLES: dict[str, tuple[str, str]] = {
    "opcode": ("text-accent", "bold"),
    "family": ("text-success", "bold"),
    "modifier": ("text-secondary", ""),
    "type": ("text-primary", ""),
    "space": ("text-primary", "italic"),
    "directive": ("text-primary", "bold"),
    "guard": ("text-error", "bold"),
    "register": ("foreground", ""),
    "special": ("text-warning", "italic"),
    "label": ("text-warning", "bold"),
    "number": ("text-warning", ""),
    "string": ("text-success", "italic"),
    "comment": ("foreground-muted", "italic"),
    "operator": ("text-error", "bold"),
    "error": ("text-error", "reverse"),
    "marked": ("warning-muted", "bold"),  # background of lines/opcodes to look at
    "evidence": ("error-muted", ""),  # the line a message points at (see role_styles)
}


def resolve_color(variables: dict[str, str], name: str) -> Color | None:
    value = variables.get(name)
    if not value:
        return None
    try:
        color = Color.parse(value)
    except Exception:  # "auto 87%" and other computed values
        return None
    if color.a < 1.0:
        background = Color.parse(variables.get("background", "#000000"))
        color = background + color
    return color


def role_styles(variables: dict[str, str]) -> dict[str, Style]:
    styles: dict[str, Style] = {}
    for role, (fallback, attrs) in ROLE_VARIABLES.items():
        color = resolve_color(variables, f"ptx-{role}") or resolve_color(variables, fallback)
        hex_color = color.hex6 if color else None
        if role == "marked":
            styles[role] = Style.parse(f"{attrs} on {hex_color}" if hex_color else f"{attrs} reverse")
        elif role == "evidence":
            # Red text on a red-tinted ground: it stays visible under the cursor line's background.
            fg = resolve_color(variables, "text-error")
            styles[role] = Style.parse(f"bold {fg.hex6 if fg else 'red'} on {hex_color}" if hex_color else "bold reverse")
        else:
            styles[role] = Style.parse(f"{attrs} {hex_color}".strip() if hex_color else (attrs or "none"))
    return styles


class LazyHighlighter:
    """Token spans per line, produced on demand from one running lexer."""

    def __init__(self, text: str, lexer: Lexer) -> None:
        self.text = text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self._tokens: Iterator[tuple[int, object, str]] = lexer.get_tokens_unprocessed(text)
        self._spans: list[list[tuple[int, int, str]]] = [[] for _ in self.line_starts]
        self._done_upto = -1  # every line up to this index has all its spans
        self._pending: tuple[int, object, str] | None = None

    def spans(self, line: int) -> list[tuple[int, int, str]]:
        if line > self._done_upto:
            self._advance(line)
        return self._spans[line] if 0 <= line < len(self._spans) else []

    def _advance(self, line: int) -> None:
        # A line is complete once a token starts on a later line.
        limit = self.line_starts[line + 1] if line + 1 < len(self.line_starts) else len(self.text) + 1
        starts = self.line_starts
        while True:
            tok = self._pending or next(self._tokens, None)
            self._pending = None
            if tok is None:
                self._done_upto = len(self._spans) - 1
                return
            pos, ttype, value = tok
            if pos >= limit:
                self._pending = tok
                self._done_upto = line
                return
            role = role_of(ttype)
            if role is None or not value:
                continue
            end = pos + len(value)
            first = bisect.bisect_right(starts, pos) - 1
            for ln in range(first, len(starts)):
                ls = starts[ln]
                if ls >= end:
                    break
                s, e = max(pos, ls) - ls, min(end, starts[ln + 1] - 1 if ln + 1 < len(starts) else end) - ls
                if e > s:
                    self._spans[ln].append((s, e, role))


class _PerLine(Sequence[T]):
    """`n` entries, one a line, each made when asked for: a 5 000-line kernel allocates none up front."""

    def __init__(self, n: int, make: Callable[[int], T]) -> None:
        self.n, self.make = n, make

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return [self.make(i) for i in range(*index.indices(self.n))]
        if index < 0:
            index += self.n
        if not 0 <= index < self.n:
            raise IndexError(index)
        return self.make(index)


class FlatDocument(WrappedDocument):
    """Textual's WrappedDocument for a view that does not wrap: one row a line. Textual's lays out
    every line (its tabs, its rows) at each (re)wrap, several times an open, and sums every line for
    `height` once per painted line: 0.8 ms a line on the 5 000-line GEMM. Here the layout is read
    off the line number when asked for. The view is read-only, so nothing edits it in place."""

    def wrap(self, width: int, tab_width: int | None = None) -> None:
        if width:
            super().wrap(width, tab_width)
            return
        self._width = 0
        if tab_width:
            self._tab_width = tab_width
        lines, tab = self.document.lines, self._tab_width
        n = len(lines)
        self._wrap_offsets = _PerLine(n, lambda i: [])  # type: ignore[assignment]
        self._offset_to_line_info = _PerLine(n, lambda i: (i, 0))  # type: ignore[assignment]
        self._line_index_to_offsets = _PerLine(n, lambda i: [i])  # type: ignore[assignment]
        self._tab_width_cache = _PerLine(n, lambda i: [w for _, w in get_tab_widths(lines[i], tab)])  # type: ignore[assignment]

    @property
    def height(self) -> int:
        return len(self._offset_to_line_info)


class CodeView(sideways.Sideways, TextArea):
    """A read-only, lazily highlighted code view."""

    BINDINGS = sideways.BINDINGS

    DEFAULT_CSS = """
    CodeView {
        border: none;
        padding: 0;
        background: $surface;
        &:focus { border: none; }
    }
    """

    LEXER: type[Lexer] = PtxbenchLexer

    def __init__(self, text: str = "", *, id: str | None = None, classes: str | None = None) -> None:
        text = inert(text)
        super().__init__(
            text,
            read_only=True,
            show_line_numbers=True,
            soft_wrap=False,
            id=id,
            classes=classes,
            tab_behavior="focus",
        )
        self.cursor_blink = False
        # The cursor line's theme style would paint over the evidence and family shading.
        self.highlight_cursor_line = False
        self._highlighter = LazyHighlighter(text, self.LEXER(stripnl=False, ensurenl=False))
        self._text_cache: dict[int, Text] = {}
        self._styles: dict[str, Style] | None = None
        self.evidence_lines: set[int] = set()
        self.marker: Callable[[str], bool] | None = None

    # -- content -----------------------------------------------------------
    def show(self, text: str, *, marker: Callable[[str], bool] | None = None) -> None:
        """Replace the text (a new highlighter, empty caches). `marker` picks
        the lines to shade (for example the requested families' instructions). The text is a
        candidate's: its control characters are shown written out (engine/inert.py), one line
        for each of its newlines, as the assembler counts them."""
        text = inert(text)
        self._highlighter = LazyHighlighter(text, self.LEXER(stripnl=False, ensurenl=False))
        self._text_cache.clear()
        self.marker = marker
        self.evidence_lines = set()
        self.load_text(text)

    def marked_lines(self) -> list[int]:
        if self.marker is None:
            return []
        return [i for i in range(self.document.line_count) if self.marker(self.document.get_line(i))]

    def next_mark(self) -> int | None:
        """Move the cursor to the next marked line (wrapping); its index, or None."""
        marks = self.marked_lines()
        if not marks:
            return None
        row = self.cursor_location[0]
        target = next((m for m in marks if m > row), marks[0])
        self.move_cursor((target, 0), center=True)
        return target

    def mark_evidence(self, line_index: int) -> None:
        """Shade a line a message points at and put the cursor on it."""
        self.evidence_lines = {line_index}
        self._invalidate()
        self.move_cursor((line_index, 0), center=True)

    def show_line(self, line_index: int) -> None:
        """Put a line (a search match) in the selection and bring it to the middle of the view."""
        line_index = max(0, min(line_index, self.document.line_count - 1))
        self.select_line(line_index)
        self.call_after_refresh(self.scroll_cursor_visible, center=True)

    def _set_document(self, text: str, language: str | None) -> None:
        # TextArea's own for plain text (a code view has no tree-sitter language), with a FlatDocument.
        self._highlight_query = None
        self.document = Document(text)
        self.wrapped_document = FlatDocument(self.document, tab_width=self.indent_width)
        self.navigator = DocumentNavigator(self.wrapped_document)
        self._build_highlight_map()
        self.move_cursor((0, 0))
        self._rewrap_and_refresh_virtual_size()

    # -- sideways (widgets/sideways.py) -----------------------------------------
    def code_width(self) -> int:
        return max(1, self.scrollable_content_region.width - self.gutter_width)

    def visible_widths(self) -> list[int]:
        top = round(self.scroll_y)
        lines = self.document.lines[top:top + self.scrollable_content_region.height]
        return [cell_len(line.expandtabs(self.indent_width)) for line in lines]

    def action_first_line(self) -> None:
        self.move_cursor((0, 0))

    def action_last_line(self) -> None:
        self.move_cursor((self.document.line_count - 1, 0))

    def scroll_cursor_visible(self, center: bool = False, animate: bool = False) -> Offset:
        """Bring the cursor's row on screen. Up and down leave the sideways scroll where the
        person put it; a jump to a line (`center`: an error, a family, a search match) shows
        it from its start."""
        if not self._has_cursor:
            return Offset(0, 0)
        row = self.cursor_location[0]
        height = max(1, self.scrollable_content_region.height)
        top = round(self.scroll_y)
        if center:
            y = max(0, row - height // 2)
        elif row < top:
            y = row
        elif row >= top + height:
            y = row - height + 1
        else:
            return Offset(0, 0)
        before = self.scroll_offset
        self.scroll_to(x=0 if center else None, y=y, animate=False, immediate=True)
        return self.scroll_offset - before

    # -- theme -------------------------------------------------------------
    def on_mount(self) -> None:
        self.watch(self.app, "theme", self._theme_changed, init=False)

    @property
    def line_count(self) -> int:
        return self.document.line_count

    def _theme_changed(self, _theme: str) -> None:
        self._styles = None
        self._invalidate()

    def _invalidate(self) -> None:
        self._text_cache.clear()
        # TextArea's own cache of painted strips is keyed by its theme, not the app's.
        self._line_cache.clear()
        self.refresh()

    @property
    def styles_by_role(self) -> dict[str, Style]:
        if self._styles is None:
            self._styles = role_styles(self.app.theme_variables)
        return self._styles

    # -- rendering ---------------------------------------------------------
    def styled_line(self, index: int) -> Text:
        cached = self._text_cache.get(index)
        if cached is None:
            line = self.document.get_line(index)
            text = Text(line, end="", no_wrap=True)
            styles = self.styles_by_role
            if self.marker is not None and self.marker(line):
                text.stylize(styles["marked"], 0, len(line))
            for start, end, role in self._highlighter.spans(index):
                style = styles.get(role)
                if style:
                    text.stylize(style, start, end)
            if index in self.evidence_lines:
                text.stylize(styles["evidence"], 0, len(line))
            self._text_cache[index] = text
            cached = text
        return cached.copy()

    def get_line(self, line_index: int) -> Text:
        return self.styled_line(line_index)


class PtxView(CodeView):
    LEXER = PtxbenchLexer


class SassView(CodeView):
    LEXER = SassLexer
