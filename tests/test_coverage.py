"""The marked copy (engine/coverage.py): every requested instruction marked under its own guard, the copy
assembled by the real ptxas, the marks' slots in the cubin, and how the slots read back are judged."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ptxbench.engine.assemble import assemble
from ptxbench.engine.cache import Cache
from ptxbench.engine.coverage import SYMBOL, instrument, states
from ptxbench.engine.families import get_family
from ptxbench.engine.gpu.module_state import data_sections
from ptxbench.engine.gpu.protocol import dumps
from ptxbench.engine.inspect import ptx_census, ptx_statement_spans, ptx_statements
from ptxbench.engine.pipeline import Judgement, SizeMeasurement, _judge_coverage
from ptxbench.engine.static import judge_static
from ptxbench.tasks.spec import get_task

SOLUTIONS = Path(__file__).resolve().parents[1] / "tasks" / "solutions"
HOSTILE = Path(__file__).resolve().parent / "hostile" / "gpu"
TASKS = ["gemm_bf16_sm90a", "attn_fwd_sm90a", "attn_bwd_sm90a", "rmsnorm_bf16_sm90a", "layernorm_bf16_sm90a",
         "softmax_bf16_sm90a", "gemm_bf16_sm100a"]

SMALL = """//
// a comment naming cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes, not an instruction
.version 8.7
.target sm_90a
.address_size 64

.visible .entry k(.param .u64 p, .param .u32 n)
{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    .shared .align 8 .b64 bar;
    ld.param.u32 %r1, [n];
    setp.lt.s32 %p1, %r1, 0;
    mov.u32 %r2, bar;
    @%p1 mbarrier.init.shared.b64 [%r2], 1;
    @!%p1 bra SKIP;
DONE: mbarrier.arrive.shared.b64 %rd1, [%r2];
SKIP:
    ret;
}
"""


def test_the_statement_spans_point_at_the_statements():
    ptx = SMALL
    for at, piece, depth in ptx_statement_spans(ptx):
        assert ptx[at:at + len(piece)].split() and len(piece) == len(ptx[at:at + len(piece)])
        if "mbarrier.init" in piece:
            assert depth == 1 and ptx[at:at + len(piece)].strip() == piece.strip()
    assert [s for s in ptx_statements(ptx) if s.startswith("@%p1 mbarrier")] == ["@%p1 mbarrier.init.shared.b64 [%r2], 1"]


def test_marks_go_under_the_instructions_guard_and_after_its_label():
    marked = instrument(SMALL, ["mbarrier"])
    assert marked is not None and marked.sites == {"mbarrier": 2}
    text = marked.ptx
    token = marked.tokens[0]
    assert marked.symbol.startswith(SYMBOL + "_") and f".visible .global .align 8 .u64 {marked.symbol}[2];" in text
    # The guarded init: its mark compares under the same predicate.
    tag = marked.symbol.rsplit("_", 1)[1]
    q, v, t = (f"%ptxbench_{tag}_{x}" for x in "qvt")
    assert f"setp.ne.and.u64 {q}, {v}, {t}, %p1; @{q} st.global.u64" in text
    assert f"mov.u64 {t}, {token};" in text
    # The labelled arrive: the label still names the mark's first statement's line, before the instruction.
    line = next(ln for ln in text.splitlines() if ln.startswith("DONE:"))
    assert line.index("{ .reg") < line.index("mbarrier.arrive")
    # Nothing in the comment was marked, and the census of the copy has every original instruction.
    original = ptx_census(SMALL)
    copy = ptx_census(text)
    assert all(copy[op] >= n for op, n in original.items())
    assert assemble(text, "ptx", "sm_90a").ok


def test_nothing_to_mark_is_said_so():
    assert instrument(SMALL, []) is None
    assert instrument(SMALL, ["wgmma"]) is None


def test_tokens_are_new_each_build_and_never_zero():
    a, b = instrument(SMALL, ["mbarrier"]), instrument(SMALL, ["mbarrier"])
    assert a is not None and b is not None
    assert a.tokens != b.tokens and all(t != 0 for t in a.tokens + b.tokens)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Cache:
    return Cache(tmp_path_factory.mktemp("coverage-cache"))


@pytest.mark.parametrize("task_id", TASKS)
def test_every_expert_s_requested_instructions_are_marked_and_the_copy_assembles(task_id, cache):
    task = get_task(task_id)
    verdict = judge_static(SOLUTIONS / task_id / "kernel.ptx", task, cache=cache)
    assert verdict.category == "ok", verdict.evidence
    cov = verdict.coverage
    assert cov.get("families") == list(task.families), cov
    # One mark for every instruction of a family in the expert's PTX.
    census = ptx_census(verdict.ptx)
    for name in task.families:
        fam = get_family(name)
        assert cov["sites"][name] == sum(n for op, n in census.items() if fam.matches_ptx(op)) > 0
    assert verdict.coverage_cubin is not None
    slots = [s for sec in data_sections(verdict.coverage_cubin) for s in sec.symbols if s.name == cov["symbol"]]
    assert slots and slots[0].size == 16 * len(task.families) and slots[0].is_global


def test_the_verdict_cache_keeps_the_marked_copy(cache):
    task = get_task("rmsnorm_bf16_sm90a")
    first = judge_static(SOLUTIONS / task.id / "kernel.ptx", task, cache=cache)
    again = judge_static(SOLUTIONS / task.id / "kernel.ptx", task, cache=cache)
    assert again.cached and again.coverage == first.coverage and again.coverage_cubin == first.coverage_cubin


def test_families_in_dead_code_are_marked_too():
    """The round-3 case: its bulk copy and mbarrier sit behind D < 0; the copy still marks them, so the
    GPU's launch of it is what tells they never ran."""
    task = get_task("rmsnorm_bf16_sm90a")
    verdict = judge_static(HOSTILE / "rmsnorm_families_never_run.cu", task, use_cache=False)
    assert verdict.category == "ok"
    assert verdict.coverage_cubin is not None and all(verdict.coverage["sites"][f] > 0 for f in task.families)


def test_slots_read_back_are_ran_not_run_or_overwritten():
    assert states(["a", "b", "c"], [5, 7, 9], [5, 0, 1]) == {"a": "ran", "b": "not run", "c": "overwritten"}


def _judged(static, rows):
    out = Judgement(static=static, status="judged", category="ok", stage=None)
    measured = []
    for split, category, slots in rows:
        m = SizeMeasurement(split, {"N": 1}, category)
        if slots is not None:
            m.detail["coverage"] = slots
        measured.append(m)
    _judge_coverage(static, measured, out)
    return out, measured


def test_a_train_size_where_a_family_never_ran_is_required_not_executed():
    task = get_task("rmsnorm_bf16_sm90a")
    static = judge_static(SOLUTIONS / task.id / "kernel.ptx", task, use_cache=False)
    tokens = static.coverage["tokens"]
    out, measured = _judged(static, [("train", "ok", tokens), ("train", "ok", [tokens[0], 0]),
                                     ("heldout", "ok", [0, 0]), ("train", "wrong_result", None)])
    assert [m.category for m in measured] == ["ok", "required_not_executed", "ok", "wrong_result"]
    assert "mbarrier never ran" in measured[1].message
    assert out.executed is False
    sizes = out.evidence["coverage"]["sizes"]
    assert sizes[2]["families"] == {"bulk_copy": "not run", "mbarrier": "not run"}   # held out: said, not decided
    assert all("coverage" not in m.detail for m in measured)


def test_a_forged_mark_is_no_mark():
    task = get_task("rmsnorm_bf16_sm90a")
    static = judge_static(SOLUTIONS / task.id / "kernel.ptx", task, use_cache=False)
    out, measured = _judged(static, [("train", "ok", [1, 1])])
    assert measured[0].category == "required_not_executed" and out.executed is False
    out, measured = _judged(static, [("train", "ok", static.coverage["tokens"])])
    assert measured[0].category == "ok" and out.executed is True


def test_the_worker_s_slots_reach_the_judgement():
    from ptxbench.engine.gpu.protocol import SizeResult
    from ptxbench.engine.pipeline import _measurement

    sent = SizeResult(0, "train", {"N": 1}, "ok", coverage=[3, 0], coverage_note="")
    m = _measurement(SizeResult.from_json(json.loads(dumps(sent))))
    assert m.detail["coverage"] == [3, 0]
    m = _measurement(SizeResult(0, "train", {"N": 1}, "ok", coverage_note="the marked copy did not load"))
    assert m.detail["coverage_note"] == "the marked copy did not load" and "coverage" not in m.detail


# -- the share of the work a family did ------------------------------------------------------------------

COPIES = """.version 8.7
.target sm_90a
.address_size 64

.visible .entry k(.param .u64 p, .param .u32 n)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .shared .align 128 .b8 buf[4096];
    .shared .align 8 .b64 bar;
    ld.param.u64 %rd1, [p];
    ld.param.u32 %r1, [n];
    setp.lt.s32 %p1, %r1, 0;
    mov.u32 %r2, bar;
    mov.u32 %r3, buf;
    mbarrier.init.shared.b64 [%r2], 1;
    @!%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd1], %r1, [%r2];
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd1], 2048, [%r2];
    cp.async.bulk.prefetch.L2.global [%rd1], 4096;
    ret;
}
"""


def test_bulk_copies_count_their_bytes_under_their_guard_and_prefetches_count_nothing():
    marked = instrument(COPIES, ["bulk_copy", "mbarrier"])
    assert marked is not None and marked.work == ["bytes", None] and not marked.unmeasured
    text = marked.ptx
    assert f"u64 {marked.symbol}[4];" in text
    assert text.count("red.global.add.u64") == 2                                      # the two copies; the prefetch adds nothing
    assert "cvt.u64.u32" in text and "%r1;" in text.split("cvt.u64.u32")[1][:60]   # the register size, widened
    assert "mov.u64" in text and ", 2048;" in text
    assert "@!%p1 red.global.add.u64" in text                 # under the copy's own guard
    assert assemble(text, "ptx", "sm_90a").ok


def test_a_wgmma_counts_its_flops_from_lane_zero_of_each_warp():
    task = get_task("gemm_bf16_sm90a")
    ptx = (SOLUTIONS / task.id / "kernel.ptx").read_text()
    marked = instrument(ptx, ["wgmma"])
    assert marked is not None and marked.work == ["flops"]
    shapes = {(int(n), int(k)) for n, k in re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k(\d+)", ptx)}
    assert shapes
    for n, k in shapes:
        assert f", {2 * 64 * n * k // 4};" in marked.ptx
    assert "%laneid" in marked.ptx


def test_a_copy_size_that_cannot_be_read_is_said_and_counts_nothing():
    odd = COPIES.replace("[%rd1], 2048, [%r2]", "[%rd1], 2048+0, [%r2]")
    marked = instrument(odd, ["bulk_copy"])
    assert marked is not None and marked.unmeasured == {"bulk_copy": 1}


def _floored(static, task, sizes, slots):
    from ptxbench.engine.pipeline import plan_sizes

    out = Judgement(static=static, status="judged", category="ok", stage=None)
    m = SizeMeasurement("train", dict(sizes), "ok")
    m.detail["coverage"] = slots
    plans, _ = plan_sizes(static.candidate, task, static.ptx, 132, sizes=[("train", dict(sizes))],
                          resources=static.resources)
    _judge_coverage(static, [m], out, task, plans)
    return out, m


def test_a_family_that_ran_but_did_almost_none_of_the_work_is_required_not_executed():
    task = get_task("rmsnorm_bf16_sm90a")
    static = judge_static(SOLUTIONS / task.id / "kernel.ptx", task, use_cache=False)
    tokens, sizes = static.coverage["tokens"], dict(task.train[0])
    x_bytes = sizes["T"] * sizes["D"] * 2
    out, m = _floored(static, task, sizes, tokens + [16, 0])      # one 16-byte copy: ran, moved nothing
    assert m.category == "required_not_executed" and "bulk_copy did 0.00% of this size's bytes" in m.message
    assert out.executed is False and out.evidence["coverage"]["sizes"][0]["short_of_work"]["bulk_copy"]["counted"] == 16
    out, m = _floored(static, task, sizes, tokens + [x_bytes, 0])  # every row of X copied: the honest share
    assert m.category == "ok" and out.executed is True


def test_tensor_copies_count_boxes_of_the_launch_s_largest_box():
    task = get_task("gemm_bf16_sm90a")
    static = judge_static(SOLUTIONS / task.id / "kernel.ptx", task, use_cache=False)
    tokens, sizes = static.coverage["tokens"], dict(task.train[0])
    flops = task.flops(sizes)
    families = static.coverage["families"]
    counts = {"wgmma": flops, "tma": 1, "mbarrier": 0}
    out, m = _floored(static, task, sizes, tokens + [counts[f] for f in families])
    assert m.category == "required_not_executed" and "tma did" in m.message
    counts["tma"] = 10 ** 6
    out, m = _floored(static, task, sizes, tokens + [counts[f] for f in families])
    assert m.category == "ok", m.message
    counts["wgmma"] = flops // 100                                 # a token MMA beside plain FMA loops
    out, m = _floored(static, task, sizes, tokens + [counts[f] for f in families])
    assert m.category == "required_not_executed" and "wgmma did 1.00% of this size's flops" in m.message


def test_every_proof_round_must_show_the_families_at_work():
    """At a timed size the marked copy also runs in three timed rounds at secret places (engine/gpu/timing.py
    `Proof`): a kernel that uses its families only in launches it can place (the trials, the copy after them)
    and plain code in the rest leaves no mark there."""
    task = get_task("rmsnorm_bf16_sm90a")
    static = judge_static(SOLUTIONS / task.id / "kernel.ptx", task, use_cache=False)
    tokens, sizes = static.coverage["tokens"], dict(task.train[0])
    full = tokens + [sizes["T"] * sizes["D"] * 2, 0]

    def timed(proofs):
        m = SizeMeasurement("train", dict(sizes), "ok")
        m.detail.update(coverage=full, timing={"schedule": {"proof_rounds": [3, 40, 71]}})
        if proofs is not None:
            m.detail["coverage_proofs"] = proofs
        out = Judgement(static=static, status="judged", category="ok", stage=None)
        _judge_coverage(static, [m], out, task, None)
        return out, m

    out, m = timed([full, full, full])
    assert m.category == "ok" and out.executed is True and len(out.evidence["coverage"]["sizes"][0]["proofs"]) == 3
    out, m = timed([full, [0, 0, 0, 0], full])
    assert m.category == "required_not_executed" and "never ran in proof round 2 of 3" in m.message
    out, m = timed([full, full, tokens + [64, 0]])
    assert m.category == "required_not_executed" and "in proof round 3 of 3" in m.message
    out, m = timed(None)                                     # timed, but no round ran the copy: nothing proven
    assert m.category == "required_not_executed" and "no timed round ran the marked copy" in m.message
