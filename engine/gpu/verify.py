"""Check one trial's buffers: canaries, inputs, unwritten outputs, NaN/Inf, then the values.

The order is the verify stage's priority (engine/categories.py): a write past
a buffer outranks a modified input, which outranks an unwritten element,
which outranks a computed NaN/Inf, which outranks a value off the reference.
Values are compared with the task's metric: ``rel_l2`` = ‖out − ref‖₂ / ‖ref‖₂
or ``max_abs`` = max |out − ref|, in float64 for 32/64-bit outputs and float32
for narrower ones (the reference is already in higher precision). The worst
element (largest |out − ref|) is reported with its index, the value got, the
value expected and its relative error.

Runs inside the worker process only (imports torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ptxbench.engine.gpu.buffers import Arena, GuardedBuffer


@dataclass
class Verdict:
    category: str = "ok"
    errors: dict[str, float] = field(default_factory=dict)
    worst: dict[str, Any] | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for dim in reversed(shape):
        out.append(flat % dim)
        flat //= dim
    return list(reversed(out))


def _number(x: float) -> float | str:
    """JSON-safe: NaN and Inf as strings."""
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def compare(name: str, out: torch.Tensor, ref: torch.Tensor, metric: str) -> tuple[float, dict[str, Any]]:
    """(metric value, worst element) for one output against its reference."""
    work = torch.float64 if out.element_size() >= 4 else torch.float32
    o = out.reshape(-1).to(work)
    r = ref.reshape(-1).to(work)
    diff = (o - r).abs_()
    # Where the reference itself is not finite, only an identical value counts as right.
    ref_bad = ~torch.isfinite(r)
    if bool(ref_bad.any()):
        same = (o == r) | (torch.isnan(o) & torch.isnan(r))
        diff = torch.where(ref_bad, torch.where(same, 0.0, float("inf")).to(work), diff)
    if metric == "max_abs":
        value = float(diff.max()) if diff.numel() else 0.0
    else:
        finite_ref = torch.where(ref_bad, 0.0, r) if bool(ref_bad.any()) else r
        denom = float(torch.linalg.vector_norm(finite_ref))
        num = float(torch.linalg.vector_norm(diff))
        value = num / denom if denom > 0 else num
    idx = int(diff.argmax()) if diff.numel() else 0
    got, expected = float(o[idx]), float(r[idx])
    abs_err = abs(got - expected) if math.isfinite(got) and math.isfinite(expected) else float("inf")
    worst = {
        "output": name,
        "index": _unravel(idx, tuple(out.shape)),
        "got": _number(got),
        "expected": _number(expected),
        "abs_err": _number(abs_err),
        "rel_err": _number(abs_err / abs(expected) if expected else abs_err),
    }
    return value, worst


def verify(arena: Arena, pristine: dict[str, torch.Tensor], reference: dict[str, torch.Tensor],
           metric: str, tolerances: dict[str, float]) -> Verdict:
    """The verify verdict for one trial (everything already synchronized)."""
    damaged = [d for d in (b.guard_damage() for b in arena.buffers.values()) if d]
    if damaged:
        return Verdict("out_of_bounds_write", detail={"canaries": damaged})

    changed = {}
    for buf in arena.by_role("input"):
        count, first = buf.differs_from(pristine[buf.name])
        if count:
            changed[buf.name] = {"elements": count, "first_index": _unravel(first or 0, buf.shape)}
    if changed:
        return Verdict("input_modified", detail={"inputs": changed})

    outputs: list[GuardedBuffer] = arena.by_role("output")
    unwritten = {}
    for buf in outputs:
        count, first = buf.unwritten()
        if count:
            unwritten[buf.name] = {"elements": count, "of": buf.tensor.numel(),
                                   "first_index": _unravel(first or 0, buf.shape)}
    if unwritten:
        return Verdict("unwritten_output", detail={"unwritten": unwritten})

    nonfinite = {}
    for buf in outputs:
        bad = ~torch.isfinite(buf.tensor.reshape(-1).float()) & torch.isfinite(reference[buf.name].reshape(-1))
        count = int(bad.sum())
        if count:
            first = int(bad.nonzero()[0, 0])
            nonfinite[buf.name] = {"elements": count, "first_index": _unravel(first, buf.shape),
                                   "value": _number(float(buf.tensor.reshape(-1)[first].float()))}
    if nonfinite:
        return Verdict("nan_inf", detail={"nonfinite": nonfinite})

    verdict = Verdict()
    worst_ratio = -1.0
    for buf in outputs:
        value, worst = compare(buf.name, buf.tensor, reference[buf.name], metric)
        verdict.errors[buf.name] = value
        limit = tolerances[buf.name]
        worst.update({"metric": metric, "value": _number(value), "tolerance": limit})
        ratio = value / limit if math.isfinite(value) else math.inf
        if ratio > worst_ratio:
            worst_ratio, verdict.worst = ratio, worst
        if not value <= limit:
            verdict.category = "wrong_result"
    return verdict
