"""The full pipeline on a batch of GEMM candidates: seconds per candidate, and how trustworthy the timing is.

The batch: the expert GEMM (tasks/solutions/gemm_bf16_sm90a) and variants of
it, each a distinct file so nothing is served from the assembly cache: 80 %
correct copies (a comment line differs), 10 % with the A tensor map's
swizzle dropped (wrong_result), 10 % with an argument missing
(param_mismatch, decided before the GPU). Every candidate goes through
assemble, inspect, 4 trials at each train and held-out size, and timing at
the headline size against cuBLAS; the static stages of the next candidates
run on CPU threads while the GPU judges the current one.

Then: the same kernel timed twice (agreement), and our cuBLAS timing against
`triton.testing.do_bench` on the same operation.

Usage (on a GPU machine): python benchmarks/gpu_pipeline.py [--n 100] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ptxbench.engine.candidate import Candidate
from ptxbench.engine.extract import load_candidate_file
from ptxbench.engine.manifest import parse_manifest
from ptxbench.engine.pipeline import Judgement, judge
from ptxbench.engine.runner import Runner
from ptxbench.engine.static import judge_static
from ptxbench.tasks.spec import get_task

TASK = "gemm_bf16_sm90a"


# The small single-stage wgmma GEMM in the static tests' data, with the launch it needs: a second base
# for the batch when the expert cannot be used here.
SIMPLE_GEMM = Path(__file__).resolve().parents[1] / "tests" / "data" / "ptx" / "gemm_sm90a.cu"
SIMPLE_MANIFEST = {
    "launches": [{"entry": "gemm", "grid": ["N // 128", "M // 64", 1], "block": [128, 1, 1],
                  "args": ["tmap:tmA", "tmap:tmB", "C", "i32:M", "i32:N", "i32:K"]}],
    "tensor_maps": {"tmA": {"tensor": "A", "box": [64, 64], "swizzle": "128B"},
                    "tmB": {"tensor": "B", "box": [128, 64], "swizzle": "128B"}},
}


def base_candidates() -> list[tuple[str, Candidate]]:
    task = get_task(TASK)
    found: list[tuple[str, Candidate]] = []
    expert = task.expert_dir()
    if expert is not None and (expert / "kernel.ptx").exists():
        loaded = load_candidate_file(expert / "kernel.ptx")
        if loaded.ok and loaded.candidate is not None:
            found.append((f"expert {expert.name}", loaded.candidate))
    if SIMPLE_GEMM.exists():
        found.append((str(SIMPLE_GEMM.relative_to(SIMPLE_GEMM.parents[3])),
                      Candidate("cuda", SIMPLE_GEMM.read_text(), parse_manifest(SIMPLE_MANIFEST), "simple gemm")))
    return found


def choose_base(runner: Runner) -> tuple[str, Candidate, list[dict]]:
    """The first base that is correct at the smallest train size; the batch varies it as PTX."""
    task = get_task(TASK)
    tried = []
    for name, cand in base_candidates():
        static = judge_static(cand, task)
        j = judge(cand, task, runner=runner, static=static, sizes=[("train", task.train[0])])
        tried.append({"base": name, "static": static.category, "category": j.category, "correct": j.correct,
                      "message": next((m.message for m in j.measurements if m.message), "")[:400]})
        if j.correct and static.ptx:
            return name, Candidate("ptx", static.ptx, cand.manifest, name), tried
    sys.exit(f"no correct GEMM base: {tried}")


def variants(base: Candidate, n: int) -> list[tuple[str, Candidate]]:
    manifest = base.manifest.to_dict() if base.manifest else {}
    out: list[tuple[str, Candidate]] = []
    for i in range(n):
        code = base.code + f"\n// batch variant {i}\n"
        kind = "correct"
        m = json.loads(json.dumps(manifest))
        if i % 10 == 8 and "tmA" in m.get("tensor_maps", {}):
            kind = "no_swizzle"
            m["tensor_maps"]["tmA"]["swizzle"] = "none"
        elif i % 10 == 9 and m.get("launches"):
            kind = "missing_arg"
            m["launches"][0]["args"] = m["launches"][0]["args"][:-1]
        out.append((kind, Candidate(base.language, code, parse_manifest(m) if m else None, f"batch:{i}:{kind}")))
    return out


def row(kind: str, j: Judgement, static_s: float, judge_s: float) -> dict:
    return {
        "kind": kind, "category": j.category, "status": j.status, "correct": j.correct,
        "correct_heldout": j.correct_heldout, "static_s": round(static_s, 4), "gpu_s": round(judge_s, 4),
        "time_ms": j.time_ms, "baseline_ms": j.baseline_ms, "speedup": j.speedup, "tflops": j.tflops,
        "spread": next((m.time_spread for m in j.measurements if m.time_spread is not None), None),
    }


def run_batch(n: int, runner: Runner, threads: int, base: Candidate) -> dict:
    task = get_task(TASK)
    batch = variants(base, n)
    # Warm the worker (CUDA context, cuBLAS, references) on the base: that cost is once per batch.
    t = time.perf_counter()
    warm = judge(base, task, runner=runner)
    warm_s = time.perf_counter() - t

    def static_of(item: tuple[str, Candidate]) -> tuple[object, float]:
        s = time.perf_counter()
        verdict = judge_static(item[1], task)
        return verdict, time.perf_counter() - s

    rows = []
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        statics = [pool.submit(static_of, item) for item in batch]
        for (kind, cand), fut in zip(batch, statics):
            verdict, static_s = fut.result()
            s = time.perf_counter()
            j = judge(cand, task, runner=runner, static=verdict)
            rows.append(row(kind, j, static_s, time.perf_counter() - s))
    wall = time.perf_counter() - started
    correct = [r for r in rows if r["kind"] == "correct"]
    per = [r["static_s"] + r["gpu_s"] for r in rows]
    summary = {
        "candidates": len(rows),
        "wall_s": round(wall, 3),
        "wall_per_candidate_s": round(wall / len(rows), 4),
        "median_gpu_s": round(statistics.median(r["gpu_s"] for r in rows), 4),
        "median_static_s": round(statistics.median(r["static_s"] for r in rows), 4),
        "median_static_plus_gpu_s": round(statistics.median(per), 4),
        "median_gpu_s_correct": round(statistics.median(r["gpu_s"] for r in correct), 4) if correct else None,
        "warmup_first_candidate_s": round(warm_s, 3),
        "categories": {c: sum(1 for r in rows if r["category"] == c) for c in sorted({r["category"] for r in rows})},
        "expected_kinds": {k: sum(1 for r in rows if r["kind"] == k) for k in ("correct", "no_swizzle", "missing_arg")},
        "warm_judgement": {"category": warm.category, "time_ms": warm.time_ms, "tflops": warm.tflops,
                           "baseline_ms": warm.baseline_ms, "speedup": warm.speedup,
                           "messages": [m.message for m in warm.measurements if m.message][:3]},
        "reference_cache": warm.evidence.get("reference_cache"),
    }
    timed = [r for r in correct if r["time_ms"]]
    if timed:
        summary["candidate_time_ms_median"] = statistics.median(r["time_ms"] for r in timed)
        summary["baseline_ms_median"] = statistics.median(r["baseline_ms"] for r in timed if r["baseline_ms"])
        summary["speedup_median"] = statistics.median(r["speedup"] for r in timed if r["speedup"])
        summary["tflops_median"] = statistics.median(r["tflops"] for r in timed)
        times = [r["time_ms"] for r in timed]
        summary["candidate_time_ms_range"] = [min(times), max(times)]
    last = judge(base, task, runner=runner, sizes=[("train", task.headline)])
    summary["reference_cache_after"] = last.evidence.get("reference_cache")
    return {"summary": summary, "rows": rows}


class ClockLog:
    """The SM clock (MHz) and board power (W), sampled by nvidia-smi every 100 ms while the block runs: what
    state the GPU was in while each way of timing ran (our rounds against do_bench's back-to-back launches)."""

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self.proc: subprocess.Popen[str] | None = None
        self.samples: list[tuple[float, float]] = []

    def __enter__(self) -> ClockLog:
        if shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(
                ["nvidia-smi", "-i", str(self.index), "--query-gpu=clocks.sm,power.draw",
                 "--format=csv,noheader,nounits", "-lms", "100"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            out, _ = self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        for line in out.splitlines():
            try:
                mhz, watts = (float(x) for x in line.split(","))
            except ValueError:          # "[N/A]" or a cut line
                continue
            self.samples.append((mhz, watts))

    def summary(self) -> dict:
        if not self.samples:
            return {"samples": 0}
        return {"samples": len(self.samples), "sm_mhz_median": statistics.median(m for m, _ in self.samples),
                "power_w_median": statistics.median(w for _, w in self.samples),
                "power_w_max": max(w for _, w in self.samples)}


def repeat_timing(runner: Runner, base: Candidate, times: int = 3) -> dict:
    """The same kernel judged back to back at the headline size: how far apart are the medians?"""
    task = get_task(TASK)
    sizes = [("train", task.headline)]
    runs = [judge(base, task, runner=runner, sizes=sizes) for _ in range(times)]
    cand = [r.time_ms for r in runs]
    base_ms = [r.baseline_ms for r in runs]
    speed = [r.speedup for r in runs]

    def worst_step(xs: list) -> float | None:
        if any(x is None for x in xs):
            return None
        return max(abs(b - a) / a for a, b in zip(xs, xs[1:]))

    out = {"candidate_ms": cand, "baseline_ms": base_ms, "speedup": speed, "reps": [
        next((m.detail.get("timing", {}).get("reps") for m in r.measurements if m.time_ms), None) for r in runs]}
    out["candidate_diff"] = worst_step(cand)
    out["baseline_diff"] = worst_step(base_ms)
    out["speedup_diff"] = worst_step(speed)
    out["within_2_percent"] = bool((out["candidate_diff"] or 1) < 0.02 and (out["baseline_diff"] or 1) < 0.02)
    return out


def check_cost(runner: Runner, base: Candidate, runs: int = 3) -> dict:
    """GPU seconds of a headline-size judgement with the random checked rounds and without them."""
    from ptxbench.engine.gpu.protocol import TimingConfig

    task = get_task(TASK)
    sizes = [("train", task.headline)]

    def gpu_s(timing: TimingConfig) -> float:
        return statistics.median(judge(base, task, runner=runner, sizes=sizes, timing=timing).seconds["gpu"]
                                 for _ in range(runs))

    with_checks = gpu_s(TimingConfig())
    without = gpu_s(TimingConfig(check_fraction=0.0, min_checks=0))
    return {"with_checks_s": with_checks, "without_checks_s": without, "extra_s": with_checks - without,
            "runs": runs}


def do_bench_check(our_baseline_ms: float | None) -> dict:
    """cuBLAS through torch.matmul at the headline size, timed by triton.testing.do_bench (median)."""
    import torch
    from triton.testing import do_bench

    from ptxbench.tasks.inputs import make_inputs

    task = get_task(TASK)
    x = make_inputs(task, task.headline, 1, "cuda")
    a, b = x["A"], x["B"]
    c = torch.empty(a.shape[0], b.shape[0], dtype=a.dtype, device=a.device)
    bt = b.T
    with ClockLog() as clocks:
        ms = [do_bench(lambda: torch.matmul(a, bt, out=c), warmup=25, rep=100, return_mode="median")  # noqa: F821 - runs before the del
              for _ in range(3)]
    out = {"do_bench_ms": ms, "do_bench_median_ms": statistics.median(ms), "ours_ms": our_baseline_ms,
           "clocks": clocks.summary()}
    if our_baseline_ms:
        out["diff"] = abs(our_baseline_ms - out["do_bench_median_ms"]) / out["do_bench_median_ms"]
        out["within_3_percent"] = out["diff"] < 0.03
    del a, b, c, x
    torch.cuda.empty_cache()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report: dict = {"task": TASK}
    with Runner() as runner:
        device = runner.start()
        if device is None:
            print(f"no GPU: {runner.no_device_reason}")
            return 2
        report["device"] = {"name": device.name, "driver": device.driver, "versions": device.versions}
        name, base, tried = choose_base(runner)
        report["base"] = {"chosen": name, "tried": tried}
        report["batch"] = run_batch(args.n, runner, args.threads, base)
        with ClockLog(device.index) as clocks:
            report["repeat"] = repeat_timing(runner, base)
        report["repeat"]["clocks"] = clocks.summary()      # to set beside do_bench's
        report["check_cost"] = check_cost(runner, base)
    report["do_bench"] = do_bench_check(report["batch"]["summary"].get("baseline_ms_median"))
    s = report["batch"]["summary"]
    print(f"base: {report['base']}")
    print(f"{s['candidates']} candidates of {TASK} on {device.name}: wall {s['wall_s']} s "
          f"({s['wall_per_candidate_s']} s each); median GPU {s['median_gpu_s']} s, static {s['median_static_s']} s, "
          f"static+GPU {s['median_static_plus_gpu_s']} s")
    print(f"categories {s['categories']}; expected {s['expected_kinds']}")
    print(f"expert: {s.get('candidate_time_ms_median')} ms, {s.get('tflops_median')} TFLOP/s; "
          f"cuBLAS {s.get('baseline_ms_median')} ms; speedup {s.get('speedup_median')}")
    print(f"repeat: {report['repeat']}")
    print(f"do_bench: {report['do_bench']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
