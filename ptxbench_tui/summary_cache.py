"""The overview's summary of a store, kept between runs.

Folding 100 000 samples into the overview's cells takes a few hundred
milliseconds; a store that has not changed since the last start need not
wait for it. The summary is saved with a fingerprint of the store (row
counts and highest ids of the tables it reads; evaluations are append-only)
and shown at once when the fingerprint matches; the explorer still
recomputes it in the background and replaces it if anything differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from dataclasses import asdict
from pathlib import Path

from ptxbench.db import browse
from ptxbench.db import browse_summary as summary

VERSION = 1


def cache_file(store: Path) -> Path:
    env = os.environ.get("PTXBENCH_CACHE_DIR")
    if env:
        folder = Path(env)
    else:
        import platformdirs

        folder = Path(platformdirs.user_cache_dir("ptxbench", appauthor=False))
    digest = hashlib.sha256(str(store.resolve()).encode()).hexdigest()[:16]
    return folder / "explorer" / f"summary-{digest}.json"


def fingerprint(conn: sqlite3.Connection) -> list:
    row = conn.execute(
        """SELECT (SELECT COUNT(*) FROM samples), (SELECT MAX(id) FROM samples),
                  (SELECT COUNT(*) FROM evaluations), (SELECT MAX(id) FROM evaluations)"""
    ).fetchone()
    small = hashlib.sha256()
    for sql in ("SELECT id, model_id, context_level FROM runs ORDER BY id", "SELECT id, name FROM models ORDER BY id",
                "SELECT id, arch FROM tasks ORDER BY id"):
        small.update(json.dumps(conn.execute(sql).fetchall()).encode())
    return [VERSION, *row, small.hexdigest()]


def load(store: Path, fp: list) -> tuple[list[summary.Cell], summary.Facets] | None:
    path = cache_file(store)
    try:
        data = json.loads(path.read_text())
        if data.get("fingerprint") != fp:
            return None
        cells = [summary.Cell(*c[:7], tuple(c[7]), tuple(c[8]), tuple(c[9]), tuple(c[10]), *c[11:]) for c in data["cells"]]
        return cells, summary.Facets(**data["facets"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(store: Path, fp: list, cells: list[summary.Cell], facets: summary.Facets) -> None:
    path = cache_file(store)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        payload = {
            "fingerprint": fp,
            "cells": [[getattr(c, f) for f in summary.Cell.__dataclass_fields__] for c in cells],
            "facets": asdict(facets),
        }
        tmp.write_text(json.dumps(payload))
        tmp.replace(path)
    except OSError:
        pass  # a cache that cannot be written only costs time


def compute(store: Path) -> tuple[list[summary.Cell], summary.Facets]:
    """The summary read fresh from the store (one read snapshot), saved for the next start."""
    conn = browse.connect(store, cached=False)
    try:
        conn.execute("BEGIN")
        fp = fingerprint(conn)
        cells, facets = summary.cells(conn), summary.facets(conn)
        conn.execute("COMMIT")
    finally:
        conn.close()
    save(store, fp, cells, facets)
    return cells, facets


def cached(store: Path) -> tuple[list[summary.Cell], summary.Facets] | None:
    conn = browse.connect(store, cached=False)
    try:
        return load(store, fingerprint(conn))
    finally:
        conn.close()
