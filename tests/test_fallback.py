"""The generic-fallback finding against hand-counted shares and speeds on a small store (real SQLite,
written through db/writes.py), and `ptxbench report --fallback` as a table, JSON and CSV."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.cli.main import app
from ptxbench.db.fallback import ALL_TASKS, SCHEMA, fallback
from ptxbench.db.records import Evaluation, Run, Sample
from ptxbench.db.seed import ensure_default_store
from ptxbench.db.writes import add_evaluation, add_sample, create_run, get_or_create_model

GEMM, ATTN = "gemm_bf16_sm90a", "attn_fwd_sm90a"
H200 = "NVIDIA H200"
RIGHT = dict(compiled=True, correct=True, correct_heldout=True)
FAMILIES = dict(RIGHT, uses_ptx=True, uses_sass=True)
GENERIC = dict(RIGHT, uses_ptx=False, uses_sass=False)


@pytest.fixture
def store(tmp_path: Path):
    db = ensure_default_store(tmp_path / "f.sqlite")
    model = get_or_create_model(db, "m", source="test")
    runs = {level: create_run(db, Run(model_id=model.id, name=level, context_level=level, source="test"))
            for level in ("brief", "full")}
    n = 0

    def kernel(task: str, category: str, level: str = "brief", device: str = H200, **columns) -> None:
        nonlocal n
        n += 1
        sid = add_sample(db, Sample(task_id=task, language="ptx", source="test", code=f"// {n}",
                                    run_id=runs[level].id, sample_index=n)).id
        add_evaluation(db, Evaluation(sample_id=sid, engine_version="t", status="judged", category=category,
                                      source="test", device=device, **columns))

    kernel(GEMM, "ok", **FAMILIES, speedup=1.2)
    kernel(GEMM, "required_missing_ptx", **GENERIC, speedup=1.5, evidence={"generic_target": "sm_80"})
    kernel(GEMM, "required_missing_sass", **GENERIC, speedup=0.6)  # the task's target, no wgmma in it
    kernel(GEMM, "ok", **{**FAMILIES, "correct_heldout": False}, speedup=2.0)  # wrong at a held-out size
    kernel(GEMM, "wrong_result", compiled=True, correct=False, uses_ptx=True, uses_sass=True)
    kernel(GEMM, "syntax", device="cpu (static stages only)", compiled=False)
    kernel(GEMM, "ok", **FAMILIES)  # correct, never timed
    kernel(ATTN, "required_missing_ptx", **GENERIC, speedup=0.5, evidence={"generic_target": "sm_89"})
    kernel(ATTN, "ok", **RIGHT)  # whether it uses the families is not known
    kernel(GEMM, "ok", "full", **FAMILIES, speedup=1.1)
    yield db
    db.conn.close()


def test_shares_and_speeds_by_hand(store) -> None:
    rows = {(r.task, r.context): r for r in fallback(store)}
    assert set(rows) == {(GEMM, "brief"), (ATTN, "brief"), (ALL_TASKS, "brief"), (GEMM, "full")}  # one task: no *
    g = rows[(GEMM, "brief")]
    assert (g.model, g.device, g.arch) == ("m", H200, "sm_90a")
    # 7 kernels (the syntax error, judged without a GPU, counted in its task's row); 4 correct at both splits.
    assert (g.kernels, g.correct, g.families, g.generic, g.earlier_target, g.unknown) == (7, 4, 2, 2, 1, 0)
    assert (g.families_share, g.generic_share, g.earlier_target_share) == (0.5, 0.5, 0.25)
    assert g.families_geomean == pytest.approx(1.2) and g.families_timed == 1
    assert g.generic_geomean == pytest.approx(math.sqrt(1.5 * 0.6)) and g.generic_timed == 2
    assert g.targets == {"sm_80": 1}
    a = rows[(ATTN, "brief")]
    assert (a.kernels, a.correct, a.families, a.generic, a.earlier_target, a.unknown) == (2, 2, 0, 1, 1, 1)
    assert (a.families_share, a.generic_share, a.earlier_target_share) == (0.0, 1.0, 1.0)
    assert a.families_geomean is None and a.generic_geomean == pytest.approx(0.5)
    pooled = rows[(ALL_TASKS, "brief")]
    assert (pooled.kernels, pooled.correct, pooled.families, pooled.generic, pooled.unknown) == (9, 6, 2, 3, 1)
    assert (pooled.families_share, pooled.generic_share, pooled.earlier_target_share) == pytest.approx((0.4, 0.6, 0.4))
    assert pooled.generic_geomean == pytest.approx((1.5 * 0.6 * 0.5) ** (1 / 3))
    assert pooled.targets == {"sm_80": 1, "sm_89": 1}
    full = rows[(GEMM, "full")]
    assert (full.correct, full.families_share, full.families_geomean) == (1, 1.0, 1.1)


def test_reference_rows_only_when_asked(store) -> None:
    assert {r.model for r in fallback(store)} == {"m"}
    shown = {r.model for r in fallback(store, include_reference=True)}
    assert {"m", "expert", "mutation"} <= shown


def test_report_fallback_table_json_and_csv(store, tmp_path: Path) -> None:
    runner = CliRunner()
    path = tmp_path / "f.sqlite"
    out = runner.invoke(app, ["report", "--fallback", "--db", str(path), "--json", "-"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["schema"] == SCHEMA == "ptxbench.fallback/1"
    first = data["rows"][0]
    assert (first["task"], first["generic_share"], first["targets"]) == (ATTN, 1.0, {"sm_89": 1})
    out = runner.invoke(app, ["report", "--fallback", "--db", str(path), "--csv", "-", "--context", "brief"])
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [(r["task"], r["families_share"], r["generic_share"], r["targets"]) for r in rows] == [
        (ATTN, "0.0", "1.0", "sm_89 ×1"), (GEMM, "0.5", "0.5", "sm_80 ×1"), (ALL_TASKS, "0.4", "0.6", "sm_80 ×1, sm_89 ×1")]
    # Not a terminal: Markdown, every cell whole.
    out = runner.invoke(app, ["report", "--fallback", "--db", str(path)], env={"COLUMNS": "80"})
    assert out.exit_code == 0 and "…" not in out.stdout
    assert f"| m | {H200} | sm_90a | {GEMM} | brief | 7 | 4 | 50.0% | 50.0% | 25.0% | 0 | 1.200× | 0.949× | 1 / 2 | sm_80 ×1 |" \
        in out.stdout
    refused = runner.invoke(app, ["report", "--fallback", "--headline", "--db", str(path)])
    assert refused.exit_code == 2 and "two reports" in refused.output
