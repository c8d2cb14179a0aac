"""Run the GPU test suite and the pipeline benchmark on a GPU machine; write one JSON report.

Usage (repository root, on the GPU machine, with ptxbench importable):
    python3 scripts/gpu_suite.py --out DIR [--n 100] [--budget-s 280]

Writes DIR/gpu_suite.json (device, driver, date, every test's outcome and
duration, the benchmark's figures) beside the raw logs, and prints a short
table last. NVIDIA's tools are taken from PATH or /usr/local/cuda/bin when the
PyPI wheels are not installed (PTXBENCH_PTXAS and friends).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tool_env() -> dict[str, str]:
    env = dict(os.environ)
    cuda_bin = Path("/usr/local/cuda/bin")
    if cuda_bin.is_dir() and str(cuda_bin) not in env.get("PATH", ""):
        env["PATH"] = f"{env.get('PATH', '')}:{cuda_bin}"
    for tool, var in (("ptxas", "PTXBENCH_PTXAS"), ("nvcc", "PTXBENCH_NVCC"),
                      ("cuobjdump", "PTXBENCH_CUOBJDUMP"), ("nvdisasm", "PTXBENCH_NVDISASM")):
        if var in env:
            continue
        found = shutil.which(tool, path=env["PATH"])
        if found:
            env[var] = found
    env.setdefault("PTXBENCH_CACHE", "/tmp/ptxbench-cache")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def device() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        text = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout
        name, driver, sm, sm_max, mem = (x.strip() for x in text.splitlines()[0].split(","))
        out.update(name=name, driver=driver, sm_clock=sm, sm_clock_max=sm_max, memory=mem)
    except Exception as exc:  # the report says what it could not read
        out["error"] = str(exc)
    return out


def run_tests(out: Path, env: dict[str, str], timeout: float) -> dict:
    junit = out / "junit.xml"
    log = out / "pytest.log"
    began = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-v", "-m", "gpu", "tests/gpu", f"--junitxml={junit}",
           "-p", "no:cacheprovider", "-o", "addopts=-ra"]
    # Output goes straight to the file, so a run cut off at its deadline still says how far it got.
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            rc = None
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
            tests.append({"name": case.get("name"), "outcome": outcome, "seconds": float(case.get("time") or 0),
                          "message": message})
    else:
        for line in log.read_text(errors="replace").splitlines():
            for word in ("PASSED", "FAILED", "ERROR", "SKIPPED"):
                if "::" in line and f" {word}" in line:
                    tests.append({"name": line.split("::", 1)[1].split(" ")[0], "outcome": word.lower(),
                                  "seconds": 0.0, "message": "(from the log: the run was cut off)"})
                    break
    return {"returncode": rc, "seconds": round(time.monotonic() - began, 2), "tests": tests}


def run_benchmark(out: Path, env: dict[str, str], n: int, timeout: float) -> dict:
    result = out / "bench.json"
    began = time.monotonic()
    cmd = [sys.executable, "benchmarks/gpu_pipeline.py", "--n", str(n), "--json", str(result)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        (out / "bench.log").write_text(proc.stdout + proc.stderr)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired as exc:
        (out / "bench.log").write_text(str(exc.stdout or "") + str(exc.stderr or ""))
        rc = None
    report = json.loads(result.read_text()) if result.exists() else {}
    if "batch" in report:
        report["batch"].pop("rows_omitted", None)
    return {"returncode": rc, "seconds": round(time.monotonic() - began, 2), **report}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ROOT / "results")))
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--budget-s", type=float, default=280.0)
    parser.add_argument("--bench-s", type=float, default=110.0, help="time kept for the benchmark")
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--skip-bench", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    env = tool_env()
    report: dict = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device(),
        "tools": {k: env.get(k) for k in ("PTXBENCH_PTXAS", "PTXBENCH_NVCC", "PTXBENCH_CUOBJDUMP")},
        "command": " ".join(sys.argv),
    }
    if not args.skip_tests:
        left = args.budget_s - (time.monotonic() - began) - (0 if args.skip_bench else args.bench_s)
        report["tests"] = run_tests(args.out, env, max(30.0, left))
    if not args.skip_bench:
        left = args.budget_s - (time.monotonic() - began)
        report["benchmark"] = run_benchmark(args.out, env, args.n, max(30.0, left))
    report["seconds"] = round(time.monotonic() - began, 2)
    (args.out / "gpu_suite.json").write_text(json.dumps(report, indent=1, default=str))

    log = args.out / "pytest.log"
    if log.exists():
        text = log.read_text()
        print(text[-5000:] if "passed" not in text[-300:] or "failed" in text[-300:] else text[-600:])
    blog = args.out / "bench.log"
    if blog.exists():
        print(blog.read_text()[-2500:])
    print(f"\n{report['device'].get('name')} driver {report['device'].get('driver')} {report['date']}")
    for t in report.get("tests", {}).get("tests", []):
        print(f"  {t['outcome']:8} {t['seconds']:7.2f}s  {t['name']}  {t['message'][:150]}")
    bench = report.get("benchmark", {})
    s = bench.get("batch", {}).get("summary", {})
    if s:
        print(f"bench: {s.get('candidates')} cands, wall/cand {s.get('wall_per_candidate_s')} s, "
              f"median gpu {s.get('median_gpu_s')} s, static {s.get('median_static_s')} s, "
              f"static+gpu {s.get('median_static_plus_gpu_s')} s; cats {s.get('categories')}")
        print(f"  expert {s.get('candidate_time_ms_median')} ms {s.get('tflops_median')} TFLOP/s, "
              f"cuBLAS {s.get('baseline_ms_median')} ms, speedup {s.get('speedup_median')}")
        print(f"  repeat {bench.get('repeat')}\n  do_bench {bench.get('do_bench')}")
    elif bench:
        print(f"bench rc {bench.get('returncode')}: see bench.log")
    print(f"total {report['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
