"""The GPU suite: every GPU test, every expert through `ptxbench check`, the pipeline benchmark; one report.

On the GPU machine (repository root, ptxbench importable; `make gpu-suite` runs the first form):

    python3 scripts/gpu_suite.py run --out DIR [--parts tests,bench] [--commit SHA] [--budget-s 560]

writes DIR/gpu-suite.json (commit, device, driver, tool versions, each test with its outcome and
seconds, each expert with its category, speedup, TFLOP/s and fraction of the speed of light, the
benchmark's figures) and DIR/raw.tar.gz (pytest log, JUnit XML, the experts' full JSON, the hostile
table, the benchmark log), and prints a short table last. The expert figures come from the expert
test itself (tests/gpu/test_engine_gpu.py runs `ptxbench check --json` and keeps the JSON here), so
each expert is judged once. Parts can run in separate calls, each with its own DIR; then, here:

    python3 scripts/gpu_suite.py merge DIR [DIR ...] [--results results]

writes results/gpu-suite-YYYYMMDD-HHMM.json and .md from them (the newest such report feeds the
README's figures: scripts/readme_figures.py). NVIDIA's tools come from PATH or /usr/local/cuda/bin
when the PyPI wheels are not installed (PTXBENCH_PTXAS and friends).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("tests", "bench")
# The files that hold GPU tests (`-m gpu`). Collecting all of tests/ would import modules whose
# dependencies the GPU machine's image lacks (openai), and one collection error stops the run.
GPU_TESTS = ("tests/gpu tests/hostile tests/tui/test_gpu_live.py tests/test_crash_safety.py "
             "tests/test_reference.py")


def tool_env(out: Path) -> dict[str, str]:
    env = dict(os.environ)
    cuda_bin = Path("/usr/local/cuda/bin")
    if cuda_bin.is_dir() and str(cuda_bin) not in env.get("PATH", ""):
        env["PATH"] = f"{env.get('PATH', '')}:{cuda_bin}"
    for tool, var in (("ptxas", "PTXBENCH_PTXAS"), ("nvcc", "PTXBENCH_NVCC"),
                      ("cuobjdump", "PTXBENCH_CUOBJDUMP"), ("nvdisasm", "PTXBENCH_NVDISASM")):
        if var not in env and (found := shutil.which(tool, path=env["PATH"])):
            env[var] = found
    env.setdefault("PTXBENCH_CACHE", "/tmp/ptxbench-cache")
    env["PYTHONUNBUFFERED"] = "1"
    env["PTXBENCH_SUITE_DIR"] = str(out)
    env["PTXBENCH_HOSTILE_REPORT"] = str(out / "hostile.md")
    return env


def device() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        text = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,memory.total",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout
        name, driver, sm_max, mem = (x.strip() for x in text.splitlines()[0].split(","))
        out.update(name=name, driver=driver, sm_clock_max=sm_max, memory=mem)
    except Exception as exc:  # the report says what it could not read
        out["error"] = str(exc)
    return out


def tool_versions(env: dict[str, str]) -> dict[str, str | None]:
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for dist in ("torch", "cupy-cuda13x", "cuda-bindings", "triton", "nvidia-cuda-nvcc"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    for tool, var in (("ptxas", "PTXBENCH_PTXAS"), ("nvcc", "PTXBENCH_NVCC")):
        path = env.get(var) or shutil.which(tool, path=env["PATH"])
        if path:
            text = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
            versions[tool] = f"{text[-1] if text else '?'} ({path})"
    return versions


def _wait(cmd: list[str], env: dict[str, str], log: Path, timeout: float) -> int | None:
    """Run with output straight to a file, so a run cut off at its deadline still says how far it got."""
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            return None


def run_tests(out: Path, env: dict[str, str], timeout: float, selection: list[str], marks: str = "gpu",
              workers: int = 1, name: str = "") -> dict[str, Any]:
    """One pytest run of the GPU tests that `marks` selects; `workers` > 1 spreads them over that many
    pytest-xdist processes (each its own GPU worker), where pytest-xdist is installed."""
    junit = out / f"junit{name}.xml"
    began = time.monotonic()
    spread = ["-n", str(workers), "--dist", "load"] if workers > 1 and _has_xdist() else []
    cmd = [sys.executable, "-m", "pytest", "-v", "-m", marks, *spread, *selection, f"--junitxml={junit}", "-p",
           "no:cacheprovider", "-o", "addopts=-ra"]
    log = out / f"pytest{name}.log"
    rc = _wait(cmd, env, log, timeout)
    tests = []
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            outcome, message = "passed", ""
            for tag in ("failure", "error", "skipped"):
                node = case.find(tag)
                if node is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                    message = (node.get("message") or "")[:600]
                    break
            tests.append({"name": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                          "seconds": round(float(case.get("time") or 0), 2), "message": message})
    if not tests and log.exists():  # cut off before pytest wrote its XML: the -v lines say
        tests = tests_from_log(log.read_text(errors="replace"))
    return {"returncode": rc, "cut_off": rc is None, "seconds": round(time.monotonic() - began, 2),
            "selection": selection, "marks": marks, "workers": workers if spread else 1, "tests": tests,
            "experts": experts(out / "experts")}


def _has_xdist() -> bool:
    import importlib.util

    return importlib.util.find_spec("xdist") is not None


def run_fast(out: Path, env: dict[str, str], timeout: float, selection: list[str], workers: int) -> dict[str, Any]:
    """The suite that attests a change in one GPU call: the tests whose verdicts do not rest on timing,
    spread over `workers` processes sharing the GPU; then the timing tests alone on it. Tests marked
    `release` (slow, and covered by faster ones) are left to the full suite."""
    began = time.monotonic()
    # Each process's GPU worker keeps a reference cache sized as a share of the GPU's memory: split it.
    shared = {**env, "PTXBENCH_REFERENCE_CACHE": f"{0.5 / max(workers, 1):.3f}"}
    spread = run_tests(out, shared, timeout * 0.4, selection, "gpu and not timing and not release", workers, "-spread")
    alone = run_tests(out, env, max(60.0, timeout - (time.monotonic() - began)), selection,
                      "gpu and timing and not release", 1, "-alone")
    return {"returncode": spread["returncode"] if spread["returncode"] else alone["returncode"],
            "cut_off": spread["cut_off"] or alone["cut_off"], "seconds": round(time.monotonic() - began, 2),
            "selection": selection, "mode": "fast",
            "phases": [{k: v for k, v in ph.items() if k not in ("tests", "experts")} for ph in (spread, alone)],
            "tests": spread["tests"] + alone["tests"], "experts": experts(out / "experts")}


_VERBOSE_LINE = re.compile(r"^(?P<name>tests/\S+::\S+)(?: (?P<outcome>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS))?")


def tests_from_log(text: str) -> list[dict[str, Any]]:
    """Outcomes from `pytest -v` output (no seconds): a test that began and never ended was cut off."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        m = _VERBOSE_LINE.match(line)
        if m:
            found[m.group("name")] = (m.group("outcome") or "cut_off").lower()
    return [{"name": name.replace("/", ".").replace(".py::", "::"), "outcome": outcome,
             "seconds": None, "message": "" if outcome != "cut_off" else "still running at the time limit"}
            for name, outcome in found.items()]


def experts(folder: Path) -> list[dict[str, Any]]:
    """The figures of each expert's `ptxbench check --json`, kept by the expert test."""
    found = []
    for path in sorted(folder.glob("*.json")):
        payload = json.loads(path.read_text())
        j = payload.get("judgement") or {}
        headline = next((s for s in j.get("sizes", []) if s.get("time_ms") is not None), {})
        found.append({
            "task": path.stem, "category": j.get("category"), "correct": j.get("correct"),
            "correct_heldout": j.get("correct_heldout"), "speedup": j.get("speedup"), "tflops": j.get("tflops"),
            "sol_fraction": j.get("sol_fraction"), "time_ms": j.get("time_ms"), "baseline": j.get("baseline"),
            "baseline_ms": j.get("baseline_ms"), "headline": headline.get("sizes"), "checks": headline.get("checks"),
            "sizes": [{"split": s["split"], "sizes": s["sizes"], "category": s["category"],
                       "max_rel_err": s.get("max_rel_err"), "element_ratio": s.get("element_ratio")}
                      for s in j.get("sizes", [])],
            "speed_of_light": (j.get("evidence") or {}).get("speed_of_light"),
        })
    return found


def run_benchmark(out: Path, env: dict[str, str], n: int, timeout: float) -> dict[str, Any]:
    result = out / "bench.json"
    began = time.monotonic()
    rc = _wait([sys.executable, "benchmarks/gpu_pipeline.py", "--n", str(n), "--json", str(result)], env,
               out / "bench.log", timeout)
    report = json.loads(result.read_text()) if result.exists() else {}
    if "batch" in report:
        report["batch"].pop("rows", None)
    return {"returncode": rc, "seconds": round(time.monotonic() - began, 2), **report}


def pack(out: Path) -> None:
    """Everything raw in one archive: a device call brings back only a few files."""
    keep = {"gpu-suite.json", "raw.tar.gz"}
    raw = [p for p in sorted(out.rglob("*")) if p.is_file() and p.name not in keep]
    with tarfile.open(out / "raw.tar.gz", "w:gz") as tar:
        for path in raw:
            tar.add(path, arcname=str(path.relative_to(out)))
    for path in raw:
        path.unlink()
    for folder in sorted((p for p in out.rglob("*") if p.is_dir()), reverse=True):
        folder.rmdir()


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    env = tool_env(out)
    parts = [p for p in args.parts.split(",") if p]
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": args.commit or os.environ.get("PTXBENCH_COMMIT") or "unknown",
        "device": device(), "tools": tool_versions(env), "parts": parts, "command": " ".join(sys.argv),
    }
    if "tests" in parts:
        bench_s = args.bench_s if args.bench_s is not None else (120.0 if args.full else 60.0)
        left = args.budget_s - (time.monotonic() - began) - (bench_s if "bench" in parts else 0)
        # Split as a shell would: `--pytest "tests/hostile -k 'a or b'"` keeps its expression whole.
        if args.full:
            report["tests"] = {**run_tests(out, env, max(60.0, left), shlex.split(args.pytest)), "mode": "full"}
        else:
            report["tests"] = run_fast(out, env, max(60.0, left), shlex.split(args.pytest), args.workers)
    if "bench" in parts:
        n = args.n if args.n is not None else (100 if args.full else 40)
        report["benchmark"] = run_benchmark(out, env, n, max(60.0, args.budget_s - (time.monotonic() - began)))
    report["seconds"] = round(time.monotonic() - began, 2)
    (out / "gpu-suite.json").write_text(json.dumps(report, indent=1, default=str))
    pack(out)
    print(summary_text(report))
    return 0


# -- the report ----------------------------------------------------------------------------------------

def _f(x: Any, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else "—"


def summary_text(report: dict[str, Any]) -> str:
    lines = [f"# GPU suite: {report['device'].get('name')} driver {report['device'].get('driver')}, "
             f"{report['date']}, commit {report['commit']}", ""]
    tests = report.get("tests")
    if tests:
        counts: dict[str, int] = {}
        for t in tests["tests"]:
            counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
        runs = tests.get("selections") or [" ".join(tests.get("selection", ["tests"]))]
        lines.append(f"Tests ({tests.get('mode', 'full')} suite; {'; '.join(f'`pytest -m gpu {r}`' for r in runs)}): {counts}"
                     + (" — CUT OFF by the time limit" if tests.get("cut_off") else "") + f", {tests['seconds']} s")
        for ph in tests.get("phases", []):
            lines.append(f"- phase `-m '{ph['marks']}'` on {ph['workers']} process(es): {ph['seconds']} s"
                         + (" — CUT OFF" if ph.get("cut_off") else ""))
        for t in tests["tests"]:
            if t["outcome"] not in ("passed", "skipped"):
                lines.append(f"- {t['outcome']}: {t['name']} ({t['seconds']} s): {t['message'][:300]}")
        for t in tests.get("superseded", []):
            lines.append(f"- earlier, in {t.get('folder')}: {t['outcome']}: {t['name']}: {t['message'][:300]} "
                         "(run again later; its later outcome is the one counted)")
        lines += ["", "| expert | category | held-out | speedup | TFLOP/s | of speed of light | library |",
                  "|---|---|---|---|---|---|---|"]
        for e in tests.get("experts", []):
            lines.append(f"| {e['task']} | {e['category']} | {'ok' if e['correct_heldout'] else e['correct_heldout']} | "
                         f"{_f(e['speedup'], '.3f')} | {_f(e['tflops'], '.0f')} | {_f(e['sol_fraction'], '.0%')} | "
                         f"{e.get('baseline') or '—'} |")
    for name, scale in sorted(report.items()):
        if name.startswith("scale") and isinstance(scale, dict) and scale.get("modes"):
            lines += ["", f"Scale ({name}: {scale.get('n')} {scale.get('task')} candidates through `ptxbench eval`):"]
            lines += [f"- {m['mode']}: {m['candidates_per_s']} candidates/s over {m['judging_s']} s of judging "
                      f"({m.get('ratio_to_one')}× one), categories {m['categories']}, same as one: {m.get('same_as_one')}"
                      for m in scale["modes"]]
    bench = (report.get("benchmark") or {}).get("batch", {}).get("summary")
    if bench:
        lines += ["", f"Benchmark ({bench.get('candidates')} GEMM candidates): {bench.get('wall_per_candidate_s')} s "
                  f"per candidate (batch wall time), median GPU time {bench.get('median_gpu_s')} s, categories "
                  f"{bench.get('categories')}; expert {bench.get('candidate_time_ms_median')} ms vs cuBLAS "
                  f"{bench.get('baseline_ms_median')} ms (speedup {bench.get('speedup_median')})"]
    return "\n".join(lines)


def _tests_of(folder: Path, part: dict[str, Any]) -> dict[str, Any] | None:
    tests = part.get("tests")
    if tests and not tests.get("tests") and (folder / "raw.tar.gz").exists():  # a report made before the log was read
        with tarfile.open(folder / "raw.tar.gz") as tar:
            member = next((m for m in tar.getmembers() if m.name == "pytest.log"), None)
            log = tar.extractfile(member) if member is not None else None
            if log is not None:
                tests = {**tests, "tests": tests_from_log(log.read().decode(errors="replace"))}
    return tests


def merge(args: argparse.Namespace) -> int:
    """One report from the folders of several runs on one commit: their tests, experts and benchmarks together,
    and any other reports (`--attach NAME=FILE`, e.g. the scale benchmark) under their names."""
    merged: dict[str, Any] = {"parts": [], "runs": []}
    tests: dict[str, Any] = {"selection": [], "selections": [], "tests": [], "experts": [], "seconds": 0.0,
                             "cut_off": False}
    for folder in map(Path, args.dirs):
        part = json.loads((folder / "gpu-suite.json").read_text())
        merged["parts"] += part.get("parts", [])
        merged["runs"].append({"folder": folder.name, "date": part.get("date"), "command": part.get("command"),
                               "seconds": part.get("seconds")})
        for key, value in part.items():
            if key not in ("parts", "tests", "benchmark") and key not in merged:
                merged[key] = value
        if part.get("benchmark"):
            merged["benchmark"] = part["benchmark"]
        t = _tests_of(folder, part)
        if t:
            tests["selection"] += t.get("selection", [])
            tests["selections"].append(" ".join(t.get("selection", [])))
            tests["tests"] += [{**x, "folder": folder.name} for x in t.get("tests", [])]
            tests["experts"] += t.get("experts", [])
            tests["seconds"] = round(tests["seconds"] + (t.get("seconds") or 0.0), 2)
            tests["cut_off"] = tests["cut_off"] or bool(t.get("cut_off"))
            tests.setdefault("phases", []).extend(t.get("phases", []))
            mode = t.get("mode", "full")
            tests["mode"] = mode if tests.get("mode") in (None, mode) else "mixed"
    # A test run again in a later folder (after a run was cut off, or after a fix to the test) counts once, with
    # its later outcome; an earlier outcome that differs is kept and shown, so a failure is never merged away.
    latest = {t["name"]: t for t in tests["tests"]}
    tests["superseded"] = [t for t in tests["tests"] if latest[t["name"]] is not t
                           and t["outcome"] != latest[t["name"]]["outcome"]]
    tests["tests"] = list(latest.values())
    # An expert judged again counts once, with its later judgement.
    tests["experts"] = list({e["task"]: e for e in tests["experts"]}.values())
    tests["selection"] = list(dict.fromkeys(tests["selection"]))
    tests["cut_off"] = any(t["outcome"] == "cut_off" for t in tests["tests"])
    if tests["tests"] or tests["experts"]:
        merged["tests"] = tests
    for item in args.attach or []:
        name, _, path = item.partition("=")
        merged[name] = json.loads(Path(path).read_text())
    stamp = datetime.datetime.fromisoformat(merged["date"]).strftime("%Y%m%d-%H%M")
    results = Path(args.results)
    (results / f"gpu-suite-{stamp}.json").write_text(json.dumps(merged, indent=1, default=str) + "\n")
    (results / f"gpu-suite-{stamp}.md").write_text(
        summary_text(merged) + "\n\nMade by `python3 scripts/gpu_suite.py run` on the GPU machine "
        f"(parts: {', '.join(merged['parts'])}), merged by `scripts/gpu_suite.py merge`; full figures in "
        f"gpu-suite-{stamp}.json.\n")
    print(results / f"gpu-suite-{stamp}.json")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu_suite.py")
    sub = parser.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ROOT / "results" / "gpu-suite")))
    r.add_argument("--parts", default=",".join(PARTS))
    r.add_argument("--n", type=int, default=None, help="benchmark candidates (default 100 full, 40 fast)")
    r.add_argument("--commit")
    r.add_argument("--budget-s", type=float, default=560.0)
    r.add_argument("--bench-s", type=float, default=None, help="time kept for the benchmark (120 s full, 60 s fast)")
    r.add_argument("--pytest", default=GPU_TESTS, help="what pytest collects (default: the files with GPU tests)")
    r.add_argument("--full", action="store_true",
                   help="every GPU test, one at a time (releases); default: the fast suite (run_fast)")
    r.add_argument("--workers", type=int, default=3, help="fast suite: processes sharing the GPU for untimed tests")
    m = sub.add_parser("merge")
    m.add_argument("dirs", nargs="+")
    m.add_argument("--results", default=str(ROOT / "results"))
    m.add_argument("--attach", action="append", metavar="NAME=FILE",
                   help="another report of the same commit, kept under NAME (e.g. scale=scale-gpu.json)")
    args = parser.parse_args()
    return run(args) if args.verb == "run" else merge(args)


if __name__ == "__main__":
    sys.exit(main())
