"""What one trial's reference costs at each train and held-out size, per task: the `verify` phase of a GPU
judgement computes it for every trial of every size (a trial's reference is not kept between jobs,
engine/gpu/datacache.py), so this is where that phase's seconds go.

For each size: the inputs drawn once (tasks.inputs.make_inputs, seed 1), then tasks.reference.reference
timed `--repeat` times (wall clock around a synchronised call; the reference is many kernels and host
loops, so events around it would say the same); medians, and each size's share of the task's total.

Usage (on a GPU machine): python3 benchmarks/reference_cost.py [--tasks attn_fwd_sm90a,...] [--repeat 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from ptxbench.engine.pipeline import TRIALS
from ptxbench.tasks.inputs import make_inputs
from ptxbench.tasks.reference import reference
from ptxbench.tasks.spec import get_task

DEFAULT_TASKS = "gemm_bf16_sm90a,attn_fwd_sm90a,attn_bwd_sm90a,rmsnorm_bf16_sm90a"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=DEFAULT_TASKS)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    device = torch.device("cuda")
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(device), "trials_per_size": TRIALS + 1, "tasks": {}}
    for task_id in args.tasks.split(","):
        task = get_task(task_id)
        rows = []
        for split, sizes in [("train", s) for s in task.train] + [("heldout", s) for s in task.heldout]:
            inputs = make_inputs(task, dict(sizes), 1, device)
            torch.cuda.synchronize(device)
            times = []
            for _ in range(args.repeat):
                began = time.perf_counter()
                out = reference(task, inputs)
                torch.cuda.synchronize(device)
                times.append(time.perf_counter() - began)
                del out
            rows.append({"split": split, "sizes": dict(sizes), "reference_s": round(statistics.median(times), 4)})
            del inputs
            torch.cuda.empty_cache()
        total = sum(r["reference_s"] for r in rows)
        for r in rows:
            r["share"] = round(r["reference_s"] / total, 3) if total else None
        # A judgement computes one reference per trial (the seeds and the job's own set) at every size.
        report["tasks"][task_id] = {"sizes": rows, "one_trial_every_size_s": round(total, 3),
                                    "per_judgement_s": round(total * (TRIALS + 1), 3)}
        print(f"{task_id}: {total:.3f} s a trial over {len(rows)} sizes, about {total * (TRIALS + 1):.2f} s a judgement "
              f"({TRIALS + 1} trials a size)")
        for r in rows:
            print(f"  {r['split']:8s} {' '.join(f'{k}={v}' for k, v in r['sizes'].items()):36s} "
                  f"{r['reference_s']:.4f} s  ({r['share']:.0%})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
