// Hides the path of an included file behind macros (with a line continuation and a digraph for '#'),
// so a check that only reads `#include "..."` lines would not see it.
#define STR(x) #x
#define PATH(x) STR(x)
#define SECRET /etc/host\
name
%:include PATH(SECRET)

extern "C" __global__ void vector_add(const float* x, const float* y, float* z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = x[i] + y[i];
}
