"""What a person reads when SQLite fails on the store: one `StoreError` per kind, saying what to do.

Every `sqlite3.Error` that reaches a store function is turned into one of these by
`translate_error`, by SQLite's own error code (`sqlite_errorname`), not by guessing from the
text: a lock held past the patience, a full disk or a file-size limit reached in the middle
of a transaction, an I/O error, read-only media, a damaged file, a file that is not a
database. A write that fails is rolled back whole (SQLite guarantees it; `write_transaction`
makes sure), so the messages can say that nothing of it was stored.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ptxbench.db.access import StoreError

MIGRATE_COMMAND = "ptxbench migrate --db {path}"


class StoreLocked(StoreError):
    """Another process held the write lock for longer than this writer's patience."""


class SchemaTooNew(StoreError):
    """The store was written by a newer PTXBench than this one."""


class StoreDamaged(StoreError):
    """SQLite found the file damaged (malformed pages, a broken header)."""


class StoreReadOnly(StoreError):
    """The store cannot be written here (read-only media, file or folder)."""


class StoreWriteFailed(StoreError):
    """A write did not reach the disk (full disk, file-size limit, I/O error); it was rolled back."""


def backups_of(path: Path) -> list[Path]:
    """The finished migration backups of a store, newest first (a backup still being written has
    another name, so every one listed is whole)."""
    try:
        found = [p for p in path.parent.glob(f"{path.name}.bak-v*") if not p.name.endswith(".part")]
    except OSError:
        return []
    return sorted(found, key=lambda p: p.name, reverse=True)


def restore_hint(path: Path) -> str:
    """What to do with a damaged store: the newest whole backup, by name, when there is one."""
    found = backups_of(path)
    if found:
        return (f"move the damaged file aside and copy the newest backup, {found[0]}, to {path} "
                "(what was written after that backup is not in it)")
    return "move the file aside to start a new store (no backup of it was found beside it)"


def migrate_hint(path: Path) -> str:
    return f"run `{MIGRATE_COMMAND.format(path=path)}` once to upgrade it (a backup copy is taken first)"


def translate_error(exc: sqlite3.Error, path: Path, *, writing: bool = False) -> StoreError:
    """The StoreError a person reads for an SQLite error on the store at `path`. `writing`: it
    happened inside a write transaction, which SQLite has rolled back (or will on close)."""
    msg = str(exc)
    name = getattr(exc, "sqlite_errorname", "") or ""
    low = msg.lower()
    undone = " The write was rolled back: nothing of it is in the store." if writing else ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or (not name and ("locked" in low or "busy" in low)):
        return StoreLocked(
            f"the store {path} is locked by another writer (waited for it and gave up); "
            "close the other PTXBench process or let it finish, then try again"
        )
    if name.startswith("SQLITE_FULL") or "disk is full" in low:
        return StoreWriteFailed(
            f"the store {path} could not be written: the disk is full, or the store reached a size limit "
            f"(SQLite: {msg}).{undone} Free some space, then run the command again"
        )
    if name == "SQLITE_IOERR_WRITE" or name == "SQLITE_IOERR_FSYNC" or name == "SQLITE_IOERR_TRUNCATE":
        return StoreWriteFailed(
            f"the store {path} could not be written: a write to the disk failed ({name}). The usual causes are a "
            f"full disk, a file-size limit (`ulimit -f`) or a failing device.{undone} "
            "Fix that, then run the command again"
        )
    if name.startswith("SQLITE_IOERR") or (not name and "disk i/o error" in low):
        return StoreWriteFailed(
            f"the store {path} could not be read or written: disk I/O error ({name or msg}); check the disk and "
            f"the files {path.name}-wal and {path.name}-shm beside it.{undone}"
        )
    if name.startswith("SQLITE_READONLY") or "readonly" in low or "read-only" in low:
        return StoreReadOnly(
            f"the store {path} cannot be written ({msg}): the file, its folder or the media is read-only.{undone} "
            "Read it as it is, or copy it to a writable folder"
        )
    if name == "SQLITE_NOTADB" or "not a database" in low:
        return StoreError(f"{path} is not a PTXBench store: the file is not an SQLite database")
    if name.startswith("SQLITE_CORRUPT") or "malformed" in low or "corrupt" in low:
        return StoreDamaged(f"the store {path} is damaged ({msg}); {restore_hint(path)}")
    if name.startswith("SQLITE_CANTOPEN") or "unable to open" in low:
        return StoreError(
            f"cannot open the store {path} ({msg}): the file or its folder is missing or cannot be accessed, "
            f"or SQLite cannot make the {path.name}-shm file it needs beside it"
        )
    return StoreError(f"store error in {path}: {msg}{'.' + undone if undone else ''}")
