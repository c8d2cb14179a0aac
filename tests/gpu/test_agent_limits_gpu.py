"""On the GPU: `check` says how many elements are wrong or unwritten and where the first is; concurrent
`check`s on tools sharing one GPU budget never spend past it; a call past its deadline runs nothing.
Prints what it saw (pytest -s) for the record."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llm_server import expert_arguments, mutation_arguments

from ptxbench.models.agent_tools import GpuAccess, GpuBudget, JudgeTools
from ptxbench.tasks.spec import get_task

pytestmark = pytest.mark.gpu
TASK = "vector_add_smoke"


def test_check_counts_the_wrong_elements(cuda_here) -> None:
    spec = get_task(TASK)
    tools = JudgeTools(spec, GpuAccess((spec.arch,), True))
    wrong = tools.call("check", mutation_arguments("add-wrong-op"))
    dropped = tools.call("check", mutation_arguments("add-dropped-store"))
    print(json.dumps({"wrong_op": wrong.result["sizes"], "dropped_store": dropped.result["sizes"]}, indent=1))
    first = wrong.result["sizes"][0]
    failed, of = (int(n) for n in first["trials_failed"].split(" of "))
    assert first["category"] == "wrong_result" and 1 <= failed <= of
    [row] = first["wrong"]
    assert row["tensor"] == "Z" and row["count"] > 0 and row["of"] == spec.train[0]["N"] and row["first_index"]
    unwritten = dropped.result["sizes"][0]
    assert unwritten["category"] == "unwritten_output" and unwritten["unwritten"][0]["count"] > 0
    text = json.dumps([wrong.result, dropped.result])
    assert "seed" not in text and str(spec.heldout[0]["N"]) not in text


def test_concurrent_checks_never_overspend_a_shared_budget(cuda_here) -> None:
    spec = get_task(TASK)
    warm = JudgeTools(spec, GpuAccess((spec.arch,), True))
    one = warm.call("check", expert_arguments(TASK))  # the worker started, the inputs cached
    assert one.status == "ok"
    again = warm.call("check", expert_arguments(TASK))
    budget = GpuBudget(again.gpu_s * 1.5)  # room for one call and a half
    tools = [JudgeTools(spec, GpuAccess((spec.arch,), True), budget=budget) for _ in range(4)]
    outcomes: list = [None] * 4

    def run(i: int) -> None:
        outcomes[i] = tools[i].call("check", expert_arguments(TASK))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ran = [o for o in outcomes if o.status == "ok"]
    print(json.dumps({"one_check_s": round(again.gpu_s, 3), "budget_s": round(budget.seconds, 3),
                      "spent_s": round(budget.spent, 3), "ran": len(ran),
                      "statuses": [o.status for o in outcomes]}))
    assert 1 <= len(ran) <= 2 and budget.spent == pytest.approx(sum(o.gpu_s for o in outcomes))
    assert budget.spent < budget.seconds + 2 * again.gpu_s  # at most the last call's overrun past it


def test_a_call_past_its_deadline_runs_nothing(cuda_here) -> None:
    tools = JudgeTools(get_task(TASK), GpuAccess(("sm_90a",), True))
    late = tools.call("check", expert_arguments(TASK), deadline=time.monotonic() - 1)
    assert late.status == "skipped: the episode's time is used up" and late.gpu_s == 0
