"""Which GPUs this machine has, and what the GPU stages will do for an arch.

nvidia-smi is asked (services/gpuset.py) rather than a CUDA library imported, so the static path stays light and
works on machines with no GPU stack at all. The arch names come from the engine's one rule
(engine/arch.py), the same one the GPU worker uses for the device it opens.
"""

from __future__ import annotations


from ptxbench.services.errors import UsageError

GPU_READY = "ready"  # a GPU of the arch is here and the GPU stages were asked for
GPU_MODES = ("auto", "on", "off")


def gpu_archs(timeout: float = 5.0) -> list[str] | None:
    """Arch of every GPU this process's workers can open, or None when there is no usable NVIDIA driver."""
    from ptxbench.services.gpuset import query_gpus, visible_gpus

    rows = query_gpus(timeout)
    if not rows:
        return None
    return [g.arch for g in visible_gpus(rows)] or None


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
