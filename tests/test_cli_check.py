"""`ptxbench check` and `ptxbench tasks` as a user runs them: real processes, real tools, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.services.hardware import gpu_archs
from ptxbench.cli.main import app
from ptxbench.tasks.spec import all_tasks

DATA = Path(__file__).parent / "data" / "ptx"


@pytest.fixture(scope="session")
def env(tmp_path_factory) -> dict[str, str]:
    cache = tmp_path_factory.getbasetemp() / "ptxbench-cache"
    return {**os.environ, "PTXBENCH_CACHE": str(cache), "COLUMNS": "120"}


@pytest.fixture(scope="session")
def expected_gpu() -> str:
    return "skipped: no GPU" if not gpu_archs() else ""


def ptxbench(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ptxbench.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def check_json(env: dict[str, str], *args: str) -> dict:
    run = ptxbench(env, "check", *args, "--json")
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    return json.loads(run.stdout)


@pytest.fixture
def runner(env, monkeypatch) -> CliRunner:
    monkeypatch.setenv("PTXBENCH_CACHE", env["PTXBENCH_CACHE"])
    return CliRunner()


TRITON_MANIFEST = str(DATA / "triton_gemm_sm90a_v94.manifest.json")


def test_compiler_made_hopper_gemm(env, expected_gpu):
    out = check_json(env, str(DATA / "triton_gemm_sm90a.ptx"), "--task", "gemm_bf16_sm90a",
                     "--manifest", TRITON_MANIFEST)
    assert out["category"] == "ok", out["evidence"]
    assert out["launched"] == ["matmul_tma"] and out["launch_problems"] == []
    for fam in ("wgmma", "tma", "mbarrier"):
        assert fam in out["ptx_families"] and fam in out["sass_families"]
    assert out["required_missing"] == []
    assert out["resources"]["matmul_tma"]["registers"] > 0
    assert isinstance(out["warnings"], list)
    assert out["gpu"].startswith("skipped: ")
    if expected_gpu:
        assert out["gpu"] == expected_gpu


def test_a_task_whose_default_launch_names_another_entry_is_entry_missing(env):
    # What the GPU stage would say at once: the task's default launch runs `gemm`.
    out = check_json(env, str(DATA / "triton_gemm_sm90a.ptx"), "--task", "gemm_bf16_sm90a", "--static")
    assert out["category"] == "entry_missing"
    assert "'gemm'" in out["evidence"] and "matmul_tma" in out["evidence"]
    assert {p["split"] for p in out["launch_problems"]} == {"train", "heldout"}


def test_blackwell_tcgen05_gemm(env):
    out = check_json(env, str(DATA / "triton_gemm_sm100a.ptx"), "--task", "gemm_bf16_sm100a")
    assert out["category"] == "ok" and out["arch"] == "sm_100a"
    for fam in ("tcgen05_mma", "tcgen05_alloc", "tcgen05_ld", "tcgen05_st", "tcgen05_commit"):
        assert fam in out["ptx_families"] and fam in out["sass_families"]
    if not gpu_archs():
        assert out["gpu"] == "skipped: no GPU"
    elif "sm_100a" not in (gpu_archs() or []):
        assert out["gpu"] == "skipped: no sm_100a device"


def test_cuda_candidate_with_require(env):
    out = check_json(env, str(DATA / "gemm_sm100a.cu"), "--arch", "sm_100a",
                     "--require", "tcgen05_mma,tcgen05_alloc,tcgen05_ld,tcgen05_commit")
    assert out["category"] == "ok" and out["language"] == "cuda"
    assert [f["family"] for f in out["families"]] == ["tcgen05_mma", "tcgen05_alloc", "tcgen05_ld", "tcgen05_commit"]


def test_triton_version_94_is_judged(env):
    out = check_json(env, str(DATA / "triton_gemm_sm90a_v94.ptx"), "--require", "wgmma,tma,mbarrier")
    assert out["category"] == "ok", out["evidence"]
    assert {"wgmma", "tma", "mbarrier"} <= set(out["sass_families"])
    assert any("9.4" in n and "CUDA 13.0" in n for n in out["notes"])


def test_version_newer_than_ptxas_is_ptx_version(env):
    out = check_json(env, str(DATA / "assemble" / "ptx_version_newer.ptx"))
    assert out["category"] == "ptx_version"
    assert "9.6" in out["evidence"]


def test_arch_defaults_to_the_target(env):
    out = check_json(env, str(DATA / "families_sm100a.ptx"))
    assert out["arch"] == "sm_100a" and out["category"] == "ok" and out["require"] == []


def test_missing_family_is_reported(env):
    out = check_json(env, str(DATA / "wgmma_dead.ptx"), "--require", "wgmma")
    assert out["category"] == "required_missing_sass"
    assert out["required_missing"] == [{"family": "wgmma", "missing": "sass"}]


BAD_INPUTS = {
    "empty.ptx": (b"", "no_candidate"),
    "junk.ptx": (bytes(range(256)) * 12, "no_candidate"),
    # ptxas 13.5 reads a non-ASCII character in a comment (13.0 refused it): judged on its code,
    # whose entry is not the one the task's default launch runs.
    "latin1.ptx": ((DATA / "assemble" / "ok_add.ptx").read_bytes().replace(b"one element", b"un \xe9l\xe9ment"),
                   "entry_missing"),
    "huge.ptx": (b"// padding line\n" * (10 * 1024 * 1024 // 16), "no_candidate"),
    "wrong_arch.ptx": ((DATA / "families_sm100a.ptx").read_bytes(), "target_mismatch"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_judged_not_crashed(name, env, tmp_path):
    data, category = BAD_INPUTS[name]
    path = tmp_path / name
    path.write_bytes(data)
    out = check_json(env, str(path), "--task", "gemm_bf16_sm90a")
    assert out["category"] == category
    assert out["evidence"]


def test_manifest_that_does_not_parse(env, tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text('{"launches": [ {"entry": ')
    out = check_json(env, str(DATA / "assemble" / "ok_add.ptx"), "--manifest", str(bad))
    assert out["category"] == "bad_manifest"
    assert "m.json" in out["evidence"]


@pytest.mark.parametrize(
    "args, code, words",
    [
        (["missing.ptx"], 2, "cannot read missing.ptx"),
        ([str(DATA / "assemble" / "ok_add.ptx"), "--task", "no_such_task"], 2, "unknown task"),
        ([str(DATA / "assemble" / "ok_add.ptx"), "--require", "wgmma,warp_magic"], 2, "warp_magic"),
        ([str(DATA / "assemble" / "ok_add.ptx"), "--arch", "sm_70"], 2, "unknown arch"),
    ],
)
def test_usage_mistakes_exit_non_zero_with_one_line(args, code, words, env):
    run = ptxbench(env, "check", *args)
    assert run.returncode == code
    assert words in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert "Traceback" not in run.stderr + run.stdout


def test_missing_tool_exits_1_with_the_fix(env, tmp_path):
    ptx = tmp_path / "k.ptx"
    ptx.write_text((DATA / "assemble" / "ok_add.ptx").read_text())
    run = ptxbench({**env, "PTXBENCH_PTXAS": str(tmp_path / "no-ptxas")}, "check", str(ptx), "--no-cache")
    assert run.returncode == 1
    assert "PTXBENCH_PTXAS" in run.stderr and "Traceback" not in run.stderr


def test_rich_summary(runner):
    result = runner.invoke(app, ["check", str(DATA / "triton_gemm_sm90a.ptx"), "--task", "gemm_bf16_sm90a",
                                 "--manifest", TRITON_MANIFEST])
    assert result.exit_code == 0, result.output
    text = result.output
    for words in ("ok", "requested families", "wgmma", "distinctive", "mbarrier", "generic", "resources", "GPU: skipped"):
        assert words in text


def test_rich_summary_shows_the_failing_line(runner):
    result = runner.invoke(app, ["check", str(DATA / "assemble" / "undefined_symbol.ptx")])
    assert result.exit_code == 0
    assert "undefined_symbol" in result.output
    assert "line 10: Unknown symbol '%r99'" in result.output
    assert "mov.b32" in result.output


def test_warnings_are_shown(runner):
    result = runner.invoke(app, ["check", str(DATA / "setmaxnreg_ignored.ptx"), "--require", "setmaxnreg", "--json"])
    out = json.loads(result.output)
    assert out["category"] == "required_missing_sass"
    assert any(w["code"] == "C7508" for w in out["warnings"])


def test_tasks_lists_every_task(runner):
    result = runner.invoke(app, ["tasks", "--json"])
    assert result.exit_code == 0
    rows = {r["id"]: r for r in json.loads(result.output)}
    assert set(rows) == {t.id for t in all_tasks()}
    assert rows["gemm_bf16_sm90a"]["arch"] == "sm_90a"
    assert rows["gemm_bf16_sm90a"]["families"] == ["wgmma", "tma", "mbarrier"]
    for task in all_tasks():
        folder = task.expert_dir()
        if folder is not None and (folder / "kernel.ptx").is_file():
            assert rows[task.id]["expert"] == f"tasks/solutions/{task.id}/kernel.ptx"
        else:
            assert rows[task.id]["expert"] is None
    table = runner.invoke(app, ["tasks"])
    assert table.exit_code == 0 and "gemm_bf16_sm100a" in table.output


def test_long_mangled_entries_fit_an_80_column_terminal(runner, tmp_path):
    manifest = tmp_path / "m.json"
    manifest.write_text('{"launches": [{"entry": "_Z8add_tileILi256EEvPKfS1_Pfi"}]}')
    result = runner.invoke(app, ["check", str(DATA.parent / "cuda" / "templated_add.cu"), "--task", "vector_add_smoke",
                                 "--manifest", str(manifest)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(line for line in lines if len(line) > 80)
    assert "_Z8add_tileILi256E…PKfS1_Pfi" in result.output
    table = [line for line in lines if "_Z8add_tile" in line and line.count("│") > 2]
    assert table and all("12" in line or "yes" in line for line in table)   # the numbers stay on the line


def test_blocks_used_and_set_aside_are_shown(runner):
    result = runner.invoke(app, ["check", str(DATA.parent / "responses" / "helpers_then_kernel.md"), "--arch", "sm_90a"],
                           env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "blocks used: 1 (helpers), 2 (kernel)" in result.output
    assert "set aside: block 3: host code that launches a kernel" in result.output
