"""What one trial's reference costs at each train and held-out size, per task: the `verify` phase of a GPU
judgement computes it for every trial of every size (a trial's reference is not kept between jobs,
engine/gpu/datacache.py), so this is where that phase's seconds go.

For each size: the inputs drawn once (tasks.inputs.make_inputs, seed 1), then, side by side, the
reference as the worker computes it (TF32 tensor cores), its `exact=True` form (float64 GEMM, float32
attention without TF32: what every reference was to engine 0.6), and at a held-out size of a task with
`heldout_rows` the sample of rows a trial computes; each timed `--repeat` times (wall clock around a
synchronised call; the reference is many kernels and host loops, so events around it would say the same);
medians, and each size's share of the task's total. `--errors`: each size's error against float64
(tasks.reference.own_error; attention on one batch and two heads at that S).

Usage (on a GPU machine): python3 benchmarks/reference_cost.py [--tasks attn_fwd_sm90a,...] [--repeat 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from ptxbench.engine.gpu.datacache import row_sample
from ptxbench.engine.pipeline import TRIALS
from ptxbench.tasks.inputs import make_inputs
from ptxbench.tasks.reference import own_error, reference
from ptxbench.tasks.spec import get_task

DEFAULT_TASKS = "gemm_bf16_sm90a,attn_fwd_sm90a,attn_bwd_sm90a,rmsnorm_bf16_sm90a"


def _median_s(task: Any, inputs: dict[str, torch.Tensor], device: torch.device, repeat: int, **kw: Any) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        out = reference(task, inputs, **kw)
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - began)
        del out
    return round(statistics.median(times), 4)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=DEFAULT_TASKS)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--errors", action="store_true", help="each size's error against float64 too")
    args = ap.parse_args()
    device = torch.device("cuda")
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(device), "trials_per_size": TRIALS + 1, "tasks": {}}
    for task_id in args.tasks.split(","):
        task = get_task(task_id)
        rows = []
        for split, sizes in [("train", s) for s in task.train] + [("heldout", s) for s in task.heldout]:
            inputs = make_inputs(task, dict(sizes), 1, device)
            torch.cuda.synchronize(device)
            row: dict[str, Any] = {"split": split, "sizes": dict(sizes), "reference_s": _median_s(task, inputs, device, args.repeat),
                                   "exact_s": _median_s(task, inputs, device, args.repeat, exact=True)}
            sample = row_sample(sizes.get("S", 0), task.tolerance.heldout_rows) if split == "heldout" else None
            if sample is not None:
                row["sampled_rows"] = sample.numel()
                row["sampled_s"] = _median_s(task, inputs, device, args.repeat, rows=sample)
            row["trial_s"] = row.get("sampled_s", row["reference_s"])
            if args.errors:
                small = dict(sizes, B=1, H=2) if "B" in sizes and "H" in sizes else dict(sizes)
                x = make_inputs(task, small, 5, device)
                row["error"] = own_error(task, x, rows=row_sample(small.get("S", 0), task.tolerance.heldout_rows)
                                         if split == "heldout" else None)
                del x
            rows.append(row)
            del inputs
            torch.cuda.empty_cache()
        total = sum(r["trial_s"] for r in rows)
        exact = sum(r["exact_s"] for r in rows)
        for r in rows:
            r["share"] = round(r["trial_s"] / total, 3) if total else None
        # A judgement computes one reference per trial (the seeds and the job's own set) at every size.
        report["tasks"][task_id] = {"sizes": rows, "one_trial_every_size_s": round(total, 3),
                                    "per_judgement_s": round(total * (TRIALS + 1), 3),
                                    "exact_one_trial_every_size_s": round(exact, 3)}
        print(f"{task_id}: {total:.3f} s a trial over {len(rows)} sizes (exact forms, every row: {exact:.3f} s), "
              f"about {total * (TRIALS + 1):.2f} s a judgement ({TRIALS + 1} trials a size)")
        for r in rows:
            errs = " ".join(f"{k}:{e['rel_l2']:.1e}/{e['tolerance']:.0e}" for k, e in r.get("error", {}).items())
            print(f"  {r['split']:8s} {' '.join(f'{k}={v}' for k, v in r['sizes'].items()):36s} "
                  f"{r['trial_s']:.4f} s  ({r['share']:.0%})  full {r['reference_s']:.4f} s  exact {r['exact_s']:.4f} s  "
                  f"{errs}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
