"""A small store for the explorer's tests (benchmarks/make_big_store.py makes the big one).

The PTX, ptxas logs and SASS under data/ are real: the PTX was written for
these tests and the logs and SASS are what ptxas 13.0.88 (`-arch=sm_90a -v`)
and cuobjdump 13.5 (`-sass`) printed for it. Timings in this store are
invented fixture values, and every row's `source` says "fixture".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ptxbench.db.records import Evaluation, Fix, Label, Measurement, Run, Sample, Task
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_evaluation, add_fix, add_label, add_sample, create_run, get_or_create_model, upsert_task

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]
SOURCE = "fixture: tests/tui/fixture_store.py"
NOW = "2026-11-29T12:00:00+00:00"


def read(name: str) -> str:
    return (DATA / name).read_text()


TASKS = [
    ("vector_add_smoke", "Vector add (smoke)", "vector_add", "sm_90a", [], {"N": 1 << 24}),
    ("gemm_bf16_sm90a", "GEMM bf16: C = A · Bᵀ", "gemm", "sm_90a", ["wgmma", "tma", "mbarrier"], {"M": 8192, "N": 7168, "K": 5120}),
    ("attn_fwd_sm90a", "Attention forward with LSE", "attn_fwd", "sm_90a", ["wgmma", "tma", "mbarrier"], {"B": 4, "H": 48, "S": 4096, "D": 128}),
    ("gemm_bf16_sm100a", "GEMM bf16 (Blackwell)", "gemm", "sm_100a", ["tcgen05_mma", "tcgen05_alloc", "tcgen05_ld", "tma", "mbarrier"], {"M": 8192, "N": 7168, "K": 5120}),
]


@dataclass
class FixtureIds:
    expert_vecadd: int
    syntax_sample: int
    wgmma_ok: int
    wgmma_missing: int
    wrong_result: int
    turn2: int
    skipped: int


def _resources(log: str) -> dict:
    regs = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return {
        "registers": int(regs.group(1)) if regs else None,
        "shared_bytes": 0,
        "spill_stores": int(spills.group(1)) if spills else 0,
        "spill_loads": int(spills.group(2)) if spills else 0,
    }


def build_fixture_store(path: Path) -> FixtureIds:
    """The explorer's test store, written through the store's own write functions."""
    db = open_store(path)
    for tid, title, op, arch, fams, headline in TASKS:
        spec = {
            "id": tid,
            "title": title,
            "arch": arch,
            "families": fams,
            "description": f"{title}. Fixture description of the task for the explorer's tests.",
            "sizes": {"headline": headline, "train": [headline], "heldout": [headline]},
        }
        upsert_task(db, Task(id=tid, title=title, operation=op, arch=arch, families=fams, spec=spec, source=SOURCE))
    models = {
        name: get_or_create_model(db, name, kind=kind, source=SOURCE).id
        for name, kind in (("expert", "expert"), ("mutation", "mutation"), ("fixture-model-a", "import"), ("fixture-model-b", "import"))
    }
    runs = {
        (model, level): create_run(db, Run(model_id=models[model], name=f"{model}-{level}", context_level=level, source=SOURCE)).id
        for model, level in (("fixture-model-a", "none"), ("fixture-model-a", "brief"), ("fixture-model-a", "full"), ("fixture-model-b", "brief"))
    }

    def sample(task, model, code, *, run=None, turn=1, parent=None, source=SOURCE, index=0) -> int:
        return add_sample(db, Sample(task_id=task, language="ptx", source=source, code=code, run_id=run,
                                     model_id=models[model], sample_index=index, turn=turn, parent_id=parent)).id

    def evaluate(sid, category, *, compiled=True, correct=None, uses=None, log="", sass=None, ptx=None,
                 evidence=None, speedup=None, time_ms=None, families=(), missing=(), status="judged",
                 measurements=()) -> int:
        baseline = time_ms * speedup if (time_ms and speedup) else None
        evaluation = Evaluation(
            sample_id=sid, engine_version="fixture", status=status, category=category, source=SOURCE,
            device="fixture device", compiled=compiled, correct=correct, correct_heldout=correct, uses_ptx=uses,
            uses_sass=uses, ptx_families=list(families), sass_families=list(families), required_missing=list(missing),
            resources=_resources(log), evidence=evidence or {}, assembler_log=log, ptx=ptx, sass=sass,
            time_ms=time_ms, baseline_ms=baseline, speedup=speedup,
        )
        rows = [
            Measurement(split=split, sizes={"N": 1 << 24}, category=cat, max_rel_err=err, worst=worst,
                        time_ms=time_ms, baseline_ms=baseline, speedup=speedup)
            for split, cat, err, worst in measurements
        ]
        return add_evaluation(db, evaluation, rows).id

    vec, vec_log, vec_sass = read("vecadd.ptx"), read("vecadd.ptxas.log"), read("vecadd.sass")
    wg, wg_log, wg_sass = read("wgmma_tile.ptx"), read("wgmma_tile.ptxas.log"), read("wgmma_tile.sass")
    bad, bad_log = read("vecadd_syntax.ptx"), read("vecadd_syntax.ptxas.log")
    miss, miss_log, miss_sass = read("wgmma_tile_nowgmma.ptx"), read("wgmma_tile_nowgmma.ptxas.log"), read("wgmma_tile_nowgmma.sass")
    hopper = ["wgmma", "tma", "mbarrier"]
    ok_meas = [("train", "ok", 1e-7, None), ("heldout", "ok", 2e-7, None)]

    expert = sample("vector_add_smoke", "expert", vec, source="expert")
    evaluate(expert, "ok", correct=True, uses=True, log=vec_log, sass=vec_sass, ptx=vec, speedup=1.02, time_ms=0.130,
             measurements=ok_meas)
    syntax = sample("vector_add_smoke", "mutation", bad, source="mutation of expert:vector_add_smoke (comma dropped)")
    evaluate(syntax, "syntax", compiled=False, log=bad_log, ptx=bad,
             evidence={"message": "Parsing error near '%f2': syntax error", "line": 37, "tool": "ptxas"})
    add_fix(db, Fix(failed_sample_id=syntax, fixed_sample_id=expert, explanation="The add.f32 operands need a comma between them.",
                    explanation_source="written with the mutation", source=SOURCE))
    wgmma_ok = sample("gemm_bf16_sm90a", "expert", wg, source="expert")
    evaluate(wgmma_ok, "ok", correct=True, uses=True, log=wg_log, sass=wg_sass, ptx=wg, families=hopper, speedup=0.97,
             time_ms=1.21, measurements=ok_meas)
    missing = sample("gemm_bf16_sm90a", "fixture-model-a", miss, run=runs[("fixture-model-a", "none")])
    evaluate(missing, "required_missing_ptx", correct=True, uses=False, log=miss_log, sass=miss_sass, ptx=miss,
             families=["tma", "mbarrier"], missing=["wgmma"], speedup=0.12, time_ms=9.8, measurements=ok_meas)
    add_fix(db, Fix(failed_sample_id=missing, fixed_sample_id=wgmma_ok, explanation="The tile must go through wgmma.mma_async, fenced and waited on.",
                    explanation_source="written for the fixture", source=SOURCE))
    wrong = sample("gemm_bf16_sm90a", "fixture-model-a", wg.replace("1, 1, 1, 0, 0", "1, 1, 1, 0, 1"),
                   run=runs[("fixture-model-a", "brief")])
    worst = {"index": [17, 3], "got": 1.5, "expected": -0.25}
    evaluate(wrong, "wrong_result", correct=False, uses=True, log=wg_log, sass=wg_sass, families=hopper,
             evidence={"max_rel_err": 0.71, "worst": worst}, measurements=[("train", "wrong_result", 0.71, worst)])
    turn2 = sample("gemm_bf16_sm90a", "fixture-model-a", wg, run=runs[("fixture-model-a", "brief")], turn=2, parent=wrong)
    evaluate(turn2, "ok", correct=True, uses=True, log=wg_log, sass=wg_sass, families=hopper, speedup=0.91, time_ms=1.29,
             measurements=ok_meas)
    # Model b on the same task: correct, uses the families, slower.
    for i, speed in enumerate((0.64, 0.58)):
        sid = sample("gemm_bf16_sm90a", "fixture-model-b", wg, run=runs[("fixture-model-b", "brief")], index=i)
        evaluate(sid, "slower_than_baseline", correct=True, uses=True, log=wg_log, sass=wg_sass, families=hopper,
                 speedup=speed, time_ms=1.18 / speed, measurements=ok_meas)
    for i in range(2):
        sid = sample("vector_add_smoke", "fixture-model-a", vec, run=runs[("fixture-model-a", "full")], index=i)
        evaluate(sid, "ok", correct=True, uses=True, log=vec_log, sass=vec_sass, speedup=0.98 + 0.05 * i, time_ms=0.133,
                 measurements=ok_meas)
    skipped = sample("gemm_bf16_sm100a", "fixture-model-a", wg.replace("sm_90a", "sm_100a"), run=runs[("fixture-model-a", "full")])
    evaluate(skipped, "ok", correct=None, uses=None, status="skipped: no sm_100a device")
    add_label(db, Label(sample_id=wrong, author="fixture", category="wrong_result", note="fragment layout of the accumulator"))
    db.conn.close()
    return FixtureIds(expert, syntax, wgmma_ok, missing, wrong, turn2, skipped)
