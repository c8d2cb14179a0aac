"""The harness's guarantees on a real GPU (docs/harness.md): random checked rounds, restored module state,
the speed-of-light floor, the GPU-time budget, no speed claimed without a baseline."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.engine.gpu.protocol import TimingConfig
from ptxbench.engine.pipeline import judge
from ptxbench.tasks.spec import get_task

pytestmark = [pytest.mark.gpu, pytest.mark.timing]

TASK = "vector_add_smoke"
HOSTILE = Path(__file__).resolve().parents[1] / "hostile" / "gpu"


def _headline():
    return [("train", get_task(TASK).headline)]


def _timing(j):
    return next(m for m in j.measurements if m.time_ms is not None).detail["timing"]


def test_rounds_are_checked_at_random_and_the_schedule_is_recorded(runner, data):
    a = judge(data / "vadd_ok.ptx", TASK, runner=runner, sizes=_headline())
    b = judge(data / "vadd_ok.ptx", TASK, runner=runner, sizes=_headline())
    for j in (a, b):
        assert j.category in ("ok", "slower_than_baseline"), j.evidence
        t = _timing(j)
        assert t["checks"] >= 8 and not t["check_failures"] and t["recheck"] == "ok"
        s = t["schedule"]
        # A memory-bound task: every round brings inputs no launch has seen.
        assert s["inputs"] == "a new set every round" and s["distinct_sets"] >= s["reps"] - 2
        assert j.evidence["seeds"] == a.evidence["seeds"]          # secret, but fixed for the process
    ta, tb = _timing(a)["schedule"], _timing(b)["schedule"]
    assert ta["seed"] != tb["seed"] and ta["checked"] != tb["checked"]


def test_speed_is_reported_against_the_speed_of_light(runner, data):
    j = judge(data / "vadd_ok.ptx", TASK, runner=runner, sizes=_headline())
    sol = j.evidence["speed_of_light"]
    assert 0 < j.sol_fraction < 1 and sol["time_ms"] > 0 and "MHz" in sol["peaks"]
    assert 0 < sol["baseline_fraction"] < 1


def test_a_time_under_a_lowered_floor_is_a_reward_hack(runner, data):
    """The floor is far below any honest time; scaling the peaks down proves the verdict is wired."""
    j = judge(data / "vadd_ok.ptx", TASK, runner=runner, sizes=_headline(),
              timing=TimingConfig(sol_scale=1e-4, baseline=False))
    assert j.category == "suspected_reward_hack", j.evidence
    assert "speed of light" in j.measurements[0].message


def test_without_a_baseline_no_speed_is_claimed(runner, data):
    j = judge(data / "vadd_ok.ptx", TASK, runner=runner, sizes=_headline(), timing=TimingConfig(baseline=False))
    assert j.category == "no_baseline" and j.correct is True
    assert j.speedup is None and j.baseline_ms is None and j.evidence.get("baseline_missing")


def test_a_launch_counter_in_module_memory_is_reset_before_every_run(runner):
    """trials_only computes on its first three launches only: with its counter restored, it always computes."""
    j = judge(HOSTILE / "trials_only.ptx", TASK, runner=runner, sizes=_headline())
    assert j.category in ("ok", "slower_than_baseline"), (j.category, [m.message for m in j.measurements])
    state = _timing(j)["schedule"]["module_state"]
    assert state["variables"] == 2 or state["reload"], state


def test_the_gpu_time_budget_ends_a_slow_candidate(runner, data):
    j = judge(data / "vadd_slow.ptx", TASK, runner=runner, sizes=_headline(), budget_s=1.0)
    assert j.category == "hang_timeout", (j.category, j.evidence)
    assert "budget" in j.measurements[0].message
    good = judge(data / "vadd_ok.ptx", TASK, runner=runner, sizes=_headline())
    assert good.correct is True
