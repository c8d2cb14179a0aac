"""Opening stores: creation, migrations with backups, and the clear errors for bad files."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from ptxbench.db import store as store_mod
from ptxbench.db.queries import search_samples
from ptxbench.db.records import Sample, Task
from ptxbench.db.store import (
    SchemaTooNew,
    StoreError,
    StoreLocked,
    default_store_path,
    get_meta,
    latest_version,
    migrate_store,
    migrations,
    open_store,
    schema_version,
)
from ptxbench.db.writes import add_sample, upsert_task


def _task(task_id: str = "t1") -> Task:
    return Task(id=task_id, title="T", operation="gemm", arch="sm_90a", families=["wgmma"], spec={}, source="tasks/specs/t.toml")


def _v1_store(path: Path) -> None:
    """A store as schema version 1 left it, with one sample in it."""
    conn = sqlite3.connect(path)
    import sqlite_utils

    db = sqlite_utils.Database(conn, execute_plugins=False)
    migrate_store(db, path=path, target=1)
    db.execute(
        "INSERT INTO tasks (id, title, operation, arch, families, spec, source, updated_at) "
        "VALUES ('t1', 'T', 'gemm', 'sm_90a', '[\"wgmma\"]', '{}', 'x', '2026-01-01')"
    )
    db.execute(
        "INSERT INTO samples (task_id, language, code, content_hash, source, created_at) "
        "VALUES ('t1', 'ptx', 'setmaxnreg.inc.sync.aligned.u32 240;', 'h', 'expert', '2026-01-01')"
    )
    conn.close()


def test_migration_files_are_numbered_in_order():
    found = migrations()
    assert [m.version for m in found] == list(range(1, len(found) + 1))
    assert latest_version() >= 2


def test_new_store_is_current_wal_with_foreign_keys(tmp_path):
    path = tmp_path / "deep" / "folder" / "s.sqlite"
    db = open_store(path)
    assert path.exists()
    assert schema_version(db) == latest_version()
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    assert {"tasks", "models", "runs", "samples", "evaluations", "measurements", "fixes", "labels", "meta"} <= set(
        db.table_names()
    )
    assert get_meta(db, "created_by").startswith("ptxbench ")
    # A new store has nothing worth backing up.
    assert not list(tmp_path.rglob("*.bak-*"))
    db.close()
    # Reopening is a no-op migration.
    db = open_store(path)
    assert schema_version(db) == latest_version()
    assert not list(tmp_path.rglob("*.bak-*"))


def test_v1_store_is_backed_up_then_migrated_keeping_data(tmp_path):
    path = tmp_path / "s.sqlite"
    _v1_store(path)
    db = open_store(path)
    assert schema_version(db) == latest_version()
    backups = list(tmp_path.glob("s.sqlite.bak-v1-*"))
    assert len(backups) == 1
    old = sqlite3.connect(backups[0])
    assert old.execute("PRAGMA user_version").fetchone()[0] == 1
    assert old.execute("SELECT code FROM samples").fetchone()[0].startswith("setmaxnreg")
    old.close()
    # The rows written before full-text search existed are indexed by the migration.
    assert [s.source for s in search_samples(db, "setmaxnreg")] == ["expert"]
    # Seed keys exist and are unique where set.
    cols = {r[1] for r in db.execute("PRAGMA table_info(samples)")}
    assert "seed_key" in cols
    db.execute("UPDATE samples SET seed_key = 'k'")
    add_sample(db, Sample(task_id="t1", language="ptx", source="expert", code="x"))
    with pytest.raises(sqlite3.IntegrityError):
        db.execute("UPDATE samples SET seed_key = 'k' WHERE seed_key IS NULL")


def test_failed_migration_rolls_back_and_keeps_last_good_version(tmp_path):
    mig = tmp_path / "migrations"
    mig.mkdir()
    shutil.copy(store_mod.MIGRATIONS_DIR / "0001_initial.sql", mig / "0001_initial.sql")
    (mig / "0002_broken.sql").write_text("CREATE TABLE half_done (x);\nALTER TABLE no_such_table ADD COLUMN y;\n")
    path = tmp_path / "s.sqlite"
    _v1_store(path)
    db = open_store(path, migrate=False)
    with pytest.raises(StoreError, match="migration 0002_broken failed"):
        migrate_store(db, path=path, migrations_dir=mig)
    assert schema_version(db) == 1
    assert "half_done" not in db.table_names()
    assert db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 1


def test_gap_in_migration_numbers_is_refused(tmp_path):
    (tmp_path / "0001_a.sql").write_text("")
    (tmp_path / "0003_c.sql").write_text("")
    with pytest.raises(StoreError, match="out of order"):
        migrations(tmp_path)


def test_text_file_is_not_a_store(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("these are my notes, not a database\n" * 50)
    with pytest.raises(StoreError, match="not a PTXBench store"):
        open_store(path)
    with pytest.raises(StoreError, match="not a PTXBench store"):
        open_store(path, readonly=True)
    assert path.read_text().startswith("these are my notes")  # untouched


def test_other_sqlite_database_is_not_a_store(tmp_path):
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE recipes (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not a PTXBench store.*recipes"):
        open_store(path)


def test_corrupt_store_is_reported(tmp_path):
    path = tmp_path / "s.sqlite"
    db = open_store(path)
    upsert_task(db, _task())
    for i in range(300):
        add_sample(db, Sample(task_id="t1", language="ptx", source="expert", code=f"// {i} " + "x" * 500))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    raw = bytearray(path.read_bytes())
    page = 4096
    # Scramble a few data pages near the end; the schema pages at the start stay readable.
    for i in range(len(raw) - 8 * page, len(raw) - 4 * page):
        raw[i] = (raw[i] * 7 + 13) % 256
    path.write_bytes(bytes(raw))
    open_store(path).close()  # the damage is not on the pages an open reads
    with pytest.raises(StoreError, match="is damaged"):
        open_store(path, check=True)
    # Scrambling the schema too fails at once, check or not.
    for i in range(100, page):  # page 1 past the file header: the root of sqlite_master
        raw[i] = (raw[i] * 7 + 13) % 256
    path.write_bytes(bytes(raw))
    with pytest.raises(StoreError, match="is damaged"):
        open_store(path)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "s.sqlite"
    open_store(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {latest_version() + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNew, match="newer than this PTXBench"):
        open_store(path)
    with pytest.raises(SchemaTooNew):
        open_store(path, readonly=True)


def test_reader_refuses_missing_or_old_store(tmp_path):
    with pytest.raises(StoreError, match="no store at"):
        open_store(tmp_path / "absent.sqlite", readonly=True)
    assert not (tmp_path / "absent.sqlite").exists()
    path = tmp_path / "old.sqlite"
    _v1_store(path)
    with pytest.raises(StoreError, match="schema version 1.*ptxbench migrate --db"):
        open_store(path, readonly=True)


def test_folder_is_not_a_store(tmp_path):
    with pytest.raises(StoreError, match="is a folder"):
        open_store(tmp_path)


def test_store_locked_by_another_writer_during_migration(tmp_path):
    path = tmp_path / "s.sqlite"
    _v1_store(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode = WAL")
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreLocked, match="locked by another writer"):
            open_store(path, timeout=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert schema_version(open_store(path)) == latest_version()


def test_readonly_reader_cannot_write(tmp_path):
    path = tmp_path / "s.sqlite"
    open_store(path).close()
    reader = open_store(path, readonly=True)
    with pytest.raises(sqlite3.OperationalError):
        reader.execute("INSERT INTO meta (key, value, updated_at) VALUES ('a', 'b', 'c')")


def test_default_store_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBENCH_DB", str(tmp_path / "env.sqlite"))
    assert default_store_path() == tmp_path / "env.sqlite"
    monkeypatch.delenv("PTXBENCH_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = default_store_path()
    assert path.name == "ptxbench.sqlite"
    assert path.parent.is_dir()
    assert "ptxbench" in path.parent.parts
