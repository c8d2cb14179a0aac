// Control: CUDA C++ with CUDA's own headers (angle brackets and quotes) must still compile.
#include <cuda_bf16.h>
#include "cuda_fp16.h"
#include <cstdint>

extern "C" __global__ void vector_add(const float* x, const float* y, float* z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = x[i] + y[i];
}
