// A printf flood: a correct add in which every thread prints a 120-character line, 65536 lines
// (7.5 MiB) a launch, far more than the device's 1 MiB printf buffer holds (the rest is dropped on
// the device) and repeated in every trial. Kernel output goes to the worker's stderr, which the parent
// keeps to its first 8 KiB and last 56 KiB; nothing printed may reach the protocol stream, stall the
// worker on a full pipe, or cost more than the candidate's own time.
// Expected: ok.
#include <cstdio>

extern "C" __global__ void vector_add(const float* x, const float* y, float* z, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float a = x[i], b = y[i];
    z[i] = a + b;
    printf("element %8d of block %6d: %+.6e + %+.6e -- padding padding padding padding padding padding\n",
           i, blockIdx.x, a, b);
}
