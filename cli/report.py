"""`ptxbench report`: benchmark metrics from the store as rich tables, JSON or CSV.

The numbers come from db/metrics.py (the explorer reads the same functions):
compile, correct, uses-what-was-asked and correct-and-uses rates, fast_p,
speedups and pass@k, grouped by any of task, model, arch, context, split and
turn budget. A rate of "—" means nothing was known (for example correctness
on a machine with no GPU).

`--headline` is the paper's table (cli/headline.py, docs/headline.md); `--fallback` the generic-fallback
finding: of the correct kernels, the share that use the requested families and the share that fall
back to generic code, and the speed of each group.

A table goes to a terminal as a rich table where it fits; piped, at 80 columns or fewer, or wider
than the terminal, the same cells come as a Markdown table, never cut to `…`.

`--json`, `--csv` and `--markdown` never write over the store, its -wal, -shm or -journal, or
any other SQLite file (refused before the store is read, nothing written), and a file is
written whole or not at all (cli/conventions.py `write_file`).

Exit status: 0; 2 for a usage mistake, an output that would overwrite a database, or a store
that cannot be read.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ptxbench.cli.conventions import check_outputs, fail, reported, write_file
from ptxbench.engine.inert import inert

RATE_COLUMNS = (
    ("compile_rate", "compile"),
    ("correct_rate", "correct"),
    ("uses_rate", "uses"),
    ("correct_and_uses_rate", "correct+uses"),
)


def _split_list(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, suffix: str = "×") -> str:
    return "—" if value is None else f"{value:.3f}{suffix}"


def report_command(
    db_path: Annotated[Optional[Path], typer.Option("--db", help="store (default: $PTXBENCH_DB or the user data folder)")] = None,
    by: Annotated[str, typer.Option("--by", help="group keys, comma-separated: task, model, arch, context, split, turns")] = "model,context,split",
    turn_budgets: Annotated[str, typer.Option("--turn-budgets", help="budgets for --by turns and --headline (the paper's are 1, 4, 8)")] = "1,4,8",
    split: Annotated[str, typer.Option("--split", help="train or heldout, when not grouping by split")] = "train",
    model: Annotated[Optional[str], typer.Option("--model", help="only these models (comma-separated)")] = None,
    task: Annotated[Optional[str], typer.Option("--task", help="only these tasks (comma-separated)")] = None,
    context: Annotated[Optional[str], typer.Option("--context", help="only these context levels")] = None,
    arch: Annotated[Optional[str], typer.Option("--arch", help="only these archs")] = None,
    run: Annotated[Optional[str], typer.Option("--run", help="only these run ids (comma-separated)")] = None,
    include_reference: Annotated[bool, typer.Option("--include-reference", help="count expert solutions and mutations too")] = False,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="write the rows as JSON to this file ('-' for stdout)")] = None,
    csv_out: Annotated[Optional[Path], typer.Option("--csv", help="write the rows as CSV to this file ('-' for stdout)")] = None,
    headline: Annotated[bool, typer.Option("--headline", help="the paper's table, like for like: one row per model × device × arch × task × context at each turn budget, counting trajectories run with at least that many turns, the paper's numbers beside (docs/headline.md)")] = False,
    fallback: Annotated[bool, typer.Option("--fallback", help="the generic-fallback finding: of the correct kernels per model × task × context, the share using the requested families and the share in generic code, and each group's speed (docs/headline.md)")] = False,
    markdown_out: Annotated[Optional[Path], typer.Option("--markdown", help="write the table as Markdown to this file ('-' for stdout)")] = None,
) -> None:
    """Rates, fast_p, speedups and pass@k per task, model, context level, split and turn budget."""
    from ptxbench.cli.terminal import console
    from ptxbench.services.metrics import metrics

    group_by = _split_list(by) or []
    try:
        budgets = [int(b) for b in _split_list(turn_budgets) or []]
        run_ids = [int(r) for r in _split_list(run) or []] if run else None
    except ValueError:
        raise fail("report", "--turn-budgets and --run take integers") from None
    if not budgets or min(budgets) < 1:
        raise fail("report", "--turn-budgets: give budgets of 1 or more")
    if headline and fallback:
        raise fail("report", "--headline and --fallback are two reports: ask for one")
    store = _store_path(db_path)
    check_outputs("report", (json_out, csv_out, markdown_out), stores=[store])
    to_stdout = "-" in (str(json_out), str(csv_out), str(markdown_out))
    filters = dict(tasks=_split_list(task), models=_split_list(model), archs=_split_list(arch),
                   contexts=_split_list(context), run_ids=run_ids, include_reference=include_reference)
    if fallback:
        from ptxbench.cli import headline as table
        from ptxbench.services.metrics import fallback as compute_fallback

        with reported("report"):
            found = compute_fallback(db_path, **filters)
        if json_out is not None:
            _write(json_out, table.fallback_json(found), store)
        if csv_out is not None:
            _write(csv_out, _csv([r.flat() for r in found]), store)
        if markdown_out is not None:
            _write(markdown_out, table.fallback_markdown(found), store)
        if not to_stdout:
            table.fallback_render(console(), found)
        return
    if headline:
        from ptxbench.cli import headline as table
        from ptxbench.services.metrics import headline as compute, paper_source

        with reported("report"):
            lines = compute(db_path, turn_budgets=budgets, **filters)
        if json_out is not None:
            _write(json_out, table.json_text(lines, paper_source()), store)
        if csv_out is not None:
            _write(csv_out, _csv([table.flat(line) for line in lines]), store)
        if markdown_out is not None:
            _write(markdown_out, table.markdown(lines, paper_source()), store)
        if not to_stdout:
            table.render(console(), lines, paper_source())
        return
    with reported("report"):
        rows = metrics(db_path, group_by=group_by, split=split, turn_budgets=budgets, **filters)
    flat = [r.as_dict() for r in rows]
    if json_out is not None:
        _write(json_out, json.dumps(flat, indent=2, default=str) + "\n", store)
    if csv_out is not None:
        _write(csv_out, _csv(flat), store)
    if markdown_out is not None:
        _write(markdown_out, markdown(rows, group_by), store)
    if not to_stdout:
        render(console(), rows, group_by)


def _store_path(db_path: Path | None) -> Path | None:
    """The store the report reads (None when the default store's folder cannot even be made: the
    read says so)."""
    if db_path is not None:
        return db_path
    from ptxbench.db.store import StoreError, default_store_path

    try:
        return default_store_path()
    except StoreError:
        return None


def _write(target: Path, text: str, store: Path | None) -> None:
    if str(target) == "-":
        # To a terminal, perhaps: a model's or a task's name with control characters is shown inert
        # (JSON has none left; the file written below keeps the text as it is).
        sys.stdout.write(inert(text))
    else:
        write_file("report", target, text, stores=[store])


def _csv(rows: list[dict[str, Any]]) -> str:
    import io

    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buffer.getvalue()


NOTE = ("n = trajectories; rates are over trajectories whose fact is known (— = nothing known, e.g. correctness "
        "without a GPU); pass@k is the unbiased estimator over samples of a task.")


def _grid(rows: list[Any], group_by: list[str]) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """The metrics table's columns (title, justification) and cells."""
    keys = [k for k in ("task", "model", "arch", "context") if k in group_by]
    turns = "turns" in group_by
    fast_keys = sorted(rows[0].fast) if rows else []
    pass_keys = sorted(rows[0].pass_at) if rows else []
    headers = [(k, "left") for k in keys] + [("split", "left")] + ([("turns", "right")] if turns else [])
    headers += [("n", "right")] + [(label, "right") for _, label in RATE_COLUMNS]
    headers += [(f"fast_{p:g}", "right") for p in fast_keys] + [("geomean", "right"), ("best", "right")]
    headers += [(f"pass@{k}", "right") for k in pass_keys]
    cells = []
    for r in rows:
        row = [str(getattr(r, k)) for k in keys] + [r.split]
        if turns:
            row.append("all" if r.turn_budget is None else str(r.turn_budget))
        row.append(str(r.trajectories))
        row += [_pct(getattr(r, attr)) for attr, _ in RATE_COLUMNS]
        row += [_pct(r.fast[p]) for p in fast_keys]
        row += [_num(r.geomean_speedup), _num(r.best_speedup)]
        row += [_pct(r.pass_at[k]) for k in pass_keys]
        cells.append(row)
    return headers, cells


def markdown(rows: list[Any], group_by: list[str]) -> str:
    from ptxbench.cli.render import markdown_table

    headers, cells = _grid(rows, group_by)
    return markdown_table([h for h, _ in headers], cells) + f"\n{NOTE}\n"


def render(console: Any, rows: list[Any], group_by: list[str]) -> None:
    from ptxbench.cli.render import print_grid

    if not rows:
        console.print("no judged samples match (expert and mutation rows are left out without --include-reference)",
                      markup=False)
        return
    headers, cells = _grid(rows, group_by)
    print_grid(console, "PTXBench metrics", headers, cells, [NOTE])
