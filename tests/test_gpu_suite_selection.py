"""The GPU suite collects every file that holds a GPU test, and nothing that needs more than the GPU
machine's image has (scripts/gpu_suite.py GPU_TESTS)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_file_with_gpu_tests_is_in_the_suite():
    spec = importlib.util.spec_from_file_location("gpu_suite", ROOT / "scripts" / "gpu_suite.py")
    assert spec is not None and spec.loader is not None
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    selected = suite.GPU_TESTS.split()
    with_gpu = [p for p in (ROOT / "tests").rglob("test_*.py") if re.search(r"pytest\.mark\.gpu\b", p.read_text())]
    for path in with_gpu:
        rel = path.relative_to(ROOT).as_posix()
        assert any(rel == s or rel.startswith(s.rstrip("/") + "/") for s in selected), rel
