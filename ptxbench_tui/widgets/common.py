"""Small pieces every view uses: the view bar, tables, filter selectors."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import DataTable, Select, Static

from ptxbench.tui import keys

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
    """The views and their number keys, the current one lit."""

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
        suffix = f"  [dim]{store.name}[/]" if store else ""
        return "".join(parts) + suffix


class Table(DataTable):
    """A DataTable whose Enter is a shown binding (footer and palette)."""

    BINDINGS = keys.bindings("table")

    def __init__(self, *, id: str | None = None, cursor_type: str = "row") -> None:
        super().__init__(id=id, cursor_type=cursor_type, zebra_stripes=True)


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
            select.set_options([(v, v) for v in values])
            if isinstance(current, str):
                select.value = current
        self._expected = self.values()

    def set_values(self, values: dict[str, str]) -> None:
        """Set the selectors without announcing a change."""
        for field, _ in self.names:
            select = self._select(field)
            value = values.get(field, "")
            if value:
                known = [v for _, v in select._options if isinstance(v, str)]  # noqa: SLF001
                if value not in known:
                    select.set_options([(v, v) for v in [*known, value]])
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


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:5.1f}%"


def speed(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}×"


def num(x: float | None, fmt: str = "{:.3f}") -> str:
    return "—" if x is None else fmt.format(x)
