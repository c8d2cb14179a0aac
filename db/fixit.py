"""The store's side of Fixit: samples with their verdicts, stored fix pairs,
explanations, and the statistics the explorer shows.

Every function takes a `sqlite_utils.Database` or a plain `sqlite3.Connection`
(the explorer's read-only, per-thread connections), and returns the records of
`ptxbench.fixit` or small row dataclasses. A sample speaks through the
evaluation db/verdict.py picks (a static-only re-check never hides its GPU
verdict); a person's label is read beside it.

A pair is stored as a `fixes` row. A second explanation of the same pair (a
model's, after the derived one) is another row for the same two samples, so
every explanation keeps its source; `stored_pairs` returns each pair once,
with its preferred explanation (a model's, then one written with the data,
then the derived one; the newest within each).
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import sqlite_utils

from ptxbench.db import verdict
from ptxbench.db.records import Fix
from ptxbench.db.store import get_meta, set_meta, write_transaction
from ptxbench.db.writes import add_fix
from ptxbench.fixit.pairing import kind_of
from ptxbench.fixit.records import GPU_VERIFIED, FixitSample, Pair, SizeResult
from ptxbench.fixit.select import explanation_rank

EXPORT_META_KEY = "fixit_last_export"
_CHUNK = 500

Store = sqlite_utils.Database | sqlite3.Connection


def _conn(db: Store) -> sqlite3.Connection:
    return db.conn if isinstance(db, sqlite_utils.Database) else db


def _json(text: Any, default: Any) -> Any:
    if text is None or text == "":
        return default
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return default


def _bool(v: Any) -> bool | None:
    return None if v is None else bool(v)


_SAMPLE_SQL = """
SELECT s.id, s.task_id, COALESCE(t.arch, ''), s.language, {code}, s.manifest,
       CASE WHEN s.language = 'none' THEN {response} ELSE NULL END,
       s.source, m.name, m.kind, s.run_id, COALESCE(r.context_level, 'none'), s.turn, s.parent_id,
       s.sample_index, s.created_at,
       e.id, e.status, e.category, e.compiled, e.correct, e.correct_heldout, e.uses_ptx, e.uses_sass,
       e.device, e.source, e.evidence, {log}, e.required_missing, e.ptx_families,
       (SELECT l.category FROM labels l WHERE l.sample_id = s.id ORDER BY l.id DESC LIMIT 1),
       (SELECT l.fixit_candidate FROM labels l WHERE l.sample_id = s.id ORDER BY l.id DESC LIMIT 1)
FROM samples s
LEFT JOIN runs r ON r.id = s.run_id
LEFT JOIN models m ON m.id = COALESCE(s.model_id, r.model_id)
LEFT JOIN tasks t ON t.id = s.task_id
LEFT JOIN evaluations e ON e.id = {shown}
"""


def _sample(row: Sequence[Any]) -> FixitSample:
    return FixitSample(
        id=row[0], task_id=row[1], arch=row[2], language=row[3], code=row[4] or "",
        manifest=_json(row[5], None), response=row[6], source=row[7] or "", model=row[8], model_kind=row[9],
        run_id=row[10], context_level=row[11], turn=row[12], parent_id=row[13], sample_index=row[14],
        created_at=row[15] or "", evaluation_id=row[16], status=row[17], category=row[18],
        compiled=_bool(row[19]), correct=_bool(row[20]), correct_heldout=_bool(row[21]), uses_ptx=_bool(row[22]),
        uses_sass=_bool(row[23]), device=row[24], evaluation_source=row[25] or "", evidence=_json(row[26], {}),
        assembler_log=row[27], required_missing=_json(row[28], []), ptx_families=_json(row[29], []),
        label_category=row[30], fixit_marked=bool(row[31]),
    )


def load_samples(
    db: Store,
    *,
    sample_ids: Iterable[int] | None = None,
    task_ids: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    include_code: bool = True,
    with_sizes: bool = True,
) -> list[FixitSample]:
    """Samples with their shown evaluation, label and (with `with_sizes`) that evaluation's
    per-size results. `models` keeps those samples and every expert sample (the experts are
    fixes for everyone)."""
    conn = _conn(db)
    sql = _SAMPLE_SQL.format(code="s.code" if include_code else "''",
                             response="s.response" if include_code else "NULL",
                             log="e.assembler_log" if include_code else "NULL", shown=verdict.shown_for(conn))
    where: list[str] = []
    params: list[Any] = []
    if task_ids:
        where.append(f"s.task_id IN ({', '.join('?' for _ in task_ids)})")
        params.extend(task_ids)
    if models:
        where.append(f"(m.name IN ({', '.join('?' for _ in models)}) OR m.kind = 'expert')")
        params.extend(models)
    out: list[FixitSample] = []
    if sample_ids is not None:
        ids = sorted(set(sample_ids))
        for i in range(0, len(ids), _CHUNK):
            chunk = ids[i:i + _CHUNK]
            clause = " AND ".join([*where, f"s.id IN ({', '.join('?' for _ in chunk)})"])
            out.extend(_sample(r) for r in conn.execute(sql + " WHERE " + clause + " ORDER BY s.id",
                                                        [*params, *chunk]))
    else:
        out = [_sample(r) for r in conn.execute(sql + (" WHERE " + " AND ".join(where) if where else "")
                                                + " ORDER BY s.id", params)]
    if with_sizes:
        _attach_sizes(conn, out)
    return out


def _attach_sizes(conn: sqlite3.Connection, samples: list[FixitSample]) -> None:
    by_eval = {s.evaluation_id: s for s in samples if s.evaluation_id is not None}
    ids = sorted(by_eval)
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i:i + _CHUNK]
        rows = conn.execute(
            f"SELECT evaluation_id, split, sizes, category, max_rel_err FROM measurements "
            f"WHERE evaluation_id IN ({', '.join('?' for _ in chunk)}) ORDER BY id", chunk)
        for eid, split, sizes, category, err in rows:
            by_eval[eid].sizes.append(SizeResult(split, _json(sizes, {}), category, err))


def load_sample(db: Store, sample_id: int) -> FixitSample | None:
    found = load_samples(db, sample_ids=[sample_id])
    return found[0] if found else None


# -- stored pairs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _FixRow:
    id: int
    failed: int
    fixed: int
    explanation: str
    explanation_source: str
    source: str
    created_at: str


def _fix_rows(conn: sqlite3.Connection, task_ids: Sequence[str] | None = None) -> list[_FixRow]:
    sql = ("SELECT f.id, f.failed_sample_id, f.fixed_sample_id, f.explanation, f.explanation_source, f.source, "
           "f.created_at FROM fixes f")
    params: list[Any] = []
    if task_ids:
        sql += (" JOIN samples s ON s.id = f.failed_sample_id"
                f" WHERE s.task_id IN ({', '.join('?' for _ in task_ids)})")
        params.extend(task_ids)
    return [_FixRow(*r) for r in conn.execute(sql + " ORDER BY f.id", params)]


def _preferred(rows: list[_FixRow]) -> _FixRow:
    """The explanation to use: the best source, the newest within it."""
    return min(rows, key=lambda r: (explanation_rank(r.explanation_source), -r.id))


def stored_pairs(db: Store, *, task_ids: Sequence[str] | None = None, include_code: bool = True) -> list[Pair]:
    """Every stored pair once, with its preferred explanation and its samples' shown verdicts."""
    conn = _conn(db)
    grouped: dict[tuple[int, int], list[_FixRow]] = defaultdict(list)
    for row in _fix_rows(conn, task_ids):
        grouped[(row.failed, row.fixed)].append(row)
    ids = {i for key in grouped for i in key}
    samples = {s.id: s for s in load_samples(conn, sample_ids=ids, include_code=include_code)}
    pairs: list[Pair] = []
    for (failed_id, fixed_id), rows in grouped.items():
        failed, fixed = samples.get(failed_id), samples.get(fixed_id)
        if failed is None or fixed is None:
            continue
        best = _preferred(rows)
        first = min(rows, key=lambda r: r.id)  # the row that made the pair says what kind it is
        pairs.append(Pair(failed, fixed, kind_of(first.source, failed, fixed), explanation=best.explanation,
                          explanation_source=best.explanation_source, fix_id=best.id, source=first.source))
    pairs.sort(key=lambda p: p.key)
    return pairs


def explanation_sources(db: Store, failed_id: int, fixed_id: int) -> list[str]:
    rows = _conn(db).execute(
        "SELECT explanation_source FROM fixes WHERE failed_sample_id = ? AND fixed_sample_id = ? ORDER BY id",
        [failed_id, fixed_id])
    return [r[0] for r in rows]


def store_pair(db: sqlite_utils.Database, pair: Pair, explanation: str, explanation_source: str) -> Fix:
    """The pair as a `fixes` row (its `source` says which Fixit step made it)."""
    return add_fix(db, Fix(failed_sample_id=pair.failed.id, fixed_sample_id=pair.fixed.id, explanation=explanation,
                           explanation_source=explanation_source, source=pair.source or f"fixit pairs: {pair.kind}"))


def store_pairs(db: sqlite_utils.Database, pairs: Iterable[tuple[Pair, str, str]]) -> list[Fix]:
    """Many pairs in one transaction: all land or none."""
    out: list[Fix] = []
    with write_transaction(db):
        for pair, explanation, source in pairs:
            out.append(store_pair(db, pair, explanation, source))
    return out


def add_explanation(db: sqlite_utils.Database, pair: Pair, explanation: str, explanation_source: str,
                    source: str = "fixit explain") -> Fix:
    """Another explanation of a stored pair, kept beside the earlier ones."""
    return add_fix(db, Fix(failed_sample_id=pair.failed.id, fixed_sample_id=pair.fixed.id, explanation=explanation,
                           explanation_source=explanation_source, source=source))


# -- for the explorer ------------------------------------------------------------------------


@dataclass(frozen=True)
class FixitPairRow:
    """One pair as the explorer lists it (no code: open the two samples for that)."""

    fix_id: int
    failed_sample_id: int
    fixed_sample_id: int
    task_id: str
    arch: str
    category: str
    kind: str
    verification: str          # gpu | static | failed | unjudged (of the fixed half)
    counts: bool               # verified: it may go into a training set
    heldout_only: bool         # the failure shows only at held-out sizes
    model: str | None
    fixed_model: str | None
    explanation_source: str
    explanation: str
    explanations: int          # how many explanations the pair has


def fixit_pairs(
    db: Store,
    *,
    task_id: str | None = None,
    category: str | None = None,
    kind: str | None = None,
    verified_only: bool = False,
    limit: int = 500,
    offset: int = 0,
) -> list[FixitPairRow]:
    """The stored Fixit pairs, filtered, ordered by task, category and id."""
    rows = _pair_rows(_conn(db), task_id=task_id, category=category, kind=kind, verified_only=verified_only)
    start = max(0, int(offset))
    return rows[start:start + max(0, int(limit))]


def fixit_pair_page(
    db: Store,
    *,
    task_id: str | None = None,
    category: str | None = None,
    kind: str | None = None,
    verified_only: bool = False,
    limit: int = 200,
    offset: int = 0,
) -> tuple[list[FixitPairRow], int]:
    """One page of `fixit_pairs` and how many pairs the filter selects in all, from one read."""
    rows = _pair_rows(_conn(db), task_id=task_id, category=category, kind=kind, verified_only=verified_only)
    start = max(0, int(offset))
    return rows[start:start + max(0, int(limit))], len(rows)


def _pair_rows(conn: sqlite3.Connection, *, task_id: str | None, category: str | None, kind: str | None,
               verified_only: bool) -> list[FixitPairRow]:
    # The task narrows in SQL; category (a person's label may change it), kind and whether a
    # pair counts follow the engine's rules, so they are applied to the records.
    pairs = stored_pairs(conn, task_ids=[task_id] if task_id else None, include_code=False)
    counts_by_key = Counter((r.failed, r.fixed) for r in _fix_rows(conn, [task_id] if task_id else None))
    rows: list[FixitPairRow] = []
    for p in pairs:
        if category is not None and p.category != category:
            continue
        if kind is not None and p.kind != kind:
            continue
        counted = p.counts()
        if verified_only and not counted:
            continue
        rows.append(FixitPairRow(
            fix_id=p.fix_id or 0, failed_sample_id=p.failed.id, fixed_sample_id=p.fixed.id, task_id=p.task_id,
            arch=p.arch, category=p.category, kind=p.kind, verification=p.verification, counts=counted,
            heldout_only=p.heldout_only, model=p.failed.model, fixed_model=p.fixed.model,
            explanation_source=p.explanation_source or "", explanation=p.explanation or "",
            explanations=counts_by_key[p.key],
        ))
    rows.sort(key=lambda r: (r.task_id, r.category, r.fix_id))
    return rows


@dataclass(frozen=True)
class FixitFacets:
    """The values the explorer's Fixit filters offer: those of every stored pair."""

    tasks: list[str]
    categories: list[str]
    kinds: list[str]


def fixit_facets(db: Store) -> FixitFacets:
    pairs = stored_pairs(_conn(db), include_code=False)
    return FixitFacets(
        tasks=sorted({p.task_id for p in pairs}),
        categories=sorted({p.category for p in pairs}),
        kinds=sorted({p.kind for p in pairs}),
    )


def fixit_changes(db: Store, keys: Iterable[tuple[int, int]]) -> dict[tuple[int, int], tuple[bool, bool]]:
    """For each (failed, fixed) pair: whether the fix changes the code, and whether it changes
    the launch manifest. Many seeded fixes change only the manifest (an argument order, a grid),
    so a code diff of such a pair is empty."""
    conn = _conn(db)
    wanted = sorted(set(keys))
    out: dict[tuple[int, int], tuple[bool, bool]] = {}
    for i in range(0, len(wanted), _CHUNK):
        chunk = wanted[i:i + _CHUNK]
        values = ", ".join("(?, ?)" for _ in chunk)
        rows = conn.execute(
            f"""WITH k(failed, fixed) AS (VALUES {values})
                SELECT k.failed, k.fixed, a.code IS NOT b.code, a.manifest, b.manifest
                FROM k JOIN samples a ON a.id = k.failed JOIN samples b ON b.id = k.fixed""",
            [x for pair in chunk for x in pair])
        for failed, fixed, code_differs, manifest_a, manifest_b in rows:
            # Compared as JSON, so key order or spacing is not a change.
            out[(failed, fixed)] = (bool(code_differs), _json(manifest_a, None) != _json(manifest_b, None))
    return out


# Lines of a code text as str.splitlines counts them: one per newline, plus an unterminated last line.
_LINES = "(LENGTH({c}) - LENGTH(REPLACE({c}, char(10), '')) + ({c} != '' AND substr({c}, -1) != char(10)))"


def fixit_lengths(db: Store) -> dict[str, Any]:
    """How long the stored pairs are: lines of the failed and of the fixed code (each pair
    once) and characters of the explanations (every explanation row)."""
    from ptxbench.fixit.stats import distribution

    conn = _conn(db)
    code_rows = conn.execute(
        f"""SELECT {_LINES.format(c="COALESCE(a.code, '')")}, {_LINES.format(c="COALESCE(b.code, '')")}
            FROM (SELECT DISTINCT failed_sample_id, fixed_sample_id FROM fixes) f
            JOIN samples a ON a.id = f.failed_sample_id
            JOIN samples b ON b.id = f.fixed_sample_id"""
    ).fetchall()
    explanation_chars = [r[0] for r in conn.execute("SELECT LENGTH(COALESCE(explanation, '')) FROM fixes")]
    return {
        "failed_lines": distribution([r[0] for r in code_rows]),
        "fixed_lines": distribution([r[1] for r in code_rows]),
        "explanation_chars": distribution(explanation_chars),
    }


def fixit_stats(db: Store) -> dict[str, Any]:
    """What the store holds for Fixit: pairs per category, task, arch, kind, verification and
    explanation source; how many failed samples (failing on train sizes, or only on held-out
    sizes) there are and how many have a verified pair; the last export's statistics."""
    conn = _conn(db)
    pairs = stored_pairs(conn, include_code=False)
    counted = [p for p in pairs if p.counts()]

    def table(items: Iterable[str]) -> dict[str, int]:
        return dict(sorted(Counter(items).items(), key=lambda kv: (-kv[1], kv[0])))

    failed_total = conn.execute(
        f"""SELECT COUNT(*) FROM samples s JOIN evaluations e ON e.id = {verdict.shown_for(conn)}
           LEFT JOIN runs r ON r.id = s.run_id
           LEFT JOIN models m ON m.id = COALESCE(s.model_id, r.model_id)
           WHERE COALESCE(m.kind, '') != 'expert' AND e.category NOT LIKE 'skipped:%'
             AND (e.category NOT IN ('ok', 'slower_than_baseline', 'no_baseline')
                  OR (e.correct = 1 AND e.correct_heldout = 0))"""
    ).fetchone()[0]
    with_fix = len({p.failed.id for p in counted if p.failed.failure})
    last = get_meta(db if isinstance(db, sqlite_utils.Database) else sqlite_utils.Database(conn), EXPORT_META_KEY)
    return {
        "pairs": len(pairs),
        "verified": len(counted),
        "gpu_verified": sum(1 for p in counted if p.verification == GPU_VERIFIED),
        "unverified": sum(1 for p in pairs if not p.counts()),
        "failed_samples": failed_total,
        "failed_with_a_verified_pair": with_fix,
        "per_category": table(p.category for p in counted),
        "per_task": table(p.task_id for p in counted),
        "per_arch": table(p.arch for p in counted),
        "per_kind": table(p.kind for p in counted),
        "per_verification": table(p.verification for p in pairs),
        "per_explanation_source": table(p.explanation_source or "" for p in counted),
        "last_export": _json(last, None),
    }


def save_export_stats(db: sqlite_utils.Database, stats: dict[str, Any], path: str) -> None:
    """Keep the last export's statistics (and where it went) in the store's meta table."""
    with write_transaction(db):
        set_meta(db, EXPORT_META_KEY, json.dumps({"path": path, **stats}, default=str))


def row_dict(row: FixitPairRow) -> dict[str, Any]:
    return asdict(row)
