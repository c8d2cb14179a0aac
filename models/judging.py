"""Judging a stored sample and turning the engine's judgement into store records.

The engine's full pipeline (`engine.pipeline.judge`) runs the static stages
and, where a GPU of the task's arch is present and asked for, the GPU stages;
without it the static stages alone (`engine.static.judge_static`) give the
verdict. Either way the result becomes one Evaluation row and its per-size
Measurement rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from ptxbench.db.generation import set_sample_candidate
from ptxbench.db.records import Evaluation, Measurement, Sample
from ptxbench.db.writes import add_evaluation
from ptxbench.engine.candidate import Candidate
from ptxbench.engine.categories import OK, STAGE_OF
from ptxbench.engine.extract import ExtractResult, extract
from ptxbench.engine.manifest import ManifestError, parse_manifest
from ptxbench.engine.static import StaticVerdict
from ptxbench.tasks.spec import TaskSpec

CPU_DEVICE = "cpu (static stages only)"


class JudgeFailed(RuntimeError):
    """The tool failed on a sample (a missing assembler, a worker that cannot start): no verdict."""


@dataclass
class Judged:
    evaluation: Evaluation
    measurements: list[Measurement]


def candidate_of(sample: Sample, malformed: str | None = None) -> ExtractResult:
    """The candidate a stored sample holds: extracted again from its raw response when it
    has one (the same text gives the same candidate), else built from its code and manifest."""
    if malformed is not None:
        return ExtractResult(False, "no_candidate", None,
                             {"reason": f"the endpoint's reply is not a chat completion: {malformed}",
                              "size_bytes": len((sample.response or "").encode())})
    if sample.response is not None and sample.language == "none":
        return extract(sample.response)
    if sample.language == "none":
        return ExtractResult(False, "no_candidate", None, {"reason": "the sample holds no code"})
    manifest = None
    if sample.manifest is not None:
        try:
            manifest = parse_manifest(json.dumps(sample.manifest))
        except ManifestError as exc:
            return ExtractResult(False, "bad_manifest", None, {"reason": str(exc)})
    return ExtractResult(True, OK, Candidate(sample.language, sample.code, manifest,  # type: ignore[arg-type]
                                             f"sample {sample.id}"), {})


def fill_candidate(db: sqlite_utils.Database, sample: Sample) -> ExtractResult:
    """Extract the candidate of a sample stored with its raw response only, and store it on the sample."""
    extracted = candidate_of(sample)
    if sample.language == "none" and extracted.ok and extracted.candidate is not None:
        c = extracted.candidate
        updated = set_sample_candidate(db, sample.id, c.language, c.code, manifest_dict(c))  # type: ignore[arg-type]
        sample.language, sample.code, sample.manifest = updated.language, updated.code, updated.manifest
        sample.content_hash = updated.content_hash
    return extracted


def store_judgement(db: sqlite_utils.Database, result: Any, sample_id: int, source: str,
                    extra_evidence: dict[str, Any] | None = None) -> Evaluation:
    judged = evaluation_records(result, sample_id, source, extra_evidence)
    return add_evaluation(db, judged.evaluation, judged.measurements)


def manifest_dict(candidate: Candidate | None) -> dict[str, Any] | None:
    if candidate is None or candidate.manifest is None:
        return None
    return json.loads(candidate.manifest.to_json())


def judge_sample(extracted: ExtractResult, task: TaskSpec, *, gpu: bool) -> Any:
    """Run the engine on one candidate: the full pipeline when it is importable, else the
    static stages. Returns a pipeline Judgement or a StaticVerdict; raises JudgeFailed."""
    try:
        from ptxbench.engine.pipeline import EngineError, judge
    except ImportError:  # the GPU half of the engine is optional
        from ptxbench.engine.static import judge_static

        try:
            return judge_static(extracted, task)
        except (OSError, RuntimeError) as exc:
            raise JudgeFailed(f"{type(exc).__name__}: {exc}") from None
    try:
        return judge(extracted, task, gpu=gpu)
    except EngineError as exc:
        raise JudgeFailed(str(exc)) from None
    except (OSError, RuntimeError) as exc:  # ToolchainError is a RuntimeError
        raise JudgeFailed(f"{type(exc).__name__}: {exc}") from None


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
        return Judged(Evaluation(sample_id=sample_id, engine_version=_engine_version(), status=status,
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


def _engine_version() -> str:
    from ptxbench.engine import ENGINE_VERSION

    return ENGINE_VERSION
