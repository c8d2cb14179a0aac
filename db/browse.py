"""Read queries for the explorer: paged, filtered and aggregated in SQL.

Every query takes a plain `sqlite3.Connection` opened by `connect()` in the
thread that uses it (SQLite connections are bound to their thread) and
returns dataclasses. Every value from the user is a bound parameter; column
and table names come only from the fixed tables below.

A sample's verdict is its *latest* evaluation (evaluations are append-only,
so re-verifying adds a row and the newest one speaks for the sample). A
person's triage is the newest row in `labels`, shown beside the automatic
category, never instead of it.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ptxbench.db.queries import fts_query
from ptxbench.db.store import StoreError, open_store
from ptxbench.engine.categories import STAGE_OF

__all__ = ["StoreError", "connect", "fts_query"]  # and the queries below

# The latest evaluation of `s`: the index on evaluations(sample_id) holds the
# rowid, so this is one index probe per sample.
LATEST_EVAL = "(SELECT MAX(id) FROM evaluations WHERE sample_id = s.id)"
# A sample's model: its own, or its run's.
MODEL_ID = "COALESCE(s.model_id, r.model_id)"
LEVEL = "COALESCE(r.context_level, 'none')"
# Uses what was asked: the SASS verdict where the engine made one (it implies
# the PTX one), else the PTX verdict.
USES = "COALESCE(e.uses_sass, e.uses_ptx)"
SKIPPED = "(e.status LIKE 'skipped:%')"

_local = threading.local()


def connect(path: str | Path, *, cached: bool = True) -> sqlite3.Connection:
    """A read-only connection for the calling thread (through the store's own
    checks: a corrupt, foreign or too-new file is a `StoreError`).

    Connections are cached per thread and path, so a worker pool reuses its
    page cache between queries.
    """
    key = str(Path(path).resolve())
    pool: dict[str, sqlite3.Connection] = _local.__dict__.setdefault("pool", {})
    if cached and key in pool:
        return pool[key]
    conn = open_store(key, readonly=True).conn
    try:
        conn.execute("SELECT ln(1.0)").fetchone()
    except sqlite3.OperationalError:
        # SQLite built without the math functions: supply the one we use.
        conn.create_function("ln", 1, lambda x: math.log(x) if x and x > 0 else None, deterministic=True)
    if cached:
        pool[key] = conn
    return conn


def close_thread_connections() -> None:
    for conn in _local.__dict__.pop("pool", {}).values():
        conn.close()


def _json(text: str | None, default: Any) -> Any:
    if not text:
        return default
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return default


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
        elif flt.category == "skipped":
            clauses.append(f"s.id IN (SELECT sample_id FROM evaluations WHERE status LIKE 'skipped:%') AND {SKIPPED}")
        else:
            clauses.append("s.id IN (SELECT sample_id FROM evaluations WHERE category = ?) AND e.category = ?")
            params.extend([flt.category, flt.category])
    if flt.labelled_only:
        clauses.append("s.id IN (SELECT sample_id FROM labels)")
    if flt.fixit_only:
        clauses.append(
            f"s.id IN (SELECT sample_id FROM labels WHERE fixit_candidate = 1) AND ({_LATEST_LABEL_COL.format(col='fixit_candidate')}) = 1"
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


_LATEST_LABEL_COL = "SELECT l.{col} FROM labels l WHERE l.sample_id = s.id ORDER BY l.id DESC LIMIT 1"

_FROM = f"""
FROM samples s
JOIN tasks t ON t.id = s.task_id
LEFT JOIN runs r ON r.id = s.run_id
LEFT JOIN models m ON m.id = {MODEL_ID}
LEFT JOIN evaluations e ON e.id = {LATEST_EVAL}
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
       ({_LATEST_LABEL_COL.format(col='category')}),
       COALESCE(({_LATEST_LABEL_COL.format(col='fixit_candidate')}), 0)
"""


def _sample_row(row: tuple) -> SampleRow:
    return SampleRow(*row[:14], fixit=bool(row[14]))


def sample_page(conn: sqlite3.Connection, flt: SampleFilter, offset: int = 0, limit: int = 200) -> Page:
    """One page of samples, newest first."""
    # Ids first, columns second: the planner then sorts bare ids, and the
    # per-row subqueries (latest evaluation, latest label) run for one page only.
    where, params, needs_eval = _where(flt, find_fts(conn))
    joins = f" LEFT JOIN evaluations e ON e.id = {LATEST_EVAL}" if needs_eval else ""
    ids = [r[0] for r in conn.execute(
        f"SELECT s.id FROM samples s{joins}{where} ORDER BY s.id DESC LIMIT ? OFFSET ?", [*params, limit, offset]
    )]
    if not ids:
        return Page(rows=[], offset=offset, limit=limit)
    marks = ",".join("?" * len(ids))
    rows = conn.execute(f"{_SAMPLE_COLUMNS} {_FROM} WHERE s.id IN ({marks}) ORDER BY s.id DESC", ids).fetchall()
    return Page(rows=[_sample_row(r) for r in rows], offset=offset, limit=limit)


def sample_count(conn: sqlite3.Connection, flt: SampleFilter) -> int:
    where, params, needs_eval = _where(flt, find_fts(conn))
    joins = f" LEFT JOIN evaluations e ON e.id = {LATEST_EVAL}" if needs_eval else ""
    return conn.execute(f"SELECT COUNT(*) FROM samples s{joins}{where}", params).fetchone()[0]


def sample_ids(conn: sqlite3.Connection, flt: SampleFilter, limit: int = 10_000) -> list[int]:
    """The ids a filter selects (for batch re-verification), newest first."""
    where, params, needs_eval = _where(flt, find_fts(conn))
    joins = f" LEFT JOIN evaluations e ON e.id = {LATEST_EVAL}" if needs_eval else ""
    rows = conn.execute(f"SELECT s.id FROM samples s{joins}{where} ORDER BY s.id DESC LIMIT ?", [*params, limit])
    return [r[0] for r in rows]


# --------------------------------------------------------------------------- overview

# One pass over the store at the finest grain (model × task × arch × context
# level × category); the overview, the triage counts and the per-level plots
# are then folded from these cells in memory, so changing a filter or a
# grouping never re-reads 100 000 rows.


def _categories_of(stages: tuple[str, ...]) -> str:
    return ", ".join(f"'{c}'" for c, stage in STAGE_OF.items() if stage in stages)


# Per-sample facts, three-valued as in db/metrics.py: a NULL column is "not
# reached" (false) when the verdict failed at an earlier stage, else unknown
# (a hardware skip or a static-only judgement), which is left out of a rate.
_BEFORE_COMPILE = ("extract", "assemble")
_BEFORE_CORRECT = ("extract", "assemble", "load", "run", "verify")
COMPILED_TRI = f"CASE WHEN e.compiled IS NOT NULL THEN e.compiled WHEN e.category IN ({_categories_of(_BEFORE_COMPILE)}) THEN 0 END"
CORRECT_TRI = f"CASE WHEN e.correct IS NOT NULL THEN e.correct WHEN e.category IN ({_categories_of(_BEFORE_CORRECT)}) THEN 0 END"
USES_TRI = (
    "CASE WHEN e.uses_ptx = 0 OR e.uses_sass = 0 THEN 0 "
    f"WHEN {USES} IS NOT NULL THEN {USES} WHEN e.category IN ({_categories_of(_BEFORE_COMPILE)}) THEN 0 END"
)
FAST_1_TRI = (
    "CASE WHEN e.speedup IS NOT NULL AND e.speedup <= 1.0 THEN 0 "
    f"WHEN ({CORRECT_TRI}) = 0 OR ({USES_TRI}) = 0 THEN 0 "
    f"WHEN ({CORRECT_TRI}) IS NULL OR ({USES_TRI}) IS NULL OR e.speedup IS NULL THEN NULL ELSE 1 END"
)


@dataclass(frozen=True)
class Cell:
    model: str
    task_id: str
    arch: str
    context_level: str
    category: str | None  # None: never evaluated
    samples: int
    skipped: int  # evaluations that are a hardware skip, not a judgement
    compiled: tuple[int, int]  # (true, known)
    correct: tuple[int, int]
    uses: tuple[int, int]
    fast_1: tuple[int, int]
    best_speedup: float | None
    log_speedup_sum: float  # over correct samples with a speedup
    log_speedup_n: int


def cells(conn: sqlite3.Connection) -> list[Cell]:
    models = dict(conn.execute("SELECT id, name FROM models"))
    runs = {rid: (mid, level) for rid, mid, level in conn.execute("SELECT id, model_id, context_level FROM runs")}
    archs = dict(conn.execute("SELECT id, arch FROM tasks"))
    facts = ", ".join(f"SUM(({x}) = 1), COUNT({x})" for x in (COMPILED_TRI, CORRECT_TRI, USES_TRI, FAST_1_TRI))
    sql = f"""
    SELECT s.model_id, s.run_id, s.task_id, e.category, COUNT(*), SUM({SKIPPED}), {facts},
           MAX(CASE WHEN e.correct = 1 THEN e.speedup END),
           SUM(CASE WHEN e.correct = 1 AND e.speedup > 0 THEN ln(e.speedup) END),
           SUM(e.correct = 1 AND e.speedup > 0)
    FROM samples s LEFT JOIN evaluations e ON e.id = {LATEST_EVAL}
    GROUP BY s.model_id, s.run_id, s.task_id, e.category
    """
    merged: dict[tuple, list] = {}
    for row in conn.execute(sql):
        model_id, run_id, task_id, category, n, skipped = row[:6]
        pairs = [(row[6 + 2 * i] or 0, row[7 + 2 * i] or 0) for i in range(4)]
        best, logsum, logn = row[14], row[15] or 0.0, row[16] or 0
        run_model, level = runs.get(run_id, (None, "none"))
        model = models.get(model_id if model_id is not None else run_model, "?")
        key = (model, task_id, archs.get(task_id, "?"), level or "none", category)
        acc = merged.get(key)
        if acc is None:
            merged[key] = [n, skipped or 0, *pairs, best, logsum, logn]
            continue
        acc[0] += n
        acc[1] += skipped or 0
        for i in range(4):
            acc[2 + i] = (acc[2 + i][0] + pairs[i][0], acc[2 + i][1] + pairs[i][1])
        acc[6] = max((x for x in (acc[6], best) if x is not None), default=None)
        acc[7] += logsum
        acc[8] += logn
    return [Cell(*key, *vals) for key, vals in sorted(merged.items(), key=lambda kv: tuple(str(k) for k in kv[0]))]


@dataclass(frozen=True)
class OverviewFilter:
    model: str = ""
    task_id: str = ""
    arch: str = ""
    context_level: str = ""

    def keeps(self, cell: Cell) -> bool:
        return (
            (not self.model or cell.model == self.model)
            and (not self.task_id or cell.task_id == self.task_id)
            and (not self.arch or cell.arch == self.arch)
            and (not self.context_level or cell.context_level == self.context_level)
        )


@dataclass(frozen=True)
class OverviewRow:
    model: str
    task_id: str
    arch: str
    context_level: str  # "*" when levels are folded together
    samples: int
    judged: int  # evaluated, and not a hardware skip
    skipped: int
    compiled: float | None
    correct: float | None
    uses: float | None
    fast_1: float | None
    best_speedup: float | None
    geomean_speedup: float | None

    def filter(self) -> SampleFilter:
        return SampleFilter(
            task_id=self.task_id, model=self.model, context_level="" if self.context_level == "*" else self.context_level
        )


def overview(all_cells: list[Cell], flt: OverviewFilter = OverviewFilter(), *, by_level: bool = True) -> list[OverviewRow]:
    groups: dict[tuple, list] = {}
    for c in all_cells:
        if not flt.keeps(c):
            continue
        key = (c.model, c.task_id, c.arch, c.context_level if by_level else "*")
        g = groups.setdefault(key, [0, 0, 0, [0, 0], [0, 0], [0, 0], [0, 0], None, 0.0, 0])
        g[0] += c.samples
        if c.category is not None:
            g[1] += c.samples - c.skipped
        g[2] += c.skipped
        for i, pair in enumerate((c.compiled, c.correct, c.uses, c.fast_1)):
            g[3 + i][0] += pair[0]
            g[3 + i][1] += pair[1]
        if c.best_speedup is not None:
            g[7] = c.best_speedup if g[7] is None else max(g[7], c.best_speedup)
        g[8] += c.log_speedup_sum
        g[9] += c.log_speedup_n
    rows = []
    for key, (n, judged, skipped, comp, corr, uses, fast, best, logsum, logn) in groups.items():
        rate = lambda pair: pair[0] / pair[1] if pair[1] else None  # noqa: E731
        geo = math.exp(logsum / logn) if logn else None
        rows.append(OverviewRow(*key, n, judged, skipped, rate(comp), rate(corr), rate(uses), rate(fast), best, geo))
    return rows


@dataclass(frozen=True)
class Facets:
    """The values each filter can take, for the selectors."""

    models: list[str]
    tasks: list[str]
    archs: list[str]
    levels: list[str]
    categories: list[str]


def facets(conn: sqlite3.Connection) -> Facets:
    col = lambda sql: [r[0] for r in conn.execute(sql) if r[0] is not None]  # noqa: E731
    levels = col("SELECT DISTINCT context_level FROM runs ORDER BY context_level")
    if "none" not in levels:
        levels.insert(0, "none")
    return Facets(
        models=col("SELECT name FROM models ORDER BY name"),
        tasks=col("SELECT id FROM tasks ORDER BY id"),
        archs=col("SELECT DISTINCT arch FROM tasks ORDER BY arch"),
        levels=levels,
        categories=col("SELECT DISTINCT category FROM evaluations ORDER BY category"),
    )


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
        TaskRow(r[0], r[1], r[2], r[3], _json(r[4], []), _json(r[5], {}), r[6], r[7], r[8])
        for r in conn.execute(sql)
    ]


def task(conn: sqlite3.Connection, task_id: str) -> TaskRow | None:
    return next((t for t in tasks(conn) if t.id == task_id), None)


def expert_sample_id(conn: sqlite3.Connection, task_id: str) -> int | None:
    row = conn.execute(
        """SELECT s.id FROM samples s LEFT JOIN models m ON m.id = s.model_id
           WHERE s.task_id = ? AND (m.kind = 'expert' OR s.source = 'expert')
           ORDER BY s.id DESC LIMIT 1""",
        (task_id,),
    ).fetchone()
    return row[0] if row else None


# --------------------------------------------------------------------------- one sample


@dataclass(frozen=True)
class Evaluation:
    id: int
    created_at: str
    engine_version: str
    device: str | None
    status: str
    category: str
    stage: str | None
    compiled: int | None
    correct: int | None
    correct_heldout: int | None
    uses_ptx: int | None
    uses_sass: int | None
    executed: int | None
    ptx_families: list[str]
    sass_families: list[str]
    required_missing: list[str]
    resources: dict[str, Any]
    warnings: list[Any]
    evidence: dict[str, Any]
    assembler_log: str | None
    ptx: str | None
    sass: str | None
    time_ms: float | None
    baseline_ms: float | None
    speedup: float | None
    tflops: float | None
    source: str


@dataclass(frozen=True)
class Measurement:
    split: str
    sizes: dict[str, Any]
    category: str
    max_rel_err: float | None
    worst: Any
    time_ms: float | None
    time_spread: float | None
    baseline_ms: float | None
    speedup: float | None
    tflops: float | None


@dataclass(frozen=True)
class Label:
    id: int
    category: str | None
    note: str
    fixit_candidate: bool
    author: str
    created_at: str


@dataclass(frozen=True)
class FixLink:
    failed_sample_id: int
    fixed_sample_id: int
    explanation: str
    explanation_source: str


@dataclass(frozen=True)
class SampleDetail:
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
    evaluations: list[Evaluation]  # newest first
    measurements: list[Measurement]  # of the newest evaluation
    labels: list[Label]  # newest first
    fixes: list[FixLink] = field(default_factory=list)

    @property
    def latest(self) -> Evaluation | None:
        return self.evaluations[0] if self.evaluations else None

    @property
    def label(self) -> Label | None:
        return self.labels[0] if self.labels else None

    @property
    def ptx(self) -> str:
        """The PTX judged (nvcc's output for CUDA candidates), else the code itself."""
        latest = self.latest
        if latest and latest.ptx:
            return latest.ptx
        return self.code


_EVAL_COLUMNS = """id, created_at, engine_version, device, status, category, stage, compiled, correct,
    correct_heldout, uses_ptx, uses_sass, executed, ptx_families, sass_families, required_missing,
    resources, warnings, evidence, assembler_log, ptx, sass, time_ms, baseline_ms, speedup, tflops, source"""


def _evaluation(r: tuple) -> Evaluation:
    return Evaluation(
        *r[:13],
        ptx_families=_json(r[13], []),
        sass_families=_json(r[14], []),
        required_missing=_json(r[15], []),
        resources=_json(r[16], {}),
        warnings=_json(r[17], []),
        evidence=_json(r[18], {}),
        assembler_log=r[19],
        ptx=r[20],
        sass=r[21],
        time_ms=r[22],
        baseline_ms=r[23],
        speedup=r[24],
        tflops=r[25],
        source=r[26],
    )


def sample_detail(conn: sqlite3.Connection, sample_id: int) -> SampleDetail | None:
    row = conn.execute(
        f"""SELECT s.id, s.task_id, t.arch, t.families, COALESCE(m.name, '?'), {LEVEL}, s.turn, s.parent_id,
                   s.language, s.code, s.manifest, s.source
            FROM samples s JOIN tasks t ON t.id = s.task_id
            LEFT JOIN runs r ON r.id = s.run_id LEFT JOIN models m ON m.id = {MODEL_ID}
            WHERE s.id = ?""",
        (sample_id,),
    ).fetchone()
    if row is None:
        return None
    evaluations = [
        _evaluation(r)
        for r in conn.execute(f"SELECT {_EVAL_COLUMNS} FROM evaluations WHERE sample_id = ? ORDER BY id DESC", (sample_id,))
    ]
    measurements: list[Measurement] = []
    if evaluations:
        measurements = [
            Measurement(r[0], _json(r[1], {}), r[2], r[3], _json(r[4], r[4]), *r[5:])
            for r in conn.execute(
                """SELECT split, sizes, category, max_rel_err, worst, time_ms, time_spread, baseline_ms, speedup, tflops
                   FROM measurements WHERE evaluation_id = ? ORDER BY split DESC, id""",
                (evaluations[0].id,),
            )
        ]
    labels = [
        Label(r[0], r[1], r[2], bool(r[3]), r[4], r[5])
        for r in conn.execute(
            "SELECT id, category, note, fixit_candidate, author, created_at FROM labels WHERE sample_id = ? ORDER BY id DESC",
            (sample_id,),
        )
    ]
    fixes = [
        FixLink(*r)
        for r in conn.execute(
            """SELECT failed_sample_id, fixed_sample_id, explanation, explanation_source FROM fixes
               WHERE failed_sample_id = ? OR fixed_sample_id = ? ORDER BY id""",
            (sample_id, sample_id),
        )
    ]
    return SampleDetail(
        row[0], row[1], row[2], _json(row[3], []), row[4], row[5], row[6], row[7], row[8], row[9], row[10], row[11],
        evaluations, measurements, labels, fixes,
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


# --------------------------------------------------------------------------- triage


TRIAGE_DIMENSIONS = ("model", "task", "level")


@dataclass(frozen=True)
class TriageTable:
    dimension: str
    columns: list[str]  # the dimension's values
    rows: list[tuple[str, int, list[int]]]  # category, total, count per column


def triage(all_cells: list[Cell], dimension: str = "model", *, include_ok: bool = False) -> TriageTable:
    """Counts of latest-evaluation categories by model, task or context level."""
    if dimension not in TRIAGE_DIMENSIONS:
        raise ValueError(f"unknown triage dimension {dimension!r}")
    pick = {"model": lambda c: c.model, "task": lambda c: c.task_id, "level": lambda c: c.context_level}[dimension]
    counts: dict[str, dict[str, int]] = {}
    columns: set[str] = set()
    for c in all_cells:
        # A verdict reached by the static stages stands even when the GPU stages were skipped.
        if c.category is None or (c.category == "ok" and not include_ok):
            continue
        by = counts.setdefault(c.category, {})
        by[pick(c)] = by.get(pick(c), 0) + c.samples
        columns.add(pick(c))
    ordered = sorted(columns)
    rows = [
        (cat, sum(by.values()), [by.get(col, 0) for col in ordered])
        for cat, by in sorted(counts.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    ]
    return TriageTable(dimension, ordered, rows)


# --------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class ModelBest:
    """A model's representative sample for a task: correct and fastest, else the latest."""

    model: str
    sample_id: int
    samples: int
    category: str | None
    speedup: float | None
    time_ms: float | None
    resources: dict[str, Any]
    ptx_families: list[str]
    sass_families: list[str]
    correct_rate: float | None


def compare(conn: sqlite3.Connection, task_id: str, context_level: str = "") -> list[ModelBest]:
    level_clause, params = "", [task_id]
    if context_level:
        level_clause = f" AND {LEVEL} = ?"
        params.append(context_level)
    sql = f"""
    SELECT COALESCE(m.name, '?') AS model, s.id, e.category, e.speedup, e.time_ms, e.resources,
           e.ptx_families, e.sass_families, e.correct, e.status
    {_FROM} WHERE s.task_id = ?{level_clause}
    ORDER BY model, (e.correct = 1) DESC, e.speedup DESC, s.id DESC
    """
    best: dict[str, ModelBest] = {}
    totals: dict[str, list[int]] = {}
    for model, sid, cat, speed, t_ms, res, pf, sf, correct, status in conn.execute(sql, params):
        tally = totals.setdefault(model, [0, 0])
        if status and not str(status).startswith("skipped:"):
            tally[0] += 1
            tally[1] += 1 if correct == 1 else 0
        if model not in best:
            best[model] = ModelBest(model, sid, 0, cat, speed, t_ms, _json(res, {}), _json(pf, []), _json(sf, []), None)
    out = []
    for model, mb in best.items():
        judged, correct = totals[model]
        count = conn.execute(
            f"SELECT COUNT(*) FROM samples s LEFT JOIN runs r ON r.id = s.run_id LEFT JOIN models m ON m.id = {MODEL_ID}"
            f" WHERE s.task_id = ? AND COALESCE(m.name, '?') = ?{level_clause}",
            [task_id, model, *params[1:]],
        ).fetchone()[0]
        out.append(replace(mb, samples=count, correct_rate=(correct / judged) if judged else None))
    return out


# --------------------------------------------------------------------------- plots


@dataclass(frozen=True)
class PlotData:
    speedups: dict[str, list[float]]  # model → speedups of correct samples
    by_level: dict[str, dict[str, tuple[float, float, float]]]  # model → level → (compiled, correct, fast_1) rates
    by_split: dict[str, dict[str, float]]  # model → split → share of measurements judged ok


def plot_data(conn: sqlite3.Connection, all_cells: list[Cell], task_id: str = "") -> PlotData:
    task_clause, params = ("", []) if not task_id else (" AND s.task_id = ?", [task_id])
    speedups: dict[str, list[float]] = {}
    for model, speed in conn.execute(
        f"SELECT COALESCE(m.name, '?'), e.speedup {_FROM} WHERE e.correct = 1 AND e.speedup > 0{task_clause}", params
    ):
        speedups.setdefault(model, []).append(speed)
    by_level: dict[str, dict[str, tuple[float, float, float]]] = {}
    levels: dict[tuple[str, str], list[int]] = {}
    for c in all_cells:
        if (task_id and c.task_id != task_id) or c.category is None:
            continue
        acc = levels.setdefault((c.model, c.context_level), [0, 0, 0, 0, 0, 0])
        for i, pair in enumerate((c.compiled, c.correct, c.fast_1)):
            acc[2 * i] += pair[0]
            acc[2 * i + 1] += pair[1]
    for (model, level), acc in levels.items():
        rates = tuple(acc[2 * i] / acc[2 * i + 1] if acc[2 * i + 1] else 0.0 for i in range(3))
        by_level.setdefault(model, {})[level] = rates  # type: ignore[assignment]
    by_split: dict[str, dict[str, float]] = {}
    for model, split, ok, n in conn.execute(
        f"""SELECT COALESCE(m.name, '?'), ms.split, SUM(ms.category = 'ok'), COUNT(*)
            {_FROM} JOIN measurements ms ON ms.evaluation_id = e.id WHERE 1 = 1{task_clause}
            GROUP BY 1, 2""",
        params,
    ):
        by_split.setdefault(model, {})[split] = ok / n if n else 0.0
    return PlotData(speedups, {m: v for m, v in by_level.items() if v}, by_split)


def schema_version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def store_summary(conn: sqlite3.Connection) -> dict[str, int]:
    return {
        table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        for table in ("tasks", "models", "runs", "samples", "evaluations", "fixes", "labels")
    }
