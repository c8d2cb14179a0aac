"""Requested families are judged on what the launch manifest runs, and the manifest is checked
against the module statically, with the category the GPU stage would give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxbench.engine.cache import Cache
from ptxbench.engine.candidate import Candidate
from ptxbench.engine.launch_check import check_launches, demangled_base
from ptxbench.engine.manifest import parse_manifest
from ptxbench.engine.pipeline import plan_sizes
from ptxbench.engine.static import judge_static
from ptxbench.tasks.spec import get_task

DATA = Path(__file__).resolve().parent / "data"
TWO = (DATA / "ptx" / "two_entries_sm90a.ptx").read_text()
TASK = "vector_add_smoke"                    # its default launch runs `vector_add` only


@pytest.fixture
def cache(tmp_path):
    return Cache(tmp_path / "cache")


def _ptx(code: str, manifest: dict | None = None) -> Candidate:
    return Candidate("ptx", code, parse_manifest(json.dumps(manifest)) if manifest else None, "test")


def test_a_family_only_in_an_entry_no_launch_runs_is_missing(cache):
    v = judge_static(_ptx(TWO), TASK, require=["wgmma", "pdl"], cache=cache)
    assert v.launched == ["vector_add"]
    assert v.category == "required_missing_sass"
    assert "wgmma: only in tile_mma, which no launch runs" in v.evidence
    row = {r.family: r for r in v.families}
    assert row["wgmma"].missing == "sass" and row["wgmma"].elsewhere == ["tile_mma"]
    # pdl is in a .func the launched entry calls: the call graph reaches it.
    assert row["pdl"].ok
    # The module-wide census stays as information.
    assert "wgmma" in v.ptx_families and "wgmma" in v.sass_families
    by_entry = {e.entry: e for e in v.entries}
    assert by_entry["vector_add"].reaches == ["vector_add", "wait_for_producer"]
    assert by_entry["vector_add"].launched and not by_entry["tile_mma"].launched
    assert "wgmma" in by_entry["tile_mma"].sass_families


def test_launching_both_entries_counts_both(cache):
    manifest = {"launches": [{"entry": "vector_add"},
                             {"entry": "tile_mma", "grid": [1], "block": [128], "args": ["Z"]}]}
    v = judge_static(_ptx(TWO, manifest), TASK, require=["wgmma", "pdl"], cache=cache)
    assert v.category == "ok", v.evidence
    assert v.launched == ["vector_add", "tile_mma"]


def test_without_a_manifest_or_task_the_whole_module_counts(cache):
    v = judge_static(_ptx(TWO), arch="sm_90a", require=["wgmma"], cache=cache)
    assert v.category == "ok" and v.launched is None


def test_a_kind_none_family_only_elsewhere_is_missing_in_the_ptx(cache):
    v = judge_static(_ptx(TWO), TASK, require=["wgmma_sync"], cache=cache)
    assert v.category == "required_missing_ptx"
    assert "only in tile_mma" in v.evidence


def test_a_templated_kernel_is_launched_by_its_mangled_name(cache):
    code = (DATA / "cuda" / "templated_add.cu").read_text()
    mangled = "_Z8add_tileILi256EEvPKfS1_Pfi"
    ok = judge_static(Candidate("cuda", code, parse_manifest(json.dumps({"launches": [{"entry": mangled}]}))),
                      TASK, cache=cache)
    assert ok.category == "ok", ok.evidence
    assert ok.launched == [mangled] and ok.entries[0].entry == mangled
    by_name = judge_static(Candidate("cuda", code, parse_manifest('{"launches": [{"entry": "add_tile"}]}')),
                           TASK, cache=cache)
    assert by_name.category == "entry_missing"
    assert f"{mangled} is the C++ mangled name of a 'add_tile'" in by_name.evidence


@pytest.mark.parametrize("mangled, base", [
    ("_Z8add_tileILi256EEvPKfS1_Pfi", "add_tile"), ("_Z4gemmPf", "gemm"),
    ("_ZN4gemm6kernelILi128EEEvPf", "kernel"), ("vector_add", None),
])
def test_demangled_base(mangled, base):
    assert demangled_base(mangled) == base


@pytest.mark.parametrize("manifest, category, words", [
    ({"launches": [{"entry": "vector_add", "args": ["X", "Y", "Z"]}]}, "param_mismatch", "passes 3 arguments"),
    ({"launches": [{"entry": "vector_add", "args": ["X", "Y", "Z", "tmap:t"]}],
      "tensor_maps": {"t": {"tensor": "W", "box": [64]}}}, "bad_manifest", "'W' is not a task tensor"),
    ({"launches": [{"entry": "vector_add", "shared_bytes": 240000}]}, "launch_config", "0 to 232448"),
    ({"launches": [{"entry": "vector_add", "args": ["X", "Y", "Z", "f32:N"]}]}, "param_mismatch", "argument 3"),
])
def test_the_manifest_is_checked_against_the_module(manifest, category, words, cache):
    v = judge_static(_ptx(TWO, manifest), TASK, cache=cache)
    assert v.category == category and words in v.evidence, v.evidence
    # The GPU pipeline decides the same sizes the same way before launching anything.
    _, decided = plan_sizes(v.candidate, get_task(TASK), v.ptx, 132, resources=v.resources)
    assert {m.category for m in decided} == {category}


def test_a_problem_at_a_heldout_size_only_does_not_decide(cache):
    # 256 threads at the (even) train sizes, 1280 at the odd held-out size.
    manifest = {"launches": [{"entry": "vector_add", "block": ["256 + (N % 2) * 1024"]}]}
    v = judge_static(_ptx(TWO, manifest), TASK, cache=cache)
    assert v.category == "ok", v.evidence
    assert [(p["split"], p["category"]) for p in v.launch_problems] == [("heldout", "launch_config")]


def test_thread_bounds_and_registers_are_checked(cache):
    bounded = TWO.replace(".visible .entry vector_add(.param .u64 x, .param .u64 y, .param .u64 z, .param .u32 n)",
                          ".visible .entry vector_add(.param .u64 x, .param .u64 y, .param .u64 z, .param .u32 n)"
                          "\n.maxntid 128, 1, 1")
    v = judge_static(_ptx(bounded), TASK, cache=cache)
    assert v.category == "launch_config" and ".maxntid 128, 1, 1" in v.evidence
    heavy = _checked({"block": [1024]}, registers=72)
    assert heavy.train_category == "launch_config"
    assert "need 73728 registers" in heavy.first_failure().message
    assert _checked({"block": [1024]}, registers=64).train_category == "ok"


def _checked(launch: dict, *, registers: int, shared: int = 0):
    """The launch check of TWO's vector_add launched as `launch` says, with ptxas's report faked."""
    manifest = parse_manifest(json.dumps({"launches": [{"entry": "vector_add", **launch}]}))
    return check_launches(Candidate("ptx", TWO, manifest), get_task(TASK), TWO,
                          resources={"vector_add": {"registers": registers, "shared_bytes": shared}})


def test_static_shared_memory_counts_toward_the_limit(cache):
    checked = _checked({"shared_bytes": 227000}, registers=16, shared=8192)
    assert checked.train_category == "launch_config"
    assert "8192 bytes of static and 227000 of dynamic" in checked.first_failure().message


def test_without_a_task_the_candidates_own_launches_must_name_entries(cache):
    v = judge_static(_ptx(TWO, {"launches": [{"entry": "gemm"}]}), arch="sm_90a", cache=cache)
    assert v.category == "entry_missing" and "'gemm'" in v.evidence


def test_the_stored_evaluation_keeps_the_launched_entries(cache):
    from ptxbench.db.judgement import evaluation_records

    v = judge_static(_ptx(TWO), TASK, require=["wgmma"], cache=cache)
    evidence = evaluation_records(v, 1, "test").evaluation.evidence
    assert evidence["launched"] == ["vector_add"]
    assert {e["entry"]: e["launched"] for e in evidence["entries"]} == {"vector_add": True, "tile_mma": False}
    assert "only in tile_mma" in evidence["message"]
