"""The library yardstick for each task, as a zero-argument callable to time.

`library_fn` returns the task's baseline; `library_fns` adds alternates (the
FlashAttention package for attention, where installed). Each call runs the
library on the given inputs and leaves the result in `Baseline.outputs`,
written in place where the API takes an output tensor (torch.matmul → cuBLAS,
torch.add), otherwise replaced on each call. The timing harness owns warm-up,
events and L2 flushing; this module only says what to run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ptxbench.tasks.spec import TaskSpec

if TYPE_CHECKING:
    from torch import Tensor

Tensors = dict[str, "Tensor"]


class BaselineUnavailable(RuntimeError):
    """The library cannot run here (no CUDA device, backend refused the shape, package missing)."""


@dataclass
class Baseline:
    name: str                                   # which library ran, e.g. "cuDNN (torch SDPA)"
    fn: Callable[[], Any]
    outputs: Tensors = field(default_factory=dict)
    note: str = ""                              # how it was chosen, where there was a choice

    def __call__(self) -> Any:
        return self.fn()


def _on_cuda(inputs: Tensors) -> bool:
    return next(iter(inputs.values())).is_cuda


def _gemm(task: TaskSpec, inputs: Tensors, sizes: dict[str, int]) -> Baseline:
    import torch

    a, b = inputs["A"], inputs["B"]
    c = torch.empty(a.shape[0], b.shape[0], dtype=a.dtype, device=a.device)
    bt = b.T
    name = "cuBLAS (torch.matmul)" if a.is_cuda else "torch.matmul (CPU)"
    return Baseline(name, lambda: torch.matmul(a, bt, out=c), {"C": c})


def _add(task: TaskSpec, inputs: Tensors, sizes: dict[str, int]) -> Baseline:
    import torch

    x, y = inputs["X"], inputs["Y"]
    z = torch.empty_like(x)
    return Baseline("torch.add" + ("" if x.is_cuda else " (CPU)"), lambda: torch.add(x, y, out=z), {"Z": z})


def _rms_norm(task: TaskSpec, inputs: Tensors, sizes: dict[str, int]) -> Baseline:
    import torch.nn.functional as F

    x, w = inputs["X"], inputs["W"]
    eps = float(task.params.get("eps", 1e-6))
    outputs: Tensors = {}

    def run() -> None:
        outputs["Y"] = F.rms_norm(x, (x.shape[-1],), weight=w, eps=eps)

    return Baseline("torch.nn.functional.rms_norm" + ("" if x.is_cuda else " (CPU)"), run, outputs)


def _layer_norm(task: TaskSpec, inputs: Tensors, sizes: dict[str, int]) -> Baseline:
    import torch.nn.functional as F

    x, w, b = inputs["X"], inputs["W"], inputs["B"]
    eps = float(task.params.get("eps", 1e-5))
    outputs: Tensors = {}

    def run() -> None:
        outputs["Y"] = F.layer_norm(x, (x.shape[-1],), weight=w, bias=b, eps=eps)

    return Baseline("torch.nn.functional.layer_norm" + ("" if x.is_cuda else " (CPU)"), run, outputs)


def _softmax(task: TaskSpec, inputs: Tensors, sizes: dict[str, int]) -> Baseline:
    import torch

    x = inputs["X"]
    outputs: Tensors = {}

    def run() -> None:
        outputs["Y"] = torch.softmax(x, dim=-1)

    return Baseline("torch.softmax" + ("" if x.is_cuda else " (CPU)"), run, outputs)


def _causal(task: TaskSpec) -> bool:
    return task.operation.endswith("_causal")


def _probe(b: Baseline) -> Baseline:
    """Run once so that a backend that refuses the shape says so here, not inside timing."""
    try:
        b()
    except (RuntimeError, ValueError) as exc:
        raise BaselineUnavailable(f"{b.name}: {exc}") from None
    return b


def _sdpa_fwd(task: TaskSpec, inputs: Tensors, sizes: dict[str, int]) -> Baseline:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not _on_cuda(inputs):
        raise BaselineUnavailable("cuDNN attention needs a CUDA device")
    q, k, v = inputs["Q"], inputs["K"], inputs["V"]
    scale, causal = 1.0 / math.sqrt(q.shape[-1]), _causal(task)
    outputs: Tensors = {}

    def run() -> None:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            outputs["O"] = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    return _probe(Baseline("cuDNN (torch SDPA)", run, outputs))


def _sdpa_bwd(task: TaskSpec, inputs: Tensors, sizes: dict[str, int]) -> Baseline:
    """cuDNN's attention backward alone: dQ, dK, dV from Q, K, V, O, dO and the log-sum-exp.

    The forward runs once here, outside anything timed, for cuDNN's own O and statistics of these inputs;
    each call then runs only the backward, over private copies of Q, K and V (so a harness that rewrites
    the input buffers in place, as every timing round does, cannot invalidate what the forward saved) and
    the current dO. Three ways to call it, the first that runs and agrees with autograd's answer wins, and
    the name says which: cuDNN's backward operator directly; the forward's backward node called in this
    thread; `torch.autograd.grad` (the engine's bookkeeping adds host time, which the flush before each
    timed region usually hides)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not _on_cuda(inputs):
        raise BaselineUnavailable("cuDNN attention needs a CUDA device")
    do = inputs["dO"]
    qc, kc, vc = (inputs[n].detach().clone().requires_grad_() for n in ("Q", "K", "V"))
    q, k, v = (t.detach() for t in (qc, kc, vc))     # the same private copies, for the direct call
    scale, causal = 1.0 / math.sqrt(q.shape[-1]), _causal(task)
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            graph_out = F.scaled_dot_product_attention(qc, kc, vc, is_causal=causal, scale=scale)
    except RuntimeError as exc:
        raise BaselineUnavailable(f"cuDNN (torch SDPA) forward: {exc}") from None
    outputs: Tensors = {}

    def by_engine() -> None:
        outputs["dQ"], outputs["dK"], outputs["dV"] = torch.autograd.grad(graph_out, (qc, kc, vc), do,
                                                                          retain_graph=True)

    def by_node() -> None:
        outputs["dQ"], outputs["dK"], outputs["dV"] = graph_out.grad_fn(do)[:3]

    engine = _probe(Baseline("cuDNN (torch SDPA backward, autograd)", by_engine, outputs))
    expected = {n: t.clone() for n, t in outputs.items()}
    tried: list[str] = []
    for name, fn in (("cuDNN (torch SDPA backward)", _direct_cudnn_backward(q, k, v, do, causal, scale, outputs)),
                     ("cuDNN (torch SDPA backward node)", by_node)):
        if fn is None:
            tried.append(f"{name}: operator missing")
            continue
        try:
            fn()
        except (RuntimeError, ValueError, TypeError) as exc:
            tried.append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        if all(torch.allclose(outputs[n].float(), expected[n].float(), rtol=1e-2, atol=1e-2) for n in expected):
            return Baseline(name, fn, outputs, note="; ".join(tried))
        tried.append(f"{name}: disagrees with autograd")
    engine.note = "; ".join(tried)
    return engine


def _direct_cudnn_backward(q: Tensor, k: Tensor, v: Tensor, do: Tensor, causal: bool, scale: float,
                           outputs: Tensors) -> Callable[[], None] | None:
    import torch

    aten = torch.ops.aten
    try:
        fwd = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)
    except (RuntimeError, AttributeError):
        return None
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset = fwd[:8]
    no_bias = torch.empty(0, device=q.device, dtype=q.dtype)

    def run() -> None:
        outputs["dQ"], outputs["dK"], outputs["dV"] = aten._scaled_dot_product_cudnn_attention_backward(
            do, q, k, v, out, lse, seed, offset, no_bias, cum_q, cum_k, max_q, max_k, 0.0, causal, scale=scale)

    return run


def _flash_attn(task: TaskSpec, inputs: Tensors, backward: bool) -> Baseline | None:
    try:
        from flash_attn import flash_attn_func
    except ImportError:
        return None
    if not _on_cuda(inputs):
        return None
    import torch

    # flash_attn takes [B, S, H, D]; a transposed view needs no copy.
    q, k, v = (inputs[n].transpose(1, 2) for n in ("Q", "K", "V"))
    scale, causal = 1.0 / math.sqrt(q.shape[-1]), _causal(task)
    outputs: Tensors = {}
    if not backward:
        def run() -> None:
            outputs["O"] = flash_attn_func(q, k, v, softmax_scale=scale, causal=causal).transpose(1, 2)
        return _probe(Baseline("FlashAttention (flash_attn)", run, outputs))
    # Private copies: a graph over the input buffers themselves breaks when they are rewritten in place.
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = flash_attn_func(qg, kg, vg, softmax_scale=scale, causal=causal)
    do = inputs["dO"].transpose(1, 2)

    def run_bwd() -> None:
        grads = torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
        outputs["dQ"], outputs["dK"], outputs["dV"] = (g.transpose(1, 2) for g in grads)
    return _probe(Baseline("FlashAttention (flash_attn backward)", run_bwd, outputs))


_BUILDERS: dict[str, Callable[[TaskSpec, Tensors, dict[str, int]], Baseline]] = {
    "cublas": _gemm,
    "cudnn_sdpa": _sdpa_fwd,
    "cudnn_sdpa_backward": _sdpa_bwd,
    "torch_rms_norm": _rms_norm,
    "torch_layer_norm": _layer_norm,
    "torch_softmax": _softmax,
    "torch_add": _add,
}


def library_fn(task: TaskSpec, inputs: Tensors, sizes: dict[str, int]) -> Baseline:
    """The task's library baseline on these inputs; raises BaselineUnavailable where it cannot run."""
    if task.baseline not in _BUILDERS:
        raise KeyError(f"{task.source}: no baseline named {task.baseline!r}")
    return _BUILDERS[task.baseline](task, inputs, sizes)


def library_fns(task: TaskSpec, inputs: Tensors, sizes: dict[str, int]) -> list[Baseline]:
    """Every library that can run this task here: the baseline first, then alternates.

    The caller compares against the fastest. Raises BaselineUnavailable only if none can run.
    """
    found: list[Baseline] = []
    problems: list[str] = []
    try:
        found.append(library_fn(task, inputs, sizes))
    except BaselineUnavailable as exc:
        problems.append(str(exc))
    if task.baseline in ("cudnn_sdpa", "cudnn_sdpa_backward"):
        try:
            alt = _flash_attn(task, inputs, backward=task.baseline == "cudnn_sdpa_backward")
        except BaselineUnavailable as exc:
            problems.append(str(exc))
            alt = None
        if alt is not None:
            found.append(alt)
    if not found:
        raise BaselineUnavailable("; ".join(problems))
    return found
