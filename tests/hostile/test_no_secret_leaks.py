"""No secret of the judging machine leaks through any output, whatever a candidate asks the tools to read.

A planted secret sits in the judge's environment (an API key) and in a file outside the job's folder
(in the judge's HOME). Hostile CUDA candidates ask the compiler for it every way this corpus knows:
a `#line` or line marker naming the file (the compiler quotes "source" lines from it), an include
of its path, `__has_include` of it, `#pragma GCC dependency`, `_Pragma` built by macros, and
/proc/self/environ. Each is judged through every path that shows text: the static verdict as
`ptxbench check` prints it (text and JSON), the agent's `assemble` tool answer (the same text an
MCP client gets), the store after `ptxbench import`, and the assembly cache on disk. The secret
must appear in none of them. docs/security.md says what stops each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ptxbench.engine.cache import Cache
from ptxbench.engine.candidate import Candidate
from ptxbench.engine.static import judge_static

SECRET = "PTXBENCH-LEAK-CANARY-51d3e0"
TASK = "vector_add_smoke"
KERNEL = ('extern "C" __global__ void vector_add(const float* x, const float* y, float* z, int n) {\n'
          '    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) z[i] = x[i] + y[i];\n}\n')


def _candidates(secret_file: Path) -> dict[str, str]:
    f = str(secret_file)
    return {
        "line_directive": f'#line 1 "{f}"\n#error quote me\n' + KERNEL,
        "line_marker": f'# 1 "{f}"\n#error quote me\n' + KERNEL,
        "proc_environ": '#line 1 "/proc/self/environ"\n#error quote me\n' + KERNEL,
        "include_path": f'#include "{f}"\n' + KERNEL,
        "include_by_macro": f'#define P "{f}"\n#include P\n' + KERNEL,
        "has_include": f'#if __has_include("{f}")\n#error exists\n#endif\n' + KERNEL,
        "pragma_dependency": f'#pragma GCC dependency "{f}"\n' + KERNEL,
        "pragma_by_macro": ('#define S(x) #x\n#define X(x) S(x)\n'
                            f'_Pragma(X(GCC dependency "{f}"))\n' + KERNEL),
        "spliced_line": f'#li\\\nne 1 "{f}"\n#error quote me\n' + KERNEL,
        "ucn_directive": f'#\\u006cine 1 "{f}"\n#error quote me\n' + KERNEL,
        "cr_splice": f'int a;\r#\\\r include "{f}"\n' + KERNEL,
        "pasted_pragma": ('#define S(x) #x\n#define X(x) S(x)\n#define CAT(a, b) a##b\n'
                          f'CAT(_Pra, gma)(X(GCC dependency "{f}"))\n' + KERNEL),
    }


def test_a_pragma_built_by_pasting_cannot_tell_which_paths_exist(planted, judge_env):
    """No text check sees `CAT(_Pra, gma)(…)`, and Landlock does not stop `stat`: the compiler's message
    is all that would tell a file shut out from a missing one, and it reads the same for both."""
    _, secret_file, candidates = planted
    code = candidates["pasted_pragma"]
    present = judge_static(Candidate("cuda", code, None, "a"), TASK, use_cache=False)
    absent = judge_static(Candidate("cuda", code.replace(str(secret_file), str(secret_file) + "-missing"), None, "b"),
                          TASK, use_cache=False)
    assert present.category == absent.category
    assert present.assembler_log.replace(str(secret_file), "F") == \
        absent.assembler_log.replace(str(secret_file) + "-missing", "F")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    home = tmp_path_factory.mktemp("home")
    secret_file = home / ".credentials"
    secret_file.write_text(SECRET + "\n" + SECRET + "\n")
    return home, secret_file, _candidates(secret_file)


@pytest.fixture
def judge_env(planted, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    home, _, _ = planted
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_static_verdicts_and_the_cache_hold_no_secret(planted, judge_env):
    _, _, candidates = planted
    cache = Cache(judge_env)
    for name, code in candidates.items():
        v = judge_static(Candidate("cuda", code, None, f"hostile:{name}"), TASK, cache=cache)
        assert v.category not in ("ok",), name
        assert SECRET not in v.to_json(with_text=True), name
    for _, _, path in cache.files():
        assert SECRET.encode() not in path.read_bytes(), path


def test_check_prints_no_secret_as_text_or_json(planted, judge_env, tmp_path):
    _, _, candidates = planted
    env = {**os.environ, "NO_COLOR": "1"}
    for name in ("line_directive", "pragma_by_macro", "proc_environ"):
        path = tmp_path / f"{name}.cu"
        path.write_text(candidates[name])
        for extra in ([], ["--json"]):
            out = subprocess.run([sys.executable, "-m", "ptxbench.cli.main", "check", str(path), "--task", TASK,
                                  "--static", *extra], capture_output=True, text=True, env=env, timeout=120)
            assert SECRET not in out.stdout + out.stderr, (name, extra)
            if extra:
                assert json.loads(out.stdout)


def test_the_agents_tool_answers_hold_no_secret(planted, judge_env):
    from ptxbench.models.agent_tools import GpuAccess, JudgeTools
    from ptxbench.tasks.spec import get_task

    _, _, candidates = planted
    tools = JudgeTools(get_task(TASK), gpu=GpuAccess())
    for name, code in candidates.items():
        answer = tools.call("assemble", json.dumps({"code": code, "language": "cuda"}))
        assert SECRET not in answer.text(), name


def test_the_store_holds_no_secret_after_an_import(planted, judge_env, tmp_path):
    _, _, candidates = planted
    lines = [json.dumps({"task": TASK, "model": "hostile", "language": "cuda", "code": code, "sample_index": i})
             for i, code in enumerate(candidates.values())]
    responses = tmp_path / "hostile.jsonl"
    responses.write_text("\n".join(lines) + "\n")
    store = tmp_path / "store.sqlite"
    out = subprocess.run([sys.executable, "-m", "ptxbench.cli.main", "import", str(responses), "--db", str(store), "--create"],
                         capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"}, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert SECRET not in out.stdout + out.stderr
    for path in tmp_path.glob("store.sqlite*"):
        assert SECRET.encode() not in path.read_bytes(), path
