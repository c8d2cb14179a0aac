// Attention backward for Hopper (sm_90a), three launches in order:
//   attn_bwd_pre   Delta[r] = sum_d dO[r,d] * O[r,d] (f32), and zeroes the f32 dQ accumulator.
//   attn_bwd_main  one CTA per (128-key tile, b*h): dK, dV for its keys, and its share of dQ added
//                  into the f32 accumulator with red.global.add.v4.f32.
//   attn_bwd_post  dQ = bf16(scale * accumulator).
//   Q, K, V, O, dO, dQ, dK, dV: [B, H, S, 128] bf16;  LSE: [B, H, S] f32 (natural log).
//   ATTN_CAUSAL = 1 keeps key j <= query i; the causal task ships this same file with that switch set
//   (scripts/build_attention.sh writes it).
//
// attn_bwd_main, 384 threads:
//   warpgroup 0  producer: one thread loads the K and V tiles once (TMA), then for every 64-query tile
//                Q, dO (TMA) and the tile's LSE and Delta rows (bulk copies) into a 2-stage ring.
//   warpgroups 1, 2  consumers: each owns 64 of the 128 keys and keeps dK, dV (64 x 128 f32) in
//                registers. Per query tile, with transposed scores so that P^T and dS^T land in the
//                register layout of a wgmma A operand:
//                  S^T  = K Q^T          (m64n64k16, both operands K-major smem)
//                  dP^T = V dO^T         (same)
//                  P^T  = exp2(S^T * scale*log2e - LSE*log2e)          [causal: 0 above the diagonal]
//                  dV  += P^T dO         (m64n128k16, A = registers, dO MN-major smem)
//                  dS^T = P^T o (dP^T - Delta)
//                  dK  += dS^T Q         (A = registers, Q MN-major smem)
//                  dS^T is stored to smem (128B-swizzled, double-buffered) and, after a barrier of
//                  both consumer warpgroups, dQ[:, 64w..64w+63] = dS K[:, 64w..] (m64n64k16, both
//                  operands MN-major smem), added to the f32 accumulator.
//                dK is scaled by `scale` at the end; dQ by attn_bwd_post.
//   The f32 dQ accumulator is kept in wgmma fragment order (each 64-query tile is 8192 floats laid out
//   [d-half][column group][thread][4]) so that every warp's reduction covers 512 contiguous bytes.

#ifndef ATTN_CAUSAL
#define ATTN_CAUSAL 0
#endif
// 1: store dS (not dS^T) K-major for the dQ product and read it without the A transpose (alternative
// layout, 16-bit scattered stores); 0: store dS^T MN-major with 32-bit stores (default).
#ifndef ATTN_BWD_DS_KMAJOR
#define ATTN_BWD_DS_KMAJOR 0
#endif

#if ATTN_CAUSAL
#define ATTN_BWD_PRE attn_bwd_pre_causal
#define ATTN_BWD_MAIN attn_bwd_main_causal
#define ATTN_BWD_POST attn_bwd_post_causal
#else
#define ATTN_BWD_PRE attn_bwd_pre
#define ATTN_BWD_MAIN attn_bwd_main
#define ATTN_BWD_POST attn_bwd_post
#endif

typedef unsigned int u32;
typedef unsigned long long u64;

struct alignas(64) TmaDesc { char bytes[128]; };

#define DEVI __device__ __forceinline__

// ---------------------------------------------------------------- PTX helpers

DEVI u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
DEVI u32 dynamic_smem_bytes() {
  u32 n;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
  return n;
}

DEVI void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
DEVI void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
DEVI void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
DEVI void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
DEVI u32 mbar_try_wait(u32 bar, u32 parity) {
  u32 done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done;
}
// Returns once the phase with this parity has completed.
DEVI void mbar_wait(u32 bar, u32 parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
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

DEVI void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
DEVI void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
DEVI void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of accumulator registers across a wgmma wait.
template <int N>
DEVI void reg_fence(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

DEVI void setmaxnreg_dec24() { asm volatile("setmaxnreg.dec.sync.aligned.u32 24;" ::: "memory"); }
DEVI void setmaxnreg_inc240() { asm volatile("setmaxnreg.inc.sync.aligned.u32 240;" ::: "memory"); }

// Shared-memory matrix descriptor for a 128B-swizzled operand. lbo: byte distance between 64-element
// chunks along M/N (MN-major operands only); sbo: byte distance between groups of 8 rows (1024 here).
DEVI u64 smem_desc(u32 addr, u32 lbo, u32 sbo) {
  return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32) | (1ull << 62);
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

// 1-D bulk copy global -> shared completing on an mbarrier (size a multiple of 16 bytes).
DEVI void bulk_load(u32 dst, const void* src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"((u64)src), "r"(bytes), "r"(bar)
               : "memory");
}
DEVI void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
DEVI void named_bar_sync(u32 id, u32 threads) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory"); }
DEVI void st_shared_u16(u32 addr, unsigned short v) {
  asm volatile("st.shared.u16 [%0], %1;" ::"r"(addr), "h"(v) : "memory");
}
DEVI void st_shared_u32(u32 addr, u32 v) { asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory"); }
DEVI float2 ld_shared_f2(u32 addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}
DEVI void red_add_v4(float* gaddr, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(gaddr), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
}
DEVI float bf16lo(u32 w) { return __uint_as_float(w << 16); }
DEVI float bf16hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }

// ---------------------------------------------------------------- wgmma wrappers (operand lists spelled out: inline asm takes no arrays)

// D(64x64) (+)= A(smem, K-major) * B(smem, K-major)
template <int ScaleD>
DEVI void wgmma_ss_n64(float (&d)[32], u64 desc_a, u64 desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      :
      "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "n"(ScaleD)
      : "memory");
}

// D(64x64) (+)= A(smem, MN-major) * B(smem, MN-major)
template <int ScaleD>
DEVI void wgmma_ss_n64_tt(float (&d)[32], u64 desc_a, u64 desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 1, 1;\n}\n"
      :
      "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "n"(ScaleD)
      : "memory");
}

// D(64x64) (+)= A(smem, K-major) * B(smem, MN-major)
template <int ScaleD>
DEVI void wgmma_ss_n64_nt(float (&d)[32], u64 desc_a, u64 desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 1;\n}\n"
      :
      "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "n"(ScaleD)
      : "memory");
}

// D(64x128) += A(registers) * B(smem, MN-major)
DEVI void wgmma_rs_n128_tb(float (&d)[64], u32 a0, u32 a1, u32 a2, u32 a3, u64 desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      :
      "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "n"(1)
      : "memory");
}


// ---------------------------------------------------------------- preprocess and postprocess

// Delta[r] = sum_d dO[r, d] * O[r, d]; 16 threads a row, 16 rows a block. The block also zeroes its
// share of the f32 dQ accumulator (2048 floats, the same element count as its 16 rows).
extern "C" __global__ void __launch_bounds__(256)
    ATTN_BWD_PRE(const unsigned short* __restrict__ O, const unsigned short* __restrict__ dO,
                 float* __restrict__ Delta, float* __restrict__ dQacc) {
  const size_t row = (size_t)blockIdx.x * 16 + (threadIdx.x >> 4);
  const int part = threadIdx.x & 15;
  const uint4 o = *reinterpret_cast<const uint4*>(O + row * 128 + part * 8);
  const uint4 g = *reinterpret_cast<const uint4*>(dO + row * 128 + part * 8);
  float acc = bf16lo(o.x) * bf16lo(g.x);
  acc = fmaf(bf16hi(o.x), bf16hi(g.x), acc);
  acc = fmaf(bf16lo(o.y), bf16lo(g.y), acc);
  acc = fmaf(bf16hi(o.y), bf16hi(g.y), acc);
  acc = fmaf(bf16lo(o.z), bf16lo(g.z), acc);
  acc = fmaf(bf16hi(o.z), bf16hi(g.z), acc);
  acc = fmaf(bf16lo(o.w), bf16lo(g.w), acc);
  acc = fmaf(bf16hi(o.w), bf16hi(g.w), acc);
  acc += __shfl_xor_sync(0xffffffffu, acc, 8);
  acc += __shfl_xor_sync(0xffffffffu, acc, 4);
  acc += __shfl_xor_sync(0xffffffffu, acc, 2);
  acc += __shfl_xor_sync(0xffffffffu, acc, 1);
  if (part == 0) Delta[row] = acc;
  float4* zero = reinterpret_cast<float4*>(dQacc + (size_t)blockIdx.x * 2048);
  zero[threadIdx.x] = make_float4(0.f, 0.f, 0.f, 0.f);
  zero[threadIdx.x + 256] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// dQ = bf16(scale * accumulator), undoing the fragment order: one float4 holds rows q, q + 8 and
// columns d, d + 1 of one thread's accumulator.
extern "C" __global__ void __launch_bounds__(256)
    ATTN_BWD_POST(const float* __restrict__ dQacc, unsigned short* __restrict__ dQ, float scale) {
  const size_t f = (size_t)blockIdx.x * 256 + threadIdx.x;
  const size_t tile = f >> 11;  // 2048 float4 per 64-query tile
  const int w = (int)(f & 2047);
  const int half = w >> 10, group = (w >> 7) & 7, thread = w & 127;
  const int lane = thread & 31;
  const int q = (thread >> 5) * 16 + (lane >> 2);
  const int d = 64 * half + 8 * group + 2 * (lane & 3);
  const float4 v = reinterpret_cast<const float4*>(dQacc)[f];
  const size_t row = tile * 64 + q;
  *reinterpret_cast<u32*>(dQ + row * 128 + d) = pack_bf16(v.x * scale, v.y * scale);
  *reinterpret_cast<u32*>(dQ + (row + 8) * 128 + d) = pack_bf16(v.z * scale, v.w * scale);
}

// ---------------------------------------------------------------- main kernel

namespace bwd {
constexpr int BN = 128;                   // keys per CTA (64 per consumer warpgroup)
constexpr int BM = 64;                    // queries per step
constexpr u32 KV_CHUNK = 128 * 64 * 2;    // one TMA box of K or V: 128 keys x 64 dims
constexpr u32 KV_TILE = 2 * KV_CHUNK;
constexpr u32 Q_CHUNK = 64 * 64 * 2;      // one TMA box of Q or dO: 64 queries x 64 dims
constexpr u32 Q_TILE = 2 * Q_CHUNK;
constexpr u32 DS_TILE = 128 * 64 * 2;     // dS^T: 128 keys x 64 queries, 128 bytes a row
constexpr u32 OFF_K = 0;
constexpr u32 OFF_V = KV_TILE;
constexpr u32 OFF_Q = 2 * KV_TILE;         // Q[stage]
constexpr u32 OFF_DO = OFF_Q + 2 * Q_TILE;  // dO[stage]
constexpr u32 OFF_DS = OFF_DO + 2 * Q_TILE;  // dS^T[step parity]
constexpr u32 OFF_LSE = OFF_DS + 2 * DS_TILE;  // LSE[stage]: 64 floats
constexpr u32 OFF_DELTA = OFF_LSE + 2 * 256;   // Delta[stage]: 64 floats
constexpr u32 OFF_BAR = OFF_DELTA + 2 * 256;
constexpr u32 NUM_BARS = 5;                // K/V full; step full[2]; step empty[2]
constexpr u32 SMEM_BYTES = OFF_BAR + NUM_BARS * 8 + 1024;
constexpr u32 STEP_BYTES = 2 * Q_TILE + 2 * 256;
constexpr u32 CONSUMER_WARPS = 8;
static_assert(SMEM_BYTES <= 232448, "over the 227 KiB a block can have");
}  // namespace bwd

extern "C" __global__ void __launch_bounds__(384, 1)
    ATTN_BWD_MAIN(const __grid_constant__ TmaDesc tmQ, const __grid_constant__ TmaDesc tmK,
                  const __grid_constant__ TmaDesc tmV, const __grid_constant__ TmaDesc tmdO,
                  const float* __restrict__ LSE, const float* __restrict__ Delta, float* __restrict__ dQacc,
                  unsigned short* __restrict__ dK, unsigned short* __restrict__ dV, int S, float scale) {
  using namespace bwd;
  extern __shared__ unsigned char smem_raw[];
  if (dynamic_smem_bytes() < SMEM_BYTES) __trap();  // launched with less shared memory than this layout needs
  const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const u32 sK = base + OFF_K, sV = base + OFF_V, sQ = base + OFF_Q, sdO = base + OFF_DO, sDS = base + OFF_DS;
  const u32 sLSE = base + OFF_LSE, sDelta = base + OFF_DELTA;
  const u32 bar_kv = base + OFF_BAR;
  auto full_q = [&](int st) { return bar_kv + 8u * (1 + st); };
  auto empty_q = [&](int st) { return bar_kv + 8u * (3 + st); };

  const int jt = blockIdx.x;  // key tile; causal: tile 0 has the most query tiles and starts first
  const int bh = blockIdx.y;
  const int nq = S / BM;
  const int n_steps = ATTN_CAUSAL ? (nq - 2 * jt) : nq;
  // Step `it` visits query tile 2*jt + it (wrapping when not causal), so the CTAs of one head start at
  // different query tiles and their dQ reductions do not all land on the same addresses at once.
  auto q_tile = [&](int it) {
    int i = 2 * jt + it;
    if (!ATTN_CAUSAL && i >= nq) i -= nq;
    return i;
  };
  const int warpgroup = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128), 0);

  if (threadIdx.x == 0) {
    mbar_init(bar_kv, 1);
    for (int st = 0; st < 2; ++st) {
      mbar_init(full_q(st), 1);
      mbar_init(empty_q(st), CONSUMER_WARPS);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    // ------------------------------------------------ producer
    setmaxnreg_dec24();
    if (threadIdx.x == 0) {
      tma_prefetch_desc(&tmQ);
      tma_prefetch_desc(&tmK);
      tma_prefetch_desc(&tmV);
      tma_prefetch_desc(&tmdO);
      const int kv_row = bh * S + jt * BN;
      mbar_expect_tx(bar_kv, 2 * KV_TILE);
      tma_load_2d(sK, &tmK, 0, kv_row, bar_kv);
      tma_load_2d(sK + KV_CHUNK, &tmK, 64, kv_row, bar_kv);
      tma_load_2d(sV, &tmV, 0, kv_row, bar_kv);
      tma_load_2d(sV + KV_CHUNK, &tmV, 64, kv_row, bar_kv);
      for (int it = 0; it < n_steps; ++it) {
        const int st = it & 1;
        const u32 phase = (it >> 1) & 1;
        const int q_row = bh * S + q_tile(it) * BM;
        if (it >= 2) mbar_wait(empty_q(st), phase ^ 1);
        mbar_expect_tx(full_q(st), STEP_BYTES);
        tma_load_2d(sQ + st * Q_TILE, &tmQ, 0, q_row, full_q(st));
        tma_load_2d(sQ + st * Q_TILE + Q_CHUNK, &tmQ, 64, q_row, full_q(st));
        tma_load_2d(sdO + st * Q_TILE, &tmdO, 0, q_row, full_q(st));
        tma_load_2d(sdO + st * Q_TILE + Q_CHUNK, &tmdO, 64, q_row, full_q(st));
        bulk_load(sLSE + st * 256, LSE + q_row, 256, full_q(st));
        bulk_load(sDelta + st * 256, Delta + q_row, 256, full_q(st));
      }
    }
  } else {
    // ------------------------------------------------ consumers
    setmaxnreg_inc240();
    const int cw = warpgroup - 1;  // keys 64cw..64cw+63 of the tile
    const int tw = threadIdx.x & 127;
    const int lane = tw & 31;
    const int r0 = (tw >> 5) * 16 + (lane >> 2);  // this thread's keys r0 and r0 + 8 of the 64
    const int c0 = 2 * (lane & 3);                // and query columns 8j + c0, 8j + c0 + 1
    const float sl2 = scale * 1.4426950408889634f;
    const float log2e = 1.4426950408889634f;

    float dv[64], dk[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      dv[i] = 0.f;
      dk[i] = 0.f;
    }
    const u64 desc_k_a = smem_desc(sK + cw * (64 * 128), 16, 1024);  // this warpgroup's 64 keys, K-major
    const u64 desc_v_a = smem_desc(sV + cw * (64 * 128), 16, 1024);
    const u64 desc_k_b = smem_desc(sK + cw * KV_CHUNK, KV_CHUNK, 1024);  // K[:, 64cw..64cw+63], MN-major
    const int ds_row = 64 * cw + r0;
    float* acc_base = dQacc + (size_t)(cw * 8 * 128 + tw) * 4;

    mbar_wait(bar_kv, 0);
    for (int it = 0; it < n_steps; ++it) {
      const int st = it & 1;
      const u32 phase = (it >> 1) & 1;
      const u32 sQs = sQ + st * Q_TILE, sdOs = sdO + st * Q_TILE;
      mbar_wait(full_q(st), phase);

      float s[32], dp[32];
      u32 pa[16], dsa[16];
      // S^T = K Q^T and dP^T = V dO^T, two groups in flight.
      const u64 desc_q_b = smem_desc(sQs, 16, 1024), desc_do_b = smem_desc(sdOs, 16, 1024);
      wgmma_fence();
      wgmma_ss_n64<0>(s, desc_k_a, desc_q_b);
#pragma unroll
      for (int kk = 1; kk < 8; ++kk)
        wgmma_ss_n64<1>(s, desc_k_a + (u64)(((kk >> 2) * KV_CHUNK + (kk & 3) * 32) >> 4),
                        desc_q_b + (u64)(((kk >> 2) * Q_CHUNK + (kk & 3) * 32) >> 4));
      wgmma_commit();
      wgmma_ss_n64<0>(dp, desc_v_a, desc_do_b);
#pragma unroll
      for (int kk = 1; kk < 8; ++kk)
        wgmma_ss_n64<1>(dp, desc_v_a + (u64)(((kk >> 2) * KV_CHUNK + (kk & 3) * 32) >> 4),
                        desc_do_b + (u64)(((kk >> 2) * Q_CHUNK + (kk & 3) * 32) >> 4));
      wgmma_commit();
      wgmma_wait<1>();
      reg_fence(s);

      // P^T = exp2(S^T * scale * log2e - LSE * log2e), while dP^T is still in flight.
      const u32 lse_addr = sLSE + st * 256 + c0 * 4;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 l = ld_shared_f2(lse_addr + 32 * j);
        const float lx = l.x * log2e, ly = l.y * log2e;
        s[4 * j + 0] = fast_exp2(fmaf(s[4 * j + 0], sl2, -lx));
        s[4 * j + 1] = fast_exp2(fmaf(s[4 * j + 1], sl2, -ly));
        s[4 * j + 2] = fast_exp2(fmaf(s[4 * j + 2], sl2, -lx));
        s[4 * j + 3] = fast_exp2(fmaf(s[4 * j + 3], sl2, -ly));
      }
      if (ATTN_CAUSAL && it < 2) {
        // Query tiles 2jt and 2jt+1 straddle this key tile's diagonal: zero key > query.
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = ds_row + 8 * (e >> 1);
            const int query = 64 * it + 8 * j + c0 + (e & 1);
            if (key > query) s[4 * j + e] = 0.f;
          }
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        pa[4 * kk + 0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
        pa[4 * kk + 1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
        pa[4 * kk + 2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
        pa[4 * kk + 3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
      }

      // dV += P^T dO: k-step kk covers queries 16kk..16kk+15.
      const u64 desc_do_mn = smem_desc(sdOs, Q_CHUNK, 1024);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_rs_n128_tb(dv, pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3],
                         desc_do_mn + (u64)((kk * 2048) >> 4));
      wgmma_commit();
      wgmma_wait<1>();
      reg_fence(dp);

      // dS^T = P^T o (dP^T - Delta), while dV is in flight.
      const u32 delta_addr = sDelta + st * 256 + c0 * 4;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 d = ld_shared_f2(delta_addr + 32 * j);
        dp[4 * j + 0] = s[4 * j + 0] * (dp[4 * j + 0] - d.x);
        dp[4 * j + 1] = s[4 * j + 1] * (dp[4 * j + 1] - d.y);
        dp[4 * j + 2] = s[4 * j + 2] * (dp[4 * j + 2] - d.x);
        dp[4 * j + 3] = s[4 * j + 3] * (dp[4 * j + 3] - d.y);
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        dsa[4 * kk + 0] = pack_bf16(dp[8 * kk + 0], dp[8 * kk + 1]);
        dsa[4 * kk + 1] = pack_bf16(dp[8 * kk + 2], dp[8 * kk + 3]);
        dsa[4 * kk + 2] = pack_bf16(dp[8 * kk + 4], dp[8 * kk + 5]);
        dsa[4 * kk + 3] = pack_bf16(dp[8 * kk + 6], dp[8 * kk + 7]);
      }

      // dK += dS^T Q.
      const u64 desc_q_mn = smem_desc(sQs, Q_CHUNK, 1024);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_rs_n128_tb(dk, dsa[4 * kk], dsa[4 * kk + 1], dsa[4 * kk + 2], dsa[4 * kk + 3],
                         desc_q_mn + (u64)((kk * 2048) >> 4));
      wgmma_commit();

      const u32 ds_buf = sDS + (it & 1) * DS_TILE;
      float dq[32];
#if ATTN_BWD_DS_KMAJOR
      // dS as [2 key halves][64 queries][64 keys], 128B-swizzled: element (q, key) of half kh at
      // q*128 + (((key%64)/8) ^ (q&7))*16 + (key%8)*2. This warpgroup writes half cw.
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int key = r0 + 8 * (r & 1);
          const int q = 16 * kk + c0 + 8 * (r >> 1);
          const u32 w = dsa[4 * kk + r];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int qe = q + e;
            const u32 addr = ds_buf + cw * (64 * 128) + qe * 128 + ((((u32)key >> 3) ^ (u32)(qe & 7)) << 4) + (key & 7) * 2;
            st_shared_u16(addr, (unsigned short)(e ? (w >> 16) : (w & 0xffffu)));
          }
        }
      fence_proxy_async_smem();
      named_bar_sync(1, 256);  // both halves of dS written
      const u64 desc_ds = smem_desc(ds_buf, 16, 1024);
      wgmma_fence();
      wgmma_ss_n64_nt<0>(dq, desc_ds, desc_k_b);
#pragma unroll
      for (int kk = 1; kk < 8; ++kk)
        wgmma_ss_n64_nt<1>(dq, desc_ds + (u64)((((kk >> 2) * (64 * 128)) + (kk & 3) * 32) >> 4),
                           desc_k_b + (u64)((kk * 2048) >> 4));
#else
      // dS^T to smem in the 128B-swizzled layout a TMA box would have (16-byte column group g of row r
      // sits at g ^ (r & 7)); rows ds_row and ds_row + 8 share r & 7.
      const u32 ds_swz = (u32)(r0 & 7);
      const u32 row_a = ds_buf + ds_row * 128 + c0 * 2, row_b = row_a + 8 * 128;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const u32 g0 = ((2 * kk) ^ ds_swz) << 4, g1 = ((2 * kk + 1) ^ ds_swz) << 4;
        st_shared_u32(row_a + g0, dsa[4 * kk + 0]);
        st_shared_u32(row_b + g0, dsa[4 * kk + 1]);
        st_shared_u32(row_a + g1, dsa[4 * kk + 2]);
        st_shared_u32(row_b + g1, dsa[4 * kk + 3]);
      }
      fence_proxy_async_smem();
      named_bar_sync(1, 256);  // both halves of dS^T written

      // dQ[:, 64cw..64cw+63] = dS K[:, 64cw..]: A = dS^T smem read MN-major, k-step kk = keys 16kk...
      const u64 desc_ds = smem_desc(ds_buf, DS_TILE, 1024);
      wgmma_fence();
      wgmma_ss_n64_tt<0>(dq, desc_ds, desc_k_b);
#pragma unroll
      for (int kk = 1; kk < 8; ++kk)
        wgmma_ss_n64_tt<1>(dq, desc_ds + (u64)((kk * 2048) >> 4), desc_k_b + (u64)((kk * 2048) >> 4));
#endif
      wgmma_commit();
      wgmma_wait<0>();
      reg_fence(dq);
      reg_fence(dv);
      reg_fence(dk);
      if (lane == 0) mbar_arrive(empty_q(st));

      float* acc = acc_base + (size_t)(bh * nq + q_tile(it)) * 8192;
#pragma unroll
      for (int j = 0; j < 8; ++j) red_add_v4(acc + 512 * j, dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
    }

    // ------------------------------------------------ epilogue: dK = scale * acc, dV = acc
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const size_t key_row = (size_t)bh * S + jt * BN + ds_row + 8 * h;
      u32* out_k = reinterpret_cast<u32*>(dK + key_row * 128 + c0);
      u32* out_v = reinterpret_cast<u32*>(dV + key_row * 128 + c0);
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        out_k[4 * j] = pack_bf16(dk[4 * j + 2 * h] * scale, dk[4 * j + 2 * h + 1] * scale);
        out_v[4 * j] = pack_bf16(dv[4 * j + 2 * h], dv[4 * j + 2 * h + 1]);
      }
    }
  }
}
