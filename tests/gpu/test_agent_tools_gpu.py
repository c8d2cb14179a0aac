"""The agent tools on a GPU: check runs the train sizes only and says what failed; time times the
headline against the library; the submitted kernel of an episode is judged in full."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llm_server import expert_arguments, mutation_arguments

from ptxbench.models.agent_tools import GpuAccess, JudgeTools
from ptxbench.tasks.spec import get_task

pytestmark = pytest.mark.gpu
TASK = "vector_add_smoke"


def test_check_and_time_on_the_gpu(cuda_here) -> None:
    spec = get_task(TASK)
    tools = JudgeTools(spec, GpuAccess(("sm_90a",), True))
    broken = tools.call("check", mutation_arguments("add-wrong-op"))
    assert broken.status == "ok" and broken.result["category"] == "wrong_result", broken.result
    assert broken.result["correct_at_train_sizes"] is False and broken.gpu_s > 0
    text = json.dumps(broken.result)
    assert "heldout" not in text and str(spec.heldout[0]["N"]) not in text and "seed" not in text
    assert broken.result["sizes"][0]["worst_element"]
    timed = tools.call("time", expert_arguments(TASK))
    assert timed.status == "ok" and timed.result["speedup"] and timed.result["sol_fraction"], timed.result
    assert tools.gpu_spent_s == pytest.approx(broken.gpu_s + timed.gpu_s)
    spent = JudgeTools(spec, GpuAccess(("sm_90a",), True), gpu_budget_s=0.0).call("check", expert_arguments(TASK))
    assert spent.status.startswith("skipped: the GPU-time budget")
