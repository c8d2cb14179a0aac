"""Every view and action, driven through Pilot; assertions on state, waits on workers."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import SIZE, settle
from textual.widgets import DataTable, Input

from ptxbench.tui.screens.compare import CompareScreen
from ptxbench.tui.screens.diff import DiffScreen
from ptxbench.tui.screens.overview import OverviewScreen
from ptxbench.tui.screens.plots import PlotsScreen
from ptxbench.tui.screens.sample import SampleScreen
from ptxbench.tui.screens.samples import SamplesScreen
from ptxbench.tui.screens.tasks import TasksScreen
from ptxbench.tui.screens.triage import TriageScreen
from ptxbench.tui.widgets.code_view import PtxView, SassView
from ptxbench.tui.widgets.common import FilterBar
from ptxbench.tui.widgets.diff_view import DiffView
from ptxbench.tui.widgets.row_table import RowTable


def rows_of(table) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def goto(pilot, key: str):
    await pilot.press(key)
    await settle(pilot)
    return pilot.app.screen


async def test_overview_filters_levels_and_drill(app_for):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, OverviewScreen)
        table = screen.query_one("#overview-table", RowTable)
        assert table.row_count == 8
        screen.query_one(FilterBar).query_one("#filter-arch").value = "sm_100a"
        await settle(pilot)
        assert [r[1] for r in rows_of(table)] == ["gemm_bf16_sm100a"]
        await pilot.press("c")
        await settle(pilot)
        assert table.row_count == 8
        await pilot.press("z")  # fold context levels
        await settle(pilot)
        assert {r[3] for r in rows_of(table)} == {"*"}
        await pilot.press("z")
        await settle(pilot)
        # Drill: the row for model b's GEMM → the samples view filtered to it.
        index = next(i for i, r in enumerate(screen.rows) if r.model == "fixture-model-b")
        table.move_cursor(row=index)
        await pilot.press("enter")
        await settle(pilot)
        samples = app.screen
        assert isinstance(samples, SamplesScreen)
        assert (samples.filter.model, samples.filter.task_id, samples.filter.context_level) == ("fixture-model-b", "gemm_bf16_sm90a", "brief")
        assert len(samples.rows) == 2 and samples.total == 2


async def test_overview_trajectory_metrics(app_for):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("t")
        await settle(pilot)
        screen = app.screen
        assert screen.trajectories and screen.metrics_rows is not None
        table = screen.query_one("#overview-table", RowTable)
        # Model a's brief GEMM is one trajectory (turn 2 follows turn 1) that ends correct.
        row = next(r for r in screen.rows if r.model == "fixture-model-a" and r.task == "gemm_bf16_sm90a" and r.context == "brief")
        assert row.trajectories == 1 and row.correct_rate == 1.0
        assert "pass@1" in table.labels


async def test_tasks_detail_expert_and_samples(app_for, ids):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        screen = await goto(pilot, "2")
        assert isinstance(screen, TasksScreen)
        table = screen.query_one("#tasks-table", DataTable)
        index = next(i for i, t in enumerate(screen.tasks) if t.id == "gemm_bf16_sm90a")
        table.move_cursor(row=index)
        await settle(pilot)
        assert screen.current.id == "gemm_bf16_sm90a" and screen.expert_sample == ids.wgmma_ok
        assert "wgmma.mma_async" in screen.query_one("#task-expert-ptx", PtxView).text
        results = screen.query_one("#task-results-table", DataTable)
        assert {r[0] for r in rows_of(results)} == {"expert", "fixture-model-a", "fixture-model-b"}
        await pilot.press("right_square_bracket")
        assert screen.query_one("#task-tabs").active == "task-expert"
        await pilot.press("k")  # the expert's kernel as a sample (k: open a kernel, as in an agent episode)
        await settle(pilot)
        assert isinstance(app.screen, SampleScreen) and app.screen.sample_id == ids.wgmma_ok
        await pilot.press("escape")
        screen.query_one("#tasks-table").focus()
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, SamplesScreen) and app.screen.filter.task_id == "gemm_bf16_sm90a"


async def test_samples_search_paging_and_filters(app_for, ids, monkeypatch):
    import ptxbench.tui.screens.samples as samples_mod

    monkeypatch.setattr(samples_mod, "PAGE_SIZE", 4)
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        screen = await goto(pilot, "3")
        assert isinstance(screen, SamplesScreen)
        assert len(screen.rows) == 4 and screen.total == 11
        await pilot.press("greater_than_sign")
        await settle(pilot)
        assert screen.page_offset == 4 and screen.rows[0].id == 7
        await pilot.press("less_than_sign")
        await settle(pilot)
        assert screen.page_offset == 0
        await pilot.press("slash")
        assert isinstance(app.focused, Input)
        await pilot.press(*"Parsing error", "enter")
        await settle(pilot)
        assert [r.id for r in screen.rows] == [ids.syntax_sample] and screen.total == 1
        await pilot.press("c")
        await settle(pilot)
        screen.query_one("#filter-category").value = "wrong_result"
        await settle(pilot)
        assert [r.id for r in screen.rows] == [ids.wrong_result]
        assert screen.last_latency_ms is not None


async def test_sample_detail_tabs_evidence_and_marks(app_for, ids):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        app.post_message(__import__("ptxbench.tui.messages", fromlist=["ShowSample"]).ShowSample(ids.syntax_sample))
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, SampleScreen) and screen.detail.id == ids.syntax_sample
        ptx = screen.query_one("#sample-ptx", PtxView)
        await pilot.press("g")
        await settle(pilot)
        assert ptx.cursor_location[0] == 36 and 36 in ptx.evidence_lines  # ptxas: line 37
        assert screen.query_one("#sample-tabs").active == "tab-ptx"
        await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket")
        assert screen.query_one("#sample-tabs").active == "tab-evidence"
        assert "Parsing error" in str(screen.query_one("#sample-evidence").render())
        await pilot.press("escape")
        # The wgmma expert: SASS lines of the requested families are marked.
        app.post_message(__import__("ptxbench.tui.messages", fromlist=["ShowSample"]).ShowSample(ids.wgmma_ok))
        await settle(pilot)
        screen = app.screen
        sass = screen.query_one("#sample-sass", SassView)
        assert sass.document.line_count == 1  # laid out when its tab opens
        await pilot.press("right_square_bracket", "m")
        await settle(pilot)
        assert screen.query_one("#sample-tabs").active == "tab-sass"
        marked = [sass.document.get_line(i) for i in sass.marked_lines()]
        assert any("HGMMA" in line for line in marked) and any("UTMALDG" in line for line in marked)
        assert not any("IMAD" in line for line in marked)
        assert sass.cursor_location[0] in sass.marked_lines()
        asm = str(screen.query_one("#sample-asm").render())
        assert "registers 30" in asm and "Used 30 registers" in asm
        timing = screen.query_one("#sample-timing", DataTable)
        assert {r[0] for r in rows_of(timing)} == {"train", "heldout"}


async def test_diff_with_fix_split_target_and_noise(app_for, ids):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        screen = await goto(pilot, "3")
        index = next(i for i, r in enumerate(screen.rows) if r.id == ids.syntax_sample)
        screen.query_one("#samples-table", RowTable).move_cursor(row=index)
        await pilot.press("d")
        await settle(pilot)
        diff = app.screen
        assert isinstance(diff, DiffScreen) and diff.right == ids.expert_vecadd
        view = diff.query_one(DiffView)
        changed = [r for r in view.rows if r.kind == "replace"]
        assert len(changed) == 1 and changed[0].left_no == 37
        split_lines = view.line_count
        await pilot.press("s")
        assert not view.split and view.line_count == split_lines + 1  # a change is two lines unified
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert diff.options.target == "manifest"
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert diff.options.target == "sass"
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert diff.options.target == "log" and any("Parsing error" in r.left for r in view.rows)
        await pilot.press("N")
        await settle(pilot)
        assert diff.options.noise is False
        await pilot.press("tilde")
        await settle(pilot)
        assert (diff.left, diff.right) == (ids.expert_vecadd, ids.syntax_sample)
        await pilot.press("right_curly_bracket")
        await settle(pilot)
        assert diff.options.context == 8
        await pilot.press("number_sign")
        await pilot.press(*str(ids.wgmma_ok), "enter")
        await settle(pilot)
        assert diff.right == ids.wgmma_ok


async def test_label_beside_the_automatic_category_and_fixit(app_for, store, ids):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        screen = await goto(pilot, "3")
        index = next(i for i, r in enumerate(screen.rows) if r.id == ids.wgmma_missing)
        screen.query_one("#samples-table", RowTable).move_cursor(row=index)
        await pilot.press("l")
        await settle(pilot)
        dialog = app.screen
        assert type(dialog).__name__ == "LabelDialog"
        dialog.query_one("#label-category").value = "required_missing_sass"
        await pilot.press(*"tile not on wgmma", "ctrl+s")
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        row = next(r for r in app.screen.rows if r.id == ids.wgmma_missing)
        assert row.label == "required_missing_sass" and row.fixit and row.category == "required_missing_ptx"
    conn = sqlite3.connect(store)
    labels = conn.execute("SELECT category, note, fixit_candidate FROM labels WHERE sample_id = ? ORDER BY id", (ids.wgmma_missing,)).fetchall()
    assert labels == [("required_missing_sass", "tile not on wgmma", 0), ("required_missing_sass", "tile not on wgmma", 1)]
    # The automatic category is untouched.
    assert conn.execute("SELECT category FROM evaluations WHERE sample_id = ?", (ids.wgmma_missing,)).fetchall() == [("required_missing_ptx",)]


async def test_triage_dimensions_and_drill(app_for):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        screen = await goto(pilot, "4")
        assert isinstance(screen, TriageScreen)
        table = screen.query_one(DataTable)
        assert screen.table_data.columns == ["fixture-model-a", "fixture-model-b", "mutation"]
        await pilot.press("G")
        assert screen.dimension == "task" and "gemm_bf16_sm90a" in screen.table_data.columns
        await pilot.press("G")
        assert screen.dimension == "level"
        await pilot.press("G", "a")
        assert screen.dimension == "model" and "ok" in [r[0] for r in screen.table_data.rows]
        await pilot.press("a")
        row = next(i for i, r in enumerate(screen.table_data.rows) if r[0] == "slower_than_baseline")
        table.move_cursor(row=row, column=3 + screen.table_data.columns.index("fixture-model-b"))
        await pilot.press("enter")
        await settle(pilot)
        samples = app.screen
        assert isinstance(samples, SamplesScreen)
        assert (samples.filter.category, samples.filter.model) == ("slower_than_baseline", "fixture-model-b")
        assert len(samples.rows) == 2
        await pilot.press("4", "L")  # rows by a person's label
        await settle(pilot)
        labels = {r[0]: r[2] for r in app.screen.table_data.rows}
        assert app.screen.by_label and len(labels) == 2 and "(no label)" in labels
        label = next(name for name in labels if name != "(no label)")
        table.move_cursor(row=[r[0] for r in app.screen.table_data.rows].index(label), column=2)
        await pilot.press("enter")
        await settle(pilot)
        assert app.screen.filter.label == label and len(app.screen.rows) == labels[label] == 1


async def test_compare_baseline_and_deltas(app_for, ids):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        screen = await goto(pilot, "5")
        assert isinstance(screen, CompareScreen)
        screen.query_one("#compare-task").value = "gemm_bf16_sm90a"
        await settle(pilot)
        assert screen.baseline == "expert"
        table = screen.query_one(DataTable)
        speed_row = rows_of(table)[[r[0] for r in rows_of(table)].index("Speedup")]
        assert speed_row[1] == "0.970×" and any("−" in cell for cell in speed_row[2:])
        assert len(screen.query(PtxView)) == 3
        table.move_cursor(column=1 + [m.model for m in screen.ordered()].index("fixture-model-b"))
        await pilot.press("b")
        assert screen.baseline == "fixture-model-b" and screen.ordered()[0].model == "fixture-model-b"
        table.move_cursor(column=2)
        await pilot.press("d")
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen) and app.screen.left == screen.ordered()[0].sample_id


async def test_plots_draw_from_the_store(app_for):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        screen = await goto(pilot, "7")
        assert isinstance(screen, PlotsScreen)
        assert set(screen.data.speedups) == {"expert", "fixture-model-a", "fixture-model-b"}
        from textual_plot import PlotWidget

        assert all(len(p._datasets) > 0 for p in screen.query(PlotWidget))
        await pilot.press("right_square_bracket")
        assert screen.query_one("#plot-tabs").active == "plot-levels"
        screen.query_one("#plots-task").value = "vector_add_smoke"
        await settle(pilot)
        assert set(screen.data.speedups) == {"expert", "fixture-model-a"}


async def test_theme_change_recolours_ptx(app_for, ids):
    app = app_for(theme="ptxbench")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.post_message(__import__("ptxbench.tui.messages", fromlist=["ShowSample"]).ShowSample(ids.wgmma_ok))
        await settle(pilot)
        ptx = app.screen.query_one("#sample-ptx", PtxView)
        line = next(i for i in range(ptx.document.line_count) if "wgmma.mma_async" in ptx.document.get_line(i))
        before = ptx.get_line(line).spans
        app.theme = "nord"
        await settle(pilot)
        after = ptx.get_line(line).spans
        assert before and after and {str(s.style) for s in before} != {str(s.style) for s in after}
        assert ptx.app.theme == "nord"


async def test_help_and_palette_offer_the_footer_actions(app_for):
    from ptxbench.tui.commands import BindingCommands

    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        screen = await goto(pilot, "3")
        shown = {b.binding.description for b in screen.active_bindings.values() if b.binding.show and b.binding.description}
        provider = BindingCommands(screen)
        offered = {name for name, _, _ in provider._commands()}
        assert shown <= offered
        assert {"Filter", "Diff", "Label", "Fixit", "Re-verify", "Samples", "Live"} <= offered
        await pilot.press("question_mark")
        await settle(pilot)
        assert type(app.screen).__name__ == "HelpScreen"
        assert "Re-verify all" in str(app.screen.query_one("#help-body").render())
        await pilot.press("escape")
        # Running a palette command runs the action.
        run = next(cmd for name, _, cmd in provider._commands() if name == "Triage")
        run()
        await settle(pilot)
        assert isinstance(app.screen, TriageScreen)


async def test_keymap_rebinds_by_id(app_for):
    app = app_for(keymap={"app.plots": "f7"})
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f7")
        await settle(pilot)
        assert isinstance(app.screen, PlotsScreen)


@pytest.mark.parametrize("theme", ["ptxbench-light", "textual-light", "dracula"])
async def test_every_theme_colours_ptx(app_for, ids, theme):
    app = app_for(theme=theme)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.post_message(__import__("ptxbench.tui.messages", fromlist=["ShowSample"]).ShowSample(ids.wgmma_ok))
        await settle(pilot)
        ptx = app.screen.query_one("#sample-ptx", PtxView)
        styles = ptx.styles_by_role
        colours = {styles[r].color.name for r in ("opcode", "family", "type", "comment", "register") if styles[r].color}
        assert len(colours) >= 3, (theme, colours)


async def test_start_from_the_saved_summary(store, tmp_path):
    from conftest import replay_cmd

    from ptxbench.db.reader import StoreReader
    from ptxbench.tui import summary_cache
    from ptxbench.tui.app import Prefetch, make_app

    reader = StoreReader(store)
    expected = summary_cache.compute(reader)  # what an earlier start saved
    prefetch = Prefetch(reader)
    app = make_app(store, engine_cmd=replay_cmd(), gpu_lock_dir=tmp_path, prefetch=prefetch)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert prefetch.cached is not None and prefetch.fresh is None  # shown from the saved summary
        assert (app.cells, app.facets) == expected
        assert app.data_version == 1  # re-read after the first paint, found the same, drew nothing again
        assert app.screen.query_one("#overview-table", RowTable).row_count == 8


async def test_the_remaining_actions(app_for, store, ids):
    """Keys not exercised above, each with the state it must change."""
    from ptxbench.tui.messages import ShowSample
    from ptxbench.tui.screens.live import LiveScreen

    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        # Tasks: the prompt's context level cycles.
        tasks = await goto(pilot, "2")
        await pilot.press("P")
        await settle(pilot)
        assert tasks.prompt_level == "full"
        # A sample: diff, label dialog, Fixit mark, re-verify — from the sample's own view.
        app.post_message(ShowSample(ids.wgmma_missing))
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        assert app.screen.detail.label.fixit_candidate
        await pilot.press("l")
        await settle(pilot)
        assert type(app.screen).__name__ == "LabelDialog"
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        diff = app.screen
        assert isinstance(diff, DiffScreen) and diff.right == ids.wgmma_ok
        await pilot.press("percent_sign", "w", "left_curly_bracket")
        await settle(pilot)
        assert diff.options.registers and not diff.options.whitespace and diff.options.context == 1
        await pilot.press("escape")
        await pilot.press("r")
        await settle(pilot)
        assert "adds a static judgement only" in app.screen.question  # no GPU here: it says so first
        await pilot.press("enter")
        await settle(pilot)
        live = app.screen
        assert isinstance(live, LiveScreen) and [r.sample_id for r in live.results] == [ids.wgmma_missing]
        await pilot.press("c")
        assert live.results == [] and live.query_one("#live-results", DataTable).row_count == 0
        # Triage: the Fixit list.
        await pilot.press("4", "F")
        await settle(pilot)
        assert app.screen.filter.fixit_only and [r.id for r in app.screen.rows] == [ids.wgmma_missing]
        # Compare: open the column's sample.
        compare = await goto(pilot, "5")
        compare.query_one("#compare-task").value = "gemm_bf16_sm90a"
        await settle(pilot)
        compare.query_one(DataTable).move_cursor(column=1)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, SampleScreen) and app.screen.sample_id == compare.ordered()[0].sample_id
        await pilot.press("escape")
        # App: reload, the theme picker, quit.
        version = app.data_version
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert app.data_version == version + 1
        await pilot.press("T")
        await settle(pilot)
        assert type(app.screen).__name__ == "CommandPalette"
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0
