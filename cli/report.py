"""`ptxbench report`: benchmark metrics from the store as rich tables, JSON or CSV.

The numbers come from db/metrics.py (the explorer reads the same functions):
compile, correct, uses-what-was-asked and correct-and-uses rates, fast_p,
speedups and pass@k, grouped by any of task, model, arch, context, split and
turn budget. A rate of "—" means nothing was known (for example correctness
on a machine with no GPU).

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
    turn_budgets: Annotated[str, typer.Option("--turn-budgets", help="budgets for --by turns")] = "1,4,8",
    split: Annotated[str, typer.Option("--split", help="train or heldout, when not grouping by split")] = "train",
    model: Annotated[Optional[str], typer.Option("--model", help="only these models (comma-separated)")] = None,
    task: Annotated[Optional[str], typer.Option("--task", help="only these tasks (comma-separated)")] = None,
    context: Annotated[Optional[str], typer.Option("--context", help="only these context levels")] = None,
    arch: Annotated[Optional[str], typer.Option("--arch", help="only these archs")] = None,
    run: Annotated[Optional[str], typer.Option("--run", help="only these run ids (comma-separated)")] = None,
    include_reference: Annotated[bool, typer.Option("--include-reference", help="count expert solutions and mutations too")] = False,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="write the rows as JSON to this file ('-' for stdout)")] = None,
    csv_out: Annotated[Optional[Path], typer.Option("--csv", help="write the rows as CSV to this file ('-' for stdout)")] = None,
    headline: Annotated[bool, typer.Option("--headline", help="the paper's table: one row per model × arch × task × context at each turn budget, the paper's numbers beside (docs/headline.md)")] = False,
    markdown_out: Annotated[Optional[Path], typer.Option("--markdown", help="with --headline: write the table as Markdown to this file ('-' for stdout)")] = None,
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
    if markdown_out is not None and not headline:
        raise fail("report", "--markdown goes with --headline")
    store = _store_path(db_path)
    check_outputs("report", (json_out, csv_out, markdown_out), stores=[store])
    if headline:
        from ptxbench.cli import headline as table
        from ptxbench.services.metrics import headline as compute, paper_source

        with reported("report"):
            lines = compute(db_path, turn_budgets=budgets, tasks=_split_list(task), models=_split_list(model),
                            archs=_split_list(arch), contexts=_split_list(context), run_ids=run_ids,
                            include_reference=include_reference)
        if json_out is not None:
            _write(json_out, table.json_text(lines), store)
        if csv_out is not None:
            _write(csv_out, _csv([table.flat(line) for line in lines]), store)
        if markdown_out is not None:
            _write(markdown_out, table.markdown(lines, paper_source()), store)
        if "-" not in (str(json_out), str(csv_out), str(markdown_out)):
            table.render(console(width=max(console().width, 200)), lines, paper_source())
        return
    with reported("report"):
        rows = metrics(db_path, group_by=group_by, split=split, turn_budgets=budgets, tasks=_split_list(task),
                       models=_split_list(model), archs=_split_list(arch), contexts=_split_list(context),
                       run_ids=run_ids, include_reference=include_reference)
    flat = [r.as_dict() for r in rows]
    if json_out is not None:
        _write(json_out, json.dumps(flat, indent=2, default=str) + "\n", store)
    if csv_out is not None:
        _write(csv_out, _csv(flat), store)
    if "-" not in (str(json_out), str(csv_out)):
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


def render(console: Any, rows: list[Any], group_by: list[str]) -> None:
    from rich.table import Table

    if not rows:
        console.print("no judged samples match (expert and mutation rows are left out without --include-reference)",
                      markup=False)
        return
    keys = [k for k in ("task", "model", "arch", "context") if k in group_by]
    table = Table(title="PTXBench metrics", title_justify="left", show_edge=False, pad_edge=False)
    for key in keys:
        table.add_column(key, no_wrap=True)
    table.add_column("split")
    if "turns" in group_by:
        table.add_column("turns", justify="right")
    table.add_column("n", justify="right")
    for _, label in RATE_COLUMNS:
        table.add_column(label, justify="right")
    fast_keys = sorted(rows[0].fast)
    for p in fast_keys:
        table.add_column(f"fast_{p:g}", justify="right")
    table.add_column("geomean", justify="right")
    table.add_column("best", justify="right")
    pass_keys = sorted(rows[0].pass_at)
    for k in pass_keys:
        table.add_column(f"pass@{k}", justify="right")
    for r in rows:
        cells = [str(getattr(r, k)) for k in keys]
        cells.append(r.split)
        if "turns" in group_by:
            cells.append("all" if r.turn_budget is None else str(r.turn_budget))
        cells.append(str(r.trajectories))
        cells += [_pct(getattr(r, attr)) for attr, _ in RATE_COLUMNS]
        cells += [_pct(r.fast[p]) for p in fast_keys]
        cells += [_num(r.geomean_speedup), _num(r.best_speedup)]
        cells += [_pct(r.pass_at[k]) for k in pass_keys]
        table.add_row(*cells)
    console.print(table)
    console.print("n = trajectories; rates are over trajectories whose fact is known (— = nothing known, e.g. "
                  "correctness without a GPU); pass@k is the unbiased estimator over samples of a task.",
                  style="dim", markup=False)
