"""NVIDIA's assembler, compiler driver and disassemblers, found inside the installed PyPI wheels.

A system CUDA install is never consulted: the pinned wheels are what makes a
verdict reproducible. An environment variable per tool may point elsewhere
(for example at a ptxas of the same release on the GPU machine).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

from ptxbench.engine import sandbox

TOOLS: tuple[str, ...] = ("ptxas", "nvcc", "cuobjdump", "nvdisasm")

ENV_OVERRIDE: dict[str, str] = {
    "ptxas": "PTXBENCH_PTXAS",
    "nvcc": "PTXBENCH_NVCC",
    "cuobjdump": "PTXBENCH_CUOBJDUMP",
    "nvdisasm": "PTXBENCH_NVDISASM",
}

# The wheels that provide each tool, pinned as in pyproject.toml. nvcc needs
# the front end (crt), cicc (nvvm) and the runtime headers beside it.
PIP_INSTALL: dict[str, str] = {
    "ptxas": "pip install nvidia-cuda-nvcc==13.5.37",
    "nvcc": (
        "pip install nvidia-cuda-nvcc==13.5.37 nvidia-cuda-crt==13.5.37 "
        "nvidia-nvvm==13.5.37 nvidia-cuda-runtime==13.5.37"
    ),
    "cuobjdump": "pip install nvidia-cuda-cuobjdump==13.5.37",
    "nvdisasm": "pip install nvidia-cuda-nvdisasm==13.5.37",
}

# Folders of the `nvidia` namespace package that hold binaries: the CUDA 13
# wheels share cu13/bin; the older per-component wheels had their own.
_WHEEL_BIN_DIRS: dict[str, tuple[str, ...]] = {
    "ptxas": ("cu13/bin", "cuda_nvcc/bin"),
    "nvcc": ("cu13/bin", "cuda_nvcc/bin"),
    "cuobjdump": ("cu13/bin", "cuda_cuobjdump/bin"),
    "nvdisasm": ("cu13/bin", "cuda_nvdisasm/bin"),
}


class ToolchainError(RuntimeError):
    """A tool the engine needs is not installed (or cannot run). Not a verdict on a candidate."""

    def __init__(self, tool: str, detail: str, install: str | None = None):
        self.tool = tool
        self.detail = detail
        self.install = install if install is not None else PIP_INSTALL.get(tool, "")
        hint = (f"; install it with `pip install 'ptxbench[toolchain]'` (or `{self.install}`)" if self.install
                else "")
        super().__init__(f"{tool}: {detail}{hint}")


def _nvidia_roots() -> list[Path]:
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def find_tool(tool: str) -> Path:
    """The path of one tool; the environment override wins, then the installed wheels."""
    if tool not in TOOLS:
        raise ValueError(f"unknown tool {tool!r}; expected one of {', '.join(TOOLS)}")
    override = os.environ.get(ENV_OVERRIDE[tool])
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ToolchainError(tool, f"{ENV_OVERRIDE[tool]}={override} is not an executable file", "")
        return path
    for root in _nvidia_roots():
        for sub in _WHEEL_BIN_DIRS[tool]:
            path = root / sub / tool
            if path.is_file() and os.access(path, os.X_OK):
                return path
    raise ToolchainError(tool, "not found in the installed NVIDIA wheels")


def host_compiler() -> str:
    """nvcc preprocesses with a host C++ compiler even for device-only -ptx output."""
    for name in ("g++", "c++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    raise ToolchainError("nvcc", "needs a host C++ compiler (g++) on PATH", "apt-get install g++")


def tool_dirs() -> list[Path]:
    """The folders of the installed tools and of the host compiler: a tool process's PATH."""
    return list(_setup(_overrides())[0])


def tool_env(job_dir: str | Path) -> dict[str, str]:
    """The whole environment of a tool process working in `job_dir` (engine.sandbox): the tools'
    folders on PATH (cuobjdump -sass finds nvdisasm there, or through NVDISASM_PATH), HOME and
    TMPDIR in the job's folder, the C locale (messages are parsed). Nothing of the judge's own."""
    dirs, _, extra = _setup(_overrides())
    return sandbox.tool_environment(Path(job_dir), dirs, dict(extra))


def _overrides() -> tuple[str | None, ...]:
    return tuple(os.environ.get(v) for v in ENV_OVERRIDE.values()) + (os.environ.get("PATH"),)


@functools.lru_cache(maxsize=8)
def _setup(overrides: tuple[str | None, ...]) -> tuple[tuple[Path, ...], tuple[Path, ...], tuple[tuple[str, str], ...]]:
    """(PATH folders, folders the tools may read, extra environment), worked out once per set of
    overrides: a tool process starts in milliseconds, and this would cost a few of them each time."""
    tools: list[Path] = []
    for t in TOOLS:
        try:
            tools.append(find_tool(t))
        except ToolchainError:
            continue
    dirs = [t.parent for t in tools]
    try:
        dirs.append(Path(host_compiler()).parent)
    except ToolchainError:
        pass            # nvcc says so when it needs one; ptxas and nvdisasm do not
    extra = tuple(("NVDISASM_PATH", str(t.parent)) for t in tools if t.name == "nvdisasm")
    return (tuple(dict.fromkeys(dirs)), tuple(sandbox.toolchain_roots(tools) + sandbox.host_compiler_dirs()), extra)


_VERSION_RE = re.compile(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)")


@functools.lru_cache(maxsize=None)
def _version_of(path: str, mtime_ns: int) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                             env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(Path(path).name, f"`{path} --version` failed: {exc}") from exc
    m = _VERSION_RE.search(out.stdout + out.stderr)
    if not m:
        raise ToolchainError(Path(path).name, f"`{path} --version` printed no release number")
    return m.group(2)


def tool_version(tool: str) -> str:
    """For example "13.5.37"; cached per binary (path and modification time)."""
    path = find_tool(tool)
    return _version_of(str(path), path.stat().st_mtime_ns)


def tool_versions(tools: tuple[str, ...] = TOOLS) -> dict[str, str]:
    """Versions of the given tools, for evaluation rows and cache keys; raises if one is missing."""
    return {t: tool_version(t) for t in tools}


def check_toolchain() -> dict[str, str | None]:
    """Every tool's version, or None where it is missing; never raises."""
    found: dict[str, str | None] = {}
    for t in TOOLS:
        try:
            found[t] = tool_version(t)
        except ToolchainError:
            found[t] = None
    return found


ToolRun = sandbox.Confined


def run_tool(argv: list[str], *, timeout: float, cwd: str | Path, limits: sandbox.Limits | None = None) -> ToolRun:
    """Run one tool over a job's folder `cwd` (made by engine.sandbox.job_dir), confined
    (engine.sandbox: environment, limits, filesystem), with a deadline; the tool's process group
    dies with it. Raises ToolchainError when the tool cannot be started at all."""
    _, readable, _ = _setup(_overrides())
    policy = sandbox.Policy(Path(cwd), list(readable), limits or sandbox.DEFAULT_LIMITS)
    try:
        return sandbox.run_confined(argv, policy=policy, timeout=timeout, env=tool_env(cwd))
    except OSError as exc:
        raise ToolchainError(Path(argv[0]).name, f"cannot run {argv[0]}: {exc}") from exc
