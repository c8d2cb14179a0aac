"""Random task inputs: deterministic per (seed, device), in the spec's dtypes, never all zero.

Distributions (a spec's `input_distribution`, or an input's own `distribution`):

- ``normal``: N(0, 1).
- ``spiky``: N(0, 1), each element replaced with probability 0.001 by a draw
  from N(0, 100) (standard deviation 10), as the paper draws attention inputs.
- ``uniform``: U(−1, 1).
- ``scaled_rows``: ``spiky``, each row (every index but the last) multiplied by its own 10^U(−1, 1), so
  rows differ in scale by up to a hundredfold: a row-wise kernel that assumes unit-scale rows is wrong.
- ``offset_rows``: ``scaled_rows``, each row then moved off zero by its own U(−8, 8) times its scale:
  activations before a LayerNorm, whose rows have a mean of their own. A kernel that leaves the mean
  out (RMSNorm's formula) is far off, and one that takes the variance as E[x²] − mean² loses about
  six of float32's 24 bits to the cancellation (bf16 inputs cannot hold an offset large enough to
  cost it more).
- ``hot_rows``: ``spiky``, and each row (every index but the last) with probability 1/128 multiplied
  by 80: attention's queries as real activations have them, a few with scores in the hundreds. With
  D = 128 such a row's logits reach about ±280 (`scale·q·k` is N(0, 80²)), past what exp can hold in
  float32 (88.7) and farther apart than any fixed offset can bring into range (from −87 to 88): a
  softmax without its running maximum overflows or underflows there, whatever constant it subtracts.

Tasks whose outputs depend on the size of their inputs draw from a distribution with a tail
(``spiky``, ``scaled_rows``): a kernel that is right only for values near the mean is caught.

Values are drawn in float32 with a `torch.Generator` on the target device and
then cast, so the same seed gives the same tensors on the same kind of device
(CPU and CUDA generators differ). Derived inputs (attention backward's O and
LSE) come from the reference's `derive_inputs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxbench.tasks.dtypes import torch_dtype
from ptxbench.tasks.spec import TaskSpec

if TYPE_CHECKING:
    import torch
    from torch import Tensor

SPIKE_PROBABILITY = 1e-3
SPIKE_STD = 10.0
HOT_ROW_PROBABILITY = 1 / 128
HOT_ROW_SCALE = 80.0
ROW_OFFSET = 8.0

def draw(shape: tuple[int, ...], distribution: str, gen: torch.Generator, device: str | torch.device) -> Tensor:
    """float32 values from one of the named distributions."""
    import torch

    if distribution == "normal":
        return torch.randn(shape, generator=gen, device=device)
    if distribution == "uniform":
        return torch.rand(shape, generator=gen, device=device) * 2 - 1
    if distribution in ("spiky", "scaled_rows", "hot_rows", "offset_rows"):
        x = torch.randn(shape, generator=gen, device=device)
        spikes = torch.randn(shape, generator=gen, device=device) * SPIKE_STD
        hit = torch.rand(shape, generator=gen, device=device) < SPIKE_PROBABILITY
        x = torch.where(hit, spikes, x)
        if distribution in ("scaled_rows", "offset_rows") and len(shape) > 1:
            rows = torch.rand((*shape[:-1], 1), generator=gen, device=device) * 2 - 1
            x = x * torch.pow(10.0, rows)
            if distribution == "offset_rows":
                offset = torch.rand((*shape[:-1], 1), generator=gen, device=device) * 2 - 1
                x = x + offset * ROW_OFFSET * torch.pow(10.0, rows)
        if distribution == "hot_rows" and len(shape) > 1:
            hot = torch.rand((*shape[:-1], 1), generator=gen, device=device) < HOT_ROW_PROBABILITY
            x = torch.where(hot, x * HOT_ROW_SCALE, x)
        return x
    raise ValueError(f"unknown distribution {distribution!r} (known: normal, spiky, uniform, scaled_rows, hot_rows, "
                     "offset_rows)")


def make_inputs(task: TaskSpec, sizes: dict[str, int], seed: int, device: str | torch.device = "cpu") -> dict[str, Tensor]:
    """Every input of `task` at `sizes`, drawn from seed `seed` on `device`, in the spec's dtypes."""
    import torch

    from ptxbench.tasks.reference import derive_inputs

    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    shapes = task.shapes(sizes)
    out: dict[str, Tensor] = {}
    for t in task.inputs:
        if t.derived:
            continue
        dtype = torch_dtype(t.dtype)
        if dtype.is_floating_point:
            x = draw(shapes[t.name], t.distribution or task.input_distribution, gen, device).to(dtype)
        else:
            # Small non-zero integers: a kernel that ignores an input cannot match by luck.
            x = torch.randint(1, 16, shapes[t.name], generator=gen, device=device).to(dtype)
        out[t.name] = x
    return derive_inputs(task, out)
