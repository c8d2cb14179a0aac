"""Metrics against hand-computed values, and `ptxbench report` / `ptxbench run` on the command line."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from llm_server import LoopbackLLM, expert_reply, mutation_reply
from ptxbench.tasks.spec import all_tasks
from ptxbench.cli.main import app
from ptxbench.db.metrics import compute_metrics, pass_at_k
from ptxbench.db.records import Evaluation, Measurement, Run, Sample
from ptxbench.db.seed import ensure_default_store
from ptxbench.db.writes import add_evaluation, add_sample, create_run, get_or_create_model

GEMM = "gemm_bf16_sm90a"


@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 1, 2 / 5),
    (5, 2, 2, 1 - 3 / 10),          # 1 - C(3,2)/C(5,2)
    (5, 2, 3, 1 - 1 / 10),          # 1 - C(3,3)/C(5,3)
    (5, 2, 4, 1.0),                 # n - c < k: every draw of 4 holds a success
    (10, 0, 5, 0.0),
    (10, 10, 1, 1.0),
    (200, 13, 10, 1 - math.comb(187, 10) / math.comb(200, 10)),
])
def test_pass_at_k_is_the_unbiased_estimator(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12)


def test_pass_at_k_refuses_impossible_counts() -> None:
    for bad in ((5, 6, 1), (5, 2, 6), (5, 2, 0)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)


@pytest.fixture
def hand_store(tmp_path: Path):
    """Four single-turn GEMM samples (brief) and one three-turn trajectory (full), with known columns."""
    path = tmp_path / "hand.sqlite"
    db = ensure_default_store(path)
    model = get_or_create_model(db, "hand-model", source="test")
    runs = {level: create_run(db, Run(model_id=model.id, name=f"hand {level}", context_level=level, source="test")).id
            for level in ("brief", "full")}

    def sample(level: str, turn: int = 1, parent: int | None = None, index: int = 0) -> int:
        return add_sample(db, Sample(task_id=GEMM, language="ptx", source="test", code=f"// {level} {index} {turn}",
                                     run_id=runs[level], sample_index=index, turn=turn, parent_id=parent)).id

    def judge(sid: int, category: str, heldout_speeds=(), **columns) -> None:
        ms = [Measurement(split="heldout", sizes={"M": 1}, category="ok", speedup=s) for s in heldout_speeds]
        add_evaluation(db, Evaluation(sample_id=sid, engine_version="t", status="judged", category=category,
                                      source="test", **columns), ms)

    good = dict(compiled=True, uses_ptx=True, uses_sass=True)
    judge(sample("brief", index=0), "ok", heldout_speeds=(1.1, 0.9), correct=True, correct_heldout=True,
          speedup=1.2, **good)
    judge(sample("brief", index=1), "slower_than_baseline", correct=True, correct_heldout=False, speedup=0.5, **good)
    judge(sample("brief", index=2), "wrong_result", correct=False, **good)
    judge(sample("brief", index=3), "syntax", compiled=False)
    t1 = sample("full")
    judge(t1, "syntax", compiled=False)
    t2 = sample("full", turn=2, parent=t1)
    judge(t2, "wrong_result", correct=False, **good)
    judge(sample("full", turn=3, parent=t2), "ok", correct=True, correct_heldout=True, speedup=1.6, **good)
    yield path, db
    db.conn.close()


def test_rates_by_context_and_split_match_hand_computed_values(hand_store) -> None:
    _, db = hand_store
    rows = {(r.context, r.split): r for r in compute_metrics(db, group_by=("context", "split"))}
    b = rows[("brief", "train")]
    assert (b.trajectories, b.samples) == (4, 4)
    assert b.compile_rate == pytest.approx(3 / 4)
    assert b.correct_rate == pytest.approx(2 / 4)        # the syntax error counts as not correct
    assert b.uses_rate == pytest.approx(3 / 4)
    assert b.correct_and_uses_rate == pytest.approx(2 / 4)
    assert b.fast == pytest.approx({0.0: 2 / 4, 1.0: 1 / 4, 1.5: 0.0})
    assert b.geomean_speedup == pytest.approx(math.sqrt(1.2 * 0.5))
    assert b.best_speedup == pytest.approx(1.2)
    assert b.pass_at[1] == pytest.approx(2 / 4)
    assert b.pass_at[5] is None                          # fewer than 5 samples
    h = rows[("brief", "heldout")]
    assert h.correct_rate == pytest.approx(1 / 4)
    assert h.fast[0.0] == pytest.approx(1 / 4)
    assert h.fast[1.0] == 0.0                            # held-out speed is the geometric mean: √(1.1·0.9) < 1
    assert h.best_speedup == pytest.approx(math.sqrt(1.1 * 0.9))
    f = rows[("full", "train")]
    assert (f.trajectories, f.samples, f.correct_rate, f.fast[1.5]) == (1, 3, 1.0, 1.0)


def test_turn_budgets_count_the_first_turns_only(hand_store) -> None:
    _, db = hand_store
    rows = compute_metrics(db, group_by=("context", "turns"), turn_budgets=(1, 2, 4), contexts=["full"])
    by_budget = {r.turn_budget: r for r in rows}
    assert [by_budget[t].samples for t in (1, 2, 4)] == [1, 2, 3]
    assert [by_budget[t].compile_rate for t in (1, 2, 4)] == [0.0, 1.0, 1.0]
    assert [by_budget[t].correct_rate for t in (1, 2, 4)] == [0.0, 0.0, 1.0]
    assert [by_budget[t].fast[1.5] for t in (1, 2, 4)] == [0.0, 0.0, 1.0]


def test_report_command_writes_table_json_and_csv(hand_store, tmp_path: Path) -> None:
    path, db = hand_store
    runner = CliRunner()
    out_json, out_csv = tmp_path / "m.json", tmp_path / "m.csv"
    result = runner.invoke(app, ["report", "--db", str(path), "--by", "context,split", "--json", str(out_json),
                                 "--csv", str(out_csv)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    for word in ("brief", "full", "train", "heldout", "75.0%", "50.0%", "1.200×", "pass@1"):
        assert word in result.output, word
    expected = [r.as_dict() for r in compute_metrics(db, group_by=("context", "split"))]
    assert json.loads(out_json.read_text()) == json.loads(json.dumps(expected))
    table = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert len(table) == 4 and table[0]["context"] == "brief" and float(table[0]["compile_rate"]) == 0.75
    result = runner.invoke(app, ["report", "--db", str(path), "--by", "context,turns", "--turn-budgets", "1,2",
                                 "--json", "-"])
    assert result.exit_code == 0 and {r["turn_budget"] for r in json.loads(result.stdout)} == {1, 2}


def test_report_usage_errors(hand_store, tmp_path: Path) -> None:
    path, _ = hand_store
    runner = CliRunner()
    result = runner.invoke(app, ["report", "--db", str(path), "--by", "colour"])
    assert result.exit_code == 2 and "cannot group by colour" in result.output
    result = runner.invoke(app, ["report", "--db", str(tmp_path / "none.sqlite")])
    assert result.exit_code == 2 and "no store at" in result.output


def test_run_and_report_from_the_command_line(tmp_path: Path) -> None:
    db = tmp_path / "cli.sqlite"
    recording = {"replies": {
        "vector_add_smoke": {"1": [{"content": mutation_reply("add-wrong-target")}],
                             "*": [{"content": expert_reply("vector_add_smoke")}]},
        "*": {"*": [{"content": "No kernel today."}]},
    }}
    runner = CliRunner()
    with LoopbackLLM(recording, tmp_path) as server:
        args = ["run", "--model", "loopback-cli", "--base-url", server.base_url, "--tasks", "all", "--arch", "sm_90a",
                "--context", "none,brief", "--turns", "2", "--backoff", "0.01", "--gpu", "off", "--db", str(db),
                "--create"]
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert "starting run 1" in result.output and "starting run 2" in result.output
        again = runner.invoke(app, args)
        assert again.exit_code == 0 and "resuming run 1" in again.output and "0 replies" in again.output
    result = runner.invoke(app, ["report", "--db", str(db), "--by", "context,split", "--json", "-"])
    rows = json.loads(result.stdout)
    assert {(r["context"], r["split"]) for r in rows} == {(c, s) for c in ("none", "brief") for s in ("train", "heldout")}
    train = next(r for r in rows if r["context"] == "none" and r["split"] == "train")
    hopper = sum(1 for t in all_tasks() if t.arch == "sm_90a")
    assert train["trajectories"] == hopper and train["compile_rate"] == pytest.approx(1 / hopper)
    refused = runner.invoke(app, ["run", "--model", "x", "--base-url", "http://127.0.0.1:9/v1", "--tasks", "nope",
                                  "--db", str(db)])
    assert refused.exit_code == 2 and "unknown task" in refused.output


def test_piped_or_narrow_output_is_markdown_with_whole_cells(hand_store) -> None:
    path, _ = hand_store
    runner = CliRunner()
    for columns in ("80", "250"):  # CliRunner's output is not a terminal, whatever its width
        result = runner.invoke(app, ["report", "--db", str(path), "--by", "task,model,context,split"],
                               env={"COLUMNS": columns})
        assert result.exit_code == 0, result.output
        assert "…" not in result.output
        assert f"| {GEMM} | hand-model | brief | train | 4 | 75.0% | 50.0% | 75.0% | 50.0% | 50.0% | 25.0% | 0.0% | 0.775× " \
               "| 1.200× | 50.0% | — | — |" in result.output
    out = runner.invoke(app, ["report", "--db", str(path), "--by", "context", "--markdown", "-"])
    assert out.exit_code == 0 and out.stdout.startswith("| context | split | n |")


def test_a_table_is_rich_only_where_it_fits_a_terminal() -> None:
    from ptxbench.cli.render import print_grid
    from ptxbench.cli.terminal import console

    headers = [("model", "left"), ("a long column title", "right")]
    rows = [["a-model-with-a-long-name-" * 5, "1.000×"]]  # 125 characters
    for width, rich in ((300, True), (80, False), (100, False)):  # 100: wider than 80, narrower than the table
        buffer = io.StringIO()
        print_grid(console(file=buffer, force_terminal=True, width=width), "t", headers, rows, ["note"])
        text = buffer.getvalue()
        assert "…" not in text and ("|---|" not in text) == rich, (width, text)
        assert rows[0][0] in text
    buffer = io.StringIO()
    print_grid(console(file=buffer, width=300), "t", headers, rows)  # not a terminal
    assert "| model | a long column title |" in buffer.getvalue()


def test_a_finished_run_keeps_its_turn_budget(tmp_path: Path) -> None:
    db = tmp_path / "budget.sqlite"
    recording = {"replies": {"*": {"*": [{"content": "No kernel today."}]}}}
    runner = CliRunner()
    with LoopbackLLM(recording, tmp_path) as server:
        base = ["run", "--model", "loopback-budget", "--base-url", server.base_url, "--tasks", "vector_add_smoke",
                "--backoff", "0.01", "--gpu", "off", "--db", str(db)]
        made = runner.invoke(app, [*base, "--turns", "8", "--create"])
        assert made.exit_code == 0, made.output
        again = runner.invoke(app, [*base, "--turns", "2"])
        assert again.exit_code == 2
        assert "was made with 8 turns" in again.output and "--run-name" in again.output
        resumed = runner.invoke(app, [*base, "--turns", "8"])
        assert resumed.exit_code == 0 and "resuming run 1" in resumed.output
        fresh = runner.invoke(app, [*base, "--turns", "2", "--run-name", "two turns"])
        assert fresh.exit_code == 0 and "starting run 2" in fresh.output
    store = ensure_default_store(db)
    params = dict(store.execute("SELECT id, params FROM runs").fetchall())
    store.conn.close()
    assert json.loads(params[1])["turns"] == 8 and json.loads(params[2])["turns"] == 2
    result = runner.invoke(app, ["report", "--headline", "--db", str(db), "--csv", "-"])
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    # Run 1's trajectory at 1, 4 and 8; run 2's only at 1: the turn-8 row is still run 1's alone.
    assert [(r["turn_budget"], r["trajectories"], r["budgets_as_run"]) for r in rows] == [
        ("1", "2", "2, 8"), ("4", "1", "8"), ("8", "1", "8")]
