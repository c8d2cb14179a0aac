"""Launch manifests: parse, merge, resolve, validate, and compare with real .entry signatures."""

import json
import subprocess

import pytest

from ptxbench.engine.manifest import (
    LaunchConfigError,
    ManifestError,
    default_manifest,
    merge,
    param_problems,
    parse_entry_params,
    parse_manifest,
    ptx_param_kinds,
    resolve,
)
from ptxbench.tasks.spec import all_tasks, get_task

GEMM = get_task("gemm_bf16_sm90a")
ATTN = get_task("attn_fwd_sm90a")


def _resolved(override: dict, task=GEMM, sizes=None):
    return resolve(merge(default_manifest(task), parse_manifest(json.dumps(override))), task, sizes or task.headline)


@pytest.mark.parametrize("task", all_tasks(), ids=lambda t: t.id)
def test_every_default_manifest_resolves_for_every_size(task):
    manifest = default_manifest(task)
    for _, sizes in task.all_sizes():
        r = resolve(manifest, task, sizes)
        assert r.launches and all(a.kind in ("ptr", "tmap", "scalar") for a in r.launches[0].args)
        # Every output is handed to the kernel.
        assert {o.name for o in task.outputs} <= {a.name for a in r.launches[0].args if a.kind == "ptr"}


def test_resolve_types_every_argument():
    r = resolve(default_manifest(ATTN), ATTN, ATTN.headline)
    (launch,) = r.launches
    assert launch.grid == (64, 48, 4) and launch.block == (128, 1, 1) and launch.cluster == (1, 1, 1)
    kinds = [(a.kind, a.name, a.dtype) for a in launch.args]
    assert kinds[:5] == [("ptr", n, "") for n in ("Q", "K", "V", "O", "LSE")]
    scale = launch.args[5]
    assert scale.dtype == "f32" and scale.value == pytest.approx(128 ** -0.5)
    assert [(a.dtype, a.value) for a in launch.args[6:]] == [("i32", 4), ("i32", 48), ("i32", 4096), ("i32", 128)]


def test_the_documented_example_resolves():
    r = _resolved({
        "launches": [{"entry": "gemm_bf16_tn", "grid": ["num_sms", 1, 1], "block": [384, 1, 1],
                      "cluster": [1, 1, 1], "shared_bytes": 213000,
                      "args": ["tmap:tmA", "tmap:tmB", "C", "i32:M", "i32:N", "i32:K"]}],
        "tensor_maps": {"tmA": {"tensor": "A", "box": [128, 64], "swizzle": "128B"},
                        "tmB": {"tensor": "B", "box": [256, 64], "swizzle": "128B"}},
        "scratch": {"workspace": {"dtype": "f32", "shape": ["M", "N"], "init": "zero"}},
    })
    assert r.launches[0].grid == (132, 1, 1) and r.launches[0].shared_bytes == 213000
    tm = r.tensor_maps["tmA"]
    assert tm.shape == (8192, 5120) and tm.box == (128, 64) and tm.strides_bytes == (10240, 2)
    assert r.scratch["workspace"].nbytes == 8192 * 7168 * 4
    assert resolve(default_manifest(GEMM), GEMM, GEMM.headline, num_sms=78).num_sms == 78


def test_merge_fills_unset_fields_and_adds_maps():
    default = parse_manifest({
        "launches": [{"entry": "k", "grid": [8], "block": [128], "args": ["A"]}],
        "tensor_maps": {"t1": {"tensor": "A", "box": [8, 8]}},
    })
    over = parse_manifest('{"launches": [{"entry": "k", "block": [256]}, {"entry": "k2"}],'
                          ' "tensor_maps": {"t2": {"tensor": "B", "box": [8, 8]}}}')
    m = merge(default, over)
    assert m.launches[0].grid == (8,) and m.launches[0].block == (256,) and m.launches[0].args == ("A",)
    assert m.launches[1].grid is None
    assert set(m.tensor_maps) == {"t1", "t2"}
    assert merge(default, None) is default
    assert merge(default, parse_manifest("{}")).launches == default.launches
    # A launch with no default to borrow from must say what is missing.
    with pytest.raises(ManifestError, match=r"launches\[1\] \(other\)\.grid: missing"):
        _resolved({"launches": [{"entry": "vector_add"}, {"entry": "other"}]}, task=get_task("vector_add_smoke"))
    # A renamed kernel in the default's position borrows the rest of that launch.
    renamed = _resolved({"launches": [{"entry": "my_add"}]}, task=get_task("vector_add_smoke"))
    assert renamed.launches[0].entry == "my_add" and renamed.launches[0].block == (256, 1, 1)
    # Same entry borrows from the default even in another position.
    r = _resolved({"launches": [{"entry": "pre", "grid": [1], "block": [32], "args": []}, {"entry": "gemm"}]})
    assert r.launches[1].grid == (56, 64, 1)


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"launches": [', "not valid JSON"),
        ("[1, 2]", "expected an object"),
        ('{"launch": []}', "unknown field 'launch'"),
        ('{"launches": {}}', "expected a list"),
        ('{"launches": [{"grid": [1]}]}', "entry: expected a kernel name"),
        ('{"launches": [{"entry": "k", "gird": [1]}]}', "unknown field 'gird'"),
        ('{"launches": [{"entry": "k", "grid": [1, 1, 1, 1]}]}', "expected 1–3 values"),
        ('{"launches": [{"entry": "k", "grid": [1.5]}]}', "expected an integer or an expression"),
        ('{"launches": [{"entry": "k", "grid": [true]}]}', "expected an integer or an expression"),
        ('{"launches": [{"entry": "k", "grid": ["M +"]}]}', "does not parse"),
        ('{"launches": [{"entry": "k", "block": ["__import__(\'os\')"]}]}', "only the functions"),
        ('{"launches": [{"entry": "k", "args": "A"}]}', "args: expected a list"),
        ('{"launches": [{"entry": "k", "args": [1]}]}', "expected a string"),
        ('{"launches": [{"entry": "k", "args": ["f16:1"]}]}', "unknown argument kind 'f16'"),
        ('{"launches": [{"entry": "k", "args": ["i32:"]}]}', "empty"),
        ('{"launches": [{"entry": "k", "args": ["A+B"]}]}', "neither a tensor"),
        ('{"tensor_maps": {"t": {"tensor": "A"}}}', "box: missing"),
        ('{"tensor_maps": {"t": {"tensor": "A", "box": [64], "swizzle": "256B"}}}', "swizzle"),
        ('{"tensor_maps": {"t": {"tensor": "A", "box": [64], "interleave": "16B"}}}', "interleave"),
        ('{"tensor_maps": {"t": {"tensor": "A", "box": [64], "fill": "nan"}}}', "unknown field 'fill'"),
        ('{"tensor_maps": []}', "expected an object of name"),
        ('{"scratch": {"w": {"dtype": "f33", "shape": [1]}}}', "dtype"),
        ('{"scratch": {"w": {"shape": [1]}}}', "needs dtype and shape"),
        ('{"scratch": {"bad name": {"dtype": "f32", "shape": [1]}}}', "not a valid name"),
        ('{"tensor_maps": {"t": {"tensor": "A", "box": [1, 1, 1, 1, 1, 1]}}}', "expected 1–5 values"),
        ('{"launches": [{"entry": "k", "grid": ["M.real"]}]}', "Attribute is not allowed"),
        ('{"launches": [{"entry": "k", "grid": ["\'a\'"]}]}', "only numbers"),
        ("x" * (2 << 20), "at most"),
    ],
)
def test_parse_errors_are_bad_manifest(text, message):
    with pytest.raises(ManifestError, match=message) as info:
        parse_manifest(text)
    assert info.value.category == "bad_manifest"


@pytest.mark.parametrize(
    "override, message",
    [
        ({"launches": [{"entry": "gemm", "args": ["A", "Z"]}]}, "'Z' is not a tensor, scratch buffer or size"),
        ({"launches": [{"entry": "gemm", "args": ["tmap:tmX"]}]}, "no tensor map 'tmX'"),
        ({"launches": [{"entry": "gemm", "grid": ["P // 2"]}]}, "unknown name 'P'"),
        ({"tensor_maps": {"t": {"tensor": "Q", "box": [8, 8]}}}, "'Q' is not a task tensor"),
        ({"scratch": {"C": {"dtype": "f32", "shape": [4]}}}, "already a task tensor"),
        ({"scratch": {"M": {"dtype": "f32", "shape": [4]}}}, "already a task tensor or size"),
        ({"launches": []}, None),
    ],
)
def test_unknown_names_are_bad_manifest(override, message):
    if message is None:  # an empty list means "keep the default launches"
        assert _resolved(override).launches[0].entry == "gemm"
        return
    with pytest.raises(ManifestError, match=message):
        _resolved(override)


@pytest.mark.parametrize(
    "override, message",
    [
        ({"launches": [{"entry": "gemm", "block": [2048]}]}, "2048 threads per block"),
        ({"launches": [{"entry": "gemm", "block": [32, 32, 2]}]}, "2048 threads per block"),
        ({"launches": [{"entry": "gemm", "block": [1, 1, 128]}]}, r"block\[2\]: 128"),
        ({"launches": [{"entry": "gemm", "block": [0]}]}, "not positive"),
        ({"launches": [{"entry": "gemm", "grid": ["-M"]}]}, "not positive"),
        ({"launches": [{"entry": "gemm", "grid": ["M / 3"]}]}, "not a whole number"),
        ({"launches": [{"entry": "gemm", "grid": [1, 65536]}]}, r"grid\[1\]: 65536"),
        ({"launches": [{"entry": "gemm", "grid": ["2**31"]}]}, r"grid\[0\]"),
        ({"launches": [{"entry": "gemm", "grid": [132], "cluster": [5]}]}, "not divisible by cluster"),
        ({"launches": [{"entry": "gemm", "grid": [64], "cluster": [32]}]}, "32 blocks per cluster"),
        ({"launches": [{"entry": "gemm", "shared_bytes": 232449}]}, "shared_bytes: 232449"),
        ({"launches": [{"entry": "gemm", "shared_bytes": -1}]}, "shared_bytes: -1"),
        ({"launches": [{"entry": "gemm", "args": ["i32:M*N*K"]}]}, "does not fit in i32"),
        ({"launches": [{"entry": "gemm", "args": ["u32:-1"]}]}, "does not fit in u32"),
        ({"scratch": {"w": {"dtype": "f64", "shape": ["M", "N", 128]}}}, "32 GiB"),
        ({"scratch": {"w": {"dtype": "f32", "shape": [0]}}}, "not positive"),
        ({"tensor_maps": {"t": {"tensor": "A", "box": [64, 64], "view": ["M", 128]}}}, "elements"),
        ({"tensor_maps": {"t": {"tensor": "A", "box": [64]}}}, "1 values for a rank-2"),
        ({"tensor_maps": {"t": {"tensor": "A", "box": [512, 64]}}}, "1 to 256"),
        ({"tensor_maps": {"t": {"tensor": "A", "box": [64, 4]}}}, "8 bytes"),
        ({"tensor_maps": {"t": {"tensor": "A", "box": [64, 128], "swizzle": "128B"}}}, "256 bytes, more than"),
        ({"tensor_maps": {"t": {"tensor": "A", "box": [64, 32], "swizzle": "32B"}}}, "64 bytes, more than"),
        ({"tensor_maps": {"t": {"tensor": "A", "box": [64, 64], "element_strides": [1, 9]}}}, "1 to 8"),
        ({"tensor_maps": {"t": {"tensor": "A", "box": [8, 8], "view": ["M*K // 4", 4]}}}, "multiple of 16"),
    ],
)
def test_absurd_launches_are_launch_config(override, message):
    with pytest.raises(LaunchConfigError, match=message) as info:
        _resolved(override)
    assert info.value.category == "launch_config"


def test_valid_edges_are_accepted():
    r = _resolved({
        "launches": [{"entry": "gemm", "grid": [132, 2], "block": [1024], "cluster": [2, 2],
                      "shared_bytes": 232448, "args": ["A", "M", "u32:2**32-1", "i64:M*N*K", "f32:0.5"]}],
        "tensor_maps": {"t": {"tensor": "A", "view": ["M*K // 64", 64], "box": [256, 64], "swizzle": "128B",
                              "element_strides": [1, 1], "oob_fill": "nan", "l2_promotion": "none"},
                        "s": {"tensor": "w", "box": [16]}},
        "scratch": {"w": {"dtype": "u8", "shape": [64], "init": "poison"}},
    })
    args = r.launches[0].args
    assert [(a.kind, a.dtype, a.value) for a in args[1:]] == [
        ("scalar", "i32", 8192), ("scalar", "u32", 2**32 - 1), ("scalar", "i64", 8192 * 7168 * 5120), ("scalar", "f32", 0.5)]
    assert r.tensor_maps["t"].shape == (8192 * 5120 // 64, 64)
    assert r.to_dict()["launches"][0]["cluster"] == (2, 2, 1)


def test_manifest_round_trips_through_json():
    m = parse_manifest(json.dumps({"launches": [{"entry": "k", "grid": ["N // 2"], "args": ["A", "tmap:t"]}],
                                   "tensor_maps": {"t": {"tensor": "A", "box": [16]}}}))
    assert parse_manifest(m.to_json()) == m


KERNEL = r"""
#include <cuda.h>
extern "C" __global__ void k(const __grid_constant__ CUtensorMap tm, const float* __restrict__ x,
                             float* y, int n, unsigned u, long long l, float s) {
    if (threadIdx.x < n) y[threadIdx.x] = x[0] * s + u + l + (float)(size_t)&tm;
}
extern "C" __global__ void empty() {}
"""


@pytest.fixture(scope="module")
def nvcc_ptx(tmp_path_factory):
    from ptxbench.engine.toolchain import ToolchainError, find_tool, tool_env

    try:
        nvcc = find_tool("nvcc")
    except ToolchainError as exc:
        pytest.skip(str(exc))
    d = tmp_path_factory.mktemp("nvcc")
    (d / "k.cu").write_text(KERNEL)
    subprocess.run([str(nvcc), "-gencode=arch=compute_90a,code=sm_90a", "-ptx", "k.cu", "-o", "k.ptx"],
                   cwd=d, env=tool_env(d), check=True, capture_output=True, timeout=120)
    return (d / "k.ptx").read_text()


def test_parse_entry_params_on_nvcc_output(nvcc_ptx):
    params = parse_entry_params(nvcc_ptx)
    assert params["empty"] == []
    assert [(p.type, p.size) for p in params["k"]] == [
        ("b8", 128), ("u64", 8), ("u64", 8), ("u32", 4), ("u32", 4), ("u64", 8), ("f32", 4)]
    assert params["k"][0].align >= 64


def test_param_problems_against_nvcc_output(nvcc_ptx):
    task = get_task("vector_add_smoke")
    good = {"launches": [{"entry": "k", "args": ["tmap:t", "X", "Z", "i32:N", "u32:1", "i64:2", "f32:0.5"]},
                         {"entry": "empty", "grid": [1], "block": [1], "args": []}],
            "tensor_maps": {"t": {"tensor": "X", "box": [256]}}}
    assert param_problems(_resolved(good, task), nvcc_ptx) == []
    kinds = ptx_param_kinds(_resolved(good, task))
    assert [k.size for k in kinds[0]] == [128, 8, 8, 4, 4, 8, 4] and kinds[1] == []
    swapped = {"launches": [{"entry": "k", "args": ["tmap:t", "X", "Z", "f32:N", "u32:1", "i64:2", "f32:0.5"]}],
               "tensor_maps": good["tensor_maps"]}
    (problem,) = param_problems(_resolved(swapped, task), nvcc_ptx)
    assert problem[0] == "param_mismatch" and "argument 3 'f32:N'" in problem[1]
    short = {"launches": [{"entry": "k", "args": ["X", "Z"]}]}
    assert param_problems(_resolved(short, task), nvcc_ptx)[0][0] == "param_mismatch"
    missing = {"launches": [{"entry": "vector_add"}]}
    assert param_problems(_resolved(missing, task), nvcc_ptx) == [
        ("entry_missing", "no .entry 'vector_add' in the module (entries: k, empty)")]


def test_parse_entry_params_handwritten_forms():
    ptx = """
    // .entry commented_out(.param .u32 x)
    .visible .entry a(
        .param .u64 .ptr .global .align 16 a_p0,   /* pointer with pointee alignment */
        .param .align 64 .b8 a_tm[128],
        .param .s32 a_n
    )
    .maxntid 128, 1, 1
    { ret; }
    .entry b { ret; }
    .entry c(.param .weird x) { ret; }
    """
    params = parse_entry_params(ptx)
    assert set(params) == {"a", "b", "c"}
    assert params["a"] == [("u64", 8, 8), ("b8", 128, 64), ("s32", 4, 4)]
    assert params["b"] == [] and params["c"] == [("?", 0, 0)]
