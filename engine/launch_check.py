"""The launch manifest checked against the module, at every problem size, with no GPU.

One function serves the static verdict and the GPU pipeline (which turns the
sizes that pass into plans for the worker), so both give the same category for
everything that is known before a launch:

- the manifest merged with the task's default and resolved at each size
  (`bad_manifest`, `launch_config`: expressions, limits, tensor maps over real
  tensors);
- every launched entry exists and takes the arguments the manifest passes
  (`entry_missing`, `param_mismatch`);
- what the driver would refuse at launch, from the module itself: more
  threads than the entry's `.maxntid`/`.reqntid`, static plus dynamic shared
  memory over the architecture's limit, more registers than a block may hold
  (`launch_config`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ptxbench.engine.categories import OK, Category, worst
from ptxbench.engine.manifest import (
    LaunchConfigError, ManifestError, ResolvedManifest, default_manifest, merge, param_problems, resolve,
)
from ptxbench.engine.ptx_calls import ptx_functions

if TYPE_CHECKING:
    from ptxbench.engine.candidate import Candidate
    from ptxbench.tasks.spec import TaskSpec

# Per architecture: multiprocessors of the device the tasks are measured on (for `num_sms` when
# no GPU is asked), and the most shared memory one block may have (static + dynamic, opt-in).
ARCH_LIMITS: dict[str, tuple[int, int]] = {
    "sm_90a": (132, 232448), "sm_90": (132, 232448),       # H100/H200 SXM: 227 KiB
    "sm_100a": (148, 232448), "sm_100": (148, 232448),     # B200: 227 KiB
}
DEFAULT_LIMITS = (132, 232448)
REGISTERS_PER_BLOCK = 65536
REGISTER_UNIT = 256            # registers are given to a warp in units of 256 (8 per thread)
_THREAD_BOUND = re.compile(r"\.(maxntid|reqntid)\s++(\d++)(?:\s*+,\s*+(\d++))?(?:\s*+,\s*+(\d++))?")
_MAX_DIGITS = 18     # more is nonsense, and int() of a long run of digits is slow (and refused past 4300)


@dataclass
class SizeCheck:
    split: str
    sizes: dict[str, int]
    category: str                  # ok, or the category the GPU stage would give
    message: str = ""
    resolved: ResolvedManifest | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"split": self.split, "sizes": dict(self.sizes), "category": self.category, "message": self.message}


@dataclass
class LaunchCheck:
    launched: list[str]            # the entries the manifest launches, in order, each once
    sizes: list[SizeCheck] = field(default_factory=list)

    @property
    def train_category(self) -> str:
        """What decides a judgement: train sizes only (held-out ones are reported apart)."""
        return worst([s.category for s in self.sizes if s.split == "train"])

    def first_failure(self, split: str = "train") -> SizeCheck | None:
        category = worst([s.category for s in self.sizes if s.split == split])
        return next((s for s in self.sizes if s.split == split and s.category == category != OK), None)


def arch_limits(arch: str) -> tuple[int, int]:
    return ARCH_LIMITS.get(arch, DEFAULT_LIMITS)


def check_launches(candidate: Candidate | None, task: TaskSpec, ptx: str, *, arch: str | None = None,
                   num_sms: int | None = None, resources: dict[str, dict[str, Any]] | None = None,
                   sizes: list[tuple[str, dict[str, int]]] | None = None) -> LaunchCheck:
    """Resolve the candidate's manifest (over the task's default) at every size and check each
    launch against the module. `resources` is ptxas's report per entry (registers, static shared
    memory); without it those two limits are left to the GPU."""
    arch = arch or task.arch
    sms, max_shared = arch_limits(arch)
    num_sms = num_sms or sms
    all_sizes = sizes or task.all_sizes()
    try:
        manifest = merge(default_manifest(task), candidate.manifest if candidate is not None else None)
    except ManifestError as exc:
        return LaunchCheck([], [SizeCheck(split, dict(s), "bad_manifest", str(exc)) for split, s in all_sizes])
    out = LaunchCheck(list(dict.fromkeys(x.entry for x in manifest.launches)))
    bounds = _thread_bounds(ptx)
    for split, s in all_sizes:
        try:
            resolved = resolve(manifest, task, s, num_sms)
        except (ManifestError, LaunchConfigError) as exc:
            out.sizes.append(SizeCheck(split, dict(s), exc.category, str(exc)))
            continue
        problems = param_problems(resolved, ptx) or _launch_problems(resolved, bounds, resources, max_shared, arch)
        if problems:
            category = worst([c for c, _ in problems])
            message = "; ".join(m for _, m in problems)
            if category == Category.ENTRY_MISSING:
                message += _mangled_hint(resolved, ptx)
            out.sizes.append(SizeCheck(split, dict(s), category, message))
            continue
        out.sizes.append(SizeCheck(split, dict(s), OK, resolved=resolved))
    return out


def _thread_bounds(ptx: str) -> dict[str, tuple[str, int]]:
    """Entry → (directive, the most threads a block may have) from `.maxntid` / `.reqntid`."""
    out = {}
    for name, f in ptx_functions(ptx).items():
        if f.kind == "entry" and (m := _THREAD_BOUND.search(f.head)):
            dims = [int(d) if len(d) <= _MAX_DIGITS else 10 ** _MAX_DIGITS for d in m.groups()[1:] if d]
            out[name] = (f".{m.group(1)} {', '.join(map(str, dims))}", math.prod(dims))
    return out


def _launch_problems(resolved: ResolvedManifest, bounds: dict[str, tuple[str, int]],
                     resources: dict[str, dict[str, Any]] | None, max_shared: int,
                     arch: str) -> list[tuple[str, str]]:
    problems = []
    for i, launch in enumerate(resolved.launches):
        where = f"launches[{i}] ({launch.entry})"
        threads = launch.threads_per_block
        if launch.entry in bounds and threads > bounds[launch.entry][1]:
            directive, most = bounds[launch.entry]
            problems.append(("launch_config", f"{where}: {threads} threads per block, but the entry declares "
                                              f"{directive} (at most {most})"))
        r = (resources or {}).get(launch.entry) or {}
        static = int(r.get("shared_bytes") or 0)
        if static + launch.shared_bytes > max_shared:
            problems.append(("launch_config", f"{where}: {static} bytes of static and {launch.shared_bytes} of "
                                              f"dynamic shared memory, more than {max_shared} bytes a block "
                                              f"may have on {arch}"))
        regs = r.get("registers")
        if regs:
            per_warp = math.ceil(regs * 32 / REGISTER_UNIT) * REGISTER_UNIT
            need = per_warp * math.ceil(threads / 32)
            if need > REGISTERS_PER_BLOCK:
                problems.append(("launch_config", f"{where}: {threads} threads of {regs} registers need {need} "
                                                  f"registers, more than the {REGISTERS_PER_BLOCK} a block may have"))
    return problems


_SOURCE_NAME = re.compile(r"(\d+)")


def demangled_base(name: str) -> str | None:
    """The unqualified C++ name of an Itanium-mangled symbol (`_Z4gemmILi128EEvPf` → gemm), else None."""
    if not name.startswith("_Z"):
        return None
    i = 2
    nested = name[i:i + 1] == "N"
    i += nested
    last = None
    while i < len(name) and (m := _SOURCE_NAME.match(name, i)):
        if len(m.group(1)) > _MAX_DIGITS:    # no real name is that long
            return None
        length = int(m.group(1))
        last = name[m.end():m.end() + length]
        i = m.end() + length
        if not nested:
            break
    return last or None


def _mangled_hint(resolved: ResolvedManifest, ptx: str) -> str:
    entries = [n for n, f in ptx_functions(ptx).items() if f.kind == "entry"]
    hints = []
    for launch in resolved.launches:
        same = [e for e in entries if demangled_base(e) == launch.entry]
        if same:
            hints.append(f"{', '.join(same)} is the C++ mangled name of a {launch.entry!r}: name it in the "
                         "launch, or declare the kernel extern \"C\"")
    return ("; " + "; ".join(hints)) if hints else ""
