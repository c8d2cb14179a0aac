"""The README's GPU figures, generated from the newest GPU suite report, so a stale number cannot hide.

    python scripts/readme_figures.py            # rewrite the marked sections of README.md
    python scripts/readme_figures.py --check    # exit 1 if README.md differs from the newest report

The sections between `<!-- figures:NAME begin … -->` and `<!-- figures:NAME end -->` are generated:
`experts` (each expert's speed, fraction of the speed of light and speedup over its library) and
`gpu-speed` (PTXBench's own cost per candidate on the GPU). The report is the newest full
results/gpu-suite-*.json by name (they are named by date and time); the scale benchmark's rows come
from the newest report that has them, named with its commit where that is an older one.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "results"
MARK = re.compile(r"(<!-- figures:(?P<name>[\w-]+) begin[^>]*-->\n)(?P<body>.*?)(<!-- figures:(?P=name) end -->)", re.S)


def is_full(report: dict[str, Any]) -> bool:
    """A report with the experts and the pipeline benchmark: one that can fill every figure. A follow-up
    run of a few tests leaves the README to the last full one."""
    return bool(report.get("benchmark")) and bool((report.get("tests") or {}).get("experts"))


def newest_report(results: Path = RESULTS) -> Path:
    found = [p for p in sorted(results.glob("gpu-suite-*.json")) if is_full(json.loads(p.read_text()))]
    if not found:
        raise FileNotFoundError(f"no full gpu-suite-*.json in {results}: run the GPU suite (make gpu-suite)")
    return found[-1]


def _scales(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k.startswith("scale") and isinstance(v, dict) and v.get("modes")}


def with_scale(report: dict[str, Any], name: str, results: Path = RESULTS) -> dict[str, Any]:
    """The report, with the scale benchmark's figures of the newest report that has them when it has none
    (the scale run takes a device call of its own), each row then naming the report and commit it is from."""
    if _scales(report):
        return report
    for path in sorted(results.glob("gpu-suite-*.json"), reverse=True):
        if path.name == name:
            continue
        other = json.loads(path.read_text())
        found = _scales(other)
        if found:
            return {**report, **found, "scale_source": {"name": path.name, "commit": other.get("commit")}}
    return report


def _f(x: Any, fmt: str, suffix: str = "") -> str:
    return format(x, fmt) + suffix if isinstance(x, (int, float)) else "—"


def _sizes(sizes: dict[str, int] | None) -> str:
    return " ".join(f"{k} {v}" for k, v in (sizes or {}).items())


def _speed(e: dict[str, Any]) -> str:
    """TFLOP/s where the work is bound by arithmetic; where memory bounds it, the task's bytes (each
    input read once, each output written once) over the time."""
    from ptxbench.tasks.spec import get_task

    sol = e.get("speed_of_light") or {}
    if sol.get("memory_ms", 0) > sol.get("compute_ms", 0) and e.get("time_ms") and e.get("headline"):
        moved = get_task(e["task"]).bytes(e["headline"])
        return f"{moved / (e['time_ms'] * 1e-3) / 1e12:.2f} TB/s"
    return _f(e.get("tflops"), ".0f", " TFLOP/s")


def experts_table(report: dict[str, Any], name: str) -> str:
    from ptxbench.tasks.spec import get_task

    dev = report.get("device", {})
    lines = [f"Measured by the GPU suite on one {dev.get('name', '?')} (driver {dev.get('driver', '?')}), "
             f"{report.get('date', '?')[:10]}, commit `{str(report.get('commit', '?'))[:10]}`: each expert through "
             f"`ptxbench check`, on every train and held-out size, timed at the headline size against the library "
             f"in the same worker ([{name}](results/{name})).", "",
             "| task | headline size | verdict | expert | of speed of light | library (same worker) | speedup | "
             "train / held-out |",
             "|---|---|---|---|---|---|---|---|"]
    for e in (report.get("tests") or {}).get("experts", []):
        try:
            title = get_task(e["task"]).title
        except KeyError:
            title = e["task"]
        correct = f"{'ok' if e.get('correct') else 'no'} / {'ok' if e.get('correct_heldout') else 'no'}"
        lines.append(f"| {title} | {_sizes(e.get('headline'))} | `{e.get('category')}` | {_speed(e)} | "
                     f"{_f(e.get('sol_fraction'), '.0%')} | {e.get('baseline') or '—'} | "
                     f"{_f(e.get('speedup'), '.3f', '×')} | {correct} |")
    return "\n".join(lines) + "\n"


def gpu_speed_table(report: dict[str, Any], name: str) -> str:
    bench = report.get("benchmark") or {}
    s = (bench.get("batch") or {}).get("summary") or {}
    rows = ["| path | measured | command |", "|---|---|---|"]
    if s:
        rows.append(f"| full pipeline on {s.get('candidates')} GEMM candidates, one {report['device'].get('name')} | "
                    f"{_f(s.get('wall_per_candidate_s'), '.3f', ' s')} per candidate (batch wall time), "
                    f"{_f(s.get('median_gpu_s'), '.3f', ' s')} GPU time (median); categories {s.get('categories')} | "
                    f"`python3 benchmarks/gpu_pipeline.py --n {s.get('candidates')}` ([{name}](results/{name})) |")
    repeat = bench.get("repeat") or {}
    if repeat:
        rows.append(f"| same kernel judged 3× back to back | medians within {_f(repeat.get('candidate_diff'), '.2%')}; "
                    f"cuBLAS within {_f(repeat.get('baseline_diff'), '.2%')} | same |")
    cost = bench.get("check_cost") or {}
    if cost.get("extra_s") is not None:
        rows.append(f"| the checked timing rounds (docs/harness.md), per candidate | {_f(cost['extra_s'], '.3f', ' s')} "
                    f"of GPU time ({_f(cost.get('with_checks_s'), '.3f', ' s')} with, "
                    f"{_f(cost.get('without_checks_s'), '.3f', ' s')} without, median of {cost.get('runs')}) | same |")
    do_bench = bench.get("do_bench") or {}
    if do_bench.get("diff") is not None:
        rows.append(f"| our cuBLAS time vs `triton.testing.do_bench` | {_f(do_bench.get('diff'), '.2%')} apart | same |")
    source = report.get("scale_source")
    scale_name = source["name"] if source else name
    at = f", at commit `{source['commit']}`" if source else ""
    for _key, scale in sorted(_scales(report).items()):
        one = scale["modes"][0]
        for m in scale["modes"]:
            what = {"one": "one GPU worker", "pool2": "the pool, two workers sharing the GPU (timing flagged shared)",
                    "dask1": "a Dask cluster, one local GPU worker",
                    "dask2": "a Dask cluster, two workers sharing the GPU"}.get(m["mode"], m["mode"])
            same = "" if m is one else f"; {m.get('ratio_to_one')}× one, categories {'the same' if m.get('same_as_one') else 'DIFFERENT'}"
            rows.append(f"| `ptxbench eval` of {scale.get('n')} GEMM candidates, {what} | "
                        f"{_f(m.get('judging_s') / m['candidates'] if m.get('judging_s') else None, '.2f', ' s')} per "
                        f"candidate ({m.get('candidates_per_s')} candidates/s){same} | "
                        f"`python3 benchmarks/scale_gpu.py --n {scale.get('n')}` ([{scale_name}](results/{scale_name}){at}) |")
    tests = report.get("tests") or {}
    if tests.get("tests"):
        count = {o: sum(t["outcome"] == o for t in tests["tests"]) for o in ("passed", "skipped")}
        others = len(tests["tests"]) - count["passed"] - count["skipped"]
        phases = tests.get("phases") or []
        how = "; ".join(f"{p['seconds']:.0f} s on {p['workers']} process(es) for `-m '{p['marks']}'`" for p in phases)
        expected = sum(t["outcome"] == "skipped" and "hole by design" in (t.get("message") or "") for t in tests["tests"])
        rows.append(f"| GPU tests ({tests.get('mode', 'full')} suite) | {count['passed']} passed, {others} failed or "
                    f"not run, {count['skipped'] - expected} skipped (on request only), {expected} known holes "
                    f"(expected to fail) in {_f(tests.get('seconds'), '.0f', ' s')}"
                    + (f" ({how})" if how else "") + " | `make gpu-suite` |")
    return "\n".join(rows) + "\n"


SECTIONS = {"experts": experts_table, "gpu-speed": gpu_speed_table}


def render(text: str, report: dict[str, Any], name: str) -> str:
    def fill(m: re.Match[str]) -> str:
        make = SECTIONS.get(m.group("name"))
        return m.group(0) if make is None else m.group(1) + make(report, name) + m.group(4)

    return MARK.sub(fill, text)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    path = newest_report()
    text = README.read_text()
    new = render(text, with_scale(json.loads(path.read_text()), path.name), path.name)
    if args.check:
        if new != text:
            print(f"README.md's GPU figures are not those of {path.name}: run python scripts/readme_figures.py",
                  file=sys.stderr)
            return 1
        return 0
    README.write_text(new)
    print(f"README.md figures from {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
