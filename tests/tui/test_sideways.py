"""Long lines: the diff and the PTX view scroll sideways by 40 columns and to the ends of the lines,
the view moves (not a hidden cursor), a line cut on the right half of a side-by-side diff ends in
`›` on screen, and the new keys are in the footer and the palette."""

from __future__ import annotations

from conftest import settle

from ptxbench.tui.commands import BindingCommands
from ptxbench.tui.messages import ShowDiff, ShowSample
from ptxbench.tui.screens.sample import SampleScreen
from ptxbench.tui.widgets.code_view import FlatDocument, PtxView
from ptxbench.tui.widgets.diff_view import DiffView
from ptxbench.tui.widgets.key_bar import KeyBar


def screen_lines(app) -> list[str]:
    """The characters on screen, line by line, as the terminal gets them."""
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    return ["".join(segment.text for strip in line for segment in strip) for line in update.strips]


async def open_long_diff(app, pilot, ids) -> tuple[DiffView, int]:
    """The fixture's diff with a 104-column line on both sides, every line shown (so it scrolls down
    too, and has its vertical scroll bar), the view at that line."""
    app.post_message(ShowDiff(ids.wrong_result, ids.wgmma_ok))
    await settle(pilot)
    await pilot.press(*["right_curly_bracket"] * 3)  # context: all
    await settle(pilot)
    view = app.screen.query_one(DiffView)
    assert view.virtual_size.height > view.scrollable_content_region.height  # the vertical bar is there
    long_y = next(i for i, (_, row) in enumerate(view._lines)
                  if len(row.left) > view.body_width() and len(row.right) > view.body_width())
    view.scroll_to(y=long_y, animate=False)
    await pilot.pause()
    return view, long_y


async def test_a_line_cut_on_the_right_half_ends_in_a_marker_on_screen(app_for, ids):
    app = app_for()
    async with app.run_test(size=(100, 24)) as pilot:
        await settle(pilot)
        view, long_y = await open_long_diff(app, pilot, ids)
        line = screen_lines(app)[view.region.y + long_y - view.scroll_offset.y]
        assert line.count("›") == 2, line  # the right half's was under the scroll bar


async def test_the_diff_moves_sideways_by_40_columns_and_to_the_ends(app_for, ids):
    app = app_for()
    async with app.run_test(size=(100, 24)) as pilot:
        await settle(pilot)
        view, long_y = await open_long_diff(app, pilot, ids)
        await pilot.press("right")
        assert view.scroll_offset.x == 1
        await pilot.press("shift+right")
        assert view.scroll_offset.x == 41
        await pilot.press("shift+left", "shift+left")
        assert view.scroll_offset.x == 0
        await pilot.press("end")  # the end of the longest line on screen shows, and the rows stay
        longest = max(view.visible_widths())
        assert view.scroll_offset.x == min(view.max_scroll_x, longest - view.body_width() + 1) > 0
        assert view.scroll_offset.y == long_y
        text = "".join(s.text for s in view.render_line(0)._segments)
        row = view._lines[long_y][1]
        assert row.right.rstrip()[-8:] in text
        await pilot.press("home")
        assert view.scroll_offset.x == 0
        await pilot.press("ctrl+end")
        assert view.scroll_offset.y == view.max_scroll_y
        await pilot.press("ctrl+home")
        assert view.scroll_offset.y == 0


async def test_the_ptx_view_scrolls_sideways_instead_of_moving_a_hidden_cursor(app_for, ids):
    app = app_for()
    async with app.run_test(size=(60, 20)) as pilot:
        await settle(pilot)
        app.post_message(ShowSample(ids.wgmma_ok))
        await settle(pilot)
        assert isinstance(app.screen, SampleScreen)
        view = app.screen.query_one("#sample-ptx", PtxView)
        assert view.has_focus
        long_row = next(i for i in range(view.document.line_count) if len(view.document.get_line(i)) > 100)
        view.move_cursor((long_row, 0), center=True)
        await pilot.pause()
        cursor = view.cursor_location
        await pilot.press("right")
        assert view.scroll_offset.x == 1 and view.cursor_location == cursor
        await pilot.press("shift+right")
        assert view.scroll_offset.x == 41
        await pilot.press("down", "down")  # rows move the cursor; the sideways scroll stays
        assert view.scroll_offset.x == 41
        await pilot.press("home")
        assert view.scroll_offset.x == 0
        await pilot.press("end")
        longest = max(view.visible_widths())
        assert view.scroll_offset.x == min(view.max_scroll_x, longest - view.code_width() + 1) > 41
        # A jump to a line shows it from its start.
        app.screen.action_next_mark()
        await pilot.pause()
        assert view.scroll_offset.x == 0


async def test_the_sideways_keys_are_in_the_footer_and_the_palette(app_for, ids):
    app = app_for()
    async with app.run_test(size=(200, 30)) as pilot:
        await settle(pilot)
        for message in (ShowDiff(ids.wrong_result, ids.wgmma_ok), ShowSample(ids.wgmma_ok)):
            app.post_message(message)
            await settle(pilot)
            entries = dict((d, k) for k, d in app.screen.query_one(KeyBar).entries())
            assert entries["40 cols"] == "⇧←/⇧→" and entries["Line start/end"] == "home/end", entries
            # After the view's own keys: the focused view lists them first.
            descriptions = [d for _, d in app.screen.query_one(KeyBar).entries()]
            assert descriptions.index("40 cols") > descriptions.index("$EDITOR")
            names = {name for name, _, _ in BindingCommands(app.screen)._commands()}
            assert {"40 columns left", "40 columns right", "Line start", "Line end"} <= names
            await pilot.press("escape")
            await settle(pilot)


def test_the_flat_layout_is_textuals_for_a_view_that_does_not_wrap():
    from textual.document._document import Document
    from textual.document._wrapped_document import WrappedDocument

    text = "\tmov.u32 %r1, %r2;\n\n  a\tb\t\tc\n" + "x" * 300 + "\n\t"
    flat, textual = FlatDocument(Document(text), tab_width=4), WrappedDocument(Document(text), tab_width=4)
    assert flat.height == textual.height == 5
    for line in range(5):
        assert flat.get_tab_widths(line) == textual.get_tab_widths(line)
        assert flat.get_offsets(line) == textual.get_offsets(line)
        for column in (0, 1, 5):
            location = (line, min(column, len(flat.document[line])))
            assert flat.location_to_offset(location) == textual.location_to_offset(location)
    for y in (0, 2, 4, 9):
        assert flat.offset_to_location((3, y)) == textual.offset_to_location((3, y))
