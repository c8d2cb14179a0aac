"""The harness's own copies, unreadable while a candidate runs.

A candidate's kernel runs in the harness's CUDA context and can read any mapped device address, not only
its buffers. Two things there would hand it the answer:

- the reference cache (engine/gpu/datacache.py) keeps every trial set's pristine inputs and reference
  for the next candidate, and all of a process's tasks share its trial seeds, so attention backward's
  cached inputs hold the forward output of the same Q, K, V;
- memory PyTorch's and CuPy's allocators have freed but keep mapped still holds what was computed in
  it: a reference's intermediates, the library's output on a trial set, an earlier arena's inputs.

So a cached entry is kept masked: every byte XORed with a keystream of Philox4x32-10 (Salmon et al.,
"Parallel random numbers: as easy as 1, 2, 3", SC 2011) under a key drawn from the OS per process, its
counter the 16-byte block's index and a tag of its own per tensor (two tensors never share a stream, so
knowing one's plain bytes, as a candidate knows its inputs, says nothing of another's). It is unmasked
in place only while the harness itself reads it, with no candidate launch between, and masked again.
Before a candidate's first launch at each size, `scrub` zeroes every block the allocators hold free.
What is left in reach is the candidate's own arena and the round it is in.

Runs inside the worker process only (imports torch; CuPy on CUDA).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import numpy as np
import torch

PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
ROUNDS = 10
THREADS = 256
MASK32 = 0xFFFFFFFF

SOURCE = r"""
__device__ __forceinline__ uint4 philox(unsigned long long block, unsigned t0, unsigned t1, unsigned k0,
                                        unsigned k1) {
    unsigned c0 = (unsigned)block, c1 = (unsigned)(block >> 32), c2 = t0, c3 = t1;
    #pragma unroll
    for (int r = 0; r < %(rounds)d; ++r) {
        unsigned hi0 = __umulhi(%(m0)su, c0), lo0 = %(m0)su * c0;
        unsigned hi1 = __umulhi(%(m1)su, c2), lo1 = %(m1)su * c2;
        c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
        k0 += %(w0)su; k1 += %(w1)su;
    }
    return make_uint4(c0, c1, c2, c3);
}

extern "C" __global__ void xor_keystream(unsigned char* data, unsigned long long nbytes, unsigned k0,
                                         unsigned k1, unsigned t0, unsigned t1, int aligned) {
    unsigned long long blocks = (nbytes + 15) / 16;
    for (unsigned long long b = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; b < blocks;
         b += (unsigned long long)gridDim.x * blockDim.x) {
        uint4 ks = philox(b, t0, t1, k0, k1);
        unsigned long long at = b * 16;
        if (aligned && at + 16 <= nbytes) {
            uint4* p = reinterpret_cast<uint4*>(data + at);
            uint4 v = *p;
            v.x ^= ks.x; v.y ^= ks.y; v.z ^= ks.z; v.w ^= ks.w;
            *p = v;
        } else {
            unsigned words[4] = {ks.x, ks.y, ks.z, ks.w};
            for (unsigned j = 0; j < 16 && at + j < nbytes; ++j) data[at + j] ^= (unsigned char)(words[j >> 2] >> (8 * (j & 3)));
        }
    }
}
""" % {"rounds": ROUNDS, "m0": hex(PHILOX_M[0]), "m1": hex(PHILOX_M[1]), "w0": hex(PHILOX_W[0]),
       "w1": hex(PHILOX_W[1])}


def philox(blocks: np.ndarray, key: tuple[int, int], tag: tuple[int, int]) -> np.ndarray:
    """Philox4x32-10 of the counters (block, tag) under `key`, as (n, 4) uint32 words: the kernel's, on the host."""
    blocks = blocks.astype(np.uint64)
    n = blocks.size
    c = [blocks & np.uint64(MASK32), blocks >> np.uint64(32), np.full(n, tag[0], np.uint64),
         np.full(n, tag[1], np.uint64)]
    k0, k1 = key
    m0, m1 = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
    for _ in range(ROUNDS):
        p0, p1 = m0 * c[0], m1 * c[2]       # 32 × 32 bits: exact in 64
        hi0, lo0 = p0 >> np.uint64(32), p0 & np.uint64(MASK32)
        hi1, lo1 = p1 >> np.uint64(32), p1 & np.uint64(MASK32)
        c = [hi1 ^ c[1] ^ np.uint64(k0), lo1, hi0 ^ c[3] ^ np.uint64(k1), lo0]
        k0, k1 = (k0 + PHILOX_W[0]) & MASK32, (k1 + PHILOX_W[1]) & MASK32
    return np.stack([w.astype(np.uint32) for w in c], axis=1)


def keystream(nbytes: int, key: tuple[int, int], tag: tuple[int, int]) -> np.ndarray:
    """The bytes the kernel XORs in (little-endian words of each 16-byte block): the CPU path, and what the
    GPU test holds the kernel to."""
    words = philox(np.arange((nbytes + 15) // 16, dtype=np.uint64), key, tag).astype("<u4")
    return words.reshape(-1).view(np.uint8)[:nbytes]


@cache
def _kernel() -> Any:
    import cupy

    return cupy.RawModule(code=SOURCE, options=("-std=c++14",)).get_function("xor_keystream")


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    if not t.is_contiguous():
        raise ValueError("only contiguous tensors are masked in place")
    return t.reshape(-1).view(torch.uint8)


def xor_in_place(t: torch.Tensor, key: tuple[int, int], tag: tuple[int, int]) -> None:
    """t's bytes ^= the keystream of (key, tag); applied twice, nothing changed. On CUDA: enqueued on the
    current stream."""
    raw = _bytes_of(t)
    n = raw.numel()
    if n == 0:
        return
    if not raw.is_cuda:
        view = raw.numpy()
        view ^= keystream(n, key, tag)
        return
    import cupy

    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(raw.device).cuda_stream)
    sms = torch.cuda.get_device_properties(raw.device).multi_processor_count
    blocks = max(1, min((n + 16 * THREADS - 1) // (16 * THREADS), sms * 16))
    _kernel()((blocks,), (THREADS,), (raw.data_ptr(), np.uint64(n), np.uint32(key[0]), np.uint32(key[1]),
                                      np.uint32(tag[0]), np.uint32(tag[1]),
                                      np.int32(raw.data_ptr() % 16 == 0)), stream=stream)


def _words(n: int) -> tuple[int, int]:
    return n & MASK32, (n >> 32) & MASK32


_key = _words(int.from_bytes(os.urandom(8), "little"))
_tags = iter(range(1, 1 << 62))


class Veil:
    """The masks of one cache entry's tensors: a tag each, under the process's key."""

    def __init__(self, tensors: Iterable[torch.Tensor]) -> None:
        self.tensors = list(tensors)
        self.tags = [_words(next(_tags)) for _ in self.tensors]
        self.masked = False

    def _flip(self) -> None:
        for t, tag in zip(self.tensors, self.tags):
            xor_in_place(t, _key, tag)
        self.masked = not self.masked

    def close(self) -> None:
        if not self.masked:
            self._flip()

    @contextmanager
    def opened(self) -> Iterator[None]:
        """Plain for the harness's reads inside the block (enqueued on the current stream), masked after."""
        was = self.masked
        if was:
            self._flip()
        try:
            yield
        finally:
            if was:
                self._flip()


def scrub(device: torch.device) -> int:
    """Zero every block PyTorch's caching allocator holds free on `device` (on the current stream) and hand
    CuPy's free blocks back to the driver; returns the bytes zeroed."""
    if device.type != "cuda":
        return 0
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()
    stream = torch.cuda.current_stream(device).cuda_stream
    zeroed = 0
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device") != device.index:
            continue
        at = segment["address"]
        for block in segment["blocks"]:
            address = block.get("address", at)
            if block["state"] == "inactive" and block["size"]:
                cupy.cuda.runtime.memsetAsync(address, 0, block["size"], stream)
                zeroed += block["size"]
            at = address + block["size"]
    # A zeroed block may be handed out again at once, to work on another stream: none may overtake the memset.
    torch.cuda.synchronize(device)
    return zeroed
