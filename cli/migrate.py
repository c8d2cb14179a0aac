"""`ptxbench migrate`: bring a store's schema up to date and write its recovery journal, nothing else.

Every writer does both when it opens a store; this command does only that, for a store a reader
(`ptxbench report`, the explorer on read-only media, `fixit stats`) refuses as too old, or to
write what the recovery journal holds now (docs/store.md). A store that already has data is
checked (`PRAGMA quick_check`) and copied whole to `NAME.bak-v<old>-<UTC time>` first.

Exit status: 0 when the store is current and its journal written (or nothing was to do); 2 for
a store that is not there, will not open, or cannot be written; 1 when the store failed while in
use; 3 when journal entries still wait (the store was held by another writer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from ptxbench.cli.conventions import ExitCode, fail, reported


def migrate_command(
    db: Annotated[Optional[Path], typer.Option("--db", help="store file (default: $PTXBENCH_DB or the user's store)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print what was done as one JSON object")] = False,
) -> None:
    """Upgrade a store's schema (after a backup) and write what its recovery journal holds."""
    from ptxbench.cli.terminal import console
    from ptxbench.db.access import require_store
    from ptxbench.db.recovery import replay
    from ptxbench.db.store import default_store_path, migrate_store, open_store

    path = db if db is not None else default_store_path()
    with reported("migrate"):
        require_store(path, hint="check the --db path")
        store = open_store(path, migrate=False, create=False)
        try:
            migrated = migrate_store(store, path=path)
            replayed = replay(store, path)
        finally:
            store.conn.close()
    out = {
        "store": str(path),
        "from_version": migrated.from_version,
        "to_version": migrated.to_version,
        "backup": str(migrated.backup) if migrated.backup else None,
        "journal_written": dict(replayed.written),
        "journal_already_stored": replayed.already,
        "journal_set_aside": replayed.set_aside,
        "journal_left": replayed.left,
    }
    if as_json:
        typer.echo(json.dumps(out))
    else:
        con = console()
        if migrated.migrated:
            backup = f"; backup {migrated.backup}" if migrated.backup else ""
            con.print(f"{path}: schema {migrated.from_version} → {migrated.to_version}{backup}", markup=False,
                      soft_wrap=True)
        else:
            con.print(f"{path}: schema {migrated.to_version}, current", markup=False, soft_wrap=True)
        said = replayed.message()
        if said:
            con.print(said, markup=False, soft_wrap=True)
    if replayed.left:
        raise fail("migrate", f"{replayed.left} recovery journal entries still wait: {replayed.error}",
                   ExitCode.UNFINISHED)
