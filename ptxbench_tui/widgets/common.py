"""Small pieces every view uses: the view bar, tables, filter selectors."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import DataTable, Select, Static

from ptxbench.tui import keys
from ptxbench.tui.untrusted import InertCells, markup_value, plain

MODES: tuple[tuple[str, str, str], ...] = (
    ("1", "overview", "Overview"),
    ("2", "tasks", "Tasks"),
    ("3", "samples", "Samples"),
    ("4", "triage", "Triage"),
    ("5", "compare", "Compare"),
    ("6", "live", "Live"),
    ("7", "plots", "Plots"),
    ("8", "fixit", "Fixit"),
)


class ModeBar(Static):
    """The views and their number keys, the current one lit; a click on a view opens it."""

    DEFAULT_CSS = """
    ModeBar {
        height: 1;
        background: $panel;
        color: $text-muted;
        padding: 0 1;
    }
    """

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def on_mount(self) -> None:
        self.update(self._content())

    def _content(self) -> str:
        parts = []
        for key, mode, title in MODES:
            if mode == self.current:
                parts.append(f"[reverse bold] {key} {title} [/]")
            else:
                parts.append(f" [bold]{key}[/] {title} ")
        store = getattr(self.app, "db_path", None)
        suffix = f"  [dim]{markup_value(store.name)}[/]" if store else ""
        return "".join(parts) + suffix

    @staticmethod
    def mode_at(x: int) -> str | None:
        """The view whose name is painted at column x (padding 1, each entry ` k Title `)."""
        pos = 1
        for key, mode, title in MODES:
            width = len(key) + len(title) + 3
            if pos <= x < pos + width:
                return mode
            pos += width
        return None

    async def on_click(self, event: events.Click) -> None:
        mode = self.mode_at(event.x)
        if mode is not None and mode != self.current:
            await self.app.run_action(f"switch_mode('{mode}')")


class TextTable(InertCells, DataTable):
    """A DataTable whose string cells and column titles are shown as text (a plain DataTable reads
    them as markup): model names, categories and sizes come from the store."""


class Table(TextTable):
    """A DataTable whose Enter is a shown binding (footer and palette); strings shown as text."""

    # Enter only: these small tables (triage counts, compare, tasks) select nothing for a bulk action.
    BINDINGS = [b for b in keys.bindings("table") if b.id == "table.open"]

    def __init__(self, *, id: str | None = None, cursor_type: str = "row") -> None:
        super().__init__(id=id, cursor_type=cursor_type, zebra_stripes=True)


class FilterPanel(Vertical):
    """A view's filters, in one row while they fit at a readable width; on a narrower
    terminal they fold away whole (never cut off yet focusable) and `/` opens them in
    rows of three, `esc` folds them again. The view's status line says which are set."""

    BINDINGS = keys.bindings("filterbar")
    SCOPED_CSS = False  # the folded rules name the panel's own classes from outside
    # The narrowest a filter is still readable at: a selector shows "gemm_bf16_sm9…".
    READABLE = {"Select": 18, "Input": 24}
    DEFAULT_CSS = """
    FilterPanel {
        height: 3;
        layout: horizontal;
    }
    FilterPanel.-folded { display: none; }
    FilterPanel.-folded.-open {
        display: block;
        layout: vertical;
        height: auto;
        border-bottom: solid $primary 40%;
        FilterBar { layout: grid; grid-size: 3; height: auto; }
        Input { width: 1fr; }
    }
    """

    def needed_width(self) -> int:
        return sum(self.READABLE.get(type(w).__name__, 0) for w in self.query("Input, Select"))

    def fit(self, width: int) -> None:
        """Fold when the filters would not be readable in `width` columns."""
        self.set_class(width < self.needed_width(), "-folded")

    @property
    def folded(self) -> bool:
        return self.has_class("-folded") and not self.has_class("-open")

    def open(self) -> None:
        """Show the filters (if folded) and put the cursor in the first of them."""
        self.add_class("-open")
        self.call_after_refresh(self._focus_first)

    def _focus_first(self) -> None:
        for widget in self.query("Input, Select"):
            if widget.focusable:
                widget.focus()
                return

    def action_close(self) -> None:
        self.remove_class("-open")
        screen = self.screen
        target = getattr(screen, "AUTO_FOCUS", None)
        if target:
            screen.query_one(target).focus()


class FilterBar(Horizontal):
    """A row of selectors; blank means "any"."""

    DEFAULT_CSS = """
    FilterBar {
        height: 3;
        width: 1fr;
        Select { width: 1fr; min-width: 14; }
    }
    """

    def __init__(self, names: list[tuple[str, str]], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.names = names  # (field, prompt)
        # What the selectors were last set to or announced as: a Changed event
        # that lands on these values came from code, not from a person.
        self._expected: dict[str, str] = {field: "" for field, _ in names}

    def compose(self) -> ComposeResult:
        for field, prompt in self.names:
            yield Select[str]([], prompt=prompt, id=f"filter-{field}", allow_blank=True)

    def _select(self, field: str) -> Select:
        return self.query_one(f"#filter-{field}", Select)

    def set_options(self, options: dict[str, list[str]]) -> None:
        for field, _ in self.names:
            select = self._select(field)
            current = select.value
            values = list(options.get(field, []))
            if isinstance(current, str) and current not in values:
                values.append(current)
            select.set_options(options_of(values))
            if isinstance(current, str):
                select.value = current
        self._expected = self.values()

    def set_values(self, values: dict[str, str]) -> None:
        """Set the selectors without announcing a change."""
        for field, _ in self.names:
            select = self._select(field)
            value = values.get(field, "")
            if value:
                known = [v for _, v in select._options if isinstance(v, str)]
                if value not in known:
                    select.set_options(options_of([*known, value]))
                select.value = value
            else:
                select.clear()
        self._expected = self.values()

    def values(self) -> dict[str, str]:
        out = {}
        for field, _ in self.names:
            value = self._select(field).value
            out[field] = value if isinstance(value, str) else ""
        return out

    def user_change(self) -> dict[str, str] | None:
        """The selectors' values if a person changed them since they were last set, else None.

        Views call this from their own `Select.Changed` handler (the event
        bubbles up from here) rather than waiting for a second message."""
        values = self.values()
        if values == self._expected:
            return None
        self._expected = values
        return values


def options_of(values: list[str]) -> list[tuple[Content, str]]:
    """A Select's options for values from the store: each shown as text (a string prompt is read
    as markup), its value as it is."""
    return [(plain(v), v) for v in values]


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:5.1f}%"


def speed(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}×"


def num(x: float | None, fmt: str = "{:.3f}") -> str:
    return "—" if x is None else fmt.format(x)
