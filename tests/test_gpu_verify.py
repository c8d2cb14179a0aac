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
