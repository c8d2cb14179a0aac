"""Writing to the store: every insert goes through here, as dataclasses.

Rules the functions keep:
- every row says where it came from (`source` must not be empty);
- evaluations and their measurements are written together in one
  transaction and never updated (the schema refuses an UPDATE too);
- a person's label is its own row beside the automatic category.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

import sqlite_utils

from ptxbench.db.records import (
    Evaluation,
    Fix,
    Label,
    Measurement,
    Model,
    Record,
    Run,
    Sample,
    Task,
    content_hash,
    to_row,
)
from ptxbench.db.queries import get_model, get_run
from ptxbench.db.store import StoreError, now_iso, write_transaction
from ptxbench.engine.categories import STAGE_OF, is_category

LANGUAGES = ("ptx", "cuda", "none")
CONTEXT_LEVELS = ("none", "brief", "full")
SPLITS = ("train", "heldout")


class InvalidRecord(StoreError, ValueError):
    """A record the store refuses: the message names the field."""


def _insert(db: sqlite_utils.Database, record: Record) -> int:
    row = to_row(record)
    row.pop("id", None)
    cols = list(row)
    # Table and column names come from the dataclass definitions, never from input.
    sql = f"INSERT INTO {record.TABLE} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
    try:
        return db.execute(sql, [row[c] for c in cols]).lastrowid
    except sqlite3.IntegrityError as exc:
        raise InvalidRecord(f"cannot add to {record.TABLE}: {exc}") from None


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidRecord(message)


def _exists(db: sqlite_utils.Database, table: str, key: object, column: str = "id") -> bool:
    return db.execute(f"SELECT 1 FROM {table} WHERE {column} = ?", [key]).fetchone() is not None


# -- tasks, models, runs ----------------------------------------------------------


def upsert_task(db: sqlite_utils.Database, task: Task) -> Task:
    """Insert the task or bring its row up to date (tasks are data from the specs,
    so the newest spec wins; samples keep pointing at the same id)."""
    _require(bool(task.id), "task.id is empty")
    _require(bool(task.source), f"task {task.id}: source is empty")
    task = replace(task, updated_at=task.updated_at or now_iso())
    row = to_row(task)
    cols = list(row)
    updates = ", ".join(f"{c} = excluded.{c}" for c in cols if c != "id")
    with write_transaction(db):
        db.execute(
            f"INSERT INTO tasks ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)}) "
            f"ON CONFLICT(id) DO UPDATE SET {updates}",
            [row[c] for c in cols],
        )
    return task


def get_or_create_model(
    db: sqlite_utils.Database,
    name: str,
    *,
    kind: str = "model",
    source: str | None = None,
    endpoint: str | None = None,
    params: dict | None = None,
    seed_key: str | None = None,
) -> Model:
    """The model called `name`, created if missing (an existing row is returned as is)."""
    _require(bool(name), "model name is empty")
    with write_transaction(db):
        found = get_model(db, name)
        if found is not None:
            return found
        model = Model(
            name=name,
            kind=kind,
            source=source or f"{kind}:{name}",
            endpoint=endpoint,
            params=params or {},
            created_at=now_iso(),
            seed_key=seed_key,
        )
        return replace(model, id=_insert(db, model))


def create_run(db: sqlite_utils.Database, run: Run) -> Run:
    _require(run.id is None, "create_run: the run already has an id")
    _require(run.context_level in CONTEXT_LEVELS, f"run.context_level must be one of {CONTEXT_LEVELS}, got {run.context_level!r}")
    _require(bool(run.name), "run.name is empty")
    run = replace(run, source=run.source or f"run:{run.name}", started_at=run.started_at or now_iso())
    with write_transaction(db):
        _require(_exists(db, "models", run.model_id), f"run {run.name}: no model with id {run.model_id}")
        return replace(run, id=_insert(db, run))


def finish_run(db: sqlite_utils.Database, run_id: int, finished_at: str | None = None) -> None:
    with write_transaction(db):
        cur = db.execute("UPDATE runs SET finished_at = ? WHERE id = ?", [finished_at or now_iso(), run_id])
        _require(cur.rowcount == 1, f"finish_run: no run with id {run_id}")


# -- samples, evaluations ------------------------------------------------------------


def add_sample(db: sqlite_utils.Database, sample: Sample) -> Sample:
    """Store one candidate; its content hash is computed here from code and manifest.
    The model defaults to the run's model."""
    _require(sample.id is None, "add_sample: the sample already has an id")
    _require(bool(sample.source), "sample.source is empty: every sample says where it came from")
    _require(sample.language in LANGUAGES, f"sample.language must be one of {LANGUAGES}, got {sample.language!r}")
    _require(sample.turn >= 1, f"sample.turn is 1-based, got {sample.turn}")
    sample = replace(
        sample,
        content_hash=content_hash(sample.code or "", sample.manifest),
        created_at=sample.created_at or now_iso(),
    )
    with write_transaction(db):
        _require(_exists(db, "tasks", sample.task_id), f"sample: unknown task {sample.task_id!r} (upsert_task first)")
        if sample.run_id is not None:
            run = get_run(db, sample.run_id)
            _require(run is not None, f"sample: no run with id {sample.run_id}")
            if sample.model_id is None:
                sample = replace(sample, model_id=run.model_id)  # type: ignore[union-attr]
        if sample.model_id is not None:
            _require(_exists(db, "models", sample.model_id), f"sample: no model with id {sample.model_id}")
        if sample.parent_id is not None:
            _require(_exists(db, "samples", sample.parent_id), f"sample: parent {sample.parent_id} does not exist")
        return replace(sample, id=_insert(db, sample))


def add_evaluation(
    db: sqlite_utils.Database, evaluation: Evaluation, measurements: Iterable[Measurement] = ()
) -> Evaluation:
    """Append one judgement of a sample with its per-size measurements, in one
    transaction: either all of it lands or none of it."""
    measurements = list(measurements)
    _require(evaluation.id is None, "add_evaluation: evaluations are append-only; this one already has an id")
    _require(is_category(evaluation.category), f"evaluation.category {evaluation.category!r} is not ok or a vocabulary word")
    _require(bool(evaluation.status), "evaluation.status is empty")
    _require(bool(evaluation.engine_version), "evaluation.engine_version is empty")
    _require(bool(evaluation.source), "evaluation.source is empty: every evaluation says what made it")
    for i, m in enumerate(measurements):
        _require(m.split in SPLITS, f"measurement {i}: split must be one of {SPLITS}, got {m.split!r}")
        _require(is_category(m.category), f"measurement {i}: category {m.category!r} is not ok or a vocabulary word")
    evaluation = replace(
        evaluation,
        created_at=evaluation.created_at or now_iso(),
        stage=evaluation.stage or STAGE_OF.get(evaluation.category),
    )
    with write_transaction(db):
        _require(_exists(db, "samples", evaluation.sample_id), f"evaluation: no sample with id {evaluation.sample_id}")
        eval_id = _insert(db, evaluation)
        _add_measurements(db, eval_id, measurements)
    return replace(evaluation, id=eval_id)


def _add_measurements(db: sqlite_utils.Database, evaluation_id: int, measurements: Sequence[Measurement]) -> None:
    """Part of add_evaluation: measurements are only ever written with their evaluation."""
    if not measurements:
        return
    rows = [to_row(replace(m, evaluation_id=evaluation_id, id=None)) for m in measurements]
    cols = list(rows[0])
    sql = f"INSERT INTO measurements ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
    with write_transaction(db):
        db.conn.executemany(sql, [[r[c] for c in cols] for r in rows])


def add_fix(db: sqlite_utils.Database, fix: Fix) -> Fix:
    _require(fix.id is None, "add_fix: the fix already has an id")
    _require(bool(fix.explanation.strip()), "fix.explanation is empty")
    _require(bool(fix.explanation_source), "fix.explanation_source is empty")
    _require(bool(fix.source), "fix.source is empty")
    _require(fix.failed_sample_id != fix.fixed_sample_id, "a fix needs two different samples")
    fix = replace(fix, created_at=fix.created_at or now_iso())
    with write_transaction(db):
        for sid in (fix.failed_sample_id, fix.fixed_sample_id):
            _require(_exists(db, "samples", sid), f"fix: no sample with id {sid}")
        return replace(fix, id=_insert(db, fix))


def add_label(db: sqlite_utils.Database, label: Label) -> Label:
    """A person's triage of a sample: a new row, beside the automatic category."""
    _require(label.id is None, "add_label: the label already has an id")
    _require(bool(label.author), "label.author is empty")
    if label.category is not None:
        _require(is_category(label.category), f"label.category {label.category!r} is not ok or a vocabulary word")
    label = replace(label, created_at=label.created_at or now_iso())
    with write_transaction(db):
        _require(_exists(db, "samples", label.sample_id), f"label: no sample with id {label.sample_id}")
        return replace(label, id=_insert(db, label))


def insert_many(db: sqlite_utils.Database, records: Sequence[Record]) -> int:
    """Bulk insert of records of one type with `executemany`, inside the caller's
    transaction or a new one. Ids given are kept (so a bulk writer can link parents
    and children without reading back); the checks of the single-record functions
    are not repeated here, only the schema's. Returns the number of rows."""
    if not records:
        return 0
    kinds = {type(r) for r in records}
    _require(len(kinds) == 1, f"insert_many takes records of one type, got {sorted(k.__name__ for k in kinds)}")
    with_ids = {r.id is not None for r in records}  # type: ignore[attr-defined]
    _require(len(with_ids) == 1, "insert_many: give an id to every record or to none")
    first = to_row(records[0])
    cols = list(first)
    sql = f"INSERT INTO {records[0].TABLE} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
    with write_transaction(db):
        try:
            db.conn.executemany(sql, ([row[c] for c in cols] for row in map(to_row, records)))
        except sqlite3.IntegrityError as exc:
            raise InvalidRecord(f"cannot add to {records[0].TABLE}: {exc}") from None
    return len(records)


# The insert triggers that feed the full-text indexes, and the indexes they feed.
_FTS_INSERT_TRIGGERS = ("samples_ai", "evaluations_ai")
_FTS_TABLES = ("samples_fts", "evaluations_fts")


@contextlib.contextmanager
def bulk_load(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """One transaction for loading many rows: the full-text indexes are rebuilt
    once at the end instead of row by row (several times faster for 10⁵ rows).
    Other writers wait; readers keep seeing the store as it was until the commit."""
    with write_transaction(db):
        saved = db.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name IN (?, ?)", list(_FTS_INSERT_TRIGGERS)
        ).fetchall()
        for name, _ in saved:
            db.execute(f"DROP TRIGGER {name}")
        yield db
        for table in _FTS_TABLES:
            db.execute(f"INSERT INTO {table} ({table}) VALUES ('rebuild')")
        for _, sql in saved:
            db.execute(sql)


# -- claims: one process at a time works on a thing --------------------------------------------------

CLAIM_PREFIX = "claim:"
CLAIM_STALE_S = 3600.0  # a claim from another host is taken as abandoned after this long


def _owner() -> dict[str, object]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "at": time.time()}


def _claim_live(value: str) -> bool:
    try:
        owner = json.loads(value)
        pid, host, at = int(owner["pid"]), str(owner["host"]), float(owner["at"])
    except (ValueError, KeyError, TypeError):
        return False
    if host != socket.gethostname():
        return time.time() - at < CLAIM_STALE_S
    if pid == os.getpid():
        return False  # this process's own: taken again
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(db: sqlite_utils.Database, what: str) -> bool:
    """Take `what` (for example `judge:17`) for this process; False while another live process holds it.
    A claim of a process that has ended is taken over. Kept in `meta` as `claim:<what>`."""
    key = CLAIM_PREFIX + what
    with write_transaction(db):
        row = db.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        if row is not None and _claim_live(row[0]):
            return False
        db.execute(
            "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            [key, json.dumps(_owner()), now_iso()],
        )
    return True


def release(db: sqlite_utils.Database, what: str) -> None:
    """Give up this process's claim on `what` (another's is left alone)."""
    key = CLAIM_PREFIX + what
    with write_transaction(db):
        row = db.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        if row is None:
            return
        try:
            owner = json.loads(row[0])
            mine = int(owner["pid"]) == os.getpid() and owner["host"] == socket.gethostname()
        except (ValueError, KeyError, TypeError):
            mine = True
        if mine:
            db.execute("DELETE FROM meta WHERE key = ?", [key])
