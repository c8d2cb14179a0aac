// Host code in the candidate: a main() that would run a shell command. Only device code is compiled
// (to PTX); host code never runs, so the kernel is judged and nothing else happens.
#include <cstdlib>

extern "C" __global__ void vector_add(const float* x, const float* y, float* z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = x[i] + y[i];
}

int main() {
    return std::system("touch HOSTILE_MARKER");
}
