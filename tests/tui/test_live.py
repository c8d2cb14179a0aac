"""Live: the engine is a real child process whose JSON-lines stream the view follows.

The child here is tests/tui/engine_replay.py: it prints an event stream in the
documented protocol and appends real evaluation rows to the store, as
`ptxbench eval --json-progress` does, and can die or wait for SIGTERM.
"""

from __future__ import annotations

import sqlite3

from conftest import SIZE, settle
from textual.widgets import DataTable

from ptxbench.services.batch_process import GpuLock, gpu_lock_path
from ptxbench.tui.messages import Reverify
from ptxbench.tui.screens.live import LiveScreen
from ptxbench.tui.screens.sample import SampleScreen


def evaluations(store, sample_id):
    conn = sqlite3.connect(store)
    try:
        return conn.execute("SELECT id, category, status, source FROM evaluations WHERE sample_id = ? ORDER BY id", (sample_id,)).fetchall()
    finally:
        conn.close()


async def confirm_static_only(pilot, *, wait: bool = True) -> None:
    """No GPU here: a start asks first, saying it adds a static judgement only; yes (and, with
    `wait`, wait for the engine to end)."""
    await settle(pilot)
    dialog = pilot.app.screen
    assert type(dialog).__name__ == "ConfirmDialog" and "adds a static judgement only" in dialog.question
    await pilot.press("enter")
    if wait:
        await settle(pilot)


def integrity(store) -> str:
    conn = sqlite3.connect(store)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


async def test_reverify_runs_the_engine_and_shows_the_new_evaluation(app_for, store, ids):
    before = evaluations(store, ids.syntax_sample)
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.post_message(Reverify([ids.syntax_sample]))
        await confirm_static_only(pilot)
        live = app.screen
        assert isinstance(live, LiveScreen)
        assert live.last_exit is not None and live.last_exit.returncode == 0 and live.last_exit.saw_done
        assert live.static_only is True
        assert "No GPU here" in str(live.query_one("#live-device").render())
        assert live.done == live.total == 1
        assert [r.sample_id for r in live.results] == [ids.syntax_sample]
        after = evaluations(store, ids.syntax_sample)
        assert after[: len(before)] == before and len(after) == len(before) + 1  # appended, nothing rewritten
        assert after[-1][0] == live.results[0].evaluation_id and after[-1][2] == "skipped: no sm_90a device"
        # Shown when done: the new row is in the history, and the complete judgement still speaks.
        await pilot.press("enter")  # the result table: open its sample
        await settle(pilot)
        sample = app.screen
        assert isinstance(sample, SampleScreen) and sample.detail.latest.id == before[-1][0]
        assert [e.id for e in sample.detail.evaluations][0] == after[-1][0]


async def test_reverify_from_a_sample_and_a_filtered_set(app_for, store, ids):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await settle(pilot)
        app.screen.query_one("#filter-model").value = "fixture-model-b"
        await settle(pilot)
        # R says how many it will start and asks; esc starts nothing.
        await pilot.press("R")
        await settle(pilot)
        dialog = app.screen
        assert type(dialog).__name__ == "ConfirmDialog"
        assert "Re-verify 2 samples?" in dialog.question
        await pilot.press("escape")
        await settle(pilot)
        assert type(app.screen).__name__ == "SamplesScreen"
        await pilot.press("R")
        await settle(pilot)
        await pilot.press("enter")  # on "Start 2"
        await confirm_static_only(pilot)
        live = app.screen
        assert isinstance(live, LiveScreen)
        assert sorted(r.sample_id for r in live.results) == [7, 8]
        results = live.query_one("#live-results", DataTable)
        assert results.row_count == 2


async def test_engine_dying_mid_run_shows_an_error_and_keeps_the_store(app_for, store, ids):
    before = evaluations(store, ids.expert_vecadd)
    app = app_for("--die-after", "4")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.post_message(Reverify([ids.expert_vecadd]))
        await confirm_static_only(pilot)
        live = app.screen
        assert live.last_exit.returncode == 3 and not live.last_exit.saw_done
        assert "dying on purpose" in live.last_exit.stderr_tail
        log = "\n".join(str(line) for line in live.query_one("#live-log").lines)
        assert "stopped unexpectedly" in log
        assert not live.running
    assert evaluations(store, ids.expert_vecadd) == before
    assert integrity(store) == "ok"


async def test_x_cancels_with_sigterm_and_the_engine_stops_cleanly(app_for, store, ids):
    app = app_for("--wait-for-term")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("6")
        live = app.screen
        live.enqueue([ids.expert_vecadd], start=True)
        await confirm_static_only(pilot, wait=False)
        # Wait (on state, bounded) until the engine has announced its first sample.
        for _ in range(500):
            await pilot.pause()
            if "sample" in str(live.query_one("#live-stage").render()):
                break
        assert live.running
        await pilot.press("x")
        await settle(pilot)
        assert live.last_exit.cancelled and live.last_exit.saw_done and live.last_exit.returncode == 0
        assert not live.running
    assert integrity(store) == "ok"


async def test_garbage_lines_are_logged_not_fatal(app_for, ids):
    app = app_for("--garbage")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.post_message(Reverify([ids.expert_vecadd]))
        await confirm_static_only(pilot)
        live = app.screen
        log = "\n".join(str(line) for line in live.query_one("#live-log").lines)
        assert "engine printed: this is not an event" in log and live.last_exit.saw_done


async def test_one_engine_per_gpu(app_for, tmp_path, ids):
    held = GpuLock(gpu_lock_path(tmp_path))
    assert held.acquire()
    try:
        app = app_for()
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.post_message(Reverify([ids.expert_vecadd]))
            await confirm_static_only(pilot)
            live = app.screen
            log = "\n".join(str(line) for line in live.query_one("#live-log").lines)
            assert "another engine holds this GPU" in log and live.results == []
    finally:
        held.release()


async def test_a_missing_engine_is_reported(store, tmp_path, ids):
    from ptxbench.tui.app import make_app

    app = make_app(store, engine_cmd=[str(tmp_path / "no-such-engine")], gpu_lock_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.post_message(Reverify([ids.expert_vecadd]))
        await confirm_static_only(pilot)
        log = "\n".join(str(line) for line in app.screen.query_one("#live-log").lines)
        assert "cannot start the engine" in log and not app.screen.running


async def test_the_real_engine_judges_a_sample_statically(store, tmp_path, ids):
    """`ptxbench eval` itself as the child process: no GPU here, so it runs the static stages."""
    from ptxbench.tui.app import make_app

    before = evaluations(store, ids.syntax_sample)
    app = make_app(store, gpu_lock_dir=tmp_path)  # the default engine command
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.post_message(Reverify([ids.syntax_sample]))
        await confirm_static_only(pilot)
        live = app.screen
        assert live.last_exit.returncode == 0 and live.last_exit.saw_done, live.last_exit
        assert [(r.sample_id, r.category) for r in live.results] == [(ids.syntax_sample, "syntax")]
        await pilot.press("enter")  # the result table: open its sample
        await settle(pilot)
        sample = app.screen
        assert sample.detail.latest.source == "ptxbench eval"
        evidence = str(sample.query_one("#sample-evidence").render())
        assert "Parsing error near" in evidence and "at PTX line 37" in evidence
    after = evaluations(store, ids.syntax_sample)
    assert after[:-1] == before and after[-1][1] == "syntax"
