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
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

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
        hint = f"; install it with `{self.install}`" if self.install else ""
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


def tool_env(extra_dirs: list[Path] | None = None) -> dict[str, str]:
    """Environment for a tool subprocess: cuobjdump -sass runs nvdisasm, which it finds via NVDISASM_PATH."""
    env = dict(os.environ)
    dirs: list[str] = [str(d) for d in (extra_dirs or [])]
    try:
        nvdisasm_dir = str(find_tool("nvdisasm").parent)
        env["NVDISASM_PATH"] = nvdisasm_dir
        dirs.append(nvdisasm_dir)
    except ToolchainError:
        pass
    env["PATH"] = os.pathsep.join(dirs + [env.get("PATH", "")])
    # Messages are parsed: keep them in one language.
    env["LC_ALL"] = "C"
    return env


_VERSION_RE = re.compile(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)")


@functools.lru_cache(maxsize=None)
def _version_of(path: str, mtime_ns: int) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
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


@dataclass
class ToolRun:
    argv: list[str]
    returncode: int | None  # None when killed at the deadline
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool

    @property
    def output(self) -> str:
        return (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()


def run_tool(argv: list[str], *, timeout: float, cwd: str | Path | None = None, env: dict[str, str] | None = None) -> ToolRun:
    """Run one tool with a deadline. The tool gets its own process group so
    that nvcc's children (cicc, the host compiler) die with it at the deadline."""
    started = time.perf_counter()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env if env is not None else tool_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise ToolchainError(Path(argv[0]).name, f"cannot run {argv[0]}: {exc}") from exc
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        timed_out = True
    return ToolRun(
        argv=list(argv),
        returncode=None if timed_out else proc.returncode,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        seconds=time.perf_counter() - started,
        timed_out=timed_out,
    )
