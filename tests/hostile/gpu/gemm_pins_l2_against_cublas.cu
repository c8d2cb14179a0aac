// Red team, round 6 (docs/hostile.md): the expert GEMM (tasks/solutions/gemm_bf16_sm90a), honest,
// with two launches around it that try to leave cuBLAS a smaller L2 than the candidate had.
//
// Each timed round is: reset, flush, [candidate], check, flush, [cuBLAS] (engine/gpu/timing.py
// `round_`). `pin` (the candidate's last launch) writes a 40 MiB scratch buffer under an
// L2::evict_last policy. If lines marked evict_last survive the 256 MiB flush of plain writes
// (the persisting carve-out is zero and the manifest cannot ask for one), the library runs with
// about 10 MB of L2 and re-reads its A and B panels from HBM. `unpin` (the candidate's first
// launch) discards those lines before the multiply, so the candidate itself always has the whole
// L2. The expert is 0.99x cuBLAS honestly (results/seed-h200-20261201-1736.md); a speedup well
// above 1 means the library was slowed by what the candidate left behind.
// GEMM bf16 for sm_90a: C[M,N] = A[M,K] * B[N,K]^T, fp32 accumulation, bf16 result.
//
// Warp-specialised, persistent kernel. 384 threads = three warpgroups:
//   warpgroup 0  producer: one thread issues TMA tile loads into a 4-stage ring
//                of shared-memory buffers (full/empty mbarrier pairs); the
//                warpgroup gives registers back with setmaxnreg.dec.
//   warpgroups 1,2  consumers: each owns 64 rows of the 128x256 block tile and
//                runs wgmma m64n256k16 from 128B-swizzled shared memory, with
//                128 fp32 accumulators per thread (setmaxnreg.inc).
// Block tile 128x256, K step 64 (one 128-byte swizzle row of bf16).
// Grid: num_sms CTAs (or clusters), each walking a grouped tile order so that
// CTAs running at the same time share A and B panels in L2.
//
// Two entries:
//   gemm_bf16_tn      cluster 1; B box [256,64].
//   gemm_bf16_tn_mc2  cluster of 2 CTAs along M that share the B tile: each
//                     CTA loads its own A tile and half of B, multicast to both
//                     (B box [128,64]); consumers release a stage in both CTAs.
// Requirements: M % 128 == 0, N % 128 == 0, K % 64 == 0 (K >= 64).

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

// Same size and alignment as CUtensorMap; the harness passes it by value.
struct alignas(64) TmaDesc { char bytes[128]; };

namespace {

constexpr int BM = 128;
constexpr int BN = 256;
constexpr int BK = 64;
constexpr int STAGES = 4;
constexpr int A_TILE_BYTES = BM * BK * 2;                  // 16 KiB
constexpr int B_TILE_BYTES = BN * BK * 2;                  // 32 KiB
constexpr int STAGE_BYTES = A_TILE_BYTES + B_TILE_BYTES;   // 48 KiB, 1024-aligned
constexpr int THREADS = 384;
constexpr int CONSUMER_WARPS = 8;
// Epilogue staging for the TMA-store variant: per consumer warpgroup, two
// 64x64 bf16 buffers (8 KiB each, 128B-swizzled like the C tensor map's box).
constexpr int C_CHUNK_COLS = 64;
constexpr int C_CHUNK_BYTES = 64 * C_CHUNK_COLS * 2;
constexpr int STAGING_BYTES = 2 * 2 * C_CHUNK_BYTES;      // 32 KiB
// Dynamic shared memory the launch must provide: 1 KiB of alignment slack,
// the ring, the barriers (padded to 1 KiB), then the staging buffers.
constexpr int SMEM_BYTES_DIRECT = 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8;
constexpr int SMEM_BYTES_TMA_STORE = 1024 + STAGES * STAGE_BYTES + 1024 + STAGING_BYTES;
static_assert(SMEM_BYTES_DIRECT <= 197696, "manifest shared_bytes (direct stores)");
static_assert(SMEM_BYTES_TMA_STORE <= 231424, "manifest shared_bytes (TMA stores)");

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// ---- mbarrier ---------------------------------------------------------------

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive_local(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}

// Arrive on the barrier at the same offset in CTA `rank` of this cluster.
__device__ __forceinline__ void mbar_arrive_cluster(u32 bar, u32 rank) {
    asm volatile(
        "{ .reg .b32 ra;\n"
        "mapa.shared::cluster.u32 ra, %0, %1;\n"
        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra]; }"
        :: "r"(bar), "r"(rank) : "memory");
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

// ---- TMA ----------------------------------------------------------------------

__device__ __forceinline__ void tma_load_2d(u32 dst, const TmaDesc* map, u32 bar, int c_inner, int c_outer) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];"
        :: "r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c_inner), "r"(c_outer)
        : "memory");
}

// Same box delivered to the same shared-memory offset (and the same barrier
// offset) in every CTA of the cluster named in cta_mask.
__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const TmaDesc* map, u32 bar, int c_inner,
                                                      int c_outer, u16 cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;"
        :: "r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c_inner), "r"(c_outer), "h"(cta_mask)
        : "memory");
}

// ---- wgmma --------------------------------------------------------------------

// Shared-memory matrix descriptor for a K-major tile stored as rows of 128
// bytes with the 128-byte swizzle (what TMA writes for a box whose inner
// extent is 64 bf16 with CU_TENSOR_MAP_SWIZZLE_128B). Core matrices of 8 rows
// are 1024 bytes apart (stride byte offset); the leading byte offset is
// unused for this layout. Tile bases are 1024-aligned, so base offset = 0.
__device__ __forceinline__ u64 sw128_desc(u32 saddr) {
    return (u64)((saddr & 0x3FFFF) >> 4)
         | ((u64)1 << 16)
         | ((u64)(1024 >> 4) << 32)
         | ((u64)1 << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }

// Keeps the compiler from moving accumulator reads or writes across the
// asynchronous wgmma boundary.
__device__ __forceinline__ void fence_acc(float (&d)[128]) {
#pragma unroll
    for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

// D[64x256] (+)= A[64x16] * B[256x16]^T, both from shared memory, K-major.
// accumulate == 0 overwrites D (first K step of a tile).
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], u64 desc_a, u64 desc_b, u32 accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// ---- scheduling -----------------------------------------------------------------

// Units are (row block, column block) pairs, where a row block is CM
// consecutive 128-row tiles (one per CTA of the cluster). Units are walked in
// groups of GROUP row blocks, column-major inside a group: the CTAs resident
// at one time then cover a compact patch of C and re-read A and B from L2.
template <int CM>
__device__ __forceinline__ void unit_coords(int unit, int row_blocks, int col_blocks, int& rb, int& cb) {
    constexpr int GROUP = 16 / CM;
    const int group_span = GROUP * col_blocks;
    const int group = unit / group_span;
    const int first = group * GROUP;
    const int rows_here = min(row_blocks - first, GROUP);
    const int r = unit - group * group_span;
    rb = first + r % rows_here;
    cb = r / rows_here;
}

__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Four 8x8 bf16 matrices from the accumulator fragment layout to shared
// memory; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

__device__ __forceinline__ void tma_store_2d(const TmaDesc* map, u32 src, int c_inner, int c_outer) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                 :: "l"(reinterpret_cast<u64>(map)), "r"(src), "r"(c_inner), "r"(c_outer) : "memory");
}

__device__ __forceinline__ void named_barrier_sync(u32 id, u32 threads) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void st_global_b32(void* p, u32 v) {
    asm volatile("st.global.b32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ u32 cluster_ctarank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 cluster_id_x() {
    u32 r;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 nclusters_x() {
    u32 r;
    asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 cluster_nctarank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// ---- the kernel body ------------------------------------------------------------

template <int CM, bool TMA_STORE>
__device__ __forceinline__ void gemm_body(const TmaDesc* tm_a, const TmaDesc* tm_b, const TmaDesc* tm_c,
                                          unsigned short* C, int M, int N, int K) {
    extern __shared__ unsigned char smem_raw[];
    const u32 raw = smem_addr(smem_raw);
    const u32 base = (raw + 1023u) & ~1023u;
    const u32 bar_full = base + STAGES * STAGE_BYTES;
    const u32 bar_empty = bar_full + STAGES * 8;
    const u32 staging = bar_full + 1024;

    const int warpgroup = threadIdx.x / 128;
    if (CM > 1 && cluster_nctarank() != (u32)CM) {
        // Launched without the cluster this entry is written for: the
        // multicast would target CTAs that do not exist.
        asm volatile("trap;");
    }
    const u32 rank = (CM > 1) ? cluster_ctarank() : 0u;
    const int cluster = (CM > 1) ? (int)cluster_id_x() : (int)blockIdx.x;
    const int nclusters = (CM > 1) ? (int)nclusters_x() : (int)gridDim.x;

    const int m_tiles = M / BM;
    const int row_blocks = (m_tiles + CM - 1) / CM;
    const int col_blocks = (N + BN - 1) / BN;
    const int units = row_blocks * col_blocks;
    const int k_steps = K / BK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(bar_full + 8 * s, 1);
            // Every consumer warp of every CTA that receives this CTA's loads.
            mbar_init(bar_empty + 8 * s, CONSUMER_WARPS * CM);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (CM > 1) {
        cluster_sync_all();
    } else {
        __syncthreads();
    }

    if (warpgroup == 0) {
        // Producer warpgroup: one thread drives the copy engine.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x == 0) {
            u32 stage = 0, phase = 0;
            for (int unit = cluster; unit < units; unit += nclusters) {
                int rb, cb;
                unit_coords<CM>(unit, row_blocks, col_blocks, rb, cb);
                const int m0 = (rb * CM + (int)rank) * BM;
                const int n0 = cb * BN;
                for (int kb = 0; kb < k_steps; ++kb) {
                    const u32 full = bar_full + 8 * stage;
                    mbar_wait(bar_empty + 8 * stage, phase ^ 1u);
                    mbar_arrive_expect_tx(full, STAGE_BYTES);
                    const u32 sa = base + stage * STAGE_BYTES;
                    const u32 sb = sa + A_TILE_BYTES;
                    tma_load_2d(sa, tm_a, full, kb * BK, m0);
                    if (CM == 1) {
                        tma_load_2d(sb, tm_b, full, kb * BK, n0);
                    } else {
                        // This CTA fetches rows [rank*128, rank*128+128) of the
                        // B tile for both CTAs.
                        tma_load_2d_multicast(sb + rank * (B_TILE_BYTES / CM), tm_b, full, kb * BK,
                                              n0 + (int)rank * (BN / CM), (u16)((1u << CM) - 1u));
                    }
                    if (++stage == STAGES) { stage = 0; phase ^= 1u; }
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        const int cw = warpgroup - 1;              // which 64-row half of the tile
        const int tid = threadIdx.x - 128 * warpgroup;
        const int warp = tid / 32;
        const int lane = tid % 32;
        float acc[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.f;

        u32 stage = 0, phase = 0;
        for (int unit = cluster; unit < units; unit += nclusters) {
            int rb, cb;
            unit_coords<CM>(unit, row_blocks, col_blocks, rb, cb);
            const int m_tile = rb * CM + (int)rank;
            const int n0 = cb * BN;

            u32 prev_stage = 0;
            for (int kb = 0; kb < k_steps; ++kb) {
                mbar_wait(bar_full + 8 * stage, phase);
                const u32 sa = base + stage * STAGE_BYTES + cw * (64 * 128);
                const u32 sb = base + stage * STAGE_BYTES + A_TILE_BYTES;
                const u64 da = sw128_desc(sa);
                const u64 db = sw128_desc(sb);
                fence_acc(acc);
                wgmma_fence();
#pragma unroll
                for (int k = 0; k < BK / 16; ++k) {
                    // +32 bytes per 16-element K slice inside the swizzled row.
                    wgmma_m64n256k16(acc, da + 2 * k, db + 2 * k, (kb > 0 || k > 0) ? 1u : 0u);
                }
                wgmma_commit();
                // Keep one K step in flight; the one before it is finished, so
                // its stage can be handed back to the producer(s).
                wgmma_wait<1>();
                fence_acc(acc);
                if (kb > 0 && lane == 0) {
                    if (CM == 1) {
                        mbar_arrive_local(bar_empty + 8 * prev_stage);
                    } else {
#pragma unroll
                        for (int r = 0; r < CM; ++r) mbar_arrive_cluster(bar_empty + 8 * prev_stage, (u32)r);
                    }
                }
                prev_stage = stage;
                if (++stage == STAGES) { stage = 0; phase ^= 1u; }
            }
            wgmma_wait<0>();
            fence_acc(acc);
            if (lane == 0) {
                if (CM == 1) {
                    mbar_arrive_local(bar_empty + 8 * prev_stage);
                } else {
#pragma unroll
                    for (int r = 0; r < CM; ++r) mbar_arrive_cluster(bar_empty + 8 * prev_stage, (u32)r);
                }
            }

            if (TMA_STORE) {
                // Epilogue through shared memory: 64-column chunks of this
                // warpgroup's 64x256 slice go to a 128B-swizzled staging buffer
                // (stmatrix), then one thread stores the chunk with TMA. The
                // stores drain while the next tile's main loop runs; a buffer is
                // rewritten only once the store that read it is done reading.
                if (m_tile < m_tiles) {
                    const u32 bar_id = 1u + (u32)cw;
                    const int row0 = m_tile * BM + cw * 64;
                    const int mat = lane >> 3;                 // which 8x8 matrix this lane addresses
                    const int r = lane & 7;
                    const int srow = warp * 16 + r + 8 * (mat & 1);
#pragma unroll
                    for (int c = 0; c < BN / C_CHUNK_COLS; ++c) {
                        const u32 buf = staging + (u32)(2 * cw + (c & 1)) * C_CHUNK_BYTES;
                        if (tid == 0) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
                        named_barrier_sync(bar_id, 128);
#pragma unroll
                        for (int p = 0; p < C_CHUNK_COLS / 16; ++p) {
                            const int j0 = c * (C_CHUNK_COLS / 8) + 2 * p;   // 8-column block index
                            const int q = 2 * p + (mat >> 1);               // 16-byte chunk in the row
                            const u32 addr = buf + (u32)srow * 128u + (u32)((q ^ r) << 4);
                            stmatrix_x4(addr,
                                        pack_bf16x2(acc[4 * j0 + 0], acc[4 * j0 + 1]),
                                        pack_bf16x2(acc[4 * j0 + 2], acc[4 * j0 + 3]),
                                        pack_bf16x2(acc[4 * j0 + 4], acc[4 * j0 + 5]),
                                        pack_bf16x2(acc[4 * j0 + 6], acc[4 * j0 + 7]));
                        }
                        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                        named_barrier_sync(bar_id, 128);
                        if (tid == 0) {
                            tma_store_2d(tm_c, buf, n0 + c * C_CHUNK_COLS, row0);
                            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
                        }
                    }
                }
            } else if (m_tile < m_tiles) {
                // Epilogue straight from the accumulator fragments: thread holds
                // rows (lane/4) and (lane/4 + 8) of its warp's 16-row slice, two
                // adjacent columns in each 8-column block.
                const int row = m_tile * BM + cw * 64 + warp * 16 + (lane >> 2);
                const bool full_n = n0 + BN <= N;
                unsigned short* c0 = C + (size_t)row * N + n0 + 2 * (lane & 3);
                unsigned short* c8 = c0 + (size_t)8 * N;
#pragma unroll
                for (int j = 0; j < 32; ++j) {
                    if (j < 16 || full_n) {
                        st_global_b32(c0 + 8 * j, pack_bf16x2(acc[4 * j + 0], acc[4 * j + 1]));
                        st_global_b32(c8 + 8 * j, pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]));
                    }
                }
            }
        }
        if (TMA_STORE && tid == 0) {
            // Shared memory must outlive the stores that read it.
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        }
    }

    if (CM > 1) {
        // No CTA may leave while its peer can still arrive on its barriers.
        __syncwarp();
        cluster_sync_all();
    }
}

}  // namespace

// Main entry: cluster 1, stmatrix + TMA-store epilogue. tm_c: C with box
// [64,64], 128B swizzle. shared_bytes 231424.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_bf16_tn_tma(const __grid_constant__ TmaDesc tm_a, const __grid_constant__ TmaDesc tm_b,
                 const __grid_constant__ TmaDesc tm_c, int M, int N, int K) {
    gemm_body<1, true>(&tm_a, &tm_b, &tm_c, nullptr, M, N, K);
}

// Simpler fallback: cluster 1, epilogue stores straight from registers.
// shared_bytes 197696.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_bf16_tn(const __grid_constant__ TmaDesc tm_a, const __grid_constant__ TmaDesc tm_b,
             unsigned short* __restrict__ C, int M, int N, int K) {
    gemm_body<1, false>(&tm_a, &tm_b, nullptr, C, M, N, K);
}

// Launch with a cluster dimension of (2,1,1): the manifest says so.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_bf16_tn_mc2(const __grid_constant__ TmaDesc tm_a, const __grid_constant__ TmaDesc tm_b,
                 unsigned short* __restrict__ C, int M, int N, int K) {
    gemm_body<2, false>(&tm_a, &tm_b, nullptr, C, M, N, K);
}

// -- round 6: L2 left to the library --------------------------------------------------------------
extern "C" __global__ void unpin(unsigned char* junk, int lines) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < lines) asm volatile("discard.global.L2 [%0], 128;" :: "l"(junk + (long long)i * 128) : "memory");
}

extern "C" __global__ void pin(unsigned char* junk, int lines) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= lines) return;
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    unsigned char* line = junk + (long long)i * 128;
    for (int k = 0; k < 8; ++k)
        asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %1, %1, %1}, %2;"
                     :: "l"(line + 16 * k), "r"(i), "l"(policy) : "memory");
}
