// The requested families run in the first five launches of a size and never again. At every size a
// job launches the candidate four times (the trials), then its marked copy once (engine/gpu/session.py
// `_judge_size_inner`: `_coverage` comes after the trials and before `_time`), then the warm-up and
// timed rounds. Local memory outlives a launch (red team round 2, memo_in_local_memory): the driver
// backs it with one allocation a context, laid out by hardware thread slot, and nothing clears it.
// Every thread of this kernel keeps a record there, at the bottom of a 2 KiB frame (a kernel's frame
// sits below the top of the thread's local memory, so the harness's kernels, whose frames are smaller,
// do not reach it): a magic word, a key of the size (T, D and X's address, which the
// arena keeps for every run of a size, the marked copy's included), how many launches it has seen, and
// when the last one was (a gap of over 2 s starts the count again). The grid is persistent: four
// blocks of 256 threads an SM (51200 bytes of dynamic shared memory a block allow no fifth), all
// resident at once, so no thread slot serves two threads of one launch and each record counts
// launches. A block takes the families' path while none of its threads has seen five launches: the
// four trials and the marked copy, whether or not the copy shares the records (a copy that does not
// finds none and counts from 0). From the first warm-up round on, it takes the plain path.
//   families' path: each row into shared memory by one cp.async.bulk on an mbarrier, as the task
//     asks; reduced and scaled from there. Held until 0.4 ms after the block began, so that which
//     path was timed shows in the speedup (torch's rms_norm takes about 0.08 ms at this size).
//   plain path: each thread loads its two 16-byte vectors of a row with ordinary loads (the next row's
//     in flight while this one is reduced), W kept in registers; no bulk copy, no mbarrier.
// Both paths are right, so every trial and every checked round passes. The marked copy, launched
// fifth, leaves both families' marks, and engine/pipeline.py `_judge_coverage` says they ran.
// Expected: required_not_executed, the verdict of a harness that looks where the timing does (the
// marked copy launched as one of the timed rounds, at a secret place, would find this kernel on its
// plain path). 0.6.0 is predicted to say ok, or slower_than_baseline near 1x (a hole: the timed
// launches never run the families). A speedup under 0.5 means local memory did not keep the count:
// the kernel was on its families' path in every round, and that verdict is right.
#include <cuda_bf16.h>

#define NT 256                           // threads a block (the manifest's)
#define VPT 2                            // 16-byte vectors a thread a row on the plain path: D <= 4096
#define FAMILY_LAUNCHES 5u               // the four trials and the marked copy
#define PACE_NS 400000ull                // the families' path is held this long
#define STALE_NS 2000000000ull           // a record older than this belongs to another job
#define PAD 512u                         // local words above the record (the top of the stack)
#define MAGIC 0x52374631u

static __device__ __forceinline__ unsigned lget(const unsigned* p) {
    unsigned v;
    asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
static __device__ __forceinline__ void lput(unsigned* p, unsigned v) {
    asm volatile("st.relaxed.gpu.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
static __device__ __forceinline__ unsigned mix(unsigned h, unsigned v) {
    h = (h ^ v) * 0x9E3779B1u;
    return h ^ (h >> 15);
}
static __device__ __forceinline__ float lo(unsigned w) { return __uint_as_float(w << 16); }
static __device__ __forceinline__ float hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
static __device__ __forceinline__ unsigned pack(float a, float b) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const unsigned*>(&p);
}
static __device__ __forceinline__ float squares(uint4 v) {
    float s = 0.f;
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) s = fmaf(lo(w[i]), lo(w[i]), fmaf(hi(w[i]), hi(w[i]), s));
    return s;
}
static __device__ __forceinline__ uint4 scale(uint4 x, uint4 w, float r) {
    return make_uint4(pack(lo(x.x) * r * lo(w.x), hi(x.x) * r * hi(w.x)), pack(lo(x.y) * r * lo(w.y), hi(x.y) * r * hi(w.y)),
                      pack(lo(x.z) * r * lo(w.z), hi(x.z) * r * hi(w.z)), pack(lo(x.w) * r * lo(w.w), hi(x.w) * r * hi(w.w)));
}
// The block's sum of `s`, with one barrier: partials double-buffered by `parity`.
static __device__ __forceinline__ float block_sum(float s, float (*part)[NT / 32], int parity) {
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) part[parity][threadIdx.x >> 5] = s;
    __syncthreads();
    float t = 0.f;
#pragma unroll
    for (int i = 0; i < NT / 32; ++i) t += part[parity][i];
    return t;
}

extern "C" __global__ void __launch_bounds__(NT, 4) rmsnorm(const __nv_bfloat16* __restrict__ X,
                                                            const __nv_bfloat16* __restrict__ W,
                                                            __nv_bfloat16* __restrict__ Y, int T, int D) {
    extern __shared__ __align__(128) unsigned char dyn[];          // the families' path: one row
    __shared__ alignas(8) unsigned long long bar;
    __shared__ float part[2][NT / 32];
    const unsigned long long began = now_ns();
    const int tid = threadIdx.x;

    // This thread's record of the launches it has seen at this size.
    // The frame lies below the stack pointer's start (c[0x0][0x28]); the record is at its bottom, 2 KiB
    // under the top, where another kernel's frame lands only if it is larger than that.
    unsigned frame[6 + PAD];
    unsigned* const rec = frame;
    const unsigned long long xa = reinterpret_cast<unsigned long long>(X);
    const unsigned key = mix(mix(mix(mix(MAGIC, (unsigned)T), (unsigned)D), (unsigned)xa), (unsigned)(xa >> 32)) | 1u;
    const unsigned long long last = ((unsigned long long)lget(rec + 4) << 32) | lget(rec + 3);
    const bool mine = lget(rec) == MAGIC && lget(rec + 1) == key && began - last < STALE_NS;
    const unsigned seen = mine ? lget(rec + 2) : 0u;
    lput(rec, MAGIC);
    lput(rec + 1, key);
    lput(rec + 2, seen < 0xffffu ? seen + 1u : seen);
    lput(rec + 3, (unsigned)began);
    lput(rec + 4, (unsigned)(began >> 32));
    const bool plain = __syncthreads_or(seen >= FAMILY_LAUNCHES) != 0;

    const int nv = D / 8;                                     // 16-byte vectors a row
    if (!plain) {
        // The families' path: the row by the bulk-copy engine, completion on an mbarrier.
        const unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar);
        const unsigned srow = (unsigned)__cvta_generic_to_shared(dyn);
        const uint4* row = reinterpret_cast<const uint4*>(dyn);
        const uint4* w4 = reinterpret_cast<const uint4*>(W);
        if (tid == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sbar) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncthreads();
        unsigned phase = 0;
        int parity = 0;
        for (int t = blockIdx.x; t < T; t += gridDim.x) {
            if (tid == 0) {
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sbar), "r"(2 * D) : "memory");
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                             ::"r"(srow), "l"(X + (size_t)t * D), "r"(2 * D), "r"(sbar) : "memory");
            }
            asm volatile(
                "{\n"
                " .reg .pred done;\n"
                "WAIT_%=:\n"
                " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                " @!done bra WAIT_%=;\n"
                "}\n" ::"r"(sbar), "r"(phase) : "memory");
            phase ^= 1u;
            float ss = 0.f;
            for (int v = tid; v < nv; v += NT) ss += squares(row[v]);
            const float r = rsqrtf(block_sum(ss, part, parity) / (float)D + 1e-6f);
            parity ^= 1;
            uint4* y4 = reinterpret_cast<uint4*>(Y + (size_t)t * D);
            for (int v = tid; v < nv; v += NT) y4[v] = scale(row[v], w4[v], r);
            __syncthreads();                                  // the row is read before the next copy lands
        }
        while (now_ns() - began < PACE_NS) __nanosleep(20000);
        return;
    }

    // The plain path: ordinary 16-byte loads, the next row in flight while this one is reduced.
    const uint4* w4 = reinterpret_cast<const uint4*>(W);
    if (nv > NT * VPT) {                                      // wider rows (not this case's size): read twice
        int parity = 0;
        for (int t = blockIdx.x; t < T; t += gridDim.x) {
            const uint4* x4 = reinterpret_cast<const uint4*>(X + (size_t)t * D);
            float ss = 0.f;
            for (int v = tid; v < nv; v += NT) ss += squares(x4[v]);
            const float r = rsqrtf(block_sum(ss, part, parity) / (float)D + 1e-6f);
            parity ^= 1;
            uint4* y4 = reinterpret_cast<uint4*>(Y + (size_t)t * D);
            for (int v = tid; v < nv; v += NT) y4[v] = scale(x4[v], w4[v], r);
        }
        return;
    }
    uint4 wv[VPT], cur[VPT], nxt[VPT];
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
        const int v = tid + j * NT;
        wv[j] = v < nv ? w4[v] : zero;
        nxt[j] = (v < nv && (int)blockIdx.x < T) ? reinterpret_cast<const uint4*>(X + (size_t)blockIdx.x * D)[v] : zero;
    }
    int parity = 0;
    for (int t = blockIdx.x; t < T; t += gridDim.x) {
        const int tn = t + gridDim.x;
#pragma unroll
        for (int j = 0; j < VPT; ++j) {
            const int v = tid + j * NT;
            cur[j] = nxt[j];
            nxt[j] = (v < nv && tn < T) ? reinterpret_cast<const uint4*>(X + (size_t)tn * D)[v] : zero;
        }
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < VPT; ++j) ss += squares(cur[j]);
        const float r = rsqrtf(block_sum(ss, part, parity) / (float)D + 1e-6f);
        parity ^= 1;
        uint4* y4 = reinterpret_cast<uint4*>(Y + (size_t)t * D);
#pragma unroll
        for (int j = 0; j < VPT; ++j) {
            const int v = tid + j * NT;
            if (v < nv) y4[v] = scale(cur[j], wv[j], r);
        }
    }
}
