"""Device buffers with guard canaries, NaN poison for outputs, and bitwise input checks.

Every buffer a candidate can reach (inputs, outputs, scratch) is allocated as
``[guard | data | guard]`` with no slack: the byte just past the data is the
first guard byte, so a write one element too far is caught. Guards hold a
fixed byte pattern that real data does not produce by accident.

Outputs are filled with a NaN whose payload is ours (for example 0x7FE5 for
bf16): an element that still holds exactly that pattern after the launch was
never written (`unwritten_output`); any other NaN or Inf was computed
(`nan_inf`). Inputs are compared bit for bit with the pristine copy the worker
keeps (`input_modified`); scratch is only guarded. engine/gpu/verify.py reads
all of this back.

Runs inside the worker process only (imports torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

GUARD_BYTES = 64 << 10                  # a multiple of 512, so data stays as aligned as the allocation
_CANARY_WORD = bytes.fromhex("5ac3e17d")

TORCH_DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "f32": torch.float32,
    "f64": torch.float64,
    "f8e4m3": torch.float8_e4m3fn,
    "f8e5m2": torch.float8_e5m2,
    "i8": torch.int8,
    "i32": torch.int32,
    "i64": torch.int64,
    "u8": torch.uint8,
    "u32": torch.uint32,
}
# Integer views of the same width, for bit-exact fills and comparisons.
_BITS_DTYPE: dict[int, torch.dtype] = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
# Quiet NaNs with a payload a computation does not produce (canonical NaNs are 0x7FC0…/0x7FFF…).
POISON_BITS: dict[str, int] = {
    "bf16": 0x7FE5,
    "f16": 0x7EA5,
    "f32": 0x7FC5A5A5,
    "f64": 0x7FF8A5A5A5A5A5A5,
    "f8e4m3": 0x7F,                     # e4m3 has a single NaN encoding
    "f8e5m2": 0x7E,
}
FLOAT_DTYPES = frozenset(POISON_BITS)

_patterns: dict[tuple[str, int], torch.Tensor] = {}


def canary(device: torch.device) -> torch.Tensor:
    key = (str(device), GUARD_BYTES)
    if key not in _patterns:
        word = torch.frombuffer(bytearray(_CANARY_WORD), dtype=torch.uint8)
        _patterns[key] = word.repeat(GUARD_BYTES // len(_CANARY_WORD)).to(device)
    return _patterns[key]


def canary_word() -> int:
    """The guard pattern as one little-endian 32-bit word: byte j of a guard is `word >> 8·(j mod 4)`."""
    return int.from_bytes(_CANARY_WORD, "little")


def bits_view(t: torch.Tensor) -> torch.Tensor:
    """The same memory as integers of the element's width (flattened)."""
    return t.reshape(-1).view(_BITS_DTYPE[t.element_size()])


def poison_value(dtype: str) -> int:
    """The signed integer whose bits are this dtype's poison (integers poison to all ones)."""
    size = torch.empty((), dtype=TORCH_DTYPES[dtype]).element_size()
    bits = POISON_BITS.get(dtype, (1 << (8 * size)) - 1)
    if size > 1 and bits >= 1 << (8 * size - 1):
        bits -= 1 << (8 * size)         # the signed view's value
    return bits


@dataclass
class GuardedBuffer:
    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str                           # input | output | scratch
    raw: torch.Tensor                   # uint8: guard, data, guard
    tensor: torch.Tensor                # the typed view of the data

    @property
    def nbytes(self) -> int:
        return self.tensor.numel() * self.tensor.element_size()

    @property
    def ptr(self) -> int:
        return self.tensor.data_ptr()

    def arm(self) -> None:
        """Write the canary pattern into both guards."""
        pattern = canary(self.raw.device)
        self.raw[:GUARD_BYTES].copy_(pattern)
        self.raw[GUARD_BYTES + self.nbytes:].copy_(pattern)

    def poison(self) -> None:
        bits_view(self.tensor).fill_(poison_value(self.dtype))

    def zero(self) -> None:
        self.tensor.zero_()

    def unwritten(self) -> tuple[int, int | None]:
        """(count, first flat index) of elements still holding the poison."""
        mask = bits_view(self.tensor) == poison_value(self.dtype)
        count = int(mask.sum())
        first = int(mask.nonzero()[0, 0]) if count else None
        return count, first


def allocate(name: str, dtype: str, shape: tuple[int, ...], role: str, device: torch.device) -> GuardedBuffer:
    tdtype = TORCH_DTYPES[dtype]
    esize = torch.empty((), dtype=tdtype).element_size()
    nbytes = math.prod(shape) * esize
    raw = torch.empty(2 * GUARD_BYTES + nbytes, dtype=torch.uint8, device=device)
    tensor = raw[GUARD_BYTES:GUARD_BYTES + nbytes].view(tdtype).view(shape)
    buf = GuardedBuffer(name, dtype, tuple(shape), role, raw, tensor)
    buf.arm()
    return buf


class Arena:
    """All the buffers of one trial: the task's tensors plus the manifest's scratch."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.buffers: dict[str, GuardedBuffer] = {}

    def add(self, name: str, dtype: str, shape: tuple[int, ...], role: str) -> GuardedBuffer:
        buf = allocate(name, dtype, shape, role, self.device)
        self.buffers[name] = buf
        return buf

    def by_role(self, role: str) -> list[GuardedBuffer]:
        return [b for b in self.buffers.values() if b.role == role]

    def ptrs(self) -> dict[str, int]:
        return {name: b.ptr for name, b in self.buffers.items()}

    def tensors(self, role: str | None = None) -> dict[str, torch.Tensor]:
        return {n: b.tensor for n, b in self.buffers.items() if role is None or b.role == role}

    def load(self, pristine: dict[str, torch.Tensor], scratch_init: dict[str, str]) -> None:
        """Inputs from their pristine copies, outputs poisoned, scratch as the manifest asks (guards untouched,
        so damage done by an earlier run is still there for the next check to see)."""
        for name, buf in self.buffers.items():
            if buf.role == "input":
                buf.tensor.copy_(pristine[name])
            elif buf.role == "output":
                buf.poison()
            elif scratch_init.get(name, "zero") == "poison":
                buf.poison()
            else:
                buf.zero()

    def arm(self) -> None:
        for buf in self.buffers.values():
            buf.arm()

    def fill(self, pristine: dict[str, torch.Tensor], scratch_init: dict[str, str]) -> None:
        """`load`, then the guards re-armed: a clean start."""
        self.load(pristine, scratch_init)
        self.arm()

    def nbytes(self) -> int:
        return sum(b.raw.numel() for b in self.buffers.values())
