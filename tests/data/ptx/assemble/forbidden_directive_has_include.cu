// __has_include of a path tells the candidate whether any file exists on the judging machine.
#if __has_include("/root/.ssh/id_rsa")
#define FOUND 1
#endif
extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }
