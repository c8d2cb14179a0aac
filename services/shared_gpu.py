"""Timing made while another worker judged on the same GPU: kept as evidence, never as a clean speedup.

Two workers on one GPU (a pool proved on a one-GPU machine, two Dask workers declared on one
device) time their kernels while the other's launches take turns on the same SMs, so a median
can carry the other worker's work, on either side of the ratio. Correctness is untouched by
that; the speed question is not answered. The judgement keeps its figures under evidence
`shared_gpu` and loses its timing columns (speedup, times, TFLOP/s, fraction of the speed of
light, on the evaluation and on every size), and a verdict the speed alone decided (`ok`,
`slower_than_baseline`) becomes `no_baseline`: correct and uses what was asked, speed not
judged — the engine's own word for a timed kernel without a speedup (engine/pipeline.py).
What the shared figures would have said is kept as `category_from_shared_timing`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ptxbench.engine.categories import OK, STAGE_OF, Category
from ptxbench.engine.pipeline import Judgement, SizeMeasurement

SPEED_DECIDED = frozenset({OK, Category.SLOWER_THAN_BASELINE})
_COLUMNS = ("time_ms", "baseline_ms", "speedup", "tflops", "sol_fraction")
_SIZE_COLUMNS = ("time_ms", "time_spread", "baseline_ms", "speedup", "tflops", "sol_fraction")


def _timed(j: Judgement) -> bool:
    return j.time_ms is not None or any(m.time_ms is not None for m in j.measurements)


def flag_shared(j: Judgement, workers: int, worker: str | None = None) -> Judgement:
    """`j` as judged on a GPU `workers` workers shared; unchanged (but noted) when nothing was timed."""
    note: dict[str, Any] = {"workers_on_gpu": workers, "timed": _timed(j)}
    if worker:
        note["worker"] = worker
    if not note["timed"]:
        return replace(j, evidence={**j.evidence, "shared_gpu": note})
    note["figures"] = {c: getattr(j, c) for c in _COLUMNS}
    note["sizes"] = [
        {"split": m.split, "sizes": dict(m.sizes), **{c: getattr(m, c) for c in _SIZE_COLUMNS}}
        for m in j.measurements
        if m.time_ms is not None
    ]
    note["category_from_shared_timing"] = j.category
    evidence = dict(j.evidence)
    if "speed_of_light" in evidence:
        note["speed_of_light"] = evidence.pop("speed_of_light")
    untimed: dict[str, Any] = {c: None for c in _SIZE_COLUMNS}
    measurements: list[SizeMeasurement] = [replace(m, **untimed) for m in j.measurements]
    category, stage = j.category, j.stage
    if category in SPEED_DECIDED:
        category = Category.NO_BASELINE
        stage = STAGE_OF.get(category)
        evidence["baseline_missing"] = (
            f"the GPU was shared by {workers} workers while this kernel was timed: "
            "speed not judged (the figures are in shared_gpu)"
        )
    evidence["shared_gpu"] = note
    cleared: dict[str, Any] = {c: None for c in _COLUMNS}
    return replace(j, category=category, stage=stage, measurements=measurements, evidence=evidence, **cleared)
