// Written for these tests: a kernel configured through -D defines, as real builds do.
#ifndef TILE
#error "build with -DTILE=<threads per tile>"
#endif
static_assert(TILE == 64, "this kernel is written for 64-thread tiles");

extern "C" __global__ void fill(float* out) {
#ifdef USE_HALF_VALUE
    out[blockIdx.x * TILE + threadIdx.x] = 0.5f;
#else
    out[blockIdx.x * TILE + threadIdx.x] = 1.0f;
#endif
}
