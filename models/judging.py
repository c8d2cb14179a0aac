"""Judging a stored sample: its candidate, and the engine run on it.

The engine's full pipeline (`engine.pipeline.judge`) runs the static stages
and, where a GPU of the task's arch is present and asked for, the GPU stages;
without it the static stages alone (`engine.static.judge_static`) give the
verdict. Either way the result becomes store rows through db/judgement.py.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import sqlite_utils

from ptxbench.db.generation import set_sample_candidate
from ptxbench.db.records import Sample
from ptxbench.engine.candidate import Candidate
from ptxbench.engine.categories import OK, Category
from ptxbench.engine.extract import ExtractResult, extract
from ptxbench.engine.manifest import ManifestError, parse_manifest
from ptxbench.tasks.spec import TaskSpec


class JudgeFailed(RuntimeError):
    """The tool failed on a sample (a missing assembler, a worker that cannot start): no verdict."""


class JudgeWithdrawn(JudgeFailed):
    """A stop withdrew the judgement before it began, or gave up waiting for it: no verdict, for a resume."""


def candidate_of(sample: Sample, malformed: str | None = None) -> ExtractResult:
    """The candidate a stored sample holds: its code and manifest when it has code, else extracted
    again from its raw response (the same text gives the same candidate). One rule for every
    judge of a stored sample: model runs, imports, Fixit repairs and batches (services/batch.py)."""
    if malformed is not None:
        return ExtractResult(False, Category.NO_CANDIDATE, None,
                             {"reason": f"the endpoint's reply is not a chat completion: {malformed}",
                              "size_bytes": len((sample.response or "").encode())})
    if sample.language in ("ptx", "cuda") and (sample.code or "").strip():
        manifest = None
        if sample.manifest is not None:
            try:
                manifest = parse_manifest(json.dumps(sample.manifest))
            except ManifestError as exc:
                return ExtractResult(False, Category.BAD_MANIFEST, None, {"reason": str(exc)})
        language: Literal["ptx", "cuda"] = "ptx" if sample.language == "ptx" else "cuda"
        return ExtractResult(True, OK, Candidate(language, sample.code, manifest, f"sample {sample.id}"), {})
    if sample.response is not None:
        return extract(sample.response)
    return ExtractResult(False, Category.NO_CANDIDATE, None, {"reason": "the sample holds no code and no response"})


def fill_candidate(db: sqlite_utils.Database, sample: Sample, extracted: ExtractResult | None = None) -> ExtractResult:
    """Extract the candidate of a sample stored with its raw response only, and store it on the sample.
    `extracted` is `candidate_of(sample)` when the caller has it already: async callers work it out
    in a thread (a reply is up to 4 MiB), and only the store's write stays with them."""
    if extracted is None:
        extracted = candidate_of(sample)
    if sample.language == "none" and extracted.ok and extracted.candidate is not None:
        c = extracted.candidate
        updated = set_sample_candidate(db, sample.id, c.language, c.code, manifest_dict(c))  # type: ignore[arg-type]
        sample.language, sample.code, sample.manifest = updated.language, updated.code, updated.manifest
        sample.content_hash = updated.content_hash
    return extracted


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
        except Exception as exc:  # a tool's failure, or a stage's bug met on this candidate: it costs this one only
            raise JudgeFailed(f"{type(exc).__name__}: {str(exc)[:500]}") from None
    try:
        return judge(extracted, task, gpu=gpu)
    except EngineError as exc:
        raise JudgeFailed(str(exc)) from None
    except Exception as exc:  # ToolchainError, OSError, or a stage's bug met on this candidate: never the run's end
        raise JudgeFailed(f"{type(exc).__name__}: {str(exc)[:500]}") from None
