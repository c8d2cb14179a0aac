"""Candidates per second with one GPU worker, a pool of two on one GPU, and a Dask cluster on this host.

The batch is benchmarks/gpu_pipeline.py's: the expert GEMM and variants of it (80 % correct
copies, 10 % wrong_result, 10 % param_mismatch), each a distinct file so nothing comes from the
assembly cache. Each mode imports the batch into a fresh temporary store and judges it the way
`ptxbench eval` does (services/batch.py for one worker, services/parallel.py for the others):

  one     one GPU worker (the reference)
  pool2   the pool with two workers sharing the one GPU (`--gpus 0 --workers-per-gpu 2`): their
          timing is flagged as shared and stored without a speedup (services/shared_gpu.py)
  dask1   a Dask LocalCluster with one worker declaring GPU=1 (`--cluster local:1`)
  dask2   the same with two workers on the one GPU (shared, as pool2)

For each: wall time (worker starts included) and judging time (first event to last),
candidates per second and its ratio to `one`, categories, whether they are those of `one`
(for shared modes, the category the shared timing would have given is compared, and the stored
one reported beside it), and how many candidates each worker judged.

`--static` runs the same modes with static-only judging and no GPU (CPU workers), so that the
script is tested where there is no GPU (tests/test_scale_bench.py).

Usage (GPU machine): python benchmarks/scale_gpu.py --n 100 --out DIR   (about 3 minutes on an H200)
          anywhere: python benchmarks/scale_gpu.py --static --n 8 --out DIR
Writes DIR/scale-gpu.json and DIR/scale-gpu.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_pipeline

from ptxbench.db.queries import evaluations_for
from ptxbench.db.records import Sample
from ptxbench.db.seed import seed_store
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_sample
from ptxbench.engine.candidate import Candidate
from ptxbench.engine.runner import RunnerConfig
from ptxbench.services import progress as ev
from ptxbench.services.batch import StopFlag, run_batch

MODES = ("one", "pool2", "dask1", "dask2")
SHARED = {"pool2", "dask2"}


class Recorder:
    """The batch's events, with the time each arrived."""

    def __init__(self) -> None:
        self.events: list[tuple[float, ev.Event]] = []

    def emit(self, event: ev.Event) -> None:
        self.events.append((time.perf_counter(), event))

    def of(self, kind: type) -> list[Any]:
        return [e for _, e in self.events if isinstance(e, kind)]


def static_base() -> Candidate:
    """Without a GPU: the first base the pipeline benchmark knows, as it is (no correctness check)."""
    name, cand = gpu_pipeline.base_candidates()[0]
    return cand


def gpu_base() -> tuple[str, Candidate, list[dict]]:
    from ptxbench.engine.runner import Runner

    with Runner() as runner:
        if runner.start() is None:
            sys.exit(f"no GPU: {runner.no_device_reason} (use --static to run without one)")
        return gpu_pipeline.choose_base(runner)


def fresh_store(folder: Path, batch: list[tuple[str, Candidate]]) -> tuple[Any, list[int], dict[int, str]]:
    folder.mkdir(parents=True)
    db = open_store(folder / "store.db")
    empty = folder / "seed"
    empty.mkdir()
    seed_store(db, empty)
    ids, kinds = [], {}
    for kind, cand in batch:
        manifest = json.loads(cand.manifest.to_json()) if cand.manifest is not None else None
        s = add_sample(
            db,
            Sample(
                task_id=gpu_pipeline.TASK,
                language=cand.language,
                code=cand.code,
                manifest=manifest,
                source=f"bench:{cand.origin}",
            ),
        )
        assert s.id is not None
        ids.append(s.id)
        kinds[s.id] = kind
    return db, ids, kinds


def backend_for(mode: str, static: bool) -> Any:
    from ptxbench.services.cluster import DaskBackend
    from ptxbench.services.gpuset import spread, visible_gpus
    from ptxbench.services.pool import GpuPool, SlotSpec, slot_specs

    if mode == "pool2":
        if static:
            return GpuPool([SlotSpec(f"cpu{i}", RunnerConfig(), f"cpu{i}") for i in range(2)], static_only=True)
        gpus = [g for g in visible_gpus() if g.arch == "sm_90a"][:1]
        return GpuPool(slot_specs(spread(2, gpus)))
    return DaskBackend("local:1" if mode == "dask1" else "local:2")


def run_mode(mode: str, db: Any, ids: list[int], static: bool) -> dict[str, Any]:
    from ptxbench.services.parallel import run_parallel_batch

    sink = Recorder()
    started = time.perf_counter()
    if mode == "one":
        code = run_batch(db, ids, sink, static_only=static, stop=StopFlag())
    else:
        code = run_parallel_batch(db, ids, sink, backend_for(mode, static), static_only=static, stop=StopFlag())
    wall = time.perf_counter() - started
    stamps = [t for t, e in sink.events if isinstance(e, (ev.Start, ev.Done))]
    judging = stamps[-1] - stamps[0] if len(stamps) >= 2 else wall
    start = sink.of(ev.Start)
    return {
        "exit": code,
        "wall_s": round(wall, 3),
        "judging_s": round(judging, 3),
        "device": start[0].device if start else None,
        "events": sink,
    }


def summarise(mode: str, run: dict[str, Any], db: Any, ids: list[int], kinds: dict[int, str]) -> dict[str, Any]:
    rows = {}
    for sid in ids:
        evals = evaluations_for(db, sid)
        rows[sid] = evals
    one_each = all(len(r) == 1 for r in rows.values())
    stored = [r[-1].category if r else None for r in rows.values()]
    # What the timing alone would have said, where a shared GPU made the stored verdict `no_baseline`.
    verdicts = [
        (r[-1].evidence.get("shared_gpu") or {}).get("category_from_shared_timing", r[-1].category) if r else None
        for r in rows.values()
    ]
    workers = Counter(((r[-1].evidence.get("worker") or {}).get("name") or "one") for r in rows.values() if r)
    shared_rows = sum(1 for r in rows.values() if r and "shared_gpu" in r[-1].evidence)
    n = len(ids)
    events: Recorder = run.pop("events")
    return {
        **run,
        "mode": mode,
        "candidates": n,
        "candidates_per_s": round(n / run["judging_s"], 3) if run["judging_s"] else None,
        "one_row_per_sample": one_each,
        "categories": dict(Counter(c for c in stored if c)),
        "verdicts": verdicts,
        "stored": stored,
        "kinds": [kinds[s] for s in ids],
        "per_worker": dict(workers),
        "shared_rows": shared_rows,
        "tool_failures": sum(1 for e in events.of(ev.Error)),
        "worker_events": [
            {"worker": e.worker, "state": e.state, "device": e.device, "shared": e.shared, "message": e.message}
            for e in events.of(ev.WorkerChanged)
        ],
    }


def commit() -> str:
    value = os.environ.get("PTXBENCH_COMMIT")
    if value:
        return value
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Scale: {report['n']} candidates of {report['task']} ({'static only' if report['static'] else 'GPU'})",
        "",
        f"Device: {report['device']}. Commit: {report['commit']}. Base: {report['base']}.",
        "",
        "| mode | wall s | judging s | candidates/s | × one | categories | same as one | per worker | shared rows |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in report["modes"]:
        cats = ", ".join(f"{c} {n}" for c, n in sorted(m["categories"].items()))
        workers = ", ".join(f"{w} {n}" for w, n in sorted(m["per_worker"].items()))
        lines.append(
            f"| {m['mode']} | {m['wall_s']} | {m['judging_s']} | {m['candidates_per_s']} | "
            f"{m.get('ratio_to_one')} | {cats} | {m.get('same_as_one')} | {workers} | {m['shared_rows']} |"
        )
    lines += [
        "",
        "Candidates per second are over the judging time (first event to last; the worker starts are in "
        "the wall time). In the shared modes two workers time on one GPU: those rows are stored without a "
        "speedup (`no_baseline`), and `same as one` compares the category their timing would have given.",
        "",
    ]
    for m in report["modes"]:
        if m.get("differences"):
            lines.append(f"- {m['mode']}: differs from one at {m['differences'][:10]}")
    for s in report.get("skipped", []):
        lines.append(f"- skipped {s}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--static", action="store_true", help="static-only judging, no GPU (for a test anywhere)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"some of {','.join(MODES)} (one always runs)")
    parser.add_argument("--budget-s", type=float, default=230.0, help="start no further mode after this many seconds")
    args = parser.parse_args()
    modes = ["one"] + [m for m in args.modes.split(",") if m in MODES and m != "one"]
    t0 = time.perf_counter()
    if args.static:
        base, tried = static_base(), []
        base_name = base.origin
    else:
        base_name, base, tried = gpu_base()
    batch = gpu_pipeline.variants(base, args.n)
    report: dict[str, Any] = {
        "task": gpu_pipeline.TASK,
        "n": args.n,
        "static": args.static,
        "commit": commit(),
        "base": base_name,
        "base_tried": tried,
        "modes": [],
        "skipped": [],
    }
    with tempfile.TemporaryDirectory(prefix="ptxbench-scale-") as tmp:
        os.environ.setdefault("PTXBENCH_CACHE", str(Path(tmp) / "cache"))
        for mode in modes:
            if mode != "one" and time.perf_counter() - t0 > args.budget_s:
                report["skipped"].append(f"{mode}: over the {args.budget_s:.0f} s budget")
                continue
            # Each mode assembles afresh: its own cache folder, so no mode is served from another's.
            os.environ["PTXBENCH_CACHE"] = str(Path(tmp) / f"cache-{mode}")
            db, ids, kinds = fresh_store(Path(tmp) / mode, batch)
            run = run_mode(mode, db, ids, args.static)
            m = summarise(mode, run, db, ids, kinds)
            db.conn.close()
            report["modes"].append(m)
            print(
                f"{mode}: {m['candidates_per_s']} candidates/s, {m['categories']}, per worker {m['per_worker']}",
                flush=True,
            )
    one = report["modes"][0]
    report["device"] = one["device"] or ("cpu (static stages only)" if args.static else None)
    for m in report["modes"]:
        m["ratio_to_one"] = (
            round(m["candidates_per_s"] / one["candidates_per_s"], 3)
            if m["candidates_per_s"] and one["candidates_per_s"]
            else None
        )
        m["differences"] = [i for i, (a, b) in enumerate(zip(m["verdicts"], one["verdicts"])) if a != b]
        m["same_as_one"] = not m["differences"] and m["one_row_per_sample"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale-gpu.json").write_text(json.dumps(report, indent=1, default=str))
    (args.out / "scale-gpu.md").write_text(markdown(report))
    print(markdown(report))
    return 0 if all(m["same_as_one"] for m in report["modes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
