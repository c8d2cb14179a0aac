"""The explorer's way into one store: a single object owns every connection it uses.

- `read(fn, *args)` calls `fn(conn, *args)` on a read-only connection inside
  one read transaction: fn sees one snapshot, and the next read starts a new
  one, so every commit made before it (by this process or another) is seen.
  After a write, the readers see it.
- Connections are lent to one thread at a time from a small pool. Textual
  runs each thread worker in a new thread, so a connection kept per thread
  would be a new connection (and a cold page cache) for nearly every read.
- A read that SQLite calls malformed is retried once on a new connection; a
  second failure is damage, and `damage` keeps saying so from then on.
- `write(fn, *args)` runs `fn(db)` on a writer connection for the explorer's
  few writes (labels); on a store that cannot be written it raises
  `StoreReadOnly` with the reason, and a store held by another writer past the
  timeout raises `StoreLocked`.
- `newest_evaluation` is the person's choice of which evaluation speaks
  (db/verdict.py); every lent connection carries it.

No file of the store is opened here other than through SQLite (db/access.py).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

from ptxbench.db.access import Access, StoreError, store_access
from ptxbench.db.store import (
    DEFAULT_TIMEOUT_S, StoreDamaged, StoreLocked, StoreReadOnly, connect_reader, open_store, quick_check,
    translate_error,
)

__all__ = ["StoreReader", "StoreDamaged", "StoreError", "StoreLocked", "StoreReadOnly"]

T = TypeVar("T")
IDLE_CONNECTIONS = 4  # kept open between reads; more are closed when they come back
WRITE_TIMEOUT_S = 2.0  # a label waits this long for another writer, then is kept and retried


class ReaderConnection(sqlite3.Connection):
    """A read-only connection that carries the person's choice of evaluation (db/verdict.py)."""

    newest_evaluation: bool = False


class StoreReader:
    def __init__(self, path: str | Path, *, timeout: float = DEFAULT_TIMEOUT_S,
                 write_timeout: float = WRITE_TIMEOUT_S, access: Access | None = None) -> None:
        self.path = Path(path).expanduser().resolve()
        self.access = access or store_access(self.path)
        self.timeout = timeout
        self.write_timeout = write_timeout
        self.newest_evaluation = False
        self.damage: str | None = None  # set once SQLite has twice found the file damaged
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._idle: list[ReaderConnection] = []
        self._closed = False

    # -- what the explorer may do ------------------------------------------------------
    @property
    def writable(self) -> bool:
        return self.access.writable

    @property
    def readonly_reason(self) -> str:
        return self.access.reason

    # -- reading -----------------------------------------------------------------------------
    def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(conn, *args, **kwargs)` in one read snapshot. SQLite errors become
        `StoreError`s (`StoreDamaged` when the file is damaged)."""
        try:
            return self._read_once(fn, args, kwargs)
        except StoreDamaged:
            pass  # once may be a stale connection; twice on a fresh one is the file
        try:
            return self._read_once(fn, args, kwargs)
        except StoreDamaged as exc:
            self.damage = str(exc)
            raise

    def check(self) -> None:
        """SQLite's quick integrity check over the whole file; a failure is kept in `damage`."""
        def run(conn: sqlite3.Connection) -> None:
            quick_check(sqlite_utils.Database(conn, execute_plugins=False), self.path)

        self.read(run)

    def _read_once(self, fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
        conn = self._lend()
        healthy = False
        try:
            conn.newest_evaluation = self.newest_evaluation
            conn.execute("BEGIN")
            try:
                result = fn(conn, *args, **kwargs)
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")  # a read transaction: nothing to keep, the snapshot is let go
            healthy = True
            return result
        except sqlite3.Error as exc:
            raise translate_error(exc, self.path) from None
        finally:
            self._give_back(conn, healthy)

    def _lend(self) -> ReaderConnection:
        with self._lock:
            if self._closed:
                raise StoreError(f"the store {self.path} is closed")
            if self._idle:
                return self._idle.pop()
        conn = connect_reader(self.path, timeout=self.timeout, create=False, factory=ReaderConnection, shared=True)
        assert isinstance(conn, ReaderConnection)
        return conn

    def _give_back(self, conn: ReaderConnection, healthy: bool) -> None:
        with self._lock:
            if healthy and not self._closed and len(self._idle) < IDLE_CONNECTIONS:
                self._idle.append(conn)
                return
        conn.close()

    # -- writing -----------------------------------------------------------------------------
    def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(db, *args, **kwargs)` with a writer `sqlite_utils.Database`; fn takes its own
        transaction (the functions of db/writes.py do)."""
        if not self.access.writable:
            raise StoreReadOnly(f"the store is read-only: {self.access.reason}")
        with self._write_lock:
            db = open_store(self.path, timeout=self.write_timeout, migrate=False, create=False)
            try:
                return fn(db, *args, **kwargs)
            except sqlite3.Error as exc:
                raise translate_error(exc, self.path) from None
            finally:
                # Closing is safe here: SQLite keeps a process's locks per file, not per connection.
                db.conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def prepare_store(path: Path, *, timeout: float = 1.0) -> Access:
    """Ready a store a person named, before this process holds any connection to it:
    refuse a missing, empty or foreign file; bring a writable store's schema up to date
    (after a backup); and read what the explorer reads first, so a store damaged there
    fails now with a message. Returns how the store may be used."""
    access = store_access(path)
    db = open_store(path, readonly=not access.writable, timeout=timeout, create=False)
    try:
        db.execute("SELECT COUNT(*) FROM samples").fetchone()
        db.execute("SELECT COUNT(*) FROM evaluations").fetchone()
    except sqlite3.Error as exc:
        raise translate_error(exc, path) from None
    finally:
        db.conn.close()
    return access
