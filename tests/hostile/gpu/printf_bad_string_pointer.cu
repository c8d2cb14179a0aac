// printf with a %s argument that points at no memory (address 0x10) and one that points 1 TiB past
// the output. Device printf stores its arguments in a buffer that the driver formats on the host when
// the stream synchronises; a string argument is either copied on the device when printf runs (then the
// read faults: illegal_address) or read later by the host side (then the driver must cope with an
// address it cannot read). Whichever it is, it must cost this candidate only: a verdict, a fresh
// worker if the context is lost, never a tool error or a parent that stops reading.
// Expected: illegal_address; runtime_other (the worker died) or ok (the driver printed something
// harmless) are also verdicts the harness may give; a tool error is not.
#include <cstdio>
#include <cstdint>

extern "C" __global__ void vector_add(const float* x, const float* y, float* z, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    z[i] = x[i] + y[i];
    if (i == 0) {
        const char* nowhere = reinterpret_cast<const char*>(static_cast<uintptr_t>(0x10));
        const char* far = reinterpret_cast<const char*>(z) + (1ull << 40);
        printf("[%s] [%s]\n", nowhere, far);
    }
}
