// Written for these tests: what real CUDA leans on by default. A host constexpr function
// called from device code needs --expt-relaxed-constexpr; the concept needs -std=c++20.
#include <concepts>

constexpr float square(float x) { return x * x; }

template <typename T>
concept Floating = std::floating_point<T>;

template <Floating T>
__device__ T twice(T v) { return v + v; }

extern "C" __global__ void scale(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = twice(square(static_cast<float>(i)));
}
