"""The key under which a whole static judgement is cached.

A re-check of an unchanged candidate should cost a file read, not ptxas and
nvdisasm again: the verdict (SASS census, per-entry families and launch check
included) is stored under a key made of everything that decides it: the
candidate (language, code, manifest), the arch, the requested families, the
task's spec, the tool versions, and the source of every engine module that
takes part, so a change to any of them never serves an old verdict.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from ptxbench.engine.cache import content_key, source_fingerprint
from ptxbench.engine.sandbox import DEFAULT_LIMITS, describe
from ptxbench.engine.toolchain import tool_version

if TYPE_CHECKING:
    from ptxbench.engine.candidate import Candidate
    from ptxbench.tasks.spec import TaskSpec

_ENGINE = Path(__file__).resolve().parent
_TASKS = _ENGINE.parent / "tasks"
_FINGERPRINT = source_fingerprint(
    *(_ENGINE / f"{m}.py" for m in ("static", "static_cache", "assemble", "ptxas_messages", "cuda_build", "inspect",
                                     "families", "ptx_calls", "sass", "launch_check", "manifest", "ptx_params", "candidate",
                                     "toolchain", "coverage", "sandbox")),
    _TASKS / "expr.py", _TASKS / "spec.py",
)


def verdict_key(candidate: Candidate, arch: str, require: list[str], task: TaskSpec | None) -> str:
    tools = ["ptxas", "nvdisasm"] + (["nvcc"] if candidate.language == "cuda" else [])
    return content_key(
        candidate.language, candidate.code, candidate.manifest_json() or "",
        stage="static", arch=arch, require=list(require), engine=_FINGERPRINT,
        task=json.dumps(task.to_dict(), sort_keys=True, default=str) if task is not None else None,
        versions={t: tool_version(t) for t in tools}, sandbox=describe(), limits=DEFAULT_LIMITS.to_dict(),
    )
