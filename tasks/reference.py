"""PyTorch references, by a spec's `operation`, computed in higher precision.

GEMM accumulates in float64; attention and RMSNorm compute in float32 (float64
when handed float64 inputs, as the tests do). Outputs are returned in that
higher precision, never rounded to the task's dtype: the comparison does that.
Attention is chunked over (batch·head) and query rows so the held-out S=16384
fits in memory. Everything runs on CPU (CI) and CUDA; torch is imported lazily
so that `import ptxbench.tasks` works without it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ptxbench.tasks.dtypes import torch_dtype
from ptxbench.tasks.spec import TaskSpec

if TYPE_CHECKING:
    import torch
    from torch import Tensor

Tensors = dict[str, "Tensor"]
# Largest score tile (elements) one attention step materialises: 2**28 f32 = 1 GiB.
ATTN_TILE_ELEMS = 1 << 28


@contextlib.contextmanager
def _exact_matmul() -> Iterator[None]:
    """float32 matmuls in full precision (no TF32) while a reference runs."""
    import torch

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _compute_dtype(*tensors: Tensor) -> torch.dtype:
    import torch

    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def gemm(inputs: Tensors, task: TaskSpec | None = None) -> Tensors:
    a, b = inputs["A"], inputs["B"]
    return {"C": a.double() @ b.double().T}


# Inputs whose significands fit TF32's eleven bits: their products are exact in a TF32 matmul.
_TF32_EXACT = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")


def gemm_fast(inputs: Tensors, task: TaskSpec | None = None) -> Tensors:
    """The GEMM in float32 on the tensor cores, for inputs TF32 holds exactly (bf16, f16, f8): every product
    is exact and only the float32 accumulation rounds, a relative error near K·2⁻²⁴ (1e-5 at K = 5120, a
    thousandth of a bf16 output's own rounding). A tenth of the float64 GEMM's time on an H200: the checked
    rounds of timing, whose inputs are new every round, use it."""
    import torch

    a, b = inputs["A"], inputs["B"]
    if str(a.dtype).removeprefix("torch.") not in _TF32_EXACT or str(b.dtype).removeprefix("torch.") not in _TF32_EXACT:
        return gemm(inputs, task)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        return {"C": a.float() @ b.float().T}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _chunks(bh: int, s_q: int, s_k: int, tile: int) -> Iterator[tuple[slice, slice]]:
    rows = max(1, min(s_q, tile // max(s_k, 1)))
    group = max(1, tile // (rows * s_k))
    for g0 in range(0, bh, group):
        for r0 in range(0, s_q, rows):
            yield slice(g0, min(bh, g0 + group)), slice(r0, min(s_q, r0 + rows))


def _causal_mask(rows: slice, s_k: int, device: torch.device) -> Tensor:
    import torch

    i = torch.arange(rows.start, rows.stop, device=device)[:, None]
    j = torch.arange(s_k, device=device)[None, :]
    return j > i                                     # True where the key is masked out


def attention_forward(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float | None = None,
                      tile: int = ATTN_TILE_ELEMS) -> tuple[Tensor, Tensor]:
    """O and LSE (natural log) for [B, H, S, D] inputs, in float32 (float64 for float64 inputs)."""
    import torch

    B, H, S, D = q.shape
    dt = _compute_dtype(q, k, v)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    qf, kf, vf = (t.reshape(B * H, S, D) for t in (q, k, v))
    out = torch.empty(B * H, S, D, dtype=dt, device=q.device)
    lse = torch.empty(B * H, S, dtype=dt, device=q.device)
    with _exact_matmul():
        for g, rows in _chunks(B * H, S, S, tile):
            keys = rows.stop if causal else S         # causal rows never see later keys
            qc = qf[g, rows].to(dt)
            kc, vc = kf[g, :keys].to(dt), vf[g, :keys].to(dt)
            s = torch.matmul(qc, kc.transpose(1, 2)) * scale
            if causal:
                s.masked_fill_(_causal_mask(rows, keys, q.device), -math.inf)
            m = s.amax(dim=-1, keepdim=True)
            p = torch.exp(s - m)
            denom = p.sum(dim=-1, keepdim=True)
            out[g, rows] = torch.matmul(p, vc) / denom
            lse[g, rows] = (m + torch.log(denom)).squeeze(-1)
    return out.reshape(B, H, S, D), lse.reshape(B, H, S)


def attention_backward(q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, lse: Tensor, causal: bool,
                       scale: float | None = None, tile: int = ATTN_TILE_ELEMS) -> tuple[Tensor, Tensor, Tensor]:
    """dQ, dK, dV from the given O and LSE (as a kernel sees them), in float32 or float64."""
    import torch

    B, H, S, D = q.shape
    dt = _compute_dtype(q, k, v, o, do, lse)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    flat = [t.reshape(B * H, S, D) for t in (q, k, v, o, do)]
    qf, kf, vf, of, dof = flat
    lsef = lse.reshape(B * H, S)
    dq = torch.zeros(B * H, S, D, dtype=dt, device=q.device)
    dk = torch.zeros_like(dq)
    dv = torch.zeros_like(dq)
    with _exact_matmul():
        for g, rows in _chunks(B * H, S, S, tile):
            keys = rows.stop if causal else S
            qc, oc, doc = qf[g, rows].to(dt), of[g, rows].to(dt), dof[g, rows].to(dt)
            kc, vc = kf[g, :keys].to(dt), vf[g, :keys].to(dt)
            s = torch.matmul(qc, kc.transpose(1, 2)) * scale
            if causal:
                s.masked_fill_(_causal_mask(rows, keys, q.device), -math.inf)
            p = torch.exp(s - lsef[g, rows].to(dt)[..., None])
            dv[g, :keys] += torch.matmul(p.transpose(1, 2), doc)
            dp = torch.matmul(doc, vc.transpose(1, 2))
            delta = (doc * oc).sum(dim=-1, keepdim=True)
            ds = p * (dp - delta)
            dq[g, rows] = torch.matmul(ds, kc) * scale
            dk[g, :keys] += torch.matmul(ds.transpose(1, 2), qc) * scale
    shape = (B, H, S, D)
    return dq.reshape(shape), dk.reshape(shape), dv.reshape(shape)


def _attn_fwd(causal: bool) -> Callable[[Tensors, TaskSpec | None], Tensors]:
    def run(inputs: Tensors, task: TaskSpec | None = None) -> Tensors:
        o, lse = attention_forward(inputs["Q"], inputs["K"], inputs["V"], causal)
        return {"O": o, "LSE": lse}
    return run


def _attn_bwd(causal: bool) -> Callable[[Tensors, TaskSpec | None], Tensors]:
    def run(inputs: Tensors, task: TaskSpec | None = None) -> Tensors:
        dq, dk, dv = attention_backward(inputs["Q"], inputs["K"], inputs["V"], inputs["O"], inputs["dO"],
                                        inputs["LSE"], causal)
        return {"dQ": dq, "dK": dk, "dV": dv}
    return run


def rmsnorm(inputs: Tensors, task: TaskSpec | None = None) -> Tensors:
    import torch

    eps = float(task.params.get("eps", 1e-6)) if task is not None else 1e-6
    x, w = inputs["X"], inputs["W"]
    dt = _compute_dtype(x, w)
    xf = x.to(dt)
    r = torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + eps)
    return {"Y": xf * r * w.to(dt)}


def add(inputs: Tensors, task: TaskSpec | None = None) -> Tensors:
    return {"Z": inputs["X"].double() + inputs["Y"].double()}


OPERATIONS: dict[str, Callable[[Tensors, TaskSpec | None], Tensors]] = {
    "gemm": gemm,
    "attn_fwd": _attn_fwd(False),
    "attn_fwd_causal": _attn_fwd(True),
    "attn_bwd": _attn_bwd(False),
    "attn_bwd_causal": _attn_bwd(True),
    "rmsnorm": rmsnorm,
    "add": add,
}
FAST_OPERATIONS: dict[str, Callable[[Tensors, TaskSpec | None], Tensors]] = {"gemm": gemm_fast}


def reference(task: TaskSpec, inputs: Tensors, *, fast: bool = False) -> Tensors:
    """The task's outputs for these inputs, in higher precision (float64 or float32); `fast`: by the quicker
    form of the operation where it has one whose error is far inside the task's tolerance."""
    if task.operation not in OPERATIONS:
        raise KeyError(f"{task.source}: operation {task.operation!r} has no reference "
                       f"(known: {', '.join(OPERATIONS)})")
    if fast and task.operation in FAST_OPERATIONS:
        return FAST_OPERATIONS[task.operation](inputs, task)
    return OPERATIONS[task.operation](inputs, task)


def derive_inputs(task: TaskSpec, inputs: Tensors) -> Tensors:
    """Fill the task's derived inputs (attention backward: O and LSE from the forward reference).

    Returns a new dict in the spec's input order; derived tensors are cast to their spec dtypes
    (O to bf16, as a real forward pass would have stored it).
    """
    derived = [t for t in task.inputs if t.derived]
    if not derived:
        return dict(inputs)
    if task.operation not in ("attn_bwd", "attn_bwd_causal"):
        raise KeyError(f"{task.source}: no rule derives {[t.name for t in derived]} for {task.operation!r}")
    o, lse = attention_forward(inputs["Q"], inputs["K"], inputs["V"], task.operation.endswith("_causal"))
    made = {"O": o, "LSE": lse}
    out = {}
    for t in task.inputs:
        out[t.name] = made[t.name].to(torch_dtype(t.dtype)) if t.derived else inputs[t.name]
    return out
