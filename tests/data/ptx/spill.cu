// Forty live accumulators under a 32-register cap: ptxas must spill.
extern "C" __global__ void __launch_bounds__(1024, 2) spill(const float* in, float* out, int n) {
  float a[40];
#pragma unroll
  for (int i = 0; i < 40; ++i) a[i] = in[i * n + threadIdx.x];
  for (int k = 0; k < n; ++k) {
#pragma unroll
    for (int i = 0; i < 40; ++i) a[i] = a[i] * a[(i + 1) % 40] + in[k];
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 40; ++i) s += a[i];
  out[threadIdx.x] = s;
}
