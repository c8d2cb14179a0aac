"""The verify stage's checks on real tensors (CPU here; the worker runs the same code on the GPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ptxbench.engine.gpu.buffers import GUARD_BYTES, Arena, allocate, poison_value  # noqa: E402
from ptxbench.engine.gpu.verify import verify  # noqa: E402

TOL = {"Z": 1e-6}


@pytest.fixture
def trial():
    arena = Arena(torch.device("cpu"))
    for name, role in (("X", "input"), ("Y", "input"), ("Z", "output")):
        arena.add(name, "f32", (1000,), role)
    gen = torch.Generator().manual_seed(0)
    pristine = {"X": torch.randn(1000, generator=gen), "Y": torch.randn(1000, generator=gen)}
    arena.fill(pristine, {})
    ref = {"Z": pristine["X"].double() + pristine["Y"].double()}
    return arena, pristine, ref


def _write_right(arena, pristine):
    arena.buffers["Z"].tensor.copy_(pristine["X"] + pristine["Y"])


def test_a_right_answer_passes(trial):
    arena, pristine, ref = trial
    _write_right(arena, pristine)
    v = verify(arena, pristine, ref, "rel_l2", TOL)
    assert v.category == "ok" and v.errors["Z"] < 1e-7


def test_poison_left_is_unwritten(trial):
    arena, pristine, ref = trial
    v = verify(arena, pristine, ref, "rel_l2", TOL)
    assert v.category == "unwritten_output" and v.detail["unwritten"]["Z"]["elements"] == 1000
    _write_right(arena, pristine)
    arena.buffers["Z"].poison()
    arena.buffers["Z"].tensor[:999].copy_((pristine["X"] + pristine["Y"])[:999])
    v = verify(arena, pristine, ref, "rel_l2", TOL)
    assert v.category == "unwritten_output" and v.detail["unwritten"]["Z"]["first_index"] == [999]


@pytest.mark.parametrize("offset", [0, 3, GUARD_BYTES - 1])
def test_a_byte_past_the_end_is_an_out_of_bounds_write(trial, offset):
    arena, pristine, ref = trial
    _write_right(arena, pristine)
    z = arena.buffers["Z"]
    z.raw[GUARD_BYTES + z.nbytes + offset] ^= 0xFF
    v = verify(arena, pristine, ref, "rel_l2", TOL)
    assert v.category == "out_of_bounds_write"
    assert v.detail["canaries"][0]["after_first"] == offset


def test_a_byte_before_the_start_is_an_out_of_bounds_write(trial):
    arena, pristine, ref = trial
    _write_right(arena, pristine)
    arena.buffers["X"].raw[GUARD_BYTES - 4] ^= 0x01
    v = verify(arena, pristine, ref, "rel_l2", TOL)
    assert v.category == "out_of_bounds_write" and v.detail["canaries"][0]["before_nearest"] == 4


def test_a_changed_input_is_reported(trial):
    arena, pristine, ref = trial
    _write_right(arena, pristine)
    arena.buffers["Y"].tensor[17] += 1
    v = verify(arena, pristine, ref, "rel_l2", TOL)
    assert v.category == "input_modified" and v.detail["inputs"]["Y"]["first_index"] == [17]


def test_a_computed_nan_is_not_the_poison(trial):
    arena, pristine, ref = trial
    _write_right(arena, pristine)
    arena.buffers["Z"].tensor[5] = float("nan")
    assert verify(arena, pristine, ref, "rel_l2", TOL).category == "nan_inf"
    arena.buffers["Z"].tensor[5] = float("inf")
    assert verify(arena, pristine, ref, "rel_l2", TOL).category == "nan_inf"


def test_wrong_values_name_the_worst_element(trial):
    arena, pristine, ref = trial
    _write_right(arena, pristine)
    arena.buffers["Z"].tensor[123] += 50
    v = verify(arena, pristine, ref, "rel_l2", TOL)
    assert v.category == "wrong_result"
    assert v.worst["index"] == [123] and v.worst["got"] != v.worst["expected"]
    assert v.worst["value"] > TOL["Z"]
    v = verify(arena, pristine, ref, "max_abs", {"Z": 100.0})
    assert v.category == "ok" and v.errors["Z"] == pytest.approx(50, rel=1e-3)


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32", "f64", "f8e4m3", "i32"])
def test_poison_is_recognised_in_every_dtype(dtype):
    buf = allocate("C", dtype, (8, 8), "output", torch.device("cpu"))
    buf.poison()
    assert buf.unwritten() == (64, 0)
    if dtype not in ("i32",):
        assert torch.isnan(buf.tensor.float()).all()
    buf.tensor.view(-1)[:10] = 0
    assert buf.unwritten() == (54, 10)
    assert isinstance(poison_value(dtype), int)


# -- the element-wise bound -------------------------------------------------------------------------

from ptxbench.engine.gpu.verify import decode, summarize  # noqa: E402
from ptxbench.tasks.spec import ElementBound, Tolerance, get_task  # noqa: E402


@pytest.fixture
def rows():
    """A [64, 4096] bf16 output whose reference is N(0, 1): the shape of an RMSNorm."""
    arena = Arena(torch.device("cpu"))
    arena.add("X", "bf16", (64, 4096), "input")
    arena.add("Y", "bf16", (64, 4096), "output")
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(64, 4096, generator=gen)
    pristine = {"X": x.to(torch.bfloat16)}
    arena.fill(pristine, {})
    ref = {"Y": x.double()}
    arena.buffers["Y"].tensor.copy_(x.to(torch.bfloat16))    # right up to bf16 rounding
    return arena, pristine, ref


LIMITS = {"Y": 1e-2}
BOUNDS = {"Y": Tolerance("rel_l2", 1e-2).element_for("Y", "bf16")}


def test_rounding_to_the_output_dtype_passes_the_element_bound(rows):
    arena, pristine, ref = rows
    v = verify(arena, pristine, ref, "rel_l2", LIMITS, BOUNDS)
    assert v.category == "ok"
    e = v.detail["elements"]["Y"]
    assert e["violations"] == 0 and e["max_ratio"] < 0.1          # bf16 rounding is far inside 8x the limit


def test_zeros_in_one_element_of_every_eighth_row_are_a_wrong_result(rows):
    arena, pristine, ref = rows
    y = arena.buffers["Y"].tensor
    y[::8, 17] = 0
    v = verify(arena, pristine, ref, "rel_l2", LIMITS, BOUNDS)
    assert v.errors["Y"] < LIMITS["Y"]                               # the aggregate alone would pass it
    assert v.category == "wrong_result"
    e = v.detail["elements"]["Y"]
    assert e["first_index"] == [0, 17] and e["got"] == 0.0 and e["violations"] >= 1
    # Without the element bound this is the hole the red team found.
    assert verify(arena, pristine, ref, "rel_l2", LIMITS).category == "ok"


def test_a_wrong_tail_is_a_wrong_result_at_its_first_element(rows):
    arena, pristine, ref = rows
    y = arena.buffers["Y"].tensor
    y.view(-1)[-5:] = 3.0
    v = verify(arena, pristine, ref, "rel_l2", LIMITS, BOUNDS)
    assert v.category == "wrong_result"
    assert v.detail["elements"]["Y"]["first_index"][0] == 63


def test_a_stated_fraction_of_outliers_is_allowed_and_no_more(rows):
    arena, pristine, ref = rows
    y = arena.buffers["Y"].tensor
    flat = y.view(-1)
    flat[100] = flat[100] + 50
    loose = {"Y": ElementBound(BOUNDS["Y"].rtol, BOUNDS["Y"].atol, outliers=2 / flat.numel())}
    limits = {"Y": 1.0}
    assert verify(arena, pristine, ref, "rel_l2", limits, loose).category == "ok"
    flat[200] = flat[200] + 50
    flat[300] = flat[300] + 50
    assert verify(arena, pristine, ref, "rel_l2", limits, loose).category == "wrong_result"


def test_the_bound_scales_with_the_output(rows):
    """A tiny output with tiny errors passes; all zeros never does (KernelBench#165)."""
    arena, pristine, ref = rows
    small = {"Y": ref["Y"] * 1e-6}
    arena.buffers["Y"].tensor.copy_(small["Y"].to(torch.bfloat16))
    assert verify(arena, pristine, small, "rel_l2", LIMITS, BOUNDS).category == "ok"
    arena.buffers["Y"].tensor.zero_()
    assert verify(arena, pristine, small, "rel_l2", LIMITS, BOUNDS).category == "wrong_result"


def test_summarize_then_decode_is_verify(rows):
    arena, pristine, ref = rows
    arena.buffers["Y"].tensor[3, 3] = 9
    summary = summarize(arena, pristine, ref, "rel_l2", BOUNDS)
    assert summary.dtype == torch.float64 and summary.dim() == 1
    late = decode(summary.tolist(), arena, "rel_l2", LIMITS, BOUNDS)
    now = verify(arena, pristine, ref, "rel_l2", LIMITS, BOUNDS)
    assert late == now and late.category == "wrong_result"


def test_fingerprints_tell_two_outputs_apart(rows):
    arena, pristine, ref = rows
    a = verify(arena, pristine, ref, "rel_l2", LIMITS, BOUNDS).fingerprints
    arena.buffers["Y"].tensor[0, 0] += 1
    b = verify(arena, pristine, ref, "rel_l2", LIMITS, BOUNDS).fingerprints
    assert a["Y"] != b["Y"]


def test_every_task_states_an_element_bound_at_least_its_dtype_can_hold():
    from ptxbench.tasks.spec import ROUNDING_FLOOR, all_tasks

    for task in all_tasks():
        for out in task.outputs:
            b = task.tolerance.element_for(out.name, out.dtype)
            assert b is not None and b.rtol >= ROUNDING_FLOOR[out.dtype]
            assert b.rtol >= task.tolerance.max_for(out.name)


# -- the harness's own copies and the timing pool ------------------------------------------------

def test_the_fingerprint_sees_a_permutation_and_a_sum_preserving_change():
    from ptxbench.engine.gpu.datacache import TaskData, fingerprint

    x = torch.randn(1000)
    base = fingerprint(TaskData({"X": x.clone()}, {"Z": x.double()}))
    swapped = x.clone()
    swapped[[3, 7]] = swapped[[7, 3]]
    assert not torch.equal(fingerprint(TaskData({"X": swapped}, {"Z": x.double()})), base)
    assert torch.equal(fingerprint(TaskData({"X": x.clone()}, {"Z": x.double()})), base)


def test_every_timed_round_gets_new_inputs_and_a_reference_only_when_checked():
    from ptxbench.engine.gpu.datacache import FreshSets, LazyReference

    task = get_task("vector_add_smoke")
    pool = FreshSets(task, {"N": 4096}, torch.device("cpu"))
    a, again, b = pool[5], pool[5], pool[6]
    assert again is a and not torch.equal(a.inputs["X"], b.inputs["X"])
    assert isinstance(a.reference, LazyReference) and a.reference._outputs is None  # an unchecked round pays nothing
    assert torch.allclose(a.reference["Z"], a.inputs["X"].double() + a.inputs["Y"].double())


@pytest.mark.parametrize("task_id, sizes", [("gemm_bf16_sm90a", {"M": 64, "N": 64, "K": 64}),
                                            ("attn_bwd_sm90a", {"B": 1, "H": 1, "S": 64, "D": 64})])
def test_compute_bound_and_derived_input_tasks_draw_fresh_sets_too(task_id, sizes):
    from ptxbench.engine.gpu.datacache import FreshSets, draw
    from ptxbench.tasks.reference import reference

    task = get_task(task_id)
    pool = FreshSets(task, sizes, torch.device("cpu"))
    a, b = pool[1], pool[2]
    name = task.inputs[0].name
    assert not torch.equal(a.inputs[name], b.inputs[name])
    seed = (pool.base + 7919 * 1) % (1 << 62)
    same = draw(task, sizes, seed, torch.device("cpu"))     # the lazy reference is theirs
    full = reference(task, same.inputs, exact=True)
    for out in task.outputs:
        assert torch.equal(a.reference[out.name], same.reference[out.name])
        exact = full[out.name].double()
        err = (a.reference[out.name].double() - exact).norm() / exact.norm()
        assert err < 1e-5                # far inside any bf16 tolerance (2^-9 is its own rounding)


def test_the_quick_gemm_reference_is_exact_products_accumulated_in_float32():
    from ptxbench.tasks.reference import reference

    task = get_task("gemm_bf16_sm90a")
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(96, 2048, generator=gen).to(torch.bfloat16)
    b = torch.randn(80, 2048, generator=gen).to(torch.bfloat16)
    quick = reference(task, {"A": a, "B": b})["C"]
    exact = reference(task, {"A": a, "B": b}, exact=True)["C"]
    assert quick.dtype == torch.float32 and exact.dtype == torch.float64
    scale = (a.double().abs() @ b.double().abs().T)          # the accumulation's error bound scales with Σ|a||b|
    assert ((quick.double() - exact).abs() <= 2048 * 2.0 ** -24 * scale).all()
    wide = reference(task, {"A": a.float(), "B": b.float()})["C"]
    assert wide.dtype == torch.float64                        # f32 inputs are not exact in TF32: the full form


def test_a_write_into_a_checked_rounds_own_copies_is_seen():
    from ptxbench.engine.gpu.datacache import FreshSets

    task = get_task("gemm_bf16_sm90a")
    pool = FreshSets(task, {"M": 64, "N": 64, "K": 64}, torch.device("cpu"))
    for k in (3, 4, 5):
        pool[k]                          # the round resets from it; its inputs are sealed as drawn
        if k == 4:
            pool[k].inputs["A"].zero_()  # what a kernel that found the harness's copy could do during its run
        pool.confirm(k)                  # after the run
    assert pool.tampered() == [4]


def test_a_write_is_seen_when_its_set_is_checked_again_later_and_confirm_never_draws_anew():
    from ptxbench.engine.gpu.datacache import FreshSets

    task = get_task("vector_add_smoke")
    pool = FreshSets(task, {"N": 4096}, torch.device("cpu"))
    pool[7]
    pool[7].inputs["X"][0] += 1.0        # written during the first checked round of set 7
    pool.confirm(7)
    pool[8]
    pool.confirm(8)
    pool[7]                              # set 7 again, drawn anew and left alone
    pool.confirm(7)
    assert pool.tampered() == [7]
    with pytest.raises(AssertionError):  # sealing a fresh draw of set 8 would hide any write into the one run
        pool.confirm(8)


@pytest.mark.parametrize("task_id, sizes", [("gemm_bf16_sm90a", {"M": 64, "N": 64, "K": 64}),
                                            ("attn_bwd_sm90a", {"B": 1, "H": 1, "S": 64, "D": 64})])
def test_a_checked_rounds_reference_is_made_from_the_sealed_inputs(task_id, sizes):
    """The reference is computed after the run: from the very tensors the two fingerprints cover, so no input
    it reads (attention backward's O and LSE included) can change unseen."""
    from ptxbench.engine.gpu.datacache import FreshSets

    pool = FreshSets(get_task(task_id), sizes, torch.device("cpu"))
    data = pool[3]
    assert data.reference._outputs is None
    assert data.reference.raw.keys() == data.inputs.keys()
    assert all(data.reference.raw[name] is t for name, t in data.inputs.items())


def test_the_work_before_a_run_is_the_same_for_checked_and_unchecked_rounds():
    """Every set is sealed when drawn and none has a reference before its check: nothing ahead of a run
    says whether it will be checked (the gap a kernel can time from its previous run)."""
    from ptxbench.engine.gpu.datacache import FreshSets, LazyReference

    task = get_task("gemm_bf16_sm90a")
    pool = FreshSets(task, {"M": 64, "N": 64, "K": 64}, torch.device("cpu"))
    for k in range(6):
        data = pool[k]
        assert data.seal_slot == k                  # every round's inputs sealed as drawn, in order
        assert isinstance(data.reference, LazyReference) and data.reference._outputs is None
    pool.confirm(5)
    assert pool[5].reference._outputs is None     # made only when the check reads it, after the run
    assert torch.allclose(pool[5].reference["C"].double(),
                          pool[5].inputs["A"].double() @ pool[5].inputs["B"].double().T, rtol=1e-4, atol=1e-4)


def test_scaled_rows_differ_in_scale_and_keep_their_spikes():
    from ptxbench.tasks.inputs import draw

    x = draw((512, 1024), "scaled_rows", torch.Generator().manual_seed(3), "cpu")
    rms = x.pow(2).mean(dim=1).sqrt()
    assert rms.max() / rms.min() > 20


# -- a held-out size's values compared at a sample of rows ------------------------------------------------


@pytest.fixture
def heads():
    """A [2, 3, 64, 8] f32 output (an attention's O): right, with its reference at every row."""
    arena = Arena(torch.device("cpu"))
    arena.add("X", "f32", (2, 3, 64, 8), "input")
    arena.add("O", "f32", (2, 3, 64, 8), "output")
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 64, 8, generator=gen)
    arena.fill({"X": x}, {})
    arena.buffers["O"].tensor.copy_(x)
    return arena, {"X": x}, {"O": x.double()}


SAMPLE = torch.tensor([0, 1, 9, 40, 63])
HEAD_BOUNDS = {"O": Tolerance("rel_l2", 1e-3).element_for("O", "f32")}


def _at_rows(ref):
    return {"O": ref["O"].index_select(2, SAMPLE)}


def test_values_off_the_sampled_rows_are_not_compared_but_every_element_is_checked(heads):
    arena, pristine, ref = heads
    o = arena.buffers["O"].tensor
    o[1, 2, 5] += 1.0                                        # row 5 is not in the sample
    v = verify(arena, pristine, _at_rows(ref), "rel_l2", {"O": 1e-3}, HEAD_BOUNDS, SAMPLE)
    assert v.category == "ok" and v.detail["sampled_rows"] == 5
    assert v.detail["elements"]["O"]["of"] == 2 * 3 * 5 * 8
    o[1, 2, 40, 3] += 5.0                                    # row 40 is: found, at its place in the whole output
    v = verify(arena, pristine, _at_rows(ref), "rel_l2", {"O": 1e-3}, HEAD_BOUNDS, SAMPLE)
    assert v.category == "wrong_result"
    assert v.worst["index"] == [1, 2, 40, 3] and v.detail["elements"]["O"]["first_index"] == [1, 2, 40, 3]
    o[0, 0, 7, 1] = float("nan")                             # a NaN anywhere, sampled row or not
    v = verify(arena, pristine, _at_rows(ref), "rel_l2", {"O": 1e-3}, HEAD_BOUNDS, SAMPLE)
    assert v.category == "nan_inf" and v.detail["nonfinite"]["O"]["first_index"] == [0, 0, 7, 1]
    arena.buffers["O"].poison()                              # and an unwritten element anywhere
    keep = o[1, 1, 30, 0].clone()
    o.copy_(pristine["X"])
    o[1, 1, 30, 0] = keep
    v = verify(arena, pristine, _at_rows(ref), "rel_l2", {"O": 1e-3}, HEAD_BOUNDS, SAMPLE)
    assert v.category == "unwritten_output" and v.detail["unwritten"]["O"]["first_index"] == [1, 1, 30, 0]


def test_a_held_out_sample_holds_the_edges_and_is_new_each_time():
    from ptxbench.engine.gpu.datacache import EDGE_ROWS, row_sample

    a, b = row_sample(16384, 1024), row_sample(16384, 1024)
    assert a.numel() == 1024 and torch.equal(a, a.unique())
    for s in (a, b):
        assert set(range(EDGE_ROWS)) <= set(s.tolist()) and set(range(16384 - EDGE_ROWS, 16384)) <= set(s.tolist())
    assert not torch.equal(a, b)
    assert row_sample(1024, 1024) is None and row_sample(4096, 0) is None
