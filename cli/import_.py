"""`ptxbench import PATH`: store model output made elsewhere and judge it (docs/models.md, docs/store.md).

PATH is PTXBench's JSONL (import lines, or the records of `ptxbench export samples`), the paper's
experiments CSV, a KernelBench run folder, or a FlashInfer-Bench trace set or Solution JSON;
`--format` names it where its look does not. A JSONL file with a bad line is refused as a whole,
every problem listed, nothing written (`--skip-bad` imports the rest and lists the bad lines
instead). Every line not imported is listed with its reason: already stored, not mapped to a
task, a conflict with a stored sample, following a turn that was not imported. A line whose slot
(run, task, sample index, turn) is stored with other code is a conflict and is not imported;
`--on-change new-attempt` stores its trajectory again as a new attempt. A sample whose launch
cannot be read is stored and not judged, and said.

`--db` must name an existing store; `--create` makes a new one there (the default store is
created and seeded on first use either way).

Two imports of one file at once judge each sample once (the second leaves to the first what it
is judging). A judgement the store will not take (another writer held it past $PTXBENCH_LOCK_WAIT,
the disk is full) is kept in the store's recovery journal and written by the next writer.

Exit status: 0 when the file was imported (whatever the verdicts, and whatever was skipped as not
importable); 2 for a bad file, a store that will not open or is not there, or usage; 1 when a
line conflicts with a stored sample and was not imported, or the tool failed on a sample (the
samples stay, unjudged; import again to retry); 3 when the store would not take a judgement (kept
in the recovery journal; import again to resume).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ptxbench.cli.conventions import ExitCode, fail, reported


def import_command(
    file: Annotated[Path, typer.Argument(help="JSONL, the paper's experiments CSV, a KernelBench run folder, or a "
                                              "FlashInfer-Bench trace set / Solution JSON", show_default=False)],
    db_path: Annotated[Optional[Path], typer.Option("--db", help="store (default: $PTXBENCH_DB or the user data folder)")] = None,
    create: Annotated[bool, typer.Option("--create", help="make a new store at --db if there is none (without it a --db that is not a store is refused)")] = False,
    judge: Annotated[bool, typer.Option("--judge/--no-judge", help="judge the imported samples")] = True,
    gpu: Annotated[str, typer.Option("--gpu", help="auto, on or off: GPU stages where a GPU is present")] = "auto",
    fmt: Annotated[Optional[str], typer.Option("--format", help="jsonl, paper, kernelbench or flashinfer (default: from the path)")] = None,
    on_change: Annotated[str, typer.Option("--on-change", help="a slot stored with other code: conflict (not imported, exit 1) or new-attempt")] = "conflict",
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="import the good lines and list the bad ones (default: a bad line refuses the file)")] = False,
    model: Annotated[Optional[str], typer.Option("--model", help="the model's name where the format does not say it")] = None,
    run: Annotated[Optional[str], typer.Option("--run", help="the run's name (default: from the file or folder)")] = None,
    context: Annotated[Optional[str], typer.Option("--context", help="none, brief or full, where the format does not say it")] = None,
    arch: Annotated[Optional[str], typer.Option("--arch", help="sm_90a or sm_100a, where the format does not say it")] = None,
    maps: Annotated[Optional[list[str]], typer.Option("--map", help="DEFINITION=TASK: a workload name of the format → a task (repeatable)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Import responses or candidates made elsewhere, then judge them."""
    from ptxbench.cli.terminal import console
    from ptxbench.db.recovery import Kept
    from ptxbench.services.interop import ImportFileError, import_path

    err = console(stderr=True)
    with reported("import"):
        try:
            report = import_path(file, db_path=db_path, create=create, judge=judge, gpu=gpu,
                                 progress=None if as_json else _printer(err), fmt=fmt, on_change=on_change,
                                 skip_bad=skip_bad, model=model, run=run, context=context, arch=arch,
                                 maps=tuple(maps or ()))
        except ImportFileError as exc:
            raise fail("import", str(exc)) from None
        except Kept as exc:
            raise fail("import", str(exc), ExitCode.UNFINISHED) from None
    if as_json:
        sys.stdout.write(json.dumps({"schema": "ptxbench.import/1", **report.to_dict()}, indent=2) + "\n")
    else:
        _say(console(), file, report)
    if report.judge_failures or any(c.get("resolved") == "not imported" for c in report.conflicts):
        raise typer.Exit(ExitCode.TOOL)


def _say(out: Any, file: Path, report: Any) -> None:
    def line(text: str) -> None:
        out.print(text, markup=False, soft_wrap=True, highlight=False)

    elsewhere = f", {report.judged_elsewhere} judged by another import of them" if report.judged_elsewhere else ""
    others = report.skipped - report.already_stored
    parts = [f"{report.imported} imported", f"{report.already_stored} already stored"]
    if others:
        parts.append(f"{others} skipped")
    if report.new_attempts:
        parts.append(f"{report.new_attempts} stored as new attempts")
    if report.recorded:
        parts.append(f"{report.recorded} judgements kept as recorded")
    parts.append(f"{report.judged} judged")
    kind = f" ({report.format})" if report.format != "jsonl" else ""
    line(f"{file}{kind}: " + ", ".join(parts) + elsewhere)
    for category, n in sorted(report.categories.items(), key=lambda kv: (-kv[1], kv[0])):
        line(f"  {category}: {n}")
    stored = [s["where"] for s in report.skipped_lines if s["kind"] == "stored"]
    listed = [s for s in report.skipped_lines if s["kind"] != "stored"]
    if stored or listed:
        line("skipped:")
        if stored:
            line(f"  already stored (the same code): {_compact(stored)}")
        for s in listed:
            line(f"  {s['where']}: {s['reason']}")
    if report.not_judged:
        line("stored, not judged:")
        for n in report.not_judged:
            line(f"  {n['where']} (sample {n['sample_id']}): {n['reason']}")
    if report.metadata_kept:
        line(f"kept as metadata: the extra fields of {report.metadata_kept} sample(s), in their run's params (metadata)")
    for note in report.notes:
        line(f"note: {note}")


def _compact(wheres: list[str]) -> str:
    """`line 1, line 2, line 3, line 7` → `lines 1-3, 7`; other places are listed as they are."""
    numbers = sorted(int(m.group(1)) for w in wheres if (m := re.fullmatch(r"line (\d+)", w)))
    rest = [w for w in wheres if not re.fullmatch(r"line \d+", w)]
    spans: list[str] = []
    for n in numbers:
        if spans and spans[-1].split("-")[-1] == str(n - 1):
            spans[-1] = f"{spans[-1].split('-')[0]}-{n}"
        else:
            spans.append(str(n))
    out = ([("lines " if len(numbers) > 1 else "line ") + ", ".join(spans)] if numbers else []) + rest
    return ", ".join(out)


def _printer(console: Any) -> Any:
    def show(event: dict[str, Any]) -> None:
        if event.get("event") == "judged":
            console.print(f"  sample {event['sample_id']} ({event['task']}): {event['category']}", markup=False, soft_wrap=True)
        elif event.get("event") == "failure":
            console.print(f"  sample {event['sample_id']}: judging failed: {event['message']}", style="yellow",
                          markup=False, soft_wrap=True)
    return show
