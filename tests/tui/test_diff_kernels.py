"""A diff made for kernels: highlighted sides, changed tokens, hunks, sideways scroll in step."""

from __future__ import annotations

from conftest import settle
from fixture_store import read

from ptxbench.tui.diffing import DiffOptions, changed_spans, diff
from ptxbench.tui.messages import ShowDiff
from ptxbench.tui.screens.diff import DiffScreen
from ptxbench.tui.widgets.diff_view import DiffView


def marked(text: str, spans) -> list[str]:
    return [text[a:b] for a, b in spans]


def test_only_the_changed_tokens_of_a_line_are_marked():
    a, b = "    setmaxnreg.inc.sync.aligned.u32 244;", "    setmaxnreg.inc.sync.aligned.u32 240;"
    left, right = changed_spans(a, b)
    assert marked(a, left) == ["244"] and marked(b, right) == ["240"]
    a = "wgmma.mma_async.sync.aligned.m64n250k16.f32.bf16.bf16 {%f2944, %f2943}"
    b = "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%f2944, %f2943}"
    assert [marked(a, s) for s in changed_spans(a, b)[:1]] == [["250"]]
    # The syntax mutation: the dropped comma is what the fix adds.
    result = diff(read("vecadd_syntax.ptx"), read("vecadd.ptx"), DiffOptions(context=1))
    row = next(r for r in result.rows if r.kind == "replace")
    left, right = row.changed()
    assert marked(row.right, right) == [","] and left == ()
    # Two long unrelated lines: the middle is marked whole instead of a quadratic token match.
    a, b = "mov " + ", ".join(f"%f{i}" for i in range(300)), "add " + ", ".join(f"%r{i}" for i in range(1, 301))
    left, right = changed_spans(a, b)
    assert left == ((0, len(a)),) and right == ((0, len(b)),)


def test_hunks_start_where_a_run_of_changes_starts():
    result = diff("a\nb\nc\nd\ne\nf\ng\n", "a\nB\nc\nd\ne\nF\nG\nh\n", DiffOptions(context=-1))
    assert result.hunks == [1, 5] and [result.rows[i].kind for i in result.hunks] == ["replace", "replace"]
    assert result.left_lines[1] == "b" and result.rows[1].left_index == 1


async def test_the_diff_view_of_two_kernels(app_for, ids):
    app = app_for()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        app.post_message(ShowDiff(ids.expert_vecadd, ids.wgmma_ok))  # two kernels: several hunks
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, DiffScreen) and not screen.computing
        view = screen.query_one(DiffView)
        assert view.loading is False and screen.hunks == len(view.result.hunks) >= 2
        # Both sides highlighted: a line of PTX paints in several styles on each half.
        y = next(i for i, (kind, row) in enumerate(view._lines) if "ld.param" in row.left and "%" in row.right)
        view.scroll_to(y=y, animate=False)
        await pilot.pause()
        strip = view.render_line(0)
        half = view._halves()[0]
        left_styles = {str(s.style) for s in strip.crop(0, half)._segments if s.text.strip()}
        right_styles = {str(s.style) for s in strip.crop(half + 1, view.size.width)._segments if s.text.strip()}
        assert len(left_styles) >= 3 and len(right_styles) >= 3
        # n and p walk the hunks, and the header says where.
        view.scroll_to(y=0, animate=False)
        await pilot.pause()
        await pilot.press("n")
        first = view.hunk
        await pilot.press("n")
        assert view.hunk == first + 1 and f"change {first + 2} of {screen.hunks}" in str(screen.query_one("#diff-head").render())
        assert view.scroll_offset.y == max(0, view.hunk_lines[view.hunk] - 3)
        await pilot.press("p")
        assert view.hunk == first
        # Side by side, a long line is cut with a marker and both halves scroll sideways together.
        await pilot.press("escape")
        app.post_message(ShowDiff(ids.wrong_result, ids.wgmma_ok))  # one operand changed in a 104-column line
        await settle(pilot)
        screen = app.screen
        view = screen.query_one(DiffView)
        long_y = next(i for i, (_, row) in enumerate(view._lines)
                      if len(row.left) > view.body_width() and len(row.right) > view.body_width())
        view.scroll_to(y=long_y, animate=False)
        await pilot.pause()
        assert view.virtual_size.width > view.size.width
        half = view._halves()[0]  # this diff's: the width left of its vertical scroll bar
        text = "".join(s.text for s in view.render_line(long_y - view.scroll_offset.y)._segments)
        left, right = text[:half], text[half + 1:]
        assert left.rstrip().endswith("›") and right.rstrip().endswith("›"), (left, right)
        await pilot.press("right", "right", "right", "right")
        await pilot.pause()
        assert view.scroll_offset.x > 0
        text = "".join(s.text for s in view.render_line(long_y - view.scroll_offset.y)._segments)
        row = view._lines[long_y][1]
        x = view.scroll_offset.x
        assert text[6] == "‹" and text[7:half].startswith(row.left[x + 1:x + 5])
        assert text[half + 1 + 6] == "‹" and text[half + 1 + 7:].startswith(row.right[x + 1:x + 5])
        # The register renumbering filter stays, and a new diff shows the loading state while it runs.
        await pilot.press("percent_sign")
        await settle(pilot)
        assert screen.options.registers
        screen.recompute()  # the worker's answer comes later, on the event loop
        assert screen.computing and view.loading and "computing the diff" in str(screen.query_one("#diff-head").render())
        await settle(pilot)
        assert not screen.computing and not view.loading
