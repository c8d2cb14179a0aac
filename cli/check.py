"""`ptxbench check FILE`: judge one candidate file and print the verdict.

Exit status: 0 whenever the candidate was judged, whatever the verdict; 1
when a tool the engine needs is missing or failed; 2 for a usage mistake (a
file that cannot be read, an unknown task, arch or family).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

EXIT_TOOL = 1
EXIT_USAGE = 2

# nvidia-smi's compute capability → the arch-specific target that runs there.
_ARCH_OF_CC = {"9.0": "sm_90a", "10.0": "sm_100a", "10.3": "sm_103a", "11.0": "sm_110a", "12.0": "sm_120a",
               "12.1": "sm_121a"}


def gpu_archs(timeout: float = 5.0) -> list[str] | None:
    """Arch of every visible GPU, or None when there is no usable NVIDIA driver.

    Asks nvidia-smi rather than importing a CUDA library, so the static path
    stays light and works on machines with no GPU stack at all."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    caps = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    if not caps:
        return None
    return [_ARCH_OF_CC.get(c, f"sm_{c.replace('.', '')}") for c in caps]


GPU_READY = "ready"  # a GPU of the arch is here and the GPU stages were asked for


def gpu_status(arch: str, static_only: bool) -> str:
    """What the GPU stages will do for this arch on this machine."""
    archs = gpu_archs()
    if not archs:
        return "skipped: no GPU"
    if arch not in archs:
        return f"skipped: no {arch} device"
    if static_only:
        return "skipped: --static"
    return GPU_READY


def _fail(console: Console, code: int, message: str) -> typer.Exit:
    console.print(f"ptxbench check: error: {message}", style="red", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def check_command(
    file: Annotated[Path, typer.Argument(help="candidate: .ptx, .cu, or a model response (.md/.txt)", show_default=False)],
    task: Annotated[Optional[str], typer.Option("--task", help="task id (sets arch and requested families)")] = None,
    arch: Annotated[Optional[str], typer.Option("--arch", help="target, e.g. sm_90a (default: the task's, else the PTX's .target, else sm_90a)")] = None,
    require: Annotated[Optional[str], typer.Option("--require", help="families that must be used, comma-separated (default: the task's)")] = None,
    manifest: Annotated[Optional[Path], typer.Option("--manifest", help="launch manifest JSON (default: <stem>.manifest.json or manifest.json beside FILE)")] = None,
    static: Annotated[bool, typer.Option("--static", help="run the static stages only")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="assemble even when a cached result exists")] = False,
) -> None:
    """Judge one candidate file: assemble, inspect families in PTX and SASS, and (with a GPU) run it."""
    out = Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    try:
        result = _judge(file, task, arch, require, manifest, static, no_cache)
    except typer.Exit:
        raise
    except _Usage as exc:
        raise _fail(err, EXIT_USAGE, str(exc)) from None
    except Exception as exc:  # the tool failed, not the candidate: one line, no traceback
        from ptxbench.engine.toolchain import ToolchainError

        if os.environ.get("PTXBENCH_DEBUG"):
            traceback.print_exc()
        if isinstance(exc, ToolchainError):
            raise _fail(err, EXIT_TOOL, str(exc)) from None
        raise _fail(err, EXIT_TOOL, f"internal error: {type(exc).__name__}: {exc} (PTXBENCH_DEBUG=1 shows the traceback)") from None
    verdict, gpu = result
    # -- GPU stages (cli/eval.py, engine/pipeline.py): run, verify, time when a GPU of the arch is here.
    judgement = None
    if gpu == GPU_READY:
        from ptxbench.cli.eval import gpu_stages
        from ptxbench.engine.pipeline import EngineError

        try:
            judgement, gpu = gpu_stages(verdict, task)
        except EngineError as exc:
            raise _fail(err, EXIT_TOOL, f"the GPU stages could not run: {exc}") from None
    if as_json:
        payload: dict[str, Any] = verdict.to_dict()
        payload["gpu"] = gpu
        if judgement is not None:
            from ptxbench.cli.eval import judgement_summary

            payload["static_category"] = payload["category"]
            payload["category"] = judgement.category
            payload["judgement"] = judgement_summary(judgement)
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    from ptxbench.cli.render import render_check

    render_check(out, verdict, gpu)
    if judgement is not None:
        from ptxbench.cli.eval import render_judgement

        render_judgement(out, judgement)


class _Usage(Exception):
    pass


def _judge(file: Path, task_id: str | None, arch: str | None, require: str | None, manifest: Path | None,
           static: bool, no_cache: bool):
    from ptxbench.engine.assemble import PTXAS_ARCHES
    from ptxbench.engine.families import ALL_FAMILIES
    from ptxbench.engine.static import judge_static

    if not file.is_file():
        raise _Usage(f"cannot read {file}: no such file" if not file.exists() else f"{file} is not a file")
    if manifest is not None and not manifest.is_file():
        raise _Usage(f"cannot read manifest {manifest}: no such file")
    spec = None
    if task_id:
        from ptxbench.tasks.spec import get_task

        try:
            spec = get_task(task_id)
        except KeyError as exc:
            raise _Usage(str(exc.args[0] if exc.args else exc)) from None
    if arch is not None and arch not in PTXAS_ARCHES:
        raise _Usage(f"unknown arch {arch!r} (ptxas knows: {', '.join(PTXAS_ARCHES)})")
    wanted: list[str] | None = None
    if require is not None:
        wanted = [f.strip() for f in require.split(",") if f.strip()]
        unknown = [f for f in wanted if f not in ALL_FAMILIES]
        if unknown:
            raise _Usage(f"unknown families: {', '.join(unknown)} (known: {', '.join(ALL_FAMILIES)})")
    try:
        verdict = judge_static(file, spec, arch, wanted, manifest_path=manifest, use_cache=not no_cache)
    except OSError as exc:
        raise _Usage(str(exc)) from None
    return verdict, gpu_status(verdict.arch, static)
