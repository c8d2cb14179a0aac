"""Check a launch's buffers: canaries, inputs, unwritten outputs, NaN/Inf, then the values.

The order is the verify stage's priority (engine/categories.py): a write past
a buffer outranks a modified input, which outranks an unwritten element,
which outranks a computed NaN/Inf, which outranks a value off the reference.

Values must pass two tests. The aggregate metric (``rel_l2`` = ‖out − ref‖₂ /
‖ref‖₂, or ``max_abs``) measures precision. The element bound (tasks/spec.py
`ElementBound`: |got − ref| ≤ atol·rms(ref) + rtol·|ref| for every element, or
all but a stated tiny fraction) catches what an aggregate averages away: zeros
in a few rows, a wrong tail, sparse garbage. The worst element (largest
|out − ref|) and the first element outside the bound are reported with their
index, the value got and the value expected.

The work is split in two so the timing loop can check a launch without
stopping the GPU: `summarize` enqueues every reduction on the current stream
and returns one small float64 tensor (no host synchronisation); `decode` turns
its values into a `Verdict` later. `verify` does both at once (the trials).
Runs on any torch device (the tests use the CPU); imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ptxbench.engine.gpu import fused
from ptxbench.engine.gpu.buffers import GUARD_BYTES, Arena, GuardedBuffer, bits_view, canary, poison_value
from ptxbench.tasks.spec import ElementBound

FINGERPRINT_MASK = fused.BITSUM_MASK    # an integer sum of the output's bits, kept exact in a float64
_CANARY_FIELDS = ("before_bytes", "before_last", "after_bytes", "after_first")
_INPUT_FIELDS = ("changed", "first")
_OUTPUT_FIELDS = ("unwritten", "first_unwritten", "nonfinite", "first_nonfinite", "nonfinite_value", "metric",
                  "worst_index", "worst_got", "worst_expected", "violations", "first_violation", "violation_got",
                  "violation_expected", "max_ratio", "rms", "fingerprint")


@dataclass
class Verdict:
    category: str = "ok"
    errors: dict[str, float] = field(default_factory=dict)
    worst: dict[str, Any] | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    fingerprints: dict[str, int] = field(default_factory=dict)


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


def _first(mask: torch.Tensor) -> torch.Tensor:
    """Index of the first True (0 when none: read it only when the count is not zero)."""
    return torch.argmax(mask.to(torch.uint8))



def _canary_values(buf: GuardedBuffer) -> list[torch.Tensor]:
    pattern = canary(buf.raw.device)
    positions = torch.arange(GUARD_BYTES, device=buf.raw.device)
    before = buf.raw[:GUARD_BYTES] != pattern
    after = buf.raw[GUARD_BYTES + buf.nbytes:] != pattern
    return [before.sum(), torch.where(before, positions, -1).max(), after.sum(),
            torch.where(after, positions, GUARD_BYTES).min()]


def _full_index(flat: torch.Tensor, shape: tuple[int, ...], rows: torch.Tensor) -> torch.Tensor:
    """The flat index in the whole output of element `flat` of its rows `rows` along dimension 2."""
    inner = math.prod(shape[3:])
    rest, t = flat % inner, flat // inner
    return ((t // rows.numel()) * shape[2] + rows[t % rows.numel()]) * inner + rest


def _output_values(buf: GuardedBuffer, ref: torch.Tensor, metric: str,
                   bound: ElementBound | None, rows: torch.Tensor | None = None) -> list[torch.Tensor]:
    """`rows`: `ref` holds the output at those positions along dimension 2 only; the values are compared there,
    every element is still checked for being written and finite."""
    bits = bits_view(buf.tensor)
    unwritten = bits == poison_value(buf.dtype)
    work = torch.float64 if buf.tensor.element_size() >= 4 else torch.float32
    if rows is None:
        o = buf.tensor.reshape(-1).to(work)
        r = ref.reshape(-1).to(work)
        ref_ok = torch.isfinite(r)
        nonfinite = ~torch.isfinite(o) & ref_ok
        first_nonfinite = _first(nonfinite)
        nonfinite_value = o[first_nonfinite]
    else:
        whole = buf.tensor.reshape(-1)
        nonfinite = ~torch.isfinite(whole)          # unsampled elements have no reference to be finite with
        first_nonfinite = _first(nonfinite)
        nonfinite_value = whole[first_nonfinite].to(work)
        rows = rows.to(buf.tensor.device)
        o = buf.tensor.index_select(2, rows).reshape(-1).to(work)
        r = ref.reshape(-1).to(work)
        ref_ok = torch.isfinite(r)
    diff = (o - r).abs_()
    # Where the reference itself is not finite, only an identical value counts as right.
    same = (o == r) | (torch.isnan(o) & torch.isnan(r))
    diff = torch.where(ref_ok, diff, torch.where(same, 0.0, math.inf).to(work))
    r_finite = torch.where(ref_ok, r, 0.0)
    if metric == "max_abs":
        value = diff.max()
    else:
        denom = torch.linalg.vector_norm(r_finite)
        num = torch.linalg.vector_norm(diff)
        value = torch.where(denom > 0, num / denom, num)
    worst = torch.argmax(torch.nan_to_num(diff, nan=math.inf))
    rms = torch.sqrt(torch.mean(r_finite.to(torch.float64) ** 2))
    if bound is not None:
        allowed = (bound.atol * rms).to(work) + bound.rtol * r_finite.abs()
        outside = ~(diff <= allowed)            # NaN differences are outside too
        first_violation = _first(outside)
        violations = outside.sum()
        ratio = torch.nan_to_num(diff / allowed.clamp_min(torch.finfo(work).tiny), nan=math.inf).max()
    else:
        violations = ratio = torch.zeros((), dtype=torch.float64, device=o.device)
        first_violation = torch.zeros((), dtype=torch.int64, device=o.device)
    worst_at, violation_at = worst, first_violation
    if rows is not None:
        worst_at = _full_index(worst, tuple(buf.tensor.shape), rows)
        violation_at = _full_index(first_violation, tuple(buf.tensor.shape), rows)
    fingerprint = bits.to(torch.int64).sum() & FINGERPRINT_MASK
    return [unwritten.sum(), _first(unwritten), nonfinite.sum(), first_nonfinite, nonfinite_value, value, worst_at,
            o[worst], r[worst], violations, violation_at, o[first_violation], r[first_violation], ratio, rms,
            fingerprint]


def summarize(arena: Arena, pristine: dict[str, torch.Tensor], reference: dict[str, torch.Tensor], metric: str,
              bounds: dict[str, ElementBound | None] | None = None, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Every number `decode` needs, as one float64 tensor on the arena's device; enqueued, not waited for.
    `rows`: the reference is the outputs at those positions along dimension 2 only (a held-out sample)."""
    if fused.ENABLED and rows is None:
        made = fused.summary(arena, pristine, reference, metric, bounds or {})
        if made is not None:
            return made
    values: list[torch.Tensor] = []
    for buf in arena.buffers.values():
        values += _canary_values(buf)
    for buf in arena.by_role("input"):
        changed = bits_view(buf.tensor) != bits_view(pristine[buf.name])
        values += [changed.sum(), _first(changed)]
    for buf in arena.by_role("output"):
        values += _output_values(buf, reference[buf.name], metric, (bounds or {}).get(buf.name), rows)
    return torch.stack([v.to(torch.float64) for v in values])


def decode(values: list[float], arena: Arena, metric: str, tolerances: dict[str, float],
           bounds: dict[str, ElementBound | None] | None = None, rows: int | None = None) -> Verdict:
    """The verdict the numbers of `summarize` (read back as a list) stand for; `rows`: how many positions
    along dimension 2 the values were compared at (all, when None)."""
    it = iter(values)

    def take(names: tuple[str, ...]) -> dict[str, float]:
        return {n: next(it) for n in names}

    damaged = []
    for buf in arena.buffers.values():
        c = take(_CANARY_FIELDS)
        if c["before_bytes"] or c["after_bytes"]:
            d: dict[str, Any] = {"buffer": buf.name, "role": buf.role}
            if c["before_bytes"]:
                # Distance below the first data byte of the write closest to the data.
                d["before_bytes"] = int(c["before_bytes"])
                d["before_nearest"] = int(GUARD_BYTES - c["before_last"])
            if c["after_bytes"]:
                d["after_bytes"] = int(c["after_bytes"])
                d["after_first"] = int(c["after_first"])       # bytes past the end of the data
            damaged.append(d)
    changed = {}
    for buf in arena.by_role("input"):
        i = take(_INPUT_FIELDS)
        if i["changed"]:
            changed[buf.name] = {"elements": int(i["changed"]), "first_index": _unravel(int(i["first"]), buf.shape)}
    outs = {buf.name: (buf, take(_OUTPUT_FIELDS)) for buf in arena.by_role("output")}

    verdict = Verdict(fingerprints={name: int(o["fingerprint"]) for name, (_, o) in outs.items()})
    if damaged:
        verdict.category, verdict.detail = "out_of_bounds_write", {"canaries": damaged}
        return verdict
    if changed:
        verdict.category, verdict.detail = "input_modified", {"inputs": changed}
        return verdict
    unwritten = {name: {"elements": int(o["unwritten"]), "of": buf.tensor.numel(),
                        "first_index": _unravel(int(o["first_unwritten"]), buf.shape)}
                 for name, (buf, o) in outs.items() if o["unwritten"]}
    if unwritten:
        verdict.category, verdict.detail = "unwritten_output", {"unwritten": unwritten}
        return verdict
    nonfinite = {name: {"elements": int(o["nonfinite"]), "first_index": _unravel(int(o["first_nonfinite"]), buf.shape),
                        "value": _number(o["nonfinite_value"])}
                 for name, (buf, o) in outs.items() if o["nonfinite"]}
    if nonfinite:
        verdict.category, verdict.detail = "nan_inf", {"nonfinite": nonfinite}
        return verdict

    worst_ratio = -1.0
    elements: dict[str, Any] = {}
    for name, (buf, o) in outs.items():
        value, limit = o["metric"], tolerances[name]
        verdict.errors[name] = value
        got, expected = o["worst_got"], o["worst_expected"]
        abs_err = abs(got - expected) if math.isfinite(got) and math.isfinite(expected) else math.inf
        worst = {"output": name, "index": _unravel(int(o["worst_index"]), buf.shape), "got": _number(got),
                 "expected": _number(expected), "abs_err": _number(abs_err),
                 "rel_err": _number(abs_err / abs(expected) if expected else abs_err),
                 "metric": metric, "value": _number(value), "tolerance": limit}
        ratio = value / limit if math.isfinite(value) else math.inf
        if ratio > worst_ratio:
            worst_ratio, verdict.worst = ratio, worst
        if not value <= limit:
            verdict.category = "wrong_result"
        bound = (bounds or {}).get(name)
        if bound is None:
            continue
        n = buf.tensor.numel() if rows is None else buf.tensor.numel() // buf.shape[2] * rows
        report = {"violations": int(o["violations"]), "of": n, "max_ratio": _number(o["max_ratio"]),
                  "bound": {"rtol": bound.rtol, "atol_rms": bound.atol, "rms": o["rms"], "outliers": bound.outliers}}
        if o["violations"]:
            report.update(first_index=_unravel(int(o["first_violation"]), buf.shape),
                          got=_number(o["violation_got"]), expected=_number(o["violation_expected"]))
        elements[name] = report
        if o["violations"] > bound.outliers * n:
            verdict.category = "wrong_result"
    if elements:
        verdict.detail["elements"] = elements
    if rows is not None:
        verdict.detail["sampled_rows"] = rows
    return verdict


def verify(arena: Arena, pristine: dict[str, torch.Tensor], reference: dict[str, torch.Tensor],
           metric: str, tolerances: dict[str, float], bounds: dict[str, ElementBound | None] | None = None,
           rows: torch.Tensor | None = None) -> Verdict:
    """The verify verdict for one launch (its work already enqueued on the current stream); `rows`: the
    reference is the outputs at those positions along dimension 2 only."""
    values = summarize(arena, pristine, reference, metric, bounds, rows).tolist()
    return decode(values, arena, metric, tolerances, bounds, None if rows is None else rows.numel())
