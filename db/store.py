"""Opening the store: where it lives, connection settings, schema migrations, clear errors.

A store is one SQLite file in WAL mode: one writer at a time, readers never
blocked. Each thread opens its own connection (connections are bound to the
thread that made them). The schema version is `PRAGMA user_version`; the
migrations are the numbered files in db/migrations/ and run in order, each in
its own transaction, after a backup copy of the store is taken.

Every failure a person can cause or meet (a file that is not a store, a
corrupt file, a store held by another writer, a store written by a newer
PTXBench, a store on read-only media opened for writing) is a `StoreError`
with a message that says what to do.

The store file is never opened with Python's `open()` (db/access.py says
why): what kind of file it is, SQLite itself says when it first reads it.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import sqlite_utils

from ptxbench.db.access import NoStore, StoreError, check_file, reader_uri, remember_store, store_access
from ptxbench.db.locking import (
    DEFAULT_LOCK_WAIT_S,
    LOCK_WAIT_ENV,
    before_waiting,
    begin_immediate,
    lock_patience,
    patience_of,
    rollback,
    say_on_stderr,
    set_patience,
    set_wait_notice,
    stop_waiting,
    waiting_stopped,
)
from ptxbench.db.failures import (
    SchemaTooNew,
    StoreDamaged,
    StoreLocked,
    StoreReadOnly,
    StoreWriteFailed,
    migrate_hint,
    restore_hint,
    translate_error,
)

__all__ = ["StoreError", "NoStore", "StoreLocked", "StoreDamaged", "StoreReadOnly", "StoreWriteFailed",
           "SchemaTooNew", "open_store", "translate_error", "write_transaction", "lock_patience", "set_patience",
           "patience_of", "set_wait_notice", "before_waiting", "stop_waiting", "waiting_stopped", "say_on_stderr",
           "LOCK_WAIT_ENV", "DEFAULT_LOCK_WAIT_S"]  # and the rest

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
ENV_VAR = "PTXBENCH_DB"
DEFAULT_TIMEOUT_S = 5.0  # SQLite's busy timeout for reads and for a reader's connection
_MIGRATION_NAME = re.compile(r"^(\d{4})_[A-Za-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    def sql(self) -> str:
        return self.path.read_text(encoding="utf-8")


@dataclass(frozen=True)
class MigrationReport:
    from_version: int
    to_version: int
    backup: Path | None  # the copy taken before migrating; None when the store was new

    @property
    def migrated(self) -> bool:
        return self.to_version != self.from_version


def now_iso(*, precise: bool = False) -> str:
    """The store's timestamp format: UTC, ISO 8601, seconds (`precise`: microseconds, where the time
    is part of a row's identity, as a label's is: db/recovery.py)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds" if precise else "seconds")


def default_store_path() -> Path:
    """$PTXBENCH_DB if set, else <user data dir>/ptxbench.sqlite (the folder is created)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    import platformdirs

    folder = Path(platformdirs.user_data_dir("ptxbench", appauthor=False))
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the data folder {folder}: {exc.strerror or exc}") from None
    return folder / "ptxbench.sqlite"


def migrations(folder: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migration files in order; their numbers must run 1, 2, 3 … with no gap."""
    found = []
    for path in sorted(folder.iterdir()):
        m = _MIGRATION_NAME.match(path.name)
        if m:
            found.append(Migration(int(m.group(1)), path.stem, path))
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise StoreError(f"migration files out of order: expected {expected:04d}_*.sql, found {migration.path.name}")
    return found


def latest_version() -> int:
    return len(migrations())


# -- opening ------------------------------------------------------------------


def open_store(
    path: str | Path | None = None,
    *,
    readonly: bool = False,
    timeout: float | None = None,
    migrate: bool = True,
    check: bool = False,
    create: bool = True,
) -> sqlite_utils.Database:
    """Open (and for writers create and migrate) a store.

    `path` None means `default_store_path()`. A writer brings the schema up to
    date (backing the file up first); a reader (`readonly=True`) never writes
    and refuses a store whose schema differs from this code's; on read-only
    media it reads the file as it is. `check=True` runs `PRAGMA quick_check`
    first (it reads the whole file; migrating an existing store always does
    it). `create=False` refuses a missing or empty file instead of making a
    new store of it (a path a person named must already be a store).
    `timeout`: how long a writer waits for another writer's lock (None:
    `lock_patience()`, $PTXBENCH_LOCK_WAIT or 60 s); for a reader, SQLite's
    busy timeout (None: 5 s).
    """
    path = Path(path) if path is not None else default_store_path()
    if readonly:
        conn = connect_reader(path, timeout=DEFAULT_TIMEOUT_S if timeout is None else timeout, create=create)
        db = sqlite_utils.Database(conn, execute_plugins=False)
        if check:
            try:
                quick_check(db, path)
            except BaseException:
                conn.close()
                raise
        return db
    patience = lock_patience() if timeout is None else timeout
    check_file(path, must_exist=False, create=create)
    remember_store(path)
    if path.exists():
        access = store_access(path)
        if not access.writable:
            raise StoreReadOnly(f"the store {path} cannot be written: {access.reason}")
    conn = _connect(path, readonly=False, timeout=min(patience, DEFAULT_TIMEOUT_S))
    try:
        db = sqlite_utils.Database(conn, execute_plugins=False)
        set_patience(db, patience)
        version = _read_version(db, path)
        if check:
            quick_check(db, path)
        _refuse_newer(version, path)
        _configure_writer(db, path)
        if migrate:
            migrate_store(db, path=path)
        return db
    except BaseException:
        conn.close()
        raise


def connect_reader(
    path: Path,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    create: bool = True,
    factory: type[sqlite3.Connection] = sqlite3.Connection,
    shared: bool = False,
) -> sqlite3.Connection:
    """A read-only connection to an existing store of this code's schema (`mode=ro`;
    `immutable=1` on read-only media with no WAL left to read). `shared` lets the
    connection move between threads, for a pool that lends it to one thread at a time."""
    check_file(path, must_exist=True, create=create)
    remember_store(path)
    conn = _connect(path, readonly=True, timeout=timeout, factory=factory, shared=shared)
    try:
        version = _read_version(sqlite_utils.Database(conn, execute_plugins=False), path)
        _refuse_newer(version, path)
        if version < latest_version():
            raise StoreError(
                f"the store {path} has schema version {version} and this PTXBench needs {latest_version()}; "
                + migrate_hint(path)
            )
        try:
            conn.execute("SELECT ln(1.0)").fetchone()
        except sqlite3.OperationalError:
            # SQLite built without the math functions: supply the one the summaries use.
            conn.create_function("ln", 1, lambda x: math.log(x) if x and x > 0 else None, deterministic=True)
        return conn
    except BaseException:
        conn.close()
        raise


def _refuse_newer(version: int, path: Path) -> None:
    known = latest_version()
    if version > known:
        raise SchemaTooNew(
            f"the store {path} has schema version {version}, newer than this PTXBench knows "
            f"(up to {known}); upgrade PTXBench to open it"
        )


def _connect(path: Path, *, readonly: bool, timeout: float, factory: type[sqlite3.Connection] = sqlite3.Connection,
             shared: bool = False) -> sqlite3.Connection:
    try:
        if readonly:
            conn = sqlite3.connect(reader_uri(path, store_access(path)), uri=True, timeout=timeout,
                                   factory=factory, check_same_thread=not shared)
            conn.execute("PRAGMA query_only = ON")
        else:
            conn = sqlite3.connect(str(path), timeout=timeout)
        conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn
    except sqlite3.Error as exc:
        raise translate_error(exc, path) from None


def _read_version(db: sqlite_utils.Database, path: Path) -> int:
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise translate_error(exc, path) from None
    if version == 0 and tables and "samples" not in tables:
        shown = ", ".join(sorted(tables)[:5])
        raise StoreError(f"{path} is an SQLite database but not a PTXBench store (it holds tables: {shown})")
    return version


def _configure_writer(db: sqlite_utils.Database, path: Path) -> None:
    try:
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        # In WAL mode NORMAL never corrupts; it can only lose the last commits on power loss.
        db.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.DatabaseError as exc:
        raise translate_error(exc, path) from None
    if str(mode).lower() != "wal":
        raise StoreError(f"the store {path} could not be switched to WAL mode (journal mode is {mode})")


def quick_check(db: sqlite_utils.Database, path: Path | str = "the store") -> None:
    """Raise StoreError unless SQLite's quick integrity check passes."""
    try:
        rows = [r[0] for r in db.execute("PRAGMA quick_check(5)")]
    except sqlite3.DatabaseError as exc:
        raise translate_error(exc, Path(path)) from None
    if rows != ["ok"]:
        # One line a person can read: the first problems, without SQLite's "*** in database main ***" heading.
        problems = [line.strip() for row in rows for line in str(row).splitlines()
                    if line.strip() and not line.startswith("***")]
        shown = "; ".join(problems[:2]) + (f"; {len(problems) - 2} more" if len(problems) > 2 else "")
        raise StoreDamaged(f"the store {path} is damaged (SQLite integrity check: {shown}); {restore_hint(Path(path))}")


# -- transactions ---------------------------------------------------------------


@contextlib.contextmanager
def write_transaction(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """One write transaction, taken with the write lock up front (BEGIN IMMEDIATE) so
    that it waits for another writer instead of failing half way; nested use becomes a
    savepoint. The wait is bounded by the store's patience (`open_store`'s `timeout`,
    $PTXBENCH_LOCK_WAIT) and said once it passes NOTICE_AFTER_S; past it, or after
    `stop_waiting()`, it is `StoreLocked`. Any SQLite failure inside (a full disk, a
    file-size limit, an I/O error) rolls the whole transaction back and becomes the
    StoreError that says so."""
    if db.conn.in_transaction:
        try:
            with db.atomic():
                yield db
        except sqlite3.Error as exc:
            raise translate_error(exc, _db_path(db), writing=True) from None
        return
    begin_immediate(db)
    try:
        yield db
    except BaseException as exc:
        rollback(db)
        if isinstance(exc, sqlite3.Error):
            raise translate_error(exc, _db_path(db), writing=True) from None
        raise
    try:
        db.conn.execute("COMMIT")
    except sqlite3.Error as exc:
        rollback(db)
        raise translate_error(exc, _db_path(db), writing=True) from None


def _db_path(db: sqlite_utils.Database) -> Path:
    try:
        return store_file(db) or Path(":memory:")
    except sqlite3.Error:  # a connection that failed may not answer even this: the message names no path then
        return Path("the store")


def store_file(db: sqlite_utils.Database) -> Path | None:
    """The file of an open store (None for one in memory)."""
    row = db.execute("PRAGMA database_list").fetchone()
    return Path(row[2]) if row and row[2] else None


# -- migrations -----------------------------------------------------------------


def schema_version(db: sqlite_utils.Database) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def migrate_store(
    db: sqlite_utils.Database,
    *,
    path: Path | None = None,
    backup: bool = True,
    target: int | None = None,
    migrations_dir: Path = MIGRATIONS_DIR,
) -> MigrationReport:
    """Bring the schema up to date (or up to `target`). Each migration runs in
    its own transaction (a failure leaves the store at the last good version);
    a store that held data is copied to `<name>.bak-v<old>-<timestamp>` first."""
    path = path or _db_path(db)
    start = schema_version(db)
    pending = [m for m in migrations(migrations_dir) if m.version > start and (target is None or m.version <= target)]
    if not pending:
        return MigrationReport(start, start, None)
    backup_path = None
    if backup and start > 0 and str(path) != ":memory:":
        quick_check(db, path)
        backup_path = backup_store(db, path, start)
    for migration in pending:
        with write_transaction(db):
            # Re-read under the write lock: another process may have migrated meanwhile.
            if schema_version(db) >= migration.version:
                continue
            try:
                db.executescript(migration.sql())
            except sqlite3.Error as exc:
                raise StoreError(f"migration {migration.name} failed on {path}: {exc}") from None
            db.execute(f"PRAGMA user_version = {migration.version:d}")
    if "meta" in db.table_names() and get_meta(db, "created_at") is None:
        with write_transaction(db):
            set_meta(db, "created_at", now_iso())
            set_meta(db, "created_by", f"ptxbench {package_version()}")
    return MigrationReport(start, schema_version(db), backup_path)


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ptxbench")
    except PackageNotFoundError:
        return "unknown"


def backup_store(db: sqlite_utils.Database, path: Path, version: int) -> Path:
    """A consistent copy of the store through SQLite's backup API (safe while others read),
    written whole or not at all: into a hidden `.NAME.bak-v….PID.part` file, flushed to disk,
    then renamed to `NAME.bak-v<version>-<UTC time>`. A process killed while backing up
    leaves only a `.part` (removed by the next backup), never a `.bak-v*` that is not a whole
    copy."""
    _remove_dead_parts(path)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.bak-v{version}-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.bak-v{version}-{stamp}-{n}")
    part = path.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        dest = sqlite3.connect(str(part))
        try:
            db.conn.backup(dest)
            # The copy keeps the store's WAL mode; as a rollback-journal file it is one file to rename.
            dest.execute("PRAGMA journal_mode = DELETE")
        finally:
            dest.close()
        _fsync_file(part)
        os.replace(part, target)
        fsync_folder(path.parent)
    except (sqlite3.Error, OSError) as exc:
        for leftover in _part_files(part):
            with contextlib.suppress(OSError):
                leftover.unlink()
        raise StoreError(
            f"could not back up {path} before migrating it ({exc}); nothing was migrated. "
            f"Free some space beside the store, then open it again ({migrate_hint(path)})"
        ) from None
    return target


def _part_files(part: Path) -> list[Path]:
    return [part, part.with_name(part.name + "-journal"), part.with_name(part.name + "-wal"),
            part.with_name(part.name + "-shm")]


def _remove_dead_parts(path: Path) -> None:
    """Backups a killed process left half written (its pid is in the name; a live one's stays)."""
    for part in path.parent.glob(f".{path.name}.bak-v*.part"):
        try:
            pid = int(part.name.rsplit(".", 2)[-2])
            os.kill(pid, 0)
            continue  # still backing up
        except (ValueError, ProcessLookupError):
            pass
        except PermissionError:
            continue  # alive, another user's
        for leftover in _part_files(part):
            with contextlib.suppress(OSError):
                leftover.unlink()


def _fsync_file(path: Path) -> None:
    # A backup file, never the store: closing this descriptor drops no lock SQLite holds (db/access.py).
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the rename is still atomic
    finally:
        os.close(fd)


# -- provenance -------------------------------------------------------------------


def get_meta(db: sqlite_utils.Database, key: str) -> str | None:
    if "meta" not in db.table_names():
        return None
    row = db.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    return row[0] if row else None


def set_meta(db: sqlite_utils.Database, key: str, value: str) -> None:
    db.execute(
        "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        [key, value, now_iso()],
    )
