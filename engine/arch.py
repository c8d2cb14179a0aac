"""The target a GPU runs, from its compute capability: one rule for every caller.

The worker reads CUDA's (major, minor); `ptxbench check` and `ptxbench run` read nvidia-smi's
"9.0". Architecture-specific targets (`sm_90a`, `sm_100a`: wgmma, tcgen05 and their kin) begin
with compute capability 9.0; older devices have only the plain target (`sm_80`), so no name
that ptxas does not know is ever made.
"""

from __future__ import annotations

ARCH_SPECIFIC_FROM = 9  # sm_90a is the first target with an `a` variant


def arch_of(major: int, minor: int) -> str:
    """The architecture-specific target a device of this compute capability runs."""
    return f"sm_{major}{minor}" + ("a" if major >= ARCH_SPECIFIC_FROM else "")


def arch_of_capability(capability: str) -> str:
    """nvidia-smi's `compute_cap` ("9.0", "10.0", "12.1") → the target ("sm_90a", "sm_100a", "sm_121a")."""
    major, _, minor = capability.strip().partition(".")
    return arch_of(int(major), int(minor or 0))
