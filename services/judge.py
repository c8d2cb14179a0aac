"""Judge one candidate file: the static stages, and the GPU stages where a GPU of its arch is here.

This is what `ptxbench check` does. The file is a PTX module, CUDA C++ with inline PTX, or a
whole model response; the verdict says `ok` or one category of the closed vocabulary with its
evidence, and a GPU stage that did not run says why (`skipped: no sm_100a device`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptxbench.services.errors import ToolError, UsageError
from ptxbench.services.hardware import GPU_READY, gpu_status


@dataclass
class FileJudgement:
    verdict: Any  # engine.static.StaticVerdict
    gpu: str  # the GPU stages' status: `judged`, `skipped: …`
    judgement: Any = None  # engine.pipeline.Judgement when the GPU stages ran


def static_verdict(
    file: Path,
    task_id: str | None = None,
    arch: str | None = None,
    require: str | None = None,
    manifest: Path | None = None,
    *,
    no_cache: bool = False,
) -> Any:
    """The static stages on a file. `require` is a comma-separated family list. UsageError for a file
    that cannot be read or an unknown task, arch or family; ToolError when a tool is missing."""
    from ptxbench.engine.assemble import PTXAS_ARCHES
    from ptxbench.engine.families import ALL_FAMILIES
    from ptxbench.engine.static import judge_static
    from ptxbench.engine.toolchain import ToolchainError

    if not file.is_file():
        raise UsageError(f"cannot read {file}: no such file" if not file.exists() else f"{file} is not a file")
    if manifest is not None and not manifest.is_file():
        raise UsageError(f"cannot read manifest {manifest}: no such file")
    spec = None
    if task_id:
        from ptxbench.tasks.spec import get_task

        try:
            spec = get_task(task_id)
        except KeyError as exc:
            raise UsageError(str(exc.args[0] if exc.args else exc)) from None
    if arch is not None and arch not in PTXAS_ARCHES:
        raise UsageError(f"unknown arch {arch!r} (ptxas knows: {', '.join(PTXAS_ARCHES)})")
    wanted: list[str] | None = None
    if require is not None:
        wanted = [f.strip() for f in require.split(",") if f.strip()]
        unknown = [f for f in wanted if f not in ALL_FAMILIES]
        if unknown:
            raise UsageError(f"unknown families: {', '.join(unknown)} (known: {', '.join(ALL_FAMILIES)})")
    try:
        return judge_static(file, spec, arch, wanted, manifest_path=manifest, use_cache=not no_cache)
    except OSError as exc:
        raise UsageError(str(exc)) from None
    except ToolchainError as exc:
        raise ToolError(str(exc)) from None


def gpu_stages(verdict: Any, task_id: str | None) -> tuple[Any, str]:
    """Run, verify and time a statically judged candidate: (Judgement or None, status line).

    Raises ToolError when the worker cannot run (a tool failure, not a verdict)."""
    if not task_id:
        return None, "skipped: no task (the GPU stages verify against a task: give --task)"
    if verdict.cubin is None:
        return None, f"skipped: nothing to run ({verdict.category})"
    from ptxbench.engine.pipeline import EngineError, judge
    from ptxbench.tasks.spec import get_task

    try:
        j = judge(verdict.candidate, get_task(task_id), static=verdict)
    except EngineError as exc:
        raise ToolError(f"the GPU stages could not run: {exc}") from None
    return j, j.status


def judge_file(
    file: Path,
    task_id: str | None = None,
    arch: str | None = None,
    require: str | None = None,
    manifest: Path | None = None,
    *,
    static: bool = False,
    no_cache: bool = False,
) -> FileJudgement:
    """The whole check: static stages, then the GPU stages when a GPU of the arch is here and
    `static` is not asked."""
    verdict = static_verdict(file, task_id, arch, require, manifest, no_cache=no_cache)
    result = FileJudgement(verdict, gpu_status(verdict.arch, static))
    if result.gpu == GPU_READY:
        result.judgement, result.gpu = gpu_stages(verdict, task_id)
    return result


def check_payload(result: FileJudgement) -> dict[str, Any]:
    """The JSON object of `ptxbench check --json`: the static verdict, the GPU status, and the GPU
    judgement (whose category then speaks, the static one kept beside it)."""
    payload: dict[str, Any] = result.verdict.to_dict()
    payload["gpu"] = result.gpu
    if result.judgement is not None:
        payload["static_category"] = payload["category"]
        payload["category"] = result.judgement.category
        payload["judgement"] = judgement_summary(result.judgement)
    return payload


def judgement_summary(j: Any) -> dict[str, Any]:
    """JSON-ready: the GPU half of a judgement."""
    return {
        "status": j.status,
        "category": j.category,
        "stage": j.stage,
        "correct": j.correct,
        "correct_heldout": j.correct_heldout,
        "executed": j.executed,
        "time_ms": j.time_ms,
        "baseline": j.baseline,
        "baseline_ms": j.baseline_ms,
        "speedup": j.speedup,
        "tflops": j.tflops,
        "sol_fraction": j.sol_fraction,
        "device": j.device.name if j.device is not None else None,
        "driver": j.device.driver if j.device is not None else None,
        "sizes": [
            {
                "split": m.split,
                "sizes": m.sizes,
                "category": m.category,
                "max_rel_err": m.max_rel_err,
                "worst": m.worst,
                "time_ms": m.time_ms,
                "time_spread": m.time_spread,
                "baseline_ms": m.baseline_ms,
                "speedup": m.speedup,
                "tflops": m.tflops,
                "sol_fraction": m.sol_fraction,
                "message": m.message,
                "element_ratio": _element_ratio(m.detail),
                "checks": _checks(m.detail),
            }
            for m in j.measurements
        ],
        "evidence": {k: v for k, v in j.evidence.items() if k != "sizes"},
        "seconds": {k: round(v, 3) for k, v in j.seconds.items()},
    }


def _element_ratio(detail: dict[str, Any]) -> dict[str, float]:
    """Per output, the largest |got − ref| / bound over the trials (1.0 is the element bound itself)."""
    out: dict[str, float] = {}
    for trial in detail.get("trials", []):
        for name, e in ((trial.get("detail") or {}).get("elements") or {}).items():
            r = e.get("max_ratio")
            if isinstance(r, (int, float)):
                out[name] = max(out.get(name, 0.0), float(r))
    return out


def _checks(detail: dict[str, Any]) -> dict[str, Any] | None:
    t = detail.get("timing")
    if not t:
        return None
    return {
        "checked": t.get("checks"),
        "failed": len(t.get("check_failures") or []),
        "nondeterministic": t.get("nondeterministic"),
        "reps": t.get("reps"),
        "baseline_check": t.get("baseline_check"),
    }
