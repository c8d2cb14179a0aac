// Vector add, f32: Z = X + Y. Each thread handles four consecutive elements
// with 16-byte loads and stores; the last partial group (N not a multiple of
// 4) falls back to scalar accesses. Requires 16-byte aligned X, Y and Z.

extern "C" __global__ void __launch_bounds__(256)
vector_add(const float* __restrict__ X, const float* __restrict__ Y, float* __restrict__ Z, int N) {
    const long long i = 4ll * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 3 < N) {
        const float4 x = __ldg(reinterpret_cast<const float4*>(X + i));
        const float4 y = __ldg(reinterpret_cast<const float4*>(Y + i));
        float4 z;
        z.x = x.x + y.x;
        z.y = x.y + y.y;
        z.z = x.z + y.z;
        z.w = x.w + y.w;
        *reinterpret_cast<float4*>(Z + i) = z;
    } else {
        for (long long j = i; j < N; ++j) Z[j] = X[j] + Y[j];
    }
}
