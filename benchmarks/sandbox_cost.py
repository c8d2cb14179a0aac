"""What the sandbox (engine/sandbox.py) costs the static stage, measured side by side with it off.

    python benchmarks/sandbox_cost.py [--rounds 5] [--big-parent]

For each candidate of benchmarks/static_cost.py's set (PTX and CUDA, compiler-made GEMMs and small
kernels), rounds alternate between the sandbox on and off (PTXBENCH_SANDBOX=off: the tools get the
judge's environment trimmed the same way but no limits and no Landlock), each with its own empty
cache and the entry renamed, so nothing is served from another run: the cold static stage. Then the
same candidates again from the cache (the cached path, each round's figure the median of 25 reads). Also the cost of starting one trivial tool
process (`ptxas --version`) both ways. Prints medians per kind and the on/off ratios.
`--big-parent` imports torch first: a process that forks (preexec_fn rules out vfork) pays for its
page tables, and the CLI with torch loaded is the largest parent the static stage runs in.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from static_cost import make_batch

from ptxbench.engine import sandbox
from ptxbench.engine.cache import Cache
from ptxbench.engine.static import judge_static
from ptxbench.engine.toolchain import find_tool, run_tool, tool_versions


CACHED_READS = 25


def _mode(on: bool) -> None:
    if on:
        os.environ.pop("PTXBENCH_SANDBOX", None)
    else:
        os.environ["PTXBENCH_SANDBOX"] = "off"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="cold judgements of each candidate, each way")
    parser.add_argument("--big-parent", action="store_true", help="import torch first (a large parent process)")
    args = parser.parse_args()
    if args.big_parent:
        import torch  # noqa: F401

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"kernel {platform.release()}; sandbox here: {sandbox.describe()}"
          + (" (torch imported)" if args.big_parent else ""))
    print("tools: " + ", ".join(f"{k} {v}" for k, v in tool_versions().items()))

    # One process start, both ways, interleaved.
    starts: dict[bool, list[float]] = {True: [], False: []}
    ptxas = str(find_tool("ptxas"))
    with tempfile.TemporaryDirectory() as job:
        for i in range(40):
            on = i % 2 == 0
            _mode(on)
            t = time.perf_counter()
            run_tool([ptxas, "--version"], timeout=30, cwd=job)
            starts[on].append(time.perf_counter() - t)
    on_s, off_s = statistics.median(starts[True]), statistics.median(starts[False])
    print(f"\none tool process (ptxas --version), medians of 20: sandbox on {on_s * 1000:.2f} ms, "
          f"off {off_s * 1000:.2f} ms, on/off {on_s / off_s:.3f}")

    kinds = make_batch(10)      # one of each source kind
    cold: dict[tuple[str, bool], list[float]] = {}
    cached: dict[tuple[str, bool], list[float]] = {}
    for r in range(args.rounds):
        for name, cand, arch, fams in kinds:
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                _mode(on)
                with tempfile.TemporaryDirectory(prefix="ptxbench-sbx-") as cache_dir:
                    store = Cache(cache_dir)
                    t = time.perf_counter()
                    v = judge_static(cand, arch=arch, require=fams, cache=store)
                    cold.setdefault((name, on), []).append(time.perf_counter() - t)
                    reads = []
                    for _ in range(CACHED_READS):       # a read is under a millisecond: one alone is noise
                        t = time.perf_counter()
                        again = judge_static(cand, arch=arch, require=fams, cache=store)
                        reads.append(time.perf_counter() - t)
                        assert again.cached and again.category == v.category, (name, v.category, again.category)
                    cached.setdefault((name, on), []).append(statistics.median(reads))
    _mode(True)

    def table(title: str, data: dict[tuple[str, bool], list[float]]) -> None:
        print(f"\n{title} (medians of {args.rounds}, ms): kind, on, off, on/off")
        ratios = {"ptx": [], "cuda": []}
        for name, *_ in kinds:
            a, b = statistics.median(data[(name, True)]), statistics.median(data[(name, False)])
            ratios["cuda" if name.endswith(".cu") else "ptx"].append(a / b)
            print(f"  {name:36s} {a * 1000:8.1f} {b * 1000:8.1f}  {a / b:.3f}")
        for lang, rs in ratios.items():
            print(f"  {lang.upper():4s} median of the kinds' ratios: {statistics.median(rs):.3f}")

    table("cold static stage", cold)
    table("cached static stage", cached)


if __name__ == "__main__":
    main()
