"""The round trip: `ptxbench export samples` of a store with known numbers, `ptxbench import` of that file into
a new store, and the same `ptxbench report` numbers from both (the plain table, turn budgets, the headline and
the fallback finding)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.cli.main import app
from ptxbench.db.records import Evaluation, Label, Measurement, Run, Sample
from ptxbench.db.seed import ensure_default_store
from ptxbench.db.writes import add_evaluation, add_label, add_sample, create_run, get_or_create_model

GEMM, ATTN = "gemm_bf16_sm90a", "attn_fwd_sm90a"
H200 = dict(device="NVIDIA H200", driver="580.159.04")
GOOD = dict(compiled=True, uses_ptx=True, uses_sass=True)


def _measured(speeds: dict[str, tuple[float, ...]]) -> list[Measurement]:
    return [Measurement(split=split, sizes={"M": 2048 * (i + 1)}, category="ok", speedup=s, time_ms=1.0 / s)
            for split, values in speeds.items() for i, s in enumerate(values)]


@pytest.fixture
def known_store(tmp_path: Path) -> Path:
    """Two models, two context levels, single samples and an 8-turn trajectory, GPU verdicts with per-size
    measurements, a newer static re-check that must not speak over a GPU verdict, a fallback kernel (correct,
    no requested family) and a label."""
    path = tmp_path / "known.sqlite"
    db = ensure_default_store(path)
    runs = {}
    for model_name in ("model-a", "model-b"):
        model = get_or_create_model(db, model_name, source="test")
        for level in ("brief", "full"):
            runs[(model_name, level)] = create_run(db, Run(
                model_id=model.id, name=f"{model_name} {level}", context_level=level, source="test",
                params={"turns": 8 if level == "full" else 1, "temperature": 0.6}, started_at="2026-12-01T00:00:00+00:00",
                finished_at="2026-12-01T01:00:00+00:00")).id

    def sample(key, task=GEMM, turn=1, parent=None, index=0) -> int:
        return add_sample(db, Sample(task_id=task, language="ptx", source="test", code=f"// {key} {task} {index} {turn}",
                                     run_id=runs[key], sample_index=index, turn=turn, parent_id=parent,
                                     tokens_in=100 * turn, tokens_out=1000 + turn)).id

    def judge(sid, category, speeds=None, engine="0.7.1", status="judged", **columns) -> None:
        add_evaluation(db, Evaluation(sample_id=sid, engine_version=engine, status=status, category=category,
                                      source="test", **({} if status != "judged" else H200), **columns),
                       _measured(speeds or {}))

    a_brief = ("model-a", "brief")
    judge(s := sample(a_brief, index=0), "ok", {"train": (1.2, 1.1), "heldout": (0.9, 1.3)}, correct=True,
          correct_heldout=True, speedup=1.2, executed=True, sol_fraction=0.71, **GOOD)
    judge(s, "ok", engine="0.9.0", status="static", compiled=True, uses_ptx=True)     # newer, partial: never speaks
    judge(sample(a_brief, index=1), "slower_than_baseline", {"train": (0.5,)}, correct=True, correct_heldout=False,
          speedup=0.5, **GOOD)
    judge(sample(a_brief, index=2), "wrong_result", correct=False, **GOOD)
    judge(sample(a_brief, index=3), "syntax", compiled=False)
    judge(fallback := sample(a_brief, task=ATTN), "required_missing_sass", {"train": (0.4,)}, compiled=True,
          correct=True, correct_heldout=True, uses_ptx=False, uses_sass=False, speedup=0.4)
    add_label(db, Label(sample_id=fallback, author="reviewer", category="wrong_result", note="falls back to mma.sync"))
    parent = None
    for turn, (category, cols) in enumerate([("syntax", dict(compiled=False)),
                                             ("wrong_result", dict(correct=False, **GOOD)),
                                             ("hang_timeout", dict(compiled=True)),
                                             ("ok", dict(correct=True, correct_heldout=True, speedup=0.97, **GOOD)),
                                             ("ok", dict(correct=True, correct_heldout=True, speedup=1.05, **GOOD))],
                                            start=1):
        parent = sample(("model-a", "full"), turn=turn, parent=parent)
        judge(parent, category, {"train": (cols["speedup"],)} if "speedup" in cols else None, **cols)
    judge(sample(("model-b", "brief")), "ok", {"train": (0.8,), "heldout": (0.7,)}, correct=True,
          correct_heldout=True, speedup=0.8, **GOOD)
    sample(("model-b", "full"))                                  # never judged: left out on both sides
    db.conn.close()
    return path


REPORTS = (
    ("--by", "task,model,arch,context,split"),
    ("--by", "model,context,turns", "--turn-budgets", "1,2,4,8"),
    ("--headline",),
    ("--fallback",),
)


def _reports(runner: CliRunner, store: Path) -> list:
    out = []
    for args in REPORTS:
        done = runner.invoke(app, ["report", "--db", str(store), *args, "--json", "-"], env={"COLUMNS": "250"})
        assert done.exit_code == 0, (args, done.output)
        out.append(json.loads(done.stdout))
    return out


def test_export_then_import_gives_the_same_report(known_store: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    exported = tmp_path / "samples.jsonl"
    done = runner.invoke(app, ["export", "samples", "--out", str(exported), "--db", str(known_store)])
    assert done.exit_code == 0, done.output
    target = tmp_path / "again.sqlite"
    done = runner.invoke(app, ["import", str(exported), "--db", str(target), "--create", "--gpu", "off", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["imported"], report["judged"], report["recorded"]) == (12, 0, 12)
    assert {s["reason"].split(" (")[0] for s in report["skipped_lines"]} == {"a seeded sample"}
    before, after = _reports(runner, known_store), _reports(runner, target)
    assert before == after
    rows = {(r["model"], r["context"], r["split"]): r for r in before[0] if r["task"] == GEMM}
    a = rows[("model-a", "brief", "train")]
    assert (a["trajectories"], a["correct_rate"], a["best_speedup"]) == (4, 0.5, 1.2)     # the known numbers
    # importing the same export again changes nothing
    done = runner.invoke(app, ["import", str(exported), "--db", str(target), "--gpu", "off", "--json"])
    assert done.exit_code == 0 and json.loads(done.stdout)["imported"] == 0
    assert _reports(runner, target) == before
