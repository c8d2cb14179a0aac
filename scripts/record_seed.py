"""Judge every expert solution and every mutation variant, and write the result as seed data.

    python scripts/record_seed.py --out db/seed/recorded.json --report results/seed-<stamp>.md

On a machine with a GPU of a task's architecture the full pipeline runs
(assemble, inspect, run, verify, time against the library); elsewhere only
the static stages do, and the evaluation says so in its `status`. The output
is a seed file in the format of docs/store.md: the mutation samples with
their evaluations, the expert solutions' evaluations, and one fix record per
mutation pointing at the expert, with the mutation's written explanation.
Every row says what made it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from ptxbench.cli.eval import records_of
from ptxbench.db.records import to_row
from ptxbench.engine.candidate import Candidate
from ptxbench.engine.extract import load_candidate_file
from ptxbench.engine.manifest import ManifestError, parse_manifest
from ptxbench.engine.pipeline import judge
from ptxbench.tasks import mutations
from ptxbench.tasks.spec import all_tasks

# Kept out of seeded rows: the code is already the sample's, and a SASS listing is
# large and cheap to regenerate (`ptxbench eval --static`); experts keep theirs.
HEAVY = ("ptx", "sass")


def evaluation_entry(sample_key: str, judgement: Any, source: str, stamp: str, keep_text: bool) -> dict[str, Any]:
    evaluation, measurements = records_of(0, judgement, source)
    row = to_row(evaluation)
    for name in ("id", "sample_id"):
        row.pop(name, None)
    for name in ("tool_versions", "ptx_families", "sass_families", "required_missing", "resources", "warnings",
                 "evidence"):
        row[name] = getattr(evaluation, name)
    for name in ("compiled", "correct", "correct_heldout", "uses_ptx", "uses_sass", "executed"):
        value = getattr(evaluation, name)
        row[name] = None if value is None else bool(value)
    if not keep_text:
        for name in HEAVY:
            row.pop(name, None)
    row["created_at"] = stamp
    row["seed_key"] = f"{sample_key}#{row.get('device') or 'static'}"
    row["measurements"] = []
    for m in measurements:
        mrow = to_row(m)
        mrow.pop("id", None)
        mrow.pop("evaluation_id", None)
        mrow["sizes"], mrow["worst"] = m.sizes, m.worst
        row["measurements"].append(mrow)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--report", type=Path)
    ap.add_argument("--static", action="store_true", help="static stages only, even with a GPU")
    ap.add_argument("--only", help="comma-separated mutation ids or task ids to judge (default: all)")
    args = ap.parse_args()

    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    stamp = now.isoformat()
    script = "scripts/record_seed.py"
    only = set(args.only.split(",")) if args.only else None
    seed: dict[str, Any] = {"format": 1, "samples": [], "evaluations": [], "fixes": []}
    table: list[tuple[str, str, str, str, str]] = []
    device_name = None

    def source_for(j: Any) -> str:
        where = j.device.name if j.device is not None else f"{platform.node()} (no GPU of the task's arch)"
        return f"recorded: {script} on {where}, {now.date()}"

    for task in all_tasks():
        folder = task.expert_dir()
        if folder is None or not (folder / "kernel.ptx").exists() or (only and task.id not in only):
            continue
        t0 = time.perf_counter()
        candidate = load_candidate_file(folder / "kernel.ptx", folder / "manifest.json")
        j = judge(candidate, task, gpu=not args.static)
        device_name = device_name or (j.device.name if j.device else None)
        entry = evaluation_entry(f"expert:{task.id}", j, source_for(j), stamp, keep_text=True)
        entry["sample"] = f"expert:{task.id}"
        seed["evaluations"].append(entry)
        table.append((f"expert:{task.id}", "ok", j.category, _speed(j), f"{time.perf_counter() - t0:.1f}"))
        print(f"{table[-1]}", flush=True)

    for m in mutations.load_mutations():
        if only and m.id not in only and m.task not in only:
            continue
        t0 = time.perf_counter()
        variant = mutations.apply(m)
        try:
            manifest = parse_manifest(variant.manifest) if variant.manifest else None
            manifest_obj = json.loads(variant.manifest) if variant.manifest else None
        except (ManifestError, ValueError) as exc:
            print(f"{m.id}: the mutated manifest does not parse: {exc}", file=sys.stderr)
            return 1
        candidate = Candidate("ptx", variant.code, manifest, m.source)
        j = judge(candidate, m.task, gpu=not args.static)
        key = f"mutation:{m.id}"
        seed["samples"].append({
            "seed_key": key, "task_id": m.task, "model": "mutation", "language": "ptx", "code": variant.code,
            "manifest": manifest_obj, "source": m.source, "created_at": stamp,
            "evaluations": [evaluation_entry(key, j, source_for(j), stamp, keep_text=False)],
        })
        seed["fixes"].append({
            "seed_key": f"fix:{m.id}", "failed": key, "fixed": f"expert:{m.task}", "explanation": m.fix,
            "explanation_source": "written with the mutation (tasks/mutations.toml)",
            "source": "tasks/mutations.toml", "created_at": stamp,
        })
        table.append((key, m.expect, j.category, _speed(j), f"{time.perf_counter() - t0:.1f}"))
        print(f"{table[-1]}", flush=True)

    seed["description"] = (
        f"Expert solutions and mutation variants judged by {script} on "
        f"{device_name or platform.node() + ' (static stages only)'}, {now.date()}. "
        "Mutations are made by tasks/mutations.py from the expert solutions; none is model output."
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(seed, indent=1, sort_keys=True, default=str) + "\n")
    matched = sum(1 for _, want, got, _, _ in table if want == got)
    print(f"{len(table)} judged, {matched} as expected; wrote {args.out}")
    if args.report:
        lines = [
            f"# Expert solutions and mutations judged ({stamp})", "",
            f"Made by `python {script} --out {args.out}` on {device_name or platform.node()}.", "",
            "| sample | expected | got | speedup | seconds |", "|---|---|---|---|---|",
            *[f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in table], "",
            f"{matched} of {len(table)} got the expected category.", "",
        ]
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text("\n".join(lines))
    return 0


def _speed(j: Any) -> str:
    return f"{j.speedup:.3f}" if j.speedup else "–"


if __name__ == "__main__":
    raise SystemExit(main())
