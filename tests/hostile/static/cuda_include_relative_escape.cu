// Climbs out of the compile folder with a relative include.
#include "../../../../../../../../etc/passwd"

extern "C" __global__ void vector_add(const float* x, const float* y, float* z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = x[i] + y[i];
}
