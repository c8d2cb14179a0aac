"""Fixtures for the hostile corpus: a private assembly cache, a working folder per case, and the
report (written only when PTXBENCH_HOSTILE_REPORT names a file)."""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hostile_cases import Outcome, load_cases, report_markdown

from ptxbench.engine.cache import Cache

REPORT_ENV = "PTXBENCH_HOSTILE_REPORT"
_outcomes: dict[str, Outcome] = {}


@pytest.fixture(scope="session")
def asm_cache(tmp_path_factory) -> Cache:
    """Assembly results cached in a temporary folder (never the user's cache)."""
    return Cache(tmp_path_factory.mktemp("asm-cache"))


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """The case's folder, also the working directory: a candidate that manages to run a command
    would leave its marker file here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def record():
    def add(outcome: Outcome) -> None:
        _outcomes[outcome.case.id] = outcome
    return add


def pytest_sessionfinish(session, exitstatus) -> None:
    target = os.environ.get(REPORT_ENV)
    if not target or not _outcomes:
        return
    stages = sorted({o.case.stage for o in _outcomes.values()})
    where = (f"Made by `pytest tests/hostile` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC "
             f"({', '.join(stages)} cases run here).")
    # Several pytest processes (the fast GPU suite's xdist workers, its timed phase) each write their own.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker or Path(target).exists():
        base = Path(target)
        target = str(base.with_name(f"{base.stem}-{worker or 'main'}-{os.getpid()}{base.suffix}"))
    Path(target).write_text(report_markdown(_outcomes, load_cases(), title="Hostile candidates", where=where))
