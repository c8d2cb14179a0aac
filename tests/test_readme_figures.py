"""The README's GPU figures are those of the newest full GPU suite report (scripts/readme_figures.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("readme_figures", ROOT / "scripts" / "readme_figures.py")
assert spec is not None and spec.loader is not None
figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(figures)


def test_the_readme_shows_the_newest_gpu_report():
    path = figures.newest_report()
    text = figures.README.read_text()
    report = figures.with_scale(json.loads(path.read_text()), path.name)
    assert figures.render(text, report, path.name) == text, (
        f"README.md's GPU figures are stale: run python scripts/readme_figures.py ({path.name})")
    assert path.name in text


def test_a_report_fills_the_marked_sections_and_nothing_else():
    report = {"date": "2026-12-01T10:00:00+00:00", "commit": "abc", "device": {"name": "NVIDIA H200", "driver": "580"},
              "tests": {"seconds": 12.0, "tests": [{"outcome": "passed"}, {"outcome": "failed"}],
                        "experts": [{"task": "gemm_bf16_sm90a", "category": "ok", "correct": True,
                                     "correct_heldout": True, "speedup": 0.985, "tflops": 779.2, "sol_fraction": 0.728,
                                     "baseline": "cuBLAS (torch.matmul)", "headline": {"M": 8192}}]},
              "benchmark": {"batch": {"summary": {"candidates": 100, "wall_per_candidate_s": 0.3, "median_gpu_s": 0.25,
                                                  "categories": {"ok": 80}}}}}
    text = ("intro\n<!-- figures:experts begin x -->\nold\n<!-- figures:experts end -->\nmiddle\n"
            "<!-- figures:gpu-speed begin -->\n<!-- figures:gpu-speed end -->\nend\n")
    out = figures.render(text, report, "gpu-suite-x.json")
    assert out.startswith("intro\n") and "\nmiddle\n" in out and out.endswith("end\n") and "old" not in out
    assert "| `ok` | 779 TFLOP/s | 73% | cuBLAS (torch.matmul) | 0.985× | ok / ok |" in out
    assert "1 passed, 1 failed or not run" in out and "0.300 s per candidate" in out
    scale = {"n": 10, "modes": [{"mode": "one", "candidates": 10, "judging_s": 11.0, "candidates_per_s": 0.91},
                                {"mode": "pool2", "candidates": 10, "judging_s": 8.0, "candidates_per_s": 1.25,
                                 "ratio_to_one": 1.37, "same_as_one": False}]}
    scaled = figures.render(text, {**report, "scale": scale}, "gpu-suite-x.json")
    assert "1.10 s per candidate (0.91 candidates/s)" in scaled and "1.37× one, categories DIFFERENT" in scaled
    assert figures.render(out, report, "gpu-suite-x.json") == out


def test_a_follow_up_report_of_a_few_tests_leaves_the_figures_to_the_last_full_one(tmp_path):
    full = {"date": "2026-12-01T10:00:00+00:00", "benchmark": {"batch": {}}, "tests": {"experts": [{"task": "t"}]}}
    partial = {"date": "2026-12-01T11:00:00+00:00", "tests": {"tests": [{"outcome": "passed"}]}}
    (tmp_path / "gpu-suite-20261201-1000.json").write_text(json.dumps(full))
    (tmp_path / "gpu-suite-20261201-1100.json").write_text(json.dumps(partial))
    assert figures.newest_report(tmp_path).name == "gpu-suite-20261201-1000.json"


def test_scale_figures_come_from_the_newest_report_that_has_them_and_say_so(tmp_path):
    scale = {"n": 10, "modes": [{"mode": "one", "candidates": 10, "judging_s": 11.0, "candidates_per_s": 0.91}]}
    older = {"date": "2026-12-01T09:00:00+00:00", "commit": "old", "scale": scale}
    newer = {"date": "2026-12-01T10:00:00+00:00", "commit": "new", "device": {"name": "NVIDIA H200"}}
    (tmp_path / "gpu-suite-20261201-0900.json").write_text(json.dumps(older))
    (tmp_path / "gpu-suite-20261201-1000.json").write_text(json.dumps(newer))
    got = figures.with_scale(newer, "gpu-suite-20261201-1000.json", tmp_path)
    table = figures.gpu_speed_table(got, "gpu-suite-20261201-1000.json")
    assert "[gpu-suite-20261201-0900.json](results/gpu-suite-20261201-0900.json), at commit `old`" in table
    # A report with its own scale figures keeps them.
    assert figures.with_scale(older, "gpu-suite-20261201-0900.json", tmp_path) is older
