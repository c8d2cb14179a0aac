"""Make a large store of SYNTHETIC benchmark data, for timing the explorer and the metrics.

Nothing here is model output. The models are called `synthetic-a`, `synthetic-b`,
`synthetic-c` (kind `synthetic`); every sample's and evaluation's source says
"synthetic: benchmark fixture, not model output"; the store's meta table says
how it was made. The tasks are the real task specs, so the explorer's task
views work.

    python benchmarks/make_big_store.py /tmp/big.sqlite            # 100 000 samples
    python benchmarks/make_big_store.py /tmp/big.sqlite -n 20000 --force

Prints the time each part took.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from ptxbench.db.records import Evaluation, Measurement, Model, Run, Sample, content_hash
from ptxbench.db.seed import seed_store
from ptxbench.db.store import now_iso, open_store, set_meta
from ptxbench.db.writes import bulk_load, insert_many
from ptxbench.engine.categories import BY_STAGE, STAGE_OF, Category

SOURCE = "synthetic: benchmark fixture, not model output"
MODELS = ("synthetic-a", "synthetic-b", "synthetic-c")
CONTEXTS = ("none", "brief", "full")
SAMPLES_PER_TASK = 8
MAX_TURNS = 4

# Lines a synthetic candidate is assembled from: PTX-shaped text so search and
# highlighting have realistic material, clearly marked as a fixture at the top.
_BODY = (
    "    wgmma.fence.sync.aligned;",
    "    wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{%f0, %f1, %f2, %f3}}, %rd{a}, %rd{b}, 1, 1, 1, 0, 0;",
    "    wgmma.commit_group.sync.aligned;",
    "    wgmma.wait_group.sync.aligned 0;",
    "    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r{a}], [%rd{b}, {{%r1, %r2}}], [%r3];",
    "    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r{a}], {n};",
    "    mbarrier.try_wait.parity.shared::cta.b64 %p{a}, [%r{b}], %r4;",
    "    setmaxnreg.inc.sync.aligned.u32 240;",
    "    ld.global.nc.v4.u32 {{%r{a}, %r5, %r6, %r7}}, [%rd{b}];",
    "    st.global.v4.u32 [%rd{a}], {{%r8, %r9, %r10, %r11}};",
    "    fma.rn.f32 %f{a}, %f{b}, %f4, %f{a};",
    "    add.s32 %r{a}, %r{b}, {n};",
    "    setp.lt.u32 %p{a}, %r{b}, {n};",
    "    @%p{a} bra LOOP_{b};",
    "    bar.sync 0;",
    "    tcgen05.mma.cta_group::1.kind::f16 [%r{a}], %rd{b}, %rd5, %r6;",
)

FAILURES = [c for stage in ("extract", "assemble", "load", "run", "verify", "requirement") for c in BY_STAGE[stage]]


def _bodies(rng: random.Random, count: int = 512) -> list[str]:
    """A pool of kernel bodies; each sample takes one and gets its own header line,
    so contents (and hashes) differ while generation stays fast."""
    pool = []
    for _ in range(count):
        lines = [rng.choice(_BODY).format(a=rng.randint(0, 31), b=rng.randint(0, 31), n=rng.randint(1, 4096))
                 for _ in range(rng.randint(8, 28))]
        pool.append("\n".join(lines))
    return pool


def _code(sample_id: int, arch: str, body: str) -> str:
    return (
        f"// synthetic benchmark fixture {sample_id}, not model output\n"
        f".version 8.5\n.target {arch}\n.address_size 64\n"
        ".visible .entry kernel(.param .u64 p0, .param .u64 p1) {\n"
        f"{body}\n    ret;\n}}\n"
    )


def _verdict(rng: random.Random, turn: int, skill: float, arch: str) -> str:
    p_ok = min(0.85, skill * (0.6 + 0.25 * turn))
    if rng.random() < p_ok:
        return Category.OK if rng.random() < 0.55 else "slower_than_baseline"
    return rng.choice(FAILURES)


def build(path: Path, n: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    db = open_store(path)
    db.execute("PRAGMA synchronous = OFF")  # a throwaway fixture: speed over durability
    seed_store(db, Path("/nonexistent-seed-dir"))  # the real tasks (and experts), no seed files
    tasks = [(r[0], r[1], r[2]) for r in db.execute("SELECT id, arch, spec FROM tasks ORDER BY id")]
    timings["open + tasks"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    created = now_iso()
    start_model = (db.execute("SELECT MAX(id) FROM models").fetchone()[0] or 0) + 1
    models = [Model(name=name, kind="synthetic", source=SOURCE, created_at=created, id=start_model + i)
              for i, name in enumerate(MODELS)]
    runs = []
    for model in models:
        for level in CONTEXTS:
            runs.append(Run(model_id=model.id, name=f"{model.name} {level}", source=SOURCE, context_level=level,
                            prompt_version="synthetic", params={"turns": MAX_TURNS, "samples": SAMPLES_PER_TASK},
                            started_at=created, finished_at=created, id=len(runs) + 1))
    skill = {m.id: s for m, s in zip(models, (0.25, 0.45, 0.7))}

    samples: list[Sample] = []
    evaluations: list[Evaluation] = []
    measurements: list[Measurement] = []
    sample_id = (db.execute("SELECT MAX(id) FROM samples").fetchone()[0] or 0) + 1
    eval_id = 1
    sizes = {"M": 4096, "N": 4096, "K": 4096}
    bodies = _bodies(rng)
    while len(samples) < n:
        for run in runs:
            for task_id, arch, _spec in tasks:
                index = len(samples) // (len(runs) * len(tasks))
                parent = None
                for turn in range(1, rng.randint(1, MAX_TURNS) + 1):
                    if len(samples) >= n:
                        break
                    code = _code(sample_id, arch, rng.choice(bodies))
                    samples.append(Sample(
                        task_id=task_id, language="ptx", source=SOURCE, code=code, manifest=None,
                        response=f"synthetic response, turn {turn} (benchmark fixture, not model output)", run_id=run.id,
                        model_id=run.model_id, sample_index=index, turn=turn, parent_id=parent,
                        content_hash=content_hash(code, None), tokens_in=rng.randint(800, 4000),
                        tokens_out=rng.randint(500, 9000), latency_s=round(rng.uniform(2, 90), 2),
                        created_at=created, id=sample_id,
                    ))
                    judgements = 2 if rng.random() < 0.1 else 1  # some samples were re-verified
                    for _ in range(judgements):
                        category = _verdict(rng, turn, skill[run.model_id], arch)
                        evaluations.append(_evaluation(rng, eval_id, sample_id, category, arch, created))
                        if evaluations[-1].correct is not None:
                            for split, count in (("train", 2), ("heldout", 1)):
                                for k in range(count):
                                    speed = evaluations[-1].speedup
                                    measurements.append(Measurement(
                                        split=split, sizes={**sizes, "M": 1024 << k}, evaluation_id=eval_id,
                                        category=category, max_rel_err=rng.uniform(0, 0.02),
                                        time_ms=rng.uniform(0.05, 5.0), time_spread=rng.uniform(0, 0.05),
                                        baseline_ms=rng.uniform(0.05, 5.0),
                                        speedup=speed * rng.uniform(0.8, 1.2) if speed else None,
                                    ))
                        eval_id += 1
                    parent = sample_id
                    sample_id += 1
            if len(samples) >= n:
                break
    timings["generate"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    with bulk_load(db):
        insert_many(db, models)
        insert_many(db, runs)
        insert_many(db, samples)
        # Evaluation ids follow the existing ones (the seeded experts have none yet).
        offset = db.execute("SELECT COALESCE(MAX(id), 0) FROM evaluations").fetchone()[0]
        if offset:
            for e in evaluations:
                e.id += offset  # type: ignore[operator]
            for m in measurements:
                m.evaluation_id += offset  # type: ignore[operator]
        insert_many(db, evaluations)
        insert_many(db, measurements)
        set_meta(db, "synthetic", f"benchmark fixture made by benchmarks/make_big_store.py: {n} samples, seed {seed}; "
                                  "not model output")
    timings["insert"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("ANALYZE")
    db.close()
    timings["checkpoint + analyze"] = time.perf_counter() - t0
    return timings


def _evaluation(rng: random.Random, eval_id: int, sample_id: int, category: str, arch: str, created: str) -> Evaluation:
    stage = STAGE_OF.get(category)
    compiled = stage not in ("extract", "assemble")
    reached_verify = stage in (None, "verify", "requirement", "speed")
    correct = (stage != "verify") if reached_verify else None
    uses = category not in ("required_missing_ptx", "required_missing_sass") if compiled else None
    speedup = None
    if correct:
        speedup = round(rng.lognormvariate(-0.4, 0.5), 4)
        if category == Category.OK:
            speedup = max(speedup, 1.0 + rng.random())
        elif category == Category.SLOWER_THAN_BASELINE:
            speedup = min(speedup, 0.99)
    return Evaluation(
        sample_id=sample_id, engine_version="synthetic", status="judged", category=category, source=SOURCE,
        created_at=created, device="synthetic device", stage=stage, compiled=compiled,
        correct=correct if reached_verify else (False if not compiled else None),
        correct_heldout=(correct and rng.random() < 0.8) if reached_verify else None,
        uses_ptx=uses, uses_sass=(uses and category != Category.REQUIRED_MISSING_SASS) if compiled else None,
        ptx_families=["wgmma", "tma", "mbarrier"] if uses else ["mbarrier"],
        sass_families=["wgmma", "tma"] if uses else [],
        required_missing=[] if uses or uses is None else ["wgmma"],
        resources={"kernel": {"registers": rng.randint(32, 255), "shared": rng.randint(0, 232448), "spills": 0}},
        evidence={"synthetic": True, "message": f"synthetic {category}"} if category != Category.OK else {},
        assembler_log=f"ptxas synthetic fixture: {category} near line {rng.randint(1, 40)}"
        if stage == "assemble" else None,
        time_ms=round(rng.uniform(0.05, 5.0), 4) if speedup else None,
        baseline_ms=round(rng.uniform(0.05, 5.0), 4) if speedup else None,
        speedup=speedup, tflops=round(rng.uniform(50, 700), 1) if speedup else None, id=eval_id,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="the store file to create")
    parser.add_argument("-n", "--samples", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0, help="random seed (the same seed gives the same store)")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    args = parser.parse_args(argv)
    if args.path.exists():
        if not args.force:
            print(f"{args.path} exists; pass --force to replace it", file=sys.stderr)
            return 2
        for suffix in ("", "-wal", "-shm"):
            Path(str(args.path) + suffix).unlink(missing_ok=True)
    timings = build(args.path, args.samples, args.seed)
    for part, seconds in timings.items():
        print(f"{part:>22}: {seconds:6.2f} s")
    print(f"{'total':>22}: {sum(timings.values()):6.2f} s   ({args.path}, {args.path.stat().st_size / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
