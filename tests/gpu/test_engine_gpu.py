"""The run, verify and time stages on a real GPU, with hand-written PTX kernels (tests/data/gpu/).

Each broken kernel must land in its category; the correct ones must pass on
train and held-out sizes and be timed against the library.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ptxbench.engine.candidate import Candidate
from ptxbench.engine.gpu.protocol import TimingConfig
from ptxbench.engine.manifest import parse_manifest
from ptxbench.engine.pipeline import judge
from ptxbench.engine.static import judge_static
from ptxbench.tasks.spec import get_task

pytestmark = pytest.mark.gpu

TASK = "vector_add_smoke"
BROKEN = {
    "vadd_hang": "hang_timeout",
    "vadd_illegal_address": "illegal_address",
    "vadd_misaligned": "misaligned_address",
    "vadd_oob_write": "out_of_bounds_write",
    "vadd_unwritten": "unwritten_output",
    "vadd_nan": "nan_inf",
    "vadd_wrong": "wrong_result",
    "vadd_input_modified": "input_modified",
    "vadd_trap": "runtime_other",
}
FAST = TimingConfig(min_reps=30, max_reps=30)


def test_correct_kernel_passes_train_and_heldout(runner, data):
    j = judge(data / "vadd_ok.ptx", TASK, runner=runner, timing=FAST)
    assert j.status == "judged"
    assert j.category in ("ok", "slower_than_baseline"), j.evidence
    assert j.correct is True and j.correct_heldout is True
    task = get_task(TASK)
    assert [m.split for m in j.measurements] == ["train"] * len(task.train) + ["heldout"] * len(task.heldout)
    for m in j.measurements:
        assert m.category == "ok"
        assert m.max_rel_err is not None and m.max_rel_err <= task.tolerance.max
        # The process's three seeds of the task, and one set drawn for this job alone.
        assert len(m.detail["trials"]) == 4 and len({t["seed"] for t in m.detail["trials"]}) == 4
        assert [t["seed"] for t in m.detail["trials"]][:3] == j.evidence["seeds"]
    timed = [m for m in j.measurements if m.time_ms is not None]
    assert len(timed) == 1 and timed[0].sizes == task.headline
    t = timed[0].detail["timing"]
    assert t["reps"] >= 30 and t["recheck"] == "ok"
    assert j.time_ms and j.baseline_ms and j.speedup and j.tflops
    assert j.baseline == "torch.add"
    assert j.device is not None and j.device.arch == "sm_90a"


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_kernel_lands_in_its_category(runner, data, name):
    j = judge(data / f"{name}.ptx", TASK, runner=runner, timing=FAST, launch_timeout_s=3.0)
    assert j.status == "judged"
    assert j.category == BROKEN[name], (j.category, j.evidence, [m.message for m in j.measurements])
    assert j.correct is False
    first = j.measurements[0]
    assert first.category == BROKEN[name]
    # Train and held-out are judged apart: after a crash in train, held-out still gets a fresh worker.
    assert any(m.split == "heldout" for m in j.measurements)


def test_worst_element_is_reported(runner, data):
    j = judge(data / "vadd_wrong.ptx", TASK, runner=runner, timing=FAST)
    w = j.measurements[0].worst
    assert w is not None and w["output"] == "Z"
    assert isinstance(w["index"], list) and len(w["index"]) == 1
    assert w["got"] != w["expected"] and w["rel_err"] > 0


def test_tma_mbarrier_cluster_kernel(runner, data):
    task = get_task(TASK)
    train = [("train", s) for s in task.train]
    j = judge(data / "vadd_tma_cluster.ptx", TASK, runner=runner, timing=FAST, sizes=train)
    assert j.correct is True, (j.category, [m.message for m in j.measurements])
    assert j.category in ("ok", "slower_than_baseline")
    assert j.time_ms is not None


def test_the_cluster_launch_is_what_makes_the_tma_kernel_right(runner, data):
    """The kernel adds 1.0 unless it runs in a cluster of 2: without the attribute the result is wrong."""
    task = get_task(TASK)
    manifest = json.loads((data / "vadd_tma_cluster.manifest.json").read_text())
    manifest["launches"][0]["cluster"] = [1, 1, 1]
    cand = Candidate("ptx", (data / "vadd_tma_cluster.ptx").read_text(), parse_manifest(manifest), "test")
    j = judge(cand, task, runner=runner, timing=FAST, sizes=[("train", task.train[0])])
    assert j.category == "wrong_result"


def test_a_sticky_fault_does_not_poison_the_next_candidate(runner, data):
    bad = judge(data / "vadd_illegal_address.ptx", TASK, runner=runner, timing=FAST)
    assert bad.category == "illegal_address"
    good = judge(data / "vadd_ok.ptx", TASK, runner=runner, timing=FAST)
    assert good.correct is True


@pytest.mark.timing
def test_timing_the_same_kernel_twice_agrees(runner, data):
    task = get_task(TASK)
    sizes = [("train", task.headline)]
    a = judge(data / "vadd_ok.ptx", TASK, runner=runner, sizes=sizes)
    b = judge(data / "vadd_ok.ptx", TASK, runner=runner, sizes=sizes)
    assert abs(a.time_ms - b.time_ms) / a.time_ms < 0.05
    assert abs(a.baseline_ms - b.baseline_ms) / a.baseline_ms < 0.05


def test_sanitize_finds_the_bad_store(runner, data):
    task = get_task(TASK)
    j = judge(data / "vadd_illegal_address.ptx", TASK, runner=runner, sanitize=True,
              sizes=[("train", task.train[0])])
    report = j.evidence["sanitize"]
    assert report.get("errors"), report
    assert report["category"] == "illegal_address"


@pytest.mark.timing        # Nsight Compute replays the launch; alone on the GPU, as a release run has it
def test_executed_counts_tma_and_cluster_instructions(runner, data):
    task = get_task(TASK)
    static = judge_static(data / "vadd_tma_cluster.ptx", task, require=["tma", "mbarrier", "cluster"])
    assert static.category == "ok", static.evidence
    j = judge(static.candidate, task, runner=runner, static=static, executed=True, timing=FAST,
              sizes=[("train", task.train[0])])
    report = j.evidence["executed"]
    assert report["opcodes"], report.get("tail")
    assert report["per_family"]["tma"] > 0 and report["per_family"]["cluster"] > 0, report
    assert report["per_family"]["mbarrier"] > 0, json.dumps(report["opcodes"])
    assert j.executed is True, report


def _experts() -> list[str]:
    from ptxbench.tasks.spec import all_tasks

    return [t.id for t in all_tasks()
            if t.arch == "sm_90a" and t.expert_dir() is not None and (t.expert_dir() / "kernel.ptx").exists()]


@pytest.mark.timing
@pytest.mark.parametrize("task_id", _experts())
def test_expert_solution_is_correct_and_timed(task_id, cuda_here):
    """Each expert through `ptxbench check --json`, as a user runs it: correct on every train and held-out
    size, timed against its library, the library's own output checked. With PTXBENCH_SUITE_DIR set (the
    GPU suite, scripts/gpu_suite.py) the JSON is kept there for the report."""
    task = get_task(task_id)
    cmd = [sys.executable, "-m", "ptxbench.cli.main", "check", str(task.expert_dir() / "kernel.ptx"),
           "--task", task_id, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads(proc.stdout)
    keep = os.environ.get("PTXBENCH_SUITE_DIR")
    if keep:
        Path(keep, "experts").mkdir(parents=True, exist_ok=True)
        Path(keep, "experts", f"{task_id}.json").write_text(json.dumps(payload, indent=1))
    j = payload["judgement"]
    assert j["correct"] is True, (j["category"], [s["message"] for s in j["sizes"]])
    assert j["correct_heldout"] is True, [s["message"] for s in j["sizes"]]
    assert j["category"] in ("ok", "slower_than_baseline"), j["evidence"].get("first_failure")
    assert j["speedup"] is not None and j["tflops"] is not None and j["sol_fraction"] is not None
    assert j["evidence"]["baseline_check"]["within_tolerance"], j["evidence"]["baseline_check"]
    # The marked copy saw every requested family run, at every size (engine/coverage.py); a task that
    # asks for no family (the smoke test) has nothing to mark.
    if task.families:
        cov = j["evidence"]["coverage"]
        assert cov["families"] == list(task.families) and len(cov["sizes"]) == len(j["sizes"]), cov
        assert all(set(s["families"].values()) == {"ran"} for s in cov["sizes"]), cov
        assert j["executed"] is True
    else:
        assert "coverage" not in j["evidence"], j["evidence"]["coverage"]
