"""Dialogs: relabel a sample, confirm an action, pick a sample id, help."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Checkbox, Input, Label, Select, Static, TextArea

from ptxbench.engine.categories import CATEGORIES, DESCRIPTIONS, OK
from ptxbench.engine.inert import inert
from ptxbench.tui import keys
from ptxbench.tui.untrusted import markup_value, plain
from ptxbench.tui.widgets.key_bar import KeyBar


@dataclass(frozen=True)
class LabelChoice:
    category: str | None  # None: keep the automatic category, add a note only
    note: str
    fixit: bool

    @property
    def empty(self) -> bool:
        """Says nothing: no category, no note, no Fixit mark."""
        return self.category is None and not self.note and not self.fixit


EMPTY_HINT = "Nothing to save yet: pick a category, type a note or tick Fixit (esc closes)."
LOADING = "reading the current label…"


class NoteArea(TextArea):
    """The note: several lines (a paste keeps every line); Enter saves, as in a one-line field."""

    DEFAULT_CSS = """
    NoteArea { height: auto; max-height: 8; }
    """

    class Submitted(Message):
        def __init__(self, area: NoteArea) -> None:
            super().__init__()
            self.area = area

        @property
        def control(self) -> NoteArea:
            return self.area

    def __init__(self, text: str = "", **kwargs: Any) -> None:
        super().__init__(text, soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)

    @property
    def value(self) -> str:
        return self.text

    @value.setter
    def value(self, text: str) -> None:
        self.text = text

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":  # a newline comes in with a paste; Enter saves
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self))
            return
        await super()._on_key(event)


class LabelDialog(ModalScreen[LabelChoice | None]):
    """A sample's label. Opened at once with `loading`: until `loaded` brings the current label
    the fields are disabled and keys typed meanwhile are dropped, so none lands in the note
    before the current note is filled in (or moves the view underneath)."""

    BINDINGS = keys.bindings("dialog")
    AUTO_FOCUS = None  # the note takes the focus once it holds the current note (`_enable`)

    def __init__(self, sample_id: int, automatic: str | None, current: LabelChoice | None, *,
                 by: str = "", loading: bool = False) -> None:
        super().__init__()
        self.sample_id = sample_id
        self.automatic = automatic
        self.current = current
        self.by = by  # whose the current label is, and when it was typed
        self.loading = loading
        self.seen: int | None = None  # the id of the newest stored label when the dialog was filled in

    def compose(self) -> ComposeResult:
        with Vertical(id="label-dialog", classes="dialog"):
            yield Label(f"[b]Label sample {self.sample_id}[/b]")
            yield Static(self._automatic_line(), classes="dim", id="label-automatic")
            yield Static(self._by_line(), id="label-by", classes="dim")
            options = [(f"{c} — {DESCRIPTIONS.get(c, 'passes')}", c) for c in (OK, *CATEGORIES)]
            value = self.current.category if self.current and self.current.category else Select.NULL
            yield Select(options, prompt="category (blank: keep the automatic one)", id="label-category", value=value)
            # A stored note is shown inert: it may have come with a store from elsewhere.
            yield NoteArea(inert(self.current.note) if self.current else "", id="label-note")
            yield Checkbox("Fixit candidate", value=bool(self.current and self.current.fixit), id="label-fixit")
            yield Static("", id="label-hint", classes="dim")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="label-save")
                yield Button("Cancel", id="label-cancel")
        yield KeyBar()

    def _automatic_line(self) -> str:
        if self.loading:
            return LOADING
        return (f"automatic category: [b]{markup_value(self.automatic or 'never evaluated')}[/b] — it stays; "
                "your label sits beside it.")

    def _by_line(self) -> str:
        return f"current label: {markup_value(self.by)}" if self.by else ""

    def on_mount(self) -> None:
        self.query_one("#label-hint", Static).display = False
        self.query_one("#label-note", NoteArea).border_title = "note (Enter saves; a paste keeps every line)"
        self._show()

    def loaded(self, automatic: str | None, current: LabelChoice | None, *, by: str = "", seen: int | None = None) -> None:
        """The sample's context has arrived: fill the fields in and take keys (at mount, if it came first)."""
        self.automatic, self.current, self.by, self.seen, self.loading = automatic, current, by, seen, False
        if self.is_mounted:
            self._show()

    def _show(self) -> None:
        self.query_one("#label-automatic", Static).update(self._automatic_line())
        by_line = self.query_one("#label-by", Static)
        by_line.update(self._by_line())
        by_line.display = bool(self.by)
        current = self.current
        if current is not None and not self.loading:
            if current.category:
                self.query_one("#label-category", Select).value = current.category
            note = self.query_one("#label-note", NoteArea)
            note.value = inert(current.note)
            note.move_cursor(note.document.end)  # typing goes on from the end of the note, as in a one-line field
            self.query_one("#label-fixit", Checkbox).value = current.fixit
        for field in self.query("#label-category, #label-note, #label-fixit, #label-save"):
            field.disabled = self.loading
        if self.loading:
            self.set_focus(None)  # keys go to the screen, which drops them (on_key)
        else:
            self.query_one("#label-note", NoteArea).focus()

    def on_key(self, event: events.Key) -> None:
        # Keys typed before the current label is in: dropped, so none goes into the note or the view below.
        if self.loading and event.key != "escape":
            event.stop()
            event.prevent_default()

    def choice(self) -> LabelChoice:
        value = self.query_one("#label-category", Select).value
        note = self.query_one("#label-note", NoteArea).value.replace("\r\n", "\n").strip()
        return LabelChoice(
            category=value if isinstance(value, str) else None,
            note=note,
            fixit=self.query_one("#label-fixit", Checkbox).value,
        )

    def action_save(self) -> None:
        """Save (ctrl+s, the Save button): an unchanged label is not saved again, and an
        empty one only when it clears a label the sample has."""
        if self.loading:
            return
        choice = self.choice()
        if choice == self.current:
            self.notify("Label unchanged: nothing saved.")
            self.dismiss(None)
        elif choice.empty and self.current is None:
            self._hint(EMPTY_HINT)
        else:
            self.dismiss(choice)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def _hint(self, text: str) -> None:
        hint = self.query_one("#label-hint", Static)
        hint.update(text)
        hint.display = True

    @on(Button.Pressed, "#label-save")
    def _save(self) -> None:
        self.action_save()

    @on(Button.Pressed, "#label-cancel")
    def _cancel(self) -> None:
        self.action_cancel()

    @on(NoteArea.Submitted, "#label-note")
    def _submitted(self) -> None:
        # A bare Enter in an empty note is a slip, never a label (not even one that clears).
        if self.choice().empty:
            self._hint(EMPTY_HINT)
            return
        self.action_save()


class ConfirmDialog(ModalScreen[bool]):
    """Ask before an action that starts a lot of work or loses something: Enter on the
    focused button answers, esc is no."""

    BINDINGS = keys.bindings("dialog")

    def __init__(self, question: str, *, yes: str, no: str = "Cancel") -> None:
        super().__init__()
        self.question = question
        self.yes = yes
        self.no = no

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog", classes="dialog"):
            yield Static(plain(self.question), id="confirm-question")  # it may quote a store error
            with Horizontal(classes="buttons"):
                yield Button(self.yes, variant="warning", id="confirm-yes")
                yield Button(self.no, id="confirm-no")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#confirm-yes", Button).focus()

    def action_save(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)

    @on(Button.Pressed, "#confirm-yes")
    def _yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#confirm-no")
    def _no(self) -> None:
        self.dismiss(False)


class PickSampleDialog(ModalScreen[int | None]):
    BINDINGS = keys.bindings("dialog")

    def __init__(self, prompt: str) -> None:
        super().__init__()
        self.prompt = prompt

    def compose(self) -> ComposeResult:
        with Vertical(id="pick-dialog", classes="dialog"):
            yield Label(self.prompt)
            yield Input(placeholder="sample id", type="integer", id="pick-id")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def action_save(self) -> None:
        text = self.query_one(Input).value.strip()
        self.dismiss(int(text) if text.isdigit() else None)

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_save()


class HelpScreen(ModalScreen[None]):
    """Every key, grouped: the view underneath first, then the keys that work everywhere,
    then every other view's. The rows come from the one registry (keys.py), as remapped
    by the person's keymap, so they agree with the footer and the palette."""

    BINDINGS = keys.bindings("dialog")[:1]

    def __init__(self, under: Screen) -> None:
        super().__init__()
        self.under = under

    @staticmethod
    def scope_of(screen: Screen) -> str:
        return getattr(screen, "KEY_SCOPE", "") or getattr(screen, "MODE", "")

    def sections(self) -> list[tuple[str, list[tuple[str, str, str]]]]:
        keymap = dict(getattr(getattr(self.app, "config", None), "keymap", None) or {})
        sections = dict(keys.help_sections(keymap))
        here = keys.SCOPE_TITLES.get(self.scope_of(self.under), "")
        first = [here] if here in sections else []
        order = first + [keys.SCOPE_TITLES["app"], keys.SCOPE_TITLES["table"]]
        order += [t for t in sections if t not in order]
        return [(title, sections[title]) for title in order if sections[title]]

    def compose(self) -> ComposeResult:
        parts: list[tuple[str, str] | str] = []
        for n, (title, rows) in enumerate(self.sections()):
            here = "  (this view)" if n == 0 and self.scope_of(self.under) else ""
            parts += ["\n" if n else "", (title + here, "bold underline"), "\n"]
            for key, description, tooltip in rows:
                # Content, not markup: keys such as "[" must not be read as tags.
                parts += [(f"{key:>10}", "bold"), f"  {description:<16} ", (tooltip, "dim"), "\n"]
        body = Content.assemble(*parts)
        with VerticalScroll(id="help-dialog", classes="dialog"):
            yield Label("[b]Keys[/b]: this view, everywhere, then every view · ctrl+p palette · esc closes")
            yield Static(body, id="help-body")
        yield KeyBar()

    def action_cancel(self) -> None:
        self.dismiss(None)
