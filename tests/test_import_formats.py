"""Other projects' formats imported and judged by the static stages: the paper's runs, a KernelBench run
folder and a FlashInfer-Bench trace set (tests/data/import/, each file after its project's schema)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.cli.main import app
from ptxbench.db.generation import run_samples
from ptxbench.db.queries import get_model, get_run, latest_evaluation
from ptxbench.db.seed import ensure_default_store
from ptxbench.models.importer import import_file
from ptxbench.models.interop import Options

DATA = Path(__file__).resolve().parent / "data" / "import"


@pytest.fixture
def store(tmp_path: Path):
    db = ensure_default_store(tmp_path / "store.sqlite")
    yield db
    db.conn.close()


def _samples(db, report, key: str):
    return sorted(run_samples(db, report.runs[key]), key=lambda s: (s.sample_index, s.turn))


def test_the_papers_runs_are_split_from_their_tvm_ffi_wrappers_and_judged(store) -> None:
    report = import_file(store, DATA / "paper" / "experiments.csv")
    assert report.format == "paper"
    assert (report.lines, report.imported, report.judged) == (4, 4, 4)
    assert report.categories == {"required_missing_ptx": 1, "ok": 2, "no_candidate": 1}
    (refused,) = report.skipped_lines
    assert refused["where"] == "experiments.csv row 3" and "'gemm_n4096_k4096'" in refused["reason"]
    run = get_run(store, report.runs["Claude Opus 4.8 / opus48-h100-gemm"])
    assert run.context_level == "full" and run.params["definition"] == "gemm_n7168_k5120"
    assert run.params["turns"] == 3                      # the trajectory's step limit
    assert get_model(store, "Claude Opus 4.8").kind == "import"
    first, second, third, other = _samples(store, report, "Claude Opus 4.8 / opus48-h100-gemm")
    assert [(s.sample_index, s.turn) for s in (first, second, third, other)] == [(0, 1), (0, 2), (0, 3), (1, 1)]
    assert second.parent_id == first.id and third.parent_id == second.id
    # turn 1: the launch read from run(): grid, block and arguments over the task's sizes
    (launch,) = first.manifest["launches"]
    assert launch["entry"] == "gemm_tn_tiled" and launch["block"] == [16, 16]
    assert launch["args"] == ["A", "B", "C", "i32:M", "i32:N", "i32:K"]
    assert "tvm" not in first.code and 'extern "C" __global__ void gemm_tn_tiled' in first.code
    assert first.response.startswith("A correct baseline") and first.tokens_out == 2310
    assert latest_evaluation(store, first.id).category == "required_missing_ptx"   # no wgmma, TMA, mbarrier
    # turn 2: the tensor maps its helper encodes with cuTensorMapEncodeTiled are read too: the expert's manifest
    expert = json.loads((DATA / "paper" / "manifests" / "gemm_tma.json").read_text())
    assert second.manifest["launches"] == [{"entry": "gemm_bf16_tn_tma", "grid": ["num_sms"], "block": [384],
                                            "shared_bytes": 231424, "args": ["tmap:tm_a", "tmap:tm_b", "tmap:tm_c",
                                                                             "i32:M", "i32:N", "i32:K"]}]
    assert list(second.manifest["tensor_maps"].values()) == list(expert["tensor_maps"].values())
    assert latest_evaluation(store, second.id).category == "ok"
    assert latest_evaluation(store, third.id).category == "no_candidate"
    # the other attempt launches through cudaLaunchKernelEx: the CSV's manifest states its launch
    assert other.manifest == expert and latest_evaluation(store, other.id).category == "ok"
    kept = run.params["metadata"]
    assert "cudaLaunchKernelEx" in kept[str(other.id)]["launch"]
    assert kept[str(first.id)]["their_verdict"]["speedups"] == [0.041]          # their verdict: metadata only


def test_without_a_stated_manifest_a_launch_not_read_is_stored_and_said_not_judged(store, tmp_path) -> None:
    folder = tmp_path / "paper"
    shutil.copytree(DATA / "paper", folder)
    table = (folder / "experiments.csv").read_text().replace(",manifests/gemm_tma.json", ",")
    (folder / "experiments.csv").write_text(table)
    report = import_file(store, folder / "experiments.csv")
    assert report.imported == 4 and report.judged == 3
    (unjudged,) = report.not_judged
    assert unjudged["where"] == "opus48-h100-gemm/trajectories/exp_001.json turn 1"
    assert "a launch through cudaLaunchKernelEx" in unjudged["reason"] and "manifest column" in unjudged["reason"]
    assert latest_evaluation(store, unjudged["sample_id"]) is None
    again = import_file(store, folder / "experiments.csv")      # stays unjudged, and is said again
    assert (again.imported, again.already_stored, again.judged) == (0, 4, 0)
    assert [n["sample_id"] for n in again.not_judged] == [unjudged["sample_id"]]


def test_a_kernelbench_run_maps_its_problems_and_refuses_the_rest_by_name(store) -> None:
    report = import_file(store, DATA / "kernelbench" / "h100_bf16_demo", options=Options(model="demo-model"))
    assert report.format == "kernelbench"
    assert (report.imported, report.judged, report.categories) == (1, 1, {"required_missing_ptx": 1})
    reasons = {s["where"]: s["reason"] for s in report.skipped_lines}
    assert "level 1 problem 1: no PTXBench task computes it" in reasons["level_1_problem_1_sample_0_kernel.py"]
    assert "reads X as f32; softmax_bf16_sm90a's X is bf16" in reasons["level_1_problem_23_sample_0_kernel.py"]
    (gemm,) = _samples(store, report, "demo-model / h100_bf16_demo")
    assert gemm.task_id == "gemm_bf16_sm90a" and gemm.response.startswith("import torch")
    (launch,) = gemm.manifest["launches"]
    assert launch["grid"] == ["(((N + 16) - 1) // 16)", "(((M + 16) - 1) // 16)"] and launch["block"] == [16, 16]
    assert launch["args"] == ["A", "B", "C", "i32:M", "i32:N", "i32:K"]       # the returned tensor is C
    meta = get_run(store, gemm.run_id).params["metadata"][str(gemm.id)]
    assert meta["their_verdict"] == {"compiled": True, "correctness": True, "runtime": 41.7,
                                     "hardware": "NVIDIA H100 80GB HBM3", "device": "cuda:0"}


def test_a_flashinfer_trace_set_imports_its_cuda_solutions_with_their_traces(store) -> None:
    report = import_file(store, DATA / "flashinfer" / "trace_set")
    assert report.format == "flashinfer"
    assert (report.imported, report.judged, report.categories) == (1, 1, {"required_missing_ptx": 1})
    reasons = " | ".join(s["reason"] for s in report.skipped_lines)
    assert "a triton-language solution" in reasons and "definition 'rmsnorm_h4096'" in reasons
    (sample,) = _samples(store, report, "claude-opus-4.8 / flashinfer:trace_set")
    assert sample.manifest["launches"][0]["grid"] == ["(N // 16)", "(M // 16)"]
    assert "#include \"kernel.h\"" not in sample.code and "constexpr int kTile = 16;" in sample.code
    assert json.loads(sample.response)["name"] == "opus48_gemm_tiled_v1"
    traces = get_run(store, sample.run_id).params["metadata"][str(sample.id)]["their_traces"]
    assert [t["speedup"] for t in traces] == [0.044, 0.047]


def test_one_solution_file_and_the_cli(tmp_path: Path) -> None:
    db = tmp_path / "cli.sqlite"
    runner = CliRunner()
    solution = DATA / "flashinfer" / "trace_set" / "solutions" / "gemm_n7168_k5120" / "opus48_gemm_tiled_v1.json"
    done = runner.invoke(app, ["import", str(solution), "--db", str(db), "--create", "--gpu", "off",
                               "--model", "someone", "--context", "brief"])
    assert done.exit_code == 0, done.output
    assert "(flashinfer): 1 imported, 0 already stored, 1 judged" in done.output
    done = runner.invoke(app, ["import", str(DATA / "kernelbench" / "h100_bf16_demo"), "--db", str(db), "--gpu", "off",
                               "--json"])
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    assert out["schema"] == "ptxbench.import/1" and out["format"] == "kernelbench"
    assert {s["where"] for s in out["skipped_lines"]} == {"level_1_problem_1_sample_0_kernel.py",
                                                          "level_1_problem_23_sample_0_kernel.py"}
    assert "no model named" in out["notes"][0]
    done = runner.invoke(app, ["import", str(DATA / "paper" / "experiments.csv"), "--db", str(db), "--gpu", "off",
                               "--map", "gemm_n4096_k4096=gemm_bf16_sm90a", "--no-judge"])
    assert done.exit_code == 0, done.output
    assert "exp_dir '/home/ubuntu/AccRL-exps/eval_runs/opus48-h100-gemm-4096': no such folder" in done.output
    done = runner.invoke(app, ["import", str(DATA / "paper" / "experiments.csv"), "--db", str(db), "--map", "x=nope"])
    assert done.exit_code == 2 and "no task 'nope'" in done.output


def test_folder_imports_read_inside_their_folder_never_a_database_and_within_a_budget(store, tmp_path) -> None:
    import sqlite3

    from ptxbench.models.interop import read_bytes

    folder = tmp_path / "paper"
    shutil.copytree(DATA / "paper", folder)
    trajectories = folder / "opus48-h100-gemm" / "trajectories"
    outside = tmp_path / "outside.json"
    outside.write_text((trajectories / "exp_001.json").read_text())
    (trajectories / "exp_002.json").symlink_to(outside)
    sqlite3.connect(trajectories / "exp_003.json").execute("CREATE TABLE t (x)").connection.close()
    report = import_file(store, folder / "experiments.csv", judge=False)
    reasons = {s["where"]: s["reason"] for s in report.skipped_lines}
    assert "points outside" in reasons["opus48-h100-gemm/trajectories/exp_002.json"]
    assert "not read: it is an SQLite database" in reasons["opus48-h100-gemm/trajectories/exp_003.json"]
    assert report.imported == 4
    budget = [100]
    assert len(read_bytes(folder, "experiments.csv", budget=[10_000])) < 10_000
    with pytest.raises(ValueError, match="has read its"):
        read_bytes(folder, "experiments.csv", budget=budget)
