"""`ptxbench eval` as a real process over a real store: rows, the JSON event stream, resuming, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ptxbench.db.queries import evaluations_for, measurements_for
from ptxbench.db.records import Sample
from ptxbench.db.seed import seed_store
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_sample
from proc_rest import rest_of

DATA = Path(__file__).resolve().parent / "data" / "gpu"
ROOT = Path(__file__).resolve().parents[1]


def _store(tmp_path: Path, kernels: list[str]) -> tuple[Path, list[int]]:
    path = tmp_path / "store.db"
    db = open_store(path)
    empty = tmp_path / "seed"
    empty.mkdir()
    seed_store(db, empty)
    ids = []
    for i, name in enumerate(kernels):
        code = (DATA / f"{name}.ptx").read_text() + f"\n// copy {i}\n"
        s = add_sample(db, Sample(task_id="vector_add_smoke", language="ptx", code=code, source=f"test:{name}"))
        ids.append(s.id)
    bad = add_sample(db, Sample(task_id="vector_add_smoke", language="none", code="",
                                response="no code here, only words", source="test:no code"))
    ids.append(bad.id)
    db.conn.close()
    return path, ids


def _eval(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ptxbench.cli.main", "eval", *args], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **(env or {})}, **kw)


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_static_batch_writes_rows_and_follows_the_event_contract(tmp_path):
    path, ids = _store(tmp_path, ["vadd_ok", "vadd_wrong"])
    proc = _eval("--db", str(path), "--sample", str(ids[0]), "--sample", str(ids[1]), "--sample", str(ids[2]),
                 "--static", "--json-progress")
    assert proc.returncode == 0, proc.stderr
    events = _events(proc.stdout)
    assert events[0]["event"] == "start" and events[0]["total"] == 3 and events[0]["static_only"] is True
    assert events[-1] == {**events[-1], "event": "done", "judged": 3, "failed_tool": 0, "cancelled": False}
    assert all("t" in e for e in events)
    results = [e for e in events if e["event"] == "result"]
    assert [r["sample_id"] for r in results] == ids[:3]
    stages = {(e["stage"], e["status"]) for e in events if e["event"] == "stage"}
    assert ("assemble", "begin") in stages and ("inspect", "end") in stages

    db = open_store(path)
    ok = evaluations_for(db, ids[0])[0]
    assert ok.status == "static" and ok.category == "ok" and ok.compiled is True
    assert ok.device == "cpu (static stages only)" and ok.source == "ptxbench eval"
    assert ok.engine_version and ok.tool_versions.get("ptxas")
    assert ok.sass and ok.ptx is None  # a PTX candidate's PTX is its code; only nvcc's output is stored
    none = evaluations_for(db, ids[2])[0]
    assert none.category == "no_candidate" and none.status == "judged"
    db.conn.close()


def test_all_unjudged_resumes(tmp_path):
    path, ids = _store(tmp_path, ["vadd_ok", "vadd_nan"])
    first = _eval("--db", str(path), "--sample", str(ids[0]), "--static", "--json-progress")
    assert first.returncode == 0, first.stderr
    second = _eval("--db", str(path), "--all-unjudged", "--static", "--json-progress")
    events = _events(second.stdout)
    done = [e["sample_id"] for e in events if e["event"] == "result"]
    assert ids[0] not in done and set(ids[1:]) <= set(done)
    third = _eval("--db", str(path), "--all-unjudged", "--static", "--json-progress")
    assert _events(third.stdout)[0]["total"] == 0


def test_without_a_gpu_the_gpu_stages_are_a_skip_not_a_verdict(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    path, ids = _store(tmp_path, ["vadd_ok"])
    proc = _eval("--db", str(path), "--sample", str(ids[0]), "--json-progress")
    assert proc.returncode == 0, proc.stderr
    events = _events(proc.stdout)
    assert events[0]["device"] is None
    result = next(e for e in events if e["event"] == "result")
    assert result["status"] == "skipped: no sm_90a device"
    db = open_store(path)
    row = evaluations_for(db, ids[0])[0]
    assert row.correct is None and row.status.startswith("skipped: ") and row.device == "no GPU"
    assert measurements_for(db, row.id) == []
    db.conn.close()


def test_sigterm_ends_the_batch_cleanly_and_keeps_finished_rows(tmp_path):
    path, ids = _store(tmp_path, ["vadd_ok"] * 40)
    proc = subprocess.Popen([sys.executable, "-m", "ptxbench.cli.main", "eval", "--db", str(path), "--all-unjudged",
                             "--static", "--json-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(json.loads(line))
        if lines[-1]["event"] == "result":
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = rest_of(proc, timeout=300)
    lines += _events(rest)
    assert proc.returncode == 0
    done = lines[-1]
    assert done["event"] == "done" and done["cancelled"] is True
    assert done["judged"] < len(ids)
    db = open_store(path)
    judged = [e["sample_id"] for e in lines if e["event"] == "result"]
    assert len(judged) == done["judged"]
    assert all(evaluations_for(db, i) for i in judged)
    assert db.execute("SELECT count(*) FROM evaluations").fetchone()[0] == done["judged"]
    db.conn.close()


def test_usage_errors(tmp_path):
    assert _eval("--db", str(tmp_path / "s.db")).returncode == 2
    assert _eval("--db", str(tmp_path / "s.db"), "--task", "no_such_task").returncode == 2


BROKEN_WORKER = r'''
import json, os, sys
proto = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
for line in sys.stdin:
    msg = json.loads(line)
    if msg["op"] == "exit":
        break
    if msg["op"] == "hello":
        proto.write(json.dumps({"event": "hello", "ok": True, "device": {
            "name": "Stub GPU", "arch": "sm_90a", "compute_capability": [9, 0], "num_sms": 132,
            "l2_bytes": 1, "memory_bytes": 1, "driver": "stub"}}) + "\n")
    else:
        proto.write(json.dumps({"event": "done", "result": {"fatal": {
            "category": "tool_error", "message": "the worker's own bug", "sticky": False}}}) + "\n")
'''


def test_a_tool_failure_still_writes_a_row_for_the_sample(tmp_path):
    """Nothing the batch attempts is silently left unjudged: the row says the tool failed, and how."""
    from ptxbench.engine.runner import Runner, RunnerConfig
    from ptxbench.services.batch import run_batch
    from ptxbench.services.progress import to_wire

    path, ids = _store(tmp_path, ["vadd_ok"])
    worker = tmp_path / "broken_worker.py"
    worker.write_text(BROKEN_WORKER)
    events = []

    class Collect:
        def emit(self, event):
            events.append(to_wire(event, 0.0))

    db = open_store(path)
    with Runner(RunnerConfig(command=[sys.executable, str(worker)], start_timeout_s=30)) as runner:
        code = run_batch(db, ids[:1], Collect(), runner=runner)
    assert code == 1                                   # the tool failed on every sample it tried
    rows = evaluations_for(db, ids[0])
    assert len(rows) == 1 and rows[0].status.startswith("error: ")
    assert "the worker's own bug" in rows[0].evidence["tool_error"]
    assert rows[0].compiled is True and rows[0].device == "Stub GPU"   # what the static stages found is kept
    assert rows[0].correct is None
    assert [e for e in events if e["event"] == "error"][0]["evaluation_id"] == rows[0].id
    db.conn.close()
