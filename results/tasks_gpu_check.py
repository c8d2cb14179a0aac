"""Check the task references and library baselines on a CUDA device; print a table.

For each sm_90a task at its headline size: draw inputs, run the reference
(time and peak memory), run every library baseline once and compare it with
the reference against the task's tolerance, then time it (median of 30 with
device events, L2 flushed between repetitions). Also runs the largest
held-out references (attention S=16384) to show they fit.

Usage: python results/tasks_gpu_check.py [--out report.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time

import torch

from ptxbench.tasks.baselines import BaselineUnavailable, library_fns
from ptxbench.tasks.inputs import make_inputs
from ptxbench.tasks.reference import reference
from ptxbench.tasks.spec import get_task

TASKS = ["gemm_bf16_sm90a", "attn_fwd_sm90a", "attn_fwd_causal_sm90a", "attn_bwd_sm90a",
         "attn_bwd_causal_sm90a", "rmsnorm_bf16_sm90a", "vector_add_smoke"]
HELDOUT = [("attn_fwd_causal_sm90a", -1), ("attn_bwd_sm90a", -1), ("gemm_bf16_sm90a", -1), ("rmsnorm_bf16_sm90a", 0)]


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def timed(fn, reps: int = 30) -> float:
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")   # 256 MiB > the 60 MiB L2
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def reference_run(task, sizes, seed=0):
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    x = make_inputs(task, sizes, seed, "cuda")
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    ref = reference(task, x)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return x, ref, t1 - t0, t2 - t1, torch.cuda.max_memory_allocated() / 2**30


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="report.json")
    args = ap.parse_args()
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "headline": [], "heldout": []}
    try:
        import flash_attn  # noqa: F401
        report["flash_attn"] = flash_attn.__version__
    except ImportError:
        report["flash_attn"] = None
    for task_id in TASKS:
        task = get_task(task_id)
        sizes = task.headline
        x, ref, t_in, t_ref, peak = reference_run(task, sizes)
        row = {"task": task_id, "sizes": sizes, "inputs_s": round(t_in, 3), "reference_s": round(t_ref, 3),
               "peak_gib": round(peak, 2), "baselines": []}
        try:
            for base in library_fns(task, x, sizes):
                base()
                torch.cuda.synchronize()
                errs = {n: rel_l2(o, ref[n]) for n, o in base.outputs.items()}
                ok = all(e < task.tolerance.max_for(n) for n, e in errs.items())
                ms = timed(base)
                row["baselines"].append({"name": base.name, "rel_l2": errs, "within_tolerance": ok, "ms": ms,
                                         "tflops": task.flops(sizes) / ms / 1e9,
                                         "gbps": task.bytes(sizes) / ms / 1e6})
        except BaselineUnavailable as exc:
            row["baselines"].append({"error": str(exc)})
        report["headline"].append(row)
        del x, ref
        torch.cuda.empty_cache()
    for task_id, index in HELDOUT:
        task = get_task(task_id)
        sizes = task.heldout[index]
        x, ref, t_in, t_ref, peak = reference_run(task, sizes)
        finite = all(bool(torch.isfinite(v).all()) for v in ref.values())
        report["heldout"].append({"task": task_id, "sizes": sizes, "inputs_s": round(t_in, 2),
                                  "reference_s": round(t_ref, 2), "peak_gib": round(peak, 1), "finite": finite})
        del x, ref
        torch.cuda.empty_cache()
    with open(args.out, "w") as fh:
        json.dump(report, fh, indent=1)
    print(f"{report['device']}  torch {report['torch']}  cuDNN {report['cudnn']}  flash_attn {report['flash_attn']}")
    print(f"{'task':24} {'ref s':>6} {'GiB':>5}  {'baseline':30} {'ms':>8} {'TFLOP/s':>8} {'GB/s':>7}  rel_l2")
    for row in report["headline"]:
        for b in row["baselines"]:
            if "error" in b:
                print(f"{row['task']:24} {row['reference_s']:6.2f} {row['peak_gib']:5.1f}  {b['error']}")
                continue
            errs = " ".join(f"{n}={e:.1e}" for n, e in b["rel_l2"].items())
            print(f"{row['task']:24} {row['reference_s']:6.2f} {row['peak_gib']:5.1f}  {b['name']:30} {b['ms']:8.3f} "
                  f"{b['tflops']:8.1f} {b['gbps']:7.0f}  {errs} {'ok' if b['within_tolerance'] else 'OVER TOLERANCE'}")
    for row in report["heldout"]:
        print(f"held-out {row['task']:24} {row['sizes']}  inputs {row['inputs_s']}s  reference {row['reference_s']}s  "
              f"peak {row['peak_gib']} GiB  finite={row['finite']}")


if __name__ == "__main__":
    main()
