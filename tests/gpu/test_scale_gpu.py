"""The pool, the Dask cluster and `ptxbench run --gpus` on a real GPU: the rows they write are the
rows one worker writes, with the device and the worker that judged them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llm_server import LoopbackLLM, expert_reply, mutation_reply

from ptxbench.db.generation import run_samples
from ptxbench.db.queries import evaluations_for, latest_evaluation
from ptxbench.db.records import Sample
from ptxbench.db.seed import ensure_default_store, seed_store
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_sample

pytestmark = [pytest.mark.gpu, pytest.mark.timing]
KERNELS = ("vadd_ok", "vadd_illegal_address", "vadd_unwritten")
EXPECTED = ({"ok", "slower_than_baseline"}, {"illegal_address"}, {"unwritten_output"})


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ptxbench.cli.main", *args], capture_output=True, text=True,
                          timeout=600)


def _store_with_kernels(path: Path, data: Path) -> list[int]:
    db = open_store(path)
    seed_store(db, path.parent)
    ids = [add_sample(db, Sample(task_id="vector_add_smoke", language="ptx", code=(data / f"{k}.ptx").read_text(),
                                 source=f"test:{k}")).id for k in KERNELS]
    db.conn.close()
    return ids


@pytest.mark.parametrize("spread", [["--gpus", "1"], ["--cluster", "local:1"]], ids=["pool", "dask"])
def test_eval_spread_writes_the_rows_one_worker_writes(cuda_here, data, tmp_path, spread):
    if spread[0] == "--cluster":
        pytest.importorskip("distributed")
    path = tmp_path / "store.db"
    ids = _store_with_kernels(path, data)
    proc = _cli("eval", "--db", str(path), *[a for i in ids for a in ("--sample", str(i))], *spread)
    assert proc.returncode == 0, proc.stderr[-3000:]
    db = open_store(path)
    rows = [evaluations_for(db, i) for i in ids]
    assert all(len(r) == 1 for r in rows)           # one row each: nothing judged twice
    for (row,), wanted in zip(rows, EXPECTED):
        assert row.category in wanted and row.status == "judged" and row.device
        assert row.evidence.get("worker"), row.evidence
        assert "shared_gpu" not in row.evidence     # one worker on the GPU: clean timing
    assert rows[0][0].speedup
    db.conn.close()


def test_run_on_the_pool_feeds_gpu_verdicts_into_the_next_turn(cuda_here, tmp_path):
    db = ensure_default_store(tmp_path / "store.sqlite")
    recording = {"replies": {"*": {"1": [{"content": mutation_reply("add-wrong-op")}],
                                   "*": [{"content": expert_reply("vector_add_smoke")}]}}}
    with LoopbackLLM(recording, tmp_path) as server:
        proc = _cli("run", "--db", str(tmp_path / "store.sqlite"), "--create", "--model", "loopback", "--base-url",
                    server.base_url, "--tasks", "vector_add_smoke", "--samples", "2", "--turns", "2", "--gpus", "1",
                    "--gpu", "on")
        second_turns = [r for r in server.requests() if r["turn"] == 2]
    assert proc.returncode == 0, proc.stderr[-3000:]
    db = open_store(tmp_path / "store.sqlite")
    run_id = db.conn.execute("SELECT MAX(id) FROM runs").fetchone()[0]
    rows = {(s.sample_index, s.turn): latest_evaluation(db, s.id) for s in run_samples(db, run_id)}
    assert {rows[(i, 1)].category for i in range(2)} == {"wrong_result"}     # found on the GPU, not before
    assert all(rows[(i, 2)].category in ("ok", "slower_than_baseline") and rows[(i, 2)].device for i in range(2))
    assert len(second_turns) == 2 and all("wrong_result" in r["messages"][-1]["content"] for r in second_turns)

