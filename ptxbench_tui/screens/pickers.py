"""Small dialogs of the triage moves: sort by a column, export a table."""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, RadioButton, RadioSet, Static
from textual.widgets.option_list import Option

from ptxbench.engine.inert import inert
from ptxbench.tui import keys
from ptxbench.tui.kernel_files import FORMATS
from ptxbench.tui.widgets.key_bar import KeyBar


class SortDialog(ModalScreen[str | None]):
    """Pick the column to sort by; the current one is marked, and picking it again reverses it."""

    BINDINGS = keys.bindings("dialog")[:1]

    def __init__(self, columns: list[str], current: str | None, descending: bool, where: str) -> None:
        super().__init__()
        self.columns = columns
        self.current = current
        self.descending = descending
        self.where = where

    def compose(self) -> ComposeResult:
        options = []
        for name in self.columns:
            mark = (" ▼ (again: ▲)" if self.descending else " ▲ (again: ▼)") if name == self.current else ""
            options.append(Option(Content(inert(f"{name}{mark}")), id=name))
        with Vertical(id="sort-dialog", classes="dialog"):
            yield Label(Content.from_markup("[b]Sort by[/b]  [dim]$where[/dim]", where=inert(self.where)))
            yield OptionList(*options, id="sort-options")
        yield KeyBar()

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        if self.current in self.columns:
            options.highlighted = self.columns.index(self.current)
        options.focus()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


@dataclass(frozen=True)
class ExportChoice:
    path: Path
    fmt: str


EXPORT_DIR_ENV = "PTXBENCH_EXPORT_DIR"
# The folder each explorer last exported to: the next export offers it again.
_chosen_folder: weakref.WeakKeyDictionary[App, Path] = weakref.WeakKeyDictionary()


def export_folder(app: App | None = None) -> Path:
    """Where an export goes unless the person types another path: the folder they chose last in this
    explorer, else $PTXBENCH_EXPORT_DIR, else `ptxbench-exports` in their documents folder (never the
    folder the explorer was started in, which is often a repository)."""
    if app is not None and app in _chosen_folder:
        return _chosen_folder[app]
    env = os.environ.get(EXPORT_DIR_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_documents_dir()) / "ptxbench-exports"


class ExportDialog(ModalScreen[ExportChoice | None]):
    """Where to write a table, and as CSV or JSON. `describe` is plain text (it names filters
    whose values come from the store)."""

    BINDINGS = keys.bindings("dialog")

    def __init__(self, what: str, describe: str) -> None:
        super().__init__()
        self.what = what
        self.describe = describe

    def compose(self) -> ComposeResult:
        with Vertical(id="export-dialog", classes="dialog"):
            yield Label(Content.from_markup("[b]Export[/b] $what", what=inert(self.describe)))
            with RadioSet(id="export-format"):
                for i, fmt in enumerate(FORMATS):
                    yield RadioButton(fmt.upper(), value=i == 0, id=f"export-{fmt}")
            folder = export_folder(self.app)
            yield Input(str(folder / f"ptxbench-{self.what}.{FORMATS[0]}"), id="export-path")
            yield Static(Content.from_markup("into [b]$folder[/b] (type another path to choose another folder; "
                                             "the next export offers the folder you chose) · ⏎ or ctrl+s writes the "
                                             "file · esc cancels", folder=inert(str(folder))),
                         id="export-folder", classes="dim")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def fmt(self) -> str:
        pressed = self.query_one(RadioSet).pressed_button
        return (pressed.id or "export-csv").removeprefix("export-") if pressed else FORMATS[0]

    @on(RadioSet.Changed)
    def _format_changed(self) -> None:
        # Follow the format in the file name unless the person typed their own.
        field = self.query_one(Input)
        path = Path(field.value)
        if path.suffix.lstrip(".") in FORMATS:
            field.value = str(path.with_suffix(f".{self.fmt()}"))

    def action_save(self) -> None:
        text = self.query_one(Input).value.strip()
        if text:
            path = Path(text).expanduser()
            if not path.is_absolute():
                path = export_folder(self.app) / path  # a bare name goes into the folder offered
            _chosen_folder[self.app] = path.parent
            self.dismiss(ExportChoice(path, self.fmt()))

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_save()

    def action_cancel(self) -> None:
        self.dismiss(None)
