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

from ptxbench.tui import keys

# Their own footer entries after the view's keys (widgets/key_bar.py puts these groups last).
_GROUPS = (keys.group_of("code.jump_left"), keys.group_of("code.line_start"))
TRAILING_GROUPS: tuple[Binding.Group, ...] = tuple(g for g in _GROUPS if g is not None)

BINDINGS: list[BindingType] = keys.bindings("code")


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
