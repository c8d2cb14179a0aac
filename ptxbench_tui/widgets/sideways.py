"""Sideways moves for the code views and the diff: the view scrolls, never a hidden cursor.

A `wgmma` with 128 accumulator registers is a 1 000-column line; one column a
press does not reach its end. `shift+←`/`shift+→` move 40 columns, `home`/`end`
go to the start of the lines and to the end of the longest line on screen,
`←`/`→` move one column; `ctrl+home`/`ctrl+end` go to the first and last line.

The widget says how wide its code window is and how long the lines on screen
are (`code_width`, `visible_widths`); this mixin does the rest.
"""

from __future__ import annotations

from textual.binding import Binding, BindingType

STEP = 40  # columns a jump moves

# Their own footer entries after the view's keys (widgets/key_bar.py puts these groups last).
JUMP = Binding.Group("40 cols", compact=True)
ENDS = Binding.Group("Line start/end", compact=True)
TRAILING_GROUPS = (JUMP, ENDS)

BINDINGS: list[BindingType] = [
    Binding("left", "sideways(-1)", "Left", show=False, id="code.left"),
    Binding("right", "sideways(1)", "Right", show=False, id="code.right"),
    Binding("shift+left", f"sideways(-{STEP})", f"{STEP} columns left", key_display="⇧←", group=JUMP,
            id="code.jump_left", tooltip=f"Scroll {STEP} columns left"),
    Binding("shift+right", f"sideways({STEP})", f"{STEP} columns right", key_display="⇧→", group=JUMP,
            id="code.jump_right", tooltip=f"Scroll {STEP} columns right (long wgmma lines)"),
    Binding("home", "line_start", "Line start", group=ENDS, id="code.line_start",
            tooltip="Scroll back to the start of the lines"),
    Binding("end", "line_end", "Line end", group=ENDS, id="code.line_end",
            tooltip="Scroll to the end of the longest line on screen"),
    Binding("ctrl+home", "first_line", "First line", show=False, id="code.top"),
    Binding("ctrl+end", "last_line", "Last line", show=False, id="code.bottom"),
]


class Sideways:
    """Mixed into a scrolling widget (a Textual ScrollView or TextArea)."""

    # What the widget provides (a Widget's scroll_x, scroll_to, max_scroll_x …).
    scroll_x: float
    max_scroll_x: int

    def code_width(self) -> int:
        """Columns of code the view shows at once."""
        raise NotImplementedError

    def visible_widths(self) -> list[int]:
        """Cell widths of the lines on screen."""
        raise NotImplementedError

    def _sideways_to(self, x: int) -> None:
        # At once, not after the next frame: a second press before it starts from the new place.
        self.scroll_to(x=max(0, min(x, self.max_scroll_x)), animate=False, immediate=True)  # type: ignore[attr-defined]

    def action_sideways(self, columns: int) -> None:
        self._sideways_to(round(self.scroll_x) + columns)

    def action_line_start(self) -> None:
        self._sideways_to(0)

    def action_line_end(self) -> None:
        longest = max(self.visible_widths(), default=0)
        self._sideways_to(longest - self.code_width() + 1)  # +1: the `›` column or the cursor's

    def action_first_line(self) -> None:
        self.scroll_to(y=0, animate=False, immediate=True)  # type: ignore[attr-defined]

    def action_last_line(self) -> None:
        self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)  # type: ignore[attr-defined]
