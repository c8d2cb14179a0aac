// A small Hopper GEMM tile for the engine's tests: C = A * B^T, bf16 in, fp32
// accumulate, bf16 out. One warpgroup computes a 64x128 tile of C; TMA loads
// 64x64 tiles of A and 128x64 tiles of B (128-byte swizzle) into shared
// memory under an mbarrier, and wgmma.mma_async multiplies them. Written to be
// compiled by nvcc -gencode=arch=compute_90a,code=sm_90a -ptx.
// Only <stdint.h>: bf16 values travel as raw 16-bit words, converted with
// cvt.rn.bf16.f32, so the file needs no header beyond the compiler's own.
#include <stdint.h>

struct alignas(64) TensorMap {
  uint64_t opaque[16];
};

__device__ static inline uint64_t smem_desc(const void* p) {
  uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  uint64_t d = 0;
  d |= (uint64_t)((addr & 0x3FFFF) >> 4);
  d |= (uint64_t)(16 >> 4) << 16;    // leading byte offset (unused with swizzle)
  d |= (uint64_t)(1024 >> 4) << 32;  // stride byte offset: 8 rows of 128 bytes
  d |= (uint64_t)1 << 62;            // 128-byte swizzle
  return d;
}

extern "C" __global__ void __launch_bounds__(128) gemm(const __grid_constant__ TensorMap tmA,
                                                       const __grid_constant__ TensorMap tmB,
                                                       uint16_t* C, int M, int N, int K) {
  __shared__ alignas(1024) uint16_t sA[64 * 64];
  __shared__ alignas(1024) uint16_t sB[128 * 64];
  __shared__ alignas(8) uint64_t bar;

  const int tid = threadIdx.x;
  const int m0 = blockIdx.y * 64;
  const int n0 = blockIdx.x * 128;
  uint32_t bar_addr = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));

  if (tid == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_addr));
    asm volatile("fence.proxy.async.shared::cta;");
  }
  __syncthreads();

  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;

  uint32_t phase = 0;
  for (int k0 = 0; k0 < K; k0 += 64) {
    if (tid == 0) {
      uint32_t a_dst = static_cast<uint32_t>(__cvta_generic_to_shared(sA));
      uint32_t b_dst = static_cast<uint32_t>(__cvta_generic_to_shared(sB));
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_addr),
                   "r"((64 + 128) * 64 * 2));
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
          " [%0], [%1, {%2, %3}], [%4];" ::"r"(a_dst),
          "l"(&tmA), "r"(k0), "r"(m0), "r"(bar_addr)
          : "memory");
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
          " [%0], [%1, {%2, %3}], [%4];" ::"r"(b_dst),
          "l"(&tmB), "r"(k0), "r"(n0), "r"(bar_addr)
          : "memory");
    }
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}" ::"r"(bar_addr),
        "r"(phase)
        : "memory");
    phase ^= 1;

    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint64_t da = smem_desc(sA + kk * 16);
      uint64_t db = smem_desc(sB + kk * 16);
      asm volatile(
          "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
          "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
          "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
          "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
          "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
          "%64, %65, 1, 1, 1, 0, 0;"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]),
            "+f"(acc[6]), "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]),
            "+f"(acc[12]), "+f"(acc[13]), "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]),
            "+f"(acc[17]), "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]), "+f"(acc[21]),
            "+f"(acc[22]), "+f"(acc[23]), "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]),
            "+f"(acc[27]), "+f"(acc[28]), "+f"(acc[29]), "+f"(acc[30]), "+f"(acc[31]),
            "+f"(acc[32]), "+f"(acc[33]), "+f"(acc[34]), "+f"(acc[35]), "+f"(acc[36]),
            "+f"(acc[37]), "+f"(acc[38]), "+f"(acc[39]), "+f"(acc[40]), "+f"(acc[41]),
            "+f"(acc[42]), "+f"(acc[43]), "+f"(acc[44]), "+f"(acc[45]), "+f"(acc[46]),
            "+f"(acc[47]), "+f"(acc[48]), "+f"(acc[49]), "+f"(acc[50]), "+f"(acc[51]),
            "+f"(acc[52]), "+f"(acc[53]), "+f"(acc[54]), "+f"(acc[55]), "+f"(acc[56]),
            "+f"(acc[57]), "+f"(acc[58]), "+f"(acc[59]), "+f"(acc[60]), "+f"(acc[61]),
            "+f"(acc[62]), "+f"(acc[63])
          : "l"(da), "l"(db));
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    __syncthreads();
  }

  // Accumulator layout of m64nNk16: warp w owns rows 16w..16w+15; each quad
  // of lanes shares a row, and register pairs step 8 columns.
  const int warp = tid / 32, lane = tid % 32;
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    int row = m0 + warp * 16 + lane / 4 + 8 * ((i / 2) % 2);
    int col = n0 + (i / 4) * 8 + (lane % 4) * 2 + (i % 2);
    uint16_t h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(acc[i]));
    if (row < M && col < N) C[(size_t)row * N + col] = h;
  }
}
