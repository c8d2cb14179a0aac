"""Compare with fixed columns and panes that scroll together; plots whose legends cover nothing."""

from __future__ import annotations

from conftest import SIZE, settle
from textual.widgets import DataTable

from ptxbench.tui.screens.compare import COLUMN_WIDTH, CompareScreen, _fit
from ptxbench.tui.widgets.code_view import PtxView


async def open_compare(pilot, task: str = "gemm_bf16_sm90a") -> CompareScreen:
    await settle(pilot)
    await pilot.press("5")
    await settle(pilot)
    screen = pilot.app.screen
    screen.query_one("#compare-task").value = task
    await settle(pilot)
    return screen


async def test_compare_columns_are_fixed_and_the_detail_says_the_rest(app_for):
    app = app_for()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_compare(pilot)
        table = screen.query_one(DataTable)
        widths = [c.width for c in list(table.columns.values())[1:]]
        assert widths and set(widths) == {COLUMN_WIDTH}
        cells = [str(table.get_row_at(r)[c]) for r in range(table.row_count) for c in range(1, len(widths) + 1)]
        assert all(len(cell) <= COLUMN_WIDTH for cell in cells)
        assert _fit("wgmma, tma, mbarrier, setmaxnreg, cluster", COLUMN_WIDTH) == "wgmma, tma, mbarrier, s…"
        table.move_cursor(column=1)
        await settle(pilot)
        detail = str(screen.query_one("#compare-detail").render())
        assert "expert" in detail and "the baseline" in detail and "SASS families: " in detail


async def test_d_is_disabled_on_the_baseline_column_and_panes_scroll_together(app_for):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_compare(pilot)
        table = screen.query_one(DataTable)
        table.move_cursor(column=1)  # the pinned baseline
        await settle(pilot)
        assert screen.active_bindings["d"].enabled is False
        await pilot.press("d")
        await settle(pilot)
        assert app.screen is screen  # nothing opened
        table.move_cursor(column=2)
        await settle(pilot)
        assert screen.active_bindings["d"].enabled is True
        views = list(screen.query(PtxView))
        assert len(views) >= 2
        views[0].scroll_to(y=7, animate=False)
        await settle(pilot)
        assert {v.scroll_offset.y for v in views if v.max_scroll_y >= 7} == {7}


async def test_plot_legends_sit_above_and_categories_are_never_joined(app_for):
    from textual_plot.plot_widget import BarPlot, LinePlot

    app = app_for()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("7")
        await settle(pilot)
        screen = app.screen
        legend = str(screen.query_one("#plot-speedup-legend").render())
        assert "expert (n=" in legend and "the library (1.0×)" in legend
        for pane in ("plot-speedup", "plot-levels", "plot-split"):
            assert screen.query_one(f"#{pane}-widget").query_one("#legend").display is False
        levels = screen.query_one("#plot-levels-widget")
        assert levels._datasets and all(isinstance(d, BarPlot) for d in levels._datasets)
        assert not any(isinstance(d, LinePlot) for d in screen.query_one("#plot-split-widget")._datasets)
        # The plot keeps zoom and pan; its reset moved to 0, so r means one thing everywhere.
        assert "r" not in {b.key for b in type(levels).BINDINGS} and "0" in {b.key for b in type(levels).BINDINGS}
