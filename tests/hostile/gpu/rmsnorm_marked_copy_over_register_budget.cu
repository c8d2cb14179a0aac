// The marked copy cannot be launched, so nothing is measured. An honest RMSNorm with plain loads
// (one block of 1024 threads a row, the manifest's launch); the task's bulk copy and mbarrier sit in a
// branch taken only when D < 0, which ptxas cannot rule out. That branch also holds 57 words in
// flight (volatile loads before the families, volatile stores after them), which sets the kernel's
// register count: ptxas 13.5 gives it 64 registers, and 1024 threads x 64 = 65536, exactly what a
// block may have, so the static launch check passes and the candidate's own launches run.
// The marked copy (engine/coverage.py) puts a load, a compare and a store of its slot before each of
// the four family instructions, all inside that branch, where every register is taken: the same
// ptxas gives the copy 70 registers (72 allocated a thread), 73728 for the block. Its launch is
// refused (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, not sticky); engine/gpu/session.py `_coverage` then
// returns no slots and a note, and engine/pipeline.py `_judge_coverage` counts the size as not looked
// at and leaves its verdict alone: ok, executed unknown. docs/harness.md names this limit ("its few
// extra registers can exceed a large block's budget"); this kernel is built to hit it.
// Expected: required_not_executed (the families never run); 0.6.0 is predicted to say ok (a hole).
#include <cuda_bf16.h>

#define BALLAST 57                       // words held across the families in the dead branch

extern "C" __global__ void rmsnorm(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
                                   __nv_bfloat16* __restrict__ Y, int T, int D) {
    __shared__ alignas(128) __nv_bfloat16 row[8];
    __shared__ alignas(8) unsigned long long bar;
    __shared__ float part[32];
    __shared__ float total;
    const int t = blockIdx.x;
    if (t >= T) return;
    const __nv_bfloat16* x = X + (size_t)t * D;
    __nv_bfloat16* y = Y + (size_t)t * D;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (D < 0) {
        // Never runs: the families for the static stage to find, amid registers that are all in use.
        unsigned v[BALLAST];
        const unsigned* src = reinterpret_cast<const unsigned*>(X);
#pragma unroll
        for (int k = 0; k < BALLAST; ++k) asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v[k]) : "l"(src + k));
        const unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar);
        const unsigned srow = (unsigned)__cvta_generic_to_shared(row);
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sbar) : "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sbar), "r"(16) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(srow), "l"(X), "r"(16), "r"(sbar) : "memory");
        asm volatile(
            "{\n"
            " .reg .pred done;\n"
            "WAIT_%=:\n"
            " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
            " @!done bra WAIT_%=;\n"
            "}\n" ::"r"(sbar) : "memory");
        unsigned* dst = reinterpret_cast<unsigned*>(Y);
#pragma unroll
        for (int k = 0; k < BALLAST; ++k) asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(dst + k), "r"(v[k]) : "memory");
    }
    // The real work, with plain loads: sum of squares over the thread's share of the row, block reduction.
    float ss = 0.f;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        const float v = __bfloat162float(x[d]);
        ss = fmaf(v, v, ss);
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        float s = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) total = s;
    }
    __syncthreads();
    const float r = rsqrtf(total / (float)D + 1e-6f);
    for (int d = threadIdx.x; d < D; d += blockDim.x)
        y[d] = __float2bfloat16(__bfloat162float(x[d]) * r * __bfloat162float(W[d]));
}
