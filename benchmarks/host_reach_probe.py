"""Which host memory a kernel can reach, given an address: the premise of every "kept in host memory" in
the harness (the cache's seals, a checked round's seals, the secret seeds).

Three probes, each in its own process (a fault a kernel causes ends its CUDA context):

- pinned: a buffer from `torch.empty(..., pin_memory=True)`, as the harness's seals are kept. With
  unified addressing, pinned host memory is mapped into every device's address space at its host
  address, so a kernel handed that number reads and writes it.
- pageable: an ordinary NumPy array. A kernel reaches it only where the driver runs with heterogeneous
  memory management (HMM: open kernel modules on a recent Linux kernel), which `nvidia-smi -q` reports
  as its addressing mode.
- guessed: an address on no mapping (64 KiB: a Python process maps nothing that low, its executable
  and libraries sit far above): what a kernel that scans for host memory meets first.

Each probe passes the address to a kernel as a plain 64-bit integer, reads 8 bytes and writes 8 back;
the report says whether the load returned the host's value and whether the host saw the store.

Usage (on a GPU machine): python3 benchmarks/host_reach_probe.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from typing import Any

SOURCE = r"""
extern "C" __global__ void touch(unsigned long long addr, unsigned long long* out) {
    unsigned long long* p = (unsigned long long*)addr;
    out[0] = *p;
    *p = 0x5eedf00ddeadbeefull;
}
"""
MAGIC = 0x1234_5678_9ABC_DEF0


def probe(kind: str) -> dict[str, Any]:
    import cupy
    import numpy as np
    import torch

    torch.cuda.init()
    if kind == "pinned":
        host = torch.empty(512, dtype=torch.int64, pin_memory=True)
        view = host.numpy()
    else:
        view = np.zeros(512, dtype=np.int64)
    view[0] = MAGIC
    addr = view.ctypes.data
    if kind == "guessed":
        addr = 0x10000                               # nothing of the process is mapped this low
    out = cupy.zeros(1, dtype=cupy.uint64)
    kernel = cupy.RawKernel(SOURCE, "touch")
    try:
        kernel((1,), (1,), (cupy.uint64(addr), out))
        cupy.cuda.Device().synchronize()
    except Exception as exc:  # the fault is the finding
        return {"kind": kind, "reached": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    got = int(out.get()[0])
    return {"kind": kind, "reached": True, "load_saw_host_value": got == MAGIC,
            "host_saw_store": kind != "guessed" and int(view[0]) & (2**64 - 1) == 0x5EEDF00DDEADBEEF}


def addressing_mode() -> str:
    try:
        text = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=30).stdout
    except Exception as exc:  # the report says what it could not read
        return f"unknown ({exc})"
    lines = [ln.strip() for ln in text.splitlines() if "Addressing Mode" in ln]
    return lines[0] if lines else "not reported (no 'Addressing Mode' line in nvidia-smi -q)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--kind", help=argparse.SUPPRESS)      # one probe, in this process
    args = ap.parse_args()
    if args.kind:
        print(json.dumps(probe(args.kind)))
        return 0
    report: dict[str, Any] = {"addressing_mode": addressing_mode(), "kernel": platform.release(), "probes": []}
    for kind in ("pinned", "pageable", "guessed"):
        proc = subprocess.run([sys.executable, __file__, "--kind", kind], capture_output=True, text=True, timeout=120)
        try:
            row = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            row = {"kind": kind, "reached": None, "error": f"exit {proc.returncode}: {proc.stderr[-300:]}"}
        report["probes"].append(row)
    print(f"{report['addressing_mode']}; Linux {report['kernel']}")
    for row in report["probes"]:
        print(f"  {row['kind']:9s} " + ("reached: load saw the host's value " f"{row.get('load_saw_host_value')}, "
                                         f"host saw the store {row.get('host_saw_store')}" if row["reached"]
                                         else f"not reached: {row.get('error')}"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
