"""Judge every expert solution and every mutation variant, and write the result as seed data.

    python scripts/record_seed.py --out db/seed/recorded.json --report results/seed-<stamp>.md
    python scripts/record_seed.py --relabel db/seed/recorded.json --report results/seed-<stamp>.md

`--relabel` rewrites only the descriptive fields of a recorded file (each
variant's source and fix explanation) from the current tasks/mutations.toml,
matching variants by their code and manifest, and drops variants the file no
longer defines; the recorded evaluations are left exactly as measured.

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

from ptxbench.db.judgement import evaluation_records
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
    judged = evaluation_records(judgement, 0, source)
    evaluation, measurements = judged.evaluation, judged.measurements
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
    ap.add_argument("--out", type=Path)
    ap.add_argument("--relabel", type=Path, help="a recorded seed file to relabel in place")
    ap.add_argument("--report", type=Path)
    ap.add_argument("--static", action="store_true", help="static stages only, even with a GPU")
    ap.add_argument("--only", help="comma-separated mutation ids or task ids to judge (default: all)")
    args = ap.parse_args()
    if args.relabel:
        return relabel(args.relabel, args.report)
    if args.out is None:
        ap.error("--out or --relabel is required")

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
        # A defective variant that hangs is judged at a 3 s launch deadline (its sizes take milliseconds).
        j = judge(candidate, m.task, gpu=not args.static, sizes=mutation_sizes(m.task), launch_timeout_s=3.0)
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
    if args.report:
        write_report(args.report, seed, f"python {script} --out {args.out}")
    print(f"wrote {args.out}")
    return 0


def _variant_key(code: str, manifest: Any) -> tuple[str, str]:
    return code, json.dumps(manifest, sort_keys=True)


def relabel(path: Path, report: Path | None) -> int:
    seed = json.loads(path.read_text())
    by_code = {}
    for m in mutations.load_mutations():
        v = mutations.apply(m)
        by_code[_variant_key(v.code, json.loads(v.manifest) if v.manifest else None)] = m
    kept, fixes = [], []
    for sample in seed["samples"]:
        m = by_code.get(_variant_key(sample["code"], sample.get("manifest")))
        if m is None:
            print(f"dropped {sample['seed_key']}: tasks/mutations.toml no longer makes this variant")
            continue
        old_key, key = sample["seed_key"], f"mutation:{m.id}"
        sample["seed_key"], sample["source"] = key, m.source
        for e in sample["evaluations"]:
            e["seed_key"] = e["seed_key"].replace(old_key, key, 1)
        kept.append(sample)
        stamp = sample.get("created_at")
        fixes.append({
            "seed_key": f"fix:{m.id}", "failed": key, "fixed": f"expert:{m.task}", "explanation": m.fix,
            "explanation_source": "written with the mutation (tasks/mutations.toml)",
            "source": "tasks/mutations.toml", "created_at": stamp,
        })
    seed["samples"], seed["fixes"] = kept, fixes
    path.write_text(json.dumps(seed, indent=1, sort_keys=True, default=str) + "\n")
    print(f"{len(kept)} variants kept in {path}")
    if report:
        write_report(report, seed, f"python scripts/record_seed.py --relabel {path}")
    return 0


def write_report(path: Path, seed: dict[str, Any], command: str) -> None:
    """A table of what each expert and variant got, against what each variant was made to show."""
    expected = {f"mutation:{m.id}": m for m in mutations.load_mutations()}
    rows, matched = [], 0

    def cells(e: dict[str, Any]) -> tuple[str, str]:
        held = sorted({m["category"] for m in e.get("measurements", []) if m["split"] == "heldout"})
        speed = f"{e['speedup']:.3f}" if e.get("speedup") else "–"
        return ", ".join(held) or "–", speed

    for e in seed["evaluations"]:
        held, speed = cells(e)
        tflops = f"{e['tflops']:.0f}" if e.get("tflops") and e["tflops"] > 10 else "–"
        rows.append(f"| {e['sample']} | – | {e['status']} | {e['category']} | {held} | {speed} | {tflops} |")
    for s in seed["samples"]:
        e, m = s["evaluations"][0], expected.get(s["seed_key"])
        held, speed = cells(e)
        got = held if m is not None and m.shows_at == "heldout" else e["category"]
        ok = m is not None and any(m.shows(c) for c in got.split(", "))
        matched += ok
        want = f"{' or '.join((m.expect, *m.also))} ({m.shows_at})" if m else "?"
        rows.append(f"| {s['seed_key']} | {want} | {e['status']} | {e['category']} | {held} | {speed} | – |"
                    + ("" if ok else " ≠"))
    lines = [
        "# Expert solutions and mutation variants, judged", "",
        seed.get("description", ""), "",
        f"Made by `{command}`. Mutations are judged at the smallest train size, the headline",
        "size (timed) and the smallest held-out size; experts at every size.", "",
        "| sample | made to show | status | category (train) | held-out | speedup | TFLOP/s |",
        "|---|---|---|---|---|---|---|", *rows, "",
        f"{matched} of {len(seed['samples'])} variants show the category they were made to show "
        "(≠ marks the others).", "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def mutation_sizes(task_id: str) -> list[tuple[str, dict[str, int]]]:
    """A variant is judged on the smallest train and held-out sizes and timed at the headline size:
    enough to show its defect (the held-out sizes catch bound errors) at a fraction of the cost."""
    from ptxbench.tasks.spec import get_task

    task = get_task(task_id)
    by_split: dict[str, list[dict[str, int]]] = {}
    for split, sizes in task.all_sizes():
        by_split.setdefault(split, []).append(dict(sizes))
    picked = [("train", by_split["train"][0])]
    if dict(task.headline) != picked[0][1]:
        picked.append(("train", dict(task.headline)))
    picked += [("heldout", by_split["heldout"][0])] if by_split.get("heldout") else []
    return picked


def _speed(j: Any) -> str:
    return f"{j.speedup:.3f}" if j.speedup else "–"


if __name__ == "__main__":
    raise SystemExit(main())
