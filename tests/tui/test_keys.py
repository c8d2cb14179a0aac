"""Keys: one meaning per key across views, help grouped by view and without
duplicates, a footer and a view bar that answer clicks."""

from __future__ import annotations

from collections import defaultdict

from conftest import SIZE, settle

from ptxbench.tui import keys
from ptxbench.tui.screens.samples import SamplesScreen
from ptxbench.tui.screens.triage import TriageScreen
from ptxbench.tui.widgets.common import ModeBar
from ptxbench.tui.widgets.key_bar import KeyBar

# Keys whose actions are named apart but mean one thing, and what it is.
SAME_MEANING = {
    "escape": ({"back", "cancel", "close", "clear_marks"}, "leave or undo what is open: a screen, a dialog, the filters, a selection"),
    "enter": ({"select_cursor", "open_result"}, "open the row under the cursor"),
    "c": ({"clear_filters", "clear"}, "clear the view: its filters, or Live's queue"),
    "r": ({"reverify", "run"}, "run the engine"),
    "left": ({"pan_left", "sideways(-1)"}, "move the view left: a plot, a line of code"),
    "right": ({"pan_right", "sideways(1)"}, "move the view right: a plot, a line of code"),
}


def test_a_key_means_one_thing_in_every_view():
    actions: dict[str, set[str]] = defaultdict(set)
    for bindings in keys.all_bindings().values():
        for b in bindings:
            actions[b.key].add(b.action)
    for key, found in actions.items():
        allowed = SAME_MEANING.get(key, (None, ""))[0]
        assert len(found) == 1 or (allowed and found <= allowed), (key, found)
    # The three keys that meant three things each now mean one.
    assert actions["g"] == {"goto_evidence"} and actions["p"] == {"prev_item"} and actions["o"] == {"sort"}


def test_help_sections_list_each_binding_once():
    sections = keys.help_sections()
    titles = [t for t, _ in sections]
    assert titles[0] == "Everywhere" and "Samples (3)" in titles and "A diff" in titles
    for title, rows in sections:
        assert len(rows) == len({(k, d) for k, d, _ in rows}), title
    everywhere = dict((d, k) for k, d, _ in sections[0][1])
    assert everywhere["Views"] == "12345678" and everywhere["Help"] == "?"
    # A keymap's rebinding shows in the help.
    remapped = dict(keys.help_sections({"samples.diff": "D"}))["Samples (3)"]
    assert ("D", "Diff") in [(k, d) for k, d, _ in remapped]


async def test_help_starts_with_the_view_then_everywhere(app_for):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("3", "question_mark")
        await settle(pilot)
        help_screen = app.screen
        titles = [t for t, _ in help_screen.sections()]
        assert titles[:3] == ["Samples (3)", "Everywhere", "In every table"]
        body = str(help_screen.query_one("#help-body").render())
        assert body.count("Next unlabelled") == 2  # in Samples and in A sample, once each
        assert "Samples (3)  (this view)" in body


async def test_the_footer_and_the_view_bar_answer_clicks(app_for):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        bar = app.screen.query_one(ModeBar)
        x = next(x for x in range(bar.size.width) if ModeBar.mode_at(x) == "triage")
        await pilot.click(ModeBar, offset=(x, 0))
        await settle(pilot)
        assert isinstance(app.screen, TriageScreen)
        footer = app.screen.query_one(KeyBar)
        x = next(x for x in range(footer.size.width) if footer.key_at(x) == "3")  # the view bar's "3"
        await pilot.click(KeyBar, offset=(x, 0))
        await settle(pilot)
        assert isinstance(app.screen, SamplesScreen)
        footer = app.screen.query_one(KeyBar)
        entries = dict((d, k) for k, d in footer.entries())
        assert entries["Unlabelled"] == "n/p" and entries["Page"] == ">/<"
        x = next(x for x in range(footer.size.width) if footer.key_at(x) == "o")
        await pilot.click(KeyBar, offset=(x, 0))
        await settle(pilot)
        assert type(app.screen).__name__ == "SortDialog"
