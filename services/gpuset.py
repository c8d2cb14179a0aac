"""Which GPUs a parallel batch uses (`--gpus all|N|0,2,5`), and which physical GPU a worker is on.

nvidia-smi is asked, as in services/hardware.py, so choosing GPUs needs no CUDA library. Indices
are the ones the GPU worker opens (`--device N`): with CUDA_VISIBLE_DEVICES set, the visible
devices in its order, as CUDA numbers them. Listing an index twice (`--gpus 0,0`) puts two
workers on one GPU: that proves the pool on a one-GPU machine, and their timing is flagged as
shared (services/shared_gpu.py), never stored as a clean speedup.
"""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass

from ptxbench.engine.arch import arch_of_capability
from ptxbench.services.errors import UsageError


@dataclass(frozen=True)
class Gpu:
    index: int  # what the worker opens (CUDA's numbering of the visible devices)
    arch: str
    name: str
    key: str  # the physical GPU: its UUID, or host:index where none is known


def query_gpus(timeout: float = 10.0) -> list[tuple[str, str, str, str]] | None:
    """(index, uuid, compute capability, name) of every GPU the driver has, or None without a driver."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,uuid,compute_cap,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    rows = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",", 3)]
        if len(parts) == 4 and parts[0].isdigit():
            rows.append((parts[0], parts[1], parts[2], parts[3]))
    return rows


def _visible(env: dict[str, str] | None = None) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list of entries (indices or UUIDs); None when it is not set."""
    value = (env if env is not None else os.environ).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def visible_gpus(rows: list[tuple[str, str, str, str]] | None = None, env: dict[str, str] | None = None) -> list[Gpu]:
    """The GPUs a worker of this process can open, in CUDA's order (empty without a driver)."""
    rows = query_gpus() if rows is None else rows
    if not rows:
        return []
    by_index = {r[0]: r for r in rows}
    by_uuid = {r[1]: r for r in rows}
    chosen = _visible(env)
    if chosen is None:
        picked = list(rows)
    else:
        picked = []
        for entry in chosen:
            row = (
                by_index.get(entry)
                or by_uuid.get(entry)
                or next((r for r in rows if entry.startswith("GPU-") and r[1].startswith(entry)), None)
            )
            if row is None:
                break  # CUDA stops at the first entry it cannot use
            picked.append(row)
    gpus = []
    for i, (_index, uuid, cap, name) in enumerate(picked):
        try:
            arch = arch_of_capability(cap)
        except ValueError:
            continue
        gpus.append(Gpu(i, arch, name, uuid or f"{socket.gethostname()}:{_index}"))
    return gpus


def choose(spec: str, gpus: list[Gpu], archs: set[str] | None = None) -> list[Gpu]:
    """`--gpus` → one entry per worker. `all`: every visible GPU of the batch's archs; `N`: the first N
    of them; `0,2,5`: those indices (repeat one to put two workers on it). UsageError says what is wrong."""
    spec = spec.strip()
    usable = [g for g in gpus if archs is None or g.arch in archs]
    if not gpus:
        raise UsageError("--gpus: no NVIDIA GPU found (nvidia-smi); leave --gpus out to judge the static stages")
    if spec == "all":
        if not usable:
            raise UsageError(
                f"--gpus all: no GPU of {', '.join(sorted(archs or []))} here "
                f"({', '.join(sorted({g.arch for g in gpus}))} only)"
            )
        return usable
    if spec.isdigit():
        n = int(spec)
        if n < 1:
            raise UsageError("--gpus: give at least one GPU")
        if n > len(usable):
            raise UsageError(
                f"--gpus {n}: only {len(usable)} GPU(s) of the batch's arch here; to put two workers on "
                "one GPU (timing then flagged as shared), list it twice: --gpus 0,0"
            )
        return usable[:n]
    picked = []
    by_index = {g.index: g for g in gpus}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) not in by_index:
            raise UsageError(f"--gpus: {part!r} is not a visible GPU index (0 to {len(gpus) - 1})")
        picked.append(by_index[int(part)])
    if not picked:
        raise UsageError("--gpus: use all, a count, or indices such as 0,2,5")
    return picked


def spread(workers: int, gpus: list[Gpu]) -> list[Gpu]:
    """`workers` workers over the GPUs in turn (a benchmark's `--workers N` on fewer GPUs shares them)."""
    if not gpus:
        raise UsageError("no NVIDIA GPU found (nvidia-smi)")
    return [gpus[i % len(gpus)] for i in range(workers)]


def shared_keys(keys: list[str]) -> set[str]:
    """The physical GPUs that more than one worker judges on."""
    seen: set[str] = set()
    shared: set[str] = set()
    for k in keys:
        (shared if k in seen else seen).add(k)
    return shared


def gpu_key(
    device_index: int, env: dict[str, str] | None = None, rows: list[tuple[str, str, str, str]] | None = None
) -> str:
    """The physical GPU behind `device_index` in this process (a Dask worker asks this about itself)."""
    for g in visible_gpus(rows, env):
        if g.index == device_index:
            return g.key
    chosen = _visible(env)
    entry = chosen[device_index] if chosen is not None and device_index < len(chosen) else str(device_index)
    return entry if entry.startswith(("GPU-", "MIG-")) else f"{socket.gethostname()}:{entry}"
