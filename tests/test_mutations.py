"""The mutation corpus applies cleanly to the shipped expert solutions and says where it came from."""

import json

import pytest

from ptxbench.engine.categories import CATEGORIES
from ptxbench.tasks import mutations
from ptxbench.tasks.spec import task_ids


def test_every_mutation_applies_and_changes_something():
    muts = mutations.load_mutations()
    assert len(muts) >= 20
    for m in muts:
        v = mutations.apply(m)
        folder = mutations.SOLUTIONS_DIR / m.task
        before = (folder / "kernel.ptx").read_text(), (folder / "manifest.json").read_text()
        assert (v.code, v.manifest) != before, m.id
        if v.manifest is not None:
            json.loads(v.manifest)  # manifest edits keep valid JSON; the defect is in its meaning
        assert m.task in task_ids()
        assert m.expect in CATEGORIES
        assert m.source.startswith(f"mutation of expert:{m.task}")
        assert len(m.fix) > 40


def test_a_pattern_that_no_longer_matches_fails_loudly(tmp_path):
    (tmp_path / "vector_add_smoke").mkdir()
    (tmp_path / "vector_add_smoke" / "kernel.ptx").write_text(".version 9.0\n.target sm_90a\n")
    m = next(m for m in mutations.load_mutations() if m.id == "add-wrong-op")
    with pytest.raises(mutations.MutationError, match="matched 0 times"):
        mutations.apply(m, tmp_path)
