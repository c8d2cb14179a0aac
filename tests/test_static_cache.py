"""The whole static judgement is cached by content: a re-check of an unchanged candidate runs no
tool at all, and anything that decides the verdict is part of the key."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ptxbench.engine import assemble as assemble_mod
from ptxbench.engine import sass as sass_mod
from ptxbench.engine.cache import Cache
from ptxbench.engine.candidate import Candidate
from ptxbench.engine.manifest import parse_manifest
from ptxbench.engine.static import judge_static

DATA = Path(__file__).resolve().parent / "data"
TWO = (DATA / "ptx" / "two_entries_sm90a.ptx").read_text()


def _comparable(v) -> dict:
    d = v.to_dict(with_text=True)
    for key in ("seconds", "cached"):
        d.pop(key)
    return d


def _no_tools(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a tool ran on a cached candidate: {args[0] if args else kwargs}")
    monkeypatch.setattr(assemble_mod, "run_tool", refuse)
    monkeypatch.setattr(sass_mod, "run_tool", refuse)


CASES = [
    ("ptx", TWO, "vector_add_smoke", ["wgmma", "pdl"]),
    ("cuda", (DATA / "ptx" / "gemm_sm90a.cu").read_text(), None, ["wgmma", "tma", "mbarrier"]),
    ("ptx", (DATA / "ptx" / "assemble" / "syntax.ptx").read_text(), None, []),
]


@pytest.mark.parametrize("language, code, task, require", CASES, ids=["two_entries", "cuda_gemm", "syntax"])
def test_a_recheck_runs_no_tool_and_gives_the_same_verdict(language, code, task, require, tmp_path, monkeypatch):
    cache = Cache(tmp_path)
    candidate = Candidate(language, code, None, "test")
    cold = judge_static(candidate, task, arch="sm_90a", require=require, cache=cache)
    _no_tools(monkeypatch)
    warm = judge_static(candidate, task, arch="sm_90a", require=require, cache=cache)
    assert warm.cached and _comparable(warm) == _comparable(cold)
    assert warm.cubin == cold.cubin and warm.sass == cold.sass
    assert [e.to_dict() for e in warm.entries] == [e.to_dict() for e in cold.entries]


def test_what_decides_the_verdict_is_in_the_key(tmp_path, monkeypatch):
    cache = Cache(tmp_path)
    base = Candidate("ptx", TWO, None, "test")
    first = judge_static(base, "vector_add_smoke", require=["wgmma"], cache=cache)
    assert first.category == "required_missing_sass"
    both = parse_manifest(json.dumps({"launches": [
        {"entry": "vector_add"}, {"entry": "tile_mma", "grid": [1], "block": [128], "args": ["Z"]}]}))
    # Another manifest, other families, another task: judged anew, not served from the entry above.
    assert judge_static(Candidate("ptx", TWO, both, "test"), "vector_add_smoke", require=["wgmma"],
                        cache=cache).category == "ok"
    assert judge_static(base, "vector_add_smoke", require=["pdl"], cache=cache).category == "ok"
    assert judge_static(base, None, arch="sm_90a", require=["wgmma"], cache=cache).category == "ok"


def test_no_cache_judges_again(tmp_path):
    cache = Cache(tmp_path)
    candidate = Candidate("ptx", TWO, None, "test")
    judge_static(candidate, "vector_add_smoke", cache=cache)
    again = judge_static(candidate, "vector_add_smoke", cache=cache, use_cache=False)
    assert not again.cached


def test_a_batch_gives_the_verdicts_one_at_a_time_gives_with_one_nvdisasm_run(tmp_path, monkeypatch):
    from ptxbench.engine.static_batch import judge_static_many
    from ptxbench.engine.toolchain import run_tool

    jobs = [dict(candidate_or_file=Candidate(language, code, None, "test"), task=task, arch="sm_90a", require=require)
            for language, code, task, require in CASES]
    jobs.append(dict(candidate_or_file=DATA / "ptx" / "families_sm100a.ptx", require=["tcgen05_cp"]))
    alone = [judge_static(**job, cache=Cache(tmp_path / "alone")) for job in jobs]
    runs = []

    def counting(argv, **kwargs):
        runs.append(argv[0])
        return run_tool(argv, **kwargs)

    monkeypatch.setattr(sass_mod, "run_tool", counting)
    together = judge_static_many(jobs, cache=Cache(tmp_path / "batch"))
    for a, b in zip(alone, together):
        # Two cold runs: only ptxas's own "Compile time" line may differ.
        x, y = _comparable(a), _comparable(b)
        assert re.sub(r"Compile time = [\d.]+ ms", "", x.pop("assembler_log")) == \
            re.sub(r"Compile time = [\d.]+ ms", "", y.pop("assembler_log"))
        assert x == y
    assert len(runs) == 2          # one nvdisasm for the three sm_90a cubins, one for the sm_100a one
