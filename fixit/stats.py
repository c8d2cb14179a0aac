"""Diversity statistics of a Fixit set: how many pairs per category, task, arch, kind and
split, and how long they are. A smaller, more varied set beat a larger, less varied one
in the paper; these numbers show which one a set is."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ptxbench.fixit.export import Example
from ptxbench.fixit.select import SPLITS, Selection


def distribution(values: Sequence[float]) -> dict[str, float | int | None]:
    """min, p10, p50, p90, max and mean (nearest-rank percentiles)."""
    if not values:
        return {"n": 0, "min": None, "p10": None, "p50": None, "p90": None, "max": None, "mean": None}
    xs = sorted(values)

    def pct(p: float) -> float:
        return xs[min(len(xs) - 1, max(0, math.ceil(p / 100 * len(xs)) - 1))]

    return {"n": len(xs), "min": xs[0], "p10": pct(10), "p50": pct(50), "p90": pct(90), "max": xs[-1],
            "mean": round(sum(xs) / len(xs), 1)}


def entropy_bits(counts: Iterable[int]) -> float:
    """Shannon entropy of a count table: log2(k) when k groups are equally full."""
    xs = [c for c in counts if c > 0]
    n = sum(xs)
    if n == 0:
        return 0.0
    return round(abs(-sum(c / n * math.log2(c / n) for c in xs)), 3)


def _table(examples: Sequence[Example], key: str) -> dict[str, int]:
    return dict(sorted(Counter(str(e.meta.get(key)) for e in examples).items(), key=lambda kv: (-kv[1], kv[0])))


def split_stats(examples: Sequence[Example]) -> dict[str, Any]:
    cats = _table(examples, "category")
    return {
        "pairs": len(examples),
        "per_category": cats,
        "per_task": _table(examples, "task_id"),
        "per_arch": _table(examples, "arch"),
        "per_kind": _table(examples, "kind"),
        "per_verification": _table(examples, "verification"),
        "per_explanation_source": _table(examples, "explanation_source"),
        "category_entropy_bits": entropy_bits(cats.values()),
        "length_chars": distribution([e.chars for e in examples]),
        "failed_lines": distribution([e.meta.get("failed_lines", 0) for e in examples]),
        "fixed_lines": distribution([e.meta.get("fixed_lines", 0) for e in examples]),
        "target_chars": distribution([len(e.messages[-1]["content"]) for e in examples]),
    }


def diversity_stats(examples: Sequence[Example], selection: Selection | None = None) -> dict[str, Any]:
    """Statistics of the whole set and of each split; with the selection, what was dropped and why."""
    out: dict[str, Any] = {"all": split_stats(examples)}
    for name in SPLITS:
        out[name] = split_stats([e for e in examples if e.split == name])
    if selection is not None:
        cfg = selection.config
        out["dropped"] = selection.dropped_counts()
        out["config"] = {
            "cap_per_task": cfg.cap_per_task, "cap_per_category": cfg.cap_per_category,
            "val_fraction": cfg.val_fraction, "heldout_tasks": list(cfg.heldout_tasks),
            "heldout_variants": list(cfg.heldout_variants), "heldout_size_failures": cfg.heldout_size_failures,
            "dedup_threshold": cfg.dedup_threshold, "allow_static": cfg.allow_static, "seed": cfg.seed,
        }
    return out
