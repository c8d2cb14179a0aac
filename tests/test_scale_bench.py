"""benchmarks/scale_gpu.py runs without a GPU (--static): every mode judges the batch, as one worker does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("distributed")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(180)
def test_scale_benchmark_static(tmp_path: Path):
    env = {**os.environ, "PTXBENCH_COMMIT": "test"}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "scale_gpu.py"),
            "--static",
            "--n",
            "4",
            "--modes",
            "pool2,dask2",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=170,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "scale-gpu.json").read_text())
    assert [m["mode"] for m in report["modes"]] == ["one", "pool2", "dask2"]
    for m in report["modes"]:
        assert m["one_row_per_sample"] and m["same_as_one"] and m["candidates"] == 4
        assert sum(m["per_worker"].values()) == 4 and m["candidates_per_s"] > 0
    assert set(report["modes"][1]["per_worker"]) <= {"cpu0", "cpu1"}
    assert report["commit"] == "test" and "| pool2 |" in (tmp_path / "scale-gpu.md").read_text()
