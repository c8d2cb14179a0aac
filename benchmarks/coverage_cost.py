"""What the marked copy (engine/coverage.py) adds to the static stages, per expert.

Each sm_90a expert is judged statically `--repeat` times without the verdict cache; the verdict's own
clock says how long the whole static judgement took, how long the candidate's assembly took, and how
long the marked copy took to make (instrumenting the PTX, and one more ptxas run). Medians. The GPU
side (one launch of the copy per size) is in the GPU suite's pipeline benchmark.

Usage: python benchmarks/coverage_cost.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics

from ptxbench.engine.static import judge_static
from ptxbench.tasks.spec import get_task

EXPERTS = ("gemm_bf16_sm90a", "attn_fwd_sm90a", "attn_bwd_sm90a", "rmsnorm_bf16_sm90a")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; medians of {args.repeat}")
    for task_id in EXPERTS:
        task = get_task(task_id)
        folder = task.expert_dir()
        assert folder is not None
        verdicts = [judge_static(folder / "kernel.ptx", task, use_cache=False) for _ in range(args.repeat)]
        if any(v.coverage_cubin is None for v in verdicts):
            raise SystemExit(f"{task_id}: no marked copy was made ({verdicts[0].coverage.get('error', 'no coverage')})")
        runs = [v.seconds for v in verdicts]
        total, own, marked = (statistics.median(s.get(k, 0.0) for s in runs) for k in ("total", "assemble", "coverage"))
        print(f"{task_id:22s} static {total:.3f} s: the candidate's assembly {own:.3f} s, "
              f"the marked copy {marked:.3f} s ({marked / total:.0%} of the static stages)")


if __name__ == "__main__":
    main()
