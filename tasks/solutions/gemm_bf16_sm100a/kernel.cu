// GEMM bf16 for sm_100a: C[M,N] = A[M,K] * B[N,K]^T, fp32 accumulation in
// tensor memory, bf16 result.
//
// Persistent, warp-specialised, 192 threads:
//   warp 0      TMA producer: one thread loads A (128x64) and B (256x64)
//               tiles, 128B-swizzled, into a 4-stage shared-memory ring
//               (full/empty mbarriers, expect_tx).
//   warp 1      allocates 512 tensor-memory columns (two 128x256 fp32
//               accumulators), and one thread issues tcgen05.mma kind::f16
//               (M=128, N=256, K=16) from shared-memory descriptors. Each
//               stage is handed back with tcgen05.commit on its empty
//               barrier; a finished accumulator is announced with
//               tcgen05.commit on its tmem_full barrier.
//   warps 2-5   epilogue: tcgen05.ld 32x32b.x32 (warp w reads TMEM lanes
//               32*(w%4)..+31 = rows of the tile), convert to bf16, 16-byte
//               global stores, then release the accumulator (tmem_empty), so
//               the next tile's MMAs overlap this tile's epilogue.
// Grid: num_sms CTAs over 128x256 tiles in a grouped order.
// Requirements: M % 128 == 0, N % 128 == 0, K % 64 == 0 (K >= 64).

typedef unsigned int u32;
typedef unsigned long long u64;

struct alignas(64) TmaDesc { char bytes[128]; };

namespace {

constexpr int BM = 128;
constexpr int BN = 256;
constexpr int BK = 64;
constexpr int STAGES = 4;
constexpr int A_TILE_BYTES = BM * BK * 2;                  // 16 KiB
constexpr int B_TILE_BYTES = BN * BK * 2;                  // 32 KiB
constexpr int STAGE_BYTES = A_TILE_BYTES + B_TILE_BYTES;   // 48 KiB
constexpr int ACC_BUFFERS = 2;
constexpr u32 TMEM_COLS = ACC_BUFFERS * BN;                // 512: all of tensor memory
constexpr int EPI_WARPS = 4;
constexpr int THREADS = 64 + 32 * EPI_WARPS;
// Dynamic shared memory: alignment slack, ring, barriers, TMEM address slot.
constexpr int SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + 256;
static_assert(SMEM_BYTES <= 197888, "manifest shared_bytes must cover this");

// Instruction descriptor, kind::f16: D f32 (bits 4-5 = 1), A bf16 (bits 7-9
// = 1), B bf16 (bits 10-12 = 1), both K-major (bits 15, 16 = 0),
// N >> 3 in bits 17-22, M >> 4 in bits 24-28.
constexpr u32 IDESC = (1u << 4) | (1u << 7) | (1u << 10) | ((u32)(BN >> 3) << 17) | ((u32)(BM >> 4) << 24);

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
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

__device__ __forceinline__ void tma_load_2d(u32 dst, const TmaDesc* map, u32 bar, int c_inner, int c_outer) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];"
        :: "r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c_inner), "r"(c_outer)
        : "memory");
}

// tcgen05 shared-memory descriptor: K-major rows of 128 bytes, 128-byte
// swizzle (layout type 2 in bits 61-63), 8-row core-matrix groups 1024 bytes
// apart (SBO), fixed version bits 46-48 = 0b001, base offset 0 (1024-aligned
// tiles). LBO is unused for swizzled K-major layouts.
__device__ __forceinline__ u64 sw128_desc(u32 saddr) {
    return (u64)((saddr & 0x3FFFF) >> 4)
         | ((u64)1 << 16)
         | ((u64)(1024 >> 4) << 32)
         | ((u64)1 << 46)
         | ((u64)2 << 61);
}

__device__ __forceinline__ void tc_fence_after() { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }
__device__ __forceinline__ void tc_fence_before() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }

__device__ __forceinline__ void tc_mma(u32 d_tmem, u64 a_desc, u64 b_desc, u32 accumulate) {
    asm volatile(
        "{ .reg .pred p;\n"
        "setp.ne.b32 p, %4, 0;\n"
        "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p; }"
        :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(IDESC), "r"(accumulate) : "memory");
}

// Arrive once on `bar` when every tcgen05.mma this thread issued so far is done.
__device__ __forceinline__ void tc_commit(u32 bar) {
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                 :: "r"(bar) : "memory");
}

// 32 lanes x 32 columns of 32 bits: thread t of the warp gets lane (base lane
// + t), columns col..col+31.
__device__ __forceinline__ void tmem_ld_32x32b_x32(u32 taddr, u32 (&v)[32]) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x32.b32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];"
        : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]), "=r"(v[4]), "=r"(v[5]), "=r"(v[6]), "=r"(v[7]),
          "=r"(v[8]), "=r"(v[9]), "=r"(v[10]), "=r"(v[11]), "=r"(v[12]), "=r"(v[13]), "=r"(v[14]), "=r"(v[15]),
          "=r"(v[16]), "=r"(v[17]), "=r"(v[18]), "=r"(v[19]), "=r"(v[20]), "=r"(v[21]), "=r"(v[22]), "=r"(v[23]),
          "=r"(v[24]), "=r"(v[25]), "=r"(v[26]), "=r"(v[27]), "=r"(v[28]), "=r"(v[29]), "=r"(v[30]), "=r"(v[31])
        : "r"(taddr));
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ u32 pack_bf16x2(u32 lo_bits, u32 hi_bits) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(__uint_as_float(hi_bits)), "f"(__uint_as_float(lo_bits)));
    return r;
}

__device__ __forceinline__ void st_global_v4(void* p, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" :: "l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

// Grouped tile order (16 row tiles per group, column-major inside a group).
__device__ __forceinline__ void tile_coords(int tile, int m_tiles, int n_tiles, int& mt, int& nt) {
    constexpr int GROUP = 16;
    const int span = GROUP * n_tiles;
    const int group = tile / span;
    const int first = group * GROUP;
    const int rows_here = min(m_tiles - first, GROUP);
    const int r = tile - group * span;
    mt = first + r % rows_here;
    nt = r / rows_here;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_bf16_tn_sm100(const __grid_constant__ TmaDesc tm_a, const __grid_constant__ TmaDesc tm_b,
                   unsigned short* __restrict__ C, int M, int N, int K) {
    extern __shared__ unsigned char smem_raw[];
    const u32 raw = smem_addr(smem_raw);
    const u32 base = (raw + 1023u) & ~1023u;
    const u32 bar_full = base + STAGES * STAGE_BYTES;
    const u32 bar_empty = bar_full + 8 * STAGES;
    const u32 bar_acc_full = bar_empty + 8 * STAGES;
    const u32 bar_acc_empty = bar_acc_full + 8 * ACC_BUFFERS;
    const u32 tmem_slot = bar_acc_empty + 8 * ACC_BUFFERS;
    const u32* tmem_slot_ptr = reinterpret_cast<const u32*>(smem_raw + (tmem_slot - raw));

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int m_tiles = M / BM;
    const int n_tiles = (N + BN - 1) / BN;
    const int tiles = m_tiles * n_tiles;
    const int k_steps = K / BK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(bar_full + 8 * s, 1);
            mbar_init(bar_empty + 8 * s, 1);      // one tcgen05.commit per use
        }
        for (int b = 0; b < ACC_BUFFERS; ++b) {
            mbar_init(bar_acc_full + 8 * b, 1);   // one tcgen05.commit per tile
            mbar_init(bar_acc_empty + 8 * b, EPI_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (warp == 1) {
        asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"
                     :: "r"(tmem_slot), "r"(TMEM_COLS) : "memory");
        asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
    }
    tc_fence_before();
    __syncthreads();
    tc_fence_after();
    const u32 tmem_base = *reinterpret_cast<const volatile u32*>(tmem_slot_ptr);

    if (warp == 0) {
        if (lane == 0) {
            u32 stage = 0, phase = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                int mt, nt;
                tile_coords(tile, m_tiles, n_tiles, mt, nt);
                for (int kb = 0; kb < k_steps; ++kb) {
                    const u32 full = bar_full + 8 * stage;
                    mbar_wait(bar_empty + 8 * stage, phase ^ 1u);
                    mbar_arrive_expect_tx(full, STAGE_BYTES);
                    const u32 sa = base + stage * STAGE_BYTES;
                    tma_load_2d(sa, &tm_a, full, kb * BK, mt * BM);
                    tma_load_2d(sa + A_TILE_BYTES, &tm_b, full, kb * BK, nt * BN);
                    if (++stage == STAGES) { stage = 0; phase ^= 1u; }
                }
            }
        }
    } else if (warp == 1) {
        if (lane == 0) {
            u32 stage = 0, phase = 0;
            u32 acc = 0, acc_phase = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                // Wait until the epilogue has drained this accumulator.
                mbar_wait(bar_acc_empty + 8 * acc, acc_phase ^ 1u);
                tc_fence_after();
                const u32 d_tmem = tmem_base + acc * BN;
                for (int kb = 0; kb < k_steps; ++kb) {
                    mbar_wait(bar_full + 8 * stage, phase);
                    tc_fence_after();
                    const u32 sa = base + stage * STAGE_BYTES;
                    const u64 da = sw128_desc(sa);
                    const u64 db = sw128_desc(sa + A_TILE_BYTES);
#pragma unroll
                    for (int k = 0; k < BK / 16; ++k) {
                        // +32 bytes per 16-element K slice inside the swizzled row.
                        tc_mma(d_tmem, da + 2 * k, db + 2 * k, (kb > 0 || k > 0) ? 1u : 0u);
                    }
                    tc_commit(bar_empty + 8 * stage);       // stage free once these MMAs finish
                    if (++stage == STAGES) { stage = 0; phase ^= 1u; }
                }
                tc_commit(bar_acc_full + 8 * acc);          // accumulator ready
                if (++acc == ACC_BUFFERS) { acc = 0; acc_phase ^= 1u; }
            }
        }
    } else {
        // Epilogue warps 2..5: warp w may only touch TMEM lanes 32*(w%4)..+31.
        const int quarter = warp % 4;
        u32 acc = 0, acc_phase = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            int mt, nt;
            tile_coords(tile, m_tiles, n_tiles, mt, nt);
            mbar_wait(bar_acc_full + 8 * acc, acc_phase);
            tc_fence_after();
            const int row = mt * BM + quarter * 32 + lane;
            const int n0 = nt * BN;
            unsigned short* crow = C + (size_t)row * N + n0;
            const u32 t_addr = tmem_base + ((u32)(quarter * 32) << 16) + acc * BN;
            const int chunks = min(BN, N - n0) / 32;
            for (int c = 0; c < chunks; ++c) {
                u32 v[32];
                tmem_ld_32x32b_x32(t_addr + 32 * c, v);
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    st_global_v4(crow + 32 * c + 8 * q,
                                 pack_bf16x2(v[8 * q + 0], v[8 * q + 1]), pack_bf16x2(v[8 * q + 2], v[8 * q + 3]),
                                 pack_bf16x2(v[8 * q + 4], v[8 * q + 5]), pack_bf16x2(v[8 * q + 6], v[8 * q + 7]));
                }
            }
            tc_fence_before();
            __syncwarp();
            if (lane == 0) mbar_arrive(bar_acc_empty + 8 * acc);
            if (++acc == ACC_BUFFERS) { acc = 0; acc_phase ^= 1u; }
        }
    }

    // Lanes of warps 0 and 1 took different paths above; reconverge them
    // before the block-wide barrier that precedes the deallocation.
    __syncwarp();
    tc_fence_before();
    __syncthreads();
    if (warp == 1) {
        tc_fence_after();
        asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" :: "r"(tmem_base), "r"(TMEM_COLS) : "memory");
    }
}
