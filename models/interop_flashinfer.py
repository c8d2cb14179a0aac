"""FlashInfer-Bench solutions and traces (flashinfer-ai/flashinfer-bench's data schema).

Their schema (flashinfer_bench/data/solution.py and trace.py; the trace set's layout in
trace_set.py): a **Solution** is `{name, definition, author, spec: {language, target_hardware,
entry_point "FILE::FUNCTION", dependencies, destination_passing_style (default true), binding
(tvm-ffi by default, or torch)}, sources: [{path, content}], description}`; a **Trace** is
`{definition, workload: {uuid, …}, solution: NAME, evaluation: {status, environment: {hardware},
timestamp, correctness, performance: {latency_ms, reference_latency_ms, speedup_factor}}}`; a
trace set is a folder with `definitions/`, `solutions/**/*.json` and `traces/**/*.jsonl`.

Read here, from a trace set folder or from one Solution JSON file:

- a solution's definition becomes a task through tasks/published.toml (the paper's definitions
  are FlashInfer-Bench ones) or `--map DEFINITION=TASK`, on the arch its target hardware names
  (or `--arch`); others are skipped by name;
- only CUDA solutions are candidates (Triton, Python and TileLang ones are skipped, and so is one
  that depends on cuBLAS, cuDNN or CUTLASS: a candidate calls no library); its sources become one
  translation unit (headers first, their local `#include`s dropped) and its entry point's function
  is the wrapper the launches are read from (models/host_wrapper.py);
- each solution is a sample of the run (`flashinfer:<folder>` unless `--run`), of the model its
  author names (unless `--model`); the traces of a solution are kept as its metadata (their
  verdicts, never judgements).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ptxbench.db.writes import CONTEXT_LEVELS
from ptxbench.models.host_wrapper import Mismatch, split_wrapper
from ptxbench.models.interop import (
    MAX_JSON_BYTES,
    Entry,
    Options,
    ReadResult,
    Skipped,
    arch_of,
    as_dict,
    as_list,
    files_under,
    kept_metadata,
    read_json,
    read_text,
)
from ptxbench.models.interop_paper import task_for
from ptxbench.tasks.spec import get_task, task_ids

MAX_TRACES_KEPT = 32               # a solution's traces kept in its metadata
_LOCAL_INCLUDE = re.compile(r'^[ \t]*+#[ \t]*+include[ \t]*+"([^"\n]++)"[^\n]*+$', re.M)
_HEADER = (".h", ".cuh", ".hpp", ".hh", ".inl")
_UNIT = (".cu", ".cpp", ".cc", ".cxx")


def one_unit(sources: list[dict[str, Any]]) -> str:
    """The solution's files as one CUDA file: headers, then sources, local includes of its own files dropped."""
    names = {str(s.get("path")) for s in sources}

    def body(s: dict[str, Any]) -> str:
        text = str(s.get("content") or "")
        return _LOCAL_INCLUDE.sub(lambda m: "" if m.group(1) in names or Path(m.group(1)).name in
                                  {Path(n).name for n in names} else m.group(0), text)

    ordered = sorted(sources, key=lambda s: (0 if str(s.get("path", "")).endswith(_HEADER) else 1, str(s.get("path"))))
    return "\n".join(f"// ---- {s.get('path')}\n{body(s)}" for s in ordered)


def _traces(base: Path, options: Options, result: ReadResult) -> dict[str, list[dict[str, Any]]]:
    """Their verdicts by solution name, from traces/**/*.jsonl."""
    out: dict[str, list[dict[str, Any]]] = {}
    if not (base / "traces").is_dir():
        return out
    bad = 0
    for name in files_under(base, "traces", lambda n: n.endswith(".jsonl")):
        try:
            text = read_text(base, name, options.stores, MAX_JSON_BYTES, options.budget)
        except ValueError as exc:
            result.skipped.append(Skipped(name, str(exc), "bad"))
            continue
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                t = json.loads(line)
            except (ValueError, RecursionError):
                bad += 1
                continue
            if not isinstance(t, dict) or not isinstance(t.get("solution"), str):
                continue
            ev = as_dict(t.get("evaluation"))
            perf = as_dict(ev.get("performance"))
            env = as_dict(ev.get("environment"))
            workload = as_dict(t.get("workload"))
            kept = out.setdefault(t["solution"], [])
            if len(kept) < MAX_TRACES_KEPT:
                kept.append({"workload": workload.get("uuid"), "status": ev.get("status"),
                             "speedup": perf.get("speedup_factor"), "hardware": env.get("hardware")})
    if bad:
        result.notes.append(f"{bad} trace line(s) that are not JSON were left out")
    return out


def read_flashinfer(path: Path, options: Options) -> ReadResult:
    result = ReadResult("flashinfer")
    context = options.context or "none"
    if context not in CONTEXT_LEVELS:
        result.fatal.append(f"context: must be one of {', '.join(CONTEXT_LEVELS)}, got {context!r}")
        return result
    if path.is_dir():
        base = path.resolve()
        try:
            names = files_under(base, "solutions", lambda n: n.endswith(".json")) if (base / "solutions").is_dir() else []
        except ValueError as exc:
            result.fatal.append(str(exc))
            return result
        traces = _traces(base, options, result)
        run = options.run or f"flashinfer:{base.name}"
        if not names:
            result.fatal.append(f"{path}: no solutions/*.json")
    else:
        base, names, traces = path.resolve().parent, [path.name], {}
        run = options.run or f"flashinfer:{path.stem}"
    known = set(task_ids())
    counters: dict[str, int] = {}
    for name in names:
        try:
            data = read_json(base, name, options.stores, budget=options.budget)
        except ValueError as exc:
            result.problems.append(f"{name}: {exc}")
            continue
        solutions = data if isinstance(data, list) else [data]
        for i, sol in enumerate(solutions):
            where = name if len(solutions) == 1 else f"{name}[{i}]"
            got = _solution(sol, where, known, traces, run, context, options, counters)
            (result.skipped if isinstance(got, Skipped) else result.entries).append(got)  # type: ignore[arg-type]
    return result


def _solution(sol: Any, where: str, known: set[str], traces: dict[str, list[dict[str, Any]]], run: str, context: str,
              options: Options, counters: dict[str, int]) -> Entry | Skipped:
    if not isinstance(sol, dict) or not isinstance(sol.get("spec"), dict) or not isinstance(sol.get("sources"), list):
        if isinstance(sol, dict) and "workload" in sol:
            return Skipped(where, "a trace, not a solution: give the trace set's folder (its solutions/ and traces/)",
                           "bad")
        return Skipped(where, "not a FlashInfer-Bench solution (no spec or sources)", "bad")
    spec, name = sol["spec"], str(sol.get("name") or where)
    where = f"{where} ({name})"
    definition = str(sol.get("definition") or "")
    hardware = as_list(spec.get("target_hardware"))
    arch = options.arch or next((a for h in hardware if (a := arch_of(str(h)))), None)
    task_id = task_for(definition, arch, options)
    if task_id is None or task_id not in known:
        return Skipped(where, f"definition {definition!r} on {', '.join(map(str, hardware)) or 'no hardware named'}: "
                       "no PTXBench task (tasks/published.toml maps the paper's; --map DEFINITION=TASK adds one)")
    language = str(spec.get("language") or "")
    if language not in ("cuda", "cpp"):
        return Skipped(where, f"a {language or 'unnamed'}-language solution: PTXBench judges PTX or CUDA device code")
    deps = [d for d in spec.get("dependencies") or [] if isinstance(d, str)]
    library = [d for d in deps if re.match(r"(?i)cublas|cudnn|cutlass|cute", d)]
    if library:
        return Skipped(where, f"depends on {', '.join(library)}: a PTXBench candidate calls no library")
    entry_point = str(spec.get("entry_point") or "")
    if entry_point.count("::") != 1:
        return Skipped(where, f"entry_point {entry_point!r} is not FILE::FUNCTION", "bad")
    function = entry_point.split("::")[1]
    sources = [s for s in sol["sources"] if isinstance(s, dict) and isinstance(s.get("content"), str)]
    code = one_unit(sources)
    binding = spec.get("binding") or "tvm-ffi"
    returns = spec.get("destination_passing_style") is False
    task = get_task(task_id)
    model = options.model or str(sol.get("author") or "flashinfer")
    index = counters.get(task_id, 0)
    counters[task_id] = index + 1
    meta: dict[str, Any] = {"solution": name, "definition": definition, "binding": binding}
    if traces.get(name):
        meta["their_traces"] = traces[name]
    entry = Entry(where=where, task=task_id, model=model, run=run, context=context, sample_index=index, turn=1,
                  response=json.dumps(sol, ensure_ascii=False, sort_keys=True), language="cuda",
                  run_params={"format": "flashinfer"}, metadata=kept_metadata(meta),
                  note=f"FlashInfer-Bench solution {name}")
    try:
        split = split_wrapper(code, task, function=function, returns_output=returns)
    except Mismatch as exc:
        return Skipped(where, f"{definition} → {task_id}: {exc}")
    entry.code = split.code
    if split.notes:
        entry.metadata["wrapper_notes"] = split.notes
    if split.host_only:
        entry.unjudged = split.host_only
    elif split.manifest is None:
        entry.unjudged = f"the launch is not read from {function}(): {split.why_not}"
    else:
        entry.manifest = split.manifest
    return entry
