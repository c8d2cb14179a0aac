// The task's families present in the code and never run. rmsnorm_control with one change: the bulk
// copy and its mbarrier sit in a branch taken only when D < 0, which ptxas cannot rule out (D is a
// parameter), so UBLKCP and SYNCS are in the SASS the static stage inspects; every real row is read
// with ordinary loads. The output is right at every size. The static stage asks only that a
// required family be in the code the launches can reach; until the marked copy (engine/coverage.py)
// only the `executed` option (Nsight Compute) measured whether it runs, and a default judgement said ok.
// Expected: required_not_executed, from the default judgement (the marked copy leaves no mark).
#include <cuda_bf16.h>

#define MAXD 16384                       // widest row held in shared memory (32 KiB of bf16)

extern "C" __global__ void __launch_bounds__(256) rmsnorm(const __nv_bfloat16* __restrict__ X,
                                                          const __nv_bfloat16* __restrict__ W,
                                                          __nv_bfloat16* __restrict__ Y, int T, int D) {
    __shared__ alignas(128) __nv_bfloat16 row[MAXD];
    __shared__ alignas(8) unsigned long long bar;
    __shared__ float part[32];
    __shared__ float total;
    const int t = blockIdx.x;
    if (t >= T || D > MAXD) return;
    const __nv_bfloat16* x = X + (size_t)t * D;
    __nv_bfloat16* y = Y + (size_t)t * D;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // The row into shared memory with the bulk-copy engine, completion on an mbarrier (D % 8 == 0:
    // the row is a whole number of 16-byte chunks, and 16-byte aligned).
    if (D < 0) {
        // Never runs: the families the task asks for, for the static stage to find.
        const unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar);
        const unsigned srow = (unsigned)__cvta_generic_to_shared(row);
        const unsigned bytes = 2u * (unsigned)(-D);
        if (threadIdx.x == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sbar) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sbar), "r"(bytes) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(srow), "l"(x), "r"(bytes), "r"(sbar) : "memory");
        }
        asm volatile(
            "{\n"
            " .reg .pred done;\n"
            "WAIT_%=:\n"
            " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
            " @!done bra WAIT_%=;\n"
            "}\n" ::"r"(sbar) : "memory");
    } else {
        for (int d = threadIdx.x; d < D; d += blockDim.x) row[d] = x[d];
    }
    __syncthreads();
    float r;
    float ss = 0.f;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        const float v = __bfloat162float(row[d]);
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
    r = rsqrtf(total / (float)D + 1e-6f);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float v = __bfloat162float(row[d]) * r * __bfloat162float(W[d]);
        y[d] = __float2bfloat16(v);
    }
}
