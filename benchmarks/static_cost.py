"""Median cost of the static stages (extract → assemble → inspect) per candidate.

    python benchmarks/static_cost.py [--count 50] [--jobs 1]

Candidates are the engine's test fixtures (compiler-made GEMMs for sm_90a
and sm_100a, hand-written family modules, a CUDA C++ GEMM that goes through
nvcc, a module with a syntax error), each made unique with a comment so that
no two share a cache entry. The batch is judged twice: cold (an empty cache)
and cached (the same batch again). Prints medians overall and by kind.
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
from ptxbench.engine.toolchain import tool_versions

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "ptx"

# (file, entry name, arch, requested families)
SOURCES: list[tuple[str, str, str, list[str]]] = [
    ("triton_gemm_sm90a.ptx", "matmul_tma", "sm_90a", ["wgmma", "tma", "mbarrier"]),
    ("triton_gemm_sm100a.ptx", "matmul_tma", "sm_100a", ["tcgen05_mma", "tcgen05_alloc", "tcgen05_ld", "tma", "mbarrier"]),
    ("families_sm90a.ptx", "families", "sm_90a", ["setmaxnreg", "cluster", "bulk_copy"]),
    ("families_sm100a.ptx", "tc_families", "sm_100a", ["tcgen05_cp", "tcgen05_st"]),
    ("gemm_sm90a.cu", "gemm", "sm_90a", ["wgmma", "tma", "mbarrier"]),
    ("assemble/syntax.ptx", "k", "sm_90a", []),
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
    by_kind: dict[str, list[Result]] = {}
    for r in results:
        by_kind.setdefault(r[0], []).append(r)
    for name, rs in by_kind.items():
        stages = sorted({k for r in rs for k in r[4]} - {"total", "extract"})
        parts = "  ".join(
            f"{k} {statistics.median([r[4].get(k, 0.0) for r in rs]) * 1000:.0f}" for k in stages
        )
        print(f"  {name:26s} n={len(rs):3d}  {rs[0][2]:22s} median {statistics.median([r[1] for r in rs]) * 1000:7.1f} ms"
              f"   ({parts} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50)
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


if __name__ == "__main__":
    main()
