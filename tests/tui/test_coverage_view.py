"""The evidence tab and `ptxbench check` say what the marked copy saw: each requested family, the sizes
where it ran, and where it did not (ptxbench_tui/screens/sample.py `coverage_lines`, cli/render.py
`families_ran`, from the judgement's evidence as stored)."""

from __future__ import annotations

from ptxbench.tui.screens.sample import coverage_lines

EVIDENCE = {"coverage": {
    "families": ["bulk_copy", "mbarrier"], "sites": {"bulk_copy": 2, "mbarrier": 6},
    "sizes": [
        {"split": "train", "sizes": {"T": 4096, "D": 4096}, "families": {"bulk_copy": "ran", "mbarrier": "ran"}},
        {"split": "train", "sizes": {"T": 16384, "D": 4096}, "families": {"bulk_copy": "not run", "mbarrier": "ran"}},
        {"split": "heldout", "sizes": {"T": 8192, "D": 16384}, "note": "the marked copy's launch failed: out of registers"},
    ]}}


def test_each_family_says_where_it_ran_and_where_it_did_not():
    text = "\n".join(coverage_lines(EVIDENCE, False))
    assert "a family never ran at a train size" in text
    assert "bulk_copy: ran at 1 of 2 sizes (2 instructions marked)" in text
    assert "not run at train T=16384 D=4096" in text
    assert "mbarrier: ran at 2 of 2 sizes (6 instructions marked)" in text
    assert "not looked at heldout T=8192 D=16384: the marked copy's launch failed" in text


def test_an_evaluation_without_a_marked_copy_shows_nothing_or_its_reason():
    assert coverage_lines({}, None) == [] and coverage_lines("a message", None) == []
    text = "\n".join(coverage_lines({"coverage": {"note": "no marked copy was made"}}, None))
    assert "not measured at every train size" in text and "no marked copy was made" in text


def test_markup_in_the_evidence_is_shown_as_text():
    ev = {"coverage": {"families": ["[red]x"], "sizes": [{"split": "train", "sizes": {"N": 1}, "families": {"[red]x": "ran"}}]}}
    text = "\n".join(coverage_lines(ev, True))
    assert "\\[red]x: ran at 1 of 1 sizes" in text and "every family ran" in text


def test_ptxbench_check_says_it_in_one_line():
    from ptxbench.cli.render import families_ran

    assert families_ran(EVIDENCE) == ("requested families run (the marked copy): bulk_copy at 1 of 2 sizes, "
                                      "mbarrier at 2 of 2 sizes")
    assert families_ran({"coverage": {"note": "no marked copy was made"}}) == (
        "requested families run: not measured (no marked copy was made)")
    assert families_ran({}) is None
