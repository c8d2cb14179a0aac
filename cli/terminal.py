"""What the CLI writes to a terminal: text from a candidate, a model or a tool, made inert.

A kernel's source, a model's reply and ptxas's messages (which quote the candidate's lines) can
hold terminal control sequences and rich markup. Every command prints through these:

- `console()`: the rich Console every command prints with. Markup is off, so `[green]ok[/]` in
  a message is shown as written, and every string it is handed (a `print` argument, a table cell,
  a title) is made inert (engine/inert.py) before it is laid out. As a last guard, a control
  character left in any segment it renders (a `Text` built elsewhere) is dropped before the
  terminal sees it; the escape sequences rich itself writes for colour and cursor moves stay.
- `show(text, style)`: a rich `Text` of inert text, for the renderers that build `Text` by hand.
- `inert_text(text)`: plain text for `typer.echo`, standard output and standard error.

JSON needs nothing more: `json.dumps` escapes every control character, C1 and bidi ones
included, as long as `ensure_ascii` keeps its default (True).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from ptxbench.engine.inert import inert, strip

inert_text = inert


def show(text: object, style: str = "") -> Text:
    """`text` as a rich Text that is shown as it is: inert, never read as markup."""
    return Text(inert(text), style=style)


class InertConsole(Console):
    """A Console for text that is not all ours (see the module's docstring)."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(inert(text), **kwargs)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control is None and segment.text:
                cleaned = strip(segment.text)
                if cleaned is not segment.text:
                    yield Segment(cleaned, segment.style)
                    continue
            yield segment


def console(*, stderr: bool = False, **kwargs: Any) -> Console:
    """The Console a command prints with: markup and highlighting off, text made inert."""
    kwargs.setdefault("highlight", False)
    kwargs.setdefault("markup", False)
    return InertConsole(stderr=stderr, **kwargs)
