"""The overview's summary of a store, kept between runs.

Folding 100 000 samples into the overview's cells takes a few hundred
milliseconds; a store that has not changed since the last start need not
wait for it. The summary is saved with a fingerprint of the store
(`browse_summary.fingerprint`) and shown at once when the fingerprint
matches; the explorer still recomputes it in the background and replaces it
if anything differs. The store is read through the app's StoreReader.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

from ptxbench.db import browse_summary as summary
from ptxbench.db.reader import StoreReader


def cache_file(store: Path) -> Path:
    env = os.environ.get("PTXBENCH_CACHE_DIR")
    if env:
        folder = Path(env)
    else:
        import platformdirs

        folder = Path(platformdirs.user_cache_dir("ptxbench", appauthor=False))
    digest = hashlib.sha256(str(store.resolve()).encode()).hexdigest()[:16]
    return folder / "explorer" / f"summary-{digest}.json"


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


def compute(reader: StoreReader) -> tuple[list[summary.Cell], summary.Facets]:
    """The summary read fresh from the store (one read snapshot), saved for the next start."""
    fp, cells, facets = reader.read(summary.snapshot)
    save(reader.path, fp, cells, facets)
    return cells, facets


def cached(reader: StoreReader) -> tuple[list[summary.Cell], summary.Facets] | None:
    return load(reader.path, reader.read(summary.fingerprint))
