"""A CUDA file with its own host wrapper split into device code and the launches the wrapper makes
(models/host_wrapper.py): read exactly where the wrapper states them, refused with the reason where not."""

from __future__ import annotations

import time

import pytest

from ptxbench.models.host_wrapper import Mismatch, split_wrapper
from ptxbench.tasks.spec import get_task

GEMM = get_task("gemm_bf16_sm90a")
SOFTMAX = get_task("softmax_bf16_sm90a")
ATTN = get_task("attn_fwd_sm90a")

HEAD = """#include <cuda_bf16.h>
#include <tvm/ffi/tvm_ffi.h>
using bf16 = __nv_bfloat16;
#define THREADS 128
namespace cfg { constexpr int BM = 128; static constexpr int BN = 64; }
__global__ void k(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {}
"""


def _wrapped(body: str, head: str = HEAD) -> str:
    return (head + "void run(tvm::ffi::TensorView A, tvm::ffi::TensorView B, tvm::ffi::TensorView C) {\n"
            + body + "\n}\nTVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);\n")


def _run(body: str, head: str = HEAD, task=GEMM):
    return split_wrapper(_wrapped(body, head), task)


def test_a_plain_launch_is_read_over_the_tasks_sizes() -> None:
    body = """
      int M = A.size(0), K = A.size(1);
      const int64_t N = B.size(0);
      dim3 grid;                       // set member by member
      grid.x = (N + cfg::BN - 1) / cfg::BN;
      grid.y = M / cfg::BM;
      size_t smem = 2 * (cfg::BM + cfg::BN) * 64 * sizeof(bf16) + (1 << 10);
      k<<<grid, THREADS, smem, 0>>>(static_cast<const bf16*>(A.data_ptr()), (const bf16*)B.data_ptr(),
                                    reinterpret_cast<bf16*>(C.data_ptr()), M, (int)N, K);"""
    split = _run(body)
    assert split.why_not is None, split.why_not
    assert split.manifest == {"launches": [{
        "entry": "k", "grid": ["(((N + 64) - 1) // 64)", "(M // 128)", 1], "block": [128],
        "shared_bytes": 50176, "args": ["A", "B", "C", "i32:M", "i32:N", "i32:K"]}]}
    assert 'extern "C" __global__ void k(' in split.code
    assert "tvm" not in split.code and "TVM_FFI" not in split.code and "void run(" not in split.code
    assert split.code.count("\n") == _wrapped(body).count("\n")      # removed lines keep the line numbers


def test_helpers_persistent_grids_and_several_launches() -> None:
    head = HEAD + "__global__ void k2(bf16* C, int n) {}\n"
    split = split_wrapper(head + """
static void launch(const bf16* a, const bf16* b, bf16* c, int M, int N, int K, cudaStream_t s) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  k<<<std::min(sms, ceil_div(M, 128) * ceil_div(N, 64)), dim3(THREADS, 1, 1), 0, s>>>(a, b, c, M, N, K);
}
void run(tvm::ffi::TensorView A, tvm::ffi::TensorView B, tvm::ffi::TensorView C) {
  auto* c = static_cast<bf16*>(C.data_ptr());
  launch(static_cast<const bf16*>(A.data_ptr()), static_cast<const bf16*>(B.data_ptr()), c,
         A.size(0), B.size(0), A.size(1), nullptr);
  k2<<<{(unsigned)(C.numel() / 256)}, 256>>>(c, C.numel());
}""", GEMM)
    assert split.why_not is None, split.why_not
    first, second = split.manifest["launches"]
    assert first["grid"] == ["min(num_sms, (ceil_div(M, 128) * ceil_div(N, 64)))"] and first["block"] == [128, 1, 1]
    assert second == {"entry": "k2", "grid": ["((M * N) // 256)"], "block": [256], "args": ["C", "i32:(M * N)"]}


@pytest.mark.parametrize("body, words", [
    ("for (int i = 0; i < 2; ++i) k<<<1, 1>>>(nullptr, nullptr, nullptr, 1, 1, 1);", "inside a branch or a loop"),
    ("int g = 1; if (A.size(0) > 4096) g = 2;\n"
     "k<<<g, 1>>>((bf16*)A.data_ptr(), (bf16*)B.data_ptr(), (bf16*)C.data_ptr(), 1, 1, 1);", "'g' is changed inside"),
    ("cudaLaunchKernelEx(&cfg, k, 1);", "through cudaLaunchKernelEx"),
    ("cudaMemsetAsync(C.data_ptr(), 0, 8);", "sets memory itself (cudaMemsetAsync)"),
    ("bf16* w; cudaMalloc(&w, 64);\n"
     "k<<<1, 1>>>(w, (bf16*)B.data_ptr(), (bf16*)C.data_ptr(), 1, 1, 1);", "a buffer the wrapper allocates itself"),
    ("k<<<A.size(0) > 1 ? 2 : 1, 1>>>((bf16*)A.data_ptr(), (bf16*)B.data_ptr(), (bf16*)C.data_ptr(), 1, 1, 1);",
     "a condition or a bit operation decides"),
    ("k<<<1, 1>>>((bf16*)A.data_ptr() + 8, (bf16*)B.data_ptr(), (bf16*)C.data_ptr(), 1, 1, 1);",
     "where a number is needed"),
    ("k<<<1, 1>>>((bf16*)A.data_ptr(), (bf16*)B.data_ptr(), (bf16*)C.data_ptr(), 1, 1);", "launched with 5"),
    ("k<<<get_grid(), 1>>>((bf16*)A.data_ptr(), (bf16*)B.data_ptr(), (bf16*)C.data_ptr(), 1, 1, 1);",
     "a call to get_grid()"),
    ("#if USE_BIG\nk<<<2, 1>>>(nullptr, nullptr, nullptr, 1, 1, 1);\n#endif", "preprocessor conditionals"),
    ("int x = 1;", "launches no kernel"),
])
def test_what_is_not_read_exactly_is_refused_with_the_reason(body: str, words: str) -> None:
    split = _run(body)
    assert split.manifest is None and words in (split.why_not or ""), split.why_not


def test_kernels_that_cannot_be_named_or_passed_are_refused() -> None:
    template = "template <int T>\n__global__ void kt(bf16* C) {}\n"
    split = _run("kt<128><<<1, 1>>>((bf16*)C.data_ptr());", HEAD + template)
    assert "template kernel" in split.why_not and "template <int T>\n__global__ void kt" in split.code
    tma = "#include <cuda.h>\n__global__ void km(const __grid_constant__ CUtensorMap m, bf16* C) {}\n"
    split = _run("CUtensorMap m; encode(&m);\nkm<<<1, 1>>>(m, (bf16*)C.data_ptr());", HEAD + tma)
    assert "CUtensorMap the wrapper builds on the host" in split.why_not
    split = split_wrapper(HEAD + "void run(tvm::ffi::TensorView A, float scale, tvm::ffi::TensorView B, "
                          "tvm::ffi::TensorView C) {}", GEMM)
    assert "not tensors (scale)" in split.why_not
    split = split_wrapper(HEAD + "void run(tvm::ffi::TensorView A, tvm::ffi::TensorView C) {}", GEMM)
    assert "takes 2 tensor(s); gemm_bf16_sm90a has 2 input(s) and 1 output(s)" in split.why_not
    assert "no host function go()" in split_wrapper(HEAD, GEMM, function="go").why_not
    broken = split_wrapper(HEAD + "void run(tvm::ffi::TensorView A) { if (x) {", GEMM)
    assert broken.host_only and "unclosed" in broken.host_only


def test_device_code_keeps_what_runs_on_the_device_and_names_every_kernel() -> None:
    code = """#include <torch/extension.h>
#include "local.cuh"
#define CHECK(x) TORCH_CHECK(x.is_cuda(), "needs CUDA {")
namespace { __device__ float twice(float x) { return 2 * x; } }
namespace ns {
static __global__ void scale(float* y) { y[0] = twice(y[0]); }
extern "C" __global__ void already(float* y) {}
}
extern "C" { __global__ void inside(float* y) {} }
constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }
__host__ __device__ inline int both(int a) { return a; }
template <typename T> __global__ void templ(T* y) {}
inline int host_only() { return 1; }
torch::Tensor helper(torch::Tensor x) { return x; }
"""
    split = split_wrapper(code, SOFTMAX, function="none")
    out = split.code
    assert "torch/extension.h" not in out and '#include "local.cuh"' in out
    assert 'namespace ns {\nextern "C" __global__ void scale(' in out and "static" not in out
    assert out.count('extern "C"') == 3 and 'extern "C" __global__ void already' in out
    assert "__device__ float twice" in out and "constexpr int cdiv" in out and "__host__ __device__ inline int both" in out
    assert "template <typename T> __global__ void templ" in out
    assert "host_only" not in out and "helper" not in out
    assert split.kernels == ("already", "inside", "scale", "templ")
    assert split.host_only is None


def test_a_pytorch_extension_returns_its_output() -> None:
    code = """#include <torch/extension.h>
#include <cuda_bf16.h>
__global__ void sm(const __nv_bfloat16* x, __nv_bfloat16* y, int rows, int cols) {}
torch::Tensor softmax(torch::Tensor x) {
    auto y = torch::zeros_like(x);
    sm<<<x.size(0), 256, 256 * sizeof(float)>>>(
        reinterpret_cast<const __nv_bfloat16*>(x.data_ptr<at::BFloat16>()),
        reinterpret_cast<__nv_bfloat16*>(y.data_ptr<at::BFloat16>()), x.size(0), x.size(1));
    return y;
}
"""
    split = split_wrapper(code, SOFTMAX, function="softmax", returns_output=True)
    assert split.manifest == {"launches": [{"entry": "sm", "grid": ["T"], "block": [256], "shared_bytes": 1024,
                                            "args": ["X", "Y", "i32:T", "i32:D"]}]}
    assert "torch::zeros_like before the launch" in split.notes[0]
    scratch = code.replace("return y;", "auto tmp = torch::empty_like(x);\n    sm<<<1, 1>>>((__nv_bfloat16*)"
                           "tmp.data_ptr(), (__nv_bfloat16*)y.data_ptr(), 1, 1);\n    return y;")
    assert "'tmp' is a buffer the wrapper allocates itself" in split_wrapper(
        scratch, SOFTMAX, function="softmax", returns_output=True).why_not
    two = split_wrapper(code, ATTN, function="softmax", returns_output=True)
    assert "attn_fwd_sm90a has 3 input(s)" in two.why_not
    with pytest.raises(Mismatch, match="reads X as f32; softmax_bf16_sm90a's X is bf16"):
        split_wrapper(code.replace("const __nv_bfloat16* x", "const float* x"), SOFTMAX, function="softmax",
                      returns_output=True)


def test_device_code_that_needs_pytorch_cannot_stand_alone() -> None:
    code = "#include <torch/extension.h>\n__global__ void k(at::Half* y) {}\n"
    assert "at:: (line 2)" in split_wrapper(code, SOFTMAX).host_only


def test_hostile_text_is_read_in_bounded_time() -> None:
    deep = "void run(tvm::ffi::TensorView A, tvm::ffi::TensorView B, tvm::ffi::TensorView C) { int x = " + \
        "(" * 200_000 + "1" + ")" * 200_000 + "; k<<<x, 1>>>(nullptr, nullptr, nullptr, 1, 1, 1); }"
    many = "void run(tvm::ffi::TensorView A, tvm::ffi::TensorView B, tvm::ffi::TensorView C) {" + "int x = 1;" * 100_000 + "}"
    heads = "__global__ void k" + "()" * 300_000 + "{}"
    for code, words in ((HEAD + deep, "nested too deeply"), (HEAD + many, "more than 2000 statements"),
                        (heads, None)):
        start = time.monotonic()
        split = split_wrapper(code, GEMM)
        assert time.monotonic() - start < 5, words
        assert words is None or words in split.why_not, split.why_not


TMA_HEAD = """#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <tvm/ffi/tvm_ffi.h>
__global__ void fwd(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk, float* lse,
                    __nv_bfloat16* o, float scale, int S) {}
"""
TMA_RUN = """
void run(tvm::ffi::TensorView Q, tvm::ffi::TensorView K, tvm::ffi::TensorView V, tvm::ffi::TensorView O,
         tvm::ffi::TensorView LSE) {
  const int B = Q.size(0), H = Q.size(1), S = Q.size(2), D = Q.size(3);
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  cudaDriverEntryPointQueryResult q;
  cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", (void**)&encode, cudaEnableDefault, &q);
  CUtensorMap tq, tk;
  cuuint64_t dims[2] = {(cuuint64_t)D, (cuuint64_t)B * H * S};
  cuuint64_t strides[1] = {D * sizeof(__nv_bfloat16)};
  cuuint32_t box[2] = {64, 128};
  cuuint32_t one[2] = {1, 1};
  encode(&tq, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, Q.data_ptr(), dims, strides, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
         CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  make_map(&tk, K.data_ptr(), B * H * S, D, CU_TENSOR_MAP_SWIZZLE_64B);
  fwd<<<dim3(S / 128, H, B), 384, 200000>>>(tq, tk, (float*)LSE.data_ptr(), (__nv_bfloat16*)O.data_ptr(),
                                          1.0f / sqrtf((float)D), S);
}
"""
MAKE_MAP = """
static void make_map(CUtensorMap* map, void* base, uint64_t rows, uint64_t cols, CUtensorMapSwizzle swizzle) {
  cuuint64_t dims[2] = {cols, rows};
  cuuint64_t strides[1] = {cols * 2};
  cuuint32_t box[2] = {64, 128};
  cuuint32_t one[2] = {1, 1};
  cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box, one,
                         CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}
"""


def test_tensor_maps_the_wrapper_encodes_are_read_into_the_manifest() -> None:
    split = split_wrapper(TMA_HEAD + MAKE_MAP + TMA_RUN, ATTN)
    assert split.why_not is None, split.why_not
    assert split.manifest == {
        "launches": [{"entry": "fwd", "grid": ["(S // 128)", "H", "B"], "block": [384], "shared_bytes": 200000,
                      "args": ["tmap:tq", "tmap:tk", "LSE", "O", "f32:(1.0 / sqrt(D))", "i32:S"]}],
        "tensor_maps": {
            "tq": {"tensor": "Q", "box": [128, 64], "view": ["((B * H) * S)", "D"], "swizzle": "128B",
                   "l2_promotion": "128B"},
            "tk": {"tensor": "K", "box": [128, 64], "view": ["((B * H) * S)", "D"], "swizzle": "64B"}}}
    assert "make_map" not in split.code and "encode" not in split.code


@pytest.mark.parametrize("old, new, words", [
    ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, Q", "CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, Q", None),
    ("CU_TENSOR_MAP_SWIZZLE_128B,", "CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B,", "swizzle the importer does not know"),
    ("Q.data_ptr(), dims", "scratch, dims", "'scratch' is not known"),
    ("encode(&tq,", "encode(tq_ptr,", "into 'tq_ptr', not a local variable"),
    ("cuuint32_t box[2] = {64, 128};", "cuuint32_t box[2] = {64, rows_per_block()};", "a call to rows_per_block()"),
])
def test_a_tensor_map_not_read_exactly_is_refused(old: str, new: str, words: str | None) -> None:
    code = TMA_HEAD + MAKE_MAP + TMA_RUN.replace(old, new, 1)
    if words is None:
        with pytest.raises(Mismatch, match="reads Q as FLOAT32; attn_fwd_sm90a's Q is bf16"):
            split_wrapper(code, ATTN)
        return
    split = split_wrapper(code, ATTN)
    assert split.manifest is None and words in split.why_not, split.why_not
