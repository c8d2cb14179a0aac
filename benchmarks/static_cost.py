"""Median cost of the static stages (extract → assemble → inspect) per candidate, PTX and CUDA apart.

    python benchmarks/static_cost.py [--count 60] [--jobs 1]

Candidates are the engine's test fixtures (compiler-made GEMMs for sm_90a
and sm_100a, hand-written family modules, a module with a syntax error; CUDA
C++ GEMMs and small kernels that go through nvcc), each made unique by
renaming its entry so that no two share a cache entry. The batch is judged
cold one candidate at a time (an empty cache), cold as one batch
(engine.static_batch: one nvdisasm run for all the cubins; another empty
cache), and cached (the same batch again, the whole verdict read back).
Prints medians by language and by kind.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from ptxbench.engine.cache import Cache
from ptxbench.engine.candidate import Candidate
from ptxbench.engine.static import judge_static
from ptxbench.engine.static_batch import judge_static_many
from ptxbench.engine.toolchain import tool_versions

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"

# (file, entry name, arch, requested families)
SOURCES: list[tuple[str, str, str, list[str]]] = [
    ("ptx/triton_gemm_sm90a_v94.ptx", "matmul_tma", "sm_90a", ["wgmma", "tma", "mbarrier"]),
    ("ptx/triton_gemm_sm100a.ptx", "matmul_tma", "sm_100a", ["tcgen05_mma", "tcgen05_alloc", "tcgen05_ld", "tma", "mbarrier"]),
    ("ptx/families_sm90a.ptx", "families", "sm_90a", ["setmaxnreg", "cluster", "bulk_copy"]),
    ("ptx/gemm_sm90a.cu", "gemm", "sm_90a", ["wgmma", "tma", "mbarrier"]),
    ("ptx/families_sm100a.ptx", "tc_families", "sm_100a", ["tcgen05_cp", "tcgen05_st"]),
    ("ptx/gemm_sm100a.cu", "gemm", "sm_100a", ["tcgen05_mma", "tcgen05_alloc"]),
    ("ptx/assemble/syntax.ptx", "k", "sm_90a", []),
    ("cuda/relaxed_constexpr.cu", "scale", "sm_90a", []),
    ("ptx/two_entries_sm90a.ptx", "tile_mma", "sm_90a", ["wgmma", "pdl"]),
    ("cuda/templated_add.cu", "add_tile", "sm_90a", []),
]


def make_batch(count: int) -> list[tuple[str, Candidate, str, list[str]]]:
    batch = []
    for i in range(count):
        name, entry, arch, families = SOURCES[i % len(SOURCES)]
        path = DATA / name
        language = "cuda" if path.suffix == ".cu" else "ptx"
        # A renamed entry changes the cubin too, so neither the assembly nor
        # the disassembly of one variant can be served from another's entry.
        code = re.sub(rf"\b{entry}\b", f"{entry}_v{i}", path.read_text())
        batch.append((name, Candidate(language, code, None, f"bench:{name}#{i}"), arch, families))
    return batch


Result = tuple[str, float, str, bool, dict[str, float]]


def judge_one(args: tuple[str, Candidate, str, list[str], str]) -> Result:
    name, candidate, arch, families, cache_dir = args
    started = time.perf_counter()
    verdict = judge_static(candidate, arch=arch, require=families, cache=Cache(cache_dir))
    return name, time.perf_counter() - started, verdict.category, verdict.cached, verdict.seconds


def run_batch(batch, cache_dir: str, jobs: int) -> list[Result]:
    work = [(name, cand, arch, fams, cache_dir) for name, cand, arch, fams in batch]
    if jobs <= 1:
        return [judge_one(w) for w in work]
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(judge_one, work))


def report(label: str, results: list[Result], wall: float) -> None:
    times = [r[1] for r in results]
    print(f"\n{label}: {len(results)} candidates in {wall:.2f} s wall; "
          f"median {statistics.median(times) * 1000:.0f} ms per candidate "
          f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}); "
          f"{sum(r[3] for r in results)} served from the cache")
    for language, suffix in (("PTX", ".ptx"), ("CUDA", ".cu")):
        ts = [r[1] for r in results if r[0].endswith(suffix)]
        if ts:
            print(f"  {language:4s} n={len(ts):3d}  median {statistics.median(ts) * 1000:7.1f} ms  "
                  f"(min {min(ts) * 1000:.1f}, max {max(ts) * 1000:.1f})")
    by_kind: dict[str, list[Result]] = {}
    for r in results:
        by_kind.setdefault(r[0], []).append(r)
    for name, rs in by_kind.items():
        stages = sorted({k for r in rs for k in r[4]} - {"total", "extract"})
        parts = "  ".join(
            f"{k} {statistics.median([r[4].get(k, 0.0) for r in rs]) * 1000:.0f}" for k in stages
        )
        print(f"  {name:30s} n={len(rs):3d}  {rs[0][2]:22s} median {statistics.median([r[1] for r in rs]) * 1000:7.1f} ms"
              f"   ({parts + ' ms' if parts else 'the whole verdict from the cache'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=60)
    parser.add_argument("--jobs", type=int, default=1, help="processes judging in parallel")
    args = parser.parse_args()

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.processor() or platform.platform()}, "
          f"Python {platform.python_version()}")
    print("tools: " + ", ".join(f"{k} {v}" for k, v in tool_versions().items()))
    batch = make_batch(args.count)
    with tempfile.TemporaryDirectory(prefix="ptxbench-bench-cache-") as cache_dir:
        t = time.perf_counter()
        cold = run_batch(batch, cache_dir, args.jobs)
        report("cold (empty cache)", cold, time.perf_counter() - t)
        t = time.perf_counter()
        warm = run_batch(batch, cache_dir, args.jobs)
        report("cached (same batch again)", warm, time.perf_counter() - t)
        if [r[2] for r in cold] != [r[2] for r in warm]:
            print("error: a cached verdict differs from the cold one", file=sys.stderr)
            sys.exit(1)
    with tempfile.TemporaryDirectory(prefix="ptxbench-bench-batch-") as cache_dir:
        t = time.perf_counter()
        verdicts = judge_static_many([dict(candidate_or_file=c, arch=a, require=f) for _, c, a, f in batch],
                                     cache=Cache(cache_dir))
        wall = time.perf_counter() - t
        print(f"\ncold, as one batch (one nvdisasm run per arch): {len(batch)} candidates in {wall:.2f} s wall; "
              f"{wall / len(batch) * 1000:.0f} ms per candidate")
        for language, suffix in (("PTX", ".ptx"), ("CUDA", ".cu")):
            part = [b for b in batch if b[0].endswith(suffix)]
            if not part:
                continue
            with tempfile.TemporaryDirectory(prefix="ptxbench-bench-batch-") as sub:
                t = time.perf_counter()
                judge_static_many([dict(candidate_or_file=c, arch=a, require=f) for _, c, a, f in part],
                                  cache=Cache(sub))
                took = time.perf_counter() - t
            print(f"  {language:4s} n={len(part):3d}  {took:.2f} s wall, {took / len(part) * 1000:.0f} ms per candidate")
        if [v.category for v in verdicts] != [r[2] for r in cold]:
            print("error: a batch verdict differs from the one-at-a-time one", file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
