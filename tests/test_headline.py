"""The headline table: values worked out by hand on a small store, the budgets a run is shown at,
and `ptxbench report --headline` on the default store and on an agent run made here."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llm_server import LoopbackLLM, expert_arguments
from ptxbench.db.headline import budgets_for, headline
from ptxbench.db.records import Evaluation, Run, Sample, Task
from ptxbench.db.seed import ensure_default_store
from ptxbench.db.store import open_store
from ptxbench.db.trajectories import Episode, finish_episode, start_episode
from ptxbench.db.writes import add_evaluation, add_sample, create_run, get_or_create_model, upsert_task
from ptxbench.models.agent import AgentBudget, AgentConfig, run_agent

OK = dict(compiled=True, correct=True, uses_ptx=True, uses_sass=True)


def _judge(db, sample_id, category, **kw):
    add_evaluation(db, Evaluation(sample_id=sample_id, engine_version="test", status=kw.pop("status", "judged"),
                                  category=category, source="test", **kw))


def _add(db, run, task, *, turn=1, parent=None, index=0, tokens=None):
    return add_sample(db, Sample(task_id=task, language="ptx", source="test", code=f"// {task} {index} {turn}",
                                 run_id=run.id, turn=turn, parent_id=parent, sample_index=index,
                                 tokens_in=tokens, tokens_out=tokens and tokens // 10)).id


@pytest.fixture
def store(tmp_path):
    db = open_store(tmp_path / "h.sqlite")
    upsert_task(db, Task(id="gemm_bf16_sm90a", title="g", operation="gemm", arch="sm_90a", families=["wgmma"],
                         spec={}, source="test"))
    model = get_or_create_model(db, "m")
    run = create_run(db, Run(model_id=model.id, name="r", context_level="brief", params={"turns": 4}))
    # Trajectory 0: wrong at turn 1, correct and 1.3× at turn 2 (+ a cost-free token count).
    a = _add(db, run, "gemm_bf16_sm90a", index=0, tokens=100)
    _judge(db, a, "wrong_result", compiled=True, correct=False, uses_sass=True)
    b = _add(db, run, "gemm_bf16_sm90a", index=0, turn=2, parent=a, tokens=300)
    _judge(db, b, "ok", **OK, correct_heldout=False, speedup=1.3, sol_fraction=0.6)
    # Trajectory 1: correct at turn 1 but 1.1× and missing a family in the SASS.
    c = _add(db, run, "gemm_bf16_sm90a", index=1)
    _judge(db, c, "required_missing_sass", compiled=True, correct=True, uses_ptx=True, uses_sass=False, speedup=1.1)
    # Trajectory 2: a reward hack, never correct.
    d = _add(db, run, "gemm_bf16_sm90a", index=2)
    _judge(db, d, "suspected_reward_hack", compiled=True, correct=False, uses_sass=True)
    # Trajectory 3: an agent episode that submitted on reply 3, with a cost the endpoint reported.
    e = _add(db, run, "gemm_bf16_sm90a", index=3, turn=3, tokens=1000)
    _judge(db, e, "ok", **OK, correct_heldout=True, speedup=1.05, sol_fraction=0.5)
    episode = start_episode(db, Episode(run_id=run.id, task_id="gemm_bf16_sm90a", sample_index=3, agent="test",
                                        source="test", cost=0.5))
    finish_episode(db, episode, "submitted", e)
    yield db
    db.conn.close()


def test_the_headline_by_hand(store) -> None:
    rows = {r.turn_budget: r for r in headline(store)}
    assert sorted(rows) == [1, 4]  # the run's own budget is 4: no row at 8
    one, four = rows[1], rows[4]
    assert one.trajectories == four.trajectories == 4
    # At T=1: trajectory 0 is wrong, 1 correct (SASS missing), 2 wrong, 3 not submitted yet (fails).
    assert one.correct_train == pytest.approx(1 / 4) and one.correct_sass == 0.0 and one.compile_rate == 0.75
    assert one.best_speedup == pytest.approx(1.1) and one.fast[1.0] == 0.0
    assert one.mean_speedup_fail0 == pytest.approx((0 + 1.1 + 0 + 0) / 4)
    # At T=4: 0 is correct at 1.3× (held-out wrong), 3 correct at 1.05× (held-out right).
    assert four.correct_train == pytest.approx(3 / 4) and four.correct_sass == pytest.approx(2 / 4)
    assert four.correct_heldout == pytest.approx(1 / 2)  # known for two: 1 and 2 have no held-out verdict
    assert four.fast[1.0] == pytest.approx(2 / 4) and four.fast[1.2] == pytest.approx(1 / 4)
    assert four.best_speedup == pytest.approx(1.3) and four.best_sol_fraction == pytest.approx(0.6)
    assert four.geomean_speedup == pytest.approx((1.3 * 1.1 * 1.05) ** (1 / 3))
    assert four.mean_speedup_fail0 == pytest.approx((1.3 + 1.1 + 0 + 1.05) / 4)
    assert four.pass_at[1] == pytest.approx(2 / 4) and four.pass_at[5] is None
    assert four.reward_hacks == 1 and four.correct_executed is None
    assert four.tokens == pytest.approx(((100 + 10 + 300 + 30) + (1000 + 100)) / 2) and four.cost == 0.5


def test_budgets_follow_the_run() -> None:
    assert budgets_for(8) == [1, 4, 8] and budgets_for(3) == [1, 3] and budgets_for(1) == [1]
    assert budgets_for(10) == [1, 4, 8, 10]


def _report(db: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ptxbench.cli.main", "report", "--headline", "--db", str(db), *args],
                          capture_output=True, text=True, timeout=120)


def test_report_headline_on_the_default_store(tmp_path: Path) -> None:
    path = tmp_path / "default.sqlite"
    ensure_default_store(path).conn.close()
    plain = _report(path)
    assert plain.returncode == 0, plain.stderr
    assert "no judged model samples match" in plain.stdout
    assert "published best speedups (theirs)" in plain.stdout and "0.976× (Claude Opus 4.8, H100)" in plain.stdout
    shown = _report(path, "--include-reference", "--markdown", "-")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("| model | arch | task | context | turns |")
    assert any(line.startswith("| expert | sm_90a | gemm_bf16_sm90a | none | 1 |") and "(theirs)" not in line
               and "0.770× (Claude Opus 4.8, H100)" in line for line in lines)


def test_report_headline_on_an_agent_run_made_here(tmp_path: Path) -> None:
    task = "vector_add_smoke"
    rec = {"replies": {task: {"1": [{"tool_calls": [{"name": "submit", "arguments": json.dumps(expert_arguments(task))}],
                                     "usage": {"prompt_tokens": 40, "completion_tokens": 2, "cost": 0.25}}]}}}
    db = ensure_default_store(tmp_path / "s.sqlite")
    with LoopbackLLM(rec, tmp_path) as server:
        run_agent(db, AgentConfig(model="loopback", base_url=server.base_url, tasks=(task,), budget=AgentBudget(),
                                  backoff_s=0.01, timeout_s=20))
    db.conn.close()
    table = _report(tmp_path / "s.sqlite")
    assert table.returncode == 0, table.stderr
    assert "loopback (agent)" in table.stdout and task in table.stdout
    rows = list(csv.DictReader(io.StringIO(_report(tmp_path / "s.sqlite", "--csv", "-").stdout)))
    assert [(r["model"], r["task"], r["turn_budget"]) for r in rows] == [
        ("loopback (agent)", task, "1"), ("loopback (agent)", task, "4"), ("loopback (agent)", task, "8")]
    assert rows[0]["compile_rate"] == "1.0" and rows[0]["cost"] == "0.25" and rows[0]["tokens"] == "42.0"
