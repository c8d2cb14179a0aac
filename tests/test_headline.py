"""The headline table, like for like: every cell worked out by hand on a small store (real SQLite,
written through db/writes.py), the budgets a trajectory counts at, devices kept apart, MCP episodes
at their real turns, the paper's numbers only at its own budgets; and `ptxbench report --headline`
on the default store and on an agent run made here."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from llm_server import LoopbackLLM, expert_arguments
from ptxbench.db.headline import JUDGE_TOOLS, MCP_AGENT, NOT_A_GPU, budget_as_run, headline, mcp_turns
from ptxbench.db.records import Evaluation, Run, Sample, Task
from ptxbench.db.seed import ensure_default_store
from ptxbench.db.store import open_store
from ptxbench.db.trajectories import Episode, Step, add_step, finish_episode, start_episode
from ptxbench.db.writes import add_evaluation, add_sample, create_run, get_or_create_model, upsert_task
from ptxbench.models.agent import AgentBudget, AgentConfig, run_agent
from ptxbench.services.metrics import headline as headline_lines

GEMM, ATTN = "gemm_bf16_sm90a", "attn_fwd_sm90a"
H200, H100, CPU = "NVIDIA H200", "NVIDIA H100", "cpu (static stages only)"
SOLVED = dict(compiled=True, correct=True, correct_heldout=True, uses_ptx=True, uses_sass=True)


def _judge(db, sample_id, category, device=H200, **kw):
    add_evaluation(db, Evaluation(sample_id=sample_id, engine_version="test", status=kw.pop("status", "judged"),
                                  category=category, source="test", device=device, **kw))


def _add(db, run, task, *, turn=1, parent=None, index=0, tokens=None):
    return add_sample(db, Sample(task_id=task, language="ptx", source="test", code=f"// {task} {index} {turn}",
                                 run_id=run.id, turn=turn, parent_id=parent, sample_index=index,
                                 tokens_in=tokens, tokens_out=tokens and tokens // 10)).id


@pytest.fixture
def store(tmp_path):
    db = open_store(tmp_path / "h.sqlite")
    for task in (GEMM, ATTN):
        upsert_task(db, Task(id=task, title=task, operation="x", arch="sm_90a", families=["wgmma"], spec={},
                             source="test"))
    m = get_or_create_model(db, "m")
    a = create_run(db, Run(model_id=m.id, name="a", context_level="brief", params={"turns": 8}))
    # t0: wrong at turn 1; correct at turn 2 at 1.3× but wrong at a held-out size; solved at turn 5, 1.25×.
    t = _add(db, a, GEMM, index=0, tokens=100)
    _judge(db, t, "wrong_result", compiled=True, correct=False, uses_ptx=True, uses_sass=True)
    t = _add(db, a, GEMM, index=0, turn=2, parent=t, tokens=300)
    _judge(db, t, "ok", **{**SOLVED, "correct_heldout": False}, speedup=1.3, sol_fraction=0.7)
    t = _add(db, a, GEMM, index=0, turn=5, parent=t)
    _judge(db, t, "ok", **SOLVED, speedup=1.25, sol_fraction=0.6)
    # t1: correct everywhere at 1.4×, but generic code: the module targets sm_80, no wgmma anywhere.
    t = _add(db, a, GEMM, index=1)
    _judge(db, t, "required_missing_ptx", compiled=True, correct=True, correct_heldout=True, uses_ptx=False,
           uses_sass=False, speedup=1.4, evidence={"generic_target": "sm_80"})
    # t2: a reward hack.
    t = _add(db, a, GEMM, index=2)
    _judge(db, t, "suspected_reward_hack", compiled=True, correct=False, correct_heldout=False, uses_ptx=True,
           uses_sass=True)
    # t3: solved at turn 1, 1.1×.
    t = _add(db, a, GEMM, index=3, tokens=1000)
    _judge(db, t, "ok", **SOLVED, speedup=1.1, sol_fraction=0.5)
    # Run b, the same model and level made with 2 turns: t4 solved at turn 2 (0.9×) after a syntax error
    # judged without a GPU; t7 a syntax error alone. Both count at budget 1 and never at 4 or 8.
    b = create_run(db, Run(model_id=m.id, name="b", context_level="brief", params={"turns": 2}))
    t = _add(db, b, GEMM, index=0)
    _judge(db, t, "syntax", device=CPU, compiled=False)
    t = _add(db, b, GEMM, index=0, turn=2, parent=t)
    _judge(db, t, "ok", **SOLVED, speedup=0.9)
    _judge(db, _add(db, b, GEMM, index=1), "syntax", device=CPU, compiled=False)
    # Run c: the same model and level on an H100: its own row.
    c = create_run(db, Run(model_id=m.id, name="c", context_level="brief", params={"turns": 8}))
    _judge(db, _add(db, c, GEMM), "ok", device=H100, **SOLVED, speedup=0.8, sol_fraction=0.4)
    # An MCP session: write, check, an error answer, time, submit: its kernel is at turn 3.
    mcp = get_or_create_model(db, "c (mcp)", kind="agent")
    d = create_run(db, Run(model_id=mcp.id, name="mcp", context_level="none", params={"mode": "mcp"}))
    episode = start_episode(db, Episode(run_id=d.id, task_id=GEMM, agent=MCP_AGENT, source="test", cost=0.5))
    for n, (tool, status) in enumerate((("write_file", "ok"), ("check", "ok"), ("check", "error: rate"),
                                        ("time", "skipped: no sm_90a device"), ("submit", "ok")), start=1):
        add_step(db, Step(episode_id=episode.id, step=n, kind="tool", tool=tool, status=status))
    t = _add(db, d, GEMM)
    _judge(db, t, "ok", **SOLVED, speedup=1.05)
    finish_episode(db, episode, "submitted", t)
    # An imported run with no stated budget: gemm solved at turn 2 (0.7×), attention wrong for 5 turns.
    imp = get_or_create_model(db, "imp")
    e = create_run(db, Run(model_id=imp.id, name="imp", context_level="full", params={"imported_from": "x"}))
    t = _add(db, e, GEMM)
    _judge(db, t, "wrong_result", compiled=True, correct=False, uses_ptx=True, uses_sass=True)
    _judge(db, _add(db, e, GEMM, turn=2, parent=t), "ok", **SOLVED, speedup=0.7)
    parent = None
    for turn in range(1, 6):
        parent = _add(db, e, ATTN, turn=turn, parent=parent)
        _judge(db, parent, "wrong_result", compiled=True, correct=False, uses_ptx=True, uses_sass=True)
    yield db
    db.conn.close()


def _rows(db, **kw):
    return {(r.model, r.device, r.task, r.context, r.turn_budget): r for r in headline(db, **kw)}


def test_every_cell_by_hand(store) -> None:
    rows = _rows(store)
    assert sorted(rows) == sorted([
        *[("m", H200, GEMM, "brief", t) for t in (1, 4, 8)], *[("m", H100, GEMM, "brief", t) for t in (1, 4, 8)],
        *[("c (mcp)", H200, GEMM, "none", t) for t in (1, 4, 8)],
        ("imp", H200, GEMM, "full", 1), ("imp", H200, GEMM, "full", 4),
        ("imp", H200, ATTN, "full", 1), ("imp", H200, ATTN, "full", 4)])
    # T = 1: t0 wrong; t1 correct but generic; t2 a hack; t3 solved at 1.1×; t4 and t7 syntax errors.
    one = rows[("m", H200, GEMM, "brief", 1)]
    assert (one.arch, one.trajectories, one.budgets_as_run) == ("sm_90a", 6, "2, 8")
    assert one.compile_rate == pytest.approx(4 / 6)
    assert one.correct_train == pytest.approx(2 / 6) and one.correct_heldout == pytest.approx(2 / 6)
    assert one.solved == pytest.approx(1 / 6) and one.correct_sass == one.solved and one.solved_executed is None
    assert one.fast == pytest.approx({1.0: 1 / 6, 1.2: 0.0})
    # Not 1.4×: that kernel is generic code.
    assert (one.best_speedup, one.best_sol_fraction) == pytest.approx((1.1, 0.5))
    assert one.geomean_solved == pytest.approx(1.1) and one.geomean_correct == pytest.approx(math.sqrt(1.4 * 1.1))
    assert one.mean_speedup_fail0 == pytest.approx(1.1 / 6)
    assert one.pass_at[1] == pytest.approx(1 / 6) and one.pass_at[5] == pytest.approx(1 - 1 / 6)
    assert one.tokens == pytest.approx((110 + 1100) / 2) and one.cost is None and one.reward_hacks == 1
    # T = 4: run b's 2-turn trajectories are not here; t0 is correct at turn 2 but wrong held out.
    four = rows[("m", H200, GEMM, "brief", 4)]
    assert (four.trajectories, four.budgets_as_run, four.compile_rate) == (4, "8", 1.0)
    assert four.correct_train == pytest.approx(3 / 4) and four.correct_heldout == pytest.approx(2 / 4)
    assert four.solved == pytest.approx(1 / 4) and four.fast == pytest.approx({1.0: 1 / 4, 1.2: 0.0})
    # Not 1.3×: that kernel is wrong at a held-out size.
    assert (four.best_speedup, four.best_sol_fraction) == pytest.approx((1.1, 0.5))
    assert four.geomean_solved == pytest.approx(1.1)
    assert four.geomean_correct == pytest.approx((1.3 * 1.4 * 1.1) ** (1 / 3))
    assert four.mean_speedup_fail0 == pytest.approx(1.1 / 4)
    assert four.pass_at == pytest.approx({1: 1 / 4, 5: None})
    assert four.tokens == pytest.approx((440 + 1100) / 2) and four.reward_hacks == 1
    # T = 8: t0 solved at turn 5.
    eight = rows[("m", H200, GEMM, "brief", 8)]
    assert (eight.trajectories, eight.compile_rate, eight.correct_train) == (4, 1.0, 0.75)
    assert eight.correct_heldout == 0.75 and eight.solved == 0.5
    assert eight.fast == pytest.approx({1.0: 0.5, 1.2: 0.25})
    assert (eight.best_speedup, eight.best_sol_fraction) == pytest.approx((1.25, 0.6))
    assert eight.geomean_solved == pytest.approx(math.sqrt(1.25 * 1.1))
    assert eight.geomean_correct == pytest.approx((1.3 * 1.4 * 1.1) ** (1 / 3))
    assert eight.mean_speedup_fail0 == pytest.approx((1.25 + 1.1) / 4)
    assert eight.pass_at == pytest.approx({1: 0.5, 5: None}) and eight.tokens == pytest.approx(770)


def test_devices_are_never_pooled(store) -> None:
    rows = _rows(store)
    for budget in (1, 4, 8):
        h100 = rows[("m", H100, GEMM, "brief", budget)]
        assert (h100.trajectories, h100.solved, h100.best_speedup, h100.best_sol_fraction) == (1, 1.0, 0.8, 0.4)
    assert CPU in NOT_A_GPU and not any(device == CPU for _, device, _, _, _ in rows)


def test_an_mcp_episode_counts_at_its_real_turn(store) -> None:
    assert list(mcp_turns(store).values()) == [3]  # check, time, submit; the error answer judged nothing
    rows = _rows(store)
    one, four = rows[("c (mcp)", H200, GEMM, "none", 1)], rows[("c (mcp)", H200, GEMM, "none", 4)]
    assert one.budgets_as_run == "open" and one.trajectories == 1
    # Nothing submitted by turn 1: a known failure, which the paper writes as a best of 0.
    assert (one.compile_rate, one.solved, one.best_speedup, one.mean_speedup_fail0, one.cost) == (0.0, 0.0, 0.0, 0.0, None)
    assert (four.solved, four.best_speedup, four.cost) == (1.0, 1.05, 0.5)


def test_an_imported_run_has_one_budget_for_every_task(store) -> None:
    rows = _rows(store)
    # The run stored 5 turns (attention): gemm, solved at turn 2, is shown at 4 as well, and neither at 8.
    gemm = rows[("imp", H200, GEMM, "full", 4)]
    assert (gemm.budgets_as_run, gemm.solved, gemm.best_speedup) == ("5", 1.0, 0.7)
    attn = rows[("imp", H200, ATTN, "full", 4)]
    assert (attn.solved, attn.best_speedup, attn.compile_rate) == (0.0, 0.0, 1.0)
    assert budget_as_run({"turns_by_task": {GEMM: 3}, "turns": 8}, GEMM, 1) == 3
    assert budget_as_run({"turns_by_task": {GEMM: 3}, "turns": 8}, ATTN, 1) == 8
    assert budget_as_run({"imported_from": "x"}, GEMM, 5) == 5 and budget_as_run(None, GEMM, 2) == 2
    assert budget_as_run({"mode": "mcp"}, GEMM, 1) is None and budget_as_run({"turns": True}, GEMM, 4) == 4


def test_other_budgets_on_request_and_the_paper_only_at_its_own(store, tmp_path) -> None:
    rows = _rows(store, turn_budgets=(2, 5))
    assert rows[("m", H200, GEMM, "brief", 2)].trajectories == 6 and rows[("m", H200, GEMM, "brief", 5)].trajectories == 4
    lines = headline_lines(tmp_path / "h.sqlite", turn_budgets=(1, 2, 4, 8), models=["m"])
    papers = {(line.row.device, line.row.turn_budget): line.paper for line in lines}
    assert papers[(H200, 2)] is None  # the paper has no turn-2 number: none stands beside ours
    assert [(papers[(H200, t)].best_speedup, papers[(H200, t)].device) for t in (1, 4, 8)] == pytest.approx(
        [(0.76984867, "H100"), (0.967937871, "H100"), (0.975629186, "H100")])
    assert papers[(H200, 8)].model == "Claude Opus 4.8"


def test_the_names_it_reads_are_the_agents_own() -> None:
    from ptxbench.db.judgement import CPU_DEVICE
    from ptxbench.models.agent_tools import JUDGE_TOOLS as TOOLS
    from ptxbench.services.mcp_server import AGENT

    assert JUDGE_TOOLS == TOOLS and MCP_AGENT == AGENT and CPU_DEVICE in NOT_A_GPU


def _report(db: Path, *args: str, report: str = "--headline") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ptxbench.cli.main", "report", report, "--db", str(db), *args],
                          capture_output=True, text=True, timeout=120)


def test_report_headline_on_the_hand_store(store, tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    rows = list(csv.DictReader(io.StringIO(_report(path, "--csv", "-", "--model", "m").stdout)))
    h200 = [r for r in rows if r["device"] == H200]
    assert [(r["turn_budget"], r["trajectories"], r["best_speedup"], r["paper_best_speedup"]) for r in h200] == [
        ("1", "6", "1.1", "0.76984867"), ("4", "4", "1.1", "0.967937871"), ("8", "4", "1.25", "0.975629186")]
    shown = _report(path, "--model", "m", "--json", "-")
    data = json.loads(shown.stdout)
    assert data["schema"] == "ptxbench.headline/2" and "zhang677/PTXBench" in data["paper_source"]
    assert {r["paper_device"] for r in data["rows"]} == {"H100"}
    # Piped: a Markdown table, every cell whole.
    table = _report(path, "--model", "m")
    assert table.returncode == 0, table.stderr
    assert "…" not in table.stdout
    assert f"| m | {H200} | sm_90a | {GEMM} | brief | 8 | 4 | 8 | 100.0% | 75.0% | 75.0% | 50.0% |" in table.stdout
    assert "| 0.976× (H100) |" in table.stdout


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
    assert lines[0].startswith("| model | device | arch | task | context | turns |")
    assert any(line.startswith(f"| expert | {H200} | sm_90a | {GEMM} | none | 1 |") and "(theirs)" not in line
               and "0.770× (Claude Opus 4.8, H100)" in line for line in lines)
    assert any(line.startswith("| expert | no GPU | sm_100a | gemm_bf16_sm100a | none | 1 |") for line in lines)


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
    assert [(r["model"], r["task"], r["turn_budget"], r["budgets_as_run"]) for r in rows] == [
        ("loopback (agent)", task, str(t), "8") for t in (1, 4, 8)]
    assert rows[0]["compile_rate"] == "1.0" and rows[0]["cost"] == "0.25" and rows[0]["tokens"] == "42.0"
