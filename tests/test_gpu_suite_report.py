"""The GPU suite's report (scripts/gpu_suite.py): outcomes read from a run cut off before pytest wrote its
XML, and several runs on one commit merged with each test counted once, at its latest outcome."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_suite", ROOT / "scripts" / "gpu_suite.py")
assert spec is not None and spec.loader is not None
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)

LOG = "\n".join([
    "collecting ... collected 3 items",
    "tests/gpu/test_a.py::test_one PASSED [ 33%]",
    "tests/gpu/test_a.py::test_two[x] FAILED [ 66%]",
    "tests/test_crash_safety.py::test_killed_mid_batch ",  # begun, never ended: the time limit struck
])


def test_outcomes_come_from_the_verbose_log_of_a_cut_off_run():
    got = {t["name"]: t["outcome"] for t in suite.tests_from_log(LOG)}
    assert got == {"tests.gpu.test_a::test_one": "passed", "tests.gpu.test_a::test_two[x]": "failed",
                   "tests.test_crash_safety::test_killed_mid_batch": "cut_off"}


def _part(folder: Path, date: str, tests: list[dict], cut_off: bool) -> Path:
    folder.mkdir()
    (folder / "gpu-suite.json").write_text(json.dumps({
        "date": date, "commit": "abc", "device": {"name": "NVIDIA H200", "driver": "580"}, "parts": ["tests"],
        "tests": {"selection": [folder.name], "tests": tests, "experts": [], "seconds": 10.0, "cut_off": cut_off}}))
    return folder


def test_a_test_run_again_later_counts_once_with_its_later_outcome(tmp_path):
    first = _part(tmp_path / "first", "2026-12-01T13:00:00+00:00",
                  [{"name": "t::a", "outcome": "passed", "seconds": 1.0, "message": ""},
                   {"name": "t::b", "outcome": "cut_off", "seconds": None, "message": ""}], True)
    again = _part(tmp_path / "again", "2026-12-01T13:10:00+00:00",
                  [{"name": "t::b", "outcome": "passed", "seconds": 2.0, "message": ""}], False)
    extra = tmp_path / "scale.json"
    extra.write_text(json.dumps({"n": 2, "modes": []}))
    out = tmp_path / "results"
    out.mkdir()
    suite.merge(argparse.Namespace(dirs=[str(first), str(again)], results=str(out), attach=[f"scale={extra}"]))
    report = json.loads((out / "gpu-suite-20261201-1300.json").read_text())
    assert {t["name"]: t["outcome"] for t in report["tests"]["tests"]} == {"t::a": "passed", "t::b": "passed"}
    assert report["tests"]["cut_off"] is False and report["tests"]["seconds"] == 20.0
    assert report["scale"] == {"n": 2, "modes": []} and [r["folder"] for r in report["runs"]] == ["first", "again"]
    # The cut-off outcome it replaced is kept and shown; a test that kept its outcome is not listed twice.
    assert [(t["name"], t["outcome"], t["folder"]) for t in report["tests"]["superseded"]] == [("t::b", "cut_off", "first")]
    text = (out / "gpu-suite-20261201-1300.md").read_text()
    assert "earlier, in first: cut_off: t::b" in text and "`pytest -m gpu first`; `pytest -m gpu again`" in text


def test_an_expert_judged_again_counts_once_with_its_later_judgement(tmp_path):
    def expert(speedup: float) -> dict:
        return {"task": "vector_add_smoke", "category": "ok", "correct_heldout": True, "speedup": speedup,
                "tflops": 0.1, "sol_fraction": 0.6, "baseline": "torch.add"}

    folders = []
    for name, minute, speedup in (("first", "00", 0.99), ("again", "10", 0.98)):
        folder = _part(tmp_path / name, f"2026-12-01T13:{minute}:00+00:00", [], False)
        part = json.loads((folder / "gpu-suite.json").read_text())
        part["tests"]["experts"] = [expert(speedup)]
        (folder / "gpu-suite.json").write_text(json.dumps(part))
        folders.append(str(folder))
    out = tmp_path / "results"
    out.mkdir()
    suite.merge(argparse.Namespace(dirs=folders, results=str(out), attach=[]))
    report = json.loads((out / "gpu-suite-20261201-1300.json").read_text())
    assert [e["speedup"] for e in report["tests"]["experts"]] == [0.98]
