"""The optional GPU stages: compute-sanitizer memcheck and Nsight Compute instruction counts.

Both wrap a one-launch replay of the candidate (`worker --replay JOB.json`:
the first seed of the smallest size, no timing) in NVIDIA's tool, in a
process of its own with a deadline. The result is evidence for the
evaluation row: errors found and the first lines of the report; executed
instruction counts per requested family (`--clock-control none`, so the
card's clocks are left as they are).

Plain Python: the tools are separate processes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from ptxbench.engine.gpu.protocol import Job, SizePlan, TimingConfig
from ptxbench.engine.sandbox import worker_environment

TOOL_TIMEOUT_S = 300.0
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
_OPCODE_COUNT = re.compile(r"\b([A-Z][A-Z0-9_]+)\s*[:=]\s*([\d,]+(?:\.\d+)?)")


def find_tool(name: str) -> str | None:
    """A CUDA tool on PATH, or in the usual install folders."""
    found = shutil.which(name)
    if found:
        return found
    for folder in ("/usr/local/cuda/bin", "/opt/nvidia/nsight-compute", "/usr/local/cuda/compute-sanitizer"):
        candidate = Path(folder) / name
        if candidate.exists():
            return str(candidate)
    matches = sorted(Path("/opt/nvidia").glob(f"nsight-compute/*/{name}")) if Path("/opt/nvidia").exists() else []
    return str(matches[-1]) if matches else None


def _replay_job(task_id: str, cubin: bytes, plan: SizePlan, folder: Path) -> Path:
    first = replace(plan, seeds=plan.seeds[:1], time=False)
    job = Job(task_id, cubin, (first,), TimingConfig(baseline=False))
    path = folder / "job.json"
    path.write_text(json.dumps(job.to_json()))
    return path


def _run(cmd: list[str], timeout: float) -> tuple[int | None, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=worker_environment(), start_new_session=True)
        return proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        return None, out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out)


def _worker(device_index: int, job: Path) -> list[str]:
    return [sys.executable, "-m", "ptxbench.engine.gpu.worker", "--device", str(device_index), "--replay", str(job)]


def parse_sanitizer(text: str) -> dict[str, Any]:
    """Errors counted by memcheck, its first reports, and the category they point to."""
    m = _SUMMARY.search(text)
    errors = int(m.group(1)) if m else None
    reports = [line.strip("= ").strip() for line in text.splitlines()
               if line.startswith("=========") and ("Invalid" in line or "Misaligned" in line or "Error" in line)]
    category = "ok"
    if errors:
        joined = "\n".join(reports)
        category = "misaligned_address" if "isaligned" in joined else "illegal_address"
    return {"errors": errors, "reports": reports[:20], "category": category if errors is not None else "unknown"}


def run_sanitize(task: Any, cubin: bytes, plan: SizePlan, device_index: int = 0) -> dict[str, Any]:
    tool = find_tool("compute-sanitizer")
    if tool is None:
        return {"tool": "compute-sanitizer", "category": "unavailable", "message": "compute-sanitizer not found"}
    with tempfile.TemporaryDirectory(prefix="ptxbench-sanitize-") as tmp:
        job = _replay_job(task.id, cubin, plan, Path(tmp))
        code, text = _run([tool, "--tool", "memcheck", "--print-limit", "20", *_worker(device_index, job)],
                          TOOL_TIMEOUT_S)
    report = parse_sanitizer(text)
    report.update({"tool": "compute-sanitizer memcheck", "exit": code, "sizes": plan.sizes,
                   "tail": text[-3000:] if report["category"] != "ok" else ""})
    if code is None:
        report["category"] = "timeout"
    return report


def parse_opcode_counts(text: str) -> dict[str, float]:
    """SASS opcode → executed count, from `ncu --metrics sass__inst_executed_per_opcode` instance output."""
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if "sass__inst_executed_per_opcode" not in line and not _OPCODE_COUNT.search(line):
            continue
        for op, value in _OPCODE_COUNT.findall(line):
            if op.startswith("CUDA") or op in ("ERROR", "PROF", "NCU"):
                continue
            counts[op] = counts.get(op, 0.0) + float(value.replace(",", ""))
    return counts


def executed_families(counts: dict[str, float], families: list[str] | tuple[str, ...]) -> dict[str, Any]:
    from ptxbench.engine.families import get_family

    per_family: dict[str, Any] = {}
    for name in families:
        fam = get_family(name)
        if fam.sass is None:
            per_family[name] = None           # nothing in SASS to count
            continue
        # ncu names opcodes without their modifiers (SYNCS, not SYNCS.ARRIVE.TRANS64): a bare opcode
        # stands for every modified form the family's pattern accepts.
        per_family[name] = sum(v for op, v in counts.items() if fam.matches_sass(op) or fam.matches_sass(op + "."))
    measurable = [v for v in per_family.values() if v is not None]
    return {"per_family": per_family,
            "executed": (all(v > 0 for v in measurable) if measurable and counts else None)}


def run_executed(task: Any, static: Any, plan: SizePlan, device_index: int = 0) -> dict[str, Any]:
    tool = find_tool("ncu")
    if tool is None:
        return {"tool": "ncu", "executed": None, "message": "Nsight Compute (ncu) not found"}
    entries = sorted({l.entry for l in plan.launches})
    with tempfile.TemporaryDirectory(prefix="ptxbench-ncu-") as tmp:
        job = _replay_job(task.id, static.cubin, plan, Path(tmp))
        cmd = [tool, "--clock-control", "none", "--target-processes", "all",
               "--kernel-name", "regex:^(" + "|".join(re.escape(e) for e in entries) + ")$",
               "--metrics", "sass__inst_executed_per_opcode", "--print-metric-instances", "details",
               *_worker(device_index, job)]
        code, text = _run(cmd, TOOL_TIMEOUT_S)
    counts = parse_opcode_counts(text)
    report = executed_families(counts, list(static.require))
    report.update({"tool": "ncu sass__inst_executed_per_opcode", "exit": code, "sizes": plan.sizes,
                   "opcodes": dict(sorted(counts.items(), key=lambda kv: -kv[1])[:40]),
                   # ncu's own words when it counted nothing, or nothing of a requested family: what to look at.
                   "tail": "" if counts and report.get("executed") else text[-3000:]})
    return report
