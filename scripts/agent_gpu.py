"""One agent episode per Hopper task on the GPU, against a loopback model that replays a script.

For every task with an expert solution in tasks/solutions/*_sm90a, the scripted model
(tests/llm_server.py, served from a thread of this process) does what an agent does: its first
reply calls `assemble` and `check` at once on a broken variant of the expert (a mutation from
tasks/mutations.toml, applied to a sibling's expert where the task has none of its own), sees the
failure, then (for the cheap tasks) calls `time` on the expert, and submits the expert. The
episodes go through the service `ptxbench run --agent` uses (services/agent.py), so the tools
run the GPU stages for real and the submitted kernel is judged in full, held-out sizes included.

    python scripts/agent_gpu.py --out results/agent-gpu            # on the GPU machine
    python scripts/agent_gpu.py --out /tmp/agent-dry --gpu off     # anywhere: the static path only

Writes OUT/agent-gpu.json and OUT/agent-gpu.md (per task: tool calls made, the check category of
the broken variant, the final category, speedup, fraction of the speed of light, seconds) and the
store the episodes went to (OUT/agent-gpu.sqlite). Exit status 0 when every episode submitted and
its kernel was judged, 1 otherwise. About 3 minutes of GPU time on an H200 (most of it the four
attention experts' full judgements).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the loopback model server lives with the tests

# The broken variant each task's episode checks first: a defect that fails fast and surely at the
# first train size (no hangs, nothing that only the library's timing shows).
PREFERRED = {
    "gemm_bf16_sm90a": "gemm-wrong-swizzle",
    "rmsnorm_bf16_sm90a": "rmsnorm-dropped-barrier-wait",
    "attn_fwd_sm90a": "attn-fwd-wrong-scale",
    "attn_fwd_causal_sm90a": "attn-fwd-wrong-scale",
    "attn_bwd_sm90a": "attn-bwd-store-instead-of-reduce",
    "attn_bwd_causal_sm90a": "attn-bwd-store-instead-of-reduce",
}
FAST_FAILURES = ("wrong_result", "nan_inf", "unwritten_output", "runtime_other", "illegal_address")
TIMED = ("gemm_bf16_sm90a", "rmsnorm_bf16_sm90a")  # their episodes also call `time` on the expert


def hopper_tasks() -> list[str]:
    from ptxbench.tasks.spec import get_task

    found = []
    for folder in sorted((ROOT / "tasks" / "solutions").glob("*_sm90a")):
        if (folder / "kernel.ptx").exists() and get_task(folder.name).arch == "sm_90a":
            found.append(folder.name)
    return found


def broken_variant(task_id: str) -> tuple[str, dict[str, Any]]:
    """(mutation id, tool arguments) of a variant of the task's expert that fails at the train sizes."""
    from llm_server import mutation_arguments
    from ptxbench.tasks.mutations import MutationError, apply, load_mutations

    mutations = [m for m in load_mutations() if m.shows_at == "train" and m.expect in FAST_FAILURES]
    sibling = task_id.replace("_causal", "")
    ordered = sorted(mutations, key=lambda m: (m.id != PREFERRED.get(task_id), m.task != task_id,
                                               FAST_FAILURES.index(m.expect)))
    for m in ordered:
        if m.task not in (task_id, sibling):
            continue
        try:
            apply(replace(m, task=task_id))
        except MutationError:
            continue
        return m.id, mutation_arguments(m.id, task_id if m.task != task_id else None)
    raise SystemExit(f"no mutation applies to {task_id}'s expert")


def recording(tasks: list[str], timed: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, str]]:
    from llm_server import expert_arguments

    replies: dict[str, Any] = {}
    variants = {}
    for task_id in tasks:
        mutation, bad = broken_variant(task_id)
        variants[task_id] = mutation
        good = json.dumps(expert_arguments(task_id))
        script = [
            {"content": f"A first attempt at {task_id}: assembling and checking it.",
             "tool_calls": [{"name": "assemble", "arguments": json.dumps(bad)},
                            {"name": "check", "arguments": json.dumps(bad)}]},
        ]
        if task_id in timed:
            script.append({"content": "That failed; timing the corrected kernel.",
                           "tool_calls": [{"name": "time", "arguments": good}]})
        script.append({"content": "Submitting the corrected kernel.", "tool_calls": [{"name": "submit", "arguments": good}]})
        replies[task_id] = {str(i + 1): [reply] for i, reply in enumerate(script)}
    return {"replies": replies}, variants


def device_line() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "no GPU"
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "no GPU"


def commit() -> str:
    """PTXBENCH_COMMIT where the caller set it (a GPU machine's copy of the tree may not carry git's HEAD)."""
    if os.environ.get("PTXBENCH_COMMIT"):
        return os.environ["PTXBENCH_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT, timeout=10)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def episode_report(db: Any, run_id: int, variants: dict[str, str]) -> list[dict[str, Any]]:
    from ptxbench.db.queries import latest_evaluation, measurements_for
    from ptxbench.db.trajectories import run_episodes, steps_of

    out = []
    for ep in run_episodes(db, run_id):
        steps = steps_of(db, ep.id)
        tools = [s for s in steps if s.kind == "tool"]
        check = next((s for s in tools if s.tool == "check"), None)
        timed = next((s for s in tools if s.tool == "time"), None)
        evaluation = latest_evaluation(db, ep.sample_id) if ep.sample_id else None
        heldout = []
        if evaluation is not None:
            heldout = [{"sizes": m.sizes, "category": m.category}
                       for m in measurements_for(db, evaluation.id) if m.split == "heldout"]  # type: ignore[arg-type]
        out.append({
            "task": ep.task_id, "episode_id": ep.id, "status": ep.status, "broken_variant": variants.get(ep.task_id),
            "tool_calls": [f"{s.tool}: {s.status}" for s in tools],
            "check_category": (check.result.get("category") or check.status) if check else None,
            "time_tool": ({k: timed.result.get(k) for k in ("category", "time_ms", "speedup", "sol_fraction")}
                          if timed else None),
            "final_category": evaluation.category if evaluation else None,
            "final_status": evaluation.status if evaluation else None,
            "correct": evaluation.correct if evaluation else None,
            "correct_heldout": evaluation.correct_heldout if evaluation else None,
            "heldout": heldout,
            "speedup": evaluation.speedup if evaluation else None,
            "sol_fraction": evaluation.sol_fraction if evaluation else None,
            "tflops": evaluation.tflops if evaluation else None,
            "baseline": (evaluation.evidence or {}).get("baseline") if evaluation else None,
            "seconds": ep.wall_s, "gpu_s_in_tools": ep.gpu_s,
            "judge_seconds": ((evaluation.evidence or {}).get("seconds") or {}).get("total") if evaluation else None,
        })
    return out


def _fmt(value: Any, kind: str = "") -> str:
    if value is None:
        return "—"
    if kind == "x":
        return f"{value:.3f}×"
    if kind == "pct":
        return f"{100 * value:.0f}%"
    if kind == "s":
        return f"{value:.1f}"
    return str(value)


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Agent episodes on the GPU (scripts/agent_gpu.py)",
        "",
        f"{report['device']}, {report['date']}, commit `{report['commit'][:10]}`: one `ptxbench run --agent` "
        "episode per Hopper task against a loopback model replaying a script (assemble and check a broken "
        "variant, see it fail, submit the expert), judged with the GPU stages.",
        "",
        "| task | tool calls | broken variant | its check | final | held-out | speedup | SoL | episode s | GPU s in tools |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in report["episodes"]:
        held = "ok" if e["correct_heldout"] else ("—" if e["correct_heldout"] is None else "fails")
        lines.append(f"| {e['task']} | {len(e['tool_calls'])} ({', '.join(c.split(':')[0] for c in e['tool_calls'])}) "
                     f"| `{e['broken_variant']}` | `{e['check_category']}` | `{e['final_category']}` | {held} "
                     f"| {_fmt(e['speedup'], 'x')} | {_fmt(e['sol_fraction'], 'pct')} | {_fmt(e['seconds'], 's')} "
                     f"| {_fmt(e['gpu_s_in_tools'], 's')} |")
    lines += ["", f"Total wall time {report['seconds']:.0f} s. Command: `{report['command']}`.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for agent-gpu.json, .md and the store")
    parser.add_argument("--tasks", help="comma-separated task ids (default: every *_sm90a expert)")
    parser.add_argument("--gpu", default="on", choices=("on", "auto", "off"), help="the GPU stages (default on)")
    parser.add_argument("--no-time", action="store_true", help="no episode calls the time tool")
    args = parser.parse_args(argv)

    from llm_server import serve_in_thread
    from ptxbench.db.seed import ensure_default_store
    from ptxbench.services import agent

    tasks = [t.strip() for t in args.tasks.split(",")] if args.tasks else hopper_tasks()
    args.out.mkdir(parents=True, exist_ok=True)
    store_path = args.out / "agent-gpu.sqlite"
    store_path.unlink(missing_ok=True)
    rec, variants = recording(tasks, () if args.no_time else TIMED)
    started = time.perf_counter()
    server, base_url = serve_in_thread(rec, args.out / "requests.jsonl")
    db = ensure_default_store(store_path)
    try:
        [config] = agent.agent_configs(model="scripted-agent", base_url=base_url, tasks=",".join(tasks), gpu=args.gpu,
                                       concurrency=1, backoff_s=0.05, timeout_s=120.0, run_name="agent-gpu")

        def show(event: dict[str, Any]) -> None:
            if event.get("event") in ("step", "judged", "episode", "failure"):
                print(json.dumps(event, default=str), flush=True)

        outcome = agent.run(db, config, progress=show)
        assert outcome.report is not None
        episodes = episode_report(db, outcome.report.run_id, variants)
    finally:
        server.shutdown()
        db.conn.close()
    report = {
        "script": "scripts/agent_gpu.py", "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "device": device_line(), "host": platform.node(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(), "gpu": args.gpu, "seconds": round(time.perf_counter() - started, 1),
        "run": outcome.report.to_dict(), "episodes": episodes,
    }
    (args.out / "agent-gpu.json").write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    (args.out / "agent-gpu.md").write_text(markdown(report), encoding="utf-8")
    print(markdown(report))
    good = all(e["status"] == "submitted" and e["final_category"] for e in episodes) and len(episodes) == len(tasks)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
