// Attention forward with log-sum-exp for Blackwell (sm_100a), fifth-generation tensor cores.
//
//   O[b,h,i,:] = sum_j softmax_j(scale * q_i . k_j) v_j,  LSE[b,h,i] = log sum_j exp(scale * q_i . k_j)
//   Q, K, V, O: [B, H, S, 128] bf16;  LSE: [B, H, S] f32.  Requires S % 128 == 0, D == 128.
//
// One CTA per (128-query tile, b*h), 128 threads (4 warps). Thread t owns query row t of the tile,
// which is TMEM lane t: warp w may only address lanes 32w..32w+31, and an M=128 accumulator puts
// row i in lane i, so every thread reads exactly its own row and the softmax needs no shuffles.
//
// Tensor memory (256 columns, allocated by warp 0):
//   columns   0..127  S = Q K^T for the current key tile (fp32, 128 x 128)
//   columns 128..255  T = P V for the current key tile (fp32, 128 x 128)
// The running output O stays in registers (128 fp32 per thread): after each tile O = O*corr + T.
//
// Per key tile n (thread 0 issues every TMA load and every tcgen05.mma):
//   1. thread 0: wait for K_n/V_n, issue 8 x tcgen05.mma (M128 N128 K16) S = Q K_n^T, commit -> bar_s.
//   2. all: wait bar_s; pass 1 reads S (tcgen05.ld 32x32b.x32, 4 chunks) for the row max; pass 2
//      reads it again, P = exp2(S*scale*log2e - m), row sum, P to bf16 in shared memory in the
//      128B-swizzled K-major layout the MMA reads (same layout TMA produces for Q and K).
//   3. all: fence.proxy.async (generic writes of P -> async proxy), tcgen05 fence, __syncthreads.
//   4. thread 0: 8 x tcgen05.mma T = P V_n (V read MN-major: transpose-B bit), commit -> bar_pv.
//   5. all: wait bar_pv; O = O*corr + T (tcgen05.ld). Thread 0 then refills this K/V stage with tile
//      n+2 (the commit on bar_pv also covers the QK^T product, so both tiles have been read).
// Shared memory (from a 1024-aligned base; each operand tile 1024-aligned for the 128B swizzle):
//   Q  [2 chunks][128 rows][64 dims]               32 KiB  chunk c = head dims 64c..64c+63
//   K  [2 stages][2 chunks][128 keys][64 dims]     64 KiB
//   V  [2 stages][2 chunks][128 keys][64 dims]     64 KiB
//   P  [2 chunks][128 rows][64 keys]               32 KiB  chunk c = keys 64c..64c+63
//   mbarriers: Q full, K/V full per stage, S ready, PV ready; TMEM address slot.

typedef unsigned int u32;
typedef unsigned long long u64;

struct alignas(64) TmaDesc { char bytes[128]; };

#define DEVI __device__ __forceinline__

namespace {

constexpr int BM = 128;                 // query rows per CTA
constexpr int BN = 128;                 // keys per tile
constexpr int HD = 128;                 // head dim
constexpr int STAGES = 2;               // K/V ring depth
constexpr int THREADS = 128;
constexpr u32 CHUNK = 128 * 64 * 2;     // one TMA box: 128 rows x 64 bf16 = 16 KiB
constexpr u32 TILE = 2 * CHUNK;         // 128 rows x 128 bf16 = 32 KiB
constexpr u32 OFF_Q = 0;
constexpr u32 OFF_K = OFF_Q + TILE;
constexpr u32 OFF_V = OFF_K + STAGES * TILE;
constexpr u32 OFF_P = OFF_V + STAGES * TILE;
constexpr u32 OFF_BAR = OFF_P + TILE;
constexpr u32 NUM_BARS = 1 + STAGES + 2;           // Q; K/V full per stage; S ready; PV ready
constexpr u32 OFF_TMEM_SLOT = OFF_BAR + 8 * NUM_BARS;
constexpr u32 SMEM_BYTES = 1024 + OFF_TMEM_SLOT + 16;  // + slack to align the base to 1024
static_assert(SMEM_BYTES <= 232448, "over the 227 KiB a block can have");
constexpr u32 TMEM_COLS = 256;          // S (128 columns) + T (128 columns); a power of two >= 32
constexpr u32 TMEM_S = 0;
constexpr u32 TMEM_T = 128;

// Instruction descriptor, kind::f16: D f32 (bits 4-5 = 1), A bf16 (bits 7-9 = 1), B bf16
// (bits 10-12 = 1), A K-major (bit 15 = 0), N >> 3 in bits 17-22, M >> 4 in bits 24-28.
constexpr u32 IDESC_BASE = (1u << 4) | (1u << 7) | (1u << 10) | ((u32)(BN >> 3) << 17) | ((u32)(BM >> 4) << 24);
constexpr u32 IDESC_QK = IDESC_BASE;                // B = K tile, K-major (head dim contiguous)
constexpr u32 IDESC_PV = IDESC_BASE | (1u << 16);   // B = V tile, MN-major (head dim = N contiguous)

DEVI u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
DEVI u32 dynamic_smem_bytes() {
  u32 n;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
  return n;
}

DEVI void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
DEVI void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
DEVI void mbar_wait(u32 bar, u32 parity) {
  u32 done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// 2-D tiled TMA load (x = innermost coordinate) completing on an mbarrier.
DEVI void tma_load_2d(u32 dst, const TmaDesc* map, int x, int y, u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"((u64)map), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
DEVI void tma_prefetch_desc(const TmaDesc* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"((u64)map) : "memory");
}

// tcgen05 shared-memory descriptor for a 128B-swizzled operand: start address >> 4 (bits 0-13),
// LBO >> 4 (bits 16-29), SBO >> 4 (bits 32-45), fixed 0b001 in bits 46-48, base offset 0 (tiles are
// 1024-aligned), layout type 2 = 128-byte swizzle in bits 61-63.
// K-major: LBO unused (16), SBO = 1024 (8 rows of 128 bytes).
// MN-major: LBO = distance between 64-element blocks along N, SBO = 1024 (8 rows along K).
DEVI u64 sw128_desc(u32 saddr, u32 lbo, u32 sbo) {
  return (u64)((saddr & 0x3FFFF) >> 4) | ((u64)((lbo >> 4) & 0x3FFF) << 16) | ((u64)((sbo >> 4) & 0x3FFF) << 32) |
         ((u64)1 << 46) | ((u64)2 << 61);
}

DEVI void tc_fence_after() { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }
DEVI void tc_fence_before() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }

template <u32 Idesc>
DEVI void tc_mma(u32 d_tmem, u64 a_desc, u64 b_desc, u32 accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),
      "l"(a_desc), "l"(b_desc), "r"(Idesc), "r"(accumulate)
      : "memory");
}

// Arrive once on `bar` when every tcgen05.mma this thread issued so far has completed.
DEVI void tc_commit(u32 bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(bar) : "memory");
}

// 32 lanes x 32 columns of 32 bits: thread t of warp w gets lane 32w + t, columns col..col+31.
DEVI void tmem_ld_x32(u32 taddr, float (&f)[32]) {
  u32 v[32];
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
#pragma unroll
  for (int i = 0; i < 32; ++i) f[i] = __uint_as_float(v[i]);
}

DEVI float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
DEVI float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// Two floats to bf16x2, `lo` in the low half (the lower column index).
DEVI u32 pack_bf16(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
DEVI void st_shared_v4(u32 addr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
DEVI void st_global_v4(void* p, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

#define NEG_INF __int_as_float(0xff800000)

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    attn_fwd(const __grid_constant__ TmaDesc tmQ, const __grid_constant__ TmaDesc tmK,
             const __grid_constant__ TmaDesc tmV, unsigned short* __restrict__ O, float* __restrict__ LSE, int S,
             float scale) {
  extern __shared__ unsigned char smem_raw[];
  if (dynamic_smem_bytes() < SMEM_BYTES) __trap();  // launched with less shared memory than this layout needs
  const u32 raw = smem_addr(smem_raw);
  const u32 base = (raw + 1023u) & ~1023u;
  const u32 sQ = base + OFF_Q, sK = base + OFF_K, sV = base + OFF_V, sP = base + OFF_P;
  const u32 bar_q = base + OFF_BAR;
  const u32 bar_kv0 = bar_q + 8;              // + 8*stage
  const u32 bar_s = bar_kv0 + 8 * STAGES;
  const u32 bar_pv = bar_s + 8;
  const u32 tmem_slot = base + OFF_TMEM_SLOT;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int m_blk = blockIdx.x;
  const int bh = blockIdx.y;
  const int n_blocks = S / BN;
  const int q_row0 = bh * S + m_blk * BM;

  if (tid == 0) {
    mbar_init(bar_q, 1);
    for (int st = 0; st < STAGES; ++st) mbar_init(bar_kv0 + 8 * st, 1);
    mbar_init(bar_s, 1);   // one tcgen05.commit per key tile
    mbar_init(bar_pv, 1);  // one tcgen05.commit per key tile
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (warp == 0) {
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(tmem_slot),
                 "r"(TMEM_COLS)
                 : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
  }
  tc_fence_before();
  __syncthreads();
  tc_fence_after();
  const u32 tmem_base = *reinterpret_cast<const volatile u32*>(smem_raw + (tmem_slot - raw));
  // This warp's lane quarter: lane field in bits 31-16 of a TMEM address.
  const u32 t_row = tmem_base + ((u32)(warp * 32) << 16);

  auto load_kv = [&](int n) {
    const int st = n % STAGES;
    const int kv_row = bh * S + n * BN;
    const u32 bar = bar_kv0 + 8 * st;
    mbar_expect_tx(bar, 2 * TILE);
    tma_load_2d(sK + st * TILE, &tmK, 0, kv_row, bar);
    tma_load_2d(sK + st * TILE + CHUNK, &tmK, 64, kv_row, bar);
    tma_load_2d(sV + st * TILE, &tmV, 0, kv_row, bar);
    tma_load_2d(sV + st * TILE + CHUNK, &tmV, 64, kv_row, bar);
  };

  if (tid == 0) {
    tma_prefetch_desc(&tmQ);
    tma_prefetch_desc(&tmK);
    tma_prefetch_desc(&tmV);
    mbar_expect_tx(bar_q, TILE);
    tma_load_2d(sQ, &tmQ, 0, q_row0, bar_q);
    tma_load_2d(sQ + CHUNK, &tmQ, 64, q_row0, bar_q);
    for (int n = 0; n < STAGES && n < n_blocks; ++n) load_kv(n);
  }

  const float sl2 = scale * 1.4426950408889634f;  // exp(x*scale) = exp2(x*sl2)
  float o[HD];
#pragma unroll
  for (int i = 0; i < HD; ++i) o[i] = 0.f;
  float m_run = NEG_INF, l_run = 0.f;
  const int row = tid;  // row of the query tile = TMEM lane
  // This row's P bytes: row r at r*128 in each 64-key chunk; 16-byte unit u sits at (u ^ (r & 7)).
  const u32 p_row = sP + (u32)row * 128;
  const u32 swz = (u32)(row & 7);

  for (int n = 0; n < n_blocks; ++n) {
    const int st = n % STAGES;
    const u32 kv_parity = (u32)((n / STAGES) & 1);
    const u32 parity = (u32)(n & 1);

    // ---- 1. S = Q K_n^T
    if (tid == 0) {
      if (n == 0) mbar_wait(bar_q, 0);
      mbar_wait(bar_kv0 + 8 * st, kv_parity);
      tc_fence_after();
      const u64 dq = sw128_desc(sQ, 16, 1024);
      const u64 dk = sw128_desc(sK + st * TILE, 16, 1024);
      // Not unrolled: unrolled, the sixteen 64-bit operand descriptors are hoisted out of the key
      // loop and held in registers for the whole kernel next to the 128-float output row.
#pragma unroll 1
      for (int kk = 0; kk < HD / 16; ++kk) {
        // k-step kk: head dims 16kk..16kk+15 = box kk/4, +32 bytes per step inside the 128-byte row.
        const u64 off = (u64)(((kk >> 2) * CHUNK + (kk & 3) * 32) >> 4);
        tc_mma<IDESC_QK>(tmem_base + TMEM_S, dq + off, dk + off, kk > 0 ? 1u : 0u);
      }
      tc_commit(bar_s);
    }
    __syncwarp();

    // ---- 2. online softmax on row `row`
    mbar_wait(bar_s, parity);
    tc_fence_after();
    float mx = m_run;
#pragma unroll
    for (int c = 0; c < BN / 32; ++c) {
      float s[32];
      tmem_ld_x32(t_row + TMEM_S + 32 * c, s);
#pragma unroll
      for (int i = 0; i < 32; ++i) mx = fmaxf(mx, s[i]);
    }
    // A row whose max is still -inf (no finite score) uses offset 0 so nothing becomes NaN.
    const float msc = (mx == NEG_INF) ? 0.f : mx * sl2;
    const float corr = fast_exp2(m_run * sl2 - msc);
    m_run = mx;
    float sum = 0.f;
    // One 32-key chunk at a time (not unrolled): unrolled, ptxas runs the exp2 of several chunks
    // ahead of their shared-memory stores and, next to the 128-float output row, spills.
#pragma unroll 1
    for (int c = 0; c < BN / 32; ++c) {
      float s[32];
      tmem_ld_x32(t_row + TMEM_S + 32 * c, s);
      u32 p[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float p0 = fast_exp2(fmaf(s[2 * i], sl2, -msc));
        const float p1 = fast_exp2(fmaf(s[2 * i + 1], sl2, -msc));
        sum += p0 + p1;
        p[i] = pack_bf16(p0, p1);
      }
      // Keys 32c..32c+31: chunk c/2, 16-byte units 4(c%2)..4(c%2)+3 of this row.
      const u32 chunk = p_row + (u32)(c >> 1) * CHUNK;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const u32 unit = (u32)(4 * (c & 1) + u);
        st_shared_v4(chunk + ((unit ^ swz) << 4), p[4 * u], p[4 * u + 1], p[4 * u + 2], p[4 * u + 3]);
      }
    }
    l_run = l_run * corr + sum;

    // ---- 3. publish P to the async proxy; every thread's S reads are done
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    tc_fence_before();
    __syncthreads();

    // ---- 4. T = P V_n
    if (tid == 0) {
      tc_fence_after();
      const u64 dp = sw128_desc(sP, 16, 1024);
      const u64 dv = sw128_desc(sV + st * TILE, CHUNK, 1024);
      // Not unrolled: unrolled, the sixteen 64-bit operand descriptors are hoisted out of the key
      // loop and held in registers for the whole kernel next to the 128-float output row.
#pragma unroll 1
      for (int kk = 0; kk < BN / 16; ++kk) {
        // A: keys 16kk..16kk+15 = chunk kk/4, +32 bytes inside the row.
        const u64 off_p = (u64)(((kk >> 2) * CHUNK + (kk & 3) * 32) >> 4);
        // B (MN-major): keys 16kk..16kk+15 = 16 rows of 128 bytes further.
        const u64 off_v = (u64)((kk * 16 * 128) >> 4);
        tc_mma<IDESC_PV>(tmem_base + TMEM_T, dp + off_p, dv + off_v, kk > 0 ? 1u : 0u);
      }
      tc_commit(bar_pv);
    }
    __syncwarp();

    // ---- 5. O = O*corr + T
    mbar_wait(bar_pv, parity);
    tc_fence_after();
#pragma unroll
    for (int c = 0; c < HD / 32; ++c) {
      float t[32];
      tmem_ld_x32(t_row + TMEM_T + 32 * c, t);
#pragma unroll
      for (int i = 0; i < 32; ++i) o[32 * c + i] = fmaf(o[32 * c + i], corr, t[i]);
    }
    // Orders these TMEM reads before the next barrier, after which T is overwritten.
    tc_fence_before();
    // Both products that read stage st have completed (bar_pv covers every earlier MMA): refill it.
    if (tid == 0 && n + STAGES < n_blocks) load_kv(n + STAGES);
    __syncwarp();
  }

  // ---- epilogue: O / l in bf16, LSE = (m*scale*log2e + log2 l) * ln 2
  {
    const float inv = 1.f / l_run;
    const size_t row_index = (size_t)q_row0 + row;
    unsigned short* out = O + row_index * HD;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
      st_global_v4(out + 8 * j, pack_bf16(o[8 * j] * inv, o[8 * j + 1] * inv),
                   pack_bf16(o[8 * j + 2] * inv, o[8 * j + 3] * inv), pack_bf16(o[8 * j + 4] * inv, o[8 * j + 5] * inv),
                   pack_bf16(o[8 * j + 6] * inv, o[8 * j + 7] * inv));
    LSE[row_index] = (m_run * sl2 + fast_log2(l_run)) * 0.6931471805599453f;
  }

  tc_fence_before();
  __syncthreads();
  if (warp == 0) {
    tc_fence_after();
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(tmem_base), "r"(TMEM_COLS) : "memory");
  }
}
