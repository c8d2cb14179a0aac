"""A person's labels: asked for, kept until the store has them, never dropped.

A label is a new row in `labels`, beside the automatic category. What the
person typed is kept in `unsaved` (in the order typed, with the time it was
typed) from the moment the dialog closes until the store has it: a store
locked by another writer (a long `ptxbench eval` or import) makes the write
wait `StoreReader.write_timeout` and then try again every `RETRY_S`, and the
banner says how many are waiting. Quitting with labels still unsaved asks
first, and what is left is printed when the explorer exits.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App

from ptxbench.db import browse
from ptxbench.db.records import Label
from ptxbench.db.store import StoreLocked, now_iso
from ptxbench.db.writes import InvalidRecord, add_label
from ptxbench.tui.messages import LabelSaved, LabelsFlushed, StoreFailed

RETRY_S = 2.0


@dataclass(frozen=True)
class UnsavedLabel:
    key: int
    label: Label
    what: str  # "label", "fixit on", … for the message once saved

    def describe(self) -> str:
        lab = self.label
        parts = [lab.category or "(category unchanged)", "★ Fixit" if lab.fixit_candidate else "", lab.note]
        return f"sample {lab.sample_id}: " + " · ".join(p for p in parts if p)


# A mixin of the App: typed as one, a plain class at run time (PtxbenchApp brings App itself).
if TYPE_CHECKING:
    from ptxbench.db.reader import StoreReader

    _App = App[int]
else:
    _App = object


class Labelling(_App):
    """The App's side of labels (a mixin of PtxbenchApp, which has `reader`)."""

    unsaved: list[UnsavedLabel]
    if TYPE_CHECKING:  # what PtxbenchApp provides
        reader: StoreReader

        def can_write(self, what: str) -> bool: ...

        def reload_store(self) -> None: ...

        def update_notice(self) -> None: ...

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unsaved = []
        self._label_keys = 0
        self._flushing = False
        self._waiting_for = ""  # why the last write of an unsaved label failed

    # -- asking ------------------------------------------------------------------------
    def ask_label(self, sample_id: int) -> None:
        if self.can_write("labelling"):
            self.load_label_context(sample_id)

    def toggle_fixit(self, sample_id: int) -> None:
        if self.can_write("marking Fixit candidates"):
            self.flip_fixit(sample_id)

    @work(thread=True, group="labels", exit_on_error=False, description="current label")
    def load_label_context(self, sample_id: int) -> None:
        detail = self._read_detail(sample_id)
        if detail is not None:
            self.call_from_thread(self._open_label_dialog, detail)

    @work(thread=True, group="labels", exit_on_error=False, description="fixit mark")
    def flip_fixit(self, sample_id: int) -> None:
        detail = self._read_detail(sample_id)
        if detail is not None:
            self.call_from_thread(self._flip_fixit, detail)

    def _read_detail(self, sample_id: int) -> browse.SampleDetail | None:
        """One sample's detail, read in a worker thread; a failure is reported, not raised."""
        try:
            detail = self.reader.read(browse.sample_detail, sample_id)
        except Exception as exc:  # a store that breaks while open is reported
            self.post_message(StoreFailed(str(exc)))
            return None
        if detail is None:
            self.post_message(StoreFailed(f"no sample {sample_id}"))
        return detail

    def current_label(self, detail: browse.SampleDetail) -> Label | None:
        """The sample's label as the person last gave it: an unsaved one counts."""
        waiting = [u.label for u in self.unsaved if u.label.sample_id == detail.id]
        return waiting[-1] if waiting else detail.label

    def _open_label_dialog(self, detail: browse.SampleDetail) -> None:
        from ptxbench.tui.screens.dialogs import LabelChoice, LabelDialog

        label = self.current_label(detail)
        current = LabelChoice(label.category, label.note, label.fixit_candidate) if label else None

        def saved(choice: LabelChoice | None) -> None:
            if choice is not None:
                self.save_label(detail.id, choice.category, choice.note, choice.fixit, "label")

        self.push_screen(LabelDialog(detail.id, detail.latest.category if detail.latest else None, current), saved)

    def _flip_fixit(self, detail: browse.SampleDetail) -> None:
        label = self.current_label(detail)
        fixit = not (label.fixit_candidate if label else False)
        self.save_label(detail.id, label.category if label else None, label.note if label else "", fixit,
                        "fixit on" if fixit else "fixit off")

    # -- keeping and writing ---------------------------------------------------------------
    def save_label(self, sample_id: int, category: str | None, note: str, fixit: bool, what: str) -> None:
        """Keep the label as typed (with the time it was typed) and write it as soon as the store lets us."""
        self._label_keys += 1
        label = Label(sample_id=sample_id, author=_author(), category=category, note=note,
                      fixit_candidate=fixit, created_at=now_iso())
        self.unsaved.append(UnsavedLabel(self._label_keys, label, what))
        self.flush_labels()

    def flush_labels(self) -> None:
        if self._flushing or not self.unsaved:
            return
        self._flushing = True
        self._write_labels(list(self.unsaved))

    @work(thread=True, group="label-writes", exit_on_error=False, description="save labels")
    def _write_labels(self, batch: list[UnsavedLabel]) -> None:
        """In order; the first that cannot be written stops the pass, so none overtakes another."""
        for item in batch:
            try:
                self.reader.write(add_label, item.label)
            except InvalidRecord as exc:
                # Can never be written (the sample is gone): say so rather than retry for ever.
                self.post_message(StoreFailed(f"label not saved ({item.describe()}): {exc}"))
                self.post_message(LabelSaved(item.key, item.label.sample_id, ""))
                continue
            except StoreLocked:
                self.post_message(LabelsFlushed(error="another writer holds the store"))
                return
            except Exception as exc:  # damaged, gone, …: kept, and tried again
                self.post_message(LabelsFlushed(error=str(exc)))
                return
            self.post_message(LabelSaved(item.key, item.label.sample_id, item.what))
        self.post_message(LabelsFlushed())

    def on_label_saved(self, message: LabelSaved) -> None:
        self.unsaved = [u for u in self.unsaved if u.key != message.key]
        if message.what:
            self.notify(f"Sample {message.sample_id}: {message.what} saved.")
        self.reload_store()

    def on_labels_flushed(self, message: LabelsFlushed) -> None:
        self._flushing = False
        self._waiting_for = message.error
        if message.error:
            self.set_timer(RETRY_S, self.flush_labels)
        elif self.unsaved:
            self.flush_labels()  # typed while that pass ran
        self.update_notice()

    def unsaved_notice(self) -> str:
        n = len(self.unsaved)
        why = f" ({self._waiting_for})" if self._waiting_for else ""
        return (f"{n} label{'s' if n != 1 else ''} not saved yet{why}; kept and retried every {RETRY_S:.0f} s. "
                "Nothing you typed is lost.")

    # -- quitting ----------------------------------------------------------------------------
    async def action_quit(self) -> None:
        if not self.unsaved:
            self.exit()
            return
        from ptxbench.tui.screens.dialogs import ConfirmDialog

        n = len(self.unsaved)
        question = (f"{n} label{'s are' if n != 1 else ' is'} not in the store yet{f' ({self._waiting_for})' if self._waiting_for else ''}."
                    "\n\nWait, and they are saved as soon as the store is free; quit now, and they are printed "
                    "when the explorer closes, not saved.")

        def answered(yes: bool | None) -> None:
            if yes:
                self.exit()

        self.push_screen(ConfirmDialog(question, yes="Quit without them", no="Wait"), answered)


def _author() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name in some containers
        return "unknown"
