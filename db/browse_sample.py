"""One sample for the explorer: its judgements, the one that speaks, labels and fixes.

Also the SQL pieces every listing shares (a sample's model and context
level), so db/browse.py and this module say them once.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

from ptxbench.db import queries, verdict
from ptxbench.db.records import Evaluation, Fix, Label, Measurement

# A sample's model: its own, or its run's.
MODEL_ID = "COALESCE(s.model_id, r.model_id)"
LEVEL = "COALESCE(r.context_level, 'none')"


def load_json(text: str | None, default: Any) -> Any:
    if not text:
        return default
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return default


@dataclass(frozen=True)
class SampleDetail:
    """A sample with its judgements, labels and fixes (records from db/records.py)."""

    id: int
    task_id: str
    arch: str
    families: list[str]
    model: str
    context_level: str
    turn: int
    parent_id: int | None
    language: str
    code: str
    manifest: str | None
    source: str
    evaluations: list[Evaluation]  # every judgement, newest first: the history
    measurements: list[Measurement]  # of the shown evaluation
    labels: list[Label]  # newest first
    fixes: list[Fix] = field(default_factory=list)
    shown_id: int | None = None  # the evaluation that speaks for the sample (db/verdict.py)

    @property
    def shown(self) -> Evaluation | None:
        return next((e for e in self.evaluations if e.id == self.shown_id), None)

    @property
    def latest(self) -> Evaluation | None:
        """What the views show as the sample's verdict: the shown evaluation, which is the
        newest only when the rule picks it (see `evaluations` for the newest)."""
        return self.shown

    @property
    def label(self) -> Label | None:
        return self.labels[0] if self.labels else None

    @property
    def ptx(self) -> str:
        """The PTX judged (nvcc's output for CUDA candidates), else the code itself."""
        shown = self.shown
        if shown and shown.ptx:
            return shown.ptx
        return self.code


def sample_detail(conn: sqlite3.Connection, sample_id: int) -> SampleDetail | None:
    row = conn.execute(
        f"""SELECT s.id, s.task_id, t.arch, t.families, COALESCE(m.name, '?'), {LEVEL}, s.turn, s.parent_id,
                   s.language, s.code, s.manifest, s.source, {verdict.shown_for(conn)}
            FROM samples s JOIN tasks t ON t.id = s.task_id
            LEFT JOIN runs r ON r.id = s.run_id LEFT JOIN models m ON m.id = {MODEL_ID}
            WHERE s.id = ?""",
        (sample_id,),
    ).fetchone()
    if row is None:
        return None
    db = sqlite_utils.Database(conn, execute_plugins=False)
    evaluations = queries.evaluations_for(db, sample_id)
    shown_id = row[12]
    measurements = queries.measurements_for(db, shown_id) if shown_id is not None else []
    return SampleDetail(
        row[0], row[1], row[2], load_json(row[3], []), row[4], row[5], row[6], row[7], row[8], row[9], row[10], row[11],
        evaluations, sorted(measurements, key=lambda m: (m.split != "train", m.id or 0)),
        queries.labels_for(db, sample_id), queries.fixes_for(db, sample_id), shown_id,
    )


def fix_partner(conn: sqlite3.Connection, sample_id: int) -> int | None:
    """The sample to diff against: its fix (or the sample it fixes), else the turn it follows, else the turn that follows it."""
    row = conn.execute(
        """SELECT CASE WHEN failed_sample_id = ? THEN fixed_sample_id ELSE failed_sample_id END
           FROM fixes WHERE failed_sample_id = ? OR fixed_sample_id = ? ORDER BY id LIMIT 1""",
        (sample_id, sample_id, sample_id),
    ).fetchone()
    if row:
        return row[0]
    row = conn.execute("SELECT parent_id FROM samples WHERE id = ?", (sample_id,)).fetchone()
    if row and row[0]:
        return row[0]
    row = conn.execute("SELECT id FROM samples WHERE parent_id = ? ORDER BY id LIMIT 1", (sample_id,)).fetchone()
    return row[0] if row else None


@dataclass(frozen=True)
class FamilyRuns:
    """One requested family as the marked copy saw it (engine/coverage.py), over the sizes it looked at."""
    family: str
    ran: int                                        # sizes where it ran
    looked: int                                     # sizes whose slots were read
    sites: int | None                               # instructions marked
    not_ran: list[tuple[str, str, dict[str, Any]]]  # (state, split, sizes) where it did not run


@dataclass(frozen=True)
class Coverage:
    note: str | None                                # why no copy was made, if none was
    families: list[FamilyRuns]
    unseen: list[tuple[str, dict[str, Any], str]]   # (split, sizes, why) of sizes not looked at


def coverage_of(evidence: Any) -> Coverage | None:
    """An evaluation's (or a judgement's) `coverage` evidence, per family; None where there is none."""
    cov = evidence.get("coverage") if isinstance(evidence, dict) else None
    if not isinstance(cov, dict):
        return None
    rows = [r for r in cov.get("sizes", []) if isinstance(r, dict)]
    families = []
    for family in cov.get("families", []):
        looked = [r for r in rows if isinstance(r.get("families"), dict) and family in r["families"]]
        not_ran = [(str(r["families"][family]), str(r.get("split")), dict(r.get("sizes") or {}))
                   for r in looked if r["families"][family] != "ran"]
        families.append(FamilyRuns(str(family), len(looked) - len(not_ran), len(looked),
                                   (cov.get("sites") or {}).get(family), not_ran))
    unseen = [(str(r.get("split")), dict(r.get("sizes") or {}), str(r["note"])) for r in rows if r.get("note")]
    return Coverage(str(cov["note"]) if cov.get("note") else None, families, unseen)
