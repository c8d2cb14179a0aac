"""A writer that meets a locked store waits a bounded, said time, then fails with one line and keeps
what it computed in the recovery journal, which the next writer writes (db/recovery.py). The same in
the pool and the cluster paths, and when a signal comes while it waits.

Real processes, real signals, a real SQLite store held by a real second connection.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))

from hostile_store import build_store, eval_env, store_problems
from store_faults import small_store

from ptxbench.db import recovery
from ptxbench.db.records import Evaluation, Label, Measurement, Sample
from ptxbench.db.store import StoreError, StoreLocked, lock_patience, open_store
from ptxbench.db.writes import add_sample

HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


class Holder:
    """Another process holding the store's write lock, as a long import or a seeding does."""

    def __init__(self, store: Path, seconds: float = 60.0) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLD, str(store), str(seconds)], stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "held"

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


def _eval(store: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "ptxbench.cli.main", "eval", "--db", str(store), *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _evaluations(store: Path) -> list[tuple[int, str]]:
    conn = sqlite3.connect(store)
    try:
        return conn.execute("SELECT sample_id, evidence FROM evaluations ORDER BY id").fetchall()
    finally:
        conn.close()


@pytest.fixture
def batch_store(tmp_path):
    store = tmp_path / "store.sqlite"
    ids = build_store(store, 6)
    return store, ids, eval_env(tmp_path / "asm-cache")


# -- patience ------------------------------------------------------------------------------------


def test_patience_is_a_setting_with_a_clear_refusal(monkeypatch):
    monkeypatch.delenv("PTXBENCH_LOCK_WAIT", raising=False)
    assert lock_patience() == 60.0
    monkeypatch.setenv("PTXBENCH_LOCK_WAIT", "2.5")
    assert lock_patience() == 2.5
    monkeypatch.setenv("PTXBENCH_LOCK_WAIT", "soon")
    with pytest.raises(StoreError, match="PTXBENCH_LOCK_WAIT='soon': give the seconds"):
        lock_patience()


def test_eval_waits_says_so_keeps_the_judgement_and_the_next_run_writes_it(batch_store):
    """Before: a traceback (exit 1) after 5 s, and the judgement just made was thrown away."""
    store, ids, env = batch_store
    holder = Holder(store)
    try:
        started = time.monotonic()
        proc = _eval(store, {**env, "PTXBENCH_LOCK_WAIT": "1.5"}, "--all-unjudged", "--static", "--json-progress")
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - started
    finally:
        holder.release()
    assert proc.returncode == 3, err
    assert "Traceback" not in err and "Traceback" not in out
    events = _events(out)
    logs = [e["message"] for e in events if e["event"] == "log"]
    assert any(m.startswith("waiting for the store") and "PTXBENCH_LOCK_WAIT" in m for m in logs), logs
    kept = [e for e in events if e["event"] == "error" and "kept in the recovery journal" in e["message"]]
    assert len(kept) == 1 and "locked by another writer (waited 1.5 s" in kept[0]["message"]
    assert events[-1]["event"] == "done" and events[-1]["cancelled"] is True
    assert took < 60
    entries = recovery.pending(store)
    assert len(entries) == 1 and _evaluations(store) == []
    # The next writer writes the journal first, says so, and judges only the rest.
    again = _eval(store, env, "--all-unjudged", "--static", "--json-progress")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    events = _events(out)
    assert events[0]["event"] == "start" and events[0]["total"] == len(ids) - 1
    assert "wrote 1 judgement kept in the recovery journal" in events[1]["message"]
    rows = _evaluations(store)
    assert sorted(sid for sid, _ in rows) == sorted(ids)  # each sample judged once
    assert sum('"kept"' in evidence for _, evidence in rows) == 1
    assert recovery.pending(store) == [] and store_problems(store) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_while_waiting_keeps_the_judgement_and_ends_at_once(batch_store, sig):
    """Before: the stop waited out the lock, then a traceback, the judgement lost."""
    store, ids, env = batch_store
    holder = Holder(store)
    try:
        proc = _eval(store, {**env, "PTXBENCH_LOCK_WAIT": "60"}, "--all-unjudged", "--static", "--json-progress")
        assert proc.stdout is not None
        for line in proc.stdout:
            if '"waiting for the store' in line:
                break
        sent = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        holder.release()
    assert proc.returncode == 3, err
    assert took < 10 and "Traceback" not in err
    assert "a stop came while this process waited" in out
    assert len(recovery.pending(store)) == 1
    db = open_store(store)
    assert recovery.replay(db).written["evaluation"] == 1
    db.conn.close()
    assert len(_evaluations(store)) == 1


def test_a_kill_while_waiting_loses_nothing(batch_store):
    """The judgement is in the journal before the wait begins, so SIGKILL during the wait loses nothing."""
    store, ids, env = batch_store
    holder = Holder(store)
    try:
        proc = _eval(store, {**env, "PTXBENCH_LOCK_WAIT": "60"}, "--all-unjudged", "--static", "--json-progress")
        assert proc.stdout is not None
        for line in proc.stdout:
            if '"waiting for the store' in line:
                break
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        holder.release()
    assert len(recovery.pending(store)) == 1
    run = subprocess.run([sys.executable, "-m", "ptxbench.cli.main", "migrate", "--db", str(store)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert "wrote 1 judgement kept in the recovery journal" in run.stdout
    assert len(_evaluations(store)) == 1 and recovery.pending(store) == []


# -- the pool and the cluster -----------------------------------------------------------------------


def test_a_pool_batch_keeps_every_judgement_the_store_refused(tmp_path, monkeypatch):
    """Before: StoreLocked escaped run_parallel_batch and the running jobs' judgements were lost."""
    from test_pool import Collect, _static_slots, _store

    from ptxbench.services import progress as ev
    from ptxbench.services.batch import EXIT_UNFINISHED
    from ptxbench.services.parallel import run_parallel_batch
    from ptxbench.services.pool import GpuPool

    monkeypatch.setenv("PTXBENCH_LOCK_WAIT", "1")
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "asm-cache"))
    db, ids = _store(tmp_path, 6)
    path = tmp_path / "store.db"
    holder = Holder(path)
    sink = Collect()
    try:
        code = run_parallel_batch(db, ids, sink, GpuPool(_static_slots(2), static_only=True), static_only=True)
    finally:
        holder.release()
    assert code == EXIT_UNFINISHED
    kept = [e for e in sink.of(ev.Error) if "kept in the recovery journal" in e.message]
    assert kept and len(recovery.pending(path)) == len(kept)
    assert "would not take a judgement" in sink.of(ev.Log)[-1].message
    assert sink.events[-1].cancelled is True
    done = recovery.replay(db)
    assert done.written["evaluation"] == len(kept) and done.left == 0
    judged = [sid for (sid,) in db.execute("SELECT sample_id FROM evaluations")]
    assert sorted(judged) == sorted(e.sample_id for e in kept)  # each kept judgement written once


@pytest.mark.timeout(240)
def test_a_cluster_batch_on_a_locked_store_ends_with_one_line_not_a_traceback(batch_store):
    pytest.importorskip("distributed")
    store, ids, env = batch_store
    holder = Holder(store)
    try:
        proc = _eval(store, {**env, "PTXBENCH_LOCK_WAIT": "1"}, "--all-unjudged", "--static", "--json-progress",
                     "--cluster", "local:2")
        out, err = proc.communicate(timeout=200)
    finally:
        holder.release()
    assert proc.returncode == 3, err[-3000:]
    assert "Traceback" not in out
    kept = [e for e in _events(out) if e["event"] == "error" and "kept in the recovery journal" in e["message"]]
    assert kept and len(recovery.pending(store)) == len(kept)
    db = open_store(store)
    assert recovery.replay(db).written["evaluation"] == len(kept)
    db.conn.close()


# -- the journal itself ---------------------------------------------------------------------------------


def test_a_kept_judgement_written_by_its_process_and_by_a_replay_is_one_row(tmp_path):
    path = small_store(tmp_path / "s.sqlite")
    db = open_store(path, timeout=0.2)
    sid = add_sample(db, Sample(task_id="t1", language="ptx", source="test", code="x")).id
    evaluation = Evaluation(sample_id=sid, engine_version="0", status="judged", category="ok", source="test")
    measurements = [Measurement(split="train", sizes={"n": 1}, category="ok")]
    holder = Holder(path)
    try:
        with pytest.raises(recovery.Kept) as kept:
            recovery.add_evaluation_kept(db, evaluation, measurements, by="test")
    finally:
        holder.release()
    entry = kept.value.entry
    assert entry.exists() and json.loads(entry.read_text())["kind"] == "evaluation"
    # Its own process writes it after all (a retry) while the entry is still there: then a replay.
    row, already = recovery.write_evaluation_once(db, evaluation, measurements)
    assert not already
    done = recovery.replay(db)
    assert done.already == 1 and not done.written and not entry.exists()
    assert db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == 1
    assert db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == 1
    db.conn.close()


def test_a_judgement_kept_while_waiting_and_written_by_another_process_meanwhile_is_one_row(tmp_path):
    """Found by the soak: the writer that kept a judgement before waiting must look for it under the
    lock, as another writer may have written it from the journal during the wait."""
    from ptxbench.db.store import before_waiting

    path = small_store(tmp_path / "s.sqlite")
    db = open_store(path, timeout=30)
    sid = add_sample(db, Sample(task_id="t1", language="ptx", source="test", code="x")).id
    holder = Holder(path)
    replayed: list[subprocess.CompletedProcess] = []

    def meanwhile() -> None:  # runs after the writer kept its judgement, before it waits
        assert len(recovery.pending(path)) == 1
        holder.release()
        replayed.append(subprocess.run([sys.executable, "-m", "ptxbench.cli.main", "migrate", "--db", str(path)],
                                       capture_output=True, text=True, timeout=120))

    try:
        with before_waiting(meanwhile):
            row = recovery.add_evaluation_kept(
                db, Evaluation(sample_id=sid, engine_version="0", status="judged", category="ok", source="t"),
                by="test")
    finally:
        holder.release()
    assert "wrote 1 judgement" in replayed[0].stdout, replayed[0].stderr
    assert [r[0] for r in db.execute("SELECT id FROM evaluations")] == [row.id]
    assert recovery.pending(path) == []
    db.conn.close()


def test_a_half_written_entry_is_never_read_and_a_bad_one_is_set_aside(tmp_path):
    path = small_store(tmp_path / "s.sqlite")
    db = open_store(path)
    folder = recovery.journal_dir(path)
    folder.mkdir()
    (folder / ".0001-1-abc.json.part").write_text('{"format": 1, "kind": "lab')  # killed while writing
    (folder / "0002-1-abc.json").write_text('{"format": 1, "kind": "label", "label": {"sample_id": 999}}')
    done = recovery.replay(db)
    assert done.set_aside and "0002-1-abc.json" in done.set_aside[0]
    assert (folder / "0002-1-abc.json.rejected").exists() and recovery.pending(path) == []
    assert "set aside" in done.message()
    db.conn.close()


def test_labels_are_written_once_and_another_explorers_label_is_named(tmp_path):
    path = small_store(tmp_path / "s.sqlite")
    db = open_store(path)
    sid = add_sample(db, Sample(task_id="t1", language="ptx", source="test", code="x")).id
    mine = Label(sample_id=sid, author="ann", note="first look", created_at="2026-12-01T10:00:00+00:00")
    entry = recovery.keep_label(path, mine, by="test")
    first = recovery.add_label_once(db, mine, seen=None)
    assert not first.already and first.overtaken is None
    assert recovery.replay(db).already == 1 and not entry.exists()  # the entry written twice: one row
    theirs = Label(sample_id=sid, author="bob", category="wrong_result", created_at="2026-12-01T10:01:00+00:00")
    recovery.add_label_once(db, theirs)
    again = recovery.add_label_once(db, Label(sample_id=sid, author="ann", note="second look"), seen=first.label.id)
    assert again.overtaken is not None and again.overtaken.author == "bob"
    assert db.execute("SELECT COUNT(*) FROM labels").fetchone()[0] == 3
    db.conn.close()


def test_a_writer_stopped_waiting_fails_at_once_but_a_free_store_is_still_written(tmp_path):
    script = """
import sys, time
from pathlib import Path
from ptxbench.db.store import open_store, stop_waiting, write_transaction, StoreLocked
db = open_store(Path(sys.argv[1]), timeout=30)
stop_waiting()
with write_transaction(db):
    db.execute("INSERT INTO meta (key, value, updated_at) VALUES ('free', 'x', 'now')")
print("written", flush=True)
input()
t = time.monotonic()
try:
    with write_transaction(db):
        pass
except StoreLocked as exc:
    print(round(time.monotonic() - t, 1), exc, flush=True)
"""
    path = small_store(tmp_path / "s.sqlite")
    proc = subprocess.Popen([sys.executable, "-c", script, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "written"
    holder = Holder(path)
    try:
        proc.stdin.write("\n")
        proc.stdin.flush()
        out = proc.stdout.readline()
    finally:
        holder.release()
        proc.wait(timeout=30)
    took, _, message = out.partition(" ")
    assert float(took) < 2 and "a stop came while this process waited" in message


def test_open_store_patience_bounds_a_write(tmp_path):
    path = small_store(tmp_path / "s.sqlite")
    db = open_store(path, timeout=0.5)
    holder = Holder(path)
    try:
        started = time.monotonic()
        with pytest.raises(StoreLocked, match=r"waited 0.5 s, the patience set by PTXBENCH_LOCK_WAIT"):
            add_sample(db, Sample(task_id="t1", language="ptx", source="test", code="x"))
        assert time.monotonic() - started < 3
    finally:
        holder.release()
        db.conn.close()

