"""Files PTXBench writes or reads beside a store, kept off every SQLite database.

A report, an export or a set written over the store (`--json store.sqlite`, a symlink to it,
its -wal) would destroy it; a file an import reads that is the store would be opened with
Python and, on closing, drop the SQLite locks this process holds on it (db/access.py says
why that corrupts). So before any output is opened for writing, and before an import reads
a file a line names, `database_reason` says whether the path is one of:

- a store this process opened or is about to open (compared as given, resolved, and by
  device and inode, so a symlink, a hard link or `./x/../store.sqlite` is caught), or its
  `-wal`, `-shm` or `-journal`, whether that file exists now or not;
- any other SQLite database (its first 16 bytes are `SQLite format 3\\0`), a write-ahead log
  or a rollback journal by its magic number, or a `-wal`, `-shm` or `-journal` beside an
  SQLite database;
- a folder.

A store in use is recognised by `os.stat` alone; only other files have their first bytes
read. `atomic_output` then writes to a new temporary file beside the target and renames it
into place, so a failed write never leaves half a file (and never truncates the old one).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from ptxbench.db.access import StoreError, opened_stores

SQLITE_HEADER = b"SQLite format 3\x00"
WAL_MAGIC = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
JOURNAL_MAGIC = b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7"
COMPANIONS = {"-wal": "write-ahead log", "-shm": "shared-memory index", "-journal": "rollback journal"}

PathLike = str | os.PathLike[str]


class UnsafeOutput(StoreError):
    """An output path that is a store, a part of one, or another SQLite database."""


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _same(a: os.stat_result | None, b: os.stat_result | None) -> bool:
    return a is not None and b is not None and (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _head(path: str, st: os.stat_result | None) -> bytes:
    """The first 16 bytes of a regular file (b"" for anything else, or one that cannot be read)."""
    if st is None or not stat.S_ISREG(st.st_mode):
        return b""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return b""
    try:
        return os.read(fd, 16)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _kind_of(head: bytes) -> str | None:
    if head.startswith(SQLITE_HEADER):
        return "an SQLite database"
    if head[:4] in WAL_MAGIC:
        return "an SQLite write-ahead log"
    if head[:8] == JOURNAL_MAGIC:
        return "an SQLite rollback journal"
    return None


def _store_names(store: PathLike) -> list[tuple[str, str]]:
    """(path, what it is) for the store and its companions, as given and as resolved."""
    names = []
    for base in dict.fromkeys((os.path.abspath(store), os.path.realpath(store))):
        names.append((base, ""))
        names += [(base + suffix, what) for suffix, what in COMPANIONS.items()]
    return names


def database_reason(path: PathLike, *, stores: Iterable[PathLike | None] = ()) -> str | None:
    """Why `path` must not be written over or read as text, or None when it may be.

    `stores` are the stores the caller uses (None entries are left out); every store this
    process has opened is added. A store, or a file that is the same as one, is never
    opened here."""
    given = os.fspath(path)
    real = os.path.realpath(given)
    st = _stat(given)  # through every link, /proc's /dev/stdout included
    known = [os.fspath(s) for s in stores if s is not None] + [os.fspath(s) for s in opened_stores()]
    for store in dict.fromkeys(known):
        for name, what in _store_names(store):
            if real == name or os.path.abspath(given) == name or (st is not None and _same(st, _stat(name))):
                return f"it is the {what} of the store {store}" if what else f"it is the store {store}"
    if st is not None and stat.S_ISDIR(st.st_mode):
        return "it is a folder"
    kind = _kind_of(_head(given, st))
    if kind:
        return f"it is {kind}"
    for suffix, what in COMPANIONS.items():
        if real.endswith(suffix):
            base = real[: -len(suffix)]
            if _kind_of(_head(base, _stat(base))) == "an SQLite database":
                return f"it is the {what} of the SQLite database {base}"
    return None


def check_output(path: PathLike, *, stores: Iterable[PathLike | None] = ()) -> Path:
    """The resolved file to write `path` to; UnsafeOutput (one line, nothing written) when it is
    a store in use, its -wal, -shm or -journal, any other SQLite database, or a folder."""
    reason = database_reason(path, stores=stores)
    if reason:
        raise UnsafeOutput(f"will not write {os.fspath(path)}: {reason}; nothing was written (choose another file)")
    return Path(os.path.realpath(path))


@contextlib.contextmanager
def atomic_output(
    path: PathLike,
    *,
    stores: Iterable[PathLike | None] = (),
    binary: bool = False,
    encoding: str = "utf-8",
    newline: str | None = None,
) -> Iterator[IO[Any]]:
    """A file object whose contents replace `path` only when the block ends without an error.

    `check_output` first. The text goes to a new file beside the target (`.NAME.XXXXXXXX.part`,
    created exclusively, the old file's permissions kept), flushed to disk and renamed over the
    target; on an error the temporary file is removed and the target is as it was. A symlink
    stays a symlink: the file it points at is replaced. A target that is not a regular file (a
    pipe, /dev/null) is written in place, as there is nothing to rename over it."""
    target = check_output(path, stores=stores)
    st = _stat(os.fspath(path))
    mode = "wb" if binary else "w"
    text_args: dict[str, Any] = {} if binary else {"encoding": encoding, "newline": newline}
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(path, mode, **text_args) as fh:
            yield fh
        return
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        try:
            if st is not None:
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
            fh = os.fdopen(fd, mode, **text_args)
        except BaseException:
            os.close(fd)
            raise
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_output(
    path: PathLike, data: str | bytes, *, stores: Iterable[PathLike | None] = (), encoding: str = "utf-8"
) -> Path:
    """Write `data` to `path` through `atomic_output`; the file written."""
    with atomic_output(path, stores=stores, binary=isinstance(data, bytes), encoding=encoding) as fh:
        fh.write(data)
    return Path(os.path.realpath(path))
