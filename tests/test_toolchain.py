"""The engine finds NVIDIA's tools inside the installed wheels, never in a system CUDA."""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

import pytest

from ptxbench.engine import toolchain
from ptxbench.engine.toolchain import (
    ENV_OVERRIDE,
    PIP_INSTALL,
    TOOLS,
    ToolchainError,
    check_toolchain,
    find_tool,
    run_tool,
    tool_env,
    tool_version,
    tool_versions,
)


@pytest.mark.parametrize("tool", TOOLS)
def test_tools_come_from_the_nvidia_wheels(tool, monkeypatch):
    monkeypatch.delenv(ENV_OVERRIDE[tool], raising=False)
    path = find_tool(tool)
    assert path.is_file() and os.access(path, os.X_OK)
    assert "site-packages" in path.parts and "nvidia" in path.parts
    assert not str(path).startswith("/usr/local/cuda")


def test_versions_are_the_pinned_releases():
    versions = tool_versions()
    assert versions["ptxas"].startswith("13.5.")
    assert versions["nvcc"].startswith("13.5.")
    assert versions["cuobjdump"].startswith("13.")
    assert versions["nvdisasm"].startswith("13.")
    assert check_toolchain() == versions


def test_version_lookup_is_cached():
    tool_version("ptxas")
    started = time.perf_counter()
    for _ in range(50):
        tool_version("ptxas")
    assert time.perf_counter() - started < 0.5  # no subprocess per call


def test_env_override_wins(tmp_path, monkeypatch):
    real = find_tool("ptxas")
    copy = tmp_path / "my-ptxas"
    shutil.copy2(real, copy)
    monkeypatch.setenv("PTXBENCH_PTXAS", str(copy))
    assert find_tool("ptxas") == copy
    assert tool_version("ptxas").startswith("13.5.")


def test_env_override_that_is_not_a_program_names_the_variable(tmp_path, monkeypatch):
    junk = tmp_path / "ptxas"
    junk.write_text("not a program")
    junk.chmod(junk.stat().st_mode & ~(stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))
    monkeypatch.setenv("PTXBENCH_NVCC", str(junk))
    with pytest.raises(ToolchainError) as info:
        find_tool("nvcc")
    assert "PTXBENCH_NVCC" in str(info.value)
    monkeypatch.setenv("PTXBENCH_NVCC", str(tmp_path / "missing"))
    with pytest.raises(ToolchainError):
        find_tool("nvcc")


@pytest.mark.parametrize("tool", TOOLS)
def test_missing_tool_says_what_to_install(tool, tmp_path, monkeypatch):
    # An `nvidia` package folder without the binaries, as after uninstalling a wheel.
    monkeypatch.delenv(ENV_OVERRIDE[tool], raising=False)
    (tmp_path / "cu13" / "bin").mkdir(parents=True)
    monkeypatch.setattr(toolchain, "_nvidia_roots", lambda: [tmp_path])
    with pytest.raises(ToolchainError) as info:
        find_tool(tool)
    message = str(info.value)
    assert message.startswith(tool)
    assert PIP_INSTALL[tool] in message and "pip install" in message


def test_tool_env_lets_cuobjdump_find_nvdisasm_and_holds_nothing_of_the_judges(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted")
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-DPLANTED")
    env = tool_env(tmp_path)
    nvdisasm_dir = str(find_tool("nvdisasm").parent)
    assert env["NVDISASM_PATH"] == nvdisasm_dir
    assert env["PATH"].split(os.pathsep)[0] == nvdisasm_dir
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path)
    assert set(env) == {"PATH", "HOME", "TMPDIR", "LC_ALL", "LANG", "NVDISASM_PATH"}


def test_run_tool_kills_the_whole_group_at_the_deadline(tmp_path):
    marker = tmp_path / "child-survived"
    script = f"sleep 3 & wait; touch {marker}"
    started = time.perf_counter()
    run = run_tool(["sh", "-c", script], timeout=0.3, cwd=tmp_path)
    assert run.timed_out and run.returncode is None
    assert time.perf_counter() - started < 2.0
    time.sleep(0.2)
    assert not marker.exists()


def test_run_tool_reports_output_and_status(tmp_path):
    run = run_tool([str(find_tool("ptxas")), "--version"], timeout=30, cwd=tmp_path)
    assert run.returncode == 0 and not run.timed_out
    assert "release 13.5" in run.output


def test_run_tool_on_a_missing_program_is_a_toolchain_error(tmp_path):
    with pytest.raises(ToolchainError):
        run_tool([str(Path(tmp_path) / "nope")], timeout=5, cwd=tmp_path)
