"""The sandbox every tool that reads candidate text runs under (engine/sandbox.py, docs/security.md).

Each test plants a secret where a hostile candidate would look for it (a file outside the job's
folder, a variable of the judge's environment, the judge's own /proc entry) and shows that the
confined tool cannot reach it, then each limit stops what it is there to stop. The filesystem and
network tests need Landlock (Linux 5.13+); where the kernel has none they check that the verdict
says so instead.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from ptxbench.engine import assemble as assemble_mod
from ptxbench.engine import sandbox
from ptxbench.engine.assemble import assemble
from ptxbench.engine.cache import Cache
from ptxbench.engine.sandbox import Limits, landlock_abi
from ptxbench.engine.toolchain import ToolchainError, find_tool, run_tool

SECRET = "PTXBENCH-PLANTED-SECRET-7c1e"
needs_landlock = pytest.mark.skipif(landlock_abi() == 0, reason="no Landlock on this kernel")

KERNEL = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n'


@pytest.fixture
def secret_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    path = home / "credentials"
    path.write_text(SECRET + "\n")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    return path


def _job(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    return job


def test_a_tool_sees_none_of_the_judges_environment(tmp_path, secret_file):
    run = run_tool(["sh", "-c", "env"], timeout=10, cwd=_job(tmp_path))
    assert run.returncode == 0
    assert SECRET not in run.output
    names = {line.split("=", 1)[0] for line in run.stdout.splitlines() if "=" in line}
    assert names <= {"PATH", "HOME", "TMPDIR", "LC_ALL", "LANG", "NVDISASM_PATH", "PWD", "SHLVL", "_"}


@needs_landlock
def test_a_tool_cannot_read_files_outside_the_toolchain_and_its_job(tmp_path, secret_file):
    job = _job(tmp_path)
    (job / "mine.txt").write_text("the job's own file\n")
    run = run_tool(["sh", "-c", f"cat {secret_file}; cat mine.txt; cat /etc/hostname; ls {tmp_path}"],
                   timeout=10, cwd=job)
    assert SECRET not in run.output
    assert "the job's own file" in run.stdout
    assert "Permission denied" in run.stderr


@needs_landlock
def test_a_tool_cannot_read_the_judges_proc_entry(tmp_path, secret_file):
    run = run_tool(["sh", "-c", f"cat /proc/{os.getpid()}/environ; cat /proc/self/environ; cat /proc/$PPID/cmdline"],
                   timeout=10, cwd=_job(tmp_path))
    assert SECRET not in run.output
    assert run.returncode != 0


@needs_landlock
def test_a_tool_cannot_write_outside_its_job(tmp_path):
    outside = tmp_path / "outside.txt"
    run = run_tool(["sh", "-c", f"echo x > {outside}; echo y > inside.txt"], timeout=10, cwd=_job(tmp_path))
    assert not outside.exists()
    assert (tmp_path / "job" / "inside.txt").read_text() == "y\n"
    assert "Permission denied" in run.stderr


@pytest.mark.skipif(landlock_abi() < 4, reason="Landlock without network rules (ABI < 4)")
def test_a_tool_cannot_open_a_tcp_connection(tmp_path):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        if not Path("/bin/bash").exists():
            pytest.skip("bash is needed for /dev/tcp")
        run = run_tool(["bash", "-c", f"echo hello > /dev/tcp/127.0.0.1/{port}"], timeout=10, cwd=_job(tmp_path))
        server.settimeout(0.5)
        with pytest.raises(OSError):
            server.accept()
    assert run.returncode != 0


@needs_landlock
def test_the_host_compiler_quotes_no_file_a_line_directive_names(tmp_path, secret_file, monkeypatch):
    """The text check refuses `#line "file"` first; with that check taken away, the confined
    compiler still cannot read the file to quote it (without the sandbox it did: gcc printed the
    line under its `#error`)."""
    monkeypatch.setattr(assemble_mod, "directive_problem", lambda text: None)
    source = f'#line 1 "{secret_file}"\n#error x\n# 1 "/proc/self/environ"\n#error y\n' + KERNEL
    result = assemble(source, "cuda", "sm_90a")
    assert result.category == "cuda_compile_error"
    assert SECRET not in result.log + result.evidence + result.evidence_source


def test_the_text_check_refuses_a_line_directive_before_the_compiler_runs(secret_file):
    result = assemble(f'#line 1 "{secret_file}"\n#error x\n' + KERNEL, "cuda", "sm_90a")
    assert result.category == "forbidden_directive" and result.evidence_line == 1
    assert "nvcc" not in result.seconds
    assert SECRET not in result.log + result.evidence


def test_the_address_space_cap_stops_a_tool_and_is_the_candidates_verdict(tmp_path):
    job = _job(tmp_path)
    # ptxas builds initialised module data in memory: far over a 256 MiB cap.
    (job / "k.ptx").write_text(".version 8.0\n.target sm_90a\n.address_size 64\n"
                               ".global .align 4 .b8 big[1073741824] = {1};\n"
                               ".visible .entry k(.param .u64 p)\n{\n\tret;\n}\n")
    run = run_tool([str(find_tool("ptxas")), "-arch=sm_90a", "k.ptx", "-o", "k.cubin"], timeout=60, cwd=job,
                   limits=Limits(address_space=256 << 20))
    assert run.returncode != 0 and run.cap_hit == "address_space", run.output


def test_module_data_over_the_bound_is_refused_before_ptxas():
    ptx = (Path(__file__).parent / "data" / "ptx" / "assemble" / "resource_limit_module_data.ptx").read_text()
    started = time.perf_counter()
    result = assemble(ptx, "ptx", "sm_90a")
    assert result.category == "resource_limit" and "ptxas" not in result.seconds
    assert time.perf_counter() - started < 5


def test_the_file_size_cap(tmp_path):
    run = run_tool(["sh", "-c", "head -c 8000000 /dev/zero > big.bin"], timeout=10, cwd=_job(tmp_path),
                   limits=Limits(file_size=1 << 20))
    assert run.cap_hit == "file_size" or "File size limit" in run.output, run


def test_the_cpu_cap(tmp_path):
    run = run_tool(["sh", "-c", "while :; do :; done"], timeout=20, cwd=_job(tmp_path), limits=Limits(cpu_seconds=1))
    assert run.cap_hit == "cpu_seconds" and not run.timed_out


def test_a_flood_of_output_is_kept_bounded(tmp_path):
    run = run_tool(["sh", "-c", "yes 'an error line' | head -c 40000000"], timeout=30, cwd=_job(tmp_path))
    assert run.returncode == 0
    assert len(run.stdout) <= sandbox.MAX_OUTPUT_BYTES + 200
    assert run.output_dropped >= 40_000_000 - sandbox.MAX_OUTPUT_BYTES


def test_a_tool_killed_from_outside_is_a_tool_error_never_a_verdict(tmp_path):
    from ptxbench.engine.assemble import AssembleResult, _tool_ended_badly

    killed = run_tool(["sh", "-c", "kill -9 $$"], timeout=10, cwd=_job(tmp_path))
    assert killed.cap_hit == "killed"
    with pytest.raises(ToolchainError):
        _tool_ended_badly(killed, "ptxas", sandbox.Deadline(10), AssembleResult("ok", "ptx", "sm_90a"))
    # nvcc says so of a child it ran (cicc, cc1plus), in its own name ...
    child = sandbox.Confined(argv=["nvcc"], returncode=4, stdout="", seconds=1.0, timed_out=False,
                             stderr="nvcc error   : 'cicc' died due to signal 9 (Kill signal)")
    assert sandbox._cap_hit(child, sandbox.DEFAULT_LIMITS) == "killed"
    # ... which a candidate's own diagnostic, however worded, cannot pass for (nor for a cap it hit).
    for words in ("nvcc error   : 'cicc' died due to signal 9 (Kill signal)", "out of memory",
                  "gcc: internal compiler error: File size limit exceeded"):
        for line in (f"candidate.cu:2:2: error: #error \r{words}", f"cc1plus: fatal error: {words}: cannot be opened"):
            forged = sandbox.Confined(argv=["nvcc"], returncode=1, stdout="", seconds=1.0, timed_out=False,
                                      stderr=line)
            assert sandbox._cap_hit(forged, sandbox.DEFAULT_LIMITS) == "", line
    crashed = sandbox.Confined(argv=["ptxas"], returncode=-11, stdout="", stderr="", seconds=1.0, timed_out=False)
    result = AssembleResult("ok", "ptx", "sm_90a")
    assert not _tool_ended_badly(crashed, "ptxas", sandbox.Deadline(10), result)
    assert result.transient       # a crash is never cached as the candidate's verdict


def test_a_deadline_leaves_no_files_behind_and_is_not_cached(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    store = Cache(tmp_path / "cache")
    ptx = (Path(__file__).parent / "data" / "ptx" / "triton_gemm_sm90a.ptx").read_text()
    result = assemble(ptx, "ptx", "sm_90a", cache=store, timeout=0.05)
    assert result.timed_out and result.transient and result.category == "assemble_other"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("ptxbench-")]
    assert not store.files()


def test_nvcc_and_ptxas_share_one_deadline(monkeypatch):
    seen: list[float] = []
    real = assemble_mod.run_tool

    def spy(argv, *, timeout, cwd, limits=None):
        seen.append(timeout)
        time.sleep(0.2)
        return real(argv, timeout=timeout, cwd=cwd, limits=limits)

    monkeypatch.setattr(assemble_mod, "run_tool", spy)
    assemble(KERNEL, "cuda", "sm_90a", timeout=30)
    assert len(seen) == 2 and seen[1] < seen[0] - 0.2


def test_the_verdict_records_the_confinement(tmp_path):
    from ptxbench.engine.static import judge_static

    v = judge_static(Path(__file__).parent / "data" / "ptx" / "assemble" / "ok_add.ptx", arch="sm_90a",
                     cache=Cache(tmp_path))
    assert v.sandbox["sandbox"] == sandbox.describe()
    assert v.sandbox["filesystem"] == (landlock_abi() > 0)
    assert v.to_dict()["sandbox"] == v.sandbox


def test_the_worker_gets_an_allow_listed_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    monkeypatch.setenv("PTXBENCH_API_KEY", SECRET)
    monkeypatch.setenv("NVIDIA_API_KEY", SECRET)
    monkeypatch.setenv("CUDA_AUTH_TOKEN", SECRET)
    env = sandbox.worker_environment({"CUDA_VISIBLE_DEVICES": "0"})
    assert SECRET not in env.values()
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["PATH"] == os.environ["PATH"]
