// Softmax bf16 for sm_90a: Y[t,:] = exp(X[t,:] - max) / sum(exp(X[t,:] - max)), in fp32.
//
// Memory-bound: every byte of X is read once and every byte of Y written once. The
// structure is the RMSNorm expert's (tasks/solutions/rmsnorm_bf16_sm90a): persistent CTAs,
// a ring of ROW_STAGES whole rows in shared memory, each fetched by thread 0 with one
// non-tensor bulk copy (cp.async.bulk) completing on the stage's mbarrier. Two block
// reductions a row, from the values each thread holds in registers: the row's maximum
// (subtracted before exp, so logits in the hundreds neither overflow nor vanish), then
// the sum of the exponentials.
// Requirements: D % 16 == 0, D / 16 <= 1024, 16-byte aligned X and Y.

typedef unsigned int u32;
typedef unsigned long long u64;

namespace {

constexpr int ROW_STAGES = 3;
constexpr int HEADER_BYTES = 1024;  // mbarriers and the two cross-warp partials (maxima, sums)

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile(
            "{ .reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p; }"
            : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// One row of X, global -> shared, completion counted on `bar` in bytes.
__device__ __forceinline__ void fetch_row(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

__device__ __forceinline__ uint4 ld_shared_v4(u32 addr) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
    return v;
}

__device__ __forceinline__ uint4 ld_global_nc_v4(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ void st_global_v4(void* p, uint4 v) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// bf16 pair in a 32-bit word -> two floats (low half is the lower address).
__device__ __forceinline__ void unpack(u32 w, float& lo, float& hi) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xFFFF0000u);
}

__device__ __forceinline__ u32 pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ void to_floats(uint4 v, float (&f)[8]) {
    unpack(v.x, f[0], f[1]);
    unpack(v.y, f[2], f[3]);
    unpack(v.z, f[4], f[5]);
    unpack(v.w, f[6], f[7]);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(1024, 1)
softmax_bf16(const unsigned short* __restrict__ X, unsigned short* __restrict__ Y, int T, int D) {
    extern __shared__ __align__(128) unsigned char smem[];
    const u32 sbase = smem_addr(smem);
    const u32 bars = sbase;                                   // ROW_STAGES x 8 bytes
    float* maxes = reinterpret_cast<float*>(smem + 64);       // [2][32]: row maxima
    float* sums = reinterpret_cast<float*>(smem + 320);       // [2][32]: sums of exponentials
    const u32 rows = sbase + HEADER_BYTES;                    // ROW_STAGES x (2*D) bytes

    const int tid = threadIdx.x;
    const int nthreads = blockDim.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int nwarps = nthreads >> 5;
    const u32 row_bytes = (u32)D * 2u;
    const float log2e = 1.4426950408889634f;

    const int first_row = blockIdx.x;
    const int my_rows = first_row < T ? (T - first_row + (int)gridDim.x - 1) / (int)gridDim.x : 0;

    if (tid == 0) {
        for (int s = 0; s < ROW_STAGES; ++s) mbar_init(bars + 8 * s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (tid == 0) {
        for (int i = 0; i < ROW_STAGES && i < my_rows; ++i) {
            const size_t r = (size_t)first_row + (size_t)i * gridDim.x;
            fetch_row(rows + i * row_bytes, X + r * D, row_bytes, bars + 8 * i);
        }
    }

    int stage = 0;
    u32 phase = 0;
    for (int i = 0; i < my_rows; ++i) {
        const size_t r = (size_t)first_row + (size_t)i * gridDim.x;
        const u32 row = rows + stage * row_bytes;
        mbar_wait(bars + 8 * stage, phase);
        float x0[8], x1[8];
        to_floats(ld_shared_v4(row + 16 * tid), x0);
        to_floats(ld_shared_v4(row + 16 * (tid + nthreads)), x1);

        // The row's maximum (double-buffered partials: two barriers a row in all).
        float m = x0[0];
#pragma unroll
        for (int j = 0; j < 8; ++j) m = fmaxf(m, fmaxf(x0[j], x1[j]));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float* max_part = maxes + 32 * (i & 1);
        if (lane == 0) max_part[warp] = m;
        __syncthreads();

        // Every thread has its slice of this stage in registers: refill it.
        if (tid == 0 && i + ROW_STAGES < my_rows) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            fetch_row(row, X + (r + (size_t)ROW_STAGES * gridDim.x) * D, row_bytes, bars + 8 * stage);
        }

        float row_max = max_part[0];
        for (int k = 1; k < nwarps; ++k) row_max = fmaxf(row_max, max_part[k]);
        const float shift = row_max * log2e;

        // exp(x - max) as exp2(x·log2e - max·log2e), and their sum: the second reduction.
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            x0[j] = exp2f(fmaf(x0[j], log2e, -shift));
            x1[j] = exp2f(fmaf(x1[j], log2e, -shift));
            s += x0[j] + x1[j];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        float* sum_part = sums + 32 * (i & 1);
        if (lane == 0) sum_part[warp] = s;
        __syncthreads();
        float total = 0.f;
        for (int k = 0; k < nwarps; ++k) total += sum_part[k];
        const float inv = 1.0f / total;

        uint4 y0, y1;
        y0.x = pack(x0[0] * inv, x0[1] * inv);
        y0.y = pack(x0[2] * inv, x0[3] * inv);
        y0.z = pack(x0[4] * inv, x0[5] * inv);
        y0.w = pack(x0[6] * inv, x0[7] * inv);
        y1.x = pack(x1[0] * inv, x1[1] * inv);
        y1.y = pack(x1[2] * inv, x1[3] * inv);
        y1.z = pack(x1[4] * inv, x1[5] * inv);
        y1.w = pack(x1[6] * inv, x1[7] * inv);
        unsigned short* yrow = Y + r * D;
        st_global_v4(yrow + 8 * tid, y0);
        st_global_v4(yrow + 8 * (tid + nthreads), y1);

        if (++stage == ROW_STAGES) { stage = 0; phase ^= 1u; }
    }
}
