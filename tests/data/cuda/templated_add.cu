// Written for these tests: a templated kernel, as C++ libraries write them. Its entry is the
// C++ mangled name of the instance (_Z8add_tileILi256EEvPKfS1_Pfi), not "add_tile".
template <int BLOCK>
__global__ void add_tile(const float* x, const float* y, float* z, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) z[i] = x[i] + y[i];
}

template __global__ void add_tile<256>(const float*, const float*, float*, int);
