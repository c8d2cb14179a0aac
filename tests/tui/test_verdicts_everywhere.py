"""Which evaluation speaks, and what counts as correct, the same in every view (issue 29, points 1 and 2).

The stores are the fixture store with rows added through the store's own write functions: a GPU
verdict recorded by an older engine and a static re-check by a newer one; kernels correct on the
train sizes and wrong at a held-out size; a kernel judged by the static stages only. The agent
episode is a real agent run against the loopback chat-completions server, judged here without a GPU.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from conftest import SIZE, open_view, settle
from rich.text import Text

from ptxbench.db import verdict
from ptxbench.db.records import Evaluation, Measurement, Sample
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_evaluation, add_sample, get_or_create_model
from ptxbench.engine import ENGINE_VERSION
from ptxbench.tui.messages import ShowSample
from ptxbench.tui.screens.compare import CompareScreen
from ptxbench.tui.screens.live import LiveScreen
from ptxbench.tui.screens.overview import OverviewScreen
from ptxbench.tui.screens.sample import SampleScreen
from ptxbench.tui.screens.samples import SamplesScreen
from ptxbench.tui.widgets.row_table import RowTable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llm_server import LoopbackLLM, expert_arguments

WIDE = (170, 48)
SEED_VERSION = "0.5.0"  # the engine that recorded the shipped GPU verdicts


def table_row(table: RowTable, index: int) -> dict[str, str]:
    return {label: cell.strip() for label, cell in zip(table.labels, table.get_row_at(index))}


def evaluation_count(store: Path) -> int:
    conn = sqlite3.connect(store)
    try:
        return conn.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
    finally:
        conn.close()


# -- 1. a complete judgement is never outshone by a partial one ---------------------------------


@pytest.fixture
def rechecked(store: Path, ids) -> tuple[Path, int, int]:
    """The GEMM expert: judged on the GPU by an older engine, then re-checked here (no GPU) by this one."""
    assert tuple(map(int, ENGINE_VERSION.split("."))) > tuple(map(int, SEED_VERSION.split(".")))
    db = open_store(store)
    try:
        gpu = add_evaluation(db, Evaluation(
            sample_id=ids.wgmma_ok, engine_version=SEED_VERSION, status="judged", category="ok",
            source="fixture: recorded on the GPU", device="fixture device", compiled=True, correct=True,
            correct_heldout=True, uses_ptx=True, uses_sass=True, speedup=1.02, time_ms=1.15),
            [Measurement(split="train", sizes={"N": 1}, category="ok", speedup=1.02)]).id
        static = add_evaluation(db, Evaluation(
            sample_id=ids.wgmma_ok, engine_version=ENGINE_VERSION, status="skipped: no sm_90a device",
            category="ok", source="ptxbench eval", compiled=True, uses_ptx=True, uses_sass=True)).id
    finally:
        db.conn.close()
    return store, gpu, static


async def test_a_newer_engines_static_recheck_never_hides_the_gpu_verdict(app_for, rechecked, ids):
    _, gpu, static = rechecked
    app = app_for()
    async with app.run_test(size=WIDE) as pilot:
        samples = await open_view(pilot, "3", SamplesScreen)
        table = samples.query_one(RowTable)
        row = table_row(table, next(i for i, r in enumerate(samples.rows) if r.id == ids.wgmma_ok))
        # The GPU verdict and its timing speak, and the view says an older engine made them.
        assert row["Category"] == "ok · older engine" and row["Speedup"] == "1.020×"
        assert "older engine: an older engine's GPU verdict" in str(samples.query_one("#samples-legend").render())
        overview = await open_view(pilot, "1", OverviewScreen)
        expert = next(r for r in overview.rows if r.model == "expert" and r.task_id == "gemm_bf16_sm90a")
        assert expert.judged == 1 and expert.correct == 1.0 and expert.best_speedup == 1.02
        app.post_message(ShowSample(ids.wgmma_ok))
        await settle(pilot)
        sample = app.screen
        assert isinstance(sample, SampleScreen) and sample.detail.latest.id == gpu
        assert static in [e.id for e in sample.detail.evaluations]  # the re-check stays in the history


def test_the_newest_engine_speaks_among_complete_judgements_by_version_not_by_text():
    assert verdict.version_key("0.10.0") > verdict.version_key("0.9.3") > verdict.version_key("0.9")
    assert verdict.version_key("fixture") == (0, 0, 0) == verdict.version_key(None)
    conn = sqlite3.connect(":memory:")
    for version in ("0.10.0", "0.9.3", "0.9", "1.2.3rc1", "fixture", "7"):
        sql = conn.execute(f"SELECT {verdict.version_key_sql('v')} FROM (SELECT ? AS v)", [version]).fetchone()[0]
        major, minor, patch = verdict.version_key(version)
        assert sql == (major * 1_000_000 + minor) * 1_000_000 + patch, version


async def test_reverify_without_a_gpu_says_first_that_it_adds_a_static_judgement_only(app_for, store, ids):
    before = evaluation_count(store)
    app = app_for()
    async with app.run_test(size=WIDE) as pilot:
        samples = await open_view(pilot, "3", SamplesScreen)
        samples.query_one(RowTable).move_cursor(row=next(i for i, r in enumerate(samples.rows) if r.id == ids.wgmma_ok))
        await pilot.press("r")
        await settle(pilot)
        dialog = app.screen
        assert type(dialog).__name__ == "ConfirmDialog", dialog
        assert "adds a static judgement only" in dialog.question and "nothing is run or timed" in dialog.question
        await pilot.press("escape")  # no: nothing starts, nothing is written
        await settle(pilot)
        assert evaluation_count(store) == before
        live = app.get_screen("live")
        assert isinstance(live, LiveScreen) and not live.running and live.last_exit is None
        # R: the count first, then what a run here adds.
        await open_view(pilot, "3", SamplesScreen)
        samples.query_one("#filter-model").value = "fixture-model-b"
        await settle(pilot)
        await pilot.press("R")
        await settle(pilot)
        await pilot.press("enter")  # "Start 2"
        await settle(pilot)
        assert "these 2 samples here adds a static judgement only" in app.screen.question
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, LiveScreen) and len(app.screen.results) == 2


# -- 2. one definition of correct: train and held-out apart, never-run never ok -------------------


@pytest.fixture
def heldout_fast(store: Path) -> Path:
    """fixture-model-c on vector add: a fast kernel wrong at a held-out size, a slower one correct at
    every size, and one judged by the static stages only. fixture-model-d: only the fast held-out failure."""
    db = open_store(store)
    try:
        code = "// fixture: {what}\n.version 8.0\n.target sm_90a\n"
        for model, kinds in (("fixture-model-c", ("heldout", "passes", "static")), ("fixture-model-d", ("heldout",))):
            mid = get_or_create_model(db, model, kind="import", source="fixture: held-out").id
            for kind in kinds:
                sid = add_sample(db, Sample(task_id="vector_add_smoke", language="ptx", source="fixture: held-out",
                                            code=code.format(what=f"{model} {kind}"), model_id=mid)).id
                if kind == "static":
                    add_evaluation(db, Evaluation(sample_id=sid, engine_version=ENGINE_VERSION, status="static",
                                                  category="ok", source="fixture: static", compiled=True,
                                                  uses_ptx=True))
                    continue
                fails = kind == "heldout"
                speed = 1.3 if fails else 0.9
                add_evaluation(db, Evaluation(
                    sample_id=sid, engine_version="fixture", status="judged", category="ok", source="fixture",
                    compiled=True, correct=True, correct_heldout=not fails, uses_ptx=True, uses_sass=True,
                    speedup=speed, time_ms=0.1),
                    [Measurement(split="train", sizes={"N": 1 << 24}, category="ok", speedup=speed),
                     Measurement(split="heldout", sizes={"N": (1 << 24) + 3},
                                 category="unwritten_output" if fails else "ok", speedup=speed)])
    finally:
        db.conn.close()
    return store


async def test_the_overview_reports_train_and_heldout_apart(app_for, heldout_fast):
    app = app_for()
    async with app.run_test(size=WIDE) as pilot:
        overview = await open_view(pilot, "1", OverviewScreen)
        table = overview.query_one(RowTable)
        index = next(i for i, r in enumerate(overview.rows) if r.model == "fixture-model-d")
        row = table_row(table, index)
        # Fast on the train sizes, wrong at a held-out one: counted as wrong there, beside the train rate.
        assert (row["Correct"], row["fast₁.₀"]) == ("100.0%", "100.0%")
        assert (row["Correct h-o"], row["fast₁.₀ h-o"]) == ("0.0%", "0.0%")
        c = overview.rows[next(i for i, r in enumerate(overview.rows) if r.model == "fixture-model-c")]
        assert (c.samples, c.judged, c.correct, c.correct_heldout) == (3, 2, 1.0, 0.5)  # the static one is unknown
        await pilot.press("t")
        for _ in range(200):  # the per-trajectory metrics are computed in a worker
            await settle(pilot)
            if overview.metrics_rows is not None:
                break
        table = overview.query_one(RowTable)
        index = next(i for i, r in enumerate(overview.rows) if r.model == "fixture-model-d")
        row = table_row(table, index)
        assert (row["pass@1"], row["pass@1 h-o"]) == ("100.0%", "0.0%")
        assert (row["fast₁.₀"], row["fast₁.₀ h-o"]) == ("100.0%", "0.0%")


async def test_compare_never_takes_a_heldout_failure_for_a_models_best(app_for, heldout_fast):
    app = app_for()
    async with app.run_test(size=WIDE) as pilot:
        compare = await open_view(pilot, "5", CompareScreen)
        compare.query_one("#compare-task").value = "vector_add_smoke"
        await settle(pilot)
        table = compare.query_one("#compare-table")
        columns = [m.model for m in compare.ordered()]
        rows = {str(table.get_row_at(i)[0]): table.get_row_at(i) for i in range(table.row_count)}
        raw = lambda metric, model: rows[metric][1 + columns.index(model)]
        cell = lambda metric, model: str(raw(metric, model)).strip()
        # c's best is the slower kernel that is correct everywhere, not the faster held-out failure.
        assert cell("Speedup", "fixture-model-c").startswith("0.900×")
        assert cell("Verdict", "fixture-model-c") == "ok"
        # Rates over what is known: the static-only kernel is neither correct nor wrong.
        assert cell("Correct", "fixture-model-c").startswith("100.0%")
        assert cell("Correct h-o", "fixture-model-c").startswith("50.0%")
        # d has only the held-out failure: shown as one, and its speed is not called better than the baseline's.
        assert cell("Verdict", "fixture-model-d").startswith("ok · held-out")
        assert cell("Speedup", "fixture-model-d").startswith("1.300×") and not _coloured(raw("Speedup", "fixture-model-d"))
        assert _coloured(raw("Speedup", "fixture-model-c"))  # between kernels correct everywhere: better or worse
        by_model = {m.model: m for m in compare.models}
        assert by_model["fixture-model-c"].passes and not by_model["fixture-model-d"].passes


def _coloured(cell) -> bool:
    return isinstance(cell, Text) and any(str(span.style) in ("green", "red") for span in cell.spans)


@pytest.fixture
def agent_ran(store: Path, tmp_path: Path) -> Path:
    """A real agent run that submits the vector-add expert kernel, judged here: no GPU, so it never runs."""
    from ptxbench.models.agent import AgentBudget, AgentConfig, run_agent

    db = open_store(store)
    try:
        call = {"name": "submit", "arguments": json.dumps(expert_arguments("vector_add_smoke"))}
        with LoopbackLLM({"replies": {"vector_add_smoke": {"1": [{"tool_calls": [call]}]}}}, tmp_path) as server:
            run_agent(db, AgentConfig(model="alpha", base_url=server.base_url, tasks=("vector_add_smoke",),
                                      budget=AgentBudget(), backoff_s=0.01, timeout_s=20))
    finally:
        db.conn.close()
    return store


async def test_agent_episodes_never_list_a_kernel_that_never_ran_as_ok(agent_ran, tmp_path):
    from ptxbench.tui.app import make_app
    from ptxbench.tui.screens.agents import AgentEpisodesScreen

    app = make_app(agent_ran, gpu_lock_dir=tmp_path, theme="ptxbench")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("A")
        await settle(pilot)
        episodes = app.screen
        assert isinstance(episodes, AgentEpisodesScreen) and len(episodes.rows) == 1
        row = episodes.rows[0]
        assert row.category == "ok"  # what the static stages said; it never ran here
        shown = [str(c) for c in episodes.query_one("#agents-table").get_row_at(0)]
        assert "ok · not run" in shown and "ok" not in shown


def test_the_views_and_the_metrics_read_one_definition(heldout_fast):
    """Every sample's facts as the views count them (SQL) and as `ptxbench report` does (Python)."""
    from ptxbench.db import browse
    from ptxbench.db.metrics import geometric_mean

    conn = browse.connect(heldout_fast, cached=False)
    try:
        facts = ", ".join((verdict.correct_sql("train"), verdict.correct_sql("heldout"), verdict.uses_sql(),
                           verdict.fast_sql("train", 1.0), verdict.fast_sql("heldout", 1.0)))
        rows = conn.execute(
            f"SELECT e.id, e.category, e.correct, e.correct_heldout, e.uses_ptx, e.uses_sass, e.speedup, {facts} "
            f"FROM samples s{browse.shown_join(conn)} WHERE e.id IS NOT NULL").fetchall()
        heldout: dict[int, list[float]] = {}
        for eid, speed in conn.execute("SELECT evaluation_id, speedup FROM measurements WHERE split = 'heldout'"):
            heldout.setdefault(eid, []).append(speed)
    finally:
        conn.close()
    tri = lambda v: None if v is None else bool(v)
    for eid, category, correct, correct_ho, uses_ptx, uses_sass, speedup, *sql in rows:
        train, held = verdict.fact(correct, category, "correct"), verdict.fact(correct_ho, category, "correct")
        uses = verdict.uses(verdict.fact(uses_ptx, category, "uses"), verdict.fact(uses_sass, category, "uses"))
        python = [train, held, uses, verdict.fast(train, uses, speedup if speedup and speedup > 0 else None, 1.0),
                  verdict.fast(held, uses, geometric_mean(heldout.get(eid, ())), 1.0)]
        assert [tri(v) for v in sql] == python, eid
