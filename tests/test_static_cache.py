"""The whole static judgement is cached by content: a re-check of an unchanged candidate runs no
tool at all, and anything that decides the verdict is part of the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxbench.engine import assemble as assemble_mod
from ptxbench.engine import inspect as inspect_mod
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
    monkeypatch.setattr(inspect_mod, "run_tool", refuse)


@pytest.mark.parametrize("language, code, task, require", [
    ("ptx", TWO, "vector_add_smoke", ["wgmma", "pdl"]),
    ("cuda", (DATA / "ptx" / "gemm_sm90a.cu").read_text(), None, ["wgmma", "tma", "mbarrier"]),
    ("ptx", (DATA / "ptx" / "assemble" / "syntax.ptx").read_text(), None, []),
])
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
