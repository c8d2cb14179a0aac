"""The Fixit view (8): the store's fix pairs, their filters, the diff and the explanation of a
pair, the set's statistics; and the db/fixit queries it reads through.

The fixture store holds two pairs; this file's `fixit_store` adds two more through
the store's own write function: a later turn that fixes a wrong result (with two
explanations) and a pair whose fixed half fails, so it does not count."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SIZE, replay_cmd, settle

from ptxbench.db import browse
from ptxbench.db import fixit as fixit_db
from ptxbench.db.records import Fix
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_fix, add_sample
from ptxbench.tui.app import make_app
from ptxbench.tui.screens import fixit as fixit_screen
from ptxbench.tui.screens.diff import DiffScreen
from ptxbench.tui.screens.fixit import ExplanationScreen, FixitScreen
from ptxbench.tui.widgets.common import FilterBar
from ptxbench.tui.widgets.diff_view import DiffView
from ptxbench.tui.widgets.row_table import RowTable

MODEL_EXPLANATION = (
    "The accumulator fragment's last coordinate was 1 where the layout needs 0,\n"
    "so every thread wrote its partial sums one column over.\n"
    "\n"
    "The later turn puts the fragment back on the wgmma accumulator layout; the\n"
    "result then matches the reference at every train size."
)


@pytest.fixture
def fixit_store(store: Path, ids) -> Path:
    db = open_store(store)
    try:
        add_fix(db, Fix(failed_sample_id=ids.wrong_result, fixed_sample_id=ids.turn2,
                        explanation="The fix changes one operand of the fragment layout.",
                        explanation_source="derived from diff", source="fixit pairs: later_turn"))
        add_fix(db, Fix(failed_sample_id=ids.wrong_result, fixed_sample_id=ids.turn2, explanation=MODEL_EXPLANATION,
                        explanation_source="model:fixture-reviewer", source="fixit explain"))
        add_fix(db, Fix(failed_sample_id=ids.wgmma_missing, fixed_sample_id=ids.wrong_result,
                        explanation="A fix that is itself wrong: listed, never counted.",
                        explanation_source="written for the fixture", source="fixture: tests/tui/test_fixit_view.py"))
    finally:
        db.conn.close()
    return store


@pytest.fixture
def fixit_app(fixit_store, tmp_path):
    def make(**kw):
        return make_app(fixit_store, engine_cmd=replay_cmd(), gpu_lock_dir=tmp_path, theme="ptxbench", **kw)

    return make


def pairs_of(screen: FixitScreen) -> set[tuple[int, int]]:
    return {(r.failed_sample_id, r.fixed_sample_id) for r in screen.rows}


async def open_fixit(pilot) -> FixitScreen:
    await settle(pilot)
    await pilot.press("8")
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, FixitScreen)
    return screen


def move_to(screen: FixitScreen, failed: int, fixed: int) -> None:
    index = next(i for i, r in enumerate(screen.rows) if (r.failed_sample_id, r.fixed_sample_id) == (failed, fixed))
    screen.query_one("#fixit-table", RowTable).move_cursor(row=index)


# -- the view ---------------------------------------------------------------------------


async def test_lists_every_pair_with_its_statistics(fixit_app, ids):
    app = fixit_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_fixit(pilot)
        assert pairs_of(screen) == {
            (ids.syntax_sample, ids.expert_vecadd), (ids.wgmma_missing, ids.wgmma_ok),
            (ids.wrong_result, ids.turn2), (ids.wgmma_missing, ids.wrong_result),
        }
        assert screen.total == 4 and screen.query_one(RowTable).row_count == 4
        by_pair = {(r.failed_sample_id, r.fixed_sample_id): r for r in screen.rows}
        later = by_pair[(ids.wrong_result, ids.turn2)]
        assert (later.kind, later.category, later.verification, later.counts) == ("later_turn", "wrong_result", "gpu", True)
        assert later.explanation_source == "model:fixture-reviewer" and later.explanations == 2
        bad_fix = by_pair[(ids.wgmma_missing, ids.wrong_result)]
        assert (bad_fix.verification, bad_fix.counts) == ("failed", False)
        assert by_pair[(ids.syntax_sample, ids.expert_vecadd)].kind == "mutation"
        # The table shows the same rows: failed, fixed, task, category, kind, verified, counts, explanation source.
        cells = {tuple(screen.query_one(RowTable).get_row_at(i)[:9]) for i in range(4)}
        assert (str(ids.wrong_result), str(ids.turn2), "gemm_bf16_sm90a", "wrong_result", "later_turn", "code", "gpu",
                "yes", "model:fixture-reviewer") in cells
        # The statistics panel.
        assert screen.stats is not None and screen.lengths is not None
        assert (screen.stats["pairs"], screen.stats["verified"], screen.stats["unverified"]) == (4, 3, 1)
        assert screen.stats["per_task"] == {"gemm_bf16_sm90a": 2, "vector_add_smoke": 1}
        panel = str(screen.query_one("#fixit-stats").render())
        for text in ("4 pairs", "3 count", "per category", "required_missing_ptx", "per task", "per arch",
                     "lengths", "failed lines", "last export", "none yet"):
            assert text in panel, text
        # The selectors offer the values of every stored pair, counting or not.
        options = screen.query_one("#filter-kind")._options
        assert {v for _, v in options if isinstance(v, str)} == {"expert", "later_turn", "mutation", "same_model"}


async def test_filters_narrow_the_pairs(fixit_app, ids):
    app = fixit_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_fixit(pilot)
        screen.query_one(FilterBar).query_one("#filter-task_id").value = "gemm_bf16_sm90a"
        await settle(pilot)
        assert screen.filter.task_id == "gemm_bf16_sm90a"
        assert pairs_of(screen) == {(ids.wgmma_missing, ids.wgmma_ok), (ids.wrong_result, ids.turn2),
                                    (ids.wgmma_missing, ids.wrong_result)}
        await pilot.press("v")  # verified only: the pair whose fix fails drops out
        await settle(pilot)
        assert screen.filter.verified_only and screen.total == 2
        assert (ids.wgmma_missing, ids.wrong_result) not in pairs_of(screen)
        assert "verified only" in str(screen.query_one("#fixit-status").render())
        screen.query_one(FilterBar).query_one("#filter-category").value = "wrong_result"
        await settle(pilot)
        assert pairs_of(screen) == {(ids.wrong_result, ids.turn2)}
        await pilot.press("c")
        await settle(pilot)
        assert screen.filter == fixit_screen.PairFilter() and screen.total == 4
        assert screen.query_one(FilterBar).values() == {"task_id": "", "category": "", "kind": ""}
        screen.query_one(FilterBar).query_one("#filter-kind").value = "mutation"
        await settle(pilot)
        assert pairs_of(screen) == {(ids.syntax_sample, ids.expert_vecadd)}


async def test_enter_diffs_the_failed_sample_with_its_fix(fixit_app, ids):
    app = fixit_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_fixit(pilot)
        move_to(screen, ids.wrong_result, ids.turn2)
        await pilot.press("enter")
        await settle(pilot)
        diff = app.screen
        assert isinstance(diff, DiffScreen)
        assert (diff.left, diff.right) == (ids.wrong_result, ids.turn2) and diff.options.target == "ptx"
        assert diff.titles[0].startswith(f"#{ids.wrong_result} ") and diff.titles[1].startswith(f"#{ids.turn2} ")
        # The one changed line of the later turn: the fragment coordinate.
        changed = [r for r in diff.query_one(DiffView).rows if r.kind != "equal" and r.kind != "skip"]
        assert changed and all("1, 1, 1, 0, 1" in r.left and "1, 1, 1, 0, 0" in r.right for r in changed)
        await pilot.press("escape")
        await settle(pilot)
        # `d` diffs too, and the pair is the one under the cursor, not the failed sample's first fix.
        move_to(screen, ids.wgmma_missing, ids.wrong_result)
        await pilot.press("d")
        await settle(pilot)
        assert (app.screen.left, app.screen.right) == (ids.wgmma_missing, ids.wrong_result)


async def test_i_shows_the_explanation_in_full(fixit_app, ids):
    app = fixit_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_fixit(pilot)
        move_to(screen, ids.wrong_result, ids.turn2)
        await settle(pilot)
        # The preview under the table starts the explanation; `i` shows all of it.
        assert "accumulator fragment" in str(screen.query_one("#fixit-preview").render())
        await pilot.press("i")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, ExplanationScreen)
        text = dialog.query_one("#fixit-explanation-text").render()
        assert str(text) == MODEL_EXPLANATION
        assert "model:fixture-reviewer" in str(dialog.query_one(".dim").render())
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is screen


async def test_pages_and_keys_in_footer_help_and_palette(fixit_app, ids, monkeypatch):
    from ptxbench.tui.commands import BindingCommands
    from ptxbench.tui.widgets.key_bar import KeyBar

    monkeypatch.setattr(fixit_screen, "PAGE_SIZE", 3)
    app = fixit_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_fixit(pilot)
        first = [r.fix_id for r in screen.rows]
        assert len(first) == 3 and screen.total == 4
        await pilot.press("greater_than_sign")
        await settle(pilot)
        assert screen.page_offset == 3 and len(screen.rows) == 1 and screen.rows[0].fix_id not in first
        assert "pairs 4–4 of 4" in str(screen.query_one("#fixit-status").render())
        await pilot.press("less_than_sign")
        await settle(pilot)
        assert [r.fix_id for r in screen.rows] == first
        footer = dict((d, k) for k, d in screen.query_one(KeyBar).entries())
        assert footer["Views"] == "12345678"
        assert {"Diff", "Explanation", "Verified only", "Clear"} <= set(footer)
        offered = {name for name, _, _ in BindingCommands(screen)._commands()}
        assert {"Fixit", "Diff", "Explanation", "Verified only", "Next page", "Clear"} <= offered
        await pilot.press("question_mark")
        await settle(pilot)
        body = str(app.screen.query_one("#help-body").render())
        assert "Verified only" in body and "explanation in full" in body


async def test_keymap_rebinds_the_view_and_its_keys(fixit_app, ids):
    app = fixit_app(keymap={"app.fixit": "f8", "fixit.explain": "X"})
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f8")
        await settle(pilot)
        assert isinstance(app.screen, FixitScreen)
        await pilot.press("X")
        await settle(pilot)
        assert isinstance(app.screen, ExplanationScreen)


async def test_a_new_pair_shows_after_a_reload(fixit_app, fixit_store, ids):
    app = fixit_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_fixit(pilot)
        db = open_store(fixit_store)
        try:
            add_fix(db, Fix(failed_sample_id=ids.syntax_sample, fixed_sample_id=ids.turn2, explanation="x",
                            explanation_source="written for the fixture", source="fixture: reload"))
        finally:
            db.conn.close()
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert screen.total == 5 and screen.stats["pairs"] == 5


# -- the queries ------------------------------------------------------------------------


def test_pair_page_and_total_from_one_read(fixit_store, ids):
    conn = browse.connect(fixit_store, cached=False)
    everything = fixit_db.fixit_pairs(conn)
    rows, total = fixit_db.fixit_pair_page(conn, limit=2, offset=1)
    assert total == 4 and rows == everything[1:3]
    rows, total = fixit_db.fixit_pair_page(conn, task_id="gemm_bf16_sm90a", verified_only=True)
    assert total == 2 and {r.fixed_sample_id for r in rows} == {ids.wgmma_ok, ids.turn2}
    assert fixit_db.fixit_pair_page(conn, task_id="no such task") == ([], 0)
    facets = fixit_db.fixit_facets(conn)
    assert facets.tasks == ["gemm_bf16_sm90a", "vector_add_smoke"]
    assert facets.categories == ["required_missing_ptx", "syntax", "wrong_result"]


def test_lengths_count_lines_as_splitlines_does(fixit_store):
    conn = browse.connect(fixit_store, cached=False)
    lengths = fixit_db.fixit_lengths(conn)
    pairs = conn.execute("SELECT DISTINCT failed_sample_id, fixed_sample_id FROM fixes").fetchall()
    code = dict(conn.execute("SELECT id, code FROM samples"))
    failed = sorted(len(code[a].splitlines()) for a, _ in pairs)
    fixed = sorted(len(code[b].splitlines()) for _, b in pairs)
    assert lengths["failed_lines"]["n"] == 4
    assert (lengths["failed_lines"]["min"], lengths["failed_lines"]["max"]) == (failed[0], failed[-1])
    assert (lengths["fixed_lines"]["min"], lengths["fixed_lines"]["max"]) == (fixed[0], fixed[-1])
    assert lengths["explanation_chars"]["max"] == len(MODEL_EXPLANATION)
    assert lengths["explanation_chars"]["n"] == 5  # every explanation row, the second one of a pair too


def test_changes_tell_the_code_from_the_manifest(fixit_store, ids):
    from ptxbench.db.records import Sample

    db = open_store(fixit_store)
    try:
        code = db.conn.execute("SELECT code FROM samples WHERE id = ?", (ids.expert_vecadd,)).fetchone()[0]
        launch = {"entry": "vector_add", "args": ["X", "Y", "Z", "i32:N"], "block": [256, 1, 1]}
        wrong_grid = add_sample(db, Sample(task_id="vector_add_smoke", language="ptx", code=code, source="fixture: grid",
                                           manifest={"launches": [{**launch, "grid": [1, 1, 1]}]})).id
        right_grid = add_sample(db, Sample(task_id="vector_add_smoke", language="ptx", code=code, source="fixture: grid",
                                           manifest={"launches": [{**launch, "grid": ["ceil_div(N, 1024)", 1, 1]}]})).id
        # The same manifest with its keys in another order, and the code changed.
        reordered = add_sample(db, Sample(task_id="vector_add_smoke", language="ptx", code=code + "\n// note\n",
                                          source="fixture: grid",
                                          manifest={"launches": [dict(reversed(list({**launch, "grid": [1, 1, 1]}.items())))]})).id
    finally:
        db.conn.close()
    conn = browse.connect(fixit_store, cached=False)
    changes = fixit_db.fixit_changes(conn, [(wrong_grid, right_grid), (wrong_grid, reordered),
                                            (ids.syntax_sample, ids.expert_vecadd), (ids.syntax_sample, 10**6)])
    assert changes == {(wrong_grid, right_grid): (False, True), (wrong_grid, reordered): (True, False),
                       (ids.syntax_sample, ids.expert_vecadd): (True, False)}  # no sample 10**6: left out


# -- the snapshot ------------------------------------------------------------------------


def test_fixit_view_snapshot(snap_compare, fixit_app, ids):
    async def run_before(pilot) -> None:
        await open_fixit(pilot)
        move_to(pilot.app.screen, ids.wrong_result, ids.turn2)
        await settle(pilot)

    assert snap_compare(fixit_app(), terminal_size=(150, 36), run_before=run_before)
