"""Process and store safety: writers killed with SIGKILL mid-batch lose nothing they finished and
leave a sound store; a rerun resumes; the explorer keeps reading while a batch writes.

Everything here runs real processes on a real SQLite store: `ptxbench eval` (static stages in CI,
the GPU worker on the GPU machine) and the Textual explorer driven through Pilot.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))

from hostile_store import (
    build_store, eval_env, evaluation_rows, run_eval, store_problems,
)

from ptxbench.db import browse, browse_summary

BATCH = 32


def _judged_samples(path: Path) -> dict[int, int]:
    """sample id → number of evaluations."""
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT sample_id, COUNT(*) FROM evaluations GROUP BY sample_id"))
    finally:
        conn.close()


# -- the writer (`ptxbench eval`) killed mid-batch ----------------------------------------------------

def test_eval_killed_mid_batch_loses_nothing_and_resumes(tmp_path):
    store = tmp_path / "store.sqlite"
    ids = build_store(store, BATCH)
    env = eval_env(tmp_path / "asm-cache")
    args = ["--db", str(store), "--all-unjudged", "--static"]
    seen: dict[int, tuple] = {}          # every evaluation row ever seen, as first seen
    reported: dict[int, int] = {}        # evaluation id → sample id, from `result` events
    # Three kills at different moments (after committed rows; as the next row is about to be
    # written, its last stage just ended; as a sample starts), then a run to the end.
    kills = [
        lambda e, r: e["event"] == "result" and len(r.of("result")) >= 3,
        lambda e, r: e["event"] == "stage" and e.get("status") == "end" and len(r.of("result")) >= 2,
        lambda e, r: e["event"] == "sample" and len(r.of("result")) >= 4,
        None,
    ]
    for round_, kill_when in enumerate(kills):
        before = _judged_samples(store)
        run = run_eval(args, env, kill_when=kill_when)
        assert run.killed == (kill_when is not None), f"round {round_}: the batch ended before the kill"
        # A rerun never judges again what was committed before it started.
        again = {e["sample_id"] for e in run.of("sample")} & set(before)
        assert not again, f"round {round_}: judged again: {sorted(again)}"
        for e in run.of("result"):
            reported[e["evaluation_id"]] = e["sample_id"]
        assert store_problems(store) == [], f"round {round_}"
        rows = evaluation_rows(store)
        # Every row a result event announced is there, and no row ever changes once written.
        assert set(reported) <= set(rows), sorted(set(reported) - set(rows))
        for eid, sid in reported.items():
            assert rows[eid][1] == sid
        for eid, row in rows.items():
            assert seen.setdefault(eid, row) == row, f"evaluation {eid} changed after it was written"
        if kill_when is None:
            assert run.returncode == 0, run.stderr[-2000:]
            assert run.of("done") and run.of("done")[0]["cancelled"] is False
    counts = _judged_samples(store)
    assert set(counts) == set(ids), "samples left unjudged after the batch was resumed"
    assert set(counts.values()) == {1}, "a sample was judged twice"


CHILD_WRITER = textwrap.dedent("""
    import sys
    from ptxbench.db.records import Evaluation, Measurement
    from ptxbench.db.store import open_store
    from ptxbench.db.writes import add_evaluation
    db = open_store(sys.argv[1])
    sample_ids = [int(x) for x in sys.argv[2].split(",")]
    print("ready", flush=True)
    i = 0
    while True:
        ev = Evaluation(sample_id=sample_ids[i % len(sample_ids)], engine_version="test", status="judged",
                        category="wrong_result", source="tests/test_crash_safety.py: writer to be killed",
                        evidence={"note": "x" * 2000, "i": i})
        add_evaluation(db, ev, [Measurement(split="train", sizes={"N": k}, category="wrong_result", max_rel_err=0.5)
                                for k in range({per})])
        i += 1
""")


@pytest.mark.parametrize("delay", [0.15, 0.4, 0.9])
def test_an_evaluation_never_loses_its_measurements_when_the_writer_dies(tmp_path, delay):
    """A writer appending evaluations with 40 measurements each is killed at an arbitrary moment:
    every evaluation left in the store has all 40, and the store is sound."""
    per = 40
    store = tmp_path / "store.sqlite"
    ids = build_store(store, 4)
    proc = subprocess.Popen([sys.executable, "-c", CHILD_WRITER.replace("{per}", str(per)), str(store),
                             ",".join(map(str, ids))], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    time.sleep(delay)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    assert store_problems(store) == []
    conn = sqlite3.connect(store)
    try:
        counts = conn.execute(
            "SELECT e.id, COUNT(m.id) FROM evaluations e LEFT JOIN measurements m ON m.evaluation_id = e.id "
            "GROUP BY e.id").fetchall()
    finally:
        conn.close()
    assert counts, "the writer was killed before it wrote anything"
    assert {n for _, n in counts} == {per}


# -- the explorer while a batch writes -----------------------------------------------------------------

def _watched_app(store: Path, tmp_path: Path):
    """The explorer over `store`, recording every error it shows the user."""
    from ptxbench.tui.app import make_app

    app = make_app(store, engine_cmd=[sys.executable, "-c", "pass"], gpu_lock_dir=tmp_path)
    app.failures = []
    shown = app.notify

    def notify(message, *args, **kwargs):
        if kwargs.get("severity") == "error":
            app.failures.append(str(message))
        return shown(message, *args, **kwargs)

    app.notify = notify
    return app


async def _refresh(pilot) -> float:
    """Re-read the store as the explorer does (summary, facets, the samples page); seconds taken."""
    app = pilot.app
    started = time.perf_counter()
    app.reload_store()
    screen = app.screen
    if hasattr(screen, "load"):
        screen.load(keep_offset=True)
    await _settle(pilot)
    return time.perf_counter() - started


async def _settle(pilot) -> None:
    """Wait until no worker runs (a newer request may cancel an older one of its group)."""
    from textual.worker import WorkerCancelled

    app = pilot.app
    for _ in range(50):
        try:
            await app.workers.wait_for_complete()
        except WorkerCancelled:
            pass
        await pilot.pause()
        if not any(w.is_running for w in app.workers):
            return


def _judged_in_cells(app) -> int:
    """Samples with an evaluation (a static-only one counts: the batch runs --static)."""
    return sum(c.samples for c in app.cells or [] if c.category is not None)


async def test_explorer_stays_responsive_while_a_batch_writes(tmp_path):
    store = tmp_path / "store.sqlite"
    ids = build_store(store, 160)
    app = _watched_app(store, tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await _refresh(pilot)
        await pilot.press("3")                      # the samples view: paged query + full count
        await _refresh(pilot)
        proc = subprocess.Popen(
            [sys.executable, "-m", "ptxbench.cli.main", "eval", "--db", str(store), "--all-unjudged", "--static",
             "--json-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=eval_env(tmp_path / "asm"),
            start_new_session=True)
        latencies, judged = [], []
        try:
            while proc.poll() is None:
                latencies.append(await _refresh(pilot))
                judged.append(_judged_in_cells(app))
            latencies.append(await _refresh(pilot))
            judged.append(_judged_in_cells(app))
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        stderr = proc.stderr.read().decode() if proc.stderr else ""
        assert proc.returncode == 0, stderr[-2000:]
        assert app.failures == []
        assert len(latencies) >= 5, "the batch ended before the explorer could read during it"
        assert max(latencies) < 2.0, latencies
        assert judged == sorted(judged), "the explorer saw rows disappear"
        assert any(0 < j < len(ids) for j in judged), f"no read saw the batch half done: {judged}"
        assert judged[-1] == len(ids)
        assert app.screen.total == len(ids)
    assert store_problems(store) == []


def test_readers_are_not_blocked_by_a_writer_holding_the_lock(tmp_path):
    """Another process takes the write lock and sits on an uncommitted insert: the explorer's
    queries answer at once, with the committed state."""
    store = tmp_path / "store.sqlite"
    build_store(store, 8)
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sqlite3, sys, time
            conn = sqlite3.connect(sys.argv[1], isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE samples SET source = 'uncommitted' WHERE id = 1")
            print("locked", flush=True)
            time.sleep(30)
        """), str(store)], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
        started = time.perf_counter()
        conn = browse.connect(store, cached=False)
        try:
            browse_summary.cells(conn)
            page = browse.sample_page(conn, browse.SampleFilter())
            count = browse.sample_count(conn, browse.SampleFilter(text="vector_add"))
        finally:
            conn.close()
        assert time.perf_counter() - started < 1.0
        assert len(page.rows) == 8 and all(r.source != "uncommitted" for r in page.rows)
        assert count >= 0
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        if holder.stdout:
            holder.stdout.close()
    assert store_problems(store) == []


# -- the GPU worker killed mid-batch (GPU machine) -------------------------------------------------------

def _worker_pids(parent: int) -> list[int]:
    """Pids of GPU workers started by `parent` (`python -m ptxbench.engine.gpu.worker`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and "ptxbench.engine.gpu.worker" in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.gpu
def test_gpu_worker_killed_mid_batch(tmp_path):
    """The worker is SIGKILLed while it runs a sample: that sample is judged (or reported as a
    tool failure), every other sample of the batch is judged on fresh workers, nothing committed
    is lost, and a rerun judges only what is missing."""
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    store = tmp_path / "store.sqlite"
    ids = build_store(store, 8)                  # 4 of them assemble; each runs 3 trials at 3 sizes
    env = eval_env(tmp_path / "asm-cache")
    args = ["--db", str(store), "--all-unjudged"]
    state: dict[str, object] = {}

    def kill_worker(event, run) -> bool:
        if event["event"] == "stage" and event.get("stage") == "run" and event.get("status") == "begin" \
                and "killed" not in state and len(run.of("result")) >= 1:
            time.sleep(0.2)
            for pid in _worker_pids(int(state["eval_pid"])):
                os.kill(pid, signal.SIGKILL)
                state["killed"] = pid
        return False                            # the writer itself runs on

    run = run_eval(args, env, kill_when=kill_worker, timeout_s=600,
                   on_start=lambda proc: state.__setitem__("eval_pid", proc.pid))
    assert "killed" in state, "no worker was found to kill"
    assert run.returncode == 0, run.stderr[-2000:]
    assert store_problems(store) == []
    done = run.of("done")[0]
    assert done["judged"] + done["failed_tool"] == len(ids)
    judged = _judged_samples(store)
    assert set(judged.values()) == {1}
    rows_before = evaluation_rows(store)
    if len(judged) < len(ids):
        rerun = run_eval(args, env, timeout_s=600)
        assert {e["sample_id"] for e in rerun.of("sample")} == set(ids) - set(judged)
        assert rerun.returncode == 0
    rows_after = evaluation_rows(store)
    assert all(rows_after[k] == v for k, v in rows_before.items())
    assert set(_judged_samples(store)) == set(ids)
    assert store_problems(store) == []
