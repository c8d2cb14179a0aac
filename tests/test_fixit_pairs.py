"""Fix pairs from a real store: which fix each failure gets, which pairs count, how they are
stored and read back (also through the explorer's read-only connection)."""

from __future__ import annotations

import pytest
from fixit_data import (
    add_mutant, add_turn, expert_id, judge_row, model_run, mutation, new_store, pass_experts, rec, trajectory_store,
)

from ptxbench.db.browse import connect
from ptxbench.db.fixit import (
    add_explanation, fixit_pairs, fixit_stats, load_samples, save_export_stats, store_pairs, stored_pairs,
)
from ptxbench.db.records import Label
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_label
from ptxbench.fixit.explain import DERIVED_SOURCE, derived_explanation
from ptxbench.fixit.pairing import SOURCE_PREFIX, kind_of, propose_pairs
from ptxbench.fixit.records import GPU_VERIFIED, NOT_PASSING, STATIC_ONLY, UNJUDGED


@pytest.fixture
def built(tmp_path):
    return trajectory_store(tmp_path)


def _pairs(db, **kw):
    return propose_pairs(load_samples(db), **kw)


def test_each_failure_gets_its_best_fix(built):
    db = open_store(built.path)
    ids = built.ids
    found = _pairs(db)
    by_failed = {p.failed.id: p for p in found.pairs}
    # the failure fixed by the model's own next turn
    assert by_failed[ids["t1"]].fixed.id == ids["t2"] and by_failed[ids["t1"]].kind == "later_turn"
    # the failure never fixed in its trajectory: another trajectory of the same model fixes it
    same = by_failed[ids["u1"]]
    assert same.kind == "same_model" and same.fixed.id in (ids["t2"], ids["p1"])
    # the rmsnorm failure's only fix passed statically: reported, not counted
    assert ids["r1"] not in by_failed
    assert [(p.failed.id, p.fixed.id, p.verification) for p in found.unverified] == [
        (ids["r1"], ids["r2"], STATIC_ONLY)]
    # passes are never paired as failures
    assert not {ids["t2"], ids["p1"]} & set(by_failed)


def test_static_fixes_count_only_when_allowed(built):
    db = open_store(built.path)
    found = _pairs(db, allow_static=True)
    assert (built.ids["r1"], built.ids["r2"]) in {p.key for p in found.pairs}
    assert not found.unverified


def test_expert_is_the_fix_of_last_resort(tmp_path):
    db, _ = new_store(tmp_path)
    pass_experts(db, ["vector_add_smoke"])
    run = model_run(db)
    _, v = mutation("add-wrong-op")
    lone = add_turn(db, run, "vector_add_smoke", v.code)
    judge_row(db, lone, "wrong_result", task_id="vector_add_smoke")
    found = _pairs(db)
    assert [(p.failed.id, p.fixed.id, p.kind) for p in found.pairs] == [
        (lone, expert_id(db, "vector_add_smoke"), "expert")]
    # without the expert kind it has no fix at all
    assert _pairs(db, kinds=("later_turn", "same_model")).failed_without_fix == [lone]
    with pytest.raises(ValueError, match="unknown pair kind"):
        _pairs(db, kinds=("mutation",))


def test_a_fix_that_fails_on_reverification_stops_counting(built):
    db = open_store(built.path)
    t2 = built.ids["t2"]
    judge_row(db, t2, "wrong_result", task_id="vector_add_smoke")  # a newer evaluation speaks for the sample
    found = _pairs(db)
    t1_pair = next(p for p in found.pairs if p.failed.id == built.ids["t1"])
    assert t1_pair.fixed.id != t2 and t1_pair.kind == "same_model"
    # t2 is now a failure itself, and is paired
    assert any(p.failed.id == t2 for p in found.pairs)


def test_marked_only_follows_a_persons_triage(built):
    db = open_store(built.path)
    assert _pairs(db, marked_only=True).pairs == []
    add_label(db, Label(sample_id=built.ids["u1"], author="tester", fixit_candidate=True))
    assert [p.failed.id for p in _pairs(db, marked_only=True).pairs] == [built.ids["u1"]]


def test_relabelled_category_is_used_for_balance(built):
    db = open_store(built.path)
    add_label(db, Label(sample_id=built.ids["t1"], author="tester", category="illegal_address"))
    s = next(s for s in load_samples(db) if s.id == built.ids["t1"])
    assert s.category == "wrong_result" and s.balance_category == "illegal_address"


def test_stored_pairs_round_trip_with_preferred_explanation(built):
    db = open_store(built.path)
    found = _pairs(db)
    fixes = store_pairs(db, [(p, derived_explanation(p), DERIVED_SOURCE) for p in found.pairs])
    assert len(fixes) == len(found.pairs) and all(f.source.startswith(SOURCE_PREFIX) for f in fixes)
    again = _pairs(db, existing={(f.failed_sample_id, f.fixed_sample_id) for f in fixes})
    assert again.pairs == [] and again.already_stored == len(fixes)

    stored = {p.key: p for p in stored_pairs(db)}
    t1_key = (built.ids["t1"], built.ids["t2"])
    assert stored[t1_key].kind == "later_turn" and stored[t1_key].explanation_source == DERIVED_SOURCE
    add_explanation(db, stored[t1_key], "The fourth lane subtracted; the fix adds in every lane.", "model:tester")
    stored = {p.key: p for p in stored_pairs(db)}
    assert stored[t1_key].explanation_source == "model:tester"
    assert stored[t1_key].kind == "later_turn"  # the first row says what made the pair
    rows = {(r.failed_sample_id, r.fixed_sample_id): r for r in fixit_pairs(db)}
    assert rows[t1_key].explanations == 2 and rows[t1_key].verification == GPU_VERIFIED


def test_explorer_queries_on_a_read_only_connection(built):
    db = open_store(built.path)
    found = _pairs(db, allow_static=True)
    store_pairs(db, [(p, derived_explanation(p), DERIVED_SOURCE) for p in found.pairs])
    add_mutant(db, "add-wrong-target")
    save_export_stats(db, {"all": {"pairs": 3}}, "out.jsonl")
    db.conn.close()

    conn = connect(built.path, cached=False)
    rows = fixit_pairs(conn)
    assert {r.kind for r in rows} == {"later_turn", "same_model", "mutation"}
    assert [r.category for r in fixit_pairs(conn, category="target_mismatch")] == ["target_mismatch"]
    assert all(not r.counts for r in rows if r.verification == STATIC_ONLY)
    assert len(fixit_pairs(conn, verified_only=True)) == len(rows) - 1
    assert len(fixit_pairs(conn, limit=1, offset=1)) == 1
    stats = fixit_stats(conn)
    assert stats["pairs"] == 4 and stats["verified"] == 3 and stats["unverified"] == 1
    assert stats["per_kind"] == {"later_turn": 1, "mutation": 1, "same_model": 1}
    assert stats["failed_samples"] == 4 and stats["failed_with_a_verified_pair"] == 3
    assert stats["last_export"] == {"path": "out.jsonl", "all": {"pairs": 3}}
    conn.close()


def test_verification_states():
    code = "ret;"
    assert rec(1, "vector_add_smoke", code, category="ok").verification == GPU_VERIFIED
    assert rec(2, "vector_add_smoke", code, category="ok", static=True).verification == STATIC_ONLY
    assert rec(3, "vector_add_smoke", code, category="syntax").verification == NOT_PASSING
    s = rec(4, "vector_add_smoke", code)
    s.evaluation_id = s.category = None
    assert s.verification == UNJUDGED and not s.failure
    held = rec(5, "vector_add_smoke", code, category="ok", correct_heldout=False, heldout_category="out_of_bounds_write")
    assert held.heldout_failure and not held.train_failure and held.balance_category == "out_of_bounds_write"


def test_kind_of_reads_sources_and_samples():
    f = rec(1, "vector_add_smoke", "a")
    g = rec(2, "vector_add_smoke", "b", category="ok")
    assert kind_of("fixit pairs: later_turn", f, g) == "later_turn"
    assert kind_of("fixit repair: model:x", f, g) == "repair"
    f.model_kind = "mutation"
    assert kind_of("tasks/mutations.toml", f, g) == "mutation"
    f.model_kind = "model"
    g.model_kind = "expert"
    assert kind_of("by hand", f, g) == "expert"
    g.model_kind, g.model = "model", "other"
    assert kind_of("by hand", f, g) == "recorded"


def test_the_engine_side_never_imports_the_store():
    import ast
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "fixit"
    files = sorted(folder.glob("*.py"))
    assert len(files) >= 5, f"no Fixit modules found in {folder}"     # a moved folder must not pass by finding none
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad = [n for n in names if n.startswith(("ptxbench.db", "ptxbench.models", "ptxbench.tui", "textual"))]
            assert not bad, f"{path.name} imports {bad}"
