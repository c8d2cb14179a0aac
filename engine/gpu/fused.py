"""One-pass GPU reductions for the checks every verified launch pays for: the output summary and the
fingerprint of the harness's own copies.

engine/gpu/verify.py and engine/gpu/datacache.py say what these compute, in PyTorch, for any device;
on CUDA, for the dtypes below, the same numbers come from these kernels instead. The PyTorch form
makes a dozen full-size temporaries per output (a 58 M-element GEMM output: 8 ms, most of a checked
timing round); here each output is read three times and nothing is materialised (well under 1 ms on
an H200, benchmarks/judge_cost.py). The arithmetic is the PyTorch form's, in the same precision
(float for 2-byte outputs, double otherwise) with no fused multiply-adds, so element counts and first
indices agree exactly; sums are accumulated in double (tests/gpu/test_fused_checks.py holds the two
forms to each other on crafted outputs: poison, NaN, Inf, elements on either side of the bound).

Runs inside the worker process only (imports torch and cupy).
"""

from __future__ import annotations

import math
import os
from functools import cache
from typing import Any

import torch

# PTXBENCH_FUSED_CHECKS=0 keeps every check in its PyTorch form (the tests compare the two).
ENABLED = os.environ.get("PTXBENCH_FUSED_CHECKS", "1") != "0"
FUSED_OUTPUTS = {torch.bfloat16: "short", torch.float32: "int", torch.float64: "long long"}   # sign-extended, as bits_view
FUSED_REFERENCES = {torch.float32: "float", torch.float64: "double"}
_BITS_TYPES = {1: "unsigned char", 2: "short", 4: "int", 8: "long long"}
THREADS = 256
BITSUM_MASK = (1 << 52) - 1       # the output's bit sum, kept exact in a float64 (verify.FINGERPRINT_MASK)

# u64 slots of an output's summary, then its f64 slots.
U_UNWRITTEN, U_FIRST_UNWRITTEN, U_NONFINITE, U_FIRST_NONFINITE, U_VIOLATIONS, U_FIRST_VIOLATION, U_MAXDIFF, \
    U_MAXRATIO, U_BITSUM, U_WORST = range(10)
D_DIFF2, D_REF2 = range(2)
_FIRST_SLOTS = (U_FIRST_UNWRITTEN, U_FIRST_NONFINITE, U_FIRST_VIOLATION, U_WORST)

SOURCE = r"""
typedef unsigned long long u64;

template <typename T> __device__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
__device__ u64 warp_min(u64 v) {
    for (int o = 16; o > 0; o >>= 1) { u64 w = __shfl_down_sync(0xffffffffu, v, o); v = w < v ? w : v; }
    return v;
}
__device__ u64 warp_max(u64 v) {
    for (int o = 16; o > 0; o >>= 1) { u64 w = __shfl_down_sync(0xffffffffu, v, o); v = w > v ? w : v; }
    return v;
}

// The output's element in the work precision: bf16 in float; f32 and f64 in double.
__device__ float  as_work(short b, float)          { return __uint_as_float(((unsigned)(unsigned short)b) << 16); }
__device__ double as_work(int b, double)            { return (double)__int_as_float(b); }
__device__ double as_work(long long b, double)      { return __longlong_as_double(b); }

// A non-negative value as an integer of the same order, NaN above +Inf (torch.nan_to_num(x, nan=inf) then
// argmax ranks them so: its +Inf becomes the largest finite value).
__device__ u64 order_key(double v) { return isnan(v) ? 0x7ff0000000000001ull : (u64)__double_as_longlong(v); }

template <typename B> __global__ void fingerprint(const B* x, long long n, u64* out) {
    u64 h = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        h += (u64)(long long)x[i] * ((u64)i * 2654435761ull + 1ull);
    h = warp_sum(h);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, h);
}

// Pass 1: the sum of squares of the finite reference (its rms and its norm).
template <typename W, typename R> __global__ void ref_squares(const R* ref, long long n, double* d) {
    double s = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        W r = (W)ref[i];
        if (isfinite(r)) s += (double)r * (double)r;
    }
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) atomicAdd(d + 1, s);
}

template <typename W> __device__ W difference(W o, W r) {
    if (isfinite(r)) return fabs(o - r);
    bool same = (o == r) || (isnan(o) && isnan(r));
    return same ? (W)0 : (W)__longlong_as_double(0x7ff0000000000000ll);     // +Inf (no math.h here)
}

// Pass 2: counts, first indices, sums and maxima.
template <typename B, typename W, typename R>
__global__ void output_stats(const B* out, const R* ref, long long n, long long poison, double atol, double rtol,
                             long long bounded, double* d, u64* u) {
    const double rms = sqrt(d[1] / (double)n);
    const W atol_rms = (W)(atol * rms);
    const W rtol_w = (W)rtol;
    const W tiny = sizeof(W) == 4 ? (W)1.17549435e-38f : (W)2.2250738585072014e-308;
    u64 unwritten = 0, nonfinite = 0, violations = 0, bitsum = 0, maxdiff = 0, maxratio = 0;
    u64 first_unwritten = ~0ull, first_nonfinite = ~0ull, first_violation = ~0ull;
    double diff2 = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        B b = out[i];
        bitsum += (u64)(long long)b;
        if ((long long)b == poison) { unwritten++; if ((u64)i < first_unwritten) first_unwritten = i; }
        W o = as_work(b, (W)0);
        W r = (W)ref[i];
        if (!isfinite(o) && isfinite(r)) { nonfinite++; if ((u64)i < first_nonfinite) first_nonfinite = i; }
        W diff = difference(o, r);
        diff2 += (double)diff * (double)diff;
        u64 k = order_key((double)diff);
        if (k > maxdiff) maxdiff = k;
        if (bounded) {
            W r_fin = isfinite(r) ? r : (W)0;
            W allowed = atol_rms + rtol_w * fabs(r_fin);
            if (!(diff <= allowed)) { violations++; if ((u64)i < first_violation) first_violation = i; }
            W ratio = diff / (allowed > tiny ? allowed : tiny);
            u64 q = order_key((double)ratio);
            if (q > maxratio) maxratio = q;
        }
    }
    diff2 = warp_sum(diff2);
    unwritten = warp_sum(unwritten); nonfinite = warp_sum(nonfinite); violations = warp_sum(violations);
    bitsum = warp_sum(bitsum);
    first_unwritten = warp_min(first_unwritten); first_nonfinite = warp_min(first_nonfinite);
    first_violation = warp_min(first_violation);
    maxdiff = warp_max(maxdiff); maxratio = warp_max(maxratio);
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(d, diff2);
        if (unwritten) { atomicAdd(u + 0, unwritten); atomicMin(u + 1, first_unwritten); }
        if (nonfinite) { atomicAdd(u + 2, nonfinite); atomicMin(u + 3, first_nonfinite); }
        if (violations) { atomicAdd(u + 4, violations); atomicMin(u + 5, first_violation); }
        atomicMax(u + 6, maxdiff);
        atomicMax(u + 7, maxratio);
        atomicAdd(u + 8, bitsum);
    }
}

// Pass 3: the first index of the largest difference.
template <typename B, typename W, typename R> __global__ void worst_index(const B* out, const R* ref, long long n, u64* u) {
    const u64 target = u[6];
    u64 first = ~0ull;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        if ((u64)i >= first) break;
        W diff = difference(as_work(out[i], (W)0), (W)ref[i]);
        if (order_key((double)diff) == target) first = i;
    }
    first = warp_min(first);
    if ((threadIdx.x & 31) == 0 && first != ~0ull) atomicMin(u + 9, first);
}
"""


def _work(out_dtype: torch.dtype) -> str:
    return "float" if out_dtype == torch.bfloat16 else "double"


@cache
def _module() -> Any:
    import cupy

    names = [f"fingerprint<{b}>" for b in _BITS_TYPES.values()]
    for out_dtype, bits in FUSED_OUTPUTS.items():
        for ref in FUSED_REFERENCES.values():
            w = _work(out_dtype)
            names += [f"ref_squares<{w}, {ref}>", f"output_stats<{bits}, {w}, {ref}>", f"worst_index<{bits}, {w}, {ref}>"]
    names = list(dict.fromkeys(names))
    return cupy.RawModule(code=SOURCE, options=("--fmad=false", "-std=c++14"), name_expressions=names), names


@cache
def _blocks_cap(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count * 8


def _launch(name: str, n: int, device: torch.device, *args: Any) -> None:
    import cupy

    module, _ = _module()
    fn = module.get_function(name)
    blocks = max(1, min(math.ceil(n / THREADS), _blocks_cap(device.index or 0)))
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(device).cuda_stream)
    fn((blocks,), (THREADS,), args, stream=stream)


def usable(t: torch.Tensor) -> bool:
    return t.is_cuda and t.element_size() in _BITS_TYPES


def fingerprint(bits: torch.Tensor) -> torch.Tensor:
    """Σ bits[i] · (i · 2654435761 + 1) over a flat integer view, mod 2⁶⁴, as an int64 tensor of one element
    (the same number engine/gpu/datacache.py's PyTorch form gives); enqueued on the current stream."""
    out = torch.zeros(1, dtype=torch.int64, device=bits.device)
    n = bits.numel()
    if n:
        _launch(f"fingerprint<{_BITS_TYPES[bits.element_size()]}>", n, bits.device, bits.data_ptr(), n, out.data_ptr())
    return out[0]


def can_summarize(out: torch.Tensor, ref: torch.Tensor) -> bool:
    return out.is_cuda and out.dtype in FUSED_OUTPUTS and ref.dtype in FUSED_REFERENCES and out.numel() == ref.numel() \
        and out.is_contiguous() and ref.is_contiguous() and out.numel() > 0


def output_values(out: torch.Tensor, ref: torch.Tensor, poison: int, metric: str, atol: float | None,
                  rtol: float | None) -> list[torch.Tensor]:
    """verify._output_values for one output, in three passes: the same sixteen values, in its order."""
    device = out.device
    n = out.numel()
    bits_t = FUSED_OUTPUTS[out.dtype]
    w = _work(out.dtype)
    r = FUSED_REFERENCES[ref.dtype]
    work = torch.float32 if w == "float" else torch.float64
    flat_out, flat_ref = out.reshape(-1), ref.reshape(-1)
    bits = flat_out.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[out.element_size()])
    d = torch.zeros(2, dtype=torch.float64, device=device)
    u = torch.zeros(10, dtype=torch.int64, device=device)
    for slot in _FIRST_SLOTS:                           # all ones: "none yet" for a minimum (fills: no host copy)
        u[slot] = -1
    bounded = atol is not None and rtol is not None
    _launch(f"ref_squares<{w}, {r}>", n, device, flat_ref.data_ptr(), n, d.data_ptr())
    _launch(f"output_stats<{bits_t}, {w}, {r}>", n, device, bits.data_ptr(), flat_ref.data_ptr(), n, int(poison),
            float(atol or 0.0), float(rtol or 0.0), int(bounded), d.data_ptr(), u.data_ptr())
    _launch(f"worst_index<{bits_t}, {w}, {r}>", n, device, bits.data_ptr(), flat_ref.data_ptr(), n, u.data_ptr())

    def index(slot: int) -> torch.Tensor:
        return torch.where(u[slot] < 0, 0, u[slot])     # 0 where none was found, as torch.argmax gives

    def got(i: torch.Tensor) -> torch.Tensor:
        return flat_out.index_select(0, i.reshape(1)).to(work)[0]

    def expected(i: torch.Tensor) -> torch.Tensor:
        return flat_ref.index_select(0, i.reshape(1)).to(work)[0]

    as_f64 = u.view(torch.float64)
    maxdiff = as_f64[U_MAXDIFF]
    num, denom = torch.sqrt(d[D_DIFF2]), torch.sqrt(d[D_REF2])
    value = maxdiff if metric == "max_abs" else torch.where(denom > 0, num / denom, num)
    rms = torch.sqrt(d[D_REF2] / n)
    first_nonfinite, worst, first_violation = index(U_FIRST_NONFINITE), index(U_WORST), index(U_FIRST_VIOLATION)
    zero = torch.zeros((), dtype=torch.float64, device=device)

    return [u[U_UNWRITTEN], index(U_FIRST_UNWRITTEN), u[U_NONFINITE], first_nonfinite, got(first_nonfinite), value,
            worst, got(worst), expected(worst), u[U_VIOLATIONS] if bounded else zero,
            first_violation if bounded else zero.to(torch.int64),
            got(first_violation), expected(first_violation), torch.where(torch.isnan(as_f64[U_MAXRATIO]), math.inf, as_f64[U_MAXRATIO]) if bounded else zero, rms,
            u[U_BITSUM] & BITSUM_MASK]
