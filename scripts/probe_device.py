"""What the harness relies on from this GPU machine, in one JSON: run it first on a new machine.

- the device description and speed-of-light peaks the worker reports (NVML clock, memory clock, bus width);
- whether the driver resolves a cubin's module globals by name (visible and non-visible `.global`
  variables, initialised or not), so the harness restores them rather than reloading the module;
- which attention-backward baseline path runs here (cuDNN's backward operator called directly, or
  autograd over private copies) and how close its answer is to the reference.

Usage (GPU machine, ptxbench importable): python3 scripts/probe_device.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import Any

GLOBALS_PTX = """
.version 8.0
.target sm_90a
.address_size 64
.global .align 4 .u32 hidden;
.visible .global .align 4 .u32 shown;
.global .align 4 .u32 primed[2] = {7, 9};
.visible .entry k(.param .u64 p)
{
    .reg .u32 %r<4>;
    ld.global.u32 %r1, [hidden];
    add.u32 %r1, %r1, 1;
    st.global.u32 [hidden], %r1;
    ld.global.u32 %r2, [primed];
    add.u32 %r2, %r2, 1;
    st.global.u32 [primed], %r2;
    st.global.u32 [shown], %r1;
    ret;
}
"""


def probe_globals() -> dict[str, Any]:
    import cupy
    import numpy as np
    import torch
    from cuda.bindings import driver

    from ptxbench.engine.assemble import assemble
    from ptxbench.engine.gpu.launch import Module

    torch.cuda.init()
    asm = assemble(GLOBALS_PTX, "ptx", "sm_90a")
    module = Module(asm.cubin)
    handle = driver.CUmodule(int(module.raw.ptr))
    found = {}
    for name in ("hidden", "shown", "primed"):
        err, ptr, size = driver.cuModuleGetGlobal(handle, name.encode())
        found[name] = {"resolved": int(getattr(err, "value", err)) == 0, "bytes": int(size)}
    # Launch twice with a restore between: the counter must read 1 both times.
    stream = torch.cuda.Stream()
    launch_stream = cupy.cuda.ExternalStream(stream.cuda_stream)
    kernel = module.kernel("k")
    reads = []
    for _ in range(2):
        module.restore_state(stream.cuda_stream)
        kernel.fn((1, 1, 1), (1, 1, 1), (np.uint64(0),), stream=launch_stream)
        stream.synchronize()
        err, ptr, _ = driver.cuModuleGetGlobal(handle, b"shown")
        value = torch.empty(1, dtype=torch.int32, device="cuda")
        driver.cuMemcpyDtoD(value.data_ptr(), ptr, 4)
        reads.append(int(value.item()))
    return {"symbols": found, "state": module.state.describe(), "counter_after_each_run": reads}


def _time(fn: Any, reps: int = 20) -> float:
    """Median device time of one call, with a 256 MiB write before each (as the timing loop's L2 flush)."""
    import statistics

    import torch

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.zero_()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def probe_backward() -> dict[str, Any]:
    import torch

    from ptxbench.tasks.baselines import library_fn
    from ptxbench.tasks.inputs import make_inputs
    from ptxbench.tasks.reference import reference
    from ptxbench.tasks.spec import get_task

    out = {}
    for task_id in ("attn_bwd_sm90a", "attn_bwd_causal_sm90a"):
        task = get_task(task_id)
        sizes = {"B": 1, "H": 4, "S": 512, "D": 128}
        raw = make_inputs(task, sizes, 11, "cuda")
        inputs = {t.name: raw[t.name].contiguous() for t in task.inputs}
        ref = reference(task, raw)
        base = library_fn(task, inputs, sizes)
        base()
        torch.cuda.synchronize()
        errors = {n: float(torch.linalg.vector_norm(base.outputs[n].float() - ref[n].float())
                           / torch.linalg.vector_norm(ref[n].float())) for n in ("dQ", "dK", "dV")}
        headline = make_inputs(task, task.headline, 12, "cuda")
        big = library_fn(task, {t.name: headline[t.name].contiguous() for t in task.inputs if t.name in headline},
                         task.headline)
        out[task_id] = {"baseline": base.name, "why": base.note, "rel_l2": errors,
                        "headline_ms": _time(big.fn), "headline_baseline": big.name}
        del headline, big
        torch.cuda.empty_cache()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report: dict[str, Any] = {}
    from ptxbench.engine.gpu.worker import device_info

    for name, fn in (("device", lambda: device_info(0)), ("globals", probe_globals),
                     ("attention_backward", probe_backward)):
        try:
            report[name] = fn()
        except Exception:  # a probe that fails says how, and the others still run
            report[name] = {"error": traceback.format_exc()[-2000:]}
    text = json.dumps(report, indent=1, default=str)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
