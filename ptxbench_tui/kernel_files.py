"""Kernels leaving the explorer: to the clipboard, to `$EDITOR`, to a file.

An editor gets read-only temporary copies (the store is never edited from
here) while the app is suspended; the copies are removed when it returns.
An export never writes over the store, its -wal, -shm or -journal, or any
other SQLite file, and is written whole or not at all (db/files.py).
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from textual.app import App, SuspendNotSupported

from ptxbench.db.files import atomic_output, check_output


def editor_command() -> list[str]:
    """$VISUAL, else $EDITOR, else the first of vi, nano or less found on PATH."""
    for name in ("VISUAL", "EDITOR"):
        value = os.environ.get(name, "").strip()
        if value:
            return shlex.split(value)
    for fallback in ("vi", "nano", "less"):
        if shutil.which(fallback):
            return [fallback]
    return []


def read_only_copies(files: Sequence[tuple[str, str]], folder: Path) -> list[Path]:
    """Write each (file name, text) into `folder`, read-only."""
    paths = []
    for name, text in files:
        path = folder / name
        path.write_text(text, encoding="utf-8")
        path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        paths.append(path)
    return paths


def open_in_editor(app: App, files: Sequence[tuple[str, str]], *, line: int | None = None) -> str | None:
    """Open read-only copies in the editor, the app suspended; an error message, or None."""
    command = editor_command()
    if not command:
        return "no editor: set $EDITOR"
    with tempfile.TemporaryDirectory(prefix="ptxbench-") as tmp:
        paths = read_only_copies(files, Path(tmp))
        argv = [*command, *([f"+{line}"] if line and Path(command[0]).name in ("vi", "vim", "nvim", "nano", "emacs") else []),
                *map(str, paths)]
        try:
            with app.suspend():
                result = subprocess.run(argv, check=False)
        except SuspendNotSupported:
            # Headless (tests) or a browser session: nothing to hand the terminal to.
            result = subprocess.run(argv, check=False, stdin=subprocess.DEVNULL, capture_output=True)
        except FileNotFoundError:
            return f"editor not found: {command[0]}"
        for path in paths:
            path.chmod(stat.S_IRUSR | stat.S_IWUSR)  # so the folder can be removed
    return None if result.returncode == 0 else f"{command[0]} exited with {result.returncode}"


# -- exports ------------------------------------------------------------------------------


FORMATS = ("csv", "json")


def write_table(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]], fmt: str, *,
                store: Path | None = None) -> int:
    """Write rows (dicts keyed by `columns`) as CSV or a JSON list; how many rows were written.
    UnsafeOutput (nothing written) when `path` is `store`, any store this process opened, a part of
    one, or another SQLite file; the rows go to a temporary file renamed into place."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r} (csv or json)")
    check_output(path, stores=[store])  # before a folder is made for it
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with atomic_output(path, stores=[store], newline="") as out:
        if fmt == "csv":
            writer = csv.DictWriter(out, fieldnames=list(columns), extrasaction="ignore")
            writer.writeheader()
            for row in rows:
                writer.writerow({k: "" if v is None else v for k, v in row.items()})
                n += 1
        else:
            out.write("[")
            for row in rows:
                out.write(("\n " if n == 0 else ",\n ") + json.dumps({c: row.get(c) for c in columns}, default=str))
                n += 1
            out.write("\n]\n")
    return n


def table_dicts(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(columns, row)) for row in rows]
