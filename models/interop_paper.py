"""The paper's runs (zhang677/PTXBench), read through the experiments CSV its own tools read.

Their layout, as their benchmark/README.md and mini-ptx-agent write it: a CSV with one row per
run, `model,arch,definition,workload,exp_dir`; in each run folder, `trajectories/<id>.json`, one
mini-swe-agent trajectory per attempt (`messages`: the system prompt, the task, then each turn's
assistant reply and the user message holding their evaluator's feedback, with their FlashInfer
traces in its `extra`). A reply's kernel is its last ```cpp block: CUDA with a TVM-FFI host
function `run(TensorView …)` taking the definition's inputs, then its outputs.

Read here:

- a row's definition becomes a task through tasks/published.toml (`gemm_n7168_k5120` on hopper →
  gemm_bf16_sm90a) or `--map DEFINITION=TASK`; other definitions are skipped by name;
- `exp_dir` is taken relative to the CSV's folder; an absolute path (theirs are) is looked for
  beside the CSV by its last part;
- each turn's reply is a sample (sample_index: N of `exp_N.json`, else the place in name order); its kernel
  is split from the TVM-FFI wrapper (models/host_wrapper.py). Where the wrapper's launch cannot be
  read, a `manifest` column (a launch manifest JSON beside the CSV, docs/candidate.md) states it
  for that run's kernels; without one the sample is stored and not judged, and the report says why;
- their own verdict (status, speedup) is kept as the sample's metadata, never as a judgement;
- optional columns: `context` (none, brief, full; default none), `run` (the run's name; default
  the folder's), `turns` (the run's turn budget; default the trajectory's step limit).

Their definitions fix sizes (`gemm_n7168_k5120`: N 7168, K 5120; M varies) that PTXBench's tasks
also vary: a kernel that hard-codes them is judged at the task's other sizes too.
"""

from __future__ import annotations

import csv
import io
import json
import re
import tomllib
from pathlib import Path
from typing import Any

from ptxbench.db.writes import CONTEXT_LEVELS
from ptxbench.models.host_wrapper import Mismatch, split_wrapper
from ptxbench.models.interop import (
    MAX_FILE_BYTES,
    Entry,
    Options,
    ReadResult,
    Skipped,
    arch_of,
    as_dict,
    as_list,
    files_under,
    inside,
    kept_metadata,
    read_json,
    read_text,
)
from ptxbench.tasks.published import PUBLISHED_FILE
from ptxbench.tasks.spec import get_task, task_ids

_FENCE = re.compile(r"^ {0,3}```[ \t]*+([\w+]*+)[^\n]*+$", re.M)
_CPP_TAGS = {"cpp", "c++", "cuda", "cu", "cxx"}
_REQUIRED = ("model", "arch", "definition", "exp_dir")


def published_tasks() -> dict[str, dict[str, str]]:
    """tasks/published.toml's map: their definition → {arch: task id}."""
    data = tomllib.loads(PUBLISHED_FILE.read_text(encoding="utf-8"))
    return {d: dict(by_arch) for d, by_arch in data.get("tasks", {}).items()}


def task_for(definition: str, arch: str | None, options: Options) -> str | None:
    if definition in options.task_map:
        return options.task_map[definition]
    return published_tasks().get(definition, {}).get(arch or "")


def last_cpp_block(text: str) -> str | None:
    """The last fenced block tagged as C++ or CUDA (their extractor's choice), or None."""
    fences = list(_FENCE.finditer(text))
    blocks: list[str] = []
    i = 0
    while i < len(fences):
        open_ = fences[i]
        close = fences[i + 1] if i + 1 < len(fences) else None
        if open_.group(1).lower() in _CPP_TAGS:
            end = close.start() if close is not None else len(text)
            blocks.append(text[open_.end() + 1:end])
        i += 2                                   # a fence opens a block and the next one closes it
    return blocks[-1] if blocks else None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _their_verdict(message: dict[str, Any]) -> dict[str, Any]:
    extra = as_dict(message.get("extra"))
    traces = as_list(extra.get("traces"))
    statuses, speedups = [], []
    for t in traces[:64]:
        ev = as_dict(as_dict(t).get("evaluation"))
        if isinstance(ev.get("status"), str):
            statuses.append(ev["status"])
        perf = as_dict(ev.get("performance"))
        if isinstance(perf.get("speedup_factor"), (int, float)):
            speedups.append(perf["speedup_factor"])
    out: dict[str, Any] = {k: extra[k] for k in ("event", "all_passed", "min_speedup", "target_met") if k in extra}
    if statuses:
        out["statuses"] = statuses
    if speedups:
        out["speedups"] = speedups
    return out


def _usage(message: dict[str, Any]) -> tuple[int | None, int | None]:
    extra = as_dict(message.get("extra"))
    response = as_dict(extra.get("response"))
    usage = as_dict(response.get("usage"))
    tin, tout = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (tin if isinstance(tin, int) else None, tout if isinstance(tout, int) else None)


def turns_of(trajectory: Any) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(reply, the feedback that follows it) for each turn: assistant messages after the task."""
    messages = trajectory.get("messages") if isinstance(trajectory, dict) else None
    if not isinstance(messages, list):
        raise ValueError("not a trajectory: no messages")
    out: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    seen_task = False
    for m in messages:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role == "user" and not seen_task:
            seen_task = True
        elif role == "assistant" and seen_task:
            out.append((m, None))
        elif role == "user" and out and out[-1][1] is None:
            out[-1] = (out[-1][0], m)
    return out


def _step_limit(trajectory: Any) -> int | None:
    info = trajectory.get("info") if isinstance(trajectory, dict) else None
    config = info.get("config") if isinstance(info, dict) else None
    agent = config.get("agent") if isinstance(config, dict) else None
    limit = agent.get("step_limit") if isinstance(agent, dict) else None
    return limit if isinstance(limit, int) and limit > 0 else None


def _folder(base: Path, exp_dir: str) -> str | None:
    """The run folder a row names, relative to the CSV's folder (an absolute one by its last part)."""
    text = exp_dir.strip()
    if text.startswith(("/", "~", "$")) or "${" in text:
        text = re.split(r"[/\\]", text.rstrip("/\\"))[-1]
    try:
        path = inside(base, text)
    except ValueError:
        return None
    return str(path.relative_to(base.resolve())) if path.is_dir() else None


def read_paper(path: Path, options: Options) -> ReadResult:
    result = ReadResult("paper")
    base = path.resolve().parent
    try:
        table = read_text(base, path.name, options.stores, MAX_FILE_BYTES, options.budget)
    except ValueError as exc:
        result.fatal.append(f"{path.name}: {exc}")
        return result
    rows = list(csv.DictReader(io.StringIO(table)))
    missing = [c for c in _REQUIRED if not rows or c not in rows[0]]
    if missing:
        result.fatal.append(f"{path.name}: not an experiments CSV (no column {', '.join(missing)}; "
                               f"its header is {', '.join(_REQUIRED)}, workload)")
        return result
    known = set(task_ids())
    for number, row in enumerate(rows, start=2):
        where = f"{path.name} row {number}"
        definition, model = (row.get("definition") or "").strip(), (row.get("model") or "").strip()
        arch = arch_of(row.get("arch"))
        task = task_for(definition, arch, options)
        if not model:
            result.problems.append(f"{where}: model: required")
            continue
        if task is None or task not in known:
            result.skipped.append(Skipped(where, f"definition {definition!r} on {row.get('arch')!r} has no PTXBench "
                                          "task (tasks/published.toml maps the paper's; --map DEFINITION=TASK adds one)"))
            continue
        folder = _folder(base, row.get("exp_dir") or "")
        if folder is None:
            result.skipped.append(Skipped(where, f"exp_dir {row.get('exp_dir')!r}: no such folder beside {path.name} "
                                          "(an absolute path is looked for by its last part)"))
            continue
        context = (row.get("context") or options.context or "none").strip()
        if context not in CONTEXT_LEVELS:
            result.problems.append(f"{where}: context: must be one of {', '.join(CONTEXT_LEVELS)}, got {context!r}")
            continue
        stated = None
        if (row.get("manifest") or "").strip():
            try:
                stated = json.loads(read_text(base, row["manifest"].strip(), options.stores, budget=options.budget))
            except (ValueError, RecursionError) as exc:
                result.problems.append(f"{where}: manifest: {exc}")
                continue
            if not isinstance(stated, dict):
                result.problems.append(f"{where}: manifest: must hold a JSON object")
                continue
        run = (row.get("run") or "").strip() or options.run or Path(folder).name
        params: dict[str, Any] = {"format": "paper", "definition": definition, "workload": row.get("workload"),
                                  "arch": row.get("arch"), "exp_dir": row.get("exp_dir")}
        if (row.get("turns") or "").strip().isdigit():
            params["turns"] = int(row["turns"])
        try:
            names = files_under(base, f"{folder}/trajectories", lambda n: n.endswith(".json"))
        except ValueError as exc:
            result.skipped.append(Skipped(where, f"{folder}/trajectories: {exc}"))
            continue
        if not names:
            result.skipped.append(Skipped(where, f"{folder}: no trajectories/*.json"))
        numbers = [re.fullmatch(r"exp_(\d+)\.json", Path(n).name) for n in names]
        if all(numbers) and len({m.group(1) for m in numbers if m}) == len(names):
            indices = [int(m.group(1)) for m in numbers if m]    # exp_007.json is attempt 7, whatever else is there
        else:
            indices = list(range(len(names)))
        for index, name in zip(indices, names):
            _trajectory(result, base, name, index, task, model, run, context, params, stated, options)
    if not any(r.get("context") for r in rows) and options.context is None and result.entries:
        result.notes.append("no context level stated: the runs are stored as `none` (add a context column)")
    return result


def _trajectory(result: ReadResult, base: Path, name: str, index: int, task_id: str, model: str, run: str,
                context: str, params: dict[str, Any], stated: dict | None, options: Options) -> None:
    try:
        trajectory = read_json(base, name, options.stores, budget=options.budget)
        turns = turns_of(trajectory)
    except ValueError as exc:
        result.skipped.append(Skipped(name, str(exc), "bad"))
        return
    limit = _step_limit(trajectory)
    run_params = dict(params)
    if limit and "turns" not in run_params:
        run_params["turns"] = limit
    task = get_task(task_id)
    for turn, (reply, feedback) in enumerate(turns, start=1):
        where = f"{name} turn {turn}"
        text = _text(reply.get("content"))
        tokens_in, tokens_out = _usage(reply)
        entry = Entry(where=where, task=task_id, model=model, run=run, context=context, sample_index=index, turn=turn,
                      response=text, tokens_in=tokens_in, tokens_out=tokens_out, run_params=run_params,
                      metadata=kept_metadata({"trajectory": name, "their_verdict": _their_verdict(feedback or {})}),
                      note=f"the paper's format, {where}")
        code = last_cpp_block(text)
        if code is not None:
            _candidate(entry, code, task, stated)
        result.entries.append(entry)


def _candidate(entry: Entry, code: str, task: Any, stated: dict | None) -> None:
    """Split the TVM-FFI file into device code and launches; what cannot be judged says why."""
    try:
        split = split_wrapper(code, task, function="run")
    except Mismatch as exc:
        entry.language, entry.code = "cuda", code
        entry.unjudged = str(exc)
        return
    entry.language, entry.code = "cuda", split.code
    if split.notes:
        entry.metadata["wrapper_notes"] = split.notes
    if split.host_only:
        entry.unjudged = split.host_only
    elif split.manifest is not None:
        entry.manifest = split.manifest
    elif stated is not None:
        entry.manifest = stated
        entry.metadata["launch"] = f"stated in the CSV's manifest column (run() could not be read: {split.why_not})"
    else:
        entry.unjudged = (f"the launch is not read from run(): {split.why_not}; state it in the CSV's manifest "
                          "column (a launch manifest, docs/candidate.md)")
