"""How a verdict is written on screen, everywhere a category is shown.

A category alone hides two things a reader must not miss: a kernel correct on
the train sizes can fail at the held-out sizes, and a kernel can carry `ok`
from the static stages alone (no device of its arch, or static-only
judging), never having run. Both are written after the category, in the same
words in every view, and LEGEND says what they mean.
"""

from __future__ import annotations

from ptxbench.db.browse_summary import NOTE_HELDOUT, NOTE_NOT_RUN

NOTE_TEXT = {NOTE_HELDOUT: "held-out ✗", NOTE_NOT_RUN: "not run"}

LEGEND = (
    "held-out ✗: correct on the train sizes, wrong at held-out sizes · "
    "not run: only the static stages judged it (assembled and inspected; no device of its arch ran it)"
)


def note_of(status: str | None, correct: object, correct_heldout: object) -> str:
    """The note of one evaluation (db.browse_summary.VERDICT_NOTE, in Python)."""
    if status is not None and status != "judged":
        return NOTE_NOT_RUN
    if correct in (1, True) and correct_heldout in (0, False):
        return NOTE_HELDOUT
    return ""


def verdict(category: str | None, note: str = "") -> str:
    """`ok`, `ok · held-out ✗`, `ok · not run`, `wrong_result`, or `—` (never evaluated)."""
    if category is None:
        return "—"
    return f"{category} · {NOTE_TEXT[note]}" if note in NOTE_TEXT else category


def verdict_of(evaluation) -> str:
    if evaluation is None:
        return "never evaluated"
    return verdict(evaluation.category, note_of(evaluation.status, evaluation.correct, evaluation.correct_heldout))
