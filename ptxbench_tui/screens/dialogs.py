"""Dialogs: relabel a sample, confirm an action, pick a sample id, help."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

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


class LabelDialog(ModalScreen[LabelChoice | None]):
    BINDINGS = keys.bindings("dialog")

    def __init__(self, sample_id: int, automatic: str | None, current: LabelChoice | None) -> None:
        super().__init__()
        self.sample_id = sample_id
        self.automatic = automatic
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="label-dialog", classes="dialog"):
            yield Label(f"[b]Label sample {self.sample_id}[/b]")
            yield Static(
                f"automatic category: [b]{markup_value(self.automatic or 'never evaluated')}[/b] — it stays; your label sits beside it.",
                classes="dim",
            )
            options = [(f"{c} — {DESCRIPTIONS.get(c, 'passes')}", c) for c in (OK, *CATEGORIES)]
            value = self.current.category if self.current and self.current.category else Select.NULL
            yield Select(options, prompt="category (blank: keep the automatic one)", id="label-category", value=value)
            # A stored note is shown inert: it may have come with a store from elsewhere.
            yield Input(value=inert(self.current.note) if self.current else "", placeholder="note: what is really wrong",
                        id="label-note")
            yield Checkbox("Fixit candidate", value=bool(self.current and self.current.fixit), id="label-fixit")
            yield Static("", id="label-hint", classes="dim")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="label-save")
                yield Button("Cancel", id="label-cancel")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#label-hint", Static).display = False
        self.query_one("#label-note", Input).focus()

    def choice(self) -> LabelChoice:
        value = self.query_one("#label-category", Select).value
        return LabelChoice(
            category=value if isinstance(value, str) else None,
            note=self.query_one("#label-note", Input).value.strip(),
            fixit=self.query_one("#label-fixit", Checkbox).value,
        )

    def action_save(self) -> None:
        """Save (ctrl+s, the Save button): an unchanged label is not saved again, and an
        empty one only when it clears a label the sample has."""
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

    @on(Input.Submitted, "#label-note")
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
