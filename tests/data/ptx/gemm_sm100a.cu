// A small Blackwell GEMM tile for the engine's tests: C = A * B^T, bf16 in,
// fp32 accumulate in tensor memory, bf16 out. One CTA of 128 threads computes a
// 128x128 tile: TMA loads 128x64 tiles of A and B under an mbarrier, one thread
// issues tcgen05.mma, tcgen05.commit signals a second mbarrier, and every warp
// reads its 32 lanes of the accumulator back with tcgen05.ld. Compiled with
// nvcc -gencode=arch=compute_100a,code=sm_100a -ptx.
#include <stdint.h>

struct alignas(64) TensorMap {
  uint64_t opaque[16];
};

__device__ static inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ static inline uint64_t smem_desc(uint32_t addr) {
  uint64_t d = 0;
  d |= (uint64_t)((addr & 0x3FFFF) >> 4);
  d |= (uint64_t)(16 >> 4) << 16;    // leading byte offset
  d |= (uint64_t)(1024 >> 4) << 32;  // stride byte offset: 8 rows of 128 bytes
  d |= (uint64_t)1 << 46;            // descriptor version for tcgen05
  d |= (uint64_t)2 << 61;            // 128-byte swizzle
  return d;
}

__device__ static inline void wait_phase(uint32_t bar, uint32_t phase) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}" ::"r"(bar),
      "r"(phase)
      : "memory");
}

extern "C" __global__ void __launch_bounds__(128) gemm(const __grid_constant__ TensorMap tmA,
                                                       const __grid_constant__ TensorMap tmB,
                                                       uint16_t* C, int M, int N, int K) {
  __shared__ alignas(1024) uint16_t sA[128 * 64];
  __shared__ alignas(1024) uint16_t sB[128 * 64];
  __shared__ alignas(8) uint64_t load_bar;
  __shared__ alignas(8) uint64_t mma_bar;
  __shared__ uint32_t tmem_base;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m0 = blockIdx.y * 128, n0 = blockIdx.x * 128;
  const uint32_t load_addr = smem_addr(&load_bar), mma_addr = smem_addr(&mma_bar);

  if (warp == 0) {
    // 128 fp32 columns of tensor memory hold the 128x128 accumulator.
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 128;" ::"r"(
        smem_addr(&tmem_base)));
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;");
  }
  if (tid == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(load_addr));
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(mma_addr));
    asm volatile("fence.proxy.async.shared::cta;");
  }
  asm volatile("tcgen05.fence::before_thread_sync;");
  __syncthreads();
  asm volatile("tcgen05.fence::after_thread_sync;");
  const uint32_t tmem = tmem_base;

  // kind::f16 instruction descriptor: f32 accumulator, bf16 A and B, N=128, M=128.
  const uint32_t idesc = (1u << 4) | (1u << 7) | (1u << 10) | ((128u >> 3) << 17) | ((128u >> 4) << 24);

  uint32_t phase = 0;
  for (int k0 = 0; k0 < K; k0 += 64) {
    if (tid == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(load_addr),
                   "r"(2 * 128 * 64 * 2));
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
          " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_addr(sA)),
          "l"(&tmA), "r"(k0), "r"(m0), "r"(load_addr)
          : "memory");
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
          " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_addr(sB)),
          "l"(&tmB), "r"(k0), "r"(n0), "r"(load_addr)
          : "memory");
    }
    wait_phase(load_addr, phase);
    asm volatile("tcgen05.fence::after_thread_sync;");
    if (tid == 0) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        uint64_t da = smem_desc(smem_addr(sA + kk * 16));
        uint64_t db = smem_desc(smem_addr(sB + kk * 16));
        uint32_t accumulate = (k0 > 0 || kk > 0) ? 1u : 0u;
        asm volatile(
            "{\n"
            ".reg .pred acc;\n"
            "setp.ne.b32 acc, %4, 0;\n"
            "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, acc;\n"
            "}" ::"r"(tmem),
            "l"(da), "l"(db), "r"(idesc), "r"(accumulate));
      }
      asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(
          mma_addr));
    }
    wait_phase(mma_addr, phase);
    asm volatile("tcgen05.fence::after_thread_sync;");
    phase ^= 1;
  }

  // Warp w reads lanes 32w..32w+31 (one row of C each), 8 columns at a time.
  const int row = m0 + warp * 32 + lane;
#pragma unroll 1
  for (int c = 0; c < 128; c += 8) {
    uint32_t v[8];
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x8.b32 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8];"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]), "=r"(v[4]), "=r"(v[5]),
                   "=r"(v[6]), "=r"(v[7])
                 : "r"(tmem + ((uint32_t)(warp * 32) << 16) + c));
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      uint16_t h;
      asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(__uint_as_float(v[j])));
      if (row < M && n0 + c + j < N) C[(size_t)row * N + n0 + c + j] = h;
    }
  }

  asm volatile("tcgen05.fence::before_thread_sync;");
  __syncthreads();
  if (warp == 0) {
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, 128;" ::"r"(tmem));
  }
}
