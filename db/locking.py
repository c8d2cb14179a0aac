"""Waiting for another writer: a bounded, said, stoppable wait for the store's write lock.

A store has one writer at a time. A writer that finds the lock held waits for it, in short
slices (SQLite sleeps in C, where no Python signal handler runs, so a stop could not end one
long wait): at most its patience (`open_store`'s `timeout`, else $PTXBENCH_LOCK_WAIT, else
60 s); the wait is said once it passes NOTICE_AFTER_S (`set_wait_notice`: a line on standard
error unless a front end says it its own way); `before_waiting` hooks run before the wait
begins (a writer keeps what it holds in the recovery journal first, db/recovery.py), and a
stop (`stop_waiting`, from a signal handler) ends every wait of the process at once. Past the
patience, or after a stop, the write fails with `StoreLocked` and nothing of it is written.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path

import sqlite_utils

from ptxbench.db.access import StoreError
from ptxbench.db.failures import StoreLocked, translate_error

LOCK_WAIT_ENV = "PTXBENCH_LOCK_WAIT"
DEFAULT_LOCK_WAIT_S = 60.0  # how long a writer waits for another writer's lock, unless told otherwise
NOTICE_AFTER_S = 1.0  # a wait longer than this is said
_WAIT_SLICE_S = 0.25  # SQLite waits in C; between slices a stop can end the wait


def lock_patience() -> float:
    """Seconds a writer waits for a store another process is writing: $PTXBENCH_LOCK_WAIT, else 60."""
    raw = os.environ.get(LOCK_WAIT_ENV, "").strip()
    if not raw:
        return DEFAULT_LOCK_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (0 <= value < 1e7):
        raise StoreError(f"{LOCK_WAIT_ENV}={raw!r}: give the seconds a writer waits for a locked store (for example 60)")
    return value


def say_on_stderr(message: str) -> None:
    print(f"ptxbench: {message}", file=sys.stderr, flush=True)


_notice: Callable[[str], None] | None = say_on_stderr
_wait_hooks: ContextVar[tuple[Callable[[], None], ...]] = ContextVar("ptxbench_wait_hooks", default=())
_stop_waiting = threading.Event()


def set_wait_notice(notice: Callable[[str], None] | None) -> Callable[[str], None] | None:
    """Where this process says that a writer waits for the store (default: a line on standard
    error; None says nothing, for the explorer, whose banner says it). Returns the one before."""
    global _notice
    before, _notice = _notice, notice
    return before


@contextlib.contextmanager
def before_waiting(hook: Callable[[], None]) -> Iterator[None]:
    """Call `hook` (in this thread and context) when a write is about to wait for another writer's
    lock: a writer keeps what it is about to write (db/recovery.py) before a wait that a kill may end.
    Hooks run innermost first."""
    token = _wait_hooks.set((*_wait_hooks.get(), hook))
    try:
        yield
    finally:
        _wait_hooks.reset(token)


def stop_waiting() -> None:
    """From a signal handler: writers of this process stop waiting for a locked store and fail at
    once with StoreLocked (what they were writing is then kept, db/recovery.py). A store that is
    free is still written."""
    _stop_waiting.set()


def waiting_stopped() -> bool:
    return _stop_waiting.is_set()


def set_patience(db: sqlite_utils.Database, seconds: float) -> None:
    """How long `write_transaction` on `db` waits for another writer's lock."""
    db._ptxbench_patience = seconds  # type: ignore[attr-defined]


def patience_of(db: sqlite_utils.Database) -> float:
    found = getattr(db, "_ptxbench_patience", None)
    return lock_patience() if found is None else float(found)


def rollback(db: sqlite_utils.Database) -> None:
    # SQLite has already rolled back after some errors (a full disk, an I/O error): nothing to undo then.
    if db.conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.conn.execute("ROLLBACK")


def _is_busy(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name:
        return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
    low = str(exc).lower()
    return "locked" in low or "busy" in low


def begin_immediate(db: sqlite_utils.Database) -> None:
    """BEGIN IMMEDIATE, waiting for another writer in short slices (SQLite sleeps in C, where no
    signal handler runs): the wait is said once, the hooks of `before_waiting` run before it, and
    a stop or the end of the patience ends it."""
    conn = db.conn
    patience = patience_of(db)
    started = time.monotonic()
    busy_ms = conn.execute("PRAGMA busy_timeout").fetchone()[0]
    waited = said = False
    try:
        while True:
            left = patience - (time.monotonic() - started)
            wait = min(_WAIT_SLICE_S, left) if waited else 0.0  # the first try does not wait
            conn.execute(f"PRAGMA busy_timeout = {max(0, int(wait * 1000))}")
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.Error as exc:
                if not _is_busy(exc):
                    raise translate_error(exc, _path_of(db), writing=True) from None
            path = _path_of(db)
            if left <= 0 or _stop_waiting.is_set():
                if _stop_waiting.is_set():
                    why = "a stop came while this process waited for it"
                elif patience > 0:
                    why = f"waited {patience:g} s, the patience set by {LOCK_WAIT_ENV}"
                else:
                    why = f"gave up at once, the patience being {patience:g} s"
                raise StoreLocked(
                    f"the store {path} is locked by another writer ({why}); let the other PTXBench process "
                    "finish or close it, then try again"
                )
            if not waited:
                waited = True
                for hook in reversed(_wait_hooks.get()):  # the innermost (the writer's own keeper) first
                    hook()
                continue
            if not said and time.monotonic() - started >= NOTICE_AFTER_S and _notice is not None:
                said = True
                _notice(f"waiting for the store {path}: another process is writing it "
                        f"(up to {patience:g} s; {LOCK_WAIT_ENV} sets how long)")
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")


def _path_of(db: sqlite_utils.Database) -> Path:
    try:
        row = db.execute("PRAGMA database_list").fetchone()
    except sqlite3.Error:
        return Path("the store")
    return Path(row[2]) if row and row[2] else Path(":memory:")
