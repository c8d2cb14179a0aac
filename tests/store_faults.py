"""Faults a store meets, made for real in tests: read-only media, a damaged middle.

`readonly_command` runs a command with a folder read-only the way media is. Root writes
through file modes, so for root the folder is bind-mounted read-only in a private mount
namespace of the command (nothing outside it sees the mount); other users get the folder's
and its files' write bits removed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ptxbench.db.records import Sample, Task
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_sample, upsert_task

_REMOUNT = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'


def readonly_command(folder: Path, argv: list[str]) -> list[str]:
    """`argv`, run so that `folder` cannot be written (skips the test where that cannot be arranged)."""
    if os.geteuid() != 0:
        for p in folder.iterdir():
            p.chmod(0o444)
        folder.chmod(0o555)
        return argv
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a folder read-only as root")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", _REMOUNT, str(folder), "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount read-only here: {probe.stderr.strip()}")
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", _REMOUNT, str(folder), *argv]


def damage_middle(path: Path, *, samples: int = 400) -> None:
    """Fill a store, then scramble pages in its middle (the header and the schema stay
    readable, so it opens). No connection to it may be open in this process meanwhile."""
    db = open_store(path)
    if db.execute("SELECT COUNT(*) FROM tasks WHERE id = 't1'").fetchone()[0] == 0:
        upsert_task(db, Task(id="t1", title="T", operation="gemm", arch="sm_90a", families=[], spec={}, source="test"))
    for i in range(samples):
        add_sample(db, Sample(task_id="t1", language="ptx", source="test", code=f"// {i} " + "x" * 600))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.conn.close()
    raw = bytearray(path.read_bytes())
    middle = len(raw) // 2
    for i in range(middle, middle + 6 * 4096):
        raw[i] = (raw[i] * 7 + 13) % 256
    path.write_bytes(bytes(raw))


# A second process that writes one row and commits: whether the first process's locks held shows in
# what that write leaves behind (tests/test_store_safety.py, tests/test_output_safety.py).
CHILD_WRITES = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("INSERT INTO meta (key, value, updated_at) VALUES (?, 'x', 'now')", [sys.argv[2]])
conn.commit()
conn.close()
"""


def small_store(path: Path) -> Path:
    """A store with one task, closed."""
    db = open_store(path)
    upsert_task(db, Task(id="t1", title="T", operation="gemm", arch="sm_90a", families=["wgmma"],
                         spec={}, source="test"))
    db.conn.close()
    return path
