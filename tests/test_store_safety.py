"""The store never loses or hides a person's work: POSIX locks survive a second open,
readers see every commit, which evaluation speaks is one rule, a person's file is never
silently made into a new store, read-only media is read, damage is found and kept."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlite_utils
from store_faults import CHILD_WRITES, damage_middle, readonly_command, small_store

from ptxbench.db import browse, browse_summary, queries, verdict
from ptxbench.db.access import store_access
from ptxbench.db.fixit import load_sample
from ptxbench.db.metrics import compute_metrics
from ptxbench.db.reader import StoreReader, prepare_store
from ptxbench.db.records import Evaluation, Label, Measurement, Sample
from ptxbench.db.store import StoreDamaged, StoreError, StoreReadOnly, connect_reader, open_store
from ptxbench.db.writes import add_evaluation, add_label, add_sample, get_or_create_model

def _other_process_writes(path: Path, key: str) -> None:
    subprocess.run([sys.executable, "-c", CHILD_WRITES, str(path), key], check=True, timeout=60)


# -- 1. no descriptor of the store outside SQLite -------------------------------------------


def test_opening_the_store_again_keeps_the_locks_of_open_connections(tmp_path):
    """Closing any descriptor of a file drops the process's fcntl locks on it. Opening the
    store a second time (as every view once did) must not: another process closing its
    connection would then delete the WAL under the first one."""
    path = small_store(tmp_path / "s.sqlite")
    reader = StoreReader(path)
    held = connect_reader(path)  # a connection that stays open, as an explorer's does
    held.execute("SELECT COUNT(*) FROM samples").fetchone()
    open_store(path, readonly=True).conn.close()
    open_store(path).conn.close()
    prepare_store(path)
    reader.read(browse.store_summary)
    _other_process_writes(path, "a")  # opens, commits, closes: believes it is last unless our locks hold
    wal, shm = path.with_name("s.sqlite-wal"), path.with_name("s.sqlite-shm")
    assert wal.exists() and shm.exists(), "the other process deleted the WAL under a live connection"
    _other_process_writes(path, "b")
    assert {r[0] for r in held.execute("SELECT key FROM meta WHERE key IN ('a', 'b')")} == {"a", "b"}
    held.close()
    reader.close()


def test_a_reader_sees_every_commit_made_before_its_read(tmp_path):
    path = small_store(tmp_path / "s.sqlite")
    reader = StoreReader(path)
    count = lambda conn: conn.execute("SELECT COUNT(*) FROM meta").fetchone()[0]
    before = reader.read(count)
    _other_process_writes(path, "from-another-process")
    assert reader.read(count) == before + 1  # the pooled connection, a new snapshot
    sid = reader.write(add_sample, Sample(task_id="t1", language="ptx", source="test", code="x")).id
    reader.write(add_label, Label(sample_id=sid, author="me", note="seen at once"))
    assert reader.read(queries.labels_for, sid)[0].note == "seen at once"
    reader.close()


def test_an_empty_file_named_as_a_store_is_refused_and_left_alone(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with pytest.raises(StoreError, match="is an empty file, not a PTXBench store"):
        open_store(empty, create=False)
    with pytest.raises(StoreError, match="is an empty file"):
        prepare_store(empty)
    assert empty.stat().st_size == 0
    open_store(tmp_path / "new.sqlite").conn.close()  # a path that does not exist yet still becomes a store


# -- 2. which evaluation speaks ----------------------------------------------------------------


@pytest.fixture
def judged_twice(tmp_path):
    """A sample judged on the GPU, then re-checked on a machine without one (same engine)."""
    path = small_store(tmp_path / "s.sqlite")
    db = open_store(path)
    model = get_or_create_model(db, "m", source="test")
    sid = add_sample(db, Sample(task_id="t1", language="ptx", source="test", code="x", model_id=model.id)).id
    gpu = add_evaluation(db, Evaluation(sample_id=sid, engine_version="0.1.0", status="judged", category="ok",
                                        device="NVIDIA H200", compiled=True, correct=True, uses_ptx=True,
                                        speedup=1.2, time_ms=2.0, source="recorded"),
                         [Measurement(split="train", sizes={"M": 1}, category="ok", speedup=1.2)]).id
    static = add_evaluation(db, Evaluation(sample_id=sid, engine_version="0.1.0", status="skipped: no sm_90a device",
                                           category="ok", compiled=True, uses_ptx=True, source="ptxbench eval")).id
    db.conn.close()
    return path, sid, gpu, static


def test_a_static_recheck_never_hides_the_gpu_verdict(judged_twice):
    path, sid, gpu, static = judged_twice
    reader = StoreReader(path)
    detail = reader.read(browse.sample_detail, sid)
    assert detail.shown.id == gpu and detail.latest.speedup == 1.2
    assert [e.id for e in detail.evaluations] == [static, gpu]  # both in the history
    assert [m.speedup for m in detail.measurements] == [1.2]
    assert reader.read(browse.sample_page, browse.SampleFilter()).rows[0].evaluation_id == gpu
    cells = reader.read(browse_summary.cells)
    assert [(c.category, c.correct, c.skipped) for c in cells] == [("ok", (1, 1), 0)]
    assert reader.read(load_sample, sid).evaluation_id == gpu
    rows = reader.read(compute_metrics, group_by=("model",))
    assert rows[0].correct_rate == 1.0
    db = sqlite_utils.Database(connect_reader(path))
    assert queries.shown_evaluation(db, sid).id == gpu and queries.latest_evaluation(db, sid).id == static
    db.conn.close()
    # The person asks for the newest: then the re-check speaks.
    complete_fingerprint = reader.read(browse_summary.fingerprint)
    reader.newest_evaluation = True
    assert reader.read(browse.sample_detail, sid).shown.id == static
    assert reader.read(browse.sample_page, browse.SampleFilter()).rows[0].evaluation_id == static
    assert reader.read(browse_summary.fingerprint) != complete_fingerprint  # a saved summary is per rule
    reader.close()


def test_a_complete_judgement_speaks_whatever_the_versions_then_the_newest_engine(judged_twice):
    path, sid, gpu, static = judged_twice
    db = open_store(path)
    add_evaluation(db, Evaluation(sample_id=sid, engine_version="0.2.0", status="static",
                                  category="ok", source="ptxbench eval --static"))
    db.conn.close()
    reader = StoreReader(path)
    # A newer engine's static row never outshines the GPU verdict; the views say it is an older engine's.
    assert reader.read(browse.sample_detail, sid).shown.id == gpu
    assert reader.read(browse.sample_page, browse.SampleFilter()).rows[0].evaluation_id == gpu
    assert reader.read(lambda c: c.execute(f"SELECT {verdict.note_sql()} FROM evaluations e WHERE e.id = ?",
                                           [gpu]).fetchone()[0]) == verdict.NOTE_OLDER
    db = open_store(path)
    regraded = add_evaluation(db, Evaluation(sample_id=sid, engine_version="0.10.0", status="judged",
                                             category="wrong_result", source="ptxbench eval")).id
    # Complete judgements: the newest engine speaks (0.10.0 is newer than 0.9.0), not the newest row.
    add_evaluation(db, Evaluation(sample_id=sid, engine_version="0.9.0", status="judged", category="ok",
                                  source="an older checkout"))
    db.conn.close()
    assert reader.read(browse.sample_detail, sid).shown.id == regraded
    reader.close()


# -- 3. read-only media, damage ---------------------------------------------------------------


KEEP_A_WAL = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("PRAGMA wal_autocheckpoint = 0")
conn.execute("INSERT INTO meta (key, value, updated_at) VALUES ('only-in-the-wal', 'x', 'now')")
conn.commit()
os._exit(0)  # no close, no checkpoint: the commit stays in the WAL, as after a crash or a copy taken while open
"""


def _copy(src: Path, folder: Path, *, keep_wal: bool) -> Path:
    folder.mkdir()
    dest = folder / "store.sqlite"
    shutil.copyfile(src, dest)
    if keep_wal:
        subprocess.run([sys.executable, "-c", KEEP_A_WAL, str(dest)], check=True, timeout=60)
        assert Path(f"{dest}-wal").stat().st_size > 0
    return dest


READ_AS_READER = """
import json, sys
from pathlib import Path
from ptxbench.db import browse
from ptxbench.db.reader import StoreReader, prepare_store
from ptxbench.db.store import StoreError
from ptxbench.db.writes import add_label
from ptxbench.db.records import Label
path = Path(sys.argv[1])
access = prepare_store(path)
reader = StoreReader(path, access=access)
out = {"writable": access.writable, "reason": access.reason, "immutable": access.immutable,
       "tasks": reader.read(lambda c: c.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]),
       "wal_row": reader.read(lambda c: c.execute("SELECT COUNT(*) FROM meta WHERE key = 'only-in-the-wal'").fetchone()[0])}
try:
    reader.write(add_label, Label(sample_id=1, author="x"))
except StoreError as exc:
    out["write"] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(out))
"""


def _as_reader(path: Path) -> dict:
    import json

    argv = readonly_command(path.parent, [sys.executable, "-c", READ_AS_READER, str(path)])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("keep_wal", [False, True], ids=["checkpointed", "with-wal"])
def test_a_store_on_read_only_media_is_read_and_says_why_it_cannot_be_written(tmp_path, keep_wal):
    src = small_store(tmp_path / "s.sqlite")
    dest = _copy(src, tmp_path / "media", keep_wal=keep_wal)
    got = _as_reader(dest)
    assert got["writable"] is False and ("read-only" in got["reason"] or "not writable" in got["reason"])
    assert got["tasks"] == 1
    assert got["immutable"] is (not keep_wal)  # a WAL with commits in it is read, not ignored
    assert got["wal_row"] == (1 if keep_wal else 0)
    assert got["write"].startswith("StoreReadOnly: the store is read-only")
    assert not (dest.parent / "store.sqlite-journal").exists()


def test_a_writer_on_a_read_only_file_is_refused_with_the_reason(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes read-only files; the read-only media test mounts a folder read-only instead")
    path = small_store(tmp_path / "s.sqlite")
    path.chmod(0o444)
    assert not store_access(path).writable
    with pytest.raises(StoreReadOnly, match="is read-only"):
        open_store(path)


def test_damage_is_found_by_the_check_and_kept(tmp_path):
    path = tmp_path / "s.sqlite"
    damage_middle(path)
    reader = StoreReader(path)
    assert reader.damage is None
    with pytest.raises(StoreDamaged, match="is damaged"):
        reader.check()
    assert "is damaged" in reader.damage
    assert reader.read(lambda c: c.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]) == 1  # the rest still reads
    assert "is damaged" in reader.damage  # and the damage is still said
    reader.close()
