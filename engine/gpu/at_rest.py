"""Memory the allocators keep, zeroed before a candidate's first launch at each size.

A candidate's kernel runs in the harness's CUDA context and can read any mapped device address, not only
its buffers. Memory PyTorch's caching allocator has freed but keeps mapped still holds what was computed
in it: a trial's reference and its intermediates, the library's output on a trial set, an earlier
candidate's arena. The trial seeds are the same for every candidate of a task in a process, so any of it
may be the answer to a trial still to come. `scrub` zeroes every free block and the unused tail of every
block in use, after the cuBLAS workspaces are handed back (they hold a library call's partial sums), and
returns CuPy's free blocks to the driver; `release` does the same before memory goes back to the driver,
which gives it out again without clearing it.

Runs inside the worker process only (imports torch; CuPy on CUDA).
"""

from __future__ import annotations

import torch


def scrub(device: torch.device) -> int:
    """Zero what PyTorch's allocator holds on `device` outside live tensors; returns the bytes zeroed. Waits
    for the device: a zeroed block may be handed out at once, to work on another stream."""
    if device.type != "cuda":
        return 0
    import cupy

    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        torch.cuda.synchronize(device)
        clear()
    cupy.get_default_memory_pool().free_all_blocks()
    stream = torch.cuda.current_stream(device).cuda_stream
    zeroed = 0
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device") != device.index:
            continue
        at = segment["address"]
        for block in segment["blocks"]:
            address = block.get("address", at)
            size = block["size"]
            used = 0 if block["state"] == "inactive" else block.get("requested_size", size)
            if used < size:
                cupy.cuda.runtime.memsetAsync(address + used, 0, size - used, stream)
                zeroed += size - used
            at = address + size
    torch.cuda.synchronize(device)
    return zeroed


def release(device: torch.device) -> None:
    """`torch.cuda.empty_cache`, with what it hands back zeroed first."""
    scrub(device)
    torch.cuda.empty_cache()
