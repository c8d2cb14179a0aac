"""A spec's dtype words (`bf16`, `f8e4m3`, …) → torch dtypes, for the inputs and the references.

torch is imported only when a dtype is asked for, so the static path never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

_TORCH_DTYPES = {
    "bf16": "bfloat16",
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
    "i8": "int8",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u32": "uint32",
}


def torch_dtype(name: str) -> torch.dtype:
    import torch

    if name not in _TORCH_DTYPES:
        raise KeyError(f"unknown dtype {name!r} (known: {', '.join(_TORCH_DTYPES)})")
    return getattr(torch, _TORCH_DTYPES[name])
