"""A person's labels: asked for, kept until the store has them, never dropped.

A label is a new row in `labels`, beside the automatic category. What the
person typed is kept twice from the moment the dialog closes until the store
has it: in `unsaved` (in the order typed, with the time it was typed), and in
the store's recovery journal, a file beside the store written before the
label is written (db/recovery.py). A store locked by another writer (a long
`ptxbench eval` or import) makes the write wait `StoreReader.write_timeout`
and then try again every `RETRY_S`, and the banner says how many are waiting.
Quitting with labels still unsaved asks first; SIGTERM and SIGHUP (a closed
terminal, a logout) end the explorer at once. Either way what was not written
stays in the journal, and the next writer of the store (this explorer's next
start, `ptxbench eval`, `ptxbench migrate`) writes it and says so. A process
killed outright (SIGKILL, a power cut) loses nothing either: the journal
entry was on disk before the write was tried.

The label dialog opens at once and reads only what it shows (the speaking
category and the current label, with whose it is and when it was typed);
keys typed before that has arrived are not taken into the note. A label
another explorer wrote after the dialog opened is said when this one is
saved over it (whose, and when it was typed); both stay in the history.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App

from ptxbench.db import browse
from ptxbench.db.queries import LabelContext, is_cleared, label_context
from ptxbench.db.records import Label
from ptxbench.db.recovery import NOT_CHECKED, LabelWrite, add_label_once, discard, keep_label, pending, replay
from ptxbench.db.store import StoreError, StoreLocked, now_iso, set_wait_notice, stop_waiting
from ptxbench.db.writes import InvalidRecord
from ptxbench.tui.messages import LabelSaved, LabelsFlushed, StoreFailed
from ptxbench.tui.verdict import verdict_of

RETRY_S = 2.0
EXIT_GRACE_S = 5.0  # after SIGTERM/SIGHUP, the explorer ends within this even if closing hangs


@dataclass(frozen=True)
class UnsavedLabel:
    key: int
    label: Label
    what: str  # "label", "fixit on", … for the message once saved
    seen: int | None = NOT_CHECKED  # the sample's newest label id when the person looked (None: it had none)
    entry: Path | None = field(default=None, compare=False)  # its recovery journal entry

    def describe(self) -> str:
        lab = self.label
        parts = [lab.category or "(category unchanged)", "★ Fixit" if lab.fixit_candidate else "", lab.note]
        text = f"sample {lab.sample_id}: " + " · ".join(p for p in parts if p)
        if self.entry is not None:
            text += f" (kept in the recovery journal {self.entry.parent}; written at the next start)"
        return text


def by_whom(label: Label | None) -> str:
    """"alice, typed 2026-12-03 12:03:10 UTC" for a stored label ("" for none)."""
    if label is None:
        return ""
    stamp = label.created_at or ""
    when = f"{stamp[:10]} {stamp[11:19]} UTC" if len(stamp) >= 19 else stamp
    return f"{label.author}, typed {when}" if when else label.author


# A mixin of the App: typed as one, a plain class at run time (PtxbenchApp brings App itself).
if TYPE_CHECKING:
    from ptxbench.db.reader import StoreReader
    from ptxbench.tui.screens.dialogs import LabelDialog

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
        self._own_labels: set[int] = set()  # rows this explorer wrote: never "another explorer's"
        self._seen: dict[int, int | None] = {}  # sample -> its newest label's id when the person looked
        self.recovered = ""  # what the recovery journal held at start, once written

    def on_mount(self) -> None:
        set_wait_notice(None)  # the banner says that a label waits; a line on the terminal would tear the screen
        try:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGHUP):
                loop.add_signal_handler(sig, self._stopped_by_signal, sig)
        except (RuntimeError, NotImplementedError, ValueError):
            pass  # not the main thread (a test's app in a thread): the caller owns the signals
        if self.reader.writable and pending(self.reader.path):  # a look at a folder; no connection unless needed
            self.replay_journal()

    def on_unmount(self) -> None:
        try:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGHUP):
                loop.remove_signal_handler(sig)
        except (RuntimeError, NotImplementedError, ValueError):
            pass

    # -- the journal left by an earlier explorer or batch --------------------------------------
    @work(thread=True, group="label-writes", exit_on_error=False, description="recovery journal")
    def replay_journal(self) -> None:
        try:
            said = self.reader.write(replay).message()
        except StoreError as exc:  # locked or failing: the entries wait for the next writer
            self.post_message(StoreFailed(f"the recovery journal was not written yet: {exc}"))
            return
        if said:
            self.call_from_thread(self._journal_written, said)

    def _journal_written(self, said: str) -> None:
        self.recovered = said
        self.notify(said[:1].upper() + said[1:] + ".", title="Recovered", timeout=12)
        self.reload_store()

    # -- asking ------------------------------------------------------------------------
    def ask_label(self, sample_id: int) -> None:
        """The dialog at once, then what it shows (read in a worker); until that is in, the note takes no keys."""
        if not self.can_write("labelling"):
            return
        from ptxbench.tui.screens.dialogs import LabelDialog

        dialog = LabelDialog(sample_id, None, None, loading=True)

        def saved(choice: Any) -> None:
            if choice is not None:
                self._seen[sample_id] = dialog.seen
                self.save_label(sample_id, choice.category, choice.note, choice.fixit, "label")

        self.push_screen(dialog, saved)
        self.load_label_context(sample_id, dialog)

    def toggle_fixit(self, sample_id: int) -> None:
        if self.can_write("marking Fixit candidates"):
            self.flip_fixit(sample_id)

    @work(thread=True, group="labels", exit_on_error=False, description="current label")
    def load_label_context(self, sample_id: int, dialog: LabelDialog) -> None:
        try:
            context = self.reader.read(label_context, sample_id)
        except Exception as exc:  # a store that breaks while open is reported
            self.post_message(StoreFailed(str(exc)))
            context = None
        else:
            if context is None:
                self.post_message(StoreFailed(f"no sample {sample_id}"))
        self.call_from_thread(self._fill_label_dialog, dialog, context)

    def _fill_label_dialog(self, dialog: LabelDialog, context: LabelContext | None) -> None:
        from ptxbench.tui.screens.dialogs import LabelChoice

        if context is None:
            if dialog.is_attached:
                dialog.dismiss(None)
            return
        waiting = self._waiting_label(context.sample_id)
        label = waiting or context.label
        current = None
        if label is not None and not is_cleared(label):
            current = LabelChoice(label.category, label.note, label.fixit_candidate)
        by = "yours, not saved yet" if waiting is not None else by_whom(context.label)
        seen = context.label.id if context.label is not None else None
        automatic = verdict_of(context.shown, context.evaluations) if context.shown is not None else None
        dialog.loaded(automatic, current, by=by if current is not None else "", seen=seen)

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

    def _waiting_label(self, sample_id: int) -> Label | None:
        waiting = [u.label for u in self.unsaved if u.label.sample_id == sample_id]
        return waiting[-1] if waiting else None

    def current_label(self, detail: browse.SampleDetail) -> Label | None:
        """The sample's label as the person last gave it: an unsaved one counts."""
        return self._waiting_label(detail.id) or detail.label

    def _flip_fixit(self, detail: browse.SampleDetail) -> None:
        label = self.current_label(detail)
        fixit = not (label.fixit_candidate if label else False)
        self._seen[detail.id] = detail.label.id if detail.label is not None else None
        self.save_label(detail.id, label.category if label else None, label.note if label else "", fixit,
                        "fixit on" if fixit else "fixit off")

    # -- keeping and writing ---------------------------------------------------------------
    def save_label(self, sample_id: int, category: str | None, note: str, fixit: bool, what: str) -> None:
        """Keep the label as typed (with the time it was typed), in memory and in the recovery journal, and
        write it as soon as the store lets us. Another explorer's label written since the person looked
        (`_seen`) is said once this one is in."""
        seen = self._seen.pop(sample_id, NOT_CHECKED)
        self._label_keys += 1
        # To the microsecond: a label written twice (by this explorer and a replay) is known by all its fields,
        # and two labels a person gives one sample within a second must stay two.
        label = Label(sample_id=sample_id, author=_author(), category=category, note=note,
                      fixit_candidate=fixit, created_at=now_iso(precise=True))
        entry = None
        try:
            entry = keep_label(self.reader.path, label, by=f"ptxbench explorer (pid {os.getpid()})")
        except StoreError as exc:  # the journal's folder cannot be written: the label is kept in memory
            self.notify(f"{exc}; the label is kept until the store has it, but not on disk.", severity="warning")
        self.unsaved.append(UnsavedLabel(self._label_keys, label, what, seen, entry))
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
                written: LabelWrite = self.reader.write(add_label_once, item.label, seen=item.seen)
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
            discard(item.entry)
            if written.label.id is not None:
                self._own_labels.add(written.label.id)
            other = written.overtaken
            if other is not None and other.id not in self._own_labels:
                self.call_from_thread(self._say_overtaken, item, other)
            self.post_message(LabelSaved(item.key, item.label.sample_id, item.what))
        self.post_message(LabelsFlushed())

    def _say_overtaken(self, item: UnsavedLabel, other: Label) -> None:
        theirs = "cleared it" if is_cleared(other) else f"labelled it {other.category or '(category unchanged)'}"
        if other.note:
            theirs += f' ("{other.note[:60]}")'
        self.notify(f"Sample {item.label.sample_id}: {other.author} {theirs} after you looked at it ({by_whom(other)}). "
                    "Yours is now the current label; theirs stays in the sample's history.",
                    title="Another explorer's label", severity="warning", timeout=15)

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
        head = f"{n} label{'s' if n != 1 else ''} not saved yet{why}"
        if all(u.entry is not None for u in self.unsaved):
            return (f"{head}; kept in the recovery journal beside the store and retried every {RETRY_S:.0f} s. "
                    "Nothing you typed is lost.")
        return f"{head}; kept in memory and retried every {RETRY_S:.0f} s, but not on disk: quitting loses them."

    # -- quitting ----------------------------------------------------------------------------
    async def action_quit(self) -> None:
        if not self.unsaved:
            self.exit()
            return
        from ptxbench.tui.screens.dialogs import ConfirmDialog

        n = len(self.unsaved)
        kept = all(u.entry is not None for u in self.unsaved)
        after = ("they stay in the recovery journal beside the store and are written at the next start"
                 if kept else "they are printed when the explorer closes, not saved")
        question = (f"{n} label{'s are' if n != 1 else ' is'} not in the store yet{f' ({self._waiting_for})' if self._waiting_for else ''}."
                    f"\n\nWait, and they are saved as soon as the store is free; quit now, and {after}.")

        def answered(yes: bool | None) -> None:
            if yes:
                self.exit()

        self.push_screen(ConfirmDialog(question, yes="Quit without them", no="Wait"), answered)

    def _stopped_by_signal(self, signum: int) -> None:
        """SIGTERM or SIGHUP: end now. Every unsaved label is already in the recovery journal (one that could
        not be put there is tried once more); a write waiting for the store stops waiting."""
        stop_waiting()
        for n, item in enumerate(self.unsaved):
            if item.entry is None:
                try:
                    entry = keep_label(self.reader.path, item.label, by=f"ptxbench explorer (pid {os.getpid()})",
                                       why=f"the explorer got signal {signum} before the store had it")
                except StoreError:
                    continue
                self.unsaved[n] = UnsavedLabel(item.key, item.label, item.what, item.seen, entry)
        code = 128 + signum
        # Closing restores the terminal; where it is gone (SIGHUP) and that hangs, end anyway.
        timer = threading.Timer(EXIT_GRACE_S, os._exit, [code])
        timer.daemon = True
        timer.start()
        self.exit(return_code=code)


def _author() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name in some containers
        return "unknown"
