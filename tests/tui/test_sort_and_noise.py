"""A sort shows the first rows of its new order, and showing a diff's noise stays cheap on a kernel
made mostly of identical inline-asm marker lines."""

from __future__ import annotations

import time

from conftest import settle

from ptxbench.tui.diffing import DiffOptions, anchored_opcodes, diff, is_noise
from ptxbench.tui.screens.samples import SamplesScreen
from ptxbench.tui.widgets.row_table import RowTable


async def test_after_a_sort_the_table_is_at_its_first_row(app_for):
    app = app_for()
    async with app.run_test(size=(140, 14)) as pilot:  # a few rows tall: the table scrolls
        await settle(pilot)
        await pilot.press("3")
        await settle(pilot)
        samples = app.screen
        assert isinstance(samples, SamplesScreen)
        table = samples.query_one(RowTable)
        table.focus()
        await pilot.press("end")  # the last row: the view scrolled down to it
        await pilot.pause()
        assert table.cursor_row == table.row_count - 1 and table.scroll_offset.y > 0
        before = samples.selected_id()
        for column in ("Task", "Task", "Speedup"):
            samples.set_sort(column)
            await settle(pilot)
            assert samples.rows_request == samples.request
            assert table.cursor_row == 0 and table.scroll_offset.y == 0, column
            assert samples.selected_id() == samples.rows[0].id
        assert before in {r.id for r in samples.rows}  # the row it was on is still on the page, further down
        # A page that is not a new order keeps the row the cursor is on.
        await pilot.press("down", "down")
        kept = samples.selected_id()
        samples.load(keep_offset=True)
        await settle(pilot)
        assert samples.selected_id() == kept and table.cursor_row == 2


def inline_asm_kernel(blocks: int, extra_after: int) -> str:
    """nvcc's shape of a kernel of inline asm: each instruction between two identical marker lines."""
    lines = [".version 8.5", ".target sm_90a", ".visible .entry k()", "{"]
    for i in range(blocks):
        lines += ["// begin inline asm",
                  f"    wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{%f{i}}}, %rd{i % 7}, %rd{i % 5};",
                  "// end inline asm"]
        if i == extra_after:
            lines.append("    bar.sync 1;")
    return "\n".join([*lines, "}"])


def test_showing_the_noise_matches_the_code_lines_as_hiding_it_does_and_stays_cheap():
    # 18 000 lines, 12 000 of them one of two marker lines: one difflib pass over every line took
    # seconds of CPU anchoring on the markers.
    left, right = inline_asm_kernel(6000, 1000), inline_asm_kernel(6000, 5000)
    start = time.process_time()
    shown = diff(left, right, DiffOptions(noise=False))
    spent = time.process_time() - start
    hidden = diff(left, right, DiffOptions(noise=True))
    assert shown.stats == hidden.stats == "+1 −1 ~0"
    assert spent < 1.5, f"{spent:.2f} s of CPU"


def test_anchored_opcodes_cover_both_sides_in_order():
    a = ["// c", "x", "// c", "y", "", "z", "// d"]
    b = ["// c", "x", "y", "// c", "// c", "w", "z"]
    ops = anchored_opcodes(a, b, lambda line: is_noise(line, "ptx"))
    i = j = 0
    for tag, i1, i2, j1, j2 in ops:
        assert (i1, j1) == (i, j)
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
        i, j = i2, j2
    assert (i, j) == (len(a), len(b))
    equal = {a[k] for tag, i1, i2, _, _ in ops if tag == "equal" for k in range(i1, i2)}
    assert {"x", "y", "z"} <= equal
