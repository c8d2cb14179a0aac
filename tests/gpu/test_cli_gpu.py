"""`ptxbench check` and `ptxbench eval` on a GPU: the GPU stages run and the store gets full rows."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ptxbench.db.queries import evaluations_for, measurements_for
from ptxbench.db.records import Sample
from ptxbench.db.seed import seed_store
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_sample

pytestmark = pytest.mark.gpu


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ptxbench.cli.main", *args], capture_output=True, text=True,
                          timeout=600)


def test_check_runs_the_gpu_stages(runner, data):
    proc = _cli("check", str(data / "vadd_wrong.ptx"), "--task", "vector_add_smoke", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["gpu"] == "judged"
    assert out["static_category"] == "ok" and out["category"] == "wrong_result"
    assert out["judgement"]["device"] and out["judgement"]["sizes"][0]["worst"]["output"] == "Z"


def test_eval_writes_device_rows_and_measurements(runner, data, tmp_path):
    path = tmp_path / "store.db"
    db = open_store(path)
    seed_store(db, tmp_path)
    ids = [add_sample(db, Sample(task_id="vector_add_smoke", language="ptx",
                                 code=(data / f"{name}.ptx").read_text(), source=f"test:{name}")).id
           for name in ("vadd_ok", "vadd_illegal_address", "vadd_unwritten")]
    db.conn.close()
    proc = _cli("eval", "--db", str(path), *[a for i in ids for a in ("--sample", str(i))], "--json-progress")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[0]["event"] == "start" and events[0]["device"]
    assert events[-1]["event"] == "done" and events[-1]["judged"] == 3
    assert any(e["event"] == "stage" and e["stage"] == "time" for e in events)
    db = open_store(path)
    rows = [evaluations_for(db, i)[0] for i in ids]
    assert [r.category for r in rows] in (["ok", "illegal_address", "unwritten_output"],
                                         ["slower_than_baseline", "illegal_address", "unwritten_output"])
    ok = rows[0]
    assert ok.status == "judged" and ok.device and ok.driver and ok.correct and ok.correct_heldout
    assert ok.tool_versions.get("torch") and ok.tool_versions.get("ptxas") and ok.engine_version
    assert ok.time_ms and ok.baseline_ms and ok.speedup
    ms = measurements_for(db, ok.id)
    assert sorted(m.split for m in ms) == ["heldout", "train", "train"]
    assert sum(1 for m in ms if m.time_ms) == 1
    assert all(m.max_rel_err is not None for m in ms)
    db.conn.close()
