"""CUDA candidates are compiled as real projects compile them: C++20, relaxed constexpr, and the
defines and flags a manifest may add; everything nvcc and ptxas were given is kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxbench.engine.cache import Cache
from ptxbench.engine.candidate import Candidate
from ptxbench.engine.cuda_build import DEFAULT_FLAGS, nvcc_flags, parse_build
from ptxbench.engine.manifest import ManifestError, parse_manifest
from ptxbench.engine.static import judge_static

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def cache(tmp_path):
    return Cache(tmp_path / "cache")


def _cuda(name: str, manifest: dict | None = None) -> Candidate:
    m = parse_manifest(json.dumps(manifest)) if manifest is not None else None
    return Candidate("cuda", (DATA / "cuda" / name).read_text(), m, f"test:{name}")


def test_relaxed_constexpr_and_cxx20_are_the_defaults(cache):
    v = judge_static(_cuda("relaxed_constexpr.cu"), arch="sm_90a", cache=cache)
    assert v.category == "ok", (v.evidence, v.assembler_log)
    nvcc = v.commands["nvcc"]
    assert nvcc[0] == "nvcc" and "-std=c++20" in nvcc and "--expt-relaxed-constexpr" in nvcc
    assert v.commands["ptxas"][:3] == ["ptxas", "-arch=sm_90a", "-v"]


def test_a_manifest_std_replaces_the_default(cache):
    v = judge_static(_cuda("relaxed_constexpr.cu", {"build": {"flags": ["-std=c++17"]}}), arch="sm_90a", cache=cache)
    # The concept needs C++20: nvcc's own error, and the command shows why.
    assert v.category == "cuda_compile_error"
    assert "-std=c++17" in v.commands["nvcc"] and "-std=c++20" not in v.commands["nvcc"]


def test_defines_reach_the_compiler_and_are_stored(cache):
    build = {"build": {"defines": ["TILE=64", "USE_HALF_VALUE"], "flags": ["--use_fast_math", "-lineinfo"]}}
    v = judge_static(_cuda("tile_define.cu", build), arch="sm_90a", cache=cache)
    assert v.category == "ok", (v.evidence, v.assembler_log)
    assert "1056964608" in v.ptx            # 0.5f as bits: the USE_HALF_VALUE branch was compiled
    nvcc = v.commands["nvcc"]
    assert nvcc[-5:-3] == ["-DTILE=64", "-DUSE_HALF_VALUE"]
    assert "--use_fast_math" in nvcc and "-lineinfo" in nvcc
    assert v.to_dict()["commands"]["nvcc"] == nvcc
    without = judge_static(_cuda("tile_define.cu"), arch="sm_90a", cache=cache)
    assert without.category == "cuda_compile_error" and "TILE" in without.evidence


def test_the_commands_go_into_the_stored_evaluation(cache):
    from ptxbench.db.judgement import evaluation_records

    v = judge_static(_cuda("tile_define.cu", {"build": {"defines": ["TILE=64"]}}), arch="sm_90a", cache=cache)
    evidence = evaluation_records(v, 1, "test").evaluation.evidence
    assert "-DTILE=64" in evidence["commands"]["nvcc"]
    assert evidence["commands"]["ptxas"][0] == "ptxas"


@pytest.mark.parametrize("build, words", [
    ({"flags": ["-I/etc"]}, "not allowed"),
    ({"flags": ["-Xptxas=-O0"]}, "not allowed"),
    ({"flags": ["--compiler-options=-fplugin=x.so"]}, "not allowed"),
    ({"flags": ["-DNDEBUG"]}, "not allowed"),          # defines go in defines
    ({"flags": ["-std=c++23"]}, "not allowed"),
    ({"defines": ["__CUDA_ARCH__=800"]}, "not NAME or NAME=VALUE"),
    ({"defines": ["HEADER=\"/etc/passwd\""]}, "not NAME or NAME=VALUE"),
    ({"defines": ["X=<stdio.h>"]}, "not NAME or NAME=VALUE"),
    ({"defines": "NDEBUG"}, "expected a list of strings"),
    ({"defines": [f"D{i}" for i in range(33)]}, "at most 32"),
    ({"includes": ["x"]}, "unknown field"),
])
def test_anything_else_is_a_bad_manifest(build, words):
    with pytest.raises(ManifestError, match=words):
        parse_manifest(json.dumps({"build": build}))


def test_flag_order_and_duplicates():
    assert nvcc_flags(None) == DEFAULT_FLAGS
    spec = parse_build({"defines": ["A=1"], "flags": ["--expt-relaxed-constexpr", "--ftz=true"]})
    assert nvcc_flags(spec) == ("-std=c++20", "--expt-relaxed-constexpr", "--ftz=true", "-DA=1")


def test_a_ptx_candidate_notes_that_build_options_are_not_used(cache):
    code = (DATA / "ptx" / "assemble" / "ok_add.ptx").read_text()
    v = judge_static(Candidate("ptx", code, parse_manifest('{"build": {"defines": ["X"]}}')), arch="sm_90a",
                     cache=cache)
    assert v.category == "ok"
    assert any("apply to CUDA candidates" in n for n in v.notes)
    assert "nvcc" not in v.commands
