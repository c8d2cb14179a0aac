"""`ptxbench check FILE`: judge one candidate file and print the verdict (services/judge.py).

Exit status: 0 whenever the candidate was judged, whatever the verdict; 1 when a tool the
engine needs is missing or failed; 2 for a usage mistake (a file that cannot be read, an
unknown task, arch or family).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated, Optional

import typer

from ptxbench.cli.conventions import ExitCode, fail
from ptxbench.engine.inert import inert


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
    from ptxbench.services.errors import ToolError, UsageError
    from ptxbench.services.judge import check_payload, judge_file

    try:
        result = judge_file(file, task, arch, require, manifest, static=static, no_cache=no_cache)
    except UsageError as exc:
        raise fail("check", str(exc), ExitCode.USAGE) from None
    except ToolError as exc:
        raise fail("check", str(exc), ExitCode.TOOL) from None
    except Exception as exc:  # the tool failed, not the candidate: one line, no traceback
        if os.environ.get("PTXBENCH_DEBUG"):
            sys.stderr.write(inert(traceback.format_exc()))  # it may quote the candidate
        raise fail("check", f"internal error: {type(exc).__name__}: {exc} (PTXBENCH_DEBUG=1 shows the traceback)",
                   ExitCode.TOOL) from None
    if as_json:
        # ensure_ascii (the default) writes every control and bidi character as \uXXXX.
        sys.stdout.write(json.dumps(check_payload(result), indent=2, default=str) + "\n")
        return
    from ptxbench.cli.render import render_check, render_judgement
    from ptxbench.cli.terminal import console

    out = console()
    render_check(out, result.verdict, result.gpu)
    if result.judgement is not None:
        render_judgement(out, result.judgement)
