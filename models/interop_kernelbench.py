"""A KernelBench run folder (ScalingIntelligence/KernelBench), for the problems PTXBench has a task for.

Their layout, as their scripts/generate_samples.py and scripts/eval_from_generations.py write it:
`runs/<run>/level_<L>_problem_<P>_sample_<S>_kernel.py`, each a Python module whose `ModelNew`
calls a CUDA extension built with `torch.utils.cpp_extension.load_inline(cuda_sources=…,
functions=[…])`, and `eval_results.json`, their verdicts: {problem id: [{sample_id, compiled,
correctness, runtime, metadata, …}]}.

A problem maps to a task only where the two compute the same function on the same layout
(PROBLEMS, with the KernelBench file each entry was read from); every other problem is skipped by
its level and number. The module is parsed (never run) for its CUDA source and the function its
`forward` calls; a `forward` that does more than call the extension with its own arguments is
skipped (PTXBench runs the kernel alone). The CUDA source is split from its PyTorch wrapper
(models/host_wrapper.py): the wrapper takes the task's inputs and returns its one output. A kernel
that reads the tensors as another element type than the task's (KernelBench's default is fp32,
PTXBench's tasks are bf16) is skipped with the reason. Their verdicts are kept as metadata.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from ptxbench.db.writes import CONTEXT_LEVELS
from ptxbench.models.host_wrapper import Mismatch, split_wrapper
from ptxbench.models.interop import (
    Entry,
    Options,
    ReadResult,
    Skipped,
    arch_of,
    as_dict,
    files_under,
    kept_metadata,
    read_json,
    read_text,
)
from ptxbench.tasks.spec import get_task, task_ids

# (level, problem id) → (their file's name, {arch: task}). Read from KernelBench/level1/*.py at
# ScalingIntelligence/KernelBench commit 423217d: 17 is torch.matmul(A, B.T) with A (M, K) and
# B (N, K), PTXBench's GEMM; 23 is torch.softmax(x, dim=1) over a (batch, dim) matrix, its softmax.
PROBLEMS: dict[tuple[int, int], tuple[str, dict[str, str]]] = {
    (1, 17): ("17_Matmul_with_transposed_B", {"sm_90a": "gemm_bf16_sm90a", "sm_100a": "gemm_bf16_sm100a"}),
    (1, 23): ("23_Softmax", {"sm_90a": "softmax_bf16_sm90a"}),
}
_KERNEL_FILE = re.compile(r"level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py")


def _mapped() -> str:
    return ", ".join(f"level {lv} problem {n} ({name})" for (lv, n), (name, _) in PROBLEMS.items())


def _strings(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "…"` string constants."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node.value.value
    return out


def _string(node: ast.AST | None, strings: dict[str, str]) -> str | None:
    if isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) == 1:
        node = node.elts[0]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return strings.get(node.id)
    return None


def extension(source: str) -> tuple[str, list[str], str] | str:
    """(CUDA source, the functions it exports, the function forward calls) of a KernelBench module, or why not."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"not Python the importer can parse ({type(exc).__name__})"
    strings = _strings(tree)
    cuda, functions = None, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "load_inline":
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            cuda = _string(kw.get("cuda_sources"), strings)
            fn = kw.get("functions")
            if isinstance(fn, (ast.List, ast.Tuple)):
                functions = [e.value for e in fn.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            break
    if cuda is None:
        return "no CUDA extension (load_inline with cuda_sources as a string): PTXBench judges CUDA or PTX kernels"
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    forward = next((n for n in (model.body if model else []) if isinstance(n, ast.FunctionDef) and n.name == "forward"),
                   None)
    if forward is None:
        return "no ModelNew.forward"
    params = [a.arg for a in forward.args.args[1:]]
    body = [s for s in forward.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute) or call.keywords:
        return "ModelNew.forward does more than return one call of the extension: PTXBench runs the kernel alone"
    args = []
    for a in call.args:
        while isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute) and a.func.attr in ("contiguous", "cuda") \
                and not a.args:
            a = a.func.value
        args.append(a.id if isinstance(a, ast.Name) else None)
    if args != params:
        return (f"ModelNew.forward calls {call.func.attr}({', '.join(str(a) for a in args)}), not its own arguments "
                f"({', '.join(params)}) in order: PTXBench runs the kernel alone")
    return cuda, functions, call.func.attr


def _their_results(base: Path, options: Options) -> dict[tuple[int, int], dict[str, Any]]:
    """eval_results.json as {(problem, sample): verdict}; {} when there is none or it is not theirs."""
    if not (base / "eval_results.json").is_file():
        return {}
    try:
        data = read_json(base, "eval_results.json", options.stores, budget=options.budget)
    except ValueError:
        return {}
    out: dict[tuple[int, int], dict[str, Any]] = {}
    if not isinstance(data, dict):
        return out
    for problem, results in data.items():
        items = results if isinstance(results, list) else (
            [{"sample_id": k, **v} for k, v in results.items() if isinstance(v, dict)] if isinstance(results, dict) else [])
        for r in items:
            if isinstance(r, dict) and str(problem).isdigit() and str(r.get("sample_id", "")).isdigit():
                keep = {k: r[k] for k in ("compiled", "correctness", "runtime") if k in r}
                meta = as_dict(r.get("metadata"))
                for k in ("hardware", "device"):
                    if isinstance(meta.get(k), str):
                        keep[k] = meta[k]
                out[(int(problem), int(r["sample_id"]))] = keep
    return out


def read_kernelbench(path: Path, options: Options) -> ReadResult:
    result = ReadResult("kernelbench")
    if not path.is_dir():
        result.fatal.append(f"{path}: a KernelBench run is a folder (runs/<run name>)")
        return result
    base = path.resolve()
    context = options.context or "none"
    if context not in CONTEXT_LEVELS:
        result.fatal.append(f"context: must be one of {', '.join(CONTEXT_LEVELS)}, got {context!r}")
        return result
    model = options.model or f"kernelbench:{base.name}"
    if options.model is None:
        result.notes.append(f"no model named: stored as {model!r} (give --model)")
    run = options.run or base.name
    theirs = _their_results(base, options)
    known = set(task_ids())
    try:
        names = [n for n in files_under(base, ".", lambda n: bool(_KERNEL_FILE.fullmatch(n))) if "/" not in n]
    except ValueError as exc:
        result.fatal.append(str(exc))
        return result
    for name in names:
        m = _KERNEL_FILE.fullmatch(Path(name).name)
        assert m is not None
        level, problem, sample = (int(g) for g in m.groups())
        verdict = theirs.get((problem, sample), {})
        arch = options.arch or arch_of(verdict.get("hardware")) or "sm_90a"
        mapped = PROBLEMS.get((level, problem))
        task_id = mapped[1].get(arch) if mapped else None
        if mapped is None:
            result.skipped.append(Skipped(name, f"KernelBench level {level} problem {problem}: no PTXBench task "
                                          f"computes it (mapped: {_mapped()})"))
            continue
        if task_id is None or task_id not in known:
            result.skipped.append(Skipped(name, f"KernelBench {mapped[0]}: no PTXBench task for it on {arch}"))
            continue
        try:
            source = read_text(base, name, options.stores, budget=options.budget)
        except ValueError as exc:
            result.skipped.append(Skipped(name, str(exc), "bad"))
            continue
        found = extension(source)
        if isinstance(found, str):
            result.skipped.append(Skipped(name, f"KernelBench {mapped[0]}: {found}"))
            continue
        cuda, functions, called = found
        if functions and called not in functions:
            result.skipped.append(Skipped(name, f"ModelNew.forward calls {called}, which the extension does not export"))
            continue
        task = get_task(task_id)
        try:
            split = split_wrapper(cuda, task, function=called, returns_output=True)
        except Mismatch as exc:
            result.skipped.append(Skipped(name, f"KernelBench {mapped[0]} → {task_id}: {exc}"))
            continue
        entry = Entry(where=name, task=task_id, model=model, run=run, context=context, sample_index=sample, turn=1,
                      response=source, language="cuda", code=split.code,
                      run_params={"format": "kernelbench", "level": level},
                      metadata=kept_metadata({"kernelbench_problem": f"level{level}/{mapped[0]}",
                                              "their_verdict": verdict}),
                      note=f"KernelBench {mapped[0]}, sample {sample}")
        if split.notes:
            entry.metadata["wrapper_notes"] = split.notes
        if split.host_only:
            entry.unjudged = split.host_only
        elif split.manifest is None:
            entry.unjudged = f"the launch is not read from {called}(): {split.why_not}"
        else:
            entry.manifest = split.manifest
        result.entries.append(entry)
    if not names:
        result.fatal.append(f"{path}: no level_*_problem_*_sample_*_kernel.py files")
    return result
