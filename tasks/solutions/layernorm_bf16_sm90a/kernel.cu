// LayerNorm bf16 for sm_90a: Y[t,:] = (X[t,:] - mean) * rsqrt(var + 1e-5) * W + B, in fp32.
//
// Memory-bound: every byte of X is read once and every byte of Y written once. The
// structure is the RMSNorm expert's (tasks/solutions/rmsnorm_bf16_sm90a): persistent CTAs,
// a ring of ROW_STAGES whole rows in shared memory, each fetched by thread 0 with one
// non-tensor bulk copy (cp.async.bulk) completing on the stage's mbarrier. The variance
// is taken about the mean, from the values each thread holds in registers (two block
// reductions a row), never as E[x^2] - mean^2, which loses the variance of rows whose
// mean is large against their spread. W and B stay packed (bf16 pairs) in registers.
// Requirements: D % 16 == 0, D / 16 <= 1024, 16-byte aligned X, W, B and Y.

typedef unsigned int u32;
typedef unsigned long long u64;

namespace {

constexpr int ROW_STAGES = 3;
constexpr int HEADER_BYTES = 1024;  // mbarriers and the two cross-warp partial sums
constexpr float EPS = 1e-5f;

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
layernorm_bf16(const unsigned short* __restrict__ X, const unsigned short* __restrict__ W,
               const unsigned short* __restrict__ B, unsigned short* __restrict__ Y, int T, int D) {
    extern __shared__ __align__(128) unsigned char smem[];
    const u32 sbase = smem_addr(smem);
    const u32 bars = sbase;                                   // ROW_STAGES x 8 bytes
    float* sums = reinterpret_cast<float*>(smem + 64);        // [2][32]: row sums
    float* devs = reinterpret_cast<float*>(smem + 320);       // [2][32]: squared deviations
    const u32 rows = sbase + HEADER_BYTES;                    // ROW_STAGES x (2*D) bytes

    const int tid = threadIdx.x;
    const int nthreads = blockDim.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int nwarps = nthreads >> 5;
    const u32 row_bytes = (u32)D * 2u;

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

    // This thread's slices of W and B, packed, loaded once.
    const uint4 wp0 = ld_global_nc_v4(W + 8 * tid), wp1 = ld_global_nc_v4(W + 8 * (tid + nthreads));
    const uint4 bp0 = ld_global_nc_v4(B + 8 * tid), bp1 = ld_global_nc_v4(B + 8 * (tid + nthreads));
    const float inv_d = 1.0f / (float)D;

    int stage = 0;
    u32 phase = 0;
    for (int i = 0; i < my_rows; ++i) {
        const size_t r = (size_t)first_row + (size_t)i * gridDim.x;
        const u32 row = rows + stage * row_bytes;
        mbar_wait(bars + 8 * stage, phase);
        float x0[8], x1[8];
        to_floats(ld_shared_v4(row + 16 * tid), x0);
        to_floats(ld_shared_v4(row + 16 * (tid + nthreads)), x1);

        // The mean: one block reduction (double-buffered partials: two barriers a row in all).
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) s += x0[j] + x1[j];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        float* sum_part = sums + 32 * (i & 1);
        if (lane == 0) sum_part[warp] = s;
        __syncthreads();

        // Every thread has its slice of this stage in registers: refill it.
        if (tid == 0 && i + ROW_STAGES < my_rows) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            fetch_row(row, X + (r + (size_t)ROW_STAGES * gridDim.x) * D, row_bytes, bars + 8 * stage);
        }

        float total = 0.f;
        for (int k = 0; k < nwarps; ++k) total += sum_part[k];
        const float mean = total * inv_d;

        // The variance about the mean: the second reduction.
        float q = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            x0[j] -= mean;
            x1[j] -= mean;
            q = fmaf(x0[j], x0[j], fmaf(x1[j], x1[j], q));
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
        float* dev_part = devs + 32 * (i & 1);
        if (lane == 0) dev_part[warp] = q;
        __syncthreads();
        float var = 0.f;
        for (int k = 0; k < nwarps; ++k) var += dev_part[k];
        const float rstd = rsqrtf(var * inv_d + EPS);

        float w[8], b[8];
        uint4 y0, y1;
        to_floats(wp0, w);
        to_floats(bp0, b);
        y0.x = pack(fmaf(x0[0] * rstd, w[0], b[0]), fmaf(x0[1] * rstd, w[1], b[1]));
        y0.y = pack(fmaf(x0[2] * rstd, w[2], b[2]), fmaf(x0[3] * rstd, w[3], b[3]));
        y0.z = pack(fmaf(x0[4] * rstd, w[4], b[4]), fmaf(x0[5] * rstd, w[5], b[5]));
        y0.w = pack(fmaf(x0[6] * rstd, w[6], b[6]), fmaf(x0[7] * rstd, w[7], b[7]));
        to_floats(wp1, w);
        to_floats(bp1, b);
        y1.x = pack(fmaf(x1[0] * rstd, w[0], b[0]), fmaf(x1[1] * rstd, w[1], b[1]));
        y1.y = pack(fmaf(x1[2] * rstd, w[2], b[2]), fmaf(x1[3] * rstd, w[3], b[3]));
        y1.z = pack(fmaf(x1[4] * rstd, w[4], b[4]), fmaf(x1[5] * rstd, w[5], b[5]));
        y1.w = pack(fmaf(x1[6] * rstd, w[6], b[6]), fmaf(x1[7] * rstd, w[7], b[7]));
        unsigned short* yrow = Y + r * D;
        st_global_v4(yrow + 8 * tid, y0);
        st_global_v4(yrow + 8 * (tid + nthreads), y1);

        if (++stage == ROW_STAGES) { stage = 0; phase ^= 1u; }
    }
}
