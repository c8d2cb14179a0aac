"""A few SVG snapshots at fixed sizes (pytest-textual-snapshot).

Regenerate after an intended change with `pytest tests/tui/test_snapshots.py --snapshot-update`
and look at the SVGs before committing them.
"""

from __future__ import annotations

import pytest
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


SIZES = {"wide": (160, 48), "narrow": (100, 30)}


@pytest.mark.parametrize("size", SIZES)
def test_overview(snap_compare, app_for, size):
    assert snap_compare(app_for(), terminal_size=SIZES[size], run_before=_after())


@pytest.mark.parametrize("size", SIZES)
def test_samples(snap_compare, app_for, size):
    assert snap_compare(app_for(), terminal_size=SIZES[size], run_before=_after(keys=("3",)))


@pytest.mark.parametrize("size", SIZES)
def test_diff(snap_compare, app_for, ids, size):
    # Two different kernels: several hunks, long lines cut with a marker, tokens marked.
    assert snap_compare(app_for(), terminal_size=SIZES[size], run_before=_after(ShowDiff(ids.wrong_result, ids.wgmma_ok)))


@pytest.mark.parametrize("size", SIZES)
def test_compare(snap_compare, app_for, size):
    async def run_before(pilot) -> None:
        await _after(keys=("5",))(pilot)
        pilot.app.screen.query_one("#compare-task").value = "gemm_bf16_sm90a"
        await settle(pilot)

    assert snap_compare(app_for(), terminal_size=SIZES[size], run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_fixit(snap_compare, app_for, size):
    assert snap_compare(app_for(), terminal_size=SIZES[size], run_before=_after(keys=("8",)))


def test_sample_ptx_highlighted(snap_compare, app_for, ids):
    assert snap_compare(app_for(), terminal_size=(120, 40), run_before=_after(ShowSample(ids.wgmma_ok)))


def test_sample_sass_with_families_marked(snap_compare, app_for, ids):
    assert snap_compare(app_for(), terminal_size=(120, 34), run_before=_after(ShowSample(ids.wgmma_ok), keys=("right_square_bracket",)))


def test_diff_failed_beside_fix(snap_compare, app_for, ids):
    assert snap_compare(app_for(), terminal_size=(130, 24), run_before=_after(ShowDiff(ids.syntax_sample, None)))


def test_triage(snap_compare, app_for):
    assert snap_compare(app_for(), terminal_size=(110, 20), run_before=_after(keys=("4",)))
