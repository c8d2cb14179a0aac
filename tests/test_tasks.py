"""Every spec loads and keeps its promises; a broken spec names its file and field."""

import re
import tomllib
from pathlib import Path

import pytest

from ptxbench.tasks.spec import (
    ARCHES,
    FAMILIES,
    SPECS_DIR,
    TaskSpecError,
    all_tasks,
    get_task,
    load_task,
)

IDS = [
    "gemm_bf16_sm90a", "gemm_bf16_sm100a",
    "attn_fwd_sm90a", "attn_fwd_causal_sm90a", "attn_fwd_sm100a", "attn_fwd_causal_sm100a",
    "attn_bwd_sm90a", "attn_bwd_causal_sm90a", "attn_bwd_sm100a", "attn_bwd_causal_sm100a",
    "rmsnorm_bf16_sm90a", "layernorm_bf16_sm90a", "softmax_bf16_sm90a", "vector_add_smoke",
]
EXAMPLE = (SPECS_DIR / "gemm_bf16_sm90a.toml").read_text()


def test_every_listed_task_exists_and_nothing_else():
    assert sorted(t.id for t in all_tasks()) == sorted(IDS)


@pytest.mark.parametrize("task_id", IDS)
def test_spec_promises(task_id):
    t = get_task(task_id)
    assert t.arch in ARCHES
    assert set(t.families) <= set(FAMILIES)
    assert t.headline in t.train
    assert not [s for s in t.heldout if s in t.train]
    assert t.heldout, "every task has held-out sizes"
    for _, sizes in t.all_sizes():
        assert t.flops(sizes) > 0 and t.bytes(sizes) > 0
        assert all(all(d > 0 for d in shape) for shape in t.shapes(sizes).values())
    assert t.description and t.title
    assert t.source == SPECS_DIR / f"{task_id}.toml"
    # The prompt documents the default launch's argument order.
    assert "Default launch" in t.description


def test_interfaces_match_the_fixed_ids():
    gemm = get_task("gemm_bf16_sm90a")
    assert gemm.shapes(gemm.headline) == {"A": (8192, 5120), "B": (7168, 5120), "C": (8192, 7168)}
    assert gemm.families == ("wgmma", "tma", "mbarrier")
    assert get_task("gemm_bf16_sm100a").families == ("tcgen05_mma", "tcgen05_alloc", "tcgen05_ld", "tma", "mbarrier")
    fwd = get_task("attn_fwd_causal_sm90a")
    assert fwd.headline == {"B": 4, "H": 48, "S": 4096, "D": 128}
    assert [s["S"] for s in fwd.train] == [512, 1024, 2048, 4096]
    assert [s["S"] for s in fwd.heldout] == [8192, 16384]
    assert fwd.shapes(fwd.headline)["LSE"] == (4, 48, 4096)
    assert fwd.input_distribution == "spiky"
    assert "f32:1/sqrt(D)" in fwd.launch["launches"][0]["args"]
    bwd = get_task("attn_bwd_sm90a")
    assert [t.name for t in bwd.inputs] == ["Q", "K", "V", "O", "dO", "LSE"]
    assert [t.name for t in bwd.inputs if t.derived] == ["O", "LSE"]
    assert bwd.tensor_names()[-3:] == ("dQ", "dK", "dV")
    # Causal attention does half the work of the full one.
    full, causal = get_task("attn_fwd_sm90a"), get_task("attn_fwd_causal_sm90a")
    assert full.flops(full.headline) == 2 * causal.flops(causal.headline)
    rms = get_task("rmsnorm_bf16_sm90a")
    assert rms.families == ("bulk_copy", "mbarrier") and rms.params["eps"] == 1e-6
    assert {(s["T"], s["D"]) for s in rms.heldout} == {(65536, 7168), (8192, 16384)}
    add = get_task("vector_add_smoke")
    assert add.families == () and add.heldout == ({"N": (1 << 24) + 3},)


def test_to_dict_round_trips_the_essentials():
    d = get_task("attn_fwd_sm90a").to_dict()
    assert d["id"] == "attn_fwd_sm90a" and d["tolerance"]["per_output"] == {"LSE": 1e-3}
    assert d["sizes"]["headline"]["S"] == 4096


def test_expert_dir_is_a_path_or_none():
    for t in all_tasks():
        d = t.expert_dir()
        assert d is None or (d.is_dir() and d.name == t.id)


def test_get_task_unknown():
    with pytest.raises(KeyError, match="unknown task 'nope'"):
        get_task("nope")


def _write(tmp_path: Path, text: str, name: str = "gemm_bf16_sm90a") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_example_copy_loads(tmp_path):
    assert load_task(_write(tmp_path, EXAMPLE)).id == "gemm_bf16_sm90a"


@pytest.mark.parametrize(
    "old, new, field",
    [
        ('arch = "sm_90a"', 'arch = "sm_90"', "arch"),
        ('families = ["wgmma", "tma", "mbarrier"]', 'families = ["wgmma", "tensor_cores"]', "families[1]"),
        ('families = ["wgmma", "tma", "mbarrier"]', 'families = "wgmma"', "families"),
        ('flops = "2*M*N*K"', 'flops = "2*M*N*Q"', "flops"),
        ('flops = "2*M*N*K"', 'flops = "2*M*"', "flops"),
        ('bytes = "2*(M*K + N*K + M*N)"', "", "bytes"),
        ('dtype = "bf16"', 'dtype = "bfloat"', "inputs[0].dtype"),
        ('shape = ["M", "K"]', 'shape = ["M", "X"]', "inputs[0].shape[1]"),
        ('metric = "rel_l2"', 'metric = "cosine"', "tolerance.metric"),
        ('max = 1e-2', 'max = "small"', "tolerance.max"),
        ('baseline = "cublas"', 'baseline = "magic"', "baseline"),
        ('id = "gemm_bf16_sm90a"', 'id = "other"', "id"),
        ('input_distribution = "normal"', 'input_distribution = "cauchy"', "input_distribution"),
        ('"M % 128 == 0"', '"M % 3000 == 0"', "constraints"),
        ("    { M = 4096, N = 14336, K = 2048 },", "    { M = 4096, N = 4096, K = 4096 },", "sizes.heldout[0]"),
        ("headline = { M = 8192, N = 7168, K = 5120 }", "headline = { M = 1024, N = 1024, K = 1024 }", "sizes.headline"),
        ("    { M = 2048, N = 2048, K = 2048 },", "    { M = 2048, N = 2048 },", "sizes.train[0]"),
        ("    { M = 2048, N = 2048, K = 2048 },", "    { M = 2048, N = -1, K = 2048 },", "sizes.train[0].N"),
        ('entry = "gemm"', "", "launch.launches[0].entry"),
        ('grid = ["N // 128", "M // 128", 1]', 'grid = ["N // BM", 1, 1]', "launch.launches[0].grid[0]"),
        ("[launch]", "[launchx]", "launchx"),
        ('title = "GEMM bf16: C = A · Bᵀ"', "title = 3", "title"),
    ],
)
def test_broken_spec_names_file_and_field(tmp_path, old, new, field):
    assert old in EXAMPLE
    path = _write(tmp_path, EXAMPLE.replace(old, new, 1))
    with pytest.raises(TaskSpecError) as info:
        load_task(path)
    assert info.value.field == field, str(info.value)
    assert str(path) in str(info.value)


def test_bad_toml_and_missing_file(tmp_path):
    with pytest.raises(TaskSpecError, match=re.escape("(toml)")):
        load_task(_write(tmp_path, "id = [unclosed"))
    with pytest.raises(TaskSpecError, match="cannot be read"):
        load_task(tmp_path / "absent.toml")
    with pytest.raises(TaskSpecError, match="extra: unknown field"):
        load_task(_write(tmp_path, "extra = 1\n" + EXAMPLE))
    with pytest.raises(TaskSpecError, match=re.escape("launch.launches[0].extra: unknown field")):
        load_task(_write(tmp_path, EXAMPLE + "\nextra = 1\n"))


def test_spec_files_are_plain_toml():
    for path in SPECS_DIR.glob("*.toml"):
        assert tomllib.loads(path.read_text())["id"] == path.stem


def test_tasks_package_imports_without_torch():
    import subprocess
    import sys

    code = ("import sys, ptxbench.tasks.spec, ptxbench.tasks.reference, ptxbench.tasks.inputs, "
            "ptxbench.tasks.baselines; sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
