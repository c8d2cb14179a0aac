"""Store access for model runs: finding a run to resume, and filling in a sample's candidate.

A model's raw response is stored the moment it arrives, as a sample whose
language is `none`; extracting the candidate from it comes after and fills in
language, code and manifest here. That is the only change a sample ever sees.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import sqlite_utils

from ptxbench.db.queries import _all, _one, get_sample
from ptxbench.db.records import Run, Sample, content_hash, to_row
from ptxbench.db.store import write_transaction
from ptxbench.db.writes import LANGUAGES, InvalidRecord


def find_run(db: sqlite_utils.Database, model_id: int, name: str) -> Run | None:
    """The newest run of this model with this name (a rerun of the same command resumes it)."""
    return _one(db, Run, "SELECT * FROM runs WHERE model_id = ? AND name = ? ORDER BY id DESC LIMIT 1",
                [model_id, name])


def update_run_params(db: sqlite_utils.Database, run_id: int, params: dict[str, Any]) -> None:
    """Record what a resumed run was last asked for (samples, turns, tasks, endpoint)."""
    row = to_row(Run(model_id=0, name="-", params=params))
    with write_transaction(db):
        cur = db.execute("UPDATE runs SET params = ?, finished_at = NULL WHERE id = ?", [row["params"], run_id])
        if cur.rowcount != 1:
            raise InvalidRecord(f"update_run_params: no run with id {run_id}")


def run_samples(db: sqlite_utils.Database, run_id: int) -> list[Sample]:
    return _all(db, Sample, "SELECT * FROM samples WHERE run_id = ? ORDER BY task_id, sample_index, turn, id",
                [run_id])


def set_sample_candidate(db: sqlite_utils.Database, sample_id: int, language: str, code: str,
                         manifest: dict[str, Any] | None) -> Sample:
    """Fill in the candidate extracted from a stored response. Only a sample still
    without a candidate (language `none`) may be filled; the response itself never changes."""
    if language not in LANGUAGES:
        raise InvalidRecord(f"sample.language must be one of {LANGUAGES}, got {language!r}")
    probe = to_row(Sample(task_id="-", language=language, source="-", manifest=manifest))
    with write_transaction(db):
        found = get_sample(db, sample_id)
        if found is None:
            raise InvalidRecord(f"set_sample_candidate: no sample with id {sample_id}")
        if found.language != "none":
            raise InvalidRecord(f"set_sample_candidate: sample {sample_id} already holds a {found.language} candidate")
        digest = content_hash(code, manifest)
        db.execute("UPDATE samples SET language = ?, code = ?, manifest = ?, content_hash = ? WHERE id = ?",
                   [language, code, probe["manifest"], digest, sample_id])
    return replace(found, language=language, code=code, manifest=manifest, content_hash=digest)
