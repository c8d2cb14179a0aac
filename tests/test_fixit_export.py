"""The fine-tuning set: normalisation, deduplication, caps, splits that never leak, and the
files (JSONL, Parquet) with their statistics."""

from __future__ import annotations

import json
import re

import pytest
from fixit_data import expert_code, mutation, pair_of, rec, variants

from ptxbench.fixit.export import build_examples, read_jsonl, write_jsonl, write_parquet
from ptxbench.fixit.normalize import normalize_ptx, renumber_registers, strip_noise
from ptxbench.fixit.select import SelectConfig, leaks, select_pairs, variant_tags
from ptxbench.fixit.stats import diversity_stats, distribution, entropy_bits

VADD = expert_code("vector_add_smoke")
HELD_OUT_N = str((1 << 24) + 3)


def _prompt(task_id: str, level: str) -> tuple[str, str]:
    return f"system for {task_id}", f"# Task `{task_id}`\nlevel {level}"


def _rename(code: str, old: str, new: str) -> str:
    return re.sub(rf"{re.escape(old)}\b", new, code)


# -- normalisation --------------------------------------------------------------------------------

def test_normalisation_ignores_comments_debug_lines_whitespace_and_register_names():
    a = ".visible .entry k()\n{\n\tadd.f32 %f3, %f1, %f2; // sum\n\t.loc 1 2 3\n\tst.f32 [%rd7], %f3;\n}\n"
    b = "/* header */\n.visible .entry k()\n{\n   add.f32   %f9, %f4, %f5;\n\n\tst.f32 [%rd1], %f9;\n}\n"
    assert normalize_ptx(a) == normalize_ptx(b)
    assert normalize_ptx(a) != normalize_ptx(a.replace("add.f32", "sub.f32"))
    assert ".loc" not in strip_noise(a) and "//" not in strip_noise(a)
    # special registers are not renumbered
    assert renumber_registers("mov.u32 %r5, %tid.x;") == "mov.u32 %r0, %tid.x;"
    # the manifest is part of the candidate
    assert normalize_ptx(a, {"launches": [{"entry": "k"}]}) != normalize_ptx(a)


# -- deduplication --------------------------------------------------------------------------------

def test_exact_and_near_duplicates_are_dropped_and_distinct_bugs_kept():
    fixed = rec(100, "vector_add_smoke", VADD, category="ok", kind="expert", model="expert")
    _, wrong = mutation("add-wrong-op")
    _, nostore = mutation("add-dropped-store")
    original = rec(1, "vector_add_smoke", wrong.code)
    # the same kernel with registers renamed and comments added: an exact duplicate once normalised
    renamed = _rename(_rename(wrong.code, "%f27", "%f99"), "%rd54", "%rd98")
    exact = rec(2, "vector_add_smoke", "// retry\n" + renamed)
    # the same bug plus one harmless extra instruction: a near duplicate
    near = rec(3, "vector_add_smoke", variants(wrong.code, 1)[0])
    other_bug = rec(4, "vector_add_smoke", nostore.code)
    pairs = [pair_of(s, fixed) for s in (original, exact, near, other_bug)]
    sel = select_pairs(pairs, SelectConfig(val_fraction=0))
    kept = sorted(s.pair.failed.id for s in sel.chosen)
    assert kept == [1, 4]
    reasons = {p.failed.id: r.split(":")[0] for p, r in sel.dropped}
    assert reasons == {2: "duplicate", 3: "near_duplicate"}
    # a stricter threshold than the pair's similarity keeps the near copy
    strict = select_pairs(pairs, SelectConfig(val_fraction=0, dedup_threshold=1.0))
    assert sorted(s.pair.failed.id for s in strict.chosen) == [1, 3, 4]


def test_a_fix_that_only_renames_a_register_is_a_change():
    # found on the recorded mutation corpus: with register numbers erased, renaming the undeclared
    # %rd99 back to %rd54 looked like no change at all, and the pair passed for a near copy of another
    fixed = rec(100, "vector_add_smoke", VADD, category="ok", kind="expert", model="expert")
    pairs = [pair_of(rec(i, "vector_add_smoke", mutation(mid)[1].code, category=cat), fixed, "mutation")
             for i, (mid, cat) in enumerate((("add-dropped-store", "unwritten_output"),
                                             ("add-undeclared-register", "undefined_symbol")))]
    sel = select_pairs(pairs, SelectConfig(val_fraction=0))
    assert len(sel.chosen) == 2 and sel.dropped == []


def test_preferred_copy_survives_deduplication():
    fixed = rec(100, "vector_add_smoke", VADD, category="ok", kind="expert", model="expert")
    _, wrong = mutation("add-wrong-op")
    derived = pair_of(rec(1, "vector_add_smoke", wrong.code), fixed, "expert")
    explained = pair_of(rec(2, "vector_add_smoke", wrong.code), fixed, "expert", "lane 4 subtracts", "model:x")
    sel = select_pairs([derived, explained], SelectConfig(val_fraction=0))
    assert [s.pair.failed.id for s in sel.chosen] == [2]


def test_one_pair_per_failed_sample():
    failed = rec(1, "vector_add_smoke", mutation("add-wrong-op")[1].code)
    a = pair_of(failed, rec(10, "vector_add_smoke", VADD, category="ok"), "same_model")
    b = pair_of(failed, rec(11, "vector_add_smoke", VADD + "\n// x\n", category="ok"), "later_turn")
    sel = select_pairs([a, b], SelectConfig(val_fraction=0))
    assert [s.pair.kind for s in sel.chosen] == ["later_turn"]
    both = select_pairs([a, b], SelectConfig(val_fraction=0, one_per_failed=False, dedup_threshold=1.0))
    assert len(both.chosen) == 1  # the two fixes are the same kernel once comments go: still one pair


# -- caps -----------------------------------------------------------------------------------------

def _many(task_id: str, code: str, category: str, n: int, start: int) -> list:
    fixed = rec(start + 10_000, task_id, code, category="ok", kind="expert", model="expert")
    return [pair_of(rec(start + i, task_id, v, category=category), fixed)
            for i, v in enumerate(variants(code, n, start=start))]


def test_caps_per_task_and_category_fill_round_robin():
    rms = expert_code("rmsnorm_bf16_sm90a")
    pairs = (_many("vector_add_smoke", VADD, "wrong_result", 12, 0)
             + _many("vector_add_smoke", VADD, "syntax", 3, 100)
             + _many("rmsnorm_bf16_sm90a", rms, "wrong_result", 5, 200)
             + _many("rmsnorm_bf16_sm90a", rms, "hang_timeout", 4, 300))
    sel = select_pairs(pairs, SelectConfig(cap_per_task=6, cap_per_category=8, val_fraction=0))
    chosen = [s.pair for s in sel.chosen]
    per_task: dict[str, int] = {}
    per_cat: dict[str, int] = {}
    for p in chosen:
        per_task[p.task_id] = per_task.get(p.task_id, 0) + 1
        per_cat[p.category] = per_cat.get(p.category, 0) + 1
    assert per_task == {"vector_add_smoke": 6, "rmsnorm_bf16_sm90a": 6}
    assert all(n <= 8 for n in per_cat.values())
    # round-robin over categories: the rare ones are not crowded out of a capped task
    # (vector_add: 3 syntax + 3 wrong_result; rmsnorm: 4 hang_timeout + 2 wrong_result)
    assert per_cat == {"syntax": 3, "hang_timeout": 4, "wrong_result": 5}
    dropped = sel.dropped_counts()
    assert dropped == {"cap_per_task": len(pairs) - 12}
    tight = select_pairs(pairs, SelectConfig(cap_per_task=None, cap_per_category=2, val_fraction=0))
    assert len(tight.chosen) == 6 and tight.dropped_counts() == {"cap_per_category": len(pairs) - 6}
    with pytest.raises(ValueError, match="cap_per_task"):
        SelectConfig(cap_per_task=0)


# -- splits ---------------------------------------------------------------------------------------

def _attention_pairs() -> list:
    pairs = []
    sid = 0
    for task_id in ("attn_fwd_sm90a", "attn_fwd_causal_sm90a", "attn_bwd_sm90a", "attn_bwd_causal_sm90a"):
        code = expert_code(task_id)
        fixed = rec(50_000 + sid, task_id, code, category="ok", kind="expert", model="expert")
        for i, v in enumerate(variants(code, 3)):
            sid += 1
            pairs.append(pair_of(rec(sid, task_id, v, category=("wrong_result", "hang_timeout", "nan_inf")[i]),
                                 fixed, "expert"))
    return pairs


def test_variant_held_out_never_reaches_training():
    pairs = _attention_pairs()
    sel = select_pairs(pairs, SelectConfig(heldout_variants=("causal",), val_fraction=0.25))
    held = sel.split("heldout")
    assert {s.pair.task_id for s in held} == {"attn_fwd_causal_sm90a", "attn_bwd_causal_sm90a"}
    assert all(s.heldout_reason == "variant causal" for s in held)
    trainval = sel.split("train") + sel.split("val")
    assert trainval and not any("causal" in s.pair.task_id for s in trainval)
    assert len(sel.split("val")) >= 1
    assert leaks(sel) == []


def test_leak_guard_drops_a_near_copy_of_a_held_out_kernel():
    pairs = _attention_pairs()
    # a non-causal "failure" whose fix is, in fact, the causal kernel: training on it would teach it
    causal = expert_code("attn_fwd_causal_sm90a")
    smuggled = pair_of(rec(900, "attn_fwd_sm90a", variants(expert_code("attn_fwd_sm90a"), 5)[4]),
                       rec(901, "attn_fwd_sm90a", causal + "\n// copied\n", category="ok"), "same_model")
    sel = select_pairs([*pairs, smuggled], SelectConfig(heldout_tasks=("attn_fwd_causal_sm90a",), val_fraction=0))
    assert smuggled.key not in {s.pair.key for s in sel.chosen}
    assert any(p.key == smuggled.key and r.startswith("leak") for p, r in sel.dropped)
    assert leaks(sel) == []


def test_size_held_out_failures_and_their_near_copies():
    fixed = rec(100, "vector_add_smoke", VADD, category="ok", kind="expert", model="expert")
    _, bound = mutation("add-vector-bound-off-by-one")
    held = rec(1, "vector_add_smoke", bound.code, category="ok", correct_heldout=False,
               heldout_category="out_of_bounds_write")
    # the same bug (and two more changed lines, so it is no near duplicate), caught at a train size in
    # another sample: training on it would teach the held-out fix
    two_more = variants(variants(bound.code, 1)[0], 1, start=5)[0]
    same_bug = rec(2, "vector_add_smoke", two_more, category="out_of_bounds_write")
    other = rec(3, "vector_add_smoke", mutation("add-wrong-op")[1].code)
    pairs = [pair_of(held, fixed, "mutation"), pair_of(same_bug, fixed, "mutation"), pair_of(other, fixed, "mutation")]
    sel = select_pairs(pairs, SelectConfig(val_fraction=0))
    assert [(s.pair.failed.id, s.split) for s in sorted(sel.chosen, key=lambda s: s.pair.failed.id)] == [
        (1, "heldout"), (3, "train")]
    assert any(p.failed.id == 2 and r.startswith("leak") for p, r in sel.dropped)
    assert leaks(sel) == []
    ex = build_examples(sel, prompt_for=_prompt)
    train_text = json.dumps([e.to_dict() for e in ex if e.split != "heldout"])
    held_text = json.dumps([e.to_dict() for e in ex if e.split == "heldout"])
    assert HELD_OUT_N not in train_text and HELD_OUT_N in held_text
    # without the size rule the size-only failure is left out, never trained on
    off = select_pairs(pairs, SelectConfig(val_fraction=0, heldout_size_failures=False))
    assert 1 not in {s.pair.failed.id for s in off.chosen}


def test_validation_split_is_stable_and_disjoint():
    pairs = _many("vector_add_smoke", VADD, "wrong_result", 20, 0)
    a = select_pairs(pairs, SelectConfig(val_fraction=0.2, seed=3))
    b = select_pairs(list(reversed(pairs)), SelectConfig(val_fraction=0.2, seed=3))
    val_a = {s.key for s in a.split("val")}
    assert val_a == {s.key for s in b.split("val")} and len(val_a) == 4
    assert not val_a & {s.key for s in a.split("train")}
    c = select_pairs(pairs, SelectConfig(val_fraction=0.2, seed=4))
    assert {s.key for s in c.split("val")} != val_a


def test_unverified_and_non_failing_pairs_stay_out():
    fixed_static = rec(100, "vector_add_smoke", VADD, category="ok", static=True)
    failed = rec(1, "vector_add_smoke", mutation("add-wrong-op")[1].code)
    passing = rec(2, "vector_add_smoke", VADD + "\n// fine\n", category="ok")
    sel = select_pairs([pair_of(failed, fixed_static), pair_of(passing, fixed_static)])
    assert sel.chosen == [] and sel.dropped_counts() == {"unverified": 1, "not_failing": 1}
    assert len(select_pairs([pair_of(failed, fixed_static)], SelectConfig(allow_static=True)).chosen) == 1


def test_variant_tags():
    assert {"attn", "fwd", "causal", "sm90a", "sm_90a"} <= variant_tags("attn_fwd_causal_sm90a", "sm_90a")
    assert "sm_100a" in variant_tags("gemm_bf16_sm100a", "sm_100a")


# -- files and statistics -------------------------------------------------------------------------

def test_examples_files_and_statistics(tmp_path):
    pairs = _attention_pairs()[:6] + _many("vector_add_smoke", VADD, "syntax", 4, 700)
    pairs[0].explanation, pairs[0].explanation_source = "The barrier was never waited on.", "model:tester"
    sel = select_pairs(pairs, SelectConfig(heldout_variants=("causal",), val_fraction=0.2))
    examples = build_examples(sel, prompt_for=_prompt)
    assert len(examples) == len(sel.chosen)
    ex = next(e for e in examples if e.meta["failed_sample_id"] == pairs[0].failed.id)
    roles = [m["role"] for m in ex.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert ex.messages[2]["content"].startswith("```ptx\n")
    assert ex.messages[3]["content"].startswith("Your kernel was judged: wrong_result")
    assert ex.messages[4]["content"].startswith("The barrier was never waited on.")
    assert pairs[0].fixed.code.strip() in ex.messages[4]["content"]
    assert ex.meta["explanation_source"] == "model:tester"
    derived = next(e for e in examples if e.meta["category"] == "syntax")
    assert derived.meta["explanation_source"] == "derived from diff"
    assert derived.messages[4]["content"].startswith("What failed: `syntax`")
    # asked for, every example gets the derived explanation, the model's one too
    all_derived = build_examples(sel, prompt_for=_prompt, explanation="derived")
    assert {e.meta["explanation_source"] for e in all_derived} == {"derived from diff"}
    with pytest.raises(ValueError, match="explanation must be"):
        build_examples(sel, prompt_for=_prompt, explanation="mine")

    out = tmp_path / "set.jsonl"
    assert write_jsonl(out, examples) == len(examples)
    back = read_jsonl(out)
    assert [e.to_dict() for e in back] == [e.to_dict() for e in examples]
    assert {e.split for e in read_jsonl(out, split="heldout")} == {"heldout"}
    pq = tmp_path / "set.parquet"
    write_parquet(pq, examples)
    import pyarrow.parquet as pqm

    table = pqm.read_table(pq)
    assert table.num_rows == len(examples)
    assert table.column("messages").to_pylist()[0][0]["role"] == "system"
    assert set(table.column("split").to_pylist()) == {"train", "val", "heldout"}

    bad = tmp_path / "bad.jsonl"
    bad.write_text(out.read_text().splitlines()[0] + "\n{\"id\": 1}\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        read_jsonl(bad)

    stats = diversity_stats(examples, sel)
    assert stats["all"]["pairs"] == len(examples)
    assert stats["heldout"]["per_task"] == {"attn_fwd_causal_sm90a": 3}
    assert stats["all"]["per_arch"] == {"sm_90a": len(examples)}
    assert sum(stats["train"]["per_category"].values()) == stats["train"]["pairs"]
    assert stats["all"]["length_chars"]["min"] <= stats["all"]["length_chars"]["p50"] <= stats["all"]["length_chars"]["max"]
    assert stats["config"]["heldout_variants"] == ["causal"]
    json.dumps(stats)


def test_distribution_and_entropy():
    assert distribution([]) == {"n": 0, "min": None, "p10": None, "p50": None, "p90": None, "max": None, "mean": None}
    d = distribution(list(range(1, 11)))
    assert (d["min"], d["p10"], d["p50"], d["p90"], d["max"], d["mean"]) == (1, 1, 5, 9, 10, 5.5)
    assert entropy_bits([5, 5, 5, 5]) == 2.0 and entropy_bits([7]) == 0.0
