"""The Dask path (services/cluster.py) on a real distributed.LocalCluster, judging static-only.

The workers are real Dask worker processes (with nannies), the jobs run the real static stages,
the rows are read back from a real store. One test kills a worker's process in the middle of the
batch: Dask runs its job again elsewhere, and the store still has exactly one row per sample.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("distributed")

import paced_jobs
from ptxbench.db.queries import evaluations_for
from ptxbench.db.store import open_store
from ptxbench.services import progress as ev
from ptxbench.services.batch import StopFlag, run_batch
from ptxbench.services.cluster import DaskBackend, parse_address
from ptxbench.services.errors import UsageError
from ptxbench.services.parallel import run_parallel_batch
from ptxbench.services.pool import GpuPool
from test_pool import Collect, _logs, _one_row_each, _static_slots, _store
from proc_rest import rest_of

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _cache(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "asm-cache"))


def test_addresses():
    assert parse_address("tcp://10.0.0.1:8786") == ("remote", None)
    assert parse_address("local") == ("local", None)
    assert parse_address("local:3") == ("local", 3)
    for bad in ("local:0", "10.0.0.1:8786", "local:x"):
        with pytest.raises(UsageError):
            parse_address(bad)


class KillOne(Collect):
    """After `after` rows, SIGKILL the process of the worker that judged the last one."""

    def __init__(self, pids: dict[str, int], after: int) -> None:
        super().__init__()
        self.pids, self.after, self.killed = pids, after, None

    def emit(self, event: ev.Event) -> None:
        super().emit(event)
        if isinstance(event, ev.SampleStarted) and self.killed is None and len(self.of(ev.Result)) >= self.after:
            # The worker that just began a job is the one that dies with it in hand.
            pid = self.pids.get(event.worker or "")
            if pid:
                os.kill(pid, signal.SIGKILL)
                self.killed = event.worker


def test_two_dask_workers_judge_as_one_worker_does_and_survive_a_kill(tmp_path: Path):
    n = 16
    db, ids = _store(tmp_path, n)
    backend = DaskBackend("local:2")
    sink = KillOne({}, after=4)

    # Learn the worker processes' pids once the cluster is up (start() is the batch's first step).
    real_start = backend.start

    def start(archs, static_only):
        started = real_start(archs, static_only)
        sink.pids = {str(i["name"]): int(i["pid"]) for i in backend._known.values()}  # type: ignore[attr-defined]
        return started

    backend.start = start  # type: ignore[method-assign]
    assert run_parallel_batch(db, ids, sink, backend, static_only=True, stop=StopFlag()) == 0
    assert sink.killed is not None, "no worker was killed: the test proved nothing"
    rows = _one_row_each(db, ids)  # nothing lost, nothing written twice
    assert all(r.status == "static" for r in rows)
    assert len({r.evidence["worker"]["attempt"] for r in rows}) == n
    done = sink.events[-1]
    assert done == ev.Done(judged=n, failed_tool=0, cancelled=False)
    start_ev = sink.of(ev.Start)[0]
    assert start_ev.workers == 2 and "Dask local:2" in (start_ev.device or "")
    assert len({r.evidence["worker"]["name"] for r in rows}) >= 2
    # The same verdicts as the one-worker batch.
    db1, ids1 = _store(tmp_path / "one", n)
    assert run_batch(db1, ids1, Collect(), static_only=True, stop=StopFlag()) == 0
    assert [r.category for r in rows] == [evaluations_for(db1, i)[0].category for i in ids1]


class PacedDask(DaskBackend):
    """The cluster, its jobs paced (tests/paced_jobs.py): the first is quick, the others take seconds."""

    def start(self, archs, static_only):
        started = super().start(archs, static_only)
        self._worker_side = types.SimpleNamespace(judge_on_worker=paced_jobs.paced_judge)
        return started


def test_a_stop_on_a_cluster_keeps_the_rows_of_running_jobs_and_a_resume_does_the_rest(tmp_path: Path):
    db, ids = _store(tmp_path, 10)
    stop = StopFlag()
    sink = Collect(stop_after=1, stop=stop)  # the quick first job's row: the other jobs are in their first seconds
    assert run_parallel_batch(db, ids, sink, PacedDask("local:2"), static_only=True, stop=stop) == 0
    done = sink.events[-1]
    assert isinstance(done, ev.Done) and done.cancelled
    judged = [i for i in ids if evaluations_for(db, i)]
    assert len(judged) == done.judged and all(len(evaluations_for(db, i)) == 1 for i in judged)
    # The quick first job, and at least one slow one that was running on the other worker at the stop.
    assert ids[0] in judged and 2 <= len(judged) < len(ids)
    (stopping,) = _logs(sink, "stopping:")
    assert "running job(s) to write their rows" in stopping
    (stopped,) = _logs(sink, "stopped:")
    assert f"{len(ids) - len(judged)} sample(s) left unjudged for a resume" in stopped and "abandoned" not in stopped
    left = [i for i in ids if i not in judged]
    run_parallel_batch(
        db, left, Collect(), GpuPool(_static_slots(2), static_only=True), static_only=True, stop=StopFlag()
    )
    rows = _one_row_each(db, ids)  # nothing judged twice
    db1, ids1 = _store(tmp_path / "one", 10)
    run_batch(db1, ids1, Collect(), static_only=True, stop=StopFlag())
    assert [r.category for r in rows] == [evaluations_for(db1, i)[0].category for i in ids1]


def test_sigint_during_a_cluster_eval_says_what_it_kept(tmp_path: Path):
    from test_eval_cli import ROOT, _events
    from test_eval_cli import _store as cli_store

    path, ids = cli_store(tmp_path, ["vadd_ok", "vadd_wrong"] * 15)
    env = {**os.environ, "PTXBENCH_CACHE": str(tmp_path / "cache")}
    cmd = [
        sys.executable,
        "-m",
        "ptxbench.cli.main",
        "eval",
        "--db",
        str(path),
        "--all-unjudged",
        "--static",
        "--cluster",
        "local:2",
        "--json-progress",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if '"event": "result"' in line:
            proc.send_signal(signal.SIGINT)
            break
    out, err = rest_of(proc, timeout=120)
    assert proc.returncode == 0, err[-3000:]
    events = _events("".join(lines) + out)
    logs = [e["message"] for e in events if e["event"] == "log"]
    assert any(m.startswith("stopping:") for m in logs) and any(m.startswith("stopped:") for m in logs), logs
    done = events[-1]
    assert done["event"] == "done" and done["cancelled"] is True
    db = open_store(path)  # the store's own samples (its seed) are in the batch too: count every row
    rows = db.execute("SELECT sample_id, COUNT(*) FROM evaluations GROUP BY sample_id").fetchall()
    assert len(rows) == done["judged"] + done["failed_tool"] < len(ids) and all(n == 1 for _sid, n in rows)
    db.conn.close()


def test_a_cluster_with_no_gpu_resource_is_refused(tmp_path: Path):
    from distributed import LocalCluster

    db, ids = _store(tmp_path, 2)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        sink = Collect()
        assert (
            run_parallel_batch(db, ids, sink, DaskBackend(cluster.scheduler_address), static_only=True, stop=StopFlag())
            == 1
        )
    assert "declares a GPU resource" in sink.of(ev.Error)[0].message
    assert all(not evaluations_for(db, i) for i in ids)


def test_eval_cluster_local_from_the_command_line_and_resume(tmp_path: Path):
    from test_eval_cli import _eval, _events
    from test_eval_cli import _store as cli_store

    path, ids = cli_store(tmp_path, ["vadd_ok", "vadd_wrong", "vadd_ok"])
    env = {"PTXBENCH_CACHE": str(tmp_path / "cache")}
    proc = _eval("--db", str(path), "--all-unjudged", "--static", "--cluster", "local:2", "--json-progress", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = _events(proc.stdout)
    assert events[0]["event"] == "start" and events[0]["workers"] == 2
    assert {e["state"] for e in events if e["event"] == "worker"} >= {"ready"}
    results = [e for e in events if e["event"] == "result"]
    assert set(ids) <= {r["sample_id"] for r in results} and all(r["worker"] for r in results)
    assert len(results) == len({r["sample_id"] for r in results}) == events[-1]["judged"]
    db = open_store(path)
    _one_row_each(db, ids)
    db.conn.close()
    again = _eval("--db", str(path), "--all-unjudged", "--static", "--cluster", "local:1", "--json-progress", env=env)
    assert _events(again.stdout)[0]["total"] == 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--static", "--gpus", "0"], "needs no GPU"),
        (["--static", "--cluster", "10.0.0.1:8786"], "scheduler's address"),
        (["--static", "--cluster", "local:2", "--gpus", "all"], "leave out --gpus"),
        (["--static", "--workers-per-gpu", "2"], "needs --gpus"),
    ],
)
def test_eval_refuses_options_that_do_not_fit(tmp_path: Path, args: list[str], says: str):
    from test_eval_cli import _eval
    from test_eval_cli import _store as cli_store

    path, _ids = cli_store(tmp_path, ["vadd_ok"])
    proc = _eval("--db", str(path), "--all-unjudged", *args)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
