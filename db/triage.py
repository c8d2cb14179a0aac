"""The store's side of triage in the explorer: sorted pages, error snippets,
the next unlabelled failure, counts by a person's label, whole-table exports.

Every function takes a read-only `sqlite3.Connection` (the explorer lends one
through `StoreReader.read`) and a `browse.SampleFilter`, whose WHERE clause
browse builds; a sort adds only the joins its key needs, so sorting by a
sample's own column stays an index walk and sorting by an evaluation's column
one pass over the evaluations that speak for the samples (db/verdict.py).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from ptxbench.db import browse, verdict
from ptxbench.db.browse import _LATEST_LABEL_COL, _SAMPLE_COLUMNS, LEVEL, SampleFilter, SampleRow, sample_from, shown_join
from ptxbench.db.browse_summary import TRIAGE_DIMENSIONS, VERDICT_NOTE, TriageTable
from ptxbench.db.queries import LABELLED_SQL



def _evidence(path: str) -> str:
    # SQLite's JSON refuses the NaN and Infinity Python writes for a wild element; those rows read NULL here.
    return f"(CASE WHEN json_valid(e.evidence) THEN json_extract(e.evidence, '{path}') END)"


# The assembler's classified first error, else the run's first failure (which names the worst element).
_STATIC_EVIDENCE = _evidence("$.static.evidence")
_FIRST_FAILURE = _evidence("$.first_failure.message")
SNIPPET_SQL = f"COALESCE({_STATIC_EVIDENCE}, {_FIRST_FAILURE}, {_evidence('$.message')})"
LABEL_SQL = "(" + _LATEST_LABEL_COL.format(col="COALESCE(l.category, CASE WHEN l.note <> '' THEN '(note)' END)") + ")"
FIXIT_SQL = f"COALESCE(({_LATEST_LABEL_COL.format(col='l.fixit_candidate')}), 0)"
# A failure a person still has to look at: a failing verdict (or one wrong only at held-out sizes), no label.
UNLABELLED_FAILURE = (
    "(e.id IS NOT NULL AND (e.category <> 'ok' OR (e.status = 'judged' AND e.correct = 1 AND e.correct_heldout = 0))"
    f" AND NOT {LABELLED_SQL.format(sid='s.id')})"
)

# Sort keys by the samples table's column name: (SQL, the joins it needs). `_E` stands for the
# join of the evaluation that speaks (browse.shown_join), which depends on the connection.
_E = " <shown evaluation>"
_T = " JOIN tasks t ON t.id = s.task_id"
_M = f" LEFT JOIN runs r ON r.id = s.run_id LEFT JOIN models m ON m.id = {browse.MODEL_ID}"
_R = " LEFT JOIN runs r ON r.id = s.run_id"
SORT_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Id": ("s.id", ()),
    "Task": ("s.task_id", ()),
    "Arch": ("t.arch", (_T,)),
    "Model": ("m.name", (_M,)),
    "Level": (LEVEL, (_R,)),
    "Turn": ("s.turn", ()),
    "#": ("s.sample_index", ()),
    "Category": ("e.category", (_E,)),
    "Label": (LABEL_SQL, ()),
    "Fixit": (FIXIT_SQL, ()),
    "Speedup": ("e.speedup", (_E,)),
    "ms": ("e.time_ms", (_E,)),
    "Error": (SNIPPET_SQL, (_E,)),
    "Source": ("s.source", ()),
}


@dataclass(frozen=True)
class Sort:
    """A table's order: a column's title and its direction. The default is the store's: newest first."""

    column: str = "Id"
    descending: bool = True

    def flipped_or(self, column: str) -> "Sort":
        """Sorting by the column already sorted reverses it; a new column starts descending."""
        return replace(self, descending=not self.descending) if column == self.column else Sort(column, True)

    def describe(self) -> str:
        return "newest first" if self == Sort() else f"by {self.column} {'↓' if self.descending else '↑'}"


@dataclass(frozen=True)
class SampleLine(SampleRow):
    """A samples-table row with what triage reads beside it."""

    note: str = ""  # the verdict's note: db/verdict.NOTE_* words
    labelled: bool = False  # a person has labelled it (a Fixit mark alone counts)
    snippet: str = ""  # the assembler's first error or the first bad element
    match_line: int | None = None  # 1-based PTX line of the first search match
    match_text: str = ""
    label_note: str = ""  # what the person wrote with the latest label
    correct: int | None = None  # train sizes: 1, 0, or None (unknown: never run), db/verdict.py
    correct_heldout: int | None = None  # held-out sizes, the same way
    engine_version: str | None = None  # of the evaluation that speaks


def _order(sort: Sort) -> tuple[str, str]:
    key, joins = SORT_KEYS.get(sort.column, SORT_KEYS["Id"])
    direction = "DESC" if sort.descending else "ASC"
    tie = f"s.id {direction}"
    # Empty values (never evaluated, no speedup) last in either direction.
    return ("".join(dict.fromkeys(joins)), f"{key} {direction} NULLS LAST, {tie}" if key != "s.id" else tie)


def _query_parts(conn: sqlite3.Connection, flt: SampleFilter, sort: Sort, *, with_eval: bool = False) -> tuple[str, str, str, list[Any]]:
    """(joins, WHERE clause, ORDER BY terms, parameters) of the table's rows in the table's order."""
    where, params, needs_eval = browse._where(flt, browse.find_fts(conn))
    joins, order = _order(sort)
    if needs_eval or with_eval or _E in joins:
        joins = _E + joins.replace(_E, "")  # once, and first: the filter's `e.` conditions read it too
    return joins.replace(_E, shown_join(conn)), where, order, params


def _ordered_ids_sql(flt: SampleFilter, sort: Sort, conn: sqlite3.Connection) -> tuple[str, list[Any]]:
    joins, where, order, params = _query_parts(conn, flt, sort)
    return f"SELECT s.id FROM samples s{joins}{where} ORDER BY {order}", params


@dataclass(frozen=True)
class Order:
    """Every id a filter selects, in a column's order: both directions from one read."""

    column: str
    present: list[int]  # rows with a value, descending (ties: newest first)
    missing: list[int]  # rows without one (never evaluated, no speedup), newest first

    def ids(self, descending: bool) -> list[int]:
        # Empty values stay last either way; ascending reverses the ties as SQL's ORDER BY does.
        return self.present + self.missing if descending else self.present[::-1] + self.missing[::-1]


def ordered(conn: sqlite3.Connection, flt: SampleFilter, column: str) -> Order:
    key, _ = SORT_KEYS.get(column, SORT_KEYS["Id"])
    joins, where, order, params = _query_parts(conn, flt, Sort(column, True))
    present: list[int] = []
    missing: list[int] = []
    for sid, empty in conn.execute(f"SELECT s.id, ({key}) IS NULL FROM samples s{joins}{where} ORDER BY {order}", params):
        (missing if empty else present).append(sid)
    return Order(column, present, missing)


def sorted_ids(conn: sqlite3.Connection, flt: SampleFilter, sort: Sort, offset: int = 0, limit: int = 200) -> list[int]:
    sql, params = _ordered_ids_sql(flt, sort, conn)
    return [r[0] for r in conn.execute(f"{sql} LIMIT ? OFFSET ?", [*params, limit, offset])]


_COLUMNS = (f"{_SAMPLE_COLUMNS}, {VERDICT_NOTE}, {_STATIC_EVIDENCE}, {_evidence('$.static.line')}, "
            f"{_FIRST_FAILURE}, {_evidence('$.message')}, CASE WHEN json_valid(e.evidence) THEN NULL ELSE e.evidence END, "
            f"{LABELLED_SQL.format(sid='s.id')}, "
            f"COALESCE(({_LATEST_LABEL_COL.format(col='l.note')}), ''), {verdict.correct_sql('train')}, "
            f"{verdict.correct_sql('heldout')}, e.engine_version")


def lines_for(conn: sqlite3.Connection, ids: list[int], search: str = "") -> list[SampleLine]:
    """The rows of these samples, in this order, with their snippets (and where `search` first matches)."""
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    rows = {r[0]: r for r in conn.execute(f"{_COLUMNS} {sample_from(conn)} WHERE s.id IN ({marks})", ids)}
    matches = match_lines(conn, ids, search) if search.strip() else {}
    out = []
    for sid in ids:
        r = rows.get(sid)
        if r is None:
            continue
        base = browse._sample_row(r[:15])
        line, text = matches.get(sid, (None, ""))
        parts = r[16:20] if r[20] is None else _evidence_parts(r[20])
        out.append(SampleLine(**base.__dict__, note=r[15] or "", labelled=bool(r[21]), snippet=snippet(*parts),
                              match_line=line, match_text=text, label_note=r[22], correct=r[23],
                              correct_heldout=r[24], engine_version=r[25]))
    return out


def sample_page(conn: sqlite3.Connection, flt: SampleFilter, sort: Sort = Sort(), offset: int = 0,
                limit: int = 200) -> browse.Page:
    """One page of samples in the table's order (rows are SampleLine)."""
    ids = sorted_ids(conn, flt, sort, offset, limit)
    return browse.Page(rows=lines_for(conn, ids, flt.text), offset=offset, limit=limit)  # type: ignore[arg-type]


def _evidence_parts(text: str) -> tuple[Any, Any, Any, Any]:
    """What SNIPPET_SQL reads, from evidence SQLite's JSON cannot parse (Python's can)."""
    try:
        ev = json.loads(text)
    except ValueError:
        return None, None, None, None
    if not isinstance(ev, dict):
        return None, None, None, ev
    static = ev.get("static") if isinstance(ev.get("static"), dict) else {}
    first = ev.get("first_failure") if isinstance(ev.get("first_failure"), dict) else {}
    return static.get("evidence"), static.get("line"), first.get("message"), ev.get("message")


_WORST = re.compile(r"worst element (.*)$")


def snippet(static_evidence: Any, static_line: Any, first_failure: Any, message: Any) -> str:
    """One line a triager can read in a table cell: `L38: Parsing error near 'cvt'`, `[318888]: got -6.5, expected 3.7`."""
    if static_evidence:
        text = str(static_evidence)
        return f"L{static_line}: {text}" if isinstance(static_line, int) else text
    text = str(first_failure or message or "")
    worst = _WORST.search(text)
    if worst:
        return worst.group(1)
    return " ".join(text.split())


def _search_word(text: str) -> str:
    """The longest word of a search: the one most likely to pick the line meant."""
    words = [w.strip('"*') for w in text.split() if w.strip('"*')]
    return max(words, key=len) if words else ""


def match_lines(conn: sqlite3.Connection, ids: list[int], search: str) -> dict[int, tuple[int, str]]:
    """Sample id → (1-based line, the line) of the first line of its PTX that holds the search's longest word."""
    word = _search_word(search).lower()
    if not word or not ids:
        return {}
    marks = ",".join("?" * len(ids))
    # A window around the first match and the newlines before it; the line itself is cut in Python.
    sql = f"""SELECT id, pos, substr(code, max(1, pos - 300), 600), max(1, pos - 300),
                     length(substr(code, 1, pos - 1)) - length(replace(substr(code, 1, pos - 1), char(10), ''))
              FROM (SELECT s.id AS id, COALESCE(e.ptx, s.code) AS code, instr(lower(COALESCE(e.ptx, s.code)), ?) AS pos
                    FROM samples s{shown_join(conn)} WHERE s.id IN ({marks}))
              WHERE pos > 0"""
    out: dict[int, tuple[int, str]] = {}
    for sid, pos, window, start, newlines in conn.execute(sql, [word, *ids]):
        at = pos - start
        line_start = window.rfind("\n", 0, at) + 1
        line_end = window.find("\n", at)
        out[sid] = (newlines + 1, window[line_start:line_end if line_end >= 0 else len(window)].strip())
    return out


# --------------------------------------------------------------------------- next unlabelled failure


def _numbered(conn: sqlite3.Connection, flt: SampleFilter, sort: Sort, flag: str) -> tuple[str, list[Any]]:
    """Rows (pos, id, flag) in the table's order, pos counted from 0."""
    joins, where, order, params = _query_parts(conn, flt, sort, with_eval=True)
    return (f"SELECT pos, id FROM (SELECT s.id AS id, {flag} AS flag, ROW_NUMBER() OVER (ORDER BY {order}) - 1 AS pos "
            f"FROM samples s{joins}{where})"), params


def next_unlabelled(conn: sqlite3.Connection, flt: SampleFilter, sort: Sort, position: int,
                    *, backwards: bool = False) -> tuple[int, int] | None:
    """(position in the table's order, sample id) of the nearest unlabelled failure after
    (or before) `position`, or None. One ordered pass; the filter and sort are the table's."""
    sql, params = _numbered(conn, flt, sort, UNLABELLED_FAILURE)
    if backwards:
        row = conn.execute(f"{sql} WHERE flag AND pos < ? ORDER BY pos DESC LIMIT 1", [*params, position]).fetchone()
    else:
        row = conn.execute(f"{sql} WHERE flag AND pos > ? ORDER BY pos LIMIT 1", [*params, position]).fetchone()
    return (row[0], row[1]) if row else None


def position_of(conn: sqlite3.Connection, flt: SampleFilter, sort: Sort, sample_id: int) -> int | None:
    """Where a sample stands in the table's order (None: the filter leaves it out)."""
    sql, params = _numbered(conn, flt, sort, "1")
    row = conn.execute(f"{sql} WHERE id = ?", [*params, sample_id]).fetchone()
    return row[0] if row else None


# --------------------------------------------------------------------------- counts by label


UNLABELLED = "(no label)"


def label_triage(conn: sqlite3.Connection, dimension: str = "model", *, include_unlabelled: bool = True) -> TriageTable:
    """Samples counted by their latest label (its category, `(note)` for a note alone) by model,
    task or context level; with `include_unlabelled`, a row of the failures no one has labelled."""
    if dimension not in TRIAGE_DIMENSIONS:
        raise ValueError(f"unknown triage dimension {dimension!r}")
    column = {"model": "COALESCE(m.name, '?')", "task": "s.task_id", "level": LEVEL}[dimension]
    counts: dict[str, dict[str, int]] = {}
    sql = f"SELECT {LABEL_SQL} AS label, {column}, COUNT(*) {sample_from(conn)} WHERE s.id IN (SELECT sample_id FROM labels) GROUP BY 1, 2"
    for label, value, n in conn.execute(sql):
        if label is not None:
            counts.setdefault(label, {})[value] = n
    if include_unlabelled:
        for value, n in conn.execute(f"SELECT {column}, COUNT(*) {sample_from(conn)} WHERE {UNLABELLED_FAILURE} GROUP BY 1"):
            counts.setdefault(UNLABELLED, {})[value] = n
    columns = sorted({v for by in counts.values() for v in by})
    rows = [(label, "", sum(by.values()), [by.get(c, 0) for c in columns])
            for label, by in sorted(counts.items(), key=lambda kv: (kv[0] == UNLABELLED, -sum(kv[1].values()), kv[0]))]
    return TriageTable(dimension, columns, rows)


# --------------------------------------------------------------------------- exports


# `verdict` is the category with its notes as the views write it; `verdict_note` the notes' words
# (db/verdict.NOTE_*); correctness per split (1, 0, empty: unknown); `label_note` what the person wrote.
EXPORT_FIELDS = ("id", "task_id", "arch", "model", "context_level", "turn", "sample_index", "category", "verdict",
                 "verdict_note", "correct_train", "correct_heldout", "label", "label_note", "fixit", "speedup",
                 "time_ms", "source", "snippet", "evaluation_id", "status", "engine_version")


def iter_lines(conn: sqlite3.Connection, flt: SampleFilter, sort: Sort, chunk: int = 1000) -> Iterator[SampleLine]:
    """Every sample the filter selects, in the table's order, read a chunk at a time."""
    sql, params = _ordered_ids_sql(flt, sort, conn)
    ids = [r[0] for r in conn.execute(sql, params)]
    for i in range(0, len(ids), chunk):
        yield from lines_for(conn, ids[i:i + chunk])


def line_dict(line: SampleLine) -> dict[str, Any]:
    shown = {"verdict": None if line.category is None else verdict.written(line.category, line.note),
             "verdict_note": line.note, "correct_train": line.correct}
    return {name: shown[name] if name in shown else getattr(line, name) for name in EXPORT_FIELDS}


def sample_codes(conn: sqlite3.Connection, ids: list[int]) -> dict[int, str]:
    """The PTX each sample was judged on (nvcc's output for CUDA candidates), else its code."""
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    return dict(conn.execute(
        f"SELECT s.id, COALESCE(e.ptx, s.code) FROM samples s{shown_join(conn)} "
        f"WHERE s.id IN ({marks})", ids))


def dumps(value: Any) -> str:
    return json.dumps(value, indent=1, default=str)


# --------------------------------------------------------------------------- fixit pairs, sorted


FIXIT_SORT_KEYS: dict[str, str] = {
    "Failed": "failed_sample_id", "Fixed": "fixed_sample_id", "Task": "task_id", "Category": "category",
    "Kind": "kind", "Verified": "verification", "Counts": "counts", "Explanation source": "explanation_source",
    "Expl.": "explanations", "Model": "model", "Arch": "arch", "Fix": "fix_id",
}


def changes_text(change: tuple[bool, bool]) -> str:
    """What a fix changes, as the Fixit table says it: code, manifest, both, or nothing."""
    return ", ".join(what for what, yes in zip(("code", "manifest"), change) if yes) or "nothing"


def fixit_page(conn: sqlite3.Connection, *, sort: Sort | None, offset: int, limit: int,
               **filters: Any) -> tuple[list[Any], int, dict[tuple[int, int], tuple[bool, bool]]]:
    """A page of Fixit pairs (db.fixit's rows and filters) in any column's order, its total, and what
    each fix changes. A sort reads every pair the filter selects (pairs are few: the store's fixes)."""
    from ptxbench.db import fixit as fixit_db

    if sort is None:
        rows, total = fixit_db.fixit_pair_page(conn, **filters, limit=limit, offset=offset)
        return rows, total, fixit_db.fixit_changes(conn, [(r.failed_sample_id, r.fixed_sample_id) for r in rows])
    rows = fixit_db.fixit_pairs(conn, **filters, limit=1 << 31)
    changes = fixit_db.fixit_changes(conn, [(r.failed_sample_id, r.fixed_sample_id) for r in rows])
    if sort.column == "Changes":
        key = lambda r: changes_text(changes.get((r.failed_sample_id, r.fixed_sample_id), (False, False)))
    else:
        attr = FIXIT_SORT_KEYS.get(sort.column, "fix_id")
        key = lambda r: getattr(r, attr)
    present = sorted((r for r in rows if key(r) is not None), key=key, reverse=sort.descending)
    ordered = present + [r for r in rows if key(r) is None]
    page = ordered[offset:offset + limit]
    return page, len(rows), {k: v for k, v in changes.items() if k in {(r.failed_sample_id, r.fixed_sample_id) for r in page}}
