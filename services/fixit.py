"""Fixit over the store: fix pairs found and kept, the fine-tuning set written, the statistics.

The records and the logic are `ptxbench.fixit` (pairing, selection, export, statistics); the
store's side is `ptxbench.db.fixit`. This module is the work `ptxbench fixit pairs | export |
stats` asks for, so a script or another front end gets the same results. Models in the loop
(repairs, written explanations) are services/fixit_models.py; training, services/fixit_training.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

from ptxbench.services.catalogue import require_context, require_tasks
from ptxbench.services.errors import UsageError


def open_store(db: Path | None, *, create: bool = False, hint: str | None = None) -> sqlite_utils.Database:
    """The store named, or the default one (created and seeded). A named store must already exist
    unless `create` (NoStore says the path and `hint`, by default how to make one). StoreError when it
    will not open."""
    from ptxbench.db.access import CREATE_HINT
    from ptxbench.db.seed import ensure_default_store, open_for_writing

    if db is None:
        return ensure_default_store()
    return open_for_writing(db, create=create, seed=False, hint=hint or CREATE_HINT)


# -- pairs ------------------------------------------------------------------------------------------


@dataclass
class PairsResult:
    found: Any  # fixit.pairing.Proposal: pairs, unverified, already_stored …
    stored: list[Any] = field(default_factory=list)
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        found = self.found
        return {
            **found.summary(),
            "stored": len(self.stored),
            "dry_run": self.dry_run,
            "pairs_found": [
                {
                    "failed": p.failed.id,
                    "fixed": p.fixed.id,
                    "kind": p.kind,
                    "category": p.category,
                    "task": p.task_id,
                    "verification": p.verification,
                }
                for p in found.pairs
            ],
            "unverified_pairs": [
                {
                    "failed": p.failed.id,
                    "fixed": p.fixed.id,
                    "kind": p.kind,
                    "task": p.task_id,
                    "why": "the fix passed the static stages only; run it on a GPU "
                    "(ptxbench eval) or pass --allow-static",
                }
                for p in found.unverified
            ],
        }


def find_pairs(
    db: sqlite_utils.Database,
    *,
    tasks: list[str] | None = None,
    models: list[str] | None = None,
    kinds: list[str] | None = None,
    allow_static: bool = False,
    marked_only: bool = False,
    dry_run: bool = False,
) -> PairsResult:
    """Find fix pairs for failed samples (a later turn, another sample of the same model, the expert)
    and store the verified ones with a derived explanation, unless `dry_run`."""
    from ptxbench.db.fixit import load_samples, store_pairs, stored_pairs
    from ptxbench.fixit.explain import DERIVED_SOURCE, derived_explanation
    from ptxbench.fixit.pairing import AUTO_KINDS, propose_pairs

    chosen = tuple(kinds) if kinds else AUTO_KINDS
    bad = [k for k in chosen if k not in AUTO_KINDS]
    if bad:
        raise UsageError(f"--kind {', '.join(bad)}: pairing finds {', '.join(AUTO_KINDS)}")
    tasks = require_tasks(tasks)
    samples = load_samples(db, task_ids=tasks, models=models)
    existing = {p.key for p in stored_pairs(db, task_ids=tasks, include_code=False)}
    found = propose_pairs(samples, existing=existing, kinds=chosen, allow_static=allow_static, marked_only=marked_only)
    stored = []
    if not dry_run and found.pairs:
        for p in found.pairs:
            if p.verification != "gpu":
                p.source = f"{p.source} (static only)"
        stored = store_pairs(db, [(p, derived_explanation(p), DERIVED_SOURCE) for p in found.pairs])
    return PairsResult(found, stored, dry_run)


def repair_targets(
    db: sqlite_utils.Database,
    *,
    tasks: list[str] | None = None,
    allow_static: bool = False,
    include_fixed: bool = False,
    limit: int = 50,
) -> list[Any]:
    """The failed samples a repair run asks about: model failures on the train sizes, without a
    counting fix (unless `include_fixed`), never a repair itself; at most `limit`."""
    from ptxbench.db.fixit import load_samples, stored_pairs

    tasks = require_tasks(tasks)
    fixed = {
        p.failed.id for p in stored_pairs(db, task_ids=tasks, include_code=False) if p.counts(allow_static=allow_static)
    }
    targets = [
        s
        for s in load_samples(db, task_ids=tasks)
        if s.train_failure
        and s.model_kind != "expert"
        and (include_fixed or s.id not in fixed)
        and not s.source.startswith("fixit repair of sample")
    ]
    return targets[:limit]


def counting_pairs(
    db: sqlite_utils.Database, *, tasks: list[str] | None = None, allow_static: bool = False
) -> list[Any]:
    """The stored pairs that count (their fix passed on a GPU, or statically with `allow_static`)."""
    from ptxbench.db.fixit import stored_pairs

    return [p for p in stored_pairs(db, task_ids=require_tasks(tasks)) if p.counts(allow_static=allow_static)]


# -- export -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportRequest:
    out: Path
    parquet: Path | None = None
    tasks: list[str] | None = None
    cap_per_task: int = 200  # 0: no cap
    cap_per_category: int = 100  # 0: no cap
    val_fraction: float = 0.1
    heldout_tasks: tuple[str, ...] = ()
    heldout_variants: tuple[str, ...] = ()
    heldout_size_failures: bool = True
    dedup_threshold: float = 0.9
    allow_static: bool = False
    context: str | None = None
    explanation: str = "preferred"  # or "derived"
    seed: int = 0


def export_set(db: sqlite_utils.Database, request: ExportRequest) -> tuple[dict[str, Any], int]:
    """Write the fine-tuning set (JSONL, optionally Parquet) and OUT.stats.json; keep the statistics in
    the store. Returns (statistics, how many stored pairs were considered). Every file is checked
    before any is written (UnsafeOutput, a StoreError, for the store, a part of it or any SQLite
    file) and each is written whole or not at all (db/files.py)."""
    from ptxbench.db.files import atomic_output, check_output
    from ptxbench.db.fixit import save_export_stats, stored_pairs
    from ptxbench.db.store import store_file
    from ptxbench.fixit.export import build_examples, dump_jsonl, dump_parquet
    from ptxbench.fixit.select import SelectConfig, select_pairs
    from ptxbench.fixit.stats import diversity_stats
    from ptxbench.services.fixit_models import attach_feedback

    r = request
    require_context(r.context)
    if r.explanation not in ("preferred", "derived"):
        raise UsageError("--explanation must be preferred or derived")
    if not r.out.parent.is_dir():
        raise UsageError(f"{r.out.parent} is not a folder")
    stats_file = r.out.with_name(r.out.name.removesuffix(".jsonl") + ".stats.json")
    outputs = [r.out, stats_file, *([r.parquet] if r.parquet is not None else [])]
    for target in outputs:
        check_output(target, stores=[store_file(db)])
    require_tasks(list(r.heldout_tasks))
    try:
        config = SelectConfig(
            cap_per_task=r.cap_per_task or None,
            cap_per_category=r.cap_per_category or None,
            val_fraction=r.val_fraction,
            heldout_tasks=tuple(r.heldout_tasks),
            heldout_variants=tuple(r.heldout_variants),
            heldout_size_failures=r.heldout_size_failures,
            dedup_threshold=r.dedup_threshold,
            allow_static=r.allow_static,
            seed=r.seed,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    found = stored_pairs(db, task_ids=require_tasks(r.tasks))
    attach_feedback(db, [p.failed for p in found])
    selection = select_pairs(found, config)
    examples = build_examples(selection, context=r.context, explanation=r.explanation)
    with atomic_output(r.out, stores=[store_file(db)]) as fh:
        dump_jsonl(fh, examples)
    if r.parquet is not None:
        with atomic_output(r.parquet, stores=[store_file(db)], binary=True) as fh:
            dump_parquet(fh, examples)
    stats = diversity_stats(examples, selection)
    stats["files"] = {"jsonl": str(r.out), "parquet": str(r.parquet) if r.parquet else None}
    stats["explanation"] = r.explanation
    stats["dropped_pairs"] = [
        {"failed": p.failed.id, "fixed": p.fixed.id, "reason": why} for p, why in selection.dropped
    ]
    with atomic_output(stats_file, stores=[store_file(db)]) as fh:
        fh.write(json.dumps(stats, indent=2, default=str))
    save_export_stats(db, {k: v for k, v in stats.items() if k != "dropped_pairs"}, str(r.out))
    return stats, len(found)


def store_stats(db: sqlite_utils.Database) -> dict[str, Any]:
    """What the store holds for Fixit: pairs per category, task, arch, kind; the last export."""
    from ptxbench.db.fixit import fixit_stats

    return fixit_stats(db)
