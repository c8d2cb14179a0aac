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
        assert m.expect in CATEGORIES and all(c in CATEGORIES for c in m.also)
        assert m.source.startswith(f"mutation of expert:{m.task}")
        assert len(m.fix) > 40


def test_a_pattern_that_no_longer_matches_fails_loudly(tmp_path):
    (tmp_path / "vector_add_smoke").mkdir()
    (tmp_path / "vector_add_smoke" / "kernel.ptx").write_text(".version 9.0\n.target sm_90a\n")
    m = next(m for m in mutations.load_mutations() if m.id == "add-wrong-op")
    with pytest.raises(mutations.MutationError, match="matched 0 times"):
        mutations.apply(m, tmp_path)


def test_also_must_be_a_list_of_names(tmp_path):
    """A bare string would otherwise be read as its letters."""
    bad = tmp_path / "mutations.toml"
    bad.write_text('[[mutation]]\nid = "x"\ntask = "vector_add_smoke"\nwhat = "w"\nexpect = "wrong_result"\n'
                   'also = "nan_inf"\nfix = "f"\n[[mutation.edit]]\nfind = "a"\n')
    with pytest.raises(mutations.MutationError, match="also must be a list"):
        mutations.load_mutations(bad)


def test_the_recorded_seed_matches_the_corpus():
    """Every variant has a recorded evaluation made from exactly the code it makes today.

    When an expert solution or a mutation changes, the GPU recording must be redone
    (scripts/record_seed.py), or the store would show evaluations of other code.
    """
    seed = json.loads((mutations.SOLUTIONS_DIR.parents[1] / "db" / "seed" / "recorded-h200.json").read_text())
    recorded = {s["seed_key"]: s for s in seed["samples"]}
    for m in mutations.load_mutations():
        sample = recorded.get(f"mutation:{m.id}")
        assert sample is not None, f"{m.id} has no recorded evaluation"
        v = mutations.apply(m)
        assert sample["code"] == v.code and sample["manifest"] == (json.loads(v.manifest) if v.manifest else None), m.id
        evaluation = sample["evaluations"][0]
        got = evaluation["category"] if m.shows_at == "train" else {
            x["category"] for x in evaluation["measurements"] if x["split"] == "heldout"}
        assert m.shows(got) if isinstance(got, str) else any(m.shows(c) for c in got), (m.id, m.expect, m.also, got)
    experts = {e["sample"] for e in seed["evaluations"]}
    assert {f"expert:{t}" for t in {m.task for m in mutations.load_mutations()}} <= experts
