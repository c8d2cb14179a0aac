"""ptxbench-tui's command line: bad stores give a message and exit code 2, old ones are migrated."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ptxbench.db.store import latest_version, migrate_store, open_store
from ptxbench.tui.app import make_app, parse_args, prepare_store


def run_tui(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ptxbench.tui.app", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x00\xffnot sqlite at all" * 300, "not a PTXBench store"),
        (b"SQLite format 3\x00" + bytes(range(256)) * 30, "not a PTXBench store"),
    ],
    ids=["not-sqlite", "sqlite-header-then-junk"],
)
def test_a_corrupt_store_is_a_message_and_exit_2(tmp_path, content, message):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(content)
    result = run_tui("--db", str(bad))
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert bad.read_bytes() == content  # nothing written over it


def test_a_missing_store_is_a_message_and_exit_2(tmp_path):
    result = run_tui("--db", str(tmp_path / "nothing.sqlite"))
    assert result.returncode == 2 and "no store at" in result.stderr and "Traceback" not in result.stderr


def test_a_locked_store_is_a_message_and_exit_2(store):
    holder = sqlite3.connect(store)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE labels SET note = note")
    try:
        result = run_tui("--db", str(store))
    finally:
        holder.rollback()
        holder.close()
    assert result.returncode == 2 and "locked" in result.stderr and "Traceback" not in result.stderr


def test_an_older_schema_is_backed_up_and_migrated(tmp_path):
    path = tmp_path / "old.sqlite"
    db = open_store(path, migrate=False)
    migrate_store(db, target=1)
    db.execute(
        "INSERT INTO tasks (id, title, operation, arch, families, spec, source, updated_at) "
        "VALUES ('t', 'T', 'gemm', 'sm_90a', '[]', '{}', 'test', 'now')"
    )
    db.conn.commit()
    db.conn.close()
    assert latest_version() > 1
    prepared = prepare_store(str(path))
    conn = sqlite3.connect(prepared)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == latest_version()
    assert conn.execute("SELECT id FROM tasks").fetchall() == [("t",)]
    backups = list(tmp_path.glob("old.sqlite.bak-v1-*"))
    assert len(backups) == 1
    assert sqlite3.connect(backups[0]).execute("PRAGMA user_version").fetchone()[0] == 1


def test_theme_option(store):
    args = parse_args(["--db", str(store), "--theme", "ptxbench-light"])
    assert make_app(store, theme=args.theme).theme == "ptxbench-light"
    assert make_app(store, theme="no-such-theme").theme == "ptxbench"
    assert parse_args([]).host == "127.0.0.1"


def test_engine_and_store_never_import_textual():
    code = (
        "import sys; import ptxbench.engine.static, ptxbench.engine.families, ptxbench.db.browse, ptxbench.db.store, "
        "ptxbench.db.seed, ptxbench.db.metrics, ptxbench.tasks.spec; "
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path("/"))
    assert result.returncode == 0, result.stdout + result.stderr
