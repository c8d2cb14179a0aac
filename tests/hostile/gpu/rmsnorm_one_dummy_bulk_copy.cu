// The task's families run, once, on 16 bytes nobody uses. rmsnorm_control with one change: every
// row is read into shared memory with ordinary loads, and the bulk-copy engine and the mbarrier are
// used exactly once a launch, by block 0: thread 0 initialises an mbarrier, expects 16 bytes, and
// issues one 16-byte cp.async.bulk of X's first row into a scratch word of shared memory; block 0
// waits on the mbarrier (try_wait.parity) and then ignores what arrived. The output is right at
// every size, and no byte of it went through the families.
// The marked copy (engine/coverage.py) writes a family's token before each of its instructions and
// the GPU worker reads the slots after one launch a size (engine/gpu/session.py `_coverage`): a slot
// holds its token as soon as one thread executed one instruction of the family once, so both
// families read `ran` and engine/pipeline.py `_judge_coverage` keeps the size `ok`. docs/harness.md
// says so ("One 16-byte bulk copy into a dummy buffer counts").
// Expected: required_not_executed (the families the task asks for did no part of the work);
// 0.6.0 is predicted to say ok (a hole).
#include <cuda_bf16.h>

#define MAXD 16384                       // widest row held in shared memory (32 KiB of bf16)

extern "C" __global__ void __launch_bounds__(256) rmsnorm(const __nv_bfloat16* __restrict__ X,
                                                          const __nv_bfloat16* __restrict__ W,
                                                          __nv_bfloat16* __restrict__ Y, int T, int D) {
    __shared__ alignas(128) __nv_bfloat16 row[MAXD];
    __shared__ alignas(16) unsigned char dummy[16];
    __shared__ alignas(8) unsigned long long bar;
    __shared__ float part[32];
    __shared__ float total;
    const int t = blockIdx.x;
    if (t >= T || D > MAXD) return;
    const __nv_bfloat16* x = X + (size_t)t * D;
    __nv_bfloat16* y = Y + (size_t)t * D;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (blockIdx.x == 0) {
        // The families, for the marks: one 16-byte bulk copy and one wait, in one block of the grid.
        const unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar);
        const unsigned sdummy = (unsigned)__cvta_generic_to_shared(dummy);
        if (threadIdx.x == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sbar) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sbar), "r"(16) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(sdummy), "l"(X), "r"(16), "r"(sbar) : "memory");
        }
        asm volatile(
            "{\n"
            " .reg .pred done;\n"
            "WAIT_%=:\n"
            " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
            " @!done bra WAIT_%=;\n"
            "}\n" ::"r"(sbar) : "memory");
    }
    // The real work: the row into shared memory with ordinary loads.
    for (int d = threadIdx.x; d < D; d += blockDim.x) row[d] = x[d];
    __syncthreads();
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
    const float r = rsqrtf(total / (float)D + 1e-6f);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        const float v = __bfloat162float(row[d]) * r * __bfloat162float(W[d]);
        y[d] = __float2bfloat16(v);
    }
}
