"""The GPU worker process: ``python -m ptxbench.engine.gpu.worker [--device N]``.

Reads one JSON request per line on stdin and answers with JSON lines on
stdout (engine/gpu/protocol.py). Before anything else it moves the real
stdout aside and points file descriptor 1 at stderr, so text printed by a
library or by a kernel's printf cannot corrupt the protocol.

``--replay JOB.json`` runs the first trial of a job's first size once, with no
timing, and prints its result: the one-launch replay that compute-sanitizer
and Nsight Compute wrap (engine/gpu/tools.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from dataclasses import replace
from importlib import metadata
from typing import IO, Any

from ptxbench.engine.gpu.protocol import PROTOCOL_VERSION, Fatal, Job, JobResult, arch_of, dumps


def _protocol_stream() -> IO[str]:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def device_info(index: int) -> dict[str, Any]:
    """What every evaluation row records about the device; raises RuntimeError with no usable GPU."""
    try:
        import torch
    except ImportError as exc:
        raise RuntimeError(f"torch is not installed ({exc})") from None
    if not torch.cuda.is_available() or torch.cuda.device_count() <= index:
        raise RuntimeError("no CUDA device")
    try:
        import cupy  # noqa: F401
        from cuda.bindings import driver
    except ImportError as exc:
        raise RuntimeError(f"the GPU stack is incomplete: {exc}") from None
    props = torch.cuda.get_device_properties(index)
    err, version = driver.cuDriverGetVersion()
    cuda_driver = f"{version // 1000}.{(version % 1000) // 10}" if int(getattr(err, "value", err)) == 0 else "?"
    driver_text = f"CUDA {cuda_driver}"
    try:
        import pynvml

        pynvml.nvmlInit()
        release = pynvml.nvmlSystemGetDriverVersion()
        driver_text = f"{release.decode() if isinstance(release, bytes) else release} (CUDA {cuda_driver})"
    except Exception:  # NVML is optional: the CUDA version alone still identifies the driver API
        pass
    versions = {name: v for name, dist in (("torch", "torch"), ("cupy", "cupy-cuda13x"), ("cupy12", "cupy-cuda12x"),
                                            ("cuda-bindings", "cuda-bindings"), ("triton", "triton"),
                                            ("numpy", "numpy"))
                if (v := _version(dist))}
    versions["torch_cuda"] = str(torch.version.cuda)
    return {
        "peaks": device_peaks(index, props).to_json(),
        "name": props.name,
        "arch": arch_of(props.major, props.minor),
        "compute_capability": [props.major, props.minor],
        "num_sms": props.multi_processor_count,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "memory_bytes": int(props.total_memory),
        "driver": driver_text,
        "versions": versions,
        "index": index,
        "protocol": PROTOCOL_VERSION,
    }


def _attribute(index: int, name: str) -> int | None:
    """A driver device attribute, or None where this driver does not report it."""
    from cuda.bindings import driver

    try:
        driver.cuInit(0)
        err, dev = driver.cuDeviceGet(index)
        err2, value = driver.cuDeviceGetAttribute(getattr(driver.CUdevice_attribute, name), dev)
    except (AttributeError, RuntimeError):
        return None
    if int(getattr(err, "value", err)) or int(getattr(err2, "value", err2)) or not value:
        return None
    return int(value)


def _nvml_max_sm_clock_khz(index: int) -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)) * 1000
    except Exception:  # NVML is optional: the driver attribute or the datasheet table stands in
        return None


def device_peaks(index: int, props: Any) -> Any:
    """The device's speed-of-light peaks (engine/gpu/sol.py) from its own attributes."""
    from ptxbench.engine.gpu.sol import peaks_of

    clock = _nvml_max_sm_clock_khz(index) or _attribute(index, "CU_DEVICE_ATTRIBUTE_CLOCK_RATE")
    return peaks_of(props.name, arch_of(props.major, props.minor), props.multi_processor_count,
                    int(getattr(props, "L2_cache_size", 0)), clock,
                    _attribute(index, "CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE"),
                    _attribute(index, "CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH"))


def _context_alive() -> bool:
    try:
        import torch

        torch.cuda.synchronize()
        return True
    except Exception:
        return False


def serve(device_index: int, stdin: IO[str], proto: IO[str]) -> int:
    session = None

    def emit(obj: dict[str, Any]) -> None:
        proto.write(dumps(obj) + "\n")
        proto.flush()

    for line in stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        op = msg.get("op")
        if op == "exit":
            return 0
        if op == "hello":
            try:
                info = device_info(device_index)
                from ptxbench.engine.gpu.session import Session
                from ptxbench.engine.gpu.sol import Peaks

                session = Session(device_index, Peaks(**info["peaks"]))
                emit({"event": "hello", "ok": True, "device": info})
            except Exception as exc:  # no GPU, or no GPU stack: the parent records a skip
                emit({"event": "hello", "ok": False, "error": str(exc)})
            continue
        if op == "judge":
            if session is None:
                emit({"event": "done", "result": JobResult(fatal=Fatal("tool_error", "judge before hello",
                                                                          sticky=False))})
                continue
            try:
                result = session.judge(Job.from_json(msg["job"]), emit)
            except Exception:
                alive = _context_alive()
                result = JobResult(fatal=Fatal("tool_error", traceback.format_exc()[-3000:], sticky=not alive))
            emit({"event": "done", "result": result})
            if result.fatal is not None and result.fatal.sticky:
                return 3    # the context is unusable: the parent starts a fresh worker
            if result.recycle:
                return 0    # the candidate left state a reset cannot reach: the parent starts a fresh worker
    return 0


def replay(device_index: int, job_path: str, proto: IO[str]) -> int:
    """One trial of the first size, no timing: what compute-sanitizer and ncu watch."""
    from ptxbench.engine.gpu.session import Session

    with open(job_path) as f:
        job = Job.from_json(json.load(f))
    first = replace(job.sizes[0], seeds=job.sizes[0].seeds[:1], time=False)
    job = replace(job, sizes=(first,))
    session = Session(device_index)     # no timing here, so no speed-of-light peaks
    result = session.judge(job, lambda _obj: None)
    proto.write(dumps({"event": "done", "result": result}) + "\n")
    proto.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ptxbench.engine.gpu.worker")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--replay", metavar="JOB_JSON")
    args = parser.parse_args(argv)
    proto = _protocol_stream()
    if args.replay:
        return replay(args.device, args.replay, proto)
    return serve(args.device, sys.stdin, proto)


if __name__ == "__main__":
    code = main()
    if code == 3:
        # After a sticky CUDA error, interpreter teardown can block in the driver: leave at once.
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
