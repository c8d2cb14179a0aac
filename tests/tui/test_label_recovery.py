"""Labels a person typed are never lost or silently cut, and another explorer's label is said.

- a multi-line paste into the note keeps every line;
- the dialog opens at once, says whose the current label is and when it was typed, and keys typed
  before that has arrived do not land in the note;
- a label saved over one another explorer wrote after the dialog opened names that explorer's
  label (whose, when typed); both stay in the history;
- a cleared label counts as cleared, not labelled;
- SIGTERM or SIGHUP to a real explorer with a label waiting for a locked store ends it at once
  with the label in the store's recovery journal (so does SIGKILL: the journal entry was written
  before the label was tried), and the next start writes it and says so.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import SIZE, settle
from test_store_access import labels, open_samples_row, until
from textual import events

from ptxbench.db import recovery
from ptxbench.db.queries import label_counts
from ptxbench.db.records import Label
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_label
from ptxbench.tui import labelling
from ptxbench.tui.screens.dialogs import LabelDialog

DRIVER = Path(__file__).parent / "label_signal_driver.py"


async def _dialog(app, pilot, sample_id: int) -> LabelDialog:
    await open_samples_row(app, pilot, sample_id)
    await pilot.press("l")
    await until(pilot, lambda: isinstance(app.screen, LabelDialog) and not app.screen.loading
                and app.focused is not None and app.focused.id == "label-note")
    return app.screen


async def test_a_multi_line_paste_keeps_every_line(app_for, store, ids):
    """Before: the note was a one-line field and a paste kept its first line only, silently."""
    app = app_for()
    pasted = "the tile is wrong\nbecause the wait is missing\n\n  and the fence too"
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        dialog = await _dialog(app, pilot, ids.wgmma_ok)
        app.post_message(events.Paste(pasted))  # as the terminal driver does
        await settle(pilot)
        assert dialog.query_one("#label-note").value == pasted
        await pilot.press("enter")  # Enter still saves
        await until(pilot, lambda: not app.unsaved and labels(store, ids.wgmma_ok))
    assert [note for _, note, _, _ in labels(store, ids.wgmma_ok)] == [pasted]


async def test_the_dialog_opens_at_once_and_keys_typed_while_it_loads_are_not_taken(app_for, store, ids, monkeypatch):
    db = open_store(store)
    add_label(db, Label(sample_id=ids.wgmma_ok, author="bob", note="bob's note",
                        created_at="2026-11-30T09:15:00+00:00"))
    db.conn.close()
    read = labelling.label_context
    gate = threading.Event()        # the read waits until the test has seen the dialog loading, however slow the machine

    def slow(conn, sample_id):
        gate.wait(10)
        return read(conn, sample_id)

    monkeypatch.setattr(labelling, "label_context", slow)
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_samples_row(app, pilot, ids.wgmma_ok)
        row = screen.query_one("#samples-table").cursor_row
        await pilot.press("l", "x", "y", "1")
        await pilot.pause(0.1)
        dialog = app.screen
        assert isinstance(dialog, LabelDialog) and dialog.loading  # on screen before its context is read
        gate.set()
        await until(pilot, lambda: not dialog.loading)
        await settle(pilot)
        assert app.screen is dialog and app.focused.id == "label-note"
        assert dialog.query_one("#label-note").value == "bob's note"  # nothing typed while it loaded is in it
        assert "bob, typed 2026-11-30 09:15:00 UTC" in str(dialog.query_one("#label-by").render())
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is screen and screen.query_one("#samples-table").cursor_row == row


async def test_a_label_over_another_explorers_newer_one_says_whose_it_was(app_for, store, ids):
    """Before: the label written last silently became the current one."""
    app = app_for()
    said: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        original = app.notify
        app.notify = lambda message, **kw: (said.append(str(message)), original(message, **kw))[1]  # type: ignore[method-assign]
        dialog = await _dialog(app, pilot, ids.wgmma_ok)
        # Another explorer labels the sample while this dialog is open.
        other = open_store(store)
        add_label(other, Label(sample_id=ids.wgmma_ok, author="bob", category="wrong_result", note="bob says wrong",
                               created_at="2026-12-01T08:00:05+00:00"))
        other.conn.close()
        await pilot.press(*"mine", "enter")
        await until(pilot, lambda: not app.unsaved)
        await settle(pilot)
        assert app.screen is not dialog
    overtaken = [s for s in said if "bob labelled it wrong_result" in s]
    assert overtaken and "typed 2026-12-01 08:00:05 UTC" in overtaken[0] and "theirs stays" in overtaken[0]
    assert [(c, n) for c, n, _, _ in labels(store, ids.wgmma_ok)] == [("wrong_result", "bob says wrong"), (None, "mine")]


async def test_a_cleared_label_counts_as_cleared(app_for, store, ids):
    """Before: a sample whose label was cleared still counted as labelled."""
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        dialog = await _dialog(app, pilot, ids.wgmma_ok)
        await pilot.press(*"looked", "enter")
        await until(pilot, lambda: not app.unsaved and labels(store, ids.wgmma_ok))
        dialog = await _dialog(app, pilot, ids.wgmma_ok)
        assert dialog.current is not None
        dialog.query_one("#label-note").value = ""
        await pilot.press("ctrl+s")  # an empty label over one the sample has: it clears it
        await until(pilot, lambda: not app.unsaved and len(labels(store, ids.wgmma_ok)) == 2)
        dialog = await _dialog(app, pilot, ids.wgmma_ok)
        assert dialog.current is None and not dialog.query_one("#label-by").display
        await pilot.press("escape")
    conn = sqlite3.connect(store)
    newest = {sid: rest for sid, *rest in conn.execute(
        "SELECT sample_id, category, note, fixit_candidate FROM labels l "
        "WHERE id = (SELECT MAX(id) FROM labels WHERE sample_id = l.sample_id)")}
    counts = label_counts(conn)
    conn.close()
    cleared = [sid for sid, (category, note, fixit) in newest.items() if category is None and not note and not fixit]
    assert ids.wgmma_ok in cleared
    assert counts == {"labelled": len(newest) - len(cleared), "cleared": len(cleared)}


async def test_the_same_label_given_twice_within_a_second_is_two_rows(app_for, store, ids):
    """Fixit off, on, off within a second: the last is the current label (labels are known by all their
    fields, their time to the microsecond, so two alike stay two)."""
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await open_samples_row(app, pilot, ids.wgmma_ok)
        for _ in range(3):
            await pilot.press("f")
            await until(pilot, lambda: not any(w.is_running for w in app.workers))
        await until(pilot, lambda: not app.unsaved and len(labels(store, ids.wgmma_ok)) == 3)
    assert [fixit for _, _, fixit, _ in labels(store, ids.wgmma_ok)] == [1, 0, 1]


# -- signals: a real explorer process -------------------------------------------------------------------------


HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(120)
"""


def _explorer_with_a_waiting_label(store: Path, sample_id: int, note: str, env: dict) -> tuple:
    explorer = subprocess.Popen([sys.executable, str(DRIVER), str(store), str(sample_id), note], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert explorer.stdout is not None and explorer.stdin is not None
    assert explorer.stdout.readline().strip() == "ready", explorer.stderr.read() if explorer.stderr else ""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(store)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    explorer.stdin.write("go\n")
    explorer.stdin.flush()
    waiting = json.loads(explorer.stdout.readline())
    return explorer, holder, waiting


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
async def test_a_stopped_explorer_keeps_the_label_and_the_next_start_writes_it(app_for, store, ids, tmp_path, sig):
    """Before: a label waiting for a locked store was lost on SIGHUP or SIGTERM, though the banner said
    "Nothing you typed is lost"."""
    import os

    env = {**os.environ, "PTXBENCH_CACHE_DIR": str(tmp_path / "cache")}
    note = f"kept through {sig.name}"
    explorer, holder, waiting = _explorer_with_a_waiting_label(store, ids.wgmma_ok, note, env)
    try:
        assert "Nothing you typed is lost" in waiting["notice"]
        sent = time.monotonic()
        explorer.send_signal(sig)
        _, err = explorer.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert labels(store, ids.wgmma_ok) == []
    entries = recovery.pending(store)
    assert [str(e) for e in entries] == [waiting["entry"]]
    if sig == signal.SIGKILL:
        assert explorer.returncode == -signal.SIGKILL
    else:
        assert explorer.returncode == 128 + sig and took < 10, err[-2000:]
        assert "Traceback" not in err
        assert f"label not saved, sample {ids.wgmma_ok}: (category unchanged) · {note} (kept in the recovery journal" in err
    # The next start writes it and says so.
    app = app_for()
    said: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        original = app.notify
        app.notify = lambda message, **kw: (said.append(str(message)), original(message, **kw))[1]  # type: ignore[method-assign]
        await until(pilot, lambda: bool(app.recovered))
        await settle(pilot)
    assert "wrote 1 label kept in the recovery journal" in app.recovered
    assert any("Wrote 1 label" in s for s in said)
    assert [(c, n) for c, n, _, _ in labels(store, ids.wgmma_ok)] == [(None, note)]
    assert recovery.pending(store) == []
