"""The triage moves of the samples view, and verdicts that say the whole truth.

The fixture store has a sample that never ran (`ids.skipped`: `skipped: no sm_100a
device`); `heldout_store` adds one correct on the train sizes and wrong at a
held-out size, written through the store's own functions."""

from __future__ import annotations

import csv
import json
import sqlite3
import stat
import sys
from pathlib import Path

import pytest
from conftest import open_view, replay_cmd, settle

from ptxbench.db import browse, triage
from ptxbench.db import browse_summary as summary
from ptxbench.db.records import Evaluation, Measurement, Sample
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_evaluation, add_sample
from ptxbench.tui.app import make_app
from ptxbench.tui.screens.bulk_label import BulkLabelDialog
from ptxbench.tui.screens.pickers import ExportDialog, SortDialog
from ptxbench.tui.screens.sample import SampleScreen
from ptxbench.tui.screens.samples import SamplesScreen
from ptxbench.tui.screens.triage import TriageScreen
from ptxbench.tui.widgets.code_view import PtxView
from ptxbench.tui.widgets.common import FilterPanel
from ptxbench.tui.widgets.row_table import RowTable

WIDE, NARROW = (160, 48), (100, 30)


@pytest.fixture
def heldout_store(store: Path) -> tuple[Path, int]:
    db = open_store(store)
    try:
        code = "// fixture: correct on train sizes, wrong at a held-out size\n.version 8.0\n.target sm_90a\n"
        sid = add_sample(db, Sample(task_id="vector_add_smoke", language="ptx", source="fixture: held-out", code=code)).id
        add_evaluation(db, Evaluation(
            sample_id=sid, engine_version="fixture", status="judged", category="ok", source="fixture: held-out",
            compiled=True, correct=True, correct_heldout=False, uses_ptx=True, uses_sass=True, speedup=1.01, time_ms=0.13,
            evidence={"first_failure": {"category": "unwritten_output", "split": "heldout",
                                        "message": "output elements never written: Z[16777216:16777219]"}},
        ), [Measurement(split="train", sizes={"N": 1 << 24}, category="ok"),
            Measurement(split="heldout", sizes={"N": (1 << 24) + 3}, category="unwritten_output")])
    finally:
        db.conn.close()
    return store, sid


@pytest.fixture
def app_on(heldout_store, tmp_path):
    def make(**kw):
        return make_app(heldout_store[0], engine_cmd=replay_cmd(), gpu_lock_dir=tmp_path, theme="ptxbench", **kw)

    return make


async def samples_view(pilot) -> SamplesScreen:
    return await open_view(pilot, "3", SamplesScreen)


def row_of(screen: SamplesScreen, sample_id: int) -> dict[str, str]:
    table = screen.query_one(RowTable)
    index = next(i for i, r in enumerate(screen.rows) if r.id == sample_id)
    return dict(zip(table.labels, table.get_row_at(index)))


def put_cursor(screen: SamplesScreen, sample_id: int) -> None:
    screen.query_one(RowTable).move_cursor(row=next(i for i, r in enumerate(screen.rows) if r.id == sample_id))


# -- verdicts that say the whole truth (point 2) ------------------------------------------


async def test_a_heldout_failure_and_a_kernel_that_never_ran_are_said_everywhere(app_on, heldout_store, ids):
    _, heldout = heldout_store
    app = app_on()
    async with app.run_test(size=WIDE) as pilot:
        screen = await samples_view(pilot)
        assert row_of(screen, heldout)["Category"] == "ok · held-out ✗"
        assert row_of(screen, ids.skipped)["Category"] == "ok · not run"
        assert row_of(screen, ids.expert_vecadd)["Category"] == "ok"
        assert "held-out ✗: correct on the train sizes" in str(screen.query_one("#samples-legend").render())
        # The sample's header, with the held-out size it fails at.
        put_cursor(screen, heldout)
        await pilot.press("enter")
        await settle(pilot)
        head = str(app.screen.query_one("#sample-head").render())
        assert "ok · held-out ✗" in head and "unwritten_output at N=16777219" in head and "not run:" in head
        await pilot.press("escape")
        put_cursor(screen, ids.skipped)
        await pilot.press("enter")
        await settle(pilot)
        head = str(app.screen.query_one("#sample-head").render())
        assert "ok · not run" in head and "skipped: no sm_100a device" in head and "unknown" in head
        await pilot.press("escape")
        # Triage: both are rows of their own, counted even while ok is hidden.
        await pilot.press("4")
        await settle(pilot)
        triage_view = app.screen
        assert isinstance(triage_view, TriageScreen) and not triage_view.include_ok
        rows = {(c, n): total for c, n, total, _ in triage_view.table_data.rows}
        assert rows[("ok", "heldout")] == 1 and rows[("ok", "not_run")] == 1 and ("ok", "") not in rows
        names = [str(triage_view.query_one("#triage-table").get_row_at(i)[0]) for i in range(len(rows))]
        assert "ok · held-out ✗" in names and "ok · not run" in names
        # Enter on the held-out row lists exactly that sample.
        index = list(rows).index(("ok", "heldout"))
        triage_view.query_one("#triage-table").move_cursor(row=index, column=2)
        await pilot.press("enter")
        await settle(pilot)
        assert [r.id for r in app.screen.rows] == [heldout]


def test_uses_requested_agrees_per_sample_and_per_trajectory(heldout_store):
    """A kernel that did not assemble does not use what was asked, in both counts
    (its PTX may name the families: the mutation corpus's assembler failures do)."""
    from ptxbench.db.metrics import compute_metrics
    from ptxbench.db.writes import get_or_create_model

    store, _ = heldout_store
    db = open_store(store)
    try:
        model = get_or_create_model(db, "fixture-uses", kind="import", source="fixture: uses").id
        for category, compiled, uses_sass in (("syntax", False, None), ("ok", True, True)):
            sid = add_sample(db, Sample(task_id="vector_add_smoke", language="ptx", source="fixture: uses",
                                        code=f"// {category}\n", model_id=model)).id
            add_evaluation(db, Evaluation(sample_id=sid, engine_version="fixture", status="judged", category=category,
                                          source="fixture: uses", compiled=compiled, correct=compiled or None,
                                          uses_ptx=True, uses_sass=uses_sass), [])
        per_trajectory = {(r.model, r.task): r.uses_rate for r in compute_metrics(db, group_by=("task", "model"), include_reference=True)}
        cells = summary.cells(db.conn)
    finally:
        db.conn.close()
    row = next(r for r in summary.overview(cells, by_level=False) if r.model == "fixture-uses")
    assert row.uses == per_trajectory[("fixture-uses", "vector_add_smoke")] == 0.5


async def test_every_rate_says_what_it_counts(app_on):
    app = app_on()
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert "per sample" in str(screen.query_one("#overview-status").render())
        note = str(screen.query_one("#overview-note").render())
        assert "Rates per sample" in note and "Uses req." in note and "not assembled: no" in note
        await pilot.press("t")
        await settle(pilot)
        assert "per trajectory" in str(screen.query_one("#overview-status").render())
        assert "Rates per trajectory" in str(screen.query_one("#overview-note").render())


# -- a layout that fits (point 3) ---------------------------------------------------------


async def test_narrow_samples_fold_filters_and_columns_never_hide_them(app_on):
    app = app_on()
    async with app.run_test(size=NARROW) as pilot:
        screen = await samples_view(pilot)
        panel = screen.query_one(FilterPanel)
        assert panel.folded and not panel.display or panel.has_class("-folded")
        # Folded filters take no focus: Tab never lands in an invisible selector.
        assert not any(type(w).__name__ in ("Select", "Input") for w in screen.focus_chain)
        table = screen.query_one(RowTable)
        shown = {table.labels[i] for i in table.shown}
        assert {"Id", "Task", "Category", "Speedup"} <= shown and "Source" not in shown
        assert "Source" in table.detail_text()  # the folded cells of the cursor row
        await pilot.press("slash")
        await settle(pilot)
        assert panel.has_class("-open") and app.focused is screen.query_one("#samples-search")
        assert any(type(w).__name__ == "Select" for w in screen.focus_chain)
        await pilot.press("escape")
        await settle(pilot)
        assert not panel.has_class("-open") and app.focused is table
    async with app_on().run_test(size=WIDE) as pilot:
        screen = await samples_view(pilot)
        assert not screen.query_one(FilterPanel).has_class("-folded")


async def test_narrow_overview_and_fixit_keep_their_important_columns(app_on):
    app = app_on()
    async with app.run_test(size=NARROW) as pilot:
        await settle(pilot)
        table = app.screen.query_one(RowTable)
        shown = {table.labels[i] for i in table.shown}
        assert {"Model", "Task", "Correct", "fast₁.₀", "Best", "Geomean"} <= shown
        await pilot.press("8")
        await settle(pilot)
        fixit = app.screen
        table = fixit.query_one(RowTable)
        shown = {table.labels[i] for i in table.shown}
        assert {"Failed", "Task", "Category", "Kind", "Changes", "Verified"} <= shown
        stats = fixit.query_one("#fixit-stats-pane")
        assert not stats.display or stats.styles.display == "none"
        await pilot.press("S")
        await settle(pilot)
        assert stats.styles.display == "block"


# -- the triage moves (point 4) -----------------------------------------------------------


async def test_sort_by_any_column_in_sql(app_on, heldout_store):
    app = app_on()
    async with app.run_test(size=WIDE) as pilot:
        screen = await samples_view(pilot)
        await pilot.press("o")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, SortDialog) and "Speedup" in dialog.columns
        dialog.dismiss("Speedup")
        await settle(pilot)
        speeds = [r.speedup for r in screen.rows]
        known = [s for s in speeds if s is not None]
        assert known == sorted(known, reverse=True) and speeds[: len(known)] == known  # empty last
        assert "Speedup ▼" in screen.query_one(RowTable)._title(screen.query_one(RowTable).labels.index("Speedup"))
        screen.set_sort("Speedup")  # the same column again: the other way
        await settle(pilot)
        known_up = [r.speedup for r in screen.rows if r.speedup is not None]
        assert known_up == sorted(known_up) and screen.rows[-1].speedup is None
        # A header click sorts too.
        table = screen.query_one(RowTable)
        table.post_message(RowTable.HeaderClicked(table, "Task"))
        await settle(pilot)
        assert screen.sort == triage.Sort("Task", True)
        assert [r.task_id for r in screen.rows] == sorted((r.task_id for r in screen.rows), reverse=True)


async def test_error_snippets_beside_the_verdict(app_on, ids):
    app = app_on()
    async with app.run_test(size=WIDE) as pilot:
        screen = await samples_view(pilot)
        assert row_of(screen, ids.syntax_sample)["Error"] == "Parsing error near '%f2': syntax error"
        assert row_of(screen, ids.wrong_result)["Error"] == ""  # no message stored: the worst element is in Evidence
        assert row_of(screen, ids.expert_vecadd)["Error"] == ""


def test_snippets_name_the_assembler_line_and_the_worst_element():
    assert triage.snippet("Unknown symbol '%rd99'", 62, None, None) == "L62: Unknown symbol '%rd99'"
    message = "Z: rel_l2 0.708 > 1e-06 (seed 1); worst element [318888]: got -6.5, expected 3.7"
    assert triage.snippet(None, None, message, None) == "[318888]: got -6.5, expected 3.7"
    # SQLite's JSON refuses Infinity; Python's parse answers instead.
    assert triage._evidence_parts('{"first_failure": {"message": "x"}, "v": Infinity}')[2] == "x"


async def test_n_and_p_walk_the_unlabelled_failures(app_on, ids):
    app = app_on()
    async with app.run_test(size=WIDE) as pilot:
        screen = await samples_view(pilot)
        table = screen.query_one(RowTable)
        table.move_cursor(row=0)
        expected = [r.id for r in screen.rows[1:] if (r.category != "ok" or r.note == "heldout") and not r.labelled]
        seen = []
        for _ in expected:
            await pilot.press("n")
            await settle(pilot)
            seen.append(screen.rows[table.cursor_row].id)
        assert seen == expected and ids.wrong_result not in seen  # the labelled failure is skipped
        await pilot.press("p")
        await settle(pilot)
        assert screen.rows[table.cursor_row].id == expected[-2]
        # From a sample's own screen, n opens the next one in its place.
        put_cursor(screen, expected[0])
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)
        assert isinstance(app.screen, SampleScreen) and app.screen.sample_id == expected[1]
        assert len(app.screen_stack) == 2  # replaced, not stacked


async def test_n_beyond_the_page_asks_the_store(app_on, ids, monkeypatch):
    import ptxbench.tui.screens.samples as samples_mod

    monkeypatch.setattr(samples_mod, "PAGE_SIZE", 2)
    app = app_on()
    async with app.run_test(size=WIDE) as pilot:
        screen = await samples_view(pilot)
        await pilot.press("n")
        await settle(pilot)
        first = screen.rows[screen.query_one(RowTable).cursor_row]
        assert samples_mod.needs_a_look(first) and screen.page_offset >= 0


async def test_select_several_rows_and_label_them_at_once(app_on, heldout_store, ids):
    store, heldout = heldout_store
    app = app_on()
    async with app.run_test(size=WIDE) as pilot:
        screen = await samples_view(pilot)
        for sid in (ids.syntax_sample, heldout, ids.skipped):
            put_cursor(screen, sid)
            await pilot.press("space")
        assert screen.marked == {ids.syntax_sample, heldout, ids.skipped}
        assert "3 selected" in str(screen.query_one("#samples-status").render())
        await pilot.press("y")
        assert app.clipboard == " ".join(str(i) for i in sorted(screen.marked, reverse=True))
        await pilot.press("l")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, BulkLabelDialog) and "Label 3 samples" in str(dialog.query_one("#label-dialog > Label").render())
        await pilot.press(*"triaged together", "ctrl+s")
        await settle(pilot)
        await pilot.press("escape")  # unselect
        assert screen.marked == set()
    conn = sqlite3.connect(store)
    labelled = {r[0] for r in conn.execute("SELECT sample_id FROM labels WHERE note = 'triaged together'")}
    assert labelled == {ids.syntax_sample, heldout, ids.skipped}
    # The automatic categories are untouched.
    assert conn.execute("SELECT category FROM evaluations WHERE sample_id = ?", (ids.syntax_sample,)).fetchone() == ("syntax",)


@pytest.mark.parametrize("fmt", ["csv", "json"])
async def test_export_the_filtered_sorted_table(app_on, tmp_path, fmt):
    out = tmp_path / f"samples.{fmt}"
    app = app_on()
    async with app.run_test(size=WIDE) as pilot:
        screen = await samples_view(pilot)
        screen.query_one("#filter-task_id").value = "gemm_bf16_sm90a"
        await settle(pilot)
        screen.set_sort("Speedup")
        await settle(pilot)
        await pilot.press("E")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, ExportDialog)
        if fmt == "json":
            dialog.query_one("#export-json").value = True
            await settle(pilot)
        dialog.query_one("#export-path").value = str(out)
        await pilot.press("ctrl+s")
        await settle(pilot)
        expected = [r.id for r in screen.rows]
    if fmt == "csv":
        rows = list(csv.DictReader(out.open()))
        assert [int(r["id"]) for r in rows] == expected and {r["task_id"] for r in rows} == {"gemm_bf16_sm90a"}
    else:
        rows = json.loads(out.read_text())
        assert [r["id"] for r in rows] == expected and "snippet" in rows[0] and "label_note" in rows[0]


@pytest.mark.parametrize("target", ["store", "link", "wal"])
async def test_export_over_the_store_is_refused_and_the_store_is_left_as_it_was(app_on, heldout_store, tmp_path, target):
    store = heldout_store[0]
    path = {"store": store, "link": tmp_path / "samples.csv", "wal": store.with_name(store.name + "-wal")}[target]
    if target == "link":
        path.symlink_to(store)
    before = store.read_bytes()
    app = app_on()
    async with app.run_test(size=WIDE) as pilot:
        await samples_view(pilot)
        await pilot.press("E")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, ExportDialog)
        dialog.query_one("#export-path").value = str(path)
        await pilot.press("ctrl+s")
        await settle(pilot)
        said = [str(n.message) for n in app._notifications]
        assert any("will not write" in m and "store" in m for m in said), said
    assert store.read_bytes() == before
    assert not list(tmp_path.glob(".*.part")) and not list(store.parent.glob(".*.part"))


async def test_copy_a_kernel_and_open_it_read_only_in_the_editor(app_on, ids, tmp_path, monkeypatch):
    seen = tmp_path / "seen"
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import os, shutil, stat, sys\n"
        f"out = {str(seen)!r}\nos.makedirs(out, exist_ok=True)\n"
        "for p in sys.argv[1:]:\n"
        "    shutil.copy(p, out)\n"
        "    open(os.path.join(out, os.path.basename(p) + '.mode'), 'w').write(oct(os.stat(p).st_mode & 0o777))\n"
        "    open(os.path.join(out, 'folder'), 'w').write(os.path.dirname(p))\n")
    monkeypatch.setenv("EDITOR", f"{sys.executable} {editor}")
    monkeypatch.delenv("VISUAL", raising=False)
    app = app_on()
    async with app.run_test(size=WIDE) as pilot:
        screen = await samples_view(pilot)
        put_cursor(screen, ids.syntax_sample)
        await pilot.press("Y")
        await settle(pilot)
        code = sqlite3.connect(screen.ptx.db_path).execute(
            "SELECT COALESCE(e.ptx, s.code) FROM samples s JOIN evaluations e ON e.sample_id = s.id WHERE s.id = ?",
            (ids.syntax_sample,)).fetchone()[0]
        assert app.clipboard == code
        await pilot.press("e")
        await settle(pilot)
    copy = seen / f"sample-{ids.syntax_sample}.ptx"
    assert copy.read_text() == code
    mode = int((seen / f"{copy.name}.mode").read_text(), 8)
    assert not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)  # read-only: the store is never edited
    assert not Path((seen / "folder").read_text()).exists()  # the copies are gone once the editor returns


async def test_a_search_shows_its_matching_line_and_opens_there(app_on, ids):
    app = app_on()
    async with app.run_test(size=WIDE) as pilot:
        screen = await samples_view(pilot)
        await pilot.press("slash", *"wgmma.mma_async", "enter")
        await settle(pilot)
        table = screen.query_one(RowTable)
        assert "Match" in table.labels and screen.rows
        index = next(i for i, r in enumerate(screen.rows) if r.id == ids.wgmma_ok)
        match = dict(zip(table.labels, table.get_row_at(index)))["Match"]
        line = screen.rows[index].match_line
        assert match.startswith(f"L{line}: ") and "wgmma.mma_async" in match
        table.move_cursor(row=index)
        await pilot.press("enter")
        await settle(pilot)
        sample = app.screen
        assert isinstance(sample, SampleScreen) and sample.line == line
        ptx = sample.query_one("#sample-ptx", PtxView)
        assert ptx.cursor_location[0] == line - 1 and "wgmma.mma_async" in ptx.selected_text


# -- the queries behind them ---------------------------------------------------------------


def test_triage_queries(heldout_store, ids):
    store, heldout = heldout_store
    conn = browse.connect(store)
    everything = browse.SampleFilter()
    # Sorted pages agree with the whole order, page by page.
    whole = triage.sorted_ids(conn, everything, triage.Sort("Speedup", True), 0, 1000)
    assert triage.sorted_ids(conn, everything, triage.Sort("Speedup", True), 2, 3) == whole[2:5]
    # The order read once gives both directions exactly as SQL sorts them.
    for column in ("Speedup", "Category", "Label", "Task"):
        order = triage.ordered(conn, everything, column)
        for descending in (True, False):
            assert order.ids(descending) == triage.sorted_ids(conn, everything, triage.Sort(column, descending), 0, 1000)
    # Next unlabelled failure and where a sample stands.
    first = triage.next_unlabelled(conn, everything, triage.Sort(), -1)
    assert first is not None and first[1] == heldout  # the newest sample
    assert triage.position_of(conn, everything, triage.Sort(), heldout) == 0
    assert triage.next_unlabelled(conn, everything, triage.Sort(), 0, backwards=True) is None
    # Counts by label, with the unlabelled failures.
    labels = {label: total for label, _, total, _ in triage.label_triage(conn, "model").rows}
    assert labels["wrong_result"] == 1 and labels[triage.UNLABELLED] >= 3
    # The verdict filters a triage drill needs.
    assert [r.id for r in triage.sample_page(conn, everything.with_(note="heldout")).rows] == [heldout]
    assert [r.id for r in triage.sample_page(conn, everything.with_(category="not run")).rows] == [ids.skipped]
    assert [r.id for r in triage.sample_page(conn, everything.with_(label="wrong_result")).rows] == [ids.wrong_result]
    # Exports read every row, in order.
    assert [line.id for line in triage.iter_lines(conn, everything, triage.Sort("Speedup", True), chunk=3)] == whole


def test_a_cleared_label_leaves_its_sample_unlabelled(heldout_store, ids):
    """A label cleared (no category, no note, no Fixit mark) stays as history, but the sample counts as
    a failure no one has labelled: in the next-unlabelled walk, the triage counts and the labelled filter."""
    from ptxbench.db.records import Label
    from ptxbench.db.store import open_store
    from ptxbench.db.writes import add_label

    store, _ = heldout_store
    db = open_store(store)
    add_label(db, Label(sample_id=ids.wrong_result, author="t", category=None, note="", fixit_candidate=False))
    db.conn.close()
    conn = browse.connect(store)
    everything = browse.SampleFilter()
    labels = {label: total for label, _, total, _ in triage.label_triage(conn, "model").rows}
    assert "wrong_result" not in labels
    walked, at = [], -1
    while (found := triage.next_unlabelled(conn, everything, triage.Sort(), at)) is not None:
        at, sid = found[0], found[1]
        walked.append(sid)
    assert ids.wrong_result in walked
    labelled = [r.id for r in triage.sample_page(conn, everything.with_(labelled_only=True)).rows]
    assert ids.wrong_result not in labelled
