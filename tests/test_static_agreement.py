"""`--static` agrees with the recorded GPU judgements (db/seed/recorded-h200.json, made on an
H200 by scripts/record_seed.py) wherever the manifest decides: for every expert solution and
every mutation, a manifest category (bad_manifest, entry_missing, param_mismatch, launch_config)
found by either side at a size the recording measured is found by both, at that size."""

from __future__ import annotations

import json

import pytest

from ptxbench.engine.cache import Cache
from ptxbench.engine.candidate import Candidate
from ptxbench.engine.manifest import parse_manifest
from ptxbench.engine.static import judge_static
from ptxbench.tasks import mutations

SEED = mutations.SOLUTIONS_DIR.parents[1] / "db" / "seed" / "recorded-h200.json"
MANIFEST_CATEGORIES = {"bad_manifest", "entry_missing", "param_mismatch", "launch_config"}


def _recorded() -> list[tuple[str, str, str, dict | None, dict]]:
    """(key, task, code, manifest, recorded evaluation) for every sm_90a sample judged on the GPU."""
    seed = json.loads(SEED.read_text())
    out = []
    for s in seed["samples"]:
        out.append((s["seed_key"], s["task_id"], s["code"], s["manifest"], s["evaluations"][0]))
    for e in seed["evaluations"]:
        task = e["sample"].removeprefix("expert:")
        folder = mutations.SOLUTIONS_DIR / task
        out.append((e["sample"], task, (folder / "kernel.ptx").read_text(),
                    json.loads((folder / "manifest.json").read_text()), e))
    return [x for x in out if x[4].get("status") == "judged"]


RECORDED = _recorded()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return Cache(tmp_path_factory.mktemp("agreement"))


@pytest.mark.parametrize("key, task, code, manifest, recorded", RECORDED, ids=[r[0] for r in RECORDED])
def test_static_and_gpu_agree_on_manifest_categories(key, task, code, manifest, recorded, cache):
    m = parse_manifest(json.dumps(manifest)) if manifest is not None else None
    v = judge_static(Candidate("ptx", code, m, key), task, cache=cache)
    problems = {(p["split"], json.dumps(p["sizes"], sort_keys=True)): p["category"] for p in v.launch_problems}
    for m in recorded.get("measurements", []):
        at = (m["split"], json.dumps(m["sizes"], sort_keys=True))
        static = problems.get(at, "ok")
        if m["category"] in MANIFEST_CATEGORIES or static in MANIFEST_CATEGORIES:
            assert static == m["category"], (at, static, m["category"], v.launch_problems)
    if recorded["category"] in MANIFEST_CATEGORIES:
        assert v.category == recorded["category"], (v.category, v.evidence)
