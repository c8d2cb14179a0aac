"""`ptxbench tasks`: the task catalogue with arch, requested families and expert solutions."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

REPO_ROOT = Path(__file__).resolve().parents[1]


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def task_rows() -> list[dict[str, Any]]:
    from ptxbench.tasks.spec import all_tasks

    rows = []
    for t in all_tasks():
        folder = t.expert_dir()
        kernel = folder / "kernel.ptx" if folder is not None else None
        rows.append({
            "id": t.id,
            "title": t.title,
            "arch": t.arch,
            "families": list(t.families),
            "baseline": t.baseline,
            "expert": _relative(kernel) if kernel is not None and kernel.is_file() else None,
        })
    return rows


def tasks_command(
    as_json: Annotated[bool, typer.Option("--json", help="print a JSON list")] = False,
) -> None:
    """List the tasks: id, target arch, requested instruction families, expert solution."""
    try:
        rows = task_rows()
    except Exception as exc:  # a broken spec file: say which, no traceback
        Console(stderr=True).print(f"ptxbench tasks: error: {exc}", style="red", markup=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    from ptxbench.cli.render import render_tasks

    render_tasks(Console(highlight=False), rows)
