"""The one-pass GPU checks (engine/gpu/fused.py) give the numbers of the PyTorch form they replace.

Counts, first indices, the worst element and the bit sums must agree exactly; sums (the metric, the
rms) to rounding. Outputs are crafted to hold every case the verdict turns on: the poison, computed
NaN and Inf, references that are not finite, elements on either side of the element bound.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from ptxbench.engine.gpu import fused  # noqa: E402
from ptxbench.engine.gpu.buffers import Arena, poison_value  # noqa: E402
from ptxbench.engine.gpu.datacache import TaskData, fingerprint  # noqa: E402
from ptxbench.engine.gpu.verify import _OUTPUT_FIELDS, summarize  # noqa: E402
from ptxbench.tasks.spec import Tolerance  # noqa: E402

pytestmark = pytest.mark.gpu
EXACT = {"unwritten", "first_unwritten", "nonfinite", "first_nonfinite", "worst_index", "violations",
         "first_violation", "fingerprint", "nonfinite_value", "worst_got", "worst_expected", "violation_got",
         "violation_expected"}
CLOSE = {"metric", "rms", "max_ratio"}


@pytest.fixture(autouse=True)
def _cuda(cuda_here):
    return None


def _both(arena, pristine, ref, metric, bounds, monkeypatch):
    monkeypatch.setattr(fused, "ENABLED", True)
    one = summarize(arena, pristine, ref, metric, bounds).tolist()
    monkeypatch.setattr(fused, "ENABLED", False)
    other = summarize(arena, pristine, ref, metric, bounds).tolist()
    return one, other


def _compare(one, other, outputs):
    per = len(_OUTPUT_FIELDS)
    head = len(one) - per * outputs
    assert one[:head] == other[:head]                   # canaries and inputs
    for k in range(outputs):
        a = dict(zip(_OUTPUT_FIELDS, one[head + k * per: head + (k + 1) * per]))
        b = dict(zip(_OUTPUT_FIELDS, other[head + k * per: head + (k + 1) * per]))
        for name in EXACT:
            x, y = a[name], b[name]
            assert x == y or (math.isnan(x) and math.isnan(y)), (name, x, y)
        for name in CLOSE:
            x, y = a[name], b[name]
            if math.isnan(y):
                assert math.isnan(x), (name, x, y)
            elif math.isinf(y) or y > 1e38:               # PyTorch's nan_to_num turns +Inf into the largest finite
                assert math.isinf(x) or x == y, (name, x, y)
            else:
                assert x == pytest.approx(y, rel=1e-5, abs=1e-300), (name, x, y)


def _arena(out_dtype: str, n: int, ref: torch.Tensor, out: torch.Tensor):
    arena = Arena(torch.device("cuda"))
    arena.add("X", "f32", (n,), "input")
    arena.add("Y", out_dtype, (n,), "output")
    pristine = {"X": torch.zeros(n, device="cuda")}
    arena.fill(pristine, {})
    arena.buffers["Y"].tensor.copy_(out)
    return arena, pristine, {"Y": ref}


CASES = ["clean", "poison", "nan_inf", "violations", "ref_not_finite", "zeros", "guards", "input_changed"]


@pytest.mark.parametrize("out_dtype,ref_dtype", [("bf16", torch.float64), ("bf16", torch.float32),
                                                 ("f32", torch.float64), ("f32", torch.float32),
                                                 ("f64", torch.float64)])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("metric", ["rel_l2", "max_abs"])
def test_fused_summary_matches_the_pytorch_form(out_dtype, ref_dtype, case, metric, monkeypatch):
    from ptxbench.engine.gpu.buffers import TORCH_DTYPES

    n = 3_000_017                                       # not a multiple of any block: the tail is covered
    gen = torch.Generator(device="cuda").manual_seed(7)
    ref = torch.randn(n, device="cuda", generator=gen, dtype=torch.float64).to(ref_dtype)
    out = ref.to(TORCH_DTYPES[out_dtype])
    noise = torch.randn(n, device="cuda", generator=gen, dtype=torch.float64) * 1e-3
    out = (out.double() + noise).to(out.dtype)
    if case == "poison":
        idx = torch.tensor([5, 99_999, n - 1], device="cuda")
        out.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[out.element_size()])[idx] = poison_value(out_dtype)
    elif case == "nan_inf":
        out[[17, 123_456]] = float("nan")
        out[[2_000_000]] = float("inf")
        out[[2_500_000]] = -float("inf")
    elif case == "violations":
        out[1000:1100] = 0                              # a run of zeros
        out[777_777] = out[777_777] * 3 + 1
    elif case == "ref_not_finite":
        ref[[10, 20, 30]] = float("nan")
        ref[[40]] = float("inf")
        out[[10]] = float("nan")                        # the same: right
        out[[20]] = 1.0                                 # not the same: infinitely wrong
        out[[40]] = float("inf")
    elif case == "zeros":
        out.zero_()
    arena, pristine, refs = _arena(out_dtype, n, ref, out)
    if case == "guards":                                # bytes written before and past the data of each buffer
        from ptxbench.engine.gpu.buffers import GUARD_BYTES

        for buf in arena.buffers.values():
            buf.raw[GUARD_BYTES - 3] ^= 0xFF
            buf.raw[100] ^= 0x01
            buf.raw[GUARD_BYTES + buf.nbytes + 7] ^= 0x10
            buf.raw[-1] ^= 0x01
    elif case == "input_changed":
        arena.buffers["X"].tensor[[3, 1_000_003, n - 1]] = 1.5
    bounds = {"Y": Tolerance("rel_l2", 1e-2).element_for("Y", out_dtype)}
    one, other = _both(arena, pristine, refs, metric, bounds, monkeypatch)
    _compare(one, other, 1)
    one, other = _both(arena, pristine, refs, metric, {"Y": None}, monkeypatch)
    _compare(one, other, 1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64, torch.uint8, torch.int32])
def test_fused_fingerprint_is_the_pytorch_one(dtype, monkeypatch):
    n = (1 << 24) + 12_345                              # past the PyTorch form's first chunk
    gen = torch.Generator(device="cuda").manual_seed(3)
    if dtype.is_floating_point:
        t = torch.randn(n, device="cuda", generator=gen).to(dtype)
    else:
        t = torch.randint(0, 200, (n,), device="cuda", generator=gen).to(dtype)
    data = TaskData({"X": t}, {"Z": t[: n // 3].clone()})
    monkeypatch.setattr(fused, "ENABLED", True)
    a = fingerprint(data).cpu()
    monkeypatch.setattr(fused, "ENABLED", False)
    b = fingerprint(data).cpu()
    assert torch.equal(a, b)
    t[n - 2] = t[n - 1] if t[n - 2] != t[n - 1] else t[n - 2] + 1    # one element changed, near the end
    monkeypatch.setattr(fused, "ENABLED", True)
    assert not torch.equal(fingerprint(data).cpu(), a)
