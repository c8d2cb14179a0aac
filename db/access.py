"""What a store path is and how it may be opened, decided without opening the file.

Nothing here opens the store (or its -wal and -shm files) with Python. On
POSIX, closing any descriptor of a file drops every fcntl lock the process
holds on it, the locks of SQLite connections still open in other threads
included (SQLite's "How To Corrupt An SQLite Database File", §2.2). Another
process closing its last connection then thinks it is alone, checkpoints
and deletes the WAL under the live connections: stale reads, lost writes,
"malformed". So only `os.stat` and `os.access` look at the files here, and
the header is checked by SQLite itself when the store is first read. The one
exception is `private_copy`, for a store no connection can hold a lock on
(its docstring says why that is safe).
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path


class StoreError(Exception):
    """The store cannot be used as asked; the message says why and what to do."""


class NoStore(StoreError):
    """A store named by its path is not there (or is an empty file, which SQLite would take for a
    new database)."""


# What a command that adds data says when the store it was given is not there.
CREATE_HINT = "check the --db path, or add --create to make a new store there"

# The stores this process has opened, each as given (absolute) and as resolved: files written
# by PTXBench are checked against them (db/files.py) without opening them.
_OPENED: set[str] = set()


@dataclass(frozen=True)
class Access:
    """How this process may use a store file."""

    writable: bool
    reason: str = ""  # why it cannot be written, said to the person
    # Read with SQLite's immutable=1: the folder is read-only (no -shm can be made) and no
    # WAL is left to read, so the file is all there is and nothing can change it.
    immutable: bool = False
    # Read through a private copy: the folder is read-only, the WAL holds commits, and there is
    # no -shm, which SQLite needs to read a WAL and cannot make there (`private_copy`).
    private_copy: bool = False


def sidecars(path: Path) -> tuple[Path, Path]:
    """The store's write-ahead log and shared-memory index."""
    return path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")


def remember_store(path: Path) -> None:
    """Note a store this process opens (db/files.py keeps every output off it and its -wal,
    -shm and -journal)."""
    _OPENED.add(os.path.abspath(path))
    _OPENED.add(os.path.realpath(path))


def opened_stores() -> tuple[Path, ...]:
    """Every store this process has opened, as given and as resolved."""
    return tuple(Path(p) for p in sorted(_OPENED))


def require_store(path: Path, *, hint: str = CREATE_HINT) -> None:
    """Refuse a store a person named for a command that adds data when it is not there, a
    folder, or an empty file: a mistyped --db must not silently become a new, empty store
    that takes the data. NoStore says the path and `hint` (how to make one)."""
    try:
        check_file(path, must_exist=True, create=False)
    except NoStore as exc:
        raise NoStore(f"{exc}: {hint}") from None


def check_file(path: Path, *, must_exist: bool, create: bool = True) -> None:
    """Refuse a folder, a missing store (when it must exist, or may not be created) and, unless
    `create`, an empty file: SQLite would take an empty file for a new database and the
    person's "store" would silently be a new, empty one."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if must_exist or not create:
            raise NoStore(f"no store at {path}") from None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder for the store {path}: {exc.strerror or exc}") from None
        return
    except OSError as exc:
        raise StoreError(f"cannot read the store {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{path} is a folder, not a store file")
    wal, _ = sidecars(path)
    if st.st_size == 0 and not create and not (wal.exists() and wal.stat().st_size > 0):
        raise NoStore(f"{path} is an empty file, not a PTXBench store")


def store_access(path: Path) -> Access:
    """Whether the store can be written, and if not how it can still be read.

    `os.access` answers for this process's user and sees read-only mounts too."""
    folder = path.parent if str(path.parent) else Path(".")
    folder_ok = os.access(folder, os.W_OK | os.X_OK)
    reason = ""
    if _read_only_mount(folder):
        reason = f"{folder} is on a read-only file system"
    elif path.exists() and not os.access(path, os.W_OK):
        reason = f"the file {path} is read-only"
    elif not folder_ok:
        reason = f"the folder {folder} is not writable"
    else:
        for side in sidecars(path):
            if side.exists() and not os.access(side, os.W_OK):
                reason = f"{side} is read-only"
                break
    if not reason:
        return Access(writable=True)
    wal, shm = sidecars(path)
    # Where the folder is writable SQLite makes the -shm it needs even for a read-only
    # connection; a WAL with commits in it must be read, so immutable=1 would be wrong there.
    wal_has_commits = wal.exists() and wal.stat().st_size > 0
    copy = not folder_ok and wal_has_commits and not shm.exists()
    if copy:
        reason += (f"; its write-ahead log {wal.name} holds commits not yet in the file and there is no "
                   f"{shm.name}, which SQLite needs and cannot make there, so it is read through a private copy "
                   "(open it once where it can be written to fold the log into the file)")
    return Access(writable=False, reason=reason, immutable=not folder_ok and not wal_has_commits,
                  private_copy=copy)


def _read_only_mount(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def reader_uri(path: Path, access: Access) -> str:
    """The SQLite URI of a read-only connection to the store."""
    if access.private_copy:
        path = private_copy(path)
    uri = f"{path.resolve().as_uri()}?mode=ro"
    return uri + "&immutable=1" if access.immutable else uri


_COPIES: dict[tuple[str, tuple[int, ...]], Path] = {}
_COPIES_LOCK = threading.Lock()


def private_copy(path: Path) -> Path:
    """A copy of the store and its WAL in a private temporary folder, which SQLite can read
    (it makes the -shm there). One copy per process while the files stay as they are.

    Python opens the store here, which this module otherwise never does: no connection of this
    process can hold a lock on it (without a -shm none could open it in WAL mode, and an
    immutable one takes no locks), and no other process can write it (a writer needs the
    -shm too), so closing these descriptors drops nothing and the two files cannot change
    while they are copied."""
    wal, _ = sidecars(path)
    try:
        key = (os.path.realpath(path), tuple(int(x) for f in (path, wal) for x in _identity(f)))
    except OSError as exc:
        raise StoreError(f"cannot read the store {path}: {exc.strerror or exc}") from None
    with _COPIES_LOCK:
        found = _COPIES.get(key)
        if found is not None and found.exists():
            return found
        folder = Path(tempfile.mkdtemp(prefix="ptxbench-readonly-copy-"))
        atexit.register(shutil.rmtree, folder, True)
        target = folder / path.name
        try:
            shutil.copyfile(path, target)
            shutil.copyfile(wal, folder / wal.name)
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise StoreError(
                f"cannot read the store {path}: its folder is read-only, its write-ahead log {wal.name} holds "
                f"commits not yet in the file, and copying both to a private folder failed ({exc.strerror or exc}). "
                f"Copy {path.name} and {wal.name} together to a writable folder and open the copy, or have "
                "someone who can write the folder open the store once (`ptxbench migrate --db PATH` folds the "
                "log into the file)"
            ) from None
        _COPIES[key] = target
        return target


def _identity(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
