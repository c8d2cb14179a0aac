"""The store folded into summary cells, for the explorer's overview, triage and plots.

One pass over the store at the finest grain (model × task × arch × context
level × category); the overview, the triage counts and the per-level plots
are then folded from these cells in memory, so changing a filter or a
grouping never re-reads 100 000 rows. Per-sample facts are three-valued as
in db/metrics.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from dataclasses import dataclass

from ptxbench.db import verdict
from ptxbench.db.browse import USES, SampleFilter, sample_from, shown_join
from ptxbench.engine.categories import STAGE_OF, Category

NOT_RUN = "(e.status <> 'judged')"


def _categories_of(stages: tuple[str, ...]) -> str:
    return ", ".join(f"'{c}'" for c, stage in STAGE_OF.items() if stage in stages)


# Per-sample facts, three-valued as in db/metrics.py: a NULL column is "not
# reached" (false) when the verdict failed at an earlier stage, else unknown
# (a hardware skip or a static-only judgement), which is left out of a rate.
_BEFORE_COMPILE = ("extract", "assemble")
_BEFORE_CORRECT = ("extract", "assemble", "load", "run", "verify")
COMPILED_TRI = f"CASE WHEN e.compiled IS NOT NULL THEN e.compiled WHEN e.category IN ({_categories_of(_BEFORE_COMPILE)}) THEN 0 END"
CORRECT_TRI = f"CASE WHEN e.correct IS NOT NULL THEN e.correct WHEN e.category IN ({_categories_of(_BEFORE_CORRECT)}) THEN 0 END"
# A kernel that did not assemble has no machine code, so it cannot use what was
# asked in SASS: false, as db/metrics.py counts it (its PTX may still name the families).
USES_TRI = (
    f"CASE WHEN e.category IN ({_categories_of(_BEFORE_COMPILE)}) THEN 0 "
    "WHEN e.uses_ptx = 0 OR e.uses_sass = 0 THEN 0 "
    f"WHEN {USES} IS NOT NULL THEN {USES} END"
)
FAST_1_TRI = (
    "CASE WHEN e.speedup IS NOT NULL AND e.speedup <= 1.0 THEN 0 "
    f"WHEN ({CORRECT_TRI}) = 0 OR ({USES_TRI}) = 0 THEN 0 "
    f"WHEN ({CORRECT_TRI}) IS NULL OR ({USES_TRI}) IS NULL OR e.speedup IS NULL THEN NULL ELSE 1 END"
)


# What a category alone does not say (ptxbench_tui/verdict.py writes it): the GPU
# stages never ran (a hardware skip or static-only judging), or the kernel is
# correct on the train sizes but wrong at the held-out ones.
NOTE_NOT_RUN = "not_run"
NOTE_HELDOUT = "heldout"
VERDICT_NOTE = (
    f"CASE WHEN e.status <> 'judged' THEN '{NOTE_NOT_RUN}' "
    f"WHEN e.correct = 1 AND e.correct_heldout = 0 THEN '{NOTE_HELDOUT}' ELSE '' END"
)


@dataclass(frozen=True)
class Cell:
    model: str
    task_id: str
    arch: str
    context_level: str
    category: str | None  # None: never evaluated
    samples: int
    skipped: int  # the GPU stages never ran: a hardware skip or static-only judging (NOTE_NOT_RUN)
    compiled: tuple[int, int]  # (true, known)
    correct: tuple[int, int]
    uses: tuple[int, int]
    fast_1: tuple[int, int]
    best_speedup: float | None
    log_speedup_sum: float  # over correct samples with a speedup
    log_speedup_n: int
    note: str = ""  # VERDICT_NOTE of these samples' latest evaluations


def cells(conn: sqlite3.Connection) -> list[Cell]:
    models = dict(conn.execute("SELECT id, name FROM models"))
    runs = {rid: (mid, level) for rid, mid, level in conn.execute("SELECT id, model_id, context_level FROM runs")}
    archs = dict(conn.execute("SELECT id, arch FROM tasks"))
    facts = ", ".join(f"SUM(({x}) = 1), COUNT({x})" for x in (COMPILED_TRI, CORRECT_TRI, USES_TRI, FAST_1_TRI))
    sql = f"""
    SELECT s.model_id, s.run_id, s.task_id, e.category, COUNT(*), SUM({NOT_RUN}), {facts},
           MAX(CASE WHEN e.correct = 1 THEN e.speedup END),
           SUM(CASE WHEN e.correct = 1 AND e.speedup > 0 THEN ln(e.speedup) END),
           SUM(e.correct = 1 AND e.speedup > 0), {VERDICT_NOTE}
    FROM samples s{shown_join(conn)}
    GROUP BY s.model_id, s.run_id, s.task_id, e.category, 18
    """
    merged: dict[tuple, list] = {}
    for row in conn.execute(sql):
        model_id, run_id, task_id, category, n, skipped = row[:6]
        pairs = [(row[6 + 2 * i] or 0, row[7 + 2 * i] or 0) for i in range(4)]
        best, logsum, logn, note = row[14], row[15] or 0.0, row[16] or 0, row[17] or ""
        run_model, level = runs.get(run_id, (None, "none"))
        model = models.get(model_id if model_id is not None else run_model, "?")
        key = (model, task_id, archs.get(task_id, "?"), level or "none", category, note)
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
    return [Cell(*key[:5], *vals, note=key[5]) for key, vals in sorted(merged.items(), key=lambda kv: tuple(str(k) for k in kv[0]))]


# Bumped when the cells change meaning (2: the evaluation rule of db/verdict.py;
# 3: each cell carries its verdict note).
SUMMARY_VERSION = 3


def fingerprint(conn: sqlite3.Connection) -> list:
    """What the cells depend on, cheaply: row counts and highest ids of samples and
    evaluations (evaluations are append-only), a digest of the small tables, and the
    rule in force. Equal fingerprints, equal cells."""
    row = conn.execute(
        """SELECT (SELECT COUNT(*) FROM samples), (SELECT MAX(id) FROM samples),
                  (SELECT COUNT(*) FROM evaluations), (SELECT MAX(id) FROM evaluations)"""
    ).fetchone()
    small = hashlib.sha256()
    for sql in ("SELECT id, model_id, context_level FROM runs ORDER BY id", "SELECT id, name FROM models ORDER BY id",
                "SELECT id, arch FROM tasks ORDER BY id"):
        small.update(json.dumps(conn.execute(sql).fetchall()).encode())
    return [SUMMARY_VERSION, verdict.newest_of(conn), *row, small.hexdigest()]


def snapshot(conn: sqlite3.Connection) -> tuple[list, list[Cell], Facets]:
    """Fingerprint, cells and facets; read in one snapshot (StoreReader.read) they agree."""
    return fingerprint(conn), cells(conn), facets(conn)


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
        rate = lambda pair: pair[0] / pair[1] if pair[1] else None
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
    col = lambda sql: [r[0] for r in conn.execute(sql) if r[0] is not None]
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


# --------------------------------------------------------------------------- triage


TRIAGE_DIMENSIONS = ("model", "task", "level")


@dataclass(frozen=True)
class TriageTable:
    dimension: str
    columns: list[str]  # the dimension's values
    rows: list[tuple[str, str, int, list[int]]]  # category, verdict note, total, count per column


def triage(all_cells: list[Cell], dimension: str = "model", *, include_ok: bool = False) -> TriageTable:
    """Counts of latest-evaluation verdicts (category and note) by model, task or context level.

    An `ok` that failed at held-out sizes, or that never ran, is a row of its own and
    is always counted: only a plain `ok` is left out unless `include_ok`."""
    if dimension not in TRIAGE_DIMENSIONS:
        raise ValueError(f"unknown triage dimension {dimension!r}")
    pick = {"model": lambda c: c.model, "task": lambda c: c.task_id, "level": lambda c: c.context_level}[dimension]
    counts: dict[tuple[str, str], dict[str, int]] = {}
    columns: set[str] = set()
    for c in all_cells:
        # A verdict reached by the static stages stands even when the GPU stages were skipped.
        if c.category is None or (c.category == Category.OK and not c.note and not include_ok):
            continue
        by = counts.setdefault((c.category, c.note), {})
        by[pick(c)] = by.get(pick(c), 0) + c.samples
        columns.add(pick(c))
    ordered = sorted(columns)
    rows = [
        (cat, note, sum(by.values()), [by.get(col, 0) for col in ordered])
        for (cat, note), by in sorted(counts.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    ]
    return TriageTable(dimension, ordered, rows)


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
        f"SELECT COALESCE(m.name, '?'), e.speedup {sample_from(conn)} WHERE e.correct = 1 AND e.speedup > 0{task_clause}", params
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
            {sample_from(conn)} JOIN measurements ms ON ms.evaluation_id = e.id WHERE 1 = 1{task_clause}
            GROUP BY 1, 2""",
        params,
    ):
        by_split.setdefault(model, {})[split] = ok / n if n else 0.0
    return PlotData(speedups, {m: v for m, v in by_level.items() if v}, by_split)


