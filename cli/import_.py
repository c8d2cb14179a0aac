"""`ptxbench import FILE`: store model output generated elsewhere (JSONL, docs/models.md) and judge it.

A file with a bad line is refused as a whole, every problem listed with its
line number; nothing is written. Importing the same file again skips what is
stored and judges what is still unjudged.

Exit status: 0 when the file was imported (whatever the verdicts); 2 for a bad
file or usage; 1 when the tool failed on a sample (the samples stay, unjudged;
import again to retry).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

EXIT_TOOL = 1
EXIT_USAGE = 2


def import_command(
    file: Annotated[Path, typer.Argument(help="JSONL: one response or candidate per line (docs/models.md)", show_default=False)],
    db_path: Annotated[Optional[Path], typer.Option("--db", help="store (default: $PTXBENCH_DB or the user data folder)")] = None,
    judge: Annotated[bool, typer.Option("--judge/--no-judge", help="judge the imported samples")] = True,
    gpu: Annotated[str, typer.Option("--gpu", help="auto, on or off: GPU stages where a GPU is present")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Import responses or candidates from a JSONL file, then judge them."""
    from rich.console import Console

    from ptxbench.cli.run import _gpu
    from ptxbench.db.seed import ensure_default_store
    from ptxbench.db.store import StoreError
    from ptxbench.models.importer import ImportFileError, import_file

    err = Console(stderr=True, highlight=False)
    if gpu not in ("auto", "on", "off"):
        raise typer.BadParameter("use auto, on or off", param_hint="--gpu")
    if not file.is_file():
        err.print(f"ptxbench import: error: {file}: no such file", style="red", markup=False, soft_wrap=True)
        raise typer.Exit(EXIT_USAGE)
    use_gpu = _gpu(gpu) if judge else False
    try:
        db = ensure_default_store(db_path)
        report = import_file(db, file, judge=judge, gpu=use_gpu,
                             progress=None if as_json else _printer(err))
    except ImportFileError as exc:
        err.print(f"ptxbench import: {exc}", style="red", markup=False, soft_wrap=True)
        raise typer.Exit(EXIT_USAGE) from None
    except StoreError as exc:
        err.print(f"ptxbench import: store error: {exc}", style="red", markup=False, soft_wrap=True)
        raise typer.Exit(EXIT_USAGE) from None
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        out = Console(highlight=False)
        out.print(f"{file}: {report.imported} imported, {report.skipped} already stored, {report.judged} judged",
                  markup=False, soft_wrap=True)
        for category, n in sorted(report.categories.items(), key=lambda kv: (-kv[1], kv[0])):
            out.print(f"  {category}: {n}", markup=False, soft_wrap=True)
    if report.judge_failures:
        raise typer.Exit(EXIT_TOOL)


def _printer(console):  # type: ignore[no-untyped-def]
    def show(event: dict) -> None:  # type: ignore[type-arg]
        if event.get("event") == "judged":
            console.print(f"  sample {event['sample_id']} ({event['task']}): {event['category']}", markup=False, soft_wrap=True)
        elif event.get("event") == "failure":
            console.print(f"  sample {event['sample_id']}: judging failed: {event['message']}", style="yellow",
                          markup=False, soft_wrap=True)
    return show
