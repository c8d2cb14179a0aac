"""How a verdict is written on screen, everywhere a category is shown.

A category alone hides three things a reader must not miss: a kernel correct
on the train sizes can fail at the held-out sizes, a kernel can carry `ok`
from the static stages alone (no device of its arch, or static-only judging),
never having run, and a verdict can be an older engine's GPU judgement that a
newer engine only re-checked statically. They are written after the category,
in the same words in every view (db/verdict.py defines them once), and LEGEND
says what they mean.
"""

from __future__ import annotations

from typing import Any

from ptxbench.db import verdict as rule
from ptxbench.db.verdict import NOTE_HELDOUT, NOTE_NOT_RUN, NOTE_OLDER, NOTE_TEXT

__all__ = ["LEGEND", "NOTE_HELDOUT", "NOTE_NOT_RUN", "NOTE_OLDER", "NOTE_TEXT", "legend", "note_of", "verdict",
           "verdict_of"]

_MEANING = {
    NOTE_HELDOUT: "held-out ✗: correct on the train sizes, wrong at held-out sizes",
    NOTE_NOT_RUN: "not run: only the static stages judged it (assembled and inspected; no device of its arch ran it)",
    NOTE_OLDER: "older engine: an older engine's GPU verdict; a newer engine only re-checked it statically (History)",
}
LEGEND = " · ".join(_MEANING[n] for n in (NOTE_HELDOUT, NOTE_NOT_RUN, NOTE_OLDER))


def legend(notes: set[str] | None = None) -> str:
    """The legend of the notes shown (all of them when None)."""
    words = set().union(*(n.split() for n in notes)) if notes is not None else set(_MEANING)
    return " · ".join(_MEANING[n] for n in (NOTE_HELDOUT, NOTE_NOT_RUN, NOTE_OLDER) if n in words)


def note_of(status: str | None, correct: object, correct_heldout: object, *, older: bool = False) -> str:
    """The note of one evaluation (db.verdict.note_sql, in Python)."""
    return rule.note_of(status, correct, correct_heldout, older=older)


def verdict(category: str | None, note: str = "") -> str:
    """`ok`, `ok · held-out ✗`, `ok · not run`, `ok · older engine`, `wrong_result`, or `—` (never evaluated)."""
    return rule.written(category, note)


def verdict_of(evaluation: Any, history: list[Any] | None = None) -> str:
    """One evaluation written out; with the sample's `history` (every evaluation) it also says
    when a newer engine judged the sample too."""
    if evaluation is None:
        return "never evaluated"
    older = rule.older_than_another(evaluation, history or [])
    return verdict(evaluation.category,
                   note_of(evaluation.status, evaluation.correct, evaluation.correct_heldout, older=older))
