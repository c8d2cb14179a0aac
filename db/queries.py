"""Reading single records and searching: rows come back as dataclasses.

(The explorer's paged, filtered listings live in db/browse.py.)
Every value from outside is a bound parameter; a search text is turned into
an FTS5 query that cannot be read as query syntax, so any text gives results
or an empty list, never an error.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any, TypeVar

import sqlite_utils

from ptxbench.db import verdict
from ptxbench.db.records import Evaluation, Fix, Label, Measurement, Model, Record, Run, Sample, Task, from_row

R = TypeVar("R", bound=Record)


def _one(db: sqlite_utils.Database, cls: type[R], sql: str, params: list[Any] | dict[str, Any]) -> R | None:
    cur = db.execute(sql, params)
    row = cur.fetchone()
    if row is None:
        return None
    return from_row(cls, {d[0]: v for d, v in zip(cur.description, row)})


def _all(db: sqlite_utils.Database, cls: type[R], sql: str, params: list[Any] | dict[str, Any]) -> list[R]:
    cur = db.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [from_row(cls, dict(zip(names, row))) for row in cur.fetchall()]


def get_task(db: sqlite_utils.Database, task_id: str) -> Task | None:
    return _one(db, Task, "SELECT * FROM tasks WHERE id = ?", [task_id])


def list_tasks(db: sqlite_utils.Database) -> list[Task]:
    return _all(db, Task, "SELECT * FROM tasks ORDER BY id", [])


def get_model(db: sqlite_utils.Database, name_or_id: str | int) -> Model | None:
    if isinstance(name_or_id, int):
        return _one(db, Model, "SELECT * FROM models WHERE id = ?", [name_or_id])
    return _one(db, Model, "SELECT * FROM models WHERE name = ?", [name_or_id])


def get_run(db: sqlite_utils.Database, run_id: int) -> Run | None:
    return _one(db, Run, "SELECT * FROM runs WHERE id = ?", [run_id])


def get_sample(db: sqlite_utils.Database, sample_id: int) -> Sample | None:
    return _one(db, Sample, "SELECT * FROM samples WHERE id = ?", [sample_id])


def find_sample(
    db: sqlite_utils.Database, *, run_id: int, task_id: str, sample_index: int, turn: int
) -> Sample | None:
    """The sample a run already stored in this slot (a resumed run skips it)."""
    return _one(
        db,
        Sample,
        "SELECT * FROM samples WHERE run_id = ? AND task_id = ? AND sample_index = ? AND turn = ? "
        "ORDER BY id DESC LIMIT 1",
        [run_id, task_id, sample_index, turn],
    )


def latest_evaluation(db: sqlite_utils.Database, sample_id: int) -> Evaluation | None:
    """The newest judgement of a sample (the one just made, for a run's feedback). The one
    that speaks for the sample in views and counts is `shown_evaluation`."""
    return _one(db, Evaluation, "SELECT * FROM evaluations WHERE sample_id = ? ORDER BY id DESC LIMIT 1", [sample_id])


def shown_evaluation(db: sqlite_utils.Database, sample_id: int) -> Evaluation | None:
    """The judgement that speaks for a sample under db/verdict.py's rule (older and
    shallower ones stay as history)."""
    return _one(db, Evaluation, f"SELECT * FROM evaluations WHERE id = {verdict.shown_for(db, ':sample_id')}",
                {"sample_id": sample_id})


def evaluations_for(db: sqlite_utils.Database, sample_id: int) -> list[Evaluation]:
    """Every judgement of a sample, newest first."""
    return _all(db, Evaluation, "SELECT * FROM evaluations WHERE sample_id = ? ORDER BY id DESC", [sample_id])


def measurements_for(db: sqlite_utils.Database, evaluation_id: int) -> list[Measurement]:
    return _all(db, Measurement, "SELECT * FROM measurements WHERE evaluation_id = ? ORDER BY id", [evaluation_id])


def labels_for(db: sqlite_utils.Database, sample_id: int) -> list[Label]:
    """A person's triage of a sample, newest first."""
    return _all(db, Label, "SELECT * FROM labels WHERE sample_id = ? ORDER BY id DESC", [sample_id])


def current_label(db: sqlite_utils.Database, sample_id: int) -> Label | None:
    """A sample's newest label (the current one; it may be one that clears: `is_cleared`)."""
    return _one(db, Label, "SELECT * FROM labels WHERE sample_id = ? ORDER BY id DESC LIMIT 1", [sample_id])


def is_cleared(label: Label | None) -> bool:
    """A label that says nothing (no category, no note, no Fixit mark): the person cleared the
    sample's label. The row stays as history; the sample counts as not labelled."""
    return label is not None and label.category is None and not label.note and not label.fixit_candidate


# Whether the sample `{sid}` is labelled now: its newest label says something (a cleared label,
# which says nothing, leaves it unlabelled). For the listings' and the triage's counts.
LABELLED_SQL = (
    "EXISTS (SELECT 1 FROM labels lx WHERE lx.id = (SELECT MAX(ly.id) FROM labels ly WHERE ly.sample_id = {sid})"
    " AND (lx.category IS NOT NULL OR lx.note <> '' OR lx.fixit_candidate = 1))"
)


def label_counts(db: sqlite_utils.Database) -> dict[str, int]:
    """Samples by the state of their current label: `labelled`, `cleared` (had a label, now cleared)."""
    row = db.execute(
        "SELECT SUM(CASE WHEN l.category IS NOT NULL OR l.note <> '' OR l.fixit_candidate = 1 THEN 1 ELSE 0 END),"
        " SUM(CASE WHEN l.category IS NULL AND l.note = '' AND l.fixit_candidate = 0 THEN 1 ELSE 0 END)"
        " FROM labels l WHERE l.id IN (SELECT MAX(id) FROM labels GROUP BY sample_id)"
    ).fetchone()
    return {"labelled": int(row[0] or 0), "cleared": int(row[1] or 0)}


@dataclass(frozen=True)
class LabelContext:
    """What the label dialog needs, and nothing more (read in one small query)."""

    sample_id: int
    automatic: str | None  # the category of the evaluation that speaks (db/verdict.py)
    label: Label | None  # the current label in the store
    shown: Evaluation | None = None  # the evaluation that speaks, whose notes (not run, held-out) the dialog says
    evaluations: list[Evaluation] = field(default_factory=list)  # every one of the sample's, for "older engine"


def label_context(db: sqlite_utils.Database, sample_id: int) -> LabelContext | None:
    """The label dialog's context of a sample, or None when there is no such sample."""
    if db.execute("SELECT 1 FROM samples WHERE id = ?", [sample_id]).fetchone() is None:
        return None
    shown = db.execute(f"SELECT id FROM evaluations WHERE id = {verdict.shown_for(db, ':sample_id')}",
                       {"sample_id": sample_id}).fetchone()
    # The verdict's own fields only: a GEMM's PTX and SASS would make the dialog slow to open.
    evaluations = _all(db, Evaluation, "SELECT id, sample_id, engine_version, status, category, source, created_at, "
                       "correct, correct_heldout, executed FROM evaluations WHERE sample_id = ? ORDER BY id DESC",
                       [sample_id])
    speaking = next((e for e in evaluations if shown and e.id == shown[0]), None)
    return LabelContext(sample_id, speaking.category if speaking else None, current_label(db, sample_id), speaking,
                        evaluations)


def fixes_for(db: sqlite_utils.Database, sample_id: int) -> list[Fix]:
    """Fixes in which the sample is the failed or the fixed one."""
    return _all(
        db, Fix, "SELECT * FROM fixes WHERE failed_sample_id = ? OR fixed_sample_id = ? ORDER BY id", [sample_id, sample_id]
    )


# -- search ------------------------------------------------------------------------


def fts_query(text: str) -> str:
    """Words → an FTS5 query matching all of them. Each word is quoted as a
    phrase, so PTX names (`cp.async.bulk`, `mbarrier::complete_tx`) and stray
    quotes or operators are plain text; a trailing `*` keeps its prefix meaning."""
    terms = []
    # NUL ends a C string inside SQLite's query parser; it can never be meant.
    for word in text.replace("\x00", " ").split():
        prefix = len(word) > 1 and word.endswith("*")
        word = word.rstrip("*") if prefix else word
        if not word.strip('"'):
            continue
        terms.append('"' + word.replace('"', '""') + '"' + ("*" if prefix else ""))
    return " ".join(terms)


def search_samples(
    db: sqlite_utils.Database,
    query: str,
    *,
    task_id: str | None = None,
    model_id: int | None = None,
    include_evaluations: bool = True,
    limit: int = 50,
    offset: int = 0,
) -> list[Sample]:
    """Samples whose code, response or source, or (with `include_evaluations`)
    whose judgements' evidence, assembler log or category, hold every word of
    `query`; best matches first."""
    match = fts_query(query)
    if not match:
        return []
    hits = "SELECT rowid AS sample_id, rank FROM samples_fts WHERE samples_fts MATCH :q"
    if include_evaluations:
        hits += (
            " UNION ALL SELECT e.sample_id, evaluations_fts.rank FROM evaluations_fts"
            " JOIN evaluations e ON e.id = evaluations_fts.rowid WHERE evaluations_fts MATCH :q"
        )
    where = []
    params: dict[str, Any] = {"q": match, "limit": max(0, int(limit)), "offset": max(0, int(offset))}
    if task_id is not None:
        where.append("s.task_id = :task_id")
        params["task_id"] = task_id
    if model_id is not None:
        where.append("s.model_id = :model_id")
        params["model_id"] = model_id
    sql = (
        f"SELECT s.* FROM (SELECT sample_id, MIN(rank) AS best FROM ({hits}) GROUP BY sample_id) h"
        " JOIN samples s ON s.id = h.sample_id"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY h.best, s.id DESC LIMIT :limit OFFSET :offset"
    )
    try:
        return _all(db, Sample, sql, params)
    except sqlite3.OperationalError as exc:
        # Quoting makes every text a valid query; should FTS5 still refuse one,
        # the answer is "nothing found". A locked or broken store is not that.
        msg = str(exc).lower()
        if "locked" in msg or "no such" in msg or "malformed" in msg:
            raise
        return []
