"""Read queries for the explorer: paged, filtered and aggregated in SQL.

Every query takes a plain `sqlite3.Connection` opened by `connect()` in the
thread that uses it (SQLite connections are bound to their thread) and
returns dataclasses. Every value from the user is a bound parameter; column
and table names come only from the fixed tables below.

A sample's verdict is the evaluation that speaks for it under the rule of
db/verdict.py (a complete judgement before a partial one, then the newest
engine version; or the newest row where the person asked for it), and what
it says (correct per split, its notes) is defined there too; the other
evaluations stay in its history. A person's triage is the newest row in `labels`, shown beside
the automatic category, never instead of it.

The explorer reads through `ptxbench.db.reader.StoreReader`; `connect()` is
for scripts and tests.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ptxbench.db import verdict
from ptxbench.db.browse_sample import (
    LEVEL, MODEL_ID, Coverage, SampleDetail, coverage_of, fix_partner, load_json, sample_detail,
)
from ptxbench.db.queries import LABELLED_SQL, fts_query
from ptxbench.db.records import Evaluation
from ptxbench.db.store import StoreError, connect_reader

# SampleDetail, sample_detail, fix_partner and coverage_of live in browse_sample.py; the views read them from here.
__all__ = ["Coverage", "Evaluation", "SampleDetail", "StoreError", "connect", "coverage_of", "fix_partner", "fts_query",
           "sample_detail"]


_local = threading.local()


def connect(path: str | Path, *, cached: bool = True) -> sqlite3.Connection:
    """A read-only connection for the calling thread, for scripts and tests (through
    the store's own checks: a corrupt, foreign or too-new file is a `StoreError`).
    With `cached` it is kept per thread and path and reused."""
    key = str(Path(path).resolve())
    pool: dict[str, sqlite3.Connection] = _local.__dict__.setdefault("pool", {})
    if cached and key in pool:
        return pool[key]
    conn = connect_reader(Path(key))
    if cached:
        pool[key] = conn
    return conn


def shown_join(conn: sqlite3.Connection) -> str:
    """`LEFT JOIN evaluations e` on the evaluation that speaks for `s` (db/verdict.py)."""
    return f" LEFT JOIN evaluations e ON e.id = {verdict.shown_for(conn)}"


class ChangeWatch:
    """Whether another connection committed to the store since the last look: PRAGMA data_version
    on a connection of its own (SQLite answers from the WAL index, without reading the file).
    Used from one thread at a time; closed from any."""

    def __init__(self, path: str | Path) -> None:
        self._conn: sqlite3.Connection | None = connect_reader(Path(path), create=False, shared=True)
        self._seen = self._version()

    def _version(self) -> int:
        assert self._conn is not None
        return self._conn.execute("PRAGMA data_version").fetchone()[0]

    def changed(self) -> bool:
        if self._conn is None:
            return False
        now = self._version()
        moved, self._seen = now != self._seen, now
        return moved

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def close_thread_connections() -> None:
    for conn in _local.__dict__.pop("pool", {}).values():
        conn.close()


# --------------------------------------------------------------------------- filters


@dataclass(frozen=True)
class SampleFilter:
    """What the samples table shows. Empty fields do not filter."""

    task_id: str = ""
    model: str = ""
    arch: str = ""
    context_level: str = ""
    category: str = ""
    text: str = ""  # full-text search over code and evidence
    note: str = ""  # db/verdict.NOTE_NOT_RUN or NOTE_HELDOUT: only verdicts that never ran, or that fail at held-out sizes
    label: str = ""  # the category of a person's latest label
    labelled_only: bool = False
    fixit_only: bool = False

    def with_(self, **changes: Any) -> "SampleFilter":
        return replace(self, **changes)

    def describe(self) -> str:
        parts = [
            f"{name}={value}"
            for name, value in (
                ("task", self.task_id),
                ("model", self.model),
                ("arch", self.arch),
                ("level", self.context_level),
                ("category", self.category),
                ("verdict", " · ".join(verdict.NOTE_TEXT.get(w, w) for w in self.note.split())),
                ("label", self.label),
                ("search", self.text),
            )
            if value
        ]
        if self.labelled_only:
            parts.append("labelled")
        if self.fixit_only:
            parts.append("fixit")
        return ", ".join(parts) or "all samples"


@dataclass(frozen=True)
class FtsTables:
    """The store's full-text indexes, found by what they index (the store owns their names)."""

    samples: str | None = None  # rowid = samples.id
    evaluations: str | None = None  # rowid = evaluations.id


def find_fts(conn: sqlite3.Connection) -> FtsTables:
    rows = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%'"
    ).fetchall()
    found: dict[str, str] = {}
    for name, sql in rows:
        low = (sql or "").lower()
        if "fts5" not in low and "fts4" not in low:
            continue
        content = re.search(r"content\s*=\s*['\"\[]?(\w+)", low)
        target = content.group(1) if content else re.sub(r"_fts$", "", name.lower())
        if target in ("samples", "evaluations") and target not in found:
            found[target] = name
    return FtsTables(samples=found.get("samples"), evaluations=found.get("evaluations"))


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _where(flt: SampleFilter, fts: FtsTables) -> tuple[str, list[Any], bool]:
    """WHERE clause, parameters, and whether it needs the latest evaluation joined.

    Each condition is written so an index answers it (task, model, run,
    evaluation category), which keeps a filter change fast on a big store.
    """
    clauses: list[str] = []
    params: list[Any] = []
    needs_eval = False
    if flt.task_id:
        clauses.append("s.task_id = ?")
        params.append(flt.task_id)
    if flt.model:
        clauses.append(
            "(s.model_id IN (SELECT id FROM models WHERE name = ?) OR (s.model_id IS NULL AND s.run_id IN "
            "(SELECT r2.id FROM runs r2 JOIN models m2 ON m2.id = r2.model_id WHERE m2.name = ?)))"
        )
        params.extend([flt.model, flt.model])
    if flt.arch:
        clauses.append("s.task_id IN (SELECT id FROM tasks WHERE arch = ?)")
        params.append(flt.arch)
    if flt.context_level:
        clauses.append("(s.run_id IN (SELECT id FROM runs WHERE context_level = ?) OR (? = 'none' AND s.run_id IS NULL))")
        params.extend([flt.context_level, flt.context_level])
    if flt.category:
        needs_eval = True
        if flt.category == "unevaluated":
            clauses.append("NOT EXISTS (SELECT 1 FROM evaluations x WHERE x.sample_id = s.id)")
        elif flt.category in ("skipped", "not run"):  # the GPU stages never ran: a hardware skip or static-only
            clauses.append("s.id IN (SELECT sample_id FROM evaluations WHERE status <> 'judged') AND e.status <> 'judged'")
        else:
            clauses.append("s.id IN (SELECT sample_id FROM evaluations WHERE category = ?) AND e.category = ?")
            params.extend([flt.category, flt.category])
    if flt.note:
        # Exactly the verdicts with this note (db/verdict.py), as a triage row counts them.
        needs_eval = True
        clauses.append(f"e.id IS NOT NULL AND {verdict.note_sql(older=False)} = ?")
        params.append(flt.note)
    if flt.label:
        clauses.append(f"s.id IN (SELECT sample_id FROM labels WHERE category = ?) AND ({_LATEST_LABEL_COL.format(col='l.category')}) = ?")
        params.extend([flt.label, flt.label])
    if flt.labelled_only:
        clauses.append(LABELLED_SQL.format(sid="s.id"))     # a cleared label is no label
    if flt.fixit_only:
        clauses.append(
            f"s.id IN (SELECT sample_id FROM labels WHERE fixit_candidate = 1) AND ({_LATEST_LABEL_COL.format(col='l.fixit_candidate')}) = 1"
        )
    if flt.text.strip():
        query = fts_query(flt.text)
        alternatives: list[str] = []
        if fts.samples and query:
            alternatives.append(f"s.id IN (SELECT rowid FROM {_quote_ident(fts.samples)} WHERE {_quote_ident(fts.samples)} MATCH ?)")
            params.append(query)
        if fts.evaluations and query:
            alternatives.append(
                "s.id IN (SELECT ev.sample_id FROM evaluations ev WHERE ev.id IN "
                f"(SELECT rowid FROM {_quote_ident(fts.evaluations)} WHERE {_quote_ident(fts.evaluations)} MATCH ?))"
            )
            params.append(query)
        if not alternatives and (fts.samples or fts.evaluations):
            # Only quotes and stars, no word (`""`, `**`): FTS5 refuses an empty MATCH, and, as in
            # search_samples, such a search finds nothing.
            alternatives.append("0")
        if not alternatives:
            # No index in this store: a plain scan still answers, only slower.
            alternatives.append("(instr(s.code, ?) > 0 OR instr(s.source, ?) > 0)")
            params.extend([flt.text.strip(), flt.text.strip()])
        clauses.append("(" + " OR ".join(alternatives) + ")")
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params, needs_eval


_LATEST_LABEL_COL = "SELECT {col} FROM labels l WHERE l.sample_id = s.id ORDER BY l.id DESC LIMIT 1"

def sample_from(conn: sqlite3.Connection) -> str:
    """FROM samples `s` with its task `t`, run `r`, model `m` and shown evaluation `e`."""
    return f"""
FROM samples s
JOIN tasks t ON t.id = s.task_id
LEFT JOIN runs r ON r.id = s.run_id
LEFT JOIN models m ON m.id = {MODEL_ID}
{shown_join(conn)}
"""

# --------------------------------------------------------------------------- samples


@dataclass(frozen=True)
class SampleRow:
    id: int
    task_id: str
    arch: str
    model: str
    context_level: str
    turn: int
    sample_index: int
    source: str
    evaluation_id: int | None
    category: str | None
    status: str | None
    speedup: float | None
    time_ms: float | None
    label: str | None
    fixit: bool


@dataclass(frozen=True)
class Page:
    rows: list[SampleRow]
    offset: int
    limit: int


_SAMPLE_COLUMNS = f"""
SELECT s.id, s.task_id, t.arch, COALESCE(m.name, '?'), {LEVEL}, s.turn, s.sample_index, s.source,
       e.id, e.category, e.status, e.speedup, e.time_ms,
       ({_LATEST_LABEL_COL.format(col="COALESCE(l.category, CASE WHEN l.note <> '' THEN '(note)' END)")}),
       COALESCE(({_LATEST_LABEL_COL.format(col='l.fixit_candidate')}), 0)
"""


def _sample_row(row: tuple) -> SampleRow:
    return SampleRow(*row[:14], fixit=bool(row[14]))


def sample_page(conn: sqlite3.Connection, flt: SampleFilter, offset: int = 0, limit: int = 200) -> Page:
    """One page of samples, newest first."""
    # Ids first, columns second: the planner then sorts bare ids, and the
    # per-row subqueries (latest evaluation, latest label) run for one page only.
    where, params, needs_eval = _where(flt, find_fts(conn))
    joins = shown_join(conn) if needs_eval else ""
    ids = [r[0] for r in conn.execute(
        f"SELECT s.id FROM samples s{joins}{where} ORDER BY s.id DESC LIMIT ? OFFSET ?", [*params, limit, offset]
    )]
    if not ids:
        return Page(rows=[], offset=offset, limit=limit)
    marks = ",".join("?" * len(ids))
    rows = conn.execute(f"{_SAMPLE_COLUMNS} {sample_from(conn)} WHERE s.id IN ({marks}) ORDER BY s.id DESC", ids).fetchall()
    return Page(rows=[_sample_row(r) for r in rows], offset=offset, limit=limit)


def sample_count(conn: sqlite3.Connection, flt: SampleFilter) -> int:
    where, params, needs_eval = _where(flt, find_fts(conn))
    joins = shown_join(conn) if needs_eval else ""
    return conn.execute(f"SELECT COUNT(*) FROM samples s{joins}{where}", params).fetchone()[0]


def sample_ids(conn: sqlite3.Connection, flt: SampleFilter, limit: int = 10_000) -> list[int]:
    """The ids a filter selects (for batch re-verification), newest first."""
    where, params, needs_eval = _where(flt, find_fts(conn))
    joins = shown_join(conn) if needs_eval else ""
    rows = conn.execute(f"SELECT s.id FROM samples s{joins}{where} ORDER BY s.id DESC LIMIT ?", [*params, limit])
    return [r[0] for r in rows]


# --------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class TaskRow:
    id: str
    title: str
    operation: str
    arch: str
    families: list[str]
    spec: dict[str, Any]
    expert_path: str | None
    source: str
    samples: int

    @property
    def sizes(self) -> dict[str, Any]:
        return self.spec.get("sizes", {}) if isinstance(self.spec, dict) else {}

    def sizes_text(self) -> str:
        sizes = self.sizes
        if "headline" in sizes:
            return " ".join(f"{k}{v}" for k, v in sizes["headline"].items())
        return ""


def tasks(conn: sqlite3.Connection) -> list[TaskRow]:
    sql = """SELECT t.id, t.title, t.operation, t.arch, t.families, t.spec, t.expert_path, t.source,
                    (SELECT COUNT(*) FROM samples s WHERE s.task_id = t.id)
             FROM tasks t ORDER BY t.arch, t.id"""
    return [
        TaskRow(r[0], r[1], r[2], r[3], load_json(r[4], []), load_json(r[5], {}), r[6], r[7], r[8])
        for r in conn.execute(sql)
    ]


def task(conn: sqlite3.Connection, task_id: str) -> TaskRow | None:
    return next((t for t in tasks(conn) if t.id == task_id), None)


def sample_archs(conn: sqlite3.Connection, ids: list[int]) -> list[str]:
    """The archs of these samples' tasks (what a re-verify needs a GPU of)."""
    rows = conn.execute("SELECT DISTINCT t.arch FROM samples s JOIN tasks t ON t.id = s.task_id "
                        "WHERE s.id IN (SELECT value FROM json_each(?)) ORDER BY t.arch", [json.dumps(list(ids))])
    return [r[0] for r in rows]


def expert_sample_id(conn: sqlite3.Connection, task_id: str) -> int | None:
    row = conn.execute(
        """SELECT s.id FROM samples s LEFT JOIN models m ON m.id = s.model_id
           WHERE s.task_id = ? AND (m.kind = 'expert' OR s.source = 'expert')
           ORDER BY s.id DESC LIMIT 1""",
        (task_id,),
    ).fetchone()
    return row[0] if row else None


# --------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class ModelBest:
    """A model's representative sample for a task: the fastest that passes (correct at every size it
    ran at, db/verdict.passes_sql), else the fastest correct on the train sizes, else the newest."""

    model: str
    sample_id: int
    samples: int
    category: str | None
    speedup: float | None
    time_ms: float | None
    resources: dict[str, Any]
    ptx_families: list[str]
    sass_families: list[str]
    correct_rate: float | None  # train sizes: correct / known (never-run samples are not known)
    correct_heldout_rate: float | None = None  # held-out sizes, the same way
    note: str = ""  # the representative's verdict note (db/verdict.py)
    passes: bool = False  # the representative passes: only then is its speed worth comparing


def compare(conn: sqlite3.Connection, task_id: str, context_level: str = "") -> list[ModelBest]:
    level_clause, params = "", [task_id]
    if context_level:
        level_clause = f" AND {LEVEL} = ?"
        params.append(context_level)
    passes = verdict.passes_sql()
    sql = f"""
    SELECT COALESCE(m.name, '?') AS model, s.id, e.category, e.speedup, e.time_ms, e.resources,
           e.ptx_families, e.sass_families, {verdict.correct_sql("train")}, {verdict.correct_sql("heldout")},
           {verdict.note_sql()}, COALESCE({passes}, 0)
    {sample_from(conn)} WHERE s.task_id = ?{level_clause}
    ORDER BY model, COALESCE({passes}, 0) DESC, (e.status = '{verdict.COMPLETE_STATUS}' AND e.correct = 1) DESC,
             e.speedup DESC, s.id DESC
    """
    best: dict[str, ModelBest] = {}
    totals: dict[str, list[int]] = {}
    for model, sid, cat, speed, t_ms, res, pf, sf, correct, correct_ho, note, ok in conn.execute(sql, params):
        tally = totals.setdefault(model, [0, 0, 0, 0, 0])
        tally[0] += 1
        for i, value in ((1, correct), (3, correct_ho)):
            if value is not None:  # unknown (never run) is left out, as in every rate
                tally[i] += 1
                tally[i + 1] += value
        if model not in best:
            best[model] = ModelBest(model, sid, 0, cat, speed, t_ms, load_json(res, {}), load_json(pf, []),
                                    load_json(sf, []), None, note=note or "", passes=bool(ok))
    rate = lambda known, true: true / known if known else None
    return [replace(mb, samples=totals[model][0], correct_rate=rate(*totals[model][1:3]),
                    correct_heldout_rate=rate(*totals[model][3:5]))
            for model, mb in best.items()]


def schema_version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def store_summary(conn: sqlite3.Connection) -> dict[str, int]:
    return {
        table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        for table in ("tasks", "models", "runs", "samples", "evaluations", "fixes", "labels")
    }
