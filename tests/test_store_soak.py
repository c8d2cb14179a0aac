"""A short soak and crash of the store (benchmarks/store_soak.py for a few seconds): real `ptxbench eval`
batches and label writers killed with SIGTERM and SIGKILL at random moments, a process hogging the
write lock past the writers' patience, readers checking the file. Every write a writer confirmed is in
the store at the end (after the recovery journal is written), none twice, no traceback anywhere, and the
store is sound. The long run is the benchmark; docs/store.md quotes its figures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from store_soak import soak


@pytest.mark.timeout(180)
def test_a_short_soak_with_kills_loses_nothing_confirmed(tmp_path):
    figures = soak(tmp_path, seconds=8, samples=24, evals=2, labellers=2, readers=2, patience=1.0, seed=7)
    assert figures["writes_attempted"] > 0 and figures["labels"]["kept"] > 0
    assert figures["signals"]["SIGKILL"] + figures["signals"]["SIGTERM"] > 0
    assert figures["lost"] == 0, figures
    assert figures["writes_present"] == figures["writes_confirmed"]
    assert figures["tracebacks"] == 0, figures["traceback_outputs"]
    assert figures["written_twice"] == {"judgements": 0, "labels": 0}
    assert figures["integrity"] == "ok" and figures["foreign_key_problems"] == 0
    assert figures["journal_left"] == [] and figures["journal_set_aside"] == []
    assert figures["read_errors"] == [] and figures["reads"] > 0
