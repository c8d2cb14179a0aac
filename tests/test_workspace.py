"""The episode's workspace file: whole writes, exact-span edits, unified diffs, reads; an edit that does
not apply changes nothing and says why. And the feedback on a wrong result: how many elements, where the
first is, in how many trials — in a tool's answer and in a plain run's next message, never a seed."""

from __future__ import annotations

import json

import pytest

from ptxbench.models.agent_tools import MAX_CODE_BYTES, GpuAccess, JudgeTools, wrong_elements
from ptxbench.models.workspace import EditError, Workspace
from ptxbench.tasks.spec import get_task

TEXT = "line one\nline two\nline three\nline four\nline five\n"


def ws(text: str = TEXT) -> Workspace:
    w = Workspace(limit=1 << 20)
    w.write(text)
    return w


def test_an_exact_span_is_replaced_once() -> None:
    w = ws()
    out = w.replace("line two\nline three", "line 2\nline 3")
    assert w.code == TEXT.replace("line two\nline three", "line 2\nline 3") and out["changed_at_line"] == 2
    assert "    2| line 2" in out["excerpt"] and w.edits == 2


@pytest.mark.parametrize(("old", "said"), [
    ("line six", "not in the file"), ("line", "in the file 5 times (at lines 1, 2, 3, 4, 5)"),
    ("", "`old` is empty"), ("line  two", "the spacing differs"),
])
def test_an_edit_that_does_not_apply_changes_nothing(old: str, said: str) -> None:
    w = ws()
    with pytest.raises(EditError, match=said.replace("(", r"\(").replace(")", r"\)")):
        w.replace(old, "x")
    assert w.code == TEXT and w.edits == 1


def test_a_unified_diff_applies_at_its_line_or_nearest() -> None:
    w = ws()
    diff = "--- a/k.ptx\n+++ b/k.ptx\n@@ -2,2 +2,2 @@\n line two\n-line three\n+line 3\n@@ -4,1 +4,2 @@\n line four\n+line 4½\n"
    out = w.patch(diff)
    assert w.code == "line one\nline two\nline 3\nline four\nline 4½\nline five\n" and out["hunks"] == 2
    # Wrong line numbers (models get them wrong): the hunk is found where its lines are.
    w = ws()
    w.patch("@@ -40,1 +40,1 @@\n-line five\n+line 5\n")
    assert w.code.endswith("line four\nline 5\n")
    # Pure insertion after a line, as diff writes it; and blank context lines without their space.
    w = ws("a\n\nb\n")
    w.patch("@@ -1,0 +2,1 @@\n+inserted\n")
    assert w.code == "a\ninserted\n\nb\n"
    w.patch("@@ -2,3 +2,3 @@\n inserted\n\n-b\n+B\n")
    assert w.code == "a\ninserted\n\nB\n"


@pytest.mark.parametrize(("diff", "said"), [
    ("", "`patch` is empty"), ("just words", "no @@ hunk"), ("@@ -1,1 +1,1 @@\n-line nine\n+x\n", "does not match"),
    ("@@ -1,1 +1,1 @@\n*line one\n", "must start with"),
])
def test_a_diff_that_does_not_apply_changes_nothing(diff: str, said: str) -> None:
    w = ws()
    with pytest.raises(EditError, match=said):
        w.patch(diff)
    assert w.code == TEXT


def test_all_hunks_or_none() -> None:
    w = ws()
    with pytest.raises(EditError, match="hunk 2"):
        w.patch("@@ -1,1 +1,1 @@\n-line one\n+line 1\n@@ -3,1 +3,1 @@\n-no such line\n+x\n")
    assert w.code == TEXT


def test_the_file_cannot_grow_past_the_limit() -> None:
    w = Workspace(limit=20)
    w.write("0123456789")
    with pytest.raises(EditError, match="over the limit of 20 bytes"):
        w.replace("0123", "0123" * 10)
    assert w.code == "0123456789"


def test_reads_are_numbered_and_bounded() -> None:
    w = ws("".join(f"row {i}\n" for i in range(1, 1001)))
    out = w.read()
    assert out["start_line"] == 1 and out["end_line"] == 400 and "read_file(start_line=401)" in out["more"]
    assert out["text"].splitlines()[0] == "    1| row 1"
    assert w.read(990, 995)["text"].splitlines() == [f"  {n}| row {n}" for n in range(990, 996)]
    with pytest.raises(EditError, match="past its end"):
        w.read(5000)


def test_the_tools_act_on_the_file() -> None:
    tools = JudgeTools(get_task("vector_add_smoke"), GpuAccess())
    assert tools.call("assemble", {}).status == "error: bad arguments"  # nothing written yet
    wrote = tools.call("write_file", {"code": ".version 9.0\n.target sm_90a\n", "language": "ptx"})
    assert wrote.status == "ok" and wrote.result["file"]["lines"] == 2
    edit = tools.call("edit_file", {"old": "nowhere", "new": "x"})
    assert edit.status == "error: edit not applied" and "not in the file" in edit.result["error"]
    assert tools.call("edit_file", {"old": 5, "new": "x"}).status == "error: bad arguments"
    assert tools.call("read_file", None).result["text"].startswith("    1| .version 9.0")
    assert tools.call("read_file", {"start_line": 0}).status == "error: bad arguments"
    assembled = tools.call("assemble", {})
    assert assembled.status == "ok" and assembled.result["file"]["sha256"] == wrote.result["file"]["sha256"]
    submitted = tools.call("submit", {"manifest": {"launches": [{"entry": "vector_add"}]}})
    assert submitted.submission is not None and submitted.submission.code.startswith(".version 9.0")
    assert submitted.submission.manifest == {"launches": [{"entry": "vector_add"}]}
    big = tools.call("write_file", {"code": "x" * (MAX_CODE_BYTES + 1)})
    assert big.status == "error: bad arguments" and tools.workspace.code.startswith(".version 9.0")


TRIALS = {"trials": [
    {"seed": 4242424242, "category": "wrong_result", "detail": {
        "elements": {"Z": {"violations": 12, "of": 1_048_576, "first_index": [17], "got": 1.0, "expected": 2.0,
                           "max_ratio": 9.0}, "W": {"violations": 0, "of": 10}},
        "unwritten": {"Z": {"elements": 3, "of": 1_048_576, "first_index": [1_048_573]}}}},
    {"seed": 4343434343, "category": "ok"},
    {"seed": 4444444444, "category": "wrong_result"},
]}


def test_a_wrong_result_says_how_many_elements_and_where() -> None:
    found = wrong_elements(TRIALS)
    assert found == {"trials_failed": "2 of 3",
                     "wrong": [{"tensor": "Z", "count": 12, "of": 1_048_576, "first_index": [17], "got": 1.0,
                                "expected": 2.0}],
                     "unwritten": [{"tensor": "Z", "count": 3, "of": 1_048_576, "first_index": [1_048_573]}]}
    assert "4242424242" not in json.dumps(found) and wrong_elements({"trials": [{"category": "ok"}]}) == {}
    assert wrong_elements(None) == {} and wrong_elements({"trials": "x"}) == {}


def test_a_plain_run_is_told_the_same() -> None:
    from ptxbench.db.records import Evaluation, Measurement
    from ptxbench.models.refine import feedback_message

    spec = get_task("vector_add_smoke")
    sizes = dict(spec.train[0])
    evaluation = Evaluation(sample_id=1, engine_version="t", status="judged", category="wrong_result", source="t",
                            evidence={"seeds": [4242424242], "sizes": [{"split": "train", "sizes": sizes, **TRIALS}]})
    text = feedback_message(spec, evaluation, [Measurement(split="train", sizes=sizes, category="wrong_result")])
    assert "12 of 1,048,576 elements of Z wrong, the first at [17] (got 1, expected 2)" in text
    assert "3 of 1,048,576 elements of Z never written" in text and "failed in 2 of 3 trials" in text
    assert "4242424242" not in text
