"""The store's samples (each with its evaluations, their measurements and the sample's labels) and its
agent episodes (each with its steps) as plain records, for an export (services/export.py).

Read only, from one connection the caller holds in one snapshot. Samples are read in id order a chunk
at a time, with their evaluations, measurements and labels fetched for that chunk, so a store of a
hundred thousand samples is never in memory at once.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from ptxbench.db.records import Evaluation, Measurement, Sample, from_row

SAMPLE_SCHEMA = "ptxbench.sample/1"
TRAJECTORY_SCHEMA = "ptxbench.trajectory/1"
CHUNK = 500
HEAVY = ("ptx", "sass", "assembler_log")       # an evaluation's texts: kept only when asked for


def _rows(conn: sqlite3.Connection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cur = conn.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def _by(rows: list[dict[str, Any]], key: str) -> dict[Any, list[dict[str, Any]]]:
    out: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r[key], []).append(r)
    return out


def _in(ids: list[int]) -> str:
    return ",".join("?" * len(ids))


def _in_chunks(conn: sqlite3.Connection, table: str) -> Iterator[list[dict[str, Any]]]:
    """A table's rows in id order, CHUNK at a time."""
    last = 0
    while chunk := _rows(conn, f"SELECT * FROM {table} WHERE id > ? ORDER BY id LIMIT ?", [last, CHUNK]):
        last = chunk[-1]["id"]
        yield chunk


def _known(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def sample_records(conn: sqlite3.Connection, *, texts: bool = False) -> Iterator[dict[str, Any]]:
    """One record a sample, in id order: its fields, its model and run, every evaluation (newest last) with
    its measurements, and its labels. `texts`: keep each evaluation's PTX, SASS and assembler log."""
    models = {r["id"]: r["name"] for r in _rows(conn, "SELECT id, name FROM models", [])}
    runs = {r["id"]: r for r in _rows(conn, "SELECT * FROM runs", [])}
    label_columns = _known(conn, "labels")
    for chunk in _in_chunks(conn, "samples"):
        ids = [r["id"] for r in chunk]
        evals = _by(_rows(conn, f"SELECT * FROM evaluations WHERE sample_id IN ({_in(ids)}) ORDER BY id", ids),
                    "sample_id")
        eval_ids = [e["id"] for es in evals.values() for e in es]
        measured = _by(_rows(conn, f"SELECT * FROM measurements WHERE evaluation_id IN ({_in(eval_ids)}) "
                                   "ORDER BY id", eval_ids), "evaluation_id") if eval_ids else {}
        labels = _by(_rows(conn, f"SELECT * FROM labels WHERE sample_id IN ({_in(ids)}) ORDER BY id", ids),
                     "sample_id") if "sample_id" in label_columns else {}
        for row in chunk:
            sample = asdict(from_row(Sample, row))
            run = runs.get(row.get("run_id"))
            record: dict[str, Any] = {"schema": SAMPLE_SCHEMA, **sample,
                                      "model": models.get(row.get("model_id")),
                                      "run": _run(run) if run else None}
            record["evaluations"] = [_evaluation(e, measured.get(e["id"], []), texts) for e in evals.get(row["id"], [])]
            record["labels"] = labels.get(row["id"], [])
            yield record


def _run(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    if isinstance(out.get("params"), str):
        try:
            out["params"] = json.loads(out["params"])
        except ValueError:
            pass
    return out


def _evaluation(row: dict[str, Any], measurements: list[dict[str, Any]], texts: bool) -> dict[str, Any]:
    out = asdict(from_row(Evaluation, row))
    if not texts:
        for name in HEAVY:
            out.pop(name, None)
    out["measurements"] = [asdict(from_row(Measurement, m)) for m in measurements]
    return out


def trajectory_records(conn: sqlite3.Connection) -> Iterator[dict[str, Any]]:
    """One record an agent episode, in id order, with its steps in order (arguments and results as stored)."""
    if "id" not in _known(conn, "agent_episodes"):
        return
    models = {r["id"]: r["name"] for r in _rows(conn, "SELECT id, name FROM models", [])}
    runs = {r["id"]: r for r in _rows(conn, "SELECT * FROM runs", [])}
    for chunk in _in_chunks(conn, "agent_episodes"):
        ids = [r["id"] for r in chunk]
        steps = _by(_rows(conn, f"SELECT * FROM agent_steps WHERE episode_id IN ({_in(ids)}) ORDER BY step", ids),
                    "episode_id")
        for row in chunk:
            episode = dict(row)
            for name in ("budgets",):
                if isinstance(episode.get(name), str):
                    try:
                        episode[name] = json.loads(episode[name])
                    except ValueError:
                        pass
            run = runs.get(row.get("run_id"))
            yield {"schema": TRAJECTORY_SCHEMA, **episode,
                   "model": models.get(run.get("model_id")) if run else None,
                   "steps": [_step(s) for s in steps.get(row["id"], [])]}


def _step(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    if isinstance(out.get("result"), str):
        try:
            out["result"] = json.loads(out["result"])
        except ValueError:
            pass
    return out
