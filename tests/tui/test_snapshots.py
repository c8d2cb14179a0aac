"""A few SVG snapshots at fixed sizes (pytest-textual-snapshot).

Regenerate after an intended change with `pytest tests/tui/test_snapshots.py --snapshot-update`
and look at the SVGs before committing them.
"""

from __future__ import annotations

from conftest import settle

from ptxbench.tui.messages import ShowDiff, ShowSample


def _after(*messages, keys: tuple[str, ...] = ()):
    async def run_before(pilot) -> None:
        await settle(pilot)
        for message in messages:
            pilot.app.post_message(message)
            await settle(pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)

    return run_before


def test_overview(snap_compare, app_for):
    assert snap_compare(app_for(), terminal_size=(130, 30), run_before=_after())


def test_sample_ptx_highlighted(snap_compare, app_for, ids):
    assert snap_compare(app_for(), terminal_size=(120, 40), run_before=_after(ShowSample(ids.wgmma_ok)))


def test_sample_sass_with_families_marked(snap_compare, app_for, ids):
    assert snap_compare(app_for(), terminal_size=(120, 34), run_before=_after(ShowSample(ids.wgmma_ok), keys=("right_square_bracket",)))


def test_diff_failed_beside_fix(snap_compare, app_for, ids):
    assert snap_compare(app_for(), terminal_size=(130, 24), run_before=_after(ShowDiff(ids.syntax_sample, None)))


def test_triage(snap_compare, app_for):
    assert snap_compare(app_for(), terminal_size=(110, 20), run_before=_after(keys=("4",)))
