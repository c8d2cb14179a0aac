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
from ptxbench.db.browse import SampleFilter, sample_from, shown_join
from ptxbench.engine.categories import Category

NOT_RUN = f"(e.status <> '{verdict.COMPLETE_STATUS}')"

# Per-sample facts, three-valued, as db/verdict.py defines them for every view and count: a NULL
# column is "not reached" (false) when the verdict failed at an earlier stage, else unknown (a
# hardware skip or a static-only judgement), which is left out of a rate. Correctness and fast₁.₀
# are per split: a kernel wrong at a held-out size is counted so there, never as correct.
COMPILED_TRI = verdict.compiled_sql()
CORRECT_TRI = verdict.correct_sql("train")
CORRECT_HELDOUT_TRI = verdict.correct_sql("heldout")
USES_TRI = verdict.uses_sql()
FAST_1_TRI = verdict.fast_sql("train", 1.0)
FAST_1_HELDOUT_TRI = verdict.fast_sql("heldout", 1.0)
_FACTS = (COMPILED_TRI, CORRECT_TRI, USES_TRI, FAST_1_TRI, CORRECT_HELDOUT_TRI, FAST_1_HELDOUT_TRI)
_TRUE_AND_KNOWN = (1 << 32) + 1
_KNOWN_MASK = (1 << 32) - 1


# What a category alone does not say (ptxbench_tui/verdict.py writes it): db/verdict.py's notes. The
# cells count by the not-run and held-out notes; that an older engine made a verdict is said where
# the sample is shown (a probe per sample would cost the summary a quarter of its time).
NOTE_NOT_RUN = verdict.NOTE_NOT_RUN
NOTE_HELDOUT = verdict.NOTE_HELDOUT
NOTE_OLDER = verdict.NOTE_OLDER
VERDICT_NOTE = verdict.note_sql()
CELL_NOTE = verdict.note_sql(older=False)


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
    best_speedup: float | None  # train sizes, as the two below
    log_speedup_sum: float  # over correct samples with a speedup
    log_speedup_n: int
    note: str = ""  # CELL_NOTE of these samples' speaking evaluations
    correct_heldout: tuple[int, int] = (0, 0)
    fast_1_heldout: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        # Pairs read back from JSON (summary_cache.py) are lists; a cell compares equal either way.
        for name in ("compiled", "correct", "uses", "fast_1", "correct_heldout", "fast_1_heldout"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


def cells(conn: sqlite3.Connection) -> list[Cell]:
    models = dict(conn.execute("SELECT id, name FROM models"))
    runs = {rid: (mid, level) for rid, mid, level in conn.execute("SELECT id, model_id, context_level FROM runs")}
    archs = dict(conn.execute("SELECT id, arch FROM tasks"))
    n_facts = len(_FACTS)
    # Each fact read once per sample: true counts in the high 32 bits of the sum, known ones in the low.
    facts = ", ".join(f"SUM(CASE {x} WHEN 1 THEN {_TRUE_AND_KNOWN} WHEN 0 THEN 1 END)" for x in _FACTS)
    sql = f"""
    SELECT s.model_id, s.run_id, s.task_id, e.category, COUNT(*), SUM({NOT_RUN}), {facts},
           MAX(CASE WHEN e.correct = 1 THEN e.speedup END),
           SUM(CASE WHEN e.correct = 1 AND e.speedup > 0 THEN ln(e.speedup) END),
           SUM(e.correct = 1 AND e.speedup > 0), {CELL_NOTE}
    FROM samples s{shown_join(conn)}
    GROUP BY s.model_id, s.run_id, s.task_id, e.category, {7 + n_facts + 3}
    """
    merged: dict[tuple, list] = {}
    for row in conn.execute(sql):
        model_id, run_id, task_id, category, n, skipped = row[:6]
        pairs = [((row[6 + i] or 0) >> 32, (row[6 + i] or 0) & _KNOWN_MASK) for i in range(n_facts)]
        rest = 6 + n_facts
        best, logsum, logn, note = row[rest], row[rest + 1] or 0.0, row[rest + 2] or 0, row[rest + 3] or ""
        run_model, level = runs.get(run_id, (None, "none"))
        model = models.get(model_id if model_id is not None else run_model, "?")
        key = (model, task_id, archs.get(task_id, "?"), level or "none", category, note)
        acc = merged.get(key)
        if acc is None:
            merged[key] = [n, skipped or 0, pairs, best, logsum, logn]
            continue
        acc[0] += n
        acc[1] += skipped or 0
        acc[2] = [(a[0] + b[0], a[1] + b[1]) for a, b in zip(acc[2], pairs)]
        acc[3] = max((x for x in (acc[3], best) if x is not None), default=None)
        acc[4] += logsum
        acc[5] += logn
    out = []
    for key, (n, skipped, pairs, best, logsum, logn) in sorted(merged.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        compiled, correct, uses, fast_1, correct_heldout, fast_1_heldout = pairs
        out.append(Cell(*key[:5], n, skipped, compiled, correct, uses, fast_1, best, logsum, logn, note=key[5],
                        correct_heldout=correct_heldout, fast_1_heldout=fast_1_heldout))
    return out


# Bumped when the cells change meaning (2: the evaluation rule of db/verdict.py;
# 3: each cell carries its verdict note; 4: a complete judgement before the newest engine,
# held-out correctness and fast₁.₀).
SUMMARY_VERSION = 4


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
    correct: float | None  # train sizes, as fast_1, best and geomean
    uses: float | None
    fast_1: float | None
    best_speedup: float | None
    geomean_speedup: float | None
    correct_heldout: float | None = None  # held-out sizes
    fast_1_heldout: float | None = None

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
        g = groups.setdefault(key, [0, 0, 0, [[0, 0] for _ in _PAIRS], None, 0.0, 0])
        g[0] += c.samples
        if c.category is not None:
            g[1] += c.samples - c.skipped
        g[2] += c.skipped
        for acc, name in zip(g[3], _PAIRS):
            pair = getattr(c, name)
            acc[0] += pair[0]
            acc[1] += pair[1]
        if c.best_speedup is not None:
            g[4] = c.best_speedup if g[4] is None else max(g[4], c.best_speedup)
        g[5] += c.log_speedup_sum
        g[6] += c.log_speedup_n
    rows = []
    for key, (n, judged, skipped, pairs, best, logsum, logn) in groups.items():
        comp, corr, uses, fast, corr_ho, fast_ho = (p[0] / p[1] if p[1] else None for p in pairs)
        geo = math.exp(logsum / logn) if logn else None
        rows.append(OverviewRow(*key, n, judged, skipped, comp, corr, uses, fast, best, geo,
                                correct_heldout=corr_ho, fast_1_heldout=fast_ho))
    return rows


_PAIRS = ("compiled", "correct", "uses", "fast_1", "correct_heldout", "fast_1_heldout")


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


