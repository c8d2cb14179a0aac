"""Every task's reference, as the GPU worker computes it (TF32 tensor cores, and at held-out sizes a sample
of rows), within a tenth of the task's tolerance of the same operation in float64, at every train and
held-out size, on the task's own input distributions (tasks/reference.py `own_error`).

Attention is measured on one batch and two heads at each size's S and D: heads are independent, so the
error of one does not depend on how many there are. Runs wherever CUDA does (any architecture)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ptxbench.engine.gpu.datacache import row_sample  # noqa: E402
from ptxbench.tasks.inputs import make_inputs  # noqa: E402
from ptxbench.tasks.reference import own_error  # noqa: E402
from ptxbench.tasks.spec import all_tasks  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


def _cases():
    seen = set()
    for task in all_tasks():
        for split, sizes in [("train", s) for s in task.train] + [("heldout", s) for s in task.heldout]:
            key = (task.operation, tuple(sorted(sizes.items())), split)
            if key not in seen:
                seen.add(key)
                yield pytest.param(task, split, dict(sizes), id=f"{task.id}-{split}-" + "-".join(map(str, sizes.values())))


@pytest.mark.parametrize("task,split,sizes", list(_cases()))
def test_the_reference_is_within_a_tenth_of_the_tolerance(task, split, sizes):
    if "B" in sizes and "H" in sizes:
        sizes.update(B=1, H=2)
    x = make_inputs(task, sizes, seed=5, device="cuda")
    rows = row_sample(sizes.get("S", 0), task.tolerance.heldout_rows) if split == "heldout" else None
    for name, e in own_error(task, x, rows=rows).items():
        assert e["rel_l2"] <= e["tolerance"] / 10, (name, e)
        if "element_ratio" in e:
            assert e["over_tenth"] <= e["outliers"] * e["elements"], (name, e)


@pytest.mark.parametrize("causal", [False, True])
def test_backward_inputs_are_a_forward_pass_that_agrees_with_the_reference(causal):
    """Attention backward's O and LSE (tasks/reference.py `stored_forward`, cuDNN's forward where it runs)
    agree with the reference forward: LSE to float32 accuracy, O to the bf16 it is stored in."""
    from ptxbench.tasks.reference import attention_forward, stored_forward

    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (torch.randn(2, 4, 2048, 128, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(3))
    q[:, :, ::128] *= 40                                                    # hot rows: scores in the hundreds
    o, lse = stored_forward(q, k, v, causal)
    ro, rlse = attention_forward(q, k, v, causal)
    assert o.dtype in (torch.bfloat16, torch.float32) and lse.dtype == torch.float32 and lse.shape == (2, 4, 2048)
    assert float(((lse - rlse).abs() / rlse.abs().clamp_min(1.0)).max()) <= 1e-5
    assert float((o.float() - ro).norm() / ro.norm()) <= 4e-3
