"""Benchmark metrics over a store (db/metrics.py), for `ptxbench report` and any other reader.

The explorer's Plots view reads the same function through its store reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptxbench.db.fallback import FallbackRow
from ptxbench.db.headline import HeadlineRow
from ptxbench.db.metrics import GROUP_KEYS, MetricsRow, compute_metrics
from ptxbench.tasks.published import Published
from ptxbench.services.errors import UsageError

__all__ = ["GROUP_KEYS", "FallbackRow", "HeadlineLine", "MetricsRow", "fallback", "headline", "metrics"]


def metrics(db_path: Path | None, *, group_by: list[str], **filters: Any) -> list[MetricsRow]:
    """Rows of `compute_metrics` over the store at `db_path` (None: the default store), opened read-only.
    UsageError for an unknown group key, a missing store, or one that cannot be read."""
    unknown = [g for g in group_by if g not in GROUP_KEYS]
    if unknown:
        raise UsageError(f"--by: cannot group by {', '.join(unknown)} (choose from {', '.join(GROUP_KEYS)})")
    rows: list[MetricsRow] = _read(db_path, lambda db: compute_metrics(db, group_by=group_by, **filters))
    return rows


@dataclass(frozen=True)
class HeadlineLine:
    """A headline row and, where the paper published a number for its task at exactly its budget, theirs."""

    row: HeadlineRow
    paper: Published | None


def headline(db_path: Path | None, **filters: Any) -> list[HeadlineLine]:
    """The headline table (db/headline.py) over the store at `db_path`, opened read-only, each row
    beside the paper's best published number for its task at the same turn limit (none at a budget
    the paper did not publish). UsageError as `metrics`."""
    from ptxbench.db.headline import headline as compute
    from ptxbench.tasks.published import TURN_LIMITS, best_published

    rows = _read(db_path, lambda db: compute(db, **filters))
    return [
        HeadlineLine(r, best_published(r.task, r.turn_budget) if r.turn_budget in TURN_LIMITS else None) for r in rows
    ]


def fallback(db_path: Path | None, **filters: Any) -> list[FallbackRow]:
    """The generic-fallback finding (db/fallback.py) over the store at `db_path`, opened read-only.
    UsageError as `metrics`."""
    from ptxbench.db.fallback import fallback as compute

    rows: list[FallbackRow] = _read(db_path, lambda db: compute(db, **filters))
    return rows


def paper_source() -> str:
    from ptxbench.tasks.published import source

    return source()


def _read(db_path: Path | None, fn: Any) -> Any:
    from ptxbench.db.store import StoreError, default_store_path, open_store

    path = db_path if db_path is not None else default_store_path()
    if not Path(path).exists():
        raise UsageError(f"no store at {path} (run `ptxbench run` or `ptxbench import` first)")
    try:
        db = open_store(path, readonly=True)
        try:
            return fn(db)
        finally:
            db.conn.close()
    except (StoreError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def paper_best() -> list[tuple[str, dict[int, Published]]]:
    """Per task the paper shares with PTXBench: its best published number at each turn limit."""
    from ptxbench.tasks.published import TURN_LIMITS, best_published, published

    tasks = sorted({p.task_id for p in published()})
    out = []
    for task in tasks:
        found = {limit: best_published(task, limit) for limit in TURN_LIMITS}
        out.append((task, {k: v for k, v in found.items() if v is not None}))
    return out
