"""`ptxbench export`: the store's samples or agent trajectories as JSON Lines or Parquet (services/export.py).

Exit status: 0 when written; 2 for a usage mistake (an unknown kind or format, no store, an output that is a
store or any SQLite file, Parquet without pyarrow); 1 when the store failed while being read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from ptxbench.cli.conventions import reported


def export_command(
    kind: Annotated[str, typer.Argument(help="samples | trajectories")],
    out: Annotated[Path, typer.Option("--out", help="file to write (a .parquet name writes Parquet)")],
    db: Annotated[Optional[Path], typer.Option("--db", help="store file (default: $PTXBENCH_DB or the user's store)")] = None,
    fmt: Annotated[Optional[str], typer.Option("--format", help="jsonl | parquet (default: from --out's suffix)")] = None,
    texts: Annotated[bool, typer.Option("--texts", help="keep each evaluation's PTX, SASS and assembler log")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print what was written as one JSON object")] = False,
) -> None:
    """Write every sample (with its evaluations, measurements and labels) or every agent episode (with its
    steps) under a versioned schema."""
    from ptxbench.cli.terminal import console
    from ptxbench.db.store import default_store_path
    from ptxbench.services.export import export

    path = db if db is not None else default_store_path()
    with reported("export"):
        done = export(path, kind, out, fmt=fmt, texts=texts)
    if as_json:
        typer.echo(json.dumps({"schema": "ptxbench.export-result/1", "path": str(done.path), "kind": done.kind,
                               "records_schema": done.schema, "format": done.format, "records": done.records}))
    else:
        console().print(f"wrote {done.records} {done.kind} ({done.schema}, {done.format}) to {done.path}",
                        markup=False, highlight=False)
