"""Where one judgement's seconds go, per expert: the phases the worker reports, and the harness's own
pieces timed alone at the headline size.

For each task's expert solution (assembled once), one worker judges it `--repeat` times after a warm-up
judgement (which fills the reference cache, as the first candidate of a batch does). Each judgement's
phase events are timestamped on arrival: `prepare` (cached input sets handed out and fingerprinted,
buffers made), `launch`/`verify` (the trials), `time` (warm-up and timed rounds against the library,
with fresh inputs every round and the checked rounds' references). Then, in this process, the pieces of
one timing round at the headline size are timed alone with CUDA events: drawing a fresh set, its
reference, a fingerprint of it, the arena reset, the L2 flush, the check summary.

Usage (on a GPU machine): python benchmarks/judge_cost.py [--tasks gemm_bf16_sm90a,...] [--repeat 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

from ptxbench.engine.extract import load_candidate_file
from ptxbench.engine.gpu.protocol import Job, TimingConfig
from ptxbench.engine.pipeline import plan_sizes, session_seeds
from ptxbench.engine.runner import Runner
from ptxbench.engine.static import judge_static
from ptxbench.tasks.spec import get_task

DEFAULT_TASKS = "gemm_bf16_sm90a,attn_fwd_sm90a,attn_bwd_sm90a,rmsnorm_bf16_sm90a,vector_add_smoke"


def expert(task_id: str) -> Any:
    task = get_task(task_id)
    folder = task.expert_dir()
    if folder is None:
        return None
    path = next((p for p in (folder / "kernel.ptx", folder / "kernel.cu") if p.exists()), None)
    loaded = load_candidate_file(path) if path else None
    if loaded is None or not loaded.ok or loaded.candidate is None:
        return None
    static = judge_static(loaded.candidate, task)
    return static if static.cubin is not None else None


def phases_of(runner: Runner, job: Job) -> tuple[float, dict[str, float], str, dict[str, int]]:
    """Wall seconds of the job and the seconds between each phase event and the next, summed by phase."""
    spent: dict[str, float] = defaultdict(float)
    last: list[Any] = [None, time.perf_counter()]

    def on_event(event: dict[str, Any]) -> None:
        now = time.perf_counter()
        if last[0] is not None:
            spent[last[0]] += now - last[1]
        last[0] = event.get("phase") if event.get("event") == "phase" else None
        last[1] = now

    began = time.perf_counter()
    result = runner.judge(job, on_event=on_event)
    wall = time.perf_counter() - began
    if last[0] is not None:
        spent[last[0]] += time.perf_counter() - last[1]
    cats = ",".join(sorted({s.category for s in result.sizes})) or (result.fatal.category if result.fatal else "?")
    return wall, dict(spent), cats, dict(result.cache or {})


def pieces(task_id: str, repeat: int = 5) -> dict[str, float]:
    """Milliseconds (median) of each piece of one timing round at the headline size, timed alone."""
    import torch

    from ptxbench.engine.gpu.buffers import Arena
    from ptxbench.engine.gpu.datacache import FreshSets, fingerprint
    from ptxbench.engine.gpu.verify import summarize

    task = get_task(task_id)
    sizes = dict(task.headline)
    device = torch.device("cuda", 0)
    pool = FreshSets(task, sizes, device)
    arena = Arena(device)
    shapes = task.shapes(sizes)
    for t in task.inputs:
        arena.add(t.name, t.dtype, shapes[t.name], "input")
    for t in task.outputs:
        arena.add(t.name, t.dtype, shapes[t.name], "output")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    bounds = {t.name: task.tolerance.element_for(t.name, t.dtype) for t in task.outputs}
    out: dict[str, list[float]] = defaultdict(list)

    def timed(name: str, fn: Any) -> Any:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        value = fn()
        b.record()
        b.synchronize()
        out[name].append(a.elapsed_time(b))
        return value

    def one_round(k: int) -> None:
        data = timed("draw", lambda: pool[k])
        timed("reference", lambda: dict(data.reference))
        timed("fingerprint", lambda: fingerprint(data))
        timed("reset", lambda: arena.load(data.inputs, {}))
        timed("flush", flush.zero_)
        timed("check", lambda: summarize(arena, data.inputs, data.reference, task.tolerance.metric, bounds))

    for k in range(repeat + 1):         # the first is left out: it compiles and allocates
        one_round(k)
    return {name: round(statistics.median(ms[1:]), 4) for name, ms in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=DEFAULT_TASKS)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--default-only", action="store_true", help="only the default timing configuration")
    args = ap.parse_args(argv)
    configs = {
        "default": TimingConfig(),
        "no checked rounds": TimingConfig(check_fraction=0.0, min_checks=0),
        "no checks, no baseline": TimingConfig(check_fraction=0.0, min_checks=0, baseline=False),
    }
    if args.default_only:
        configs = {"default": configs["default"]}
    report: dict[str, Any] = {"tasks": {}}
    with Runner() as runner:
        device = runner.start()
        if device is None:
            sys.exit(f"no GPU: {runner.no_device_reason}")
        report["device"] = device.name
        for task_id in args.tasks.split(","):
            task = get_task(task_id)
            static = expert(task_id)
            if static is None:
                print(f"{task_id}: no expert that assembles here", flush=True)
                continue
            plans, _ = plan_sizes(static.candidate, task, static.ptx, device.num_sms, seeds=session_seeds(task.id),
                                  resources=static.resources)
            row: dict[str, Any] = {}
            for name, timing in configs.items():
                job = Job(task.id, static.cubin, tuple(plans), timing)
                phases_of(runner, job)          # the reference cache filled, as after a batch's first candidate
                walls: list[float] = []
                spent: dict[str, list[float]] = defaultdict(list)
                cats, cache = "", dict[str, int]()
                for _ in range(args.repeat):
                    wall, phases, cats, cache = phases_of(runner, job)
                    walls.append(wall)
                    for p, s in phases.items():
                        spent[p].append(s)
                row[name] = {"wall_s": round(statistics.median(walls), 4), "categories": cats, "reference_cache": cache,
                             "phases_s": {p: round(statistics.median(v), 4) for p, v in spent.items()}}
                print(f"{task_id:24s} {name:24s} {row[name]['wall_s']:8.3f} s  {cats}  {row[name]['phases_s']}",
                      flush=True)
            report["tasks"][task_id] = {"judge": row, "sizes": len(plans), "headline": dict(task.headline)}
    for task_id in report["tasks"]:
        report["tasks"][task_id]["pieces_ms"] = got = pieces(task_id)
        print(f"{task_id:24s} one round's pieces (ms): {got}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
