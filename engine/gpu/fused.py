"""One-pass GPU reductions for the checks every verified launch pays for: the whole verification summary
(guards, inputs, outputs) and the fingerprint of the harness's own copies.

engine/gpu/verify.py and engine/gpu/datacache.py say what these compute, in PyTorch, for any device;
on CUDA, for the dtypes below, the same numbers come from these kernels instead. The PyTorch form
makes a dozen full-size temporaries per output and a hundred small launches per summary (a GEMM's:
8 ms, most of a checked timing round); here a guard is one block, an input one pass, an output three
passes and one block that writes its sixteen numbers, nothing full-size is materialised, and the
summary is one float64 tensor laid out as verify.summarize's. The arithmetic is the PyTorch form's,
in the same precision (float for 2-byte outputs, double otherwise) with no fused multiply-adds, so
counts and first indices agree exactly; sums are accumulated in double. tests/gpu/test_fused_checks.py
holds the two forms to each other on crafted buffers (poison, NaN, Inf, references that are not
finite, elements either side of the bound, damaged guards, changed inputs).

Runs inside the worker process only (imports torch and cupy).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from functools import cache
from typing import Any

import torch

from ptxbench.engine.gpu.buffers import GUARD_BYTES, Arena, bits_view, canary_word, poison_value
from ptxbench.tasks.spec import ElementBound

# PTXBENCH_FUSED_CHECKS=0 keeps every check in its PyTorch form (the tests compare the two).
ENABLED = os.environ.get("PTXBENCH_FUSED_CHECKS", "1") != "0"
FUSED_OUTPUTS = {torch.bfloat16: "short", torch.float32: "int", torch.float64: "long long"}   # sign-extended, as bits_view
FUSED_REFERENCES = {torch.float32: "float", torch.float64: "double"}
_BITS_TYPES = {1: "unsigned char", 2: "short", 4: "int", 8: "long long"}
THREADS = 256
BITSUM_MASK = (1 << 52) - 1       # the output's bit sum, kept exact in a float64 (MASK52 below)
CANARY_WORD = canary_word()

OUTPUT_SLOTS = 12                   # an output's workspace: ten u64 counts and keys, then two f64 sums
INPUT_SLOTS = 2

SOURCE = r"""
// Kernels that are not templates are extern "C": CuPy finds them by their plain names.
// Workspace conventions: zero-initialised; a first index i is kept as n - i under a maximum (0: none),
// so one memset prepares every slot.
typedef unsigned long long u64;
#define MASK52 ((1ll << 52) - 1)

template <typename T> __device__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
__device__ u64 warp_max(u64 v) {
    for (int o = 16; o > 0; o >>= 1) { u64 w = __shfl_down_sync(0xffffffffu, v, o); v = w > v ? w : v; }
    return v;
}
__device__ double first_of(u64 kept, long long n) { return kept ? (double)(n - (long long)kept) : 0.0; }
__device__ double inf64() { return __longlong_as_double(0x7ff0000000000000ll); }

// The output's element in the work precision: bf16 in float; f32 and f64 in double.
__device__ float  as_work(short b, float)     { return __uint_as_float(((unsigned)(unsigned short)b) << 16); }
__device__ double as_work(int b, double)       { return (double)__int_as_float(b); }
__device__ double as_work(long long b, double) { return __longlong_as_double(b); }

// A non-negative value as an integer of the same order, NaN above +Inf (torch.nan_to_num(x, nan=inf) then
// argmax ranks them so: its +Inf becomes the largest finite value).
__device__ u64 order_key(double v) { return isnan(v) ? 0x7ff0000000000001ull : (u64)__double_as_longlong(v); }

#define GRID_STRIDE(i, n) \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

__device__ __forceinline__ u64 fmix64(u64 k) {
    k ^= k >> 33; k *= 0xff51afd7ed558ccdull; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ull; return k ^ (k >> 33);
}

template <typename B> __global__ void fingerprint(const B* x, long long n, u64 key, u64* out) {
    u64 h = 0;
    GRID_STRIDE(i, n) h += fmix64((u64)(long long)x[i] ^ ((u64)i * 0x9e3779b97f4a7c15ull) ^ key);
    h = warp_sum(h);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, h);
}

// Both guards of one buffer, in one block: bytes that differ from the pattern, the last such byte of the
// guard before the data (-1: none) and the first of the guard after it (guard: none).
extern "C" __global__ void canaries(const unsigned char* raw, long long data_bytes, long long guard, long long word_,
                         double* out) {
    __shared__ long long s[4][256];
    const unsigned int word = (unsigned int)word_;
    long long before = 0, last = -1, after = 0, first = guard;
    for (long long j = threadIdx.x; j < guard; j += blockDim.x) {
        unsigned char want = (unsigned char)(word >> (8 * (j & 3)));
        if (raw[j] != want) { before++; if (j > last) last = j; }
        if (raw[guard + data_bytes + j] != want) { after++; if (j < first) first = j; }
    }
    s[0][threadIdx.x] = before; s[1][threadIdx.x] = last; s[2][threadIdx.x] = after; s[3][threadIdx.x] = first;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) {
            int t = threadIdx.x + k;
            s[0][threadIdx.x] += s[0][t];
            s[1][threadIdx.x] = s[1][t] > s[1][threadIdx.x] ? s[1][t] : s[1][threadIdx.x];
            s[2][threadIdx.x] += s[2][t];
            s[3][threadIdx.x] = s[3][t] < s[3][threadIdx.x] ? s[3][t] : s[3][threadIdx.x];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) { out[0] = s[0][0]; out[1] = s[1][0]; out[2] = s[2][0]; out[3] = s[3][0]; }
}

// An input against its pristine copy: elements whose bits differ, and the first.
template <typename B> __global__ void differ(const B* a, const B* b, long long n, u64* u) {
    u64 count = 0, first = 0;
    GRID_STRIDE(i, n) if (a[i] != b[i]) { count++; if (!first) first = n - i; }
    count = warp_sum(count); first = warp_max(first);
    if ((threadIdx.x & 31) == 0 && count) { atomicAdd(u, count); atomicMax(u + 1, first); }
}
extern "C" __global__ void differ_values(const u64* u, long long n, double* out) {
    out[0] = (double)u[0]; out[1] = first_of(u[1], n);
}

// Pass 1 over an output: the sum of squares of the finite reference (its rms and its norm).
template <typename W, typename R> __global__ void ref_squares(const R* ref, long long n, u64* u) {
    double s = 0.0;
    GRID_STRIDE(i, n) { W r = (W)ref[i]; if (isfinite(r)) s += (double)r * (double)r; }
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) atomicAdd((double*)(u + 11), s);
}

template <typename W> __device__ W difference(W o, W r) {
    if (isfinite(r)) return fabs(o - r);
    bool same = (o == r) || (isnan(o) && isnan(r));
    return same ? (W)0 : (W)inf64();
}

// Pass 2: counts, first indices, sums and maxima (slots: 0 unwritten, 1 its first, 2 non-finite, 3 its first,
// 4 outside the bound, 5 its first, 6 largest difference, 7 largest ratio to the bound, 8 bit sum, 9 the
// first index of the largest difference (pass 3), 10 Σ difference², 11 Σ reference²).
template <typename B, typename W, typename R>
__global__ void output_stats(const B* out, const R* ref, long long n, long long poison, double atol, double rtol,
                             long long bounded, u64* u) {
    const double rms = sqrt(*(const double*)(u + 11) / (double)n);
    const W atol_rms = (W)(atol * rms);
    const W rtol_w = (W)rtol;
    const W tiny = sizeof(W) == 4 ? (W)1.17549435e-38f : (W)2.2250738585072014e-308;
    u64 unwritten = 0, nonfinite = 0, violations = 0, bitsum = 0, maxdiff = 0, maxratio = 0;
    u64 first_unwritten = 0, first_nonfinite = 0, first_violation = 0;
    double diff2 = 0.0;
    GRID_STRIDE(i, n) {
        B b = out[i];
        bitsum += (u64)(long long)b;
        if ((long long)b == poison) { unwritten++; if (!first_unwritten) first_unwritten = n - i; }
        W o = as_work(b, (W)0);
        W r = (W)ref[i];
        if (!isfinite(o) && isfinite(r)) { nonfinite++; if (!first_nonfinite) first_nonfinite = n - i; }
        W diff = difference(o, r);
        diff2 += (double)diff * (double)diff;
        u64 k = order_key((double)diff);
        if (k > maxdiff) maxdiff = k;
        if (bounded) {
            W r_fin = isfinite(r) ? r : (W)0;
            W allowed = atol_rms + rtol_w * fabs(r_fin);
            if (!(diff <= allowed)) { violations++; if (!first_violation) first_violation = n - i; }
            W ratio = diff / (allowed > tiny ? allowed : tiny);
            u64 q = order_key((double)ratio);
            if (q > maxratio) maxratio = q;
        }
    }
    diff2 = warp_sum(diff2);
    unwritten = warp_sum(unwritten); nonfinite = warp_sum(nonfinite); violations = warp_sum(violations);
    bitsum = warp_sum(bitsum);
    first_unwritten = warp_max(first_unwritten); first_nonfinite = warp_max(first_nonfinite);
    first_violation = warp_max(first_violation);
    maxdiff = warp_max(maxdiff); maxratio = warp_max(maxratio);
    if ((threadIdx.x & 31) == 0) {
        atomicAdd((double*)(u + 10), diff2);
        if (unwritten) { atomicAdd(u + 0, unwritten); atomicMax(u + 1, first_unwritten); }
        if (nonfinite) { atomicAdd(u + 2, nonfinite); atomicMax(u + 3, first_nonfinite); }
        if (violations) { atomicAdd(u + 4, violations); atomicMax(u + 5, first_violation); }
        atomicMax(u + 6, maxdiff);
        atomicMax(u + 7, maxratio);
        atomicAdd(u + 8, bitsum);
    }
}

// Pass 3: the first index of the largest difference.
template <typename B, typename W, typename R> __global__ void worst_index(const B* out, const R* ref, long long n, u64* u) {
    const u64 target = u[6];
    u64 first = 0;
    GRID_STRIDE(i, n) {
        if (order_key((double)difference(as_work(out[i], (W)0), (W)ref[i])) == target) { first = n - i; break; }
    }
    first = warp_max(first);
    if ((threadIdx.x & 31) == 0 && first) atomicMax(u + 9, first);
}

// The sixteen numbers of verify._output_values, in its order.
template <typename B, typename W, typename R>
__global__ void output_values(const B* out, const R* ref, long long n, const u64* u, long long max_abs,
                              long long bounded, double* v) {
    const double diff2 = *(const double*)(u + 10), ref2 = *(const double*)(u + 11);
    const long long nonfinite_at = (long long)first_of(u[3], n), worst = (long long)first_of(u[9], n),
                    violation_at = (long long)first_of(u[5], n);
    const double num = sqrt(diff2), den = sqrt(ref2), ratio = __longlong_as_double(u[7]);
    v[0] = (double)u[0];
    v[1] = first_of(u[1], n);
    v[2] = (double)u[2];
    v[3] = (double)nonfinite_at;
    v[4] = (double)as_work(out[nonfinite_at], (W)0);
    v[5] = max_abs ? __longlong_as_double(u[6]) : (den > 0 ? num / den : num);
    v[6] = (double)worst;
    v[7] = (double)as_work(out[worst], (W)0);
    v[8] = (double)(W)ref[worst];
    v[9] = bounded ? (double)u[4] : 0.0;
    v[10] = bounded ? (double)violation_at : 0.0;
    v[11] = (double)as_work(out[violation_at], (W)0);
    v[12] = (double)(W)ref[violation_at];
    v[13] = bounded ? (isnan(ratio) ? inf64() : ratio) : 0.0;
    v[14] = sqrt(ref2 / (double)n);
    v[15] = (double)((long long)u[8] & MASK52);
}
"""


def _work(out_dtype: torch.dtype) -> str:
    return "float" if out_dtype == torch.bfloat16 else "double"


@cache
def _module() -> Any:
    import cupy

    names = [f"fingerprint<{b}>" for b in _BITS_TYPES.values()] + [f"differ<{b}>" for b in _BITS_TYPES.values()]
    for out_dtype, bits in FUSED_OUTPUTS.items():
        for ref in FUSED_REFERENCES.values():
            w = _work(out_dtype)
            names += [f"ref_squares<{w}, {ref}>"] + [f"{k}<{bits}, {w}, {ref}>" for k in
                                                      ("output_stats", "worst_index", "output_values")]
    names = list(dict.fromkeys(names))
    return cupy.RawModule(code=SOURCE, options=("--fmad=false", "-std=c++14"), name_expressions=names)


@cache
def _blocks_cap(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count * 8


class _Launcher:
    """Kernels of the module on the current stream of a device."""

    def __init__(self, device: torch.device) -> None:
        import cupy

        self.module = _module()
        self.cap = _blocks_cap(device.index or 0)
        self.stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(device).cuda_stream)

    def __call__(self, name: str, n: int | None, *args: Any) -> None:
        """`n` elements over a grid of blocks; None: one block."""
        blocks = 1 if n is None else max(1, min(math.ceil(n / THREADS), self.cap))
        self.module.get_function(name)((blocks,), (THREADS,), args, stream=self.stream)


def usable(t: torch.Tensor) -> bool:
    return t.is_cuda and t.element_size() in _BITS_TYPES


def fingerprint(bits: torch.Tensor, key: int) -> torch.Tensor:
    """Σ fmix64(bits[i] ^ i·φ ^ key) over a flat integer view, mod 2⁶⁴, as an int64 tensor of one element
    (the same number engine/gpu/datacache.py's PyTorch form gives); enqueued on the current stream."""
    import numpy as np

    out = torch.zeros(1, dtype=torch.int64, device=bits.device)
    n = bits.numel()
    if n:
        _Launcher(bits.device)(f"fingerprint<{_BITS_TYPES[bits.element_size()]}>", n, bits.data_ptr(), n,
                               np.uint64(key), out.data_ptr())
    return out[0]


def _fits(out: torch.Tensor, ref: torch.Tensor) -> bool:
    return out.is_cuda and out.dtype in FUSED_OUTPUTS and ref.dtype in FUSED_REFERENCES and out.numel() == ref.numel() \
        and out.is_contiguous() and ref.is_contiguous() and out.numel() > 0


def summary(arena: Arena, pristine: dict[str, torch.Tensor], reference: Mapping[str, torch.Tensor], metric: str,
            bounds: Mapping[str, ElementBound | None]) -> torch.Tensor | None:
    """verify.summarize's tensor, made by kernels; None where a buffer is of a kind they do not cover."""
    buffers = list(arena.buffers.values())
    inputs, outputs = arena.by_role("input"), arena.by_role("output")
    covered = (bool(buffers) and all(b.raw.is_cuda for b in buffers)
               and all(_fits(b.tensor, reference[b.name]) for b in outputs)
               and all(pristine[b.name].element_size() == b.tensor.element_size() and usable(b.tensor) for b in inputs))
    if not covered:
        return None
    device = buffers[0].raw.device
    launch = _Launcher(device)
    values = torch.empty(4 * len(buffers) + 2 * len(inputs) + 16 * len(outputs), dtype=torch.float64, device=device)
    work = torch.zeros(INPUT_SLOTS * len(inputs) + OUTPUT_SLOTS * len(outputs), dtype=torch.int64, device=device)
    at, slot = values.data_ptr(), work.data_ptr()
    for b in buffers:
        launch("canaries", None, b.raw.data_ptr(), b.nbytes, GUARD_BYTES, CANARY_WORD, at)
        at += 4 * 8
    for b in inputs:
        mine, theirs = bits_view(b.tensor), bits_view(pristine[b.name])
        n = mine.numel()
        launch(f"differ<{_BITS_TYPES[b.tensor.element_size()]}>", n, mine.data_ptr(), theirs.data_ptr(), n, slot)
        launch("differ_values", None, slot, n, at)
        at, slot = at + 2 * 8, slot + INPUT_SLOTS * 8
    for b in outputs:
        ref = reference[b.name]
        bits_t, w, r = FUSED_OUTPUTS[b.tensor.dtype], _work(b.tensor.dtype), FUSED_REFERENCES[ref.dtype]
        bound = bounds.get(b.name)
        n = b.tensor.numel()
        out_ptr, ref_ptr = b.tensor.data_ptr(), ref.data_ptr()
        launch(f"ref_squares<{w}, {r}>", n, ref_ptr, n, slot)
        launch(f"output_stats<{bits_t}, {w}, {r}>", n, out_ptr, ref_ptr, n, int(poison_value(b.dtype)),
               float(bound.atol if bound else 0.0), float(bound.rtol if bound else 0.0), int(bound is not None), slot)
        launch(f"worst_index<{bits_t}, {w}, {r}>", n, out_ptr, ref_ptr, n, slot)
        launch(f"output_values<{bits_t}, {w}, {r}>", None, out_ptr, ref_ptr, n, slot, int(metric == "max_abs"),
               int(bound is not None), at)
        at, slot = at + 16 * 8, slot + OUTPUT_SLOTS * 8
    return values
