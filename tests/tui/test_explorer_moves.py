"""The explorer keeps up with a person (issue 29, point 5): Live's `x` cancels and `K` kills, each
said as what it was; another process's writes show without ctrl+r; exports carry the note text and
go into a folder the person chose; `esc` after a drill goes back; space selects and nothing else.

The engine is a real child process (tests/tui/engine_replay.py, or a script that never handles
SIGTERM); the other writer is another Python process writing through the store's own functions.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import textwrap
import time

from conftest import SIZE, open_view, settle
from textual.widgets import DataTable

from ptxbench.tui.app import make_app
from ptxbench.tui.screens.live import LiveScreen
from ptxbench.tui.screens.overview import OverviewScreen
from ptxbench.tui.screens.pickers import ExportDialog
from ptxbench.tui.screens.samples import SamplesScreen
from ptxbench.tui.screens.triage import TriageScreen
from ptxbench.tui.widgets.row_table import RowTable

WIDE = (170, 48)


async def until(pilot, check, seconds: float) -> bool:
    """Let the app run until `check()` holds, for at most `seconds` (the store is polled on a timer)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        await pilot.pause(0.05)
    return check()


def log_of(live: LiveScreen) -> str:
    return "\n".join(str(line) for line in live.query_one("#live-log").lines)


async def start_engine(pilot, sample_id: int) -> LiveScreen:
    """Queue one sample in Live, say yes to the static-only question (no GPU here), and wait until
    the engine has announced the sample."""
    await settle(pilot)
    await pilot.press("6")
    await settle(pilot)
    live = pilot.app.screen
    assert isinstance(live, LiveScreen)
    live.enqueue([sample_id], start=True)
    asked = lambda: type(pilot.app.screen).__name__ == "ConfirmDialog"
    assert await until(pilot, lambda: asked() or live.running, 10)
    if asked():
        await pilot.press("enter")
    assert await until(pilot, lambda: "sample" in str(live.query_one("#live-stage").render()), 20)
    assert live.running
    return live


# -- Live: x cancels, K kills ------------------------------------------------------------------


async def test_x_cancels_the_engine_after_the_current_sample(app_for, ids):
    app = app_for("--wait-for-term")
    async with app.run_test(size=SIZE) as pilot:
        live = await start_engine(pilot, ids.expert_vecadd)
        await pilot.press("x")
        assert await until(pilot, lambda: not live.running, 20), "x did not cancel the engine"
        assert live.last_exit.cancelled and live.last_exit.saw_done and live.last_exit.returncode == 0
        assert "engine cancelled" in log_of(live) and "stopped unexpectedly" not in log_of(live)


async def test_k_kills_the_engine_now_and_says_it_was_a_kill(app_for, store, ids):
    app = app_for("--wait-for-term")
    async with app.run_test(size=SIZE) as pilot:
        live = await start_engine(pilot, ids.expert_vecadd)
        await pilot.press("K")
        assert await until(pilot, lambda: not live.running, 20)
        log = log_of(live)
        assert live.last_exit.returncode == -9 and not live.last_exit.saw_done  # SIGKILL: no goodbye
        assert "engine killed" in log and "stopped unexpectedly" not in log
        assert any("Engine killed" in str(n.message) for n in app._notifications)


# An engine busy starting (importing its GPU stack) has no SIGTERM handler yet: SIGTERM ends it at once.
NO_HANDLER = textwrap.dedent("""
    import json, sys, time
    print(json.dumps({"event": "start", "t": 0.0, "total": 1, "device": None, "static_only": True}), flush=True)
    print(json.dumps({"event": "sample", "t": 0.0, "sample_id": 1, "task_id": "vector_add_smoke", "index": 0}), flush=True)
    time.sleep(60)
""")


async def test_a_cancel_that_ends_an_engine_still_starting_is_a_cancel(store, ids, tmp_path):
    app = make_app(store, engine_cmd=[sys.executable, "-c", NO_HANDLER], gpu_lock_dir=tmp_path, theme="ptxbench")
    async with app.run_test(size=SIZE) as pilot:
        live = await start_engine(pilot, ids.expert_vecadd)
        await pilot.press("x")
        assert await until(pilot, lambda: not live.running, 20)
        assert live.last_exit.returncode == -15 and live.last_exit.cancelled
        assert "engine cancelled" in log_of(live) and "stopped unexpectedly" not in log_of(live)


# -- another process writes: the views follow within 2 s -----------------------------------------


OTHER_WRITER = textwrap.dedent("""
    import sys
    from ptxbench.db.records import Evaluation, Label, Sample
    from ptxbench.db.store import open_store
    from ptxbench.db.writes import add_evaluation, add_label, add_sample
    db = open_store(sys.argv[1], create=False)
    if sys.argv[2] == "label":
        add_label(db, Label(sample_id=int(sys.argv[3]), author="the other explorer", category="wrong_result",
                            note="seen in the other window"))
    else:
        sid = add_sample(db, Sample(task_id="attn_fwd_sm90a", language="ptx", source="fixture: another process",
                                    code="// another process\\n")).id
        add_evaluation(db, Evaluation(sample_id=sid, engine_version="fixture", status="judged",
                                      category="syntax", source="fixture: another process", compiled=False))
    db.conn.close()
""")


def other_process(store, *args: str) -> None:
    subprocess.run([sys.executable, "-c", OTHER_WRITER, str(store), *args], check=True, timeout=60)


async def test_another_processs_label_and_evaluation_show_without_a_reload(app_for, store, ids):
    app = app_for()
    async with app.run_test(size=WIDE) as pilot:
        samples = await open_view(pilot, "3", SamplesScreen)
        label = lambda: next(r.label for r in samples.rows if r.id == ids.wgmma_ok)
        assert label() is None
        other_process(store, "label", str(ids.wgmma_ok))
        assert await until(pilot, lambda: label() == "wrong_result", 2.5), "the other process's label never showed"
        overview = await open_view(pilot, "1", OverviewScreen)
        assert not any(r.task_id == "attn_fwd_sm90a" for r in overview.rows)
        other_process(store, "evaluation")
        assert await until(pilot, lambda: any(r.task_id == "attn_fwd_sm90a" for r in overview.rows), 2.5)


# -- exports: the note text, into a chosen folder ------------------------------------------------


async def test_exports_carry_the_note_and_go_into_the_chosen_folder(app_for, ids, tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBENCH_EXPORT_DIR", str(tmp_path / "exports"))
    app = app_for()
    async with app.run_test(size=WIDE) as pilot:
        await open_view(pilot, "3", SamplesScreen)
        await pilot.press("E")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, ExportDialog)
        # Not the folder the explorer was started in (often a repository).
        assert dialog.query_one("#export-path").value == str(tmp_path / "exports" / "ptxbench-samples.csv")
        chosen = tmp_path / "chosen" / "triage.csv"
        dialog.query_one("#export-path").value = str(chosen)
        await pilot.press("ctrl+s")
        await settle(pilot)
        rows = {int(r["id"]): r for r in csv.DictReader(chosen.open())}
        wrong = rows[ids.wrong_result]
        assert (wrong["label"], wrong["label_note"]) == ("wrong_result", "fragment layout of the accumulator")
        assert (wrong["correct_train"], wrong["correct_heldout"]) == ("0", "0")
        never_ran = rows[ids.skipped]
        assert never_ran["verdict"] == "ok · not run" and never_ran["correct_train"] == ""  # unknown, not wrong
        # The next export offers the folder chosen last.
        await pilot.press("E")
        await settle(pilot)
        assert app.screen.query_one("#export-path").value == str(tmp_path / "chosen" / "ptxbench-samples.csv")


# -- esc after a drill, space ----------------------------------------------------------------------


async def test_esc_after_a_triage_drill_returns_to_triage(app_for):
    app = app_for()
    async with app.run_test(size=WIDE) as pilot:
        triage = await open_view(pilot, "4", TriageScreen)
        triage.query_one(DataTable).move_cursor(row=0, column=2)
        await pilot.press("enter")
        await settle(pilot)
        samples = app.screen
        assert isinstance(samples, SamplesScreen) and samples.rows
        await pilot.press("space")  # a selection first: esc unselects it, the next esc goes back
        await pilot.press("escape")
        assert samples.marked == set() and app.screen is samples
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is triage
        # Reached by its number key, the samples view has nowhere to go back to.
        await pilot.press("3")
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is samples


async def test_space_selects_and_leaves_the_cursor_where_it_is(app_for):
    app = app_for()
    async with app.run_test(size=WIDE) as pilot:
        samples = await open_view(pilot, "3", SamplesScreen)
        table = samples.query_one(RowTable)
        table.move_cursor(row=2)
        await pilot.press("space")
        await settle(pilot)
        assert table.cursor_row == 2 and samples.marked == {samples.rows[2].id}
        await pilot.press("space")
        await settle(pilot)
        assert table.cursor_row == 2 and samples.marked == set()
