"""`ptxbench tasks`: the task catalogue with arch, requested families and expert solutions.

Exit status: 0; 1 when a task spec cannot be read.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ptxbench.cli.conventions import ExitCode, fail


def tasks_command(
    as_json: Annotated[bool, typer.Option("--json", help="print a JSON list")] = False,
) -> None:
    """List the tasks: id, target arch, requested instruction families, expert solution."""
    from ptxbench.services.catalogue import task_rows

    try:
        rows = task_rows()
    except Exception as exc:  # a broken spec file: say which, no traceback
        raise fail("tasks", str(exc), ExitCode.TOOL) from None
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    from ptxbench.cli.render import render_tasks
    from ptxbench.cli.terminal import console

    render_tasks(console(), rows)
