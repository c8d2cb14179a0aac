"""Empty L2 before every timed run, whatever eviction priority a kernel gave its lines.

A kernel may mark its own lines to be evicted last (`createpolicy.fractional.L2::evict_last` with
`ld.global.L2::cache_hint`, `prefetch.global.L2::evict_last`). Zeroing a buffer several times L2's
size with normal stores does not displace them: on the H200 a 15 MiB input read so was timed as fast
after the zeroing as with no flush at all, and even plainly read lines partly survived it
(results/l2-probe-*.md, benchmarks/l2_flush_probe.py). So the flush stores into its buffer under an
evict_last policy of its own, which competes with any line so marked and, being larger than L2, wins;
then it discards its own lines (`discard.global.L2`, no write-back), so the run that follows finds L2
empty rather than full of lines it would have to fight.

Runs inside the worker process only (imports torch and cupy).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import torch

LINE = 128                      # bytes: what discard.global.L2 drops at once
THREADS = 256

SOURCE = r"""
extern "C" __global__ void fill_evict_last(ulonglong2* buf, long long n) {
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        asm volatile("st.global.L2::cache_hint.v2.u64 [%0], {%1, %1}, %2;" :: "l"(buf + i), "l"(0ull), "l"(policy)
                     : "memory");
}

extern "C" __global__ void discard_lines(char* buf, long long lines) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < lines; i += (long long)gridDim.x * blockDim.x)
        asm volatile("discard.global.L2 [%0], 128;" :: "l"(buf + i * 128) : "memory");
}
"""


@cache
def _module() -> Any:
    import cupy

    return cupy.RawModule(code=SOURCE)


class L2Flush:
    """A flush buffer of `nbytes` on `device`; calling it enqueues the flush on the current stream. What a
    call needs (the kernels, their grids, the stream's CuPy handle) is made once: it runs twice a round."""

    def __init__(self, nbytes: int, device: torch.device) -> None:
        self.nbytes = nbytes // LINE * LINE
        self.device = device
        self.buffer = torch.empty(self.nbytes, dtype=torch.uint8, device=device)    # 512-byte aligned
        cap = torch.cuda.get_device_properties(device).multi_processor_count * 8
        module = _module()
        self._steps = [(module.get_function(name), (max(1, min(cap, math.ceil(n / THREADS))),), n)
                       for name, n in (("fill_evict_last", self.nbytes // 16), ("discard_lines", self.nbytes // LINE))]
        self._streams: dict[int, Any] = {}

    def __call__(self) -> None:
        import cupy

        handle = torch.cuda.current_stream(self.device).cuda_stream
        stream = self._streams.get(handle)
        if stream is None:
            stream = self._streams[handle] = cupy.cuda.ExternalStream(handle)
        ptr = self.buffer.data_ptr()
        for kernel, grid, n in self._steps:
            kernel(grid, (THREADS,), (ptr, n), stream=stream)
