"""docs/environment.md lists every PTXBENCH_* variable the project reads."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("engine", "tasks", "db", "services", "cli", "models", "fixit", "ptxbench_tui", "scripts", "benchmarks")


def test_every_variable_read_is_documented():
    read = set()
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*.py"):
            read |= set(re.findall(r"PTXBENCH_[A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8")))
    assert len(read) >= 15                     # the scan found the code
    documented = set(re.findall(r"PTXBENCH_[A-Z0-9_]*[A-Z0-9]", (ROOT / "docs" / "environment.md").read_text()))
    assert read <= documented, sorted(read - documented)
