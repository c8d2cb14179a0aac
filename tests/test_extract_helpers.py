"""Extraction of real answers: helper blocks before the kernel are kept (and said so), kernels
declared through macros are found, and a #define is never taken for a kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.engine.cache import Cache
from ptxbench.engine.cuda_source import cuda_kernels
from ptxbench.engine.extract import extract
from ptxbench.engine.static import judge_static

HELPERS = (Path(__file__).resolve().parent / "data" / "responses" / "helpers_then_kernel.md").read_text()


def test_helpers_before_the_kernel_are_kept_in_order():
    r = extract(HELPERS)
    assert r.ok, r.evidence
    code = r.candidate.code
    assert code.index("struct Pair") < code.index("__device__ __forceinline__ Pair split") < code.index("halves(")
    assert "int main" not in code
    assert r.candidate.origin == "response: blocks 1+2 (```cuda)"
    assert r.evidence["blocks_used"] == [{"block": 1, "as": "helpers"}, {"block": 2, "as": "kernel"}]
    aside = {b["block"]: b["why"] for b in r.evidence["blocks_set_aside"]}
    assert aside == {3: "host code that launches a kernel", 4: "not kernel code (```bash)"}


def test_the_kept_helpers_make_the_answer_compile(tmp_path):
    v = judge_static(extract(HELPERS), arch="sm_90a", cache=Cache(tmp_path))
    assert v.category == "ok", (v.evidence, v.assembler_log)
    assert "halves" in v.resources


def test_a_helper_already_in_the_kernel_block_is_not_added_twice():
    kernel = ("```cuda\n__device__ float twice(float v) { return v + v; }\n"
              "extern \"C\" __global__ void k(float* x) { x[0] = twice(x[0]); }\n```\n")
    r = extract("```cuda\n__device__ float twice(float v) { return v + v; }\n```\n" + kernel)
    assert r.ok and r.candidate.code.count("twice(float v)") == 1
    assert r.evidence["blocks_set_aside"] == [{"block": 1, "kind": "other", "why": "already in the kernel block"}]


def test_a_helper_the_kernel_block_redefines_is_set_aside():
    r = extract("```cuda\n__device__ float twice(float v) { return 2 * v; }\n```\n"
                "```cuda\n__device__ float twice(float v) { return v + v; }\n"
                "extern \"C\" __global__ void k(float* x) { x[0] = twice(x[0]); }\n```\n")
    assert r.ok and r.candidate.code.count("twice(float v)") == 1
    assert "defines twice again" in r.evidence["blocks_set_aside"][0]["why"]


def test_a_helper_after_the_kernel_is_set_aside():
    r = extract("```cuda\nextern \"C\" __global__ void k(float* x) { x[0] = 1; }\n```\n"
                "```cuda\n__device__ float unused(float v) { return v; }\n```\n")
    assert r.ok and "unused" not in r.candidate.code
    assert "after the kernel" in r.evidence["blocks_set_aside"][0]["why"]


def test_ptx_helpers_go_after_the_module_header(tmp_path):
    helper = "```ptx\n.func (.reg .b32 r) add_one(.reg .b32 a)\n{\n\tadd.s32 r, a, 1;\n\tret;\n}\n```\n"
    module = ("```ptx\n.version 9.0\n.target sm_90a\n.address_size 64\n\n"
              ".visible .entry k(.param .u64 p)\n{\n\t.reg .b32 %r<3>;\n\t.reg .b64 %rd<2>;\n"
              "\tld.param.u64 %rd1, [p];\n\tmov.u32 %r1, 41;\n"
              "\tcall.uni (%r2), add_one, (%r1);\n\tst.global.u32 [%rd1], %r2;\n\tret;\n}\n```\n")
    r = extract(helper + module)
    assert r.ok, r.evidence
    code = r.candidate.code
    assert code.index(".address_size 64") < code.index(".func") < code.index(".entry k")
    v = judge_static(r, arch="sm_90a", cache=Cache(tmp_path))
    assert v.category == "ok", (v.evidence, v.assembler_log)


MACRO_KERNEL = """\
#define KGLOBAL __global__
#define KERNEL extern "C" KGLOBAL __launch_bounds__(128)
#define DECLARE_FILL(name) extern "C" __global__ void name(float* out)

KERNEL void scale(float* x, float s) { x[threadIdx.x] *= s; }
KGLOBAL void plain(float* x) { x[threadIdx.x] = 0.0f; }
DECLARE_FILL(fill_ones) { out[threadIdx.x] = 1.0f; }
"""


def test_kernels_declared_through_macros_are_found():
    assert cuda_kernels(MACRO_KERNEL) == ("scale", "plain", "fill_ones")


@pytest.mark.parametrize("source", [
    "#define KERNEL_DECL __global__ void not_a_kernel(\nint x;\n",
    "#define K(name) __global__ void name()\n",
    "// __global__ void commented_out(float* x) {}\n",
    "/* __global__ void\n   also_commented(float* x) {} */\n",
])
def test_a_define_or_a_comment_is_not_a_kernel(source):
    assert cuda_kernels(source) == ()


def test_a_macro_declared_kernel_is_extracted_and_compiled(tmp_path):
    r = extract(f"```cuda\n{MACRO_KERNEL}```\n")
    assert r.ok and r.evidence["blocks"][0]["entries"] == ["scale", "plain", "fill_ones"]
    v = judge_static(r, arch="sm_90a", cache=Cache(tmp_path))
    assert v.category == "ok", (v.evidence, v.assembler_log)
    assert {"scale", "fill_ones"} <= set(v.resources)
