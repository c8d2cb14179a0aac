"""Which GPUs this machine has, and what the GPU stages will do for an arch.

nvidia-smi is asked rather than a CUDA library imported, so the static path stays light and
works on machines with no GPU stack at all. The arch names come from the engine's one rule
(engine/arch.py), the same one the GPU worker uses for the device it opens.
"""

from __future__ import annotations

import subprocess

from ptxbench.engine.arch import arch_of_capability
from ptxbench.services.errors import UsageError

GPU_READY = "ready"  # a GPU of the arch is here and the GPU stages were asked for
GPU_MODES = ("auto", "on", "off")


def gpu_archs(timeout: float = 5.0) -> list[str] | None:
    """Arch of every visible GPU, or None when there is no usable NVIDIA driver."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    caps = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    if not caps:
        return None
    try:
        return [arch_of_capability(c) for c in caps]
    except ValueError:  # not a compute capability: a driver that answers something else
        return None


def gpu_status(arch: str, static_only: bool) -> str:
    """What the GPU stages will do for this arch on this machine: GPU_READY or `skipped: …`."""
    archs = gpu_archs()
    if not archs:
        return "skipped: no GPU"
    if arch not in archs:
        return f"skipped: no {arch} device"
    if static_only:
        return "skipped: --static"
    return GPU_READY


def gpu_wanted(mode: str) -> bool:
    """`--gpu auto|on|off` → whether to run the GPU stages; `on` without a GPU is a UsageError."""
    if mode not in GPU_MODES:
        raise UsageError("use auto, on or off")
    if mode == "off":
        return False
    present = bool(gpu_archs())
    if mode == "on" and not present:
        raise UsageError("no NVIDIA GPU found (nvidia-smi)")
    return present
