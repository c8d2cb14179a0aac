"""Throwaway device harness for the expert solutions (GEMM, RMSNorm, smoke).

Runs on the GPU machine with its own python3 (torch, cuda-bindings). Nothing
is compiled there: cubins come from build.sh on the development machine.

  python3 bench.py            # all groups, each in a subprocess with a timeout
  python3 bench.py worker G   # one group, JSON lines on stdout

Correctness: fresh random inputs per size, outputs poisoned with NaN, rel-L2
against a float64 torch reference, two launches compared bit for bit.
Timing: CUDA events, 256 MB L2 flush before every rep, median of REPS.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SOL = os.path.join(ROOT, "tasks", "solutions")
CUBINS = os.path.join(HERE, "cubins")
OUT = os.environ.get("OUT", HERE)
REPS = int(os.environ.get("REPS", "30"))
WARM = 5

GEMM_TRAIN = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 7168, 5120)]
GEMM_HELD = [(4096, 14336, 2048), (16384, 2048, 7168)]
# Not a task size: M and N not multiples of 256 (partial last column block, odd
# tile count), K = 5 K-steps.
GEMM_EDGE = [(1152, 1152, 320)]
RMS_TRAIN = [(4096, 4096), (16384, 4096), (16384, 8192)]
RMS_HELD = [(65536, 7168), (8192, 16384)]
SMOKE = [1 << 20, 1 << 24, (1 << 24) + 3]


def ceil_div(a, b):
    return -(-a // b)


def ev(expr, names):
    if isinstance(expr, (int, float)):
        return int(expr)
    return int(eval(expr, {"__builtins__": {}}, dict(names, ceil_div=ceil_div, min=min, max=max)))


# ----------------------------------------------------------------------------- driver glue
def setup():
    import torch
    from cuda.bindings import driver as cu

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    err, ctx = cu.cuCtxGetCurrent()
    if err != cu.CUresult.CUDA_SUCCESS or not int(ctx):
        err, dev = cu.cuDeviceGet(0)
        err, ctx = cu.cuDevicePrimaryCtxRetain(dev)
        cu.cuCtxSetCurrent(ctx)
    return torch, cu


def ck(cu, ret):
    err = ret[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        name = cu.cuGetErrorName(err)[1]
        raise RuntimeError(f"CUDA driver error {err} {name}")
    if len(ret) == 1:
        return None
    return ret[1] if len(ret) == 2 else ret[1:]


class Kernel:
    def __init__(self, cu, torch, cubin, entry, smem):
        self.cu, self.torch = cu, torch
        self.mod = ck(cu, cu.cuModuleLoad(cubin.encode()))
        self.fn = ck(cu, cu.cuModuleGetFunction(self.mod, entry.encode()))
        if smem > 48 * 1024:
            ck(cu, cu.cuFuncSetAttribute(
                self.fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem))
        self.smem = smem

    def config(self, grid, block, cluster):
        cu = self.cu
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
        cfg.sharedMemBytes = self.smem
        cfg.hStream = cu.CUstream(self.torch.cuda.current_stream().cuda_stream)
        if cluster and tuple(cluster) != (1, 1, 1):
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
            cfg.attrs = [attr]
            cfg.numAttrs = 1
        else:
            cfg.numAttrs = 0
        return cfg

    def launch(self, grid, block, cluster, args, types):
        cfg = self.config(grid, block, cluster)
        ck(self.cu, self.cu.cuLaunchKernelEx(cfg, self.fn, (tuple(args), tuple(types)), 0))

    def max_active_clusters(self, grid, block, cluster):
        cfg = self.config(grid, block, cluster)
        return ck(self.cu, self.cu.cuOccupancyMaxActiveClusters(self.fn, cfg))


def tmap_2d(cu, t, box, swizzle="128B"):
    rows, cols = t.shape
    dtypes = {2: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16}
    sw = {"none": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
          "128B": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B}[swizzle]
    return ck(cu, cu.cuTensorMapEncodeTiled(
        dtypes[t.element_size()], 2, t.data_ptr(),
        [cu.cuuint64_t(cols), cu.cuuint64_t(rows)],
        [cu.cuuint64_t(cols * t.element_size())],
        [cu.cuuint32_t(box[1]), cu.cuuint32_t(box[0])],
        [cu.cuuint32_t(1), cu.cuuint32_t(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))


def bench(torch, fn, reps=REPS):
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")  # 256 MB
    for _ in range(WARM):
        fn()
    torch.cuda.synchronize()
    evs = []
    for _ in range(reps):
        flush.zero_()
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        evs.append((s, e))
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(e) for s, e in evs)
    return statistics.median(ts), ts[0], ts[-1]


def bench_pair(torch, fa, fb, reps=REPS):
    """Median times of two callables, alternated rep by rep so drift hits both."""
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")  # 256 MB
    for _ in range(WARM):
        fa()
        fb()
    torch.cuda.synchronize()
    evs = {0: [], 1: []}
    for _ in range(reps):
        for k, f in ((0, fa), (1, fb)):
            flush.zero_()
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            f()
            e.record()
            evs[k].append((s, e))
    torch.cuda.synchronize()
    out = []
    for k in (0, 1):
        ts = sorted(s.elapsed_time(e) for s, e in evs[k])
        out.append((statistics.median(ts), ts[0], ts[-1]))
    return out


def rel_l2(torch, out, ref):
    return float((out.double() - ref).norm() / ref.norm())


def emit(rec):
    print(json.dumps(rec), flush=True)


# ----------------------------------------------------------------------------- GEMM
def gemm_variants():
    man = json.load(open(os.path.join(SOL, "gemm_bf16_sm90a", "manifest.json")))
    out = []
    extra = json.load(open(os.path.join(HERE, "variants.json")))
    for v in extra:
        out.append(v)
    return man, out


def run_gemm(torch, cu, variant_names):
    _, variants = gemm_variants()
    sizes = [(s, "train") for s in GEMM_TRAIN] + [(s, "held") for s in GEMM_HELD] + [(s, "edge") for s in GEMM_EDGE]
    if os.environ.get("SMALL"):
        sizes = sizes[:1]
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda")
    for v in variants:
        if variant_names and v["name"] not in variant_names:
            continue
        kern = Kernel(cu, torch, os.path.join(CUBINS, v["cubin"]), v["entry"], v["shared_bytes"])
        for (M, N, K), split in sizes:
            names = dict(M=M, N=N, K=K, num_sms=num_sms)
            gen.manual_seed(M * 7 + N * 13 + K)
            A = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=gen)
            B = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=gen)
            C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            maps = dict(tmA=tmap_2d(cu, A, v["boxA"]), tmB=tmap_2d(cu, B, v["boxB"]))
            if "boxC" in v:
                maps["tmC"] = tmap_2d(cu, C, v["boxC"])
            grid = [ev(g, names) for g in v["grid"]]
            spec = v.get("args", ["tmA", "tmB", "C", "M", "N", "K"])

            def build_args(c_tensor, maps=maps, spec=spec, M=M, N=N, K=K):
                vals, tys = [], []
                for a in spec:
                    if a in ("tmA", "tmB"):
                        vals.append(maps[a]); tys.append(None)
                    elif a == "tmC":
                        vals.append(tmap_2d(cu, c_tensor, v["boxC"])); tys.append(None)
                    elif a == "C":
                        vals.append(c_tensor.data_ptr()); tys.append(ctypes.c_void_p)
                    else:
                        vals.append(dict(M=M, N=N, K=K)[a]); tys.append(ctypes.c_int)
                return tuple(vals), tuple(tys)

            args, types = build_args(C)
            launch = lambda: kern.launch(grid, v["block"], v.get("cluster"), args, types)
            rec = dict(group="gemm", variant=v["name"], M=M, N=N, K=K, split=split)
            if v.get("cluster") and (M, N, K) == GEMM_TRAIN[0]:
                try:
                    rec["max_active_clusters"] = kern.max_active_clusters(grid, v["block"], v["cluster"])
                except Exception as exc:  # informational only
                    rec["max_active_clusters"] = str(exc)
            launch()
            torch.cuda.synchronize()
            if v.get("check", True):
                unwritten = int((~torch.isfinite(C)).sum())
                ref = A.double() @ B.double().T
                rec["rel_l2"] = rel_l2(torch, C, ref)
                rec["nonfinite"] = unwritten
                C2 = torch.full_like(C, float("nan"))
                args2, _ = build_args(C2)
                kern.launch(grid, v["block"], v.get("cluster"), args2, types)
                torch.cuda.synchronize()
                rec["repeat_equal"] = bool(torch.equal(C, C2))
                Cref = A @ B.T
                rec["cublas_rel_l2"] = rel_l2(torch, Cref, ref)
                del ref, C2, Cref
            (t, tmin, tmax), (tc, _, _) = bench_pair(torch, launch, lambda: torch.matmul(A, B.T))
            flops = 2.0 * M * N * K
            rec.update(ms=t, ms_min=tmin, ms_max=tmax, tflops=flops / t / 1e9,
                       cublas_ms=tc, cublas_tflops=flops / tc / 1e9, ratio=tc / t)
            emit(rec)
            del A, B, C
            torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- RMSNorm
def run_rmsnorm(torch, cu):
    man = json.load(open(os.path.join(SOL, "rmsnorm_bf16_sm90a", "manifest.json")))["launches"][0]
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda")
    kern = Kernel(cu, torch, os.path.join(CUBINS, "rmsnorm_bf16_sm90a.cubin"), man["entry"], 200 * 1024)
    rms_sizes = [(s, "train") for s in RMS_TRAIN] + [(s, "held") for s in RMS_HELD]
    if os.environ.get("SMALL"):
        rms_sizes = rms_sizes[:1]
    for (T, D), split in rms_sizes:
        names = dict(T=T, D=D, num_sms=num_sms)
        smem = ev(man["shared_bytes"], names)
        kern.smem = smem
        gen.manual_seed(T + 3 * D)
        X = torch.randn(T, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        W = (1.0 + 0.5 * torch.randn(D, device="cuda", dtype=torch.float32, generator=gen)).to(torch.bfloat16)
        Y = torch.full_like(X, float("nan"))
        grid = [ev(g, names) for g in man["grid"]]
        block = [ev(b, names) for b in man["block"]]
        types = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)
        launch = lambda: kern.launch(grid, block, None, (X.data_ptr(), W.data_ptr(), Y.data_ptr(), T, D), types)
        launch()
        torch.cuda.synchronize()
        xd = X.double()
        ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * W.double()
        rec = dict(group="rmsnorm", T=T, D=D, split=split, grid=grid, block=block, smem=smem,
                   rel_l2=rel_l2(torch, Y, ref), nonfinite=int((~torch.isfinite(Y)).sum()))
        tref = torch.nn.functional.rms_norm(X, (D,), W, eps=1e-6)
        rec["torch_rel_l2"] = rel_l2(torch, tref, ref)
        del ref, xd, tref
        (t, tmin, tmax), (tt, _, _) = bench_pair(
            torch, launch, lambda: torch.nn.functional.rms_norm(X, (D,), W, eps=1e-6))
        nbytes = 2.0 * (2 * T * D + D)
        rec.update(ms=t, ms_min=tmin, ms_max=tmax, tbps=nbytes / t / 1e9, torch_ms=tt,
                   torch_tbps=nbytes / tt / 1e9, ratio=tt / t)
        emit(rec)
        del X, W, Y
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- smoke
def run_smoke(torch, cu):
    man = json.load(open(os.path.join(SOL, "vector_add_smoke", "manifest.json")))["launches"][0]
    kern = Kernel(cu, torch, os.path.join(CUBINS, "vector_add_smoke.cubin"), man["entry"], 0)
    for N in (SMOKE[-1:] if os.environ.get("SMALL") else SMOKE):
        names = dict(N=N, num_sms=132)
        X = torch.randn(N, device="cuda")
        Y = torch.randn(N, device="cuda")
        Z = torch.full_like(X, float("nan"))
        grid = [ev(g, names) for g in man["grid"]]
        types = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
        launch = lambda: kern.launch(grid, man["block"], None, (X.data_ptr(), Y.data_ptr(), Z.data_ptr(), N), types)
        launch()
        torch.cuda.synchronize()
        ref = X.double() + Y.double()
        rec = dict(group="smoke", N=N, rel_l2=rel_l2(torch, Z, ref), nonfinite=int((~torch.isfinite(Z)).sum()))
        (t, _, _), (tt, _, _) = bench_pair(torch, launch, lambda: torch.add(X, Y))
        nbytes = 12.0 * N
        rec.update(ms=t, tbps=nbytes / t / 1e9, torch_ms=tt, ratio=tt / t)
        emit(rec)


def run_copy(torch, cu):
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t, _, _ = bench(torch, lambda: dst.copy_(src), reps=10)
    emit(dict(group="copy", bytes=2 * n, ms=t, tbps=2 * n / t / 1e9))
    props = torch.cuda.get_device_properties(0)
    emit(dict(group="device", name=props.name, sms=props.multi_processor_count,
              torch=torch.__version__, l2=getattr(props, "L2_cache_size", None)))


def worker(group, rest):
    torch, cu = setup()
    if group == "gemm":
        run_gemm(torch, cu, rest)
    elif group == "rmsnorm":
        run_rmsnorm(torch, cu)
    elif group == "smoke":
        run_smoke(torch, cu)
    elif group == "copy":
        run_copy(torch, cu)


# ----------------------------------------------------------------------------- driver
def table(recs):
    lines = []
    for r in recs:
        g = r.get("group")
        if g == "gemm":
            lines.append(
                f"gemm {r['variant']:<12} {r['M']:>5}x{r['N']:>5}x{r['K']:>5} {r['split']:<5} "
                f"rel={r.get('rel_l2', float('nan')):.2e} nf={r.get('nonfinite', '-')} rep={r.get('repeat_equal', '-')} "
                f"{r['ms']:.3f}ms {r['tflops']:.0f}TF cublas {r['cublas_tflops']:.0f}TF x{r['ratio']:.3f}"
                + (f" clusters={r['max_active_clusters']}" if "max_active_clusters" in r else ""))
        elif g == "rmsnorm":
            lines.append(
                f"rms  {r['T']:>6}x{r['D']:>5} {r['split']:<5} rel={r['rel_l2']:.2e} nf={r['nonfinite']} "
                f"{r['ms']:.4f}ms {r['tbps']:.2f}TB/s torch {r['torch_tbps']:.2f}TB/s x{r['ratio']:.3f}")
        elif g == "smoke":
            lines.append(f"add  N={r['N']} rel={r['rel_l2']:.1e} nf={r['nonfinite']} {r['ms']:.4f}ms "
                         f"{r['tbps']:.2f}TB/s torch x{r['ratio']:.3f}")
        elif g == "copy":
            lines.append(f"copy {r['tbps']:.2f} TB/s (read+write)")
        elif g == "device":
            lines.append(f"device {r['name']} sms={r['sms']} torch={r['torch']} l2={r['l2']}")
        elif g == "error":
            lines.append(f"ERROR {r['job']}: {r['detail'][-300:]}")
    return "\n".join(lines)


def main():
    jobs = [["copy"], ["smoke"], ["rmsnorm"]]
    _, variants = gemm_variants()
    jobs += [["gemm", v["name"]] for v in variants]
    only = sys.argv[1:]
    if only:
        jobs = [j for j in jobs if j[0] in only or (len(j) > 1 and j[1] in only)]
    recs = []
    log = open(os.path.join(OUT, "bench.log"), "w")
    t0 = time.time()
    for job in jobs:
        try:
            p = subprocess.run([sys.executable, __file__, "worker", *job], capture_output=True, text=True,
                               timeout=int(os.environ.get("JOB_TIMEOUT", "75")))
            out, err, rc = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err, rc = "TIMEOUT (hang?)", -1
        log.write(f"== {job} rc={rc} t={time.time() - t0:.1f}s\n{out}\n{err}\n")
        log.flush()
        for line in out.splitlines():
            if line.startswith("{"):
                recs.append(json.loads(line))
        if rc != 0:
            recs.append(dict(group="error", job=" ".join(job), detail=(err or "")[-600:]))
        print(f"[{time.time() - t0:.0f}s] {' '.join(job)} rc={rc}", flush=True)
    json.dump(recs, open(os.path.join(OUT, "bench.json"), "w"), indent=1)
    print(table(recs))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3:])
    else:
        main()
