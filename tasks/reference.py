"""PyTorch references, by a spec's `operation`, computed in higher precision, with their error bounded.

Outputs are returned in that higher precision (float32 or float64), never rounded to the task's dtype:
the comparison does that. Attention is chunked over (batch·head) and query rows so the held-out
S = 16384 fits in memory. Everything runs on CPU (CI) and CUDA; torch is imported lazily so that
`import ptxbench.tasks` works without it.

On CUDA, the matrix products of GEMM and attention run on the tensor cores in TF32. The tasks' inputs
are bf16 (8 significant bits), which TF32 (11) holds exactly, so every product of two inputs is exact
and only the float32 accumulation rounds. The one operand that is not an input (attention's P, and
backward's dS) is rounded to TF32 on its way in: a relative error of at most 2⁻¹¹ per element, whose
effect on an output averages over the row it is summed in. tests/gpu/test_reference_error.py measures
every task's reference against float64 at every size and holds it to a tenth of the task's tolerance;
`exact=True` (float64 GEMM, float32 attention without TF32) is what it measures them against.

`rows`: attention's outputs at those positions along S only (each (batch, head) at the same rows;
backward: dQ at those query rows, dK and dV at those key rows), at a cost in proportion. The GPU
worker checks a held-out size at a secret sample of rows (engine/gpu/session.py).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ptxbench.tasks.dtypes import torch_dtype
from ptxbench.tasks.records import ROW_SAMPLED
from ptxbench.tasks.spec import TaskSpec

if TYPE_CHECKING:
    import torch
    from torch import Tensor

Tensors = dict[str, "Tensor"]
# Largest score tile (elements) one attention step materialises: 2**28 f32 = 1 GiB.
ATTN_TILE_ELEMS = 1 << 28
# Inputs whose significands fit TF32's eleven bits: their products are exact in a TF32 matmul.
_TF32_EXACT = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")


def _tf32_exact(*tensors: Tensor) -> bool:
    return all(str(t.dtype).removeprefix("torch.") in _TF32_EXACT for t in tensors)


@contextlib.contextmanager
def _matmul_precision(tf32: bool) -> Iterator[None]:
    """float32 matmuls on the tensor cores in TF32 (`tf32`), or in full precision, while a reference runs."""
    import torch

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _compute_dtype(*tensors: Tensor) -> torch.dtype:
    import torch

    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def gemm(inputs: Tensors, task: TaskSpec | None = None, *, exact: bool = False) -> Tensors:
    """C = A·Bᵀ: in float64, or for TF32-exact inputs in float32 (on CUDA on the tensor cores): exact products,
    float32 accumulation, a relative error near K·2⁻²⁴ (1e-5 at K = 5120), a tenth of the float64 GEMM's time."""
    a, b = inputs["A"], inputs["B"]
    if exact or not _tf32_exact(a, b):
        return {"C": a.double() @ b.double().T}
    with _matmul_precision(a.is_cuda):
        return {"C": a.float() @ b.float().T}


def _chunks(bh: int, n_rows: int, n_cols: int, tile: int) -> Iterator[tuple[slice, slice]]:
    rows = max(1, min(n_rows, tile // max(n_cols, 1)))
    group = max(1, tile // (rows * max(n_cols, 1)))
    for g0 in range(0, bh, group):
        for r0 in range(0, n_rows, rows):
            yield slice(g0, min(bh, g0 + group)), slice(r0, min(n_rows, r0 + rows))


def _positions(rows: Tensor | None, s: int) -> tuple[Tensor, bool]:
    """The positions along S to compute (on the CPU, sorted, unique), and whether that is all of them."""
    import torch

    if rows is None:
        return torch.arange(s), True
    pos = torch.unique(rows.detach().to("cpu", torch.int64))
    if pos.numel() == 0 or int(pos[0]) < 0 or int(pos[-1]) >= s:
        raise ValueError(f"rows must be positions in [0, {s}), at least one")
    return pos, False


def _take(t: Tensor, g: slice, part: slice, pos: Tensor, every: bool) -> Tensor:
    """Rows `pos[part]` of the (batch·head) group `g` of a [BH, S, ...] tensor."""
    return t[g, part] if every else t[g][:, pos[part].to(t.device)]


def _later(q_pos: Tensor, k_pos: Tensor, device: torch.device) -> Tensor:
    """True where the key comes after the query (masked out by a causal softmax)."""
    return k_pos.to(device)[None, :] > q_pos.to(device)[:, None]


def attention_forward(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float | None = None,
                      tile: int = ATTN_TILE_ELEMS, *, rows: Tensor | None = None,
                      exact: bool = False) -> tuple[Tensor, Tensor]:
    """O and LSE (natural log) for [B, H, S, D] inputs, in float32 (float64 for float64 inputs);
    `rows`: only those query rows ([B, H, len(rows), D] and [B, H, len(rows)])."""
    import torch

    B, H, S, D = q.shape
    dt = _compute_dtype(q, k, v)
    tf32 = not exact and q.is_cuda and dt == torch.float32 and _tf32_exact(q, k, v)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    pos, every = _positions(rows, S)
    n = pos.numel()
    qf, kf, vf = (t.reshape(B * H, S, D) for t in (q, k, v))
    out = torch.empty(B * H, n, D, dtype=dt, device=q.device)
    lse = torch.empty(B * H, n, dtype=dt, device=q.device)
    with _matmul_precision(tf32):
        for g, part in _chunks(B * H, n, S, tile):
            q_pos = pos[part]
            keys = int(q_pos[-1]) + 1 if causal else S         # causal rows never see later keys
            qc = _take(qf, g, part, pos, every).to(dt)
            kc, vc = kf[g, :keys].to(dt), vf[g, :keys].to(dt)
            s = torch.matmul(qc, kc.transpose(1, 2)).mul_(scale)
            if causal:
                s.masked_fill_(_later(q_pos, torch.arange(keys), q.device), -math.inf)
            m = s.amax(dim=-1, keepdim=True)
            p = s.sub_(m).exp_()                                 # in place: the scores are not needed again
            denom = p.sum(dim=-1, keepdim=True)
            out[g, part] = torch.matmul(p, vc).div_(denom)
            lse[g, part] = (m + torch.log(denom)).squeeze(-1)
    return out.reshape(B, H, n, D), lse.reshape(B, H, n)


def attention_backward(q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, lse: Tensor, causal: bool,
                       scale: float | None = None, tile: int = ATTN_TILE_ELEMS, *, rows: Tensor | None = None,
                       exact: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """dQ, dK, dV from the given O and LSE (as a kernel sees them), in float32 or float64; `rows`: dQ at those
    query rows and dK, dV at those key rows only."""
    import torch

    B, H, S, D = q.shape
    dt = _compute_dtype(q, k, v, o, do, lse)
    tf32 = not exact and q.is_cuda and dt == torch.float32 and _tf32_exact(q, k, v, do)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    qf, kf, vf, of, dof = (t.reshape(B * H, S, D) for t in (q, k, v, o, do))
    lsef = lse.reshape(B * H, S)
    pos, every = _positions(rows, S)
    n = pos.numel()
    shape = (B, H, n, D)
    dq = torch.zeros(B * H, n, D, dtype=dt, device=q.device)
    dk = torch.zeros_like(dq)
    dv = torch.zeros_like(dq)

    def grads(q_rows: Tensor, qc: Tensor, k_pos: Tensor, kc: Tensor, vc: Tensor, doc: Tensor,
              oc: Tensor, lc: Tensor) -> tuple[Tensor, Tensor]:
        """P and dS of these query rows against these keys."""
        s = torch.matmul(qc, kc.transpose(1, 2)).mul_(scale)
        if causal:
            s.masked_fill_(_later(q_rows, k_pos, q.device), -math.inf)
        p = s.sub_(lc[..., None]).exp_()
        delta = (doc * oc).sum(dim=-1, keepdim=True)
        ds = torch.matmul(doc, vc.transpose(1, 2)).sub_(delta).mul_(p)
        return p, ds

    with _matmul_precision(tf32):
        if every:
            for g, part in _chunks(B * H, S, S, tile):
                keys = part.stop if causal else S
                q_rows = pos[part]
                qc, oc, doc = qf[g, part].to(dt), of[g, part].to(dt), dof[g, part].to(dt)
                kc, vc = kf[g, :keys].to(dt), vf[g, :keys].to(dt)
                p, ds = grads(q_rows, qc, pos[:keys], kc, vc, doc, oc, lsef[g, part].to(dt))
                dv[g, :keys] += torch.matmul(p.transpose(1, 2), doc)
                dq[g, part] = torch.matmul(ds, kc).mul_(scale)
                dk[g, :keys] += torch.matmul(ds.transpose(1, 2), qc).mul_(scale)
            return dq.reshape(shape), dk.reshape(shape), dv.reshape(shape)
        # dQ at the sampled query rows, against every key they see.
        for g, part in _chunks(B * H, n, S, tile):
            q_rows = pos[part]
            keys = int(q_rows[-1]) + 1 if causal else S
            qc, oc, doc = (_take(t, g, part, pos, every).to(dt) for t in (qf, of, dof))
            kc, vc = kf[g, :keys].to(dt), vf[g, :keys].to(dt)
            _, ds = grads(q_rows, qc, torch.arange(keys), kc, vc, doc, oc, _take(lsef, g, part, pos, every).to(dt))
            dq[g, part] = torch.matmul(ds, kc).mul_(scale)
        # dK and dV at the sampled key rows, from every query row that sees them.
        first = int(pos[0]) if causal else 0
        k_idx = pos.to(q.device)
        for g, part in _chunks(B * H, S - first, n, tile):
            q_rows = torch.arange(first + part.start, first + part.stop)
            span = slice(first + part.start, first + part.stop)
            qc, oc, doc = qf[g, span].to(dt), of[g, span].to(dt), dof[g, span].to(dt)
            kc, vc = kf[g][:, k_idx].to(dt), vf[g][:, k_idx].to(dt)
            p, ds = grads(q_rows, qc, pos, kc, vc, doc, oc, lsef[g, span].to(dt))
            dv[g] += torch.matmul(p.transpose(1, 2), doc)
            dk[g] += torch.matmul(ds.transpose(1, 2), qc).mul_(scale)
    return dq.reshape(shape), dk.reshape(shape), dv.reshape(shape)


def _attn_fwd(causal: bool) -> Operation:
    def run(inputs: Tensors, task: TaskSpec | None = None, *, exact: bool = False,
            rows: Tensor | None = None) -> Tensors:
        o, lse = attention_forward(inputs["Q"], inputs["K"], inputs["V"], causal, rows=rows, exact=exact)
        return {"O": o, "LSE": lse}
    return run


def _attn_bwd(causal: bool) -> Operation:
    def run(inputs: Tensors, task: TaskSpec | None = None, *, exact: bool = False,
            rows: Tensor | None = None) -> Tensors:
        dq, dk, dv = attention_backward(inputs["Q"], inputs["K"], inputs["V"], inputs["O"], inputs["dO"],
                                        inputs["LSE"], causal, rows=rows, exact=exact)
        return {"dQ": dq, "dK": dk, "dV": dv}
    return run


def rmsnorm(inputs: Tensors, task: TaskSpec | None = None, *, exact: bool = False) -> Tensors:
    import torch

    eps = float(task.params.get("eps", 1e-6)) if task is not None else 1e-6
    x, w = inputs["X"], inputs["W"]
    dt = torch.float64 if exact else _compute_dtype(x, w)
    xf = x.to(dt)
    r = torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + eps)
    return {"Y": xf * r * w.to(dt)}


def layernorm(inputs: Tensors, task: TaskSpec | None = None, *, exact: bool = False) -> Tensors:
    """torch.nn.functional.layer_norm's definition (biased variance, about the mean), in float32 or float64."""
    import torch

    eps = float(task.params.get("eps", 1e-5)) if task is not None else 1e-5
    x, w, b = inputs["X"], inputs["W"], inputs["B"]
    dt = torch.float64 if exact else _compute_dtype(x, w, b)
    xf = x.to(dt)
    centred = xf - xf.mean(dim=-1, keepdim=True)
    r = torch.rsqrt(centred.square().mean(dim=-1, keepdim=True) + eps)
    return {"Y": centred * r * w.to(dt) + b.to(dt)}


def softmax(inputs: Tensors, task: TaskSpec | None = None, *, exact: bool = False) -> Tensors:
    """Softmax over the last dimension, in float32 or float64 (torch subtracts the row's maximum)."""
    import torch

    x = inputs["X"]
    dt = torch.float64 if exact else _compute_dtype(x)
    return {"Y": torch.softmax(x.to(dt), dim=-1)}


def add(inputs: Tensors, task: TaskSpec | None = None, *, exact: bool = False) -> Tensors:
    return {"Z": inputs["X"].double() + inputs["Y"].double()}


Operation = Callable[..., Tensors]
OPERATIONS: dict[str, Operation] = {
    "gemm": gemm,
    "attn_fwd": _attn_fwd(False),
    "attn_fwd_causal": _attn_fwd(True),
    "attn_bwd": _attn_bwd(False),
    "attn_bwd_causal": _attn_bwd(True),
    "rmsnorm": rmsnorm,
    "layernorm": layernorm,
    "softmax": softmax,
    "add": add,
}


def reference(task: TaskSpec, inputs: Tensors, *, exact: bool = False, rows: Tensor | None = None) -> Tensors:
    """The task's outputs for these inputs, in higher precision (float64 or float32). `exact`: the slower
    forms the tensor-core ones are measured against; `rows`: at those positions along S only (ROW_SAMPLED)."""
    if task.operation not in OPERATIONS:
        raise KeyError(f"{task.source}: operation {task.operation!r} has no reference "
                       f"(known: {', '.join(OPERATIONS)})")
    if rows is None:
        return OPERATIONS[task.operation](inputs, task, exact=exact)
    if task.operation not in ROW_SAMPLED:
        raise ValueError(f"{task.id}: {task.operation!r} has no reference at a sample of rows")
    return OPERATIONS[task.operation](inputs, task, exact=exact, rows=rows)


# Rows of a cuDNN forward compared with the reference forward before its O and LSE are first used.
_STORED_CHECK_ROWS = 16
_stored_agrees: dict[tuple[str, bool], bool] = {}


def stored_forward(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> tuple[Tensor, Tensor]:
    """O and LSE as a training forward pass stores them, for attention backward's inputs: cuDNN's fused
    attention where it runs (about a millisecond at S = 4096 on an H200, against 38 ms for the reference
    forward, which every round of a backward's timing pays for its fresh inputs); the reference forward
    elsewhere. The first time in a process for each dtype and mask, cuDNN's LSE is held within 1e-5 of the
    reference forward's at a few rows (the same convention: natural log, the same scale), and not again, so
    that drawing inputs never waits for the GPU. The backward's reference uses the O and LSE it is given,
    as a kernel does, so they need only be a forward's."""
    import torch

    B, H, S, D = q.shape
    key = (str(q.dtype), causal)
    if q.is_cuda and q.dtype in (torch.bfloat16, torch.float16) and k.dtype == q.dtype and v.dtype == q.dtype \
            and _stored_agrees.get(key, True):
        try:
            made = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False,
                                                                      scale=1.0 / math.sqrt(D))
        except (RuntimeError, AttributeError):
            made = None
        if made is not None and made[1] is not None and made[1].numel() == B * H * S and made[0].shape == q.shape:
            o, lse = made[0].contiguous(), made[1].reshape(B, H, S).float().contiguous()
            if key not in _stored_agrees:
                rows = torch.unique(torch.linspace(0, S - 1, _STORED_CHECK_ROWS).long())
                _, want = attention_forward(q, k, v, causal, rows=rows)
                err = ((lse[:, :, rows.to(q.device)] - want).abs() / want.abs().clamp_min(1.0)).max()
                _stored_agrees[key] = bool(torch.isfinite(o).all()) and float(err) <= 1e-5
            if _stored_agrees[key]:
                return o, lse
    return attention_forward(q, k, v, causal)


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
    o, lse = stored_forward(inputs["Q"], inputs["K"], inputs["V"], task.operation.endswith("_causal"))
    made = {"O": o, "LSE": lse}
    out = {}
    for t in task.inputs:
        out[t.name] = made[t.name].to(torch_dtype(t.dtype)) if t.derived else inputs[t.name]
    return out


def own_error(task: TaskSpec, inputs: Tensors, *, rows: Tensor | None = None) -> dict[str, dict[str, float]]:
    """The reference's error on these inputs against the same operation in float64, per output: `rel_l2`
    over the output, and `element_ratio`, the largest |ref − f64| over the task's element bound (`outliers`
    elements may exceed it: their count is `over_bound`)."""
    import torch

    wide = {name: t.double() for name, t in inputs.items()}
    quick = reference(task, inputs, rows=rows)
    exact = reference(task, wide, exact=True, rows=rows)
    out: dict[str, dict[str, float]] = {}
    for spec in task.outputs:
        got, want = quick[spec.name].double(), exact[spec.name]
        diff = (got - want).abs()
        bound = task.tolerance.element_for(spec.name, spec.dtype)
        rel = float(diff.norm() / want.norm()) if float(want.norm()) else float(diff.norm())
        entry = {"rel_l2": rel, "tolerance": task.tolerance.max_for(spec.name)}
        if bound is not None:
            allowed = bound.atol * torch.sqrt(torch.mean(want ** 2)) + bound.rtol * want.abs()
            ratio = diff / allowed.clamp_min(torch.finfo(torch.float64).tiny)
            entry.update(element_ratio=float(ratio.max()), over_tenth=int((ratio > 0.1).sum()),
                         elements=want.numel(), outliers=bound.outliers)
        out[spec.name] = entry
    return out
