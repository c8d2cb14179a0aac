"""Does the harness's L2 flush evict lines a kernel marked to be evicted last?

The timing loop flushes L2 before every run by zeroing a buffer of at least twice its size
(engine/gpu/timing.py). PTX lets a kernel give its own lines an eviction priority
(`createpolicy.fractional.L2::evict_last` with `ld.global.L2::cache_hint`, or
`prefetch.global.L2::evict_last`). If the flush's normal-priority writes do not displace those lines,
a kernel could keep its inputs in L2 from one round into the next and be timed warm, while the library
is timed cold.

Each trial mimics two rounds of the timing loop on one input buffer X: the reset copies an input set
into X, a "prime" kernel reads X with the priority under test, the next round's reset copies a new set
into X, the flush runs, then a plain read of X is timed with CUDA events. The timed read is the same
kernel in every variant; only the prime and the flush differ: `zero_` of a buffer of the harness's
flush size (what engine 0.5.0 did), or the engine's flush (engine/gpu/l2.py), or fixes that were
tried and not kept. Times are given as a multiple of the plain prime after the engine's flush, the
coldest; the flushes' own costs are timed alone.

Usage (on a GPU machine): python benchmarks/l2_flush_probe.py [--trials 41] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

SOURCE = r"""
extern "C" __device__ __forceinline__ float4 load(const float4* p, int how, unsigned long long policy) {
    float4 v;
    if (how == 1) {
        asm volatile("ld.global.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(policy));
    } else {
        asm volatile("ld.global.v4.f32 {%0,%1,%2,%3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    }
    return v;
}

// how: 0 plain loads, 1 loads under an evict_last policy, 2 prefetch.global.L2::evict_last
extern "C" __global__ void prime(const float4* x, long long n, int how, float* sink) {
    unsigned long long policy = 0;
    if (how == 1) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    float acc = 0.f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        if (how == 2) {
            asm volatile("prefetch.global.L2::evict_last [%0];" :: "l"(x + i));
        } else {
            float4 v = load(x + i, how, policy);
            acc += v.x + v.y + v.z + v.w;
        }
    }
    if (acc == 1234.5f) sink[0] = acc;     // never true: keeps the loads
}

// The timed read: plain loads, four in flight per thread, so it is bound by bandwidth rather than latency
// and an L2 hit shows.
extern "C" __global__ void read(const float4* x, long long n, float* sink) {
    float acc = 0.f;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += 4 * stride) {
        float4 v[4];
        #pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = i + k * stride < n ? load(x + i + k * stride, 0, 0) : make_float4(0.f, 0.f, 0.f, 0.f);
        #pragma unroll
        for (int k = 0; k < 4; ++k) acc += v[k].x + v[k].y + v[k].z + v[k].w;
    }
    if (acc == 1234.5f) sink[0] = acc;
}

// Demote every line of a range to normal priority (what a harness could do to the candidate's buffers).
extern "C" __global__ void demote(const char* p, long long bytes) {
    for (long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * 128; i < bytes;
         i += (long long)gridDim.x * blockDim.x * 128)
        asm volatile("applypriority.global.L2::evict_normal [%0], 128;" :: "l"(p + i) : "memory");
}
"""

VARIANTS = {
    # name: (prime how, flush)
    "warm (no flush)": (0, "none"),
    "plain prime, zero_ flush": (0, "zero"),
    "evict_last loads, zero_ flush": (1, "zero"),
    "evict_last prefetch, zero_ flush": (2, "zero"),
    "evict_last loads, zero_ flush + reset persisting L2": (1, "zero+reset"),
    "evict_last loads, zero_ flush + demote X": (1, "zero+demote"),
    "plain prime, engine flush": (0, "engine"),
    "evict_last loads, engine flush": (1, "engine"),
    "evict_last prefetch, engine flush": (2, "engine"),
}
COLD = "plain prime, engine flush"


def flush_cost(fn, stream, trials: int) -> float:
    import torch

    ms = []
    for t in range(trials + 1):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record(stream)
            fn()
            end.record(stream)
        stream.synchronize()
        if t:
            ms.append(start.elapsed_time(end))
    return round(1e3 * statistics.median(ms), 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=41)
    parser.add_argument("--fractions", default="0.25,0.5", help="X's size as fractions of L2")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)

    import cupy as cp
    import torch
    from cuda.bindings import runtime

    from ptxbench.engine.gpu.l2 import L2Flush
    from ptxbench.engine.gpu.protocol import TimingConfig

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = int(props.L2_cache_size)
    module = cp.RawModule(code=SOURCE, options=("-arch=sm_90",))
    prime, read, demote = (module.get_function(n) for n in ("prime", "read", "demote"))
    stream = torch.cuda.Stream(dev)
    cstream = cp.cuda.ExternalStream(stream.cuda_stream)
    sms = props.multi_processor_count
    flush_bytes = TimingConfig().flush_bytes
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device=dev)
    engine_flush = L2Flush(flush_bytes, dev)
    sink = torch.zeros(1, dtype=torch.float32, device=dev)

    def launch(fn, grid, args_):
        with cstream:
            fn((grid,), (256,), args_)

    report: dict = {"device": props.name, "l2_bytes": l2, "sms": sms, "trials": args.trials, "flush_bytes": flush_bytes,
                    "torch": torch.__version__, "cupy": cp.__version__, "sizes": []}
    for fraction in (float(f) for f in args.fractions.split(",")):
        nbytes = int(l2 * fraction) // 16 * 16
        n4 = nbytes // 16
        x = torch.empty(nbytes // 4, dtype=torch.float32, device=dev)
        sets = [torch.randn(nbytes // 4, device=dev) for _ in range(2)]
        results = {}
        for name, (how, flush_kind) in VARIANTS.items():
            ms = []
            for t in range(args.trials + 1):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(stream):
                    x.copy_(sets[0])
                    launch(prime, 4 * sms, (cp.uint64(x.data_ptr()), cp.int64(n4), cp.int32(how),
                                            cp.uint64(sink.data_ptr())))
                    x.copy_(sets[1])                                # the next round's reset
                    if flush_kind in ("zero", "zero+reset", "zero+demote"):
                        flush.zero_()
                    if flush_kind == "zero+reset":
                        stream.synchronize()
                        (err,) = runtime.cudaCtxResetPersistingL2Cache()
                        assert err == runtime.cudaError_t.cudaSuccess, err
                    if flush_kind == "zero+demote":
                        launch(demote, 4 * sms, (cp.uint64(x.data_ptr()), cp.int64(nbytes)))
                    if flush_kind == "engine":
                        engine_flush()
                    start.record(stream)
                    launch(read, 16 * sms, (cp.uint64(x.data_ptr()), cp.int64(n4), cp.uint64(sink.data_ptr())))
                    end.record(stream)
                stream.synchronize()
                if t:                                               # the first compiles and warms up
                    ms.append(start.elapsed_time(end))
            results[name] = {"median_us": round(1e3 * statistics.median(ms), 2),
                             "p10_us": round(1e3 * sorted(ms)[len(ms) // 10], 2),
                             "p90_us": round(1e3 * sorted(ms)[len(ms) * 9 // 10], 2)}
        cold = results[COLD]["median_us"]
        for r in results.values():
            r["x_cold"] = round(r["median_us"] / cold, 3)
        report["sizes"].append({"x_bytes": nbytes, "fraction_of_l2": fraction, "variants": results})
        print(f"\nX = {nbytes / 2**20:.1f} MiB ({fraction:g} of L2 = {l2 / 2**20:.0f} MiB), {args.trials} trials")
        for name, r in results.items():
            print(f"  {name:52s} {r['median_us']:9.2f} us  ({r['x_cold']:.3f}x cold)  p10 {r['p10_us']} p90 {r['p90_us']}")
    report["flush_us"] = {name: flush_cost(fn, stream, args.trials) for name, fn in
                          (("zero_", flush.zero_), ("engine", engine_flush))}
    print(f"\nthe flush alone ({flush_bytes >> 20} MiB), median of {args.trials}: " +
          ", ".join(f"{k} {v} us" for k, v in report["flush_us"].items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
