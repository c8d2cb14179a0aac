"""`ptxbench import FILE`: store model output generated elsewhere (JSONL, docs/models.md) and judge it.

A file with a bad line is refused as a whole, every problem listed with its line number;
nothing is written. Importing the same file again skips what is stored and judges what is
still unjudged (services/runs.py).

`--db` must name an existing store; `--create` makes a new one there (the default store is
created and seeded on first use either way).

Two imports of one file at once judge each sample once (the second leaves to the first what it
is judging). A judgement the store will not take (another writer held it past $PTXBENCH_LOCK_WAIT,
the disk is full) is kept in the store's recovery journal and written by the next writer.

Exit status: 0 when the file was imported (whatever the verdicts); 2 for a bad file, a store
that will not open or is not there, or usage; 1 when the tool failed on a sample (the samples
stay, unjudged; import again to retry); 3 when the store would not take a judgement (kept in the
recovery journal; import again to resume).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ptxbench.cli.conventions import ExitCode, fail, reported


def import_command(
    file: Annotated[Path, typer.Argument(help="JSONL: one response or candidate per line (docs/models.md)", show_default=False)],
    db_path: Annotated[Optional[Path], typer.Option("--db", help="store (default: $PTXBENCH_DB or the user data folder)")] = None,
    create: Annotated[bool, typer.Option("--create", help="make a new store at --db if there is none (without it a --db that is not a store is refused)")] = False,
    judge: Annotated[bool, typer.Option("--judge/--no-judge", help="judge the imported samples")] = True,
    gpu: Annotated[str, typer.Option("--gpu", help="auto, on or off: GPU stages where a GPU is present")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Import responses or candidates from a JSONL file, then judge them."""
    from ptxbench.cli.terminal import console
    from ptxbench.db.recovery import Kept
    from ptxbench.services.runs import ImportFileError, import_responses

    err = console(stderr=True)
    with reported("import"):
        try:
            report = import_responses(file, db_path=db_path, create=create, judge=judge, gpu=gpu,
                                      progress=None if as_json else _printer(err))
        except ImportFileError as exc:
            raise fail("import", str(exc)) from None
        except Kept as exc:
            raise fail("import", str(exc), ExitCode.UNFINISHED) from None
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        out = console()
        elsewhere = f", {report.judged_elsewhere} judged by another import of them" if report.judged_elsewhere else ""
        out.print(f"{file}: {report.imported} imported, {report.skipped} already stored, {report.judged} judged"
                  + elsewhere, markup=False, soft_wrap=True)
        for category, n in sorted(report.categories.items(), key=lambda kv: (-kv[1], kv[0])):
            out.print(f"  {category}: {n}", markup=False, soft_wrap=True)
    if report.judge_failures:
        raise typer.Exit(ExitCode.TOOL)


def _printer(console: Any) -> Any:
    def show(event: dict[str, Any]) -> None:
        if event.get("event") == "judged":
            console.print(f"  sample {event['sample_id']} ({event['task']}): {event['category']}", markup=False, soft_wrap=True)
        elif event.get("event") == "failure":
            console.print(f"  sample {event['sample_id']}: judging failed: {event['message']}", style="yellow",
                          markup=False, soft_wrap=True)
    return show
