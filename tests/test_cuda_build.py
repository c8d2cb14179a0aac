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


# -- directives that name files (engine.cuda_build.directive_problem) -----------------------------------

ACCEPTED = [
    "#include <cuda_bf16.h>\n#include \"cuda/barrier\"\n#include <cstdint>\n#include <cuda/ptx>\n",
    "#if __has_include(<cuda_fp8.h>)\n#include <cuda_fp8.h>\n#endif\n",
    "#pragma unroll\n#pragma nv_diag_suppress 177\n_Pragma(\"unroll 4\")\n",
    "#line 40\n#line 41 // the next line is 41\n",
    "#define CAT(a, b) a##b\n#define STR(x) #x\nconst char* s = STR(CAT(x, y));\n",
    "#define VAR(b) b##0\nint VAR(x);\n",
    "#line 5\r\n#pragma unroll\r\n",
]

REFUSED = [
    ("#line 1 \"/etc/passwd\"\n", 1, "#line with a file name"),
    ("int a;\n# 7 \"/etc/passwd\" 2\n", 2, "line marker"),
    ("#line N_FROM_A_MACRO\n", 1, "#line with a file name"),
    ("int a;\n\n  %:  /* c */ line 3 \"x\"\n", 3, "#line with a file name"),
    ("#pragma GCC dependency \"/etc/passwd\"\n", 1, "GCC dependency"),
    ("_Pragma(\"GCC dependency \\\"/etc/passwd\\\"\")\n", 1, "GCC dependency"),
    ("#define S(x) #x\n_Pragma(S(GCC dependency \"/etc/passwd\"))\n", 2, "must be a string literal"),
    ("#if __has_include(\"/root/.ssh/id_rsa\")\n#endif\n", 1, "outside the compiler's header folders"),
    ("#define H __has_include\n#if H(\"/x\")\n#endif\n", 1, "must be followed by"),
    ("#include <bits/stdc++.h>\n", 1, "not one of CUDA's headers"),
    ("int a;\n#inc\\\nlude \"../../secret\"\n", 2, "outside the compiler's header folders"),
    ("#\\u0069nclude \"/etc/shadow\"\n", 1, "universal character name"),
    ("int a;\r#\\\r include \"/etc/passwd\"\n", 2, "outside the compiler's header folders"),
    ("#line 12345678901234567890\n", 1, "#line with a file name"),
]


@pytest.mark.parametrize("source", ACCEPTED)
def test_ordinary_directives_are_accepted(source):
    from ptxbench.engine.cuda_build import directive_problem

    assert directive_problem(source) is None


@pytest.mark.parametrize("source, line, words", REFUSED)
def test_directives_that_name_files_are_refused_with_their_line(source, line, words):
    from ptxbench.engine.cuda_build import directive_problem

    problem = directive_problem(source)
    assert problem is not None and words in problem[0] and problem[1] == line, problem


def test_the_directive_check_is_linear_on_hostile_text():
    """Every `#` is looked at (a comment or a string can hide none), so the scan must stay linear on a
    text made of nothing else; an unclosed comment after each one is the old quadratic case."""
    import time

    from ptxbench.engine.cuda_build import directive_problem

    for unit in ("#/*", "# ", "#pragma ", "_Pragma(\"", "\\\n", "#line 1\n", "#include <cstdint>\n"):
        took = []
        for n in (1 << 17, 1 << 20):
            best = min(_timed(directive_problem, unit * (n // len(unit)), time) for _ in range(2))
            took.append(best)
        assert took[1] < 2.0 and took[1] / max(took[0], 1e-3) < 20, (unit, took)


def _timed(f, text, time):
    t = time.perf_counter()
    f(text)
    return time.perf_counter() - t
