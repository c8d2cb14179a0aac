"""The explorer replays agent episodes step by step, and compares two agents' kernels.

The store is made here by two real agent runs against the loopback chat-completions server
(tests/llm_server.py), so the episodes are what `ptxbench run --agent` writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import settle
from textual.widgets import DataTable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llm_server import LoopbackLLM, expert_arguments, mutation_arguments

from ptxbench.db.seed import ensure_default_store
from ptxbench.models.agent import AgentBudget, AgentConfig, run_agent
from ptxbench.tui.app import make_app
from ptxbench.tui.screens.agents import AgentEpisodesScreen, AgentStepsScreen
from ptxbench.tui.screens.compare import CompareScreen
from ptxbench.tui.screens.diff import DiffScreen
from ptxbench.tui.screens.sample import SampleScreen

TASK = "vector_add_smoke"


@pytest.fixture(scope="module")
def agent_store(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("agents")
    path = folder / "agents.sqlite"
    db = ensure_default_store(path)
    bad, good = json.dumps(mutation_arguments("add-wrong-op")), json.dumps(expert_arguments(TASK))
    scripts = {
        "alpha": {"1": [{"tool_calls": [{"name": "check", "arguments": bad}, {"name": "profile", "arguments": "{}"}]}],
                  "2": [{"content": "Fixed.", "tool_calls": [{"name": "submit", "arguments": good}]}]},
        "beta": {"1": [{"tool_calls": [{"name": "submit", "arguments": bad}]}]},
    }
    for model, replies in scripts.items():
        with LoopbackLLM({"replies": {TASK: replies}}, folder) as server:
            run_agent(db, AgentConfig(model=model, base_url=server.base_url, tasks=(TASK,), budget=AgentBudget(),
                                      backoff_s=0.01, timeout_s=20))
    db.conn.close()
    return path


async def test_episodes_replay_step_by_step(agent_store, tmp_path) -> None:
    app = make_app(agent_store, gpu_lock_dir=tmp_path)
    async with app.run_test(size=(150, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A")
        await settle(pilot)
        episodes = app.screen
        assert isinstance(episodes, AgentEpisodesScreen)
        assert [r.model for r in episodes.rows] == ["beta (agent)", "alpha (agent)"]
        table = episodes.query_one(DataTable)
        table.move_cursor(row=1)
        await pilot.press("enter")
        await settle(pilot)
        steps = app.screen
        assert isinstance(steps, AgentStepsScreen) and steps.episode.task_id == TASK
        assert [(s.kind, s.tool) for s in steps.steps] == [
            ("model", None), ("tool", "check"), ("tool", "profile"), ("model", None), ("tool", "submit")]
        assert "submitted" in str(steps.query_one("#steps-head").render())
        # n: the next step that did not answer ok (the unknown tool; check is "skipped" here without a GPU).
        await pilot.press("n")
        await settle(pilot)
        first = steps.query_one(DataTable).cursor_row
        assert steps.steps[first].status != "ok"
        detail = str(steps.query_one("#steps-detail").render())
        assert "Arguments" in detail and "Result" in detail
        # k: the episode's kernel as a sample; A there: back to its episode.
        await pilot.press("k")
        await settle(pilot)
        assert isinstance(app.screen, SampleScreen) and app.screen.sample_id == steps.episode.sample_id
        await pilot.press("A")
        await settle(pilot)
        assert isinstance(app.screen, AgentStepsScreen) and app.screen.episode_id == steps.episode_id


async def test_two_agents_kernels_diff_and_compare(agent_store, tmp_path) -> None:
    app = make_app(agent_store, gpu_lock_dir=tmp_path)
    async with app.run_test(size=(150, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A")
        await settle(pilot)
        episodes = app.screen
        kernels = [r.sample_id for r in episodes.rows]
        await pilot.press("space", "down", "space", "d")
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen)
        assert {app.screen.left, app.screen.right} == set(kernels)
        await pilot.press("escape", "escape")
        await settle(pilot)
        await pilot.press("5")
        await settle(pilot)
        compare = app.screen
        assert isinstance(compare, CompareScreen)
        compare.query_one("#compare-task").value = TASK
        await settle(pilot)
        names = {m.model for m in compare.models}
        assert {"alpha (agent)", "beta (agent)"} <= names


async def test_the_plots_headline_tab_puts_the_paper_beside_the_runs(agent_store, tmp_path) -> None:
    from ptxbench.tui.screens.plots import PlotsScreen

    app = make_app(agent_store, gpu_lock_dir=tmp_path)
    async with app.run_test(size=(150, 40)) as pilot:
        await settle(pilot)
        await pilot.press("7")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, PlotsScreen)
        screen.query_one("#plot-tabs").active = "plot-headline"
        await settle(pilot)
        legend = str(screen.query_one("#plot-headline-legend").render())
        # alpha submitted on reply 2, so at budget 1 it is known to have failed; without a GPU nothing
        # else about correctness is known, and an unknown rate draws no point.
        assert "alpha (agent)/none" in legend
        screen.query_one("#plots-task").value = "gemm_bf16_sm90a"
        await settle(pilot)
        legend = str(screen.query_one("#plot-headline-legend").render())
        assert "the paper's best (theirs: Claude Opus 4.8" in legend and "no model runs judged yet" in legend
