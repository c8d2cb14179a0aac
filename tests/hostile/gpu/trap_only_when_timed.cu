// Correct in the trials, a fault when timed: with the run counter of slow_only_when_timed (a record
// past Z's guard), a correct add that, from the first warm-up round on, has one thread execute `trap`.
// The fault is sticky and comes in the timing step, after every trial passed and with the size's
// result not yet written: the verdict must be the fault's (runtime_other), with the worker's fatal
// in the evidence, never a tool error and never the trials' `ok`.
// Runs at the headline size (timed).
// Expected: runtime_other; an honest time if the record does not survive between runs.
#define STASH_MAGIC 0x51AC0104u

// ---- Run state: what every run of this candidate shares, and what outlives a run ----------------
// Module globals (restored to their loaded image, all zero, before every run: the harness's own
// restore is this kernel's per-run reset).
__device__ unsigned g_ticket;               // the first block to take a ticket decides for the run
__device__ unsigned g_done;                 // blocks finished; the last one updates the stash
__device__ unsigned g_ready;                // set once the decision is published
__device__ unsigned g_decision;

// What outlives a run: a record 4 KiB past the end of Z's 64 KiB after-guard. At the headline size
// Z's buffer is 64 MiB + 128 KiB of guards, which PyTorch's caching allocator rounds up to a 2 MiB
// multiple: 896 KiB at the end of that block belong to no tensor, so nothing re-initialises, reads or
// checks them, and the same arena (the same address) serves every run of a size.
struct Stash {
    unsigned magic;
    int n;
    unsigned long long zaddr;               // the record is ours only at this Z and this N
    unsigned count;                         // runs finished
    unsigned flags;
    unsigned long long last_end;            // %globaltimer when the last block of the previous run ended
    unsigned long long min_gap;             // smallest gap between runs seen after the trials
    unsigned long long last_gap;
};

static __device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ __forceinline__ volatile Stash* stash_of(float* z, int n) {
    const unsigned long long end = reinterpret_cast<unsigned long long>(z) + 4ull * (unsigned)n + 65536ull + 4096ull;
    return reinterpret_cast<volatile Stash*>((end + 63ull) & ~63ull);
}

static __device__ __forceinline__ bool stash_valid(volatile Stash* s, float* z, int n) {
    return s->magic == STASH_MAGIC && s->n == n && s->zaddr == reinterpret_cast<unsigned long long>(z);
}

// The first block to start computes the run's decision with decide(); every block gets it.
template <class Decide>
static __device__ __forceinline__ unsigned run_decision(Decide decide) {
    __shared__ unsigned s_decision;
    if (threadIdx.x == 0) {
        unsigned d;
        if (atomicAdd(&g_ticket, 1u) == 0u) {
            d = decide();
            atomicExch(&g_decision, d);
            __threadfence();
            atomicExch(&g_ready, 1u);
        } else {
            while (*(volatile unsigned*)&g_ready == 0u) __nanosleep(64);
            __threadfence();
            d = *(volatile unsigned*)&g_decision;
        }
        s_decision = d;
    }
    __syncthreads();
    return s_decision;
}

// After the block's work: the last block of the run calls finish() (it sees every block's writes).
template <class Finish>
static __device__ __forceinline__ void run_end(Finish finish) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&g_done, 1u) == gridDim.x - 1) {
            __threadfence();
            finish();
            __threadfence();
        }
    }
}
// ---------------------------------------------------------------------------------------------------

#define CHEAT 1u
#define TRAP 2u

extern "C" __global__ void __launch_bounds__(256) vector_add(const float* __restrict__ x,
                                                             const float* __restrict__ y, float* z, int n) {
    volatile Stash* st = stash_of(z, n);
    const unsigned decision = run_decision([&]() -> unsigned {
        const unsigned c = stash_valid(st, z, n) ? st->count : 0u;
        return c >= 3u ? TRAP : 0u;
    });
    if ((decision & TRAP) && blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) asm volatile("trap;");
    if (!(decision & CHEAT)) {
        const long long stride = (long long)gridDim.x * blockDim.x;
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) z[i] = x[i] + y[i];
    }
    run_end([&]() {
        const bool ours = stash_valid(st, z, n);
        st->count = (ours ? st->count : 0u) + 1u;
        st->n = n;
        st->zaddr = reinterpret_cast<unsigned long long>(z);
        st->magic = STASH_MAGIC;
    });
}
