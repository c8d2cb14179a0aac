"""References against explicit formulas, inputs' distributions and determinism, CPU baselines."""

import math

import pytest

torch = pytest.importorskip("torch")

from ptxbench.tasks.baselines import BaselineUnavailable, library_fn, library_fns  # noqa: E402
from ptxbench.tasks.inputs import make_inputs, torch_dtype  # noqa: E402
from ptxbench.tasks.reference import attention_backward, attention_forward, reference  # noqa: E402
from ptxbench.tasks.spec import all_tasks, get_task  # noqa: E402

TINY = {"M": 48, "N": 40, "K": 24, "B": 2, "H": 3, "S": 40, "D": 16, "T": 6, "N_add": 1001}


def tiny(task):
    return {k: TINY["N_add"] if (k == "N" and task.operation == "add") else TINY[k] for k in task.headline}


def rel_l2(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def explicit_attention(q, k, v, causal):
    """Softmax written out, float64, one (b, h) at a time."""
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            s = (q[b, h] @ k[b, h].T) / math.sqrt(D)
            for i in range(S):
                row = s[i, : i + 1] if causal else s[i]
                e = torch.exp(row - row.max())
                lse[b, h, i] = row.max() + torch.log(e.sum())
                o[b, h, i] = (e / e.sum()) @ v[b, h, : len(row)]
    return o, lse


def test_gemm_matches_an_explicit_sum():
    t = get_task("gemm_bf16_sm90a")
    x = make_inputs(t, tiny(t), seed=3)
    c = reference(t, x, exact=True)["C"]
    assert c.dtype == torch.float64 and c.shape == (48, 40)
    a, b = x["A"].double(), x["B"].double()
    explicit = (a[:, None, :] * b[None, :, :]).sum(-1)
    assert torch.allclose(c, explicit, rtol=1e-12, atol=1e-12)
    # bf16 products are exact in float32: only the accumulation rounds.
    quick = reference(t, x)["C"]
    assert quick.dtype == torch.float32
    assert ((quick.double() - explicit).abs() <= 24 * 2.0 ** -24 * (a.abs() @ b.abs().T)).all()


@pytest.mark.parametrize("causal", [False, True])
def test_attention_forward_matches_explicit_softmax(causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 24, 8, generator=g, dtype=torch.float64) for _ in range(3))
    o, lse = attention_forward(q, k, v, causal)
    eo, else_ = explicit_attention(q, k, v, causal)
    assert torch.allclose(o, eo, atol=1e-12) and torch.allclose(lse, else_, atol=1e-12)
    # Chunking over (batch·head) and query rows changes nothing.
    o2, lse2 = attention_forward(q, k, v, causal, tile=50)
    assert torch.allclose(o, o2, atol=1e-12) and torch.allclose(lse, lse2, atol=1e-12)
    if causal:  # the first query sees only the first key
        assert torch.allclose(o[:, :, 0], v[:, :, 0]) and torch.allclose(lse[:, :, 0], (q[:, :, 0] * k[:, :, 0]).sum(-1) / math.sqrt(8))


@pytest.mark.parametrize("causal", [False, True])
def test_attention_backward_matches_autograd_in_float64(causal):
    g = torch.Generator().manual_seed(1)
    q, k, v, do = (torch.randn(2, 3, 20, 8, generator=g, dtype=torch.float64) for _ in range(4))
    o, lse = attention_forward(q, k, v, causal)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    s = qg @ kg.transpose(-1, -2) / math.sqrt(8)
    if causal:
        s = s.masked_fill(torch.ones(20, 20, dtype=torch.bool).triu(1), -math.inf)
    expected = torch.autograd.grad(s.softmax(-1) @ vg, (qg, kg, vg), do)
    for tile in (1 << 28, 60):
        got = attention_backward(q, k, v, o, do, lse, causal, tile=tile)
        for e, r in zip(expected, got):
            assert r.dtype == torch.float64 and torch.allclose(r, e, atol=1e-11), (tile, (r - e).abs().max())


@pytest.mark.parametrize("causal", [False, True])
def test_attention_at_a_sample_of_rows_is_the_full_reference_at_those_rows(causal):
    g = torch.Generator().manual_seed(7)
    q, k, v, do = (torch.randn(2, 3, 40, 8, generator=g, dtype=torch.float64) for _ in range(4))
    o, lse = attention_forward(q, k, v, causal)
    full = attention_backward(q, k, v, o, do, lse, causal)
    for rows in (torch.tensor([0, 5, 6, 17, 39]), torch.tensor([39]), torch.tensor([3, 0, 3])):
        keep = torch.unique(rows)
        for tile in (1 << 28, 50):
            o_r, lse_r = attention_forward(q, k, v, causal, tile=tile, rows=rows)
            assert o_r.shape == (2, 3, len(keep), 8) and lse_r.shape == (2, 3, len(keep))
            assert torch.allclose(o_r, o[:, :, keep], atol=1e-12) and torch.allclose(lse_r, lse[:, :, keep], atol=1e-12)
            sampled = attention_backward(q, k, v, o, do, lse, causal, tile=tile, rows=rows)
            for got, want in zip(sampled, full):
                assert torch.allclose(got, want[:, :, keep], atol=1e-11), (rows, tile, (got - want[:, :, keep]).abs().max())
    with pytest.raises(ValueError, match="positions"):
        attention_forward(q, k, v, causal, rows=torch.tensor([40]))


def test_a_row_sample_is_refused_where_the_operation_has_none():
    t = get_task("gemm_bf16_sm90a")
    with pytest.raises(ValueError, match="sample of rows"):
        reference(t, make_inputs(t, tiny(t), seed=0), rows=torch.tensor([0]))


def test_rmsnorm_matches_the_formula():
    t = get_task("rmsnorm_bf16_sm90a")
    x = make_inputs(t, tiny(t), seed=5)
    y = reference(t, x)["Y"]
    xs, w = x["X"].double(), x["W"].double()
    for row in range(xs.shape[0]):
        r = 1 / math.sqrt(float((xs[row] ** 2).mean()) + 1e-6)
        assert torch.allclose(y[row].double(), xs[row] * r * w, rtol=1e-5, atol=1e-6)
    assert y.dtype == torch.float32


def test_layernorm_matches_the_formula_and_its_rows_sit_off_zero():
    t = get_task("layernorm_bf16_sm90a")
    x = make_inputs(t, {"T": 64, "D": 256}, seed=5)
    y = reference(t, x)["Y"]
    xs, w, b = x["X"].double(), x["W"].double(), x["B"].double()
    for row in range(xs.shape[0]):
        m = float(xs[row].mean())
        var = float(((xs[row] - m) ** 2).mean())
        assert torch.allclose(y[row].double(), (xs[row] - m) / math.sqrt(var + 1e-5) * w + b, rtol=1e-4, atol=1e-4)
    spread = xs.std(dim=-1)
    assert (xs.mean(dim=-1).abs() > spread).float().mean() > 0.5   # most rows' means beyond their spread
    # RMSNorm's formula (no centring) is far off on these rows.
    rms = xs / xs.square().mean(-1, keepdim=True).sqrt() * w + b
    assert float((rms - y).norm() / y.norm()) > 0.1


def test_add_reference_is_float64():
    t = get_task("vector_add_smoke")
    x = make_inputs(t, tiny(t), seed=0)
    z = reference(t, x)["Z"]
    assert z.dtype == torch.float64 and torch.equal(z, x["X"].double() + x["Y"].double())


@pytest.mark.parametrize("task", all_tasks(), ids=lambda t: t.id)
def test_inputs_and_reference_for_every_task(task):
    sizes = tiny(task)
    shapes = task.shapes(sizes)
    x = make_inputs(task, sizes, seed=11)
    assert list(x) == [t.name for t in task.inputs]
    for spec in task.inputs:
        assert x[spec.name].shape == shapes[spec.name] and x[spec.name].dtype == torch_dtype(spec.dtype)
        assert torch.count_nonzero(x[spec.name]) > 0.9 * x[spec.name].numel()
        assert torch.isfinite(x[spec.name].float()).all()
    out = reference(task, x)
    assert sorted(out) == sorted(o.name for o in task.outputs)
    for spec in task.outputs:
        assert out[spec.name].shape == shapes[spec.name]
        assert out[spec.name].dtype in (torch.float32, torch.float64)
        assert torch.isfinite(out[spec.name]).all()


def test_inputs_are_deterministic_per_seed():
    t = get_task("attn_bwd_causal_sm90a")
    sizes = tiny(t)
    a, b, c = (make_inputs(t, sizes, seed=s) for s in (7, 7, 8))
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert not any(torch.equal(a[n], c[n]) for n in ("Q", "K", "V", "dO"))
    # Different inputs of one task are not copies of each other.
    assert not torch.equal(a["Q"], a["K"])


def test_derived_inputs_come_from_the_forward_reference():
    t = get_task("attn_bwd_sm90a")
    x = make_inputs(t, tiny(t), seed=2)
    o, lse = attention_forward(x["Q"], x["K"], x["V"], causal=False)
    assert x["O"].dtype == torch.bfloat16 and torch.equal(x["O"], o.to(torch.bfloat16))
    assert x["LSE"].dtype == torch.float32 and torch.equal(x["LSE"], lse)


def test_distributions():
    t = get_task("attn_fwd_sm90a")
    big = {"B": 1, "H": 4, "S": 2048, "D": 128}
    k = make_inputs(t, big, seed=0)["K"].float()
    spikes = (k.abs() > 6).float().mean().item()    # N(0,1) alone almost never exceeds 6
    assert 0.0004 < spikes < 0.002 and k.abs().max() > 15
    from ptxbench.tasks.inputs import HOT_ROW_PROBABILITY, HOT_ROW_SCALE

    q = make_inputs(t, big, seed=0)["Q"].float()
    hot = q.abs().amax(-1) > 0.5 * HOT_ROW_SCALE     # a hot row's largest element is about 2.5 x 80
    assert 0.4 * HOT_ROW_PROBABILITY < hot.float().mean().item() < 2 * HOT_ROW_PROBABILITY
    n = make_inputs(get_task("gemm_bf16_sm90a"), {"M": 256, "N": 256, "K": 256}, seed=0)["A"].float()
    assert abs(n.mean().item()) < 0.02 and abs(n.std().item() - 1) < 0.02 and n.abs().max() < 6
    from ptxbench.tasks.inputs import draw

    u = draw((10000,), "uniform", torch.Generator().manual_seed(0), "cpu")
    assert u.min() >= -1 and u.max() < 1 and u.std() > 0.5
    with pytest.raises(ValueError, match="unknown distribution"):
        draw((4,), "cauchy", torch.Generator(), "cpu")


def test_attention_inputs_break_a_softmax_without_its_running_maximum():
    """Hot query rows (tasks/inputs.py `hot_rows`) put scores in the hundreds at every train size: a softmax
    that subtracts any fixed constant instead of the row's maximum overflows or underflows there, so a
    kernel that skips the running max fails at train sizes, not only at a held-out one."""
    t = get_task("attn_fwd_sm90a")
    sizes = dict(t.train[0], B=1, H=2)
    x = {k: v.float() for k, v in make_inputs(t, sizes, seed=11).items()}
    s = x["Q"] @ x["K"].transpose(-1, -2) / sizes["D"] ** 0.5
    ref = torch.softmax(s, -1) @ x["V"]
    for offset in (0.0, 20.0, 60.0, 88.0):
        p = torch.exp(s - offset)
        o = (p / p.sum(-1, keepdim=True)) @ x["V"]
        assert not torch.isfinite(o).all() or ((o - ref).norm() / ref.norm()).item() > 1e-2, offset


@pytest.mark.parametrize("task_id", ["gemm_bf16_sm90a", "rmsnorm_bf16_sm90a", "layernorm_bf16_sm90a", "softmax_bf16_sm90a",
                                     "vector_add_smoke"])
def test_cpu_baselines_are_within_tolerance(task_id):
    t = get_task(task_id)
    sizes = tiny(t)
    x = make_inputs(t, sizes, seed=4)
    base = library_fn(t, x, sizes)
    assert base.name and not base.outputs.get("never")
    base()
    ref = reference(t, x)
    for o in t.outputs:
        got = base.outputs[o.name]
        assert got.dtype == torch_dtype(o.dtype) and got.shape == ref[o.name].shape
        assert rel_l2(got, ref[o.name]) < t.tolerance.max_for(o.name)
    assert [b.name for b in library_fns(t, x, sizes)] == [base.name]


@pytest.mark.parametrize("task_id", ["attn_fwd_sm90a", "attn_bwd_causal_sm90a"])
def test_attention_baselines_need_cuda(task_id):
    t = get_task(task_id)
    x = make_inputs(t, tiny(t), seed=0)
    with pytest.raises(BaselineUnavailable, match="CUDA"):
        library_fn(t, x, tiny(t))
    with pytest.raises(BaselineUnavailable):
        library_fns(t, x, tiny(t))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("task_id", ["gemm_bf16_sm90a", "attn_fwd_causal_sm90a", "attn_bwd_sm90a", "rmsnorm_bf16_sm90a",
                                     "layernorm_bf16_sm90a", "softmax_bf16_sm90a"])
def test_cuda_reference_and_baseline(task_id):
    t = get_task(task_id)
    sizes = {**t.train[0]}
    x = make_inputs(t, sizes, seed=0, device="cuda")
    ref = reference(t, x)
    for b in library_fns(t, x, sizes):
        b()
        for name, got in b.outputs.items():
            assert rel_l2(got, ref[name]) < t.tolerance.max_for(name), (b.name, name)
