extern "C" __global__ void k(float* out) {
  out[threadIdx.x] = undefined_thing + 1;
  int x = "str";
}
