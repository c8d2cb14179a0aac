"""A judgement → the rows the store keeps: one converter for every writer.

The engine returns a pipeline `Judgement` (static and GPU stages) or a bare `StaticVerdict`
(static stages only); either becomes one Evaluation and its per-size Measurements here. The
batch (services/batch.py), model runs and imports (models/), Fixit repairs and the seed
recorder (scripts/record_seed.py) all write through this module, so a verdict reads the same
wherever it was made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlite_utils

from ptxbench.db.records import Evaluation, Measurement
from ptxbench.db.recovery import add_evaluation_kept
from ptxbench.engine import ENGINE_VERSION
from ptxbench.engine.categories import ERROR_PREFIX, STAGE_OF, TOOL_ERROR
from ptxbench.engine.static import StaticVerdict

CPU_DEVICE = "cpu (static stages only)"


@dataclass
class Judged:
    evaluation: Evaluation
    measurements: list[Measurement]


def _static_fields(static: StaticVerdict) -> dict[str, Any]:
    reached_inspect = static.stage == "inspect"
    missing = static.required_missing
    evidence: dict[str, Any] = {}
    if static.evidence:
        evidence["message"] = static.evidence
        evidence["tool"] = {"assemble": "ptxas", "inspect": "inspect", "extract": "extract"}.get(static.stage,
                                                                                                static.stage)
    if static.evidence_line is not None:
        evidence["line"] = static.evidence_line
    if static.evidence_source:
        evidence["source_line"] = static.evidence_source
    if static.extract_evidence:
        evidence["extract"] = static.extract_evidence
    if static.commands:
        evidence["commands"] = {k: list(v) for k, v in static.commands.items()}
    if static.notes:
        evidence["notes"] = list(static.notes)
    if static.generic_target:
        evidence["generic_target"] = static.generic_target
    if static.sandbox:
        evidence["sandbox"] = dict(static.sandbox)
    if static.launched is not None:
        evidence["launched"] = list(static.launched)
    if static.entries:
        evidence["entries"] = [e.to_dict() for e in static.entries]
    if static.launch_problems:
        evidence["launch_problems"] = [dict(p) for p in static.launch_problems]
    if missing:
        evidence["required_missing"] = [dict(m) for m in missing]
    return dict(
        compiled=None if static.stage == "extract" else static.assembled,
        uses_ptx=(not any(m.get("missing") == "ptx" for m in missing)) if reached_inspect else None,
        uses_sass=(not missing) if reached_inspect else None,
        ptx_families=list(static.ptx_families),
        sass_families=list(static.sass_families),
        required_missing=[m["family"] for m in missing],
        resources=static.resources,
        warnings=static.warnings,
        assembler_log=static.assembler_log or None,
        # A PTX candidate's PTX is its code; nvcc's output is kept for CUDA candidates.
        ptx=static.ptx if static.language == "cuda" and static.ptx else None,
        sass=static.sass or None,
        tool_versions=dict(static.tool_versions),
        evidence=evidence,
    )


def evaluation_records(result: Any, sample_id: int, source: str, extra_evidence: dict[str, Any] | None = None
                       ) -> Judged:
    """A Judgement (or a bare StaticVerdict) → the rows the store keeps."""
    static: StaticVerdict = result if isinstance(result, StaticVerdict) else result.static
    fields = _static_fields(static)
    evidence = fields.pop("evidence")
    if extra_evidence:
        evidence.update(extra_evidence)
    if isinstance(result, StaticVerdict):
        status = "judged" if static.cubin is None else "static"
        return Judged(Evaluation(sample_id=sample_id, engine_version=ENGINE_VERSION, status=status,
                                 category=static.category, stage=STAGE_OF.get(static.category, static.stage),
                                 source=source, device=CPU_DEVICE, evidence=evidence, **fields), [])
    j = result
    fields["tool_versions"].update(j.tool_versions)
    evidence.update({k: v for k, v in j.evidence.items() if k not in evidence})
    device = j.device.name if j.device is not None else CPU_DEVICE
    if j.device is None and j.status.startswith("skipped: "):
        device = "no GPU"  # the GPU stages were asked for; evidence["device"] says why none ran
    evaluation = Evaluation(
        sample_id=sample_id, engine_version=j.engine_version, status=j.status, category=j.category,
        stage=j.stage, source=source, device=device, driver=j.device.driver if j.device is not None else None,
        correct=j.correct, correct_heldout=j.correct_heldout, executed=j.executed, time_ms=j.time_ms,
        baseline_ms=j.baseline_ms, speedup=j.speedup, tflops=j.tflops, sol_fraction=j.sol_fraction,
        evidence=evidence, **fields,
    )
    measurements = [
        Measurement(split=m.split, sizes=dict(m.sizes), category=m.category, max_rel_err=m.max_rel_err,
                    worst=m.worst, time_ms=m.time_ms, time_spread=m.time_spread, baseline_ms=m.baseline_ms,
                    speedup=m.speedup, tflops=m.tflops, sol_fraction=m.sol_fraction)
        for m in j.measurements
    ]
    sizes = [{"split": m.split, "sizes": m.sizes, "category": m.category, "message": m.message[-1500:],
              **(m.detail or {})} for m in j.measurements if m.message or m.detail]
    if sizes:
        evaluation.evidence["sizes"] = sizes
    if j.seconds:
        evaluation.evidence["seconds"] = {k: round(v, 4) for k, v in j.seconds.items()}
    return Judged(evaluation, measurements)


def add_judgement(db: sqlite_utils.Database, result: Any, sample_id: int, source: str,
                  extra_evidence: dict[str, Any] | None = None) -> Evaluation:
    """Convert and write in one step: the evaluation and its measurements in one transaction. A store
    that refuses the write (locked past the patience, full, failing) raises `Kept` (a StoreError):
    the judgement is in the recovery journal and the next writer of the store writes it
    (db/recovery.py)."""
    judged = evaluation_records(result, sample_id, source, extra_evidence)
    return add_evaluation_kept(db, judged.evaluation, judged.measurements, by=source)


def tool_error_record(sample_id: int, static: StaticVerdict | None, message: str, device: str | None,
                      source: str) -> Evaluation:
    """The row of an attempt the tool failed on: what the static stages found, and the failure."""
    status = ERROR_PREFIX + message.splitlines()[0][:200] if message else ERROR_PREFIX + "unknown"
    if static is not None:
        evaluation = evaluation_records(static, sample_id, source).evaluation
        evaluation.status = status
        evaluation.device = device or evaluation.device
        evaluation.evidence["tool_error"] = message
        return evaluation
    return Evaluation(sample_id=sample_id, engine_version=ENGINE_VERSION, status=status, category=TOOL_ERROR,
                      source=source, device=device, evidence={"tool_error": message})
