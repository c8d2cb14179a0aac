"""Benchmark metrics over a store (db/metrics.py), for `ptxbench report` and any other reader.

The explorer's Plots view reads the same function through its store reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptxbench.db.metrics import GROUP_KEYS, MetricsRow, compute_metrics
from ptxbench.services.errors import UsageError

__all__ = ["GROUP_KEYS", "MetricsRow", "metrics"]


def metrics(db_path: Path | None, *, group_by: list[str], **filters: Any) -> list[MetricsRow]:
    """Rows of `compute_metrics` over the store at `db_path` (None: the default store), opened read-only.
    UsageError for an unknown group key, a missing store, or one that cannot be read."""
    from ptxbench.db.store import StoreError, default_store_path, open_store

    unknown = [g for g in group_by if g not in GROUP_KEYS]
    if unknown:
        raise UsageError(f"--by: cannot group by {', '.join(unknown)} (choose from {', '.join(GROUP_KEYS)})")
    path = db_path if db_path is not None else default_store_path()
    if not Path(path).exists():
        raise UsageError(f"no store at {path} (run `ptxbench run` or `ptxbench import` first)")
    try:
        db = open_store(path, readonly=True)
        try:
            return compute_metrics(db, group_by=group_by, **filters)
        finally:
            db.conn.close()
    except (StoreError, ValueError) as exc:
        raise UsageError(str(exc)) from None
