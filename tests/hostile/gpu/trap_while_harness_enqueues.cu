// A sticky fault while the harness is still enqueueing PyTorch work. Correct in the trials and in
// warm-up round 0; from warm-up round 1 on, the last launch of the run executes `trap` (a run counter
// past Z's guard, as in trap_only_when_timed). Warm-up rounds after the first are enqueued back to back
// with no wait, and two hundred empty launches before the trap keep the host, not the GPU, the slower
// of the two: the trap runs as soon as it is enqueued, and what the host calls next are PyTorch's
// (the end event, the check, the library's round, the next round's fresh inputs), not the driver calls
// the harness wraps. Whatever call first sees the dead context, the verdict must be the fault's.
// Runs at the headline size (timed).
// Expected: runtime_other, with the worker's fatal in the evidence; never a tool error.
#ifndef TRAP_DELAY_NS
#define TRAP_DELAY_NS 0ull                  // the trap thread waits this long first
#endif
#define STASH_MAGIC 0x51AC0403u

__device__ unsigned g_tails;                // module state: the restore before every run has work to do

struct Stash {
    unsigned magic;
    int n;
    unsigned long long zaddr;               // the record is ours only at this Z and this N
    unsigned count;                         // runs finished
};

static __device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// 4 KiB past the end of Z's 64 KiB after-guard, in the unused end of Z's allocation.
static __device__ __forceinline__ volatile Stash* stash_of(float* z, int n) {
    const unsigned long long end = reinterpret_cast<unsigned long long>(z) + 4ull * (unsigned)n + 65536ull + 4096ull;
    return reinterpret_cast<volatile Stash*>((end + 63ull) & ~63ull);
}

extern "C" __global__ void __launch_bounds__(256) vector_add(const float* __restrict__ x, const float* __restrict__ y,
                                                             float* __restrict__ z, int n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) z[i] = x[i] + y[i];
}

extern "C" __global__ void spacer() {}

extern "C" __global__ void tail(float* z, int n) {
    if (threadIdx.x != 0) return;
    atomicAdd(&g_tails, 1u);
    volatile Stash* st = stash_of(z, n);
    const bool ours = st->magic == STASH_MAGIC && st->n == n && st->zaddr == reinterpret_cast<unsigned long long>(z);
    const unsigned runs = ours ? st->count : 0u;
    if (runs >= 4u) {                       // run 5 on: warm-up round 1 and after
        const unsigned long long t0 = now_ns();
        while (now_ns() - t0 < TRAP_DELAY_NS) __nanosleep(1000);
        asm volatile("trap;");
    }
    st->count = runs + 1u;
    st->n = n;
    st->zaddr = reinterpret_cast<unsigned long long>(z);
    st->magic = STASH_MAGIC;
    __threadfence_system();
}
