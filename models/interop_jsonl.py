"""PTXBench's own import lines (docs/models.md) and the records of `ptxbench export samples`.

One JSON object a line. A line with `"schema": "ptxbench.sample/1"` is an exported sample
(db/export.py): its code, manifest and response, its model and run, and every judgement it had,
which is stored as it was (so a store exported and imported again reports the same numbers).
Any other line is an import line: a response or a candidate for a task.

Fields an import line has beyond the documented ones are kept as metadata beside the sample, not
refused. A line that is wrong (not JSON, a wrong type, an unknown task, a duplicate slot, a turn
without the turn before it) is a problem: the whole file is refused, every problem listed, unless
the import skips bad lines.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from ptxbench.db.files import database_reason
from ptxbench.db.records import Evaluation, Label, Measurement
from ptxbench.db.writes import CONTEXT_LEVELS, LANGUAGES
from ptxbench.engine.categories import is_category
from ptxbench.models.interop import (
    MAX_TOTAL_BYTES,
    Entry,
    Options,
    ReadResult,
    Recorded,
    Skipped,
    kept_metadata,
    read_text,
)
from ptxbench.tasks.spec import task_ids

MAX_LINE_BYTES = 8 << 20
SAMPLE_SCHEMA = "ptxbench.sample/1"
FIELDS: dict[str, tuple[type, ...]] = {
    "task": (str,), "model": (str,), "response": (str,), "code": (str,), "language": (str,),
    "manifest": (dict,), "code_file": (str,), "manifest_file": (str,), "run": (str,), "context": (str,),
    "prompt_version": (str,), "sample_index": (int,), "turn": (int,), "tokens_in": (int,), "tokens_out": (int,),
    "latency_s": (int, float), "endpoint": (str,), "source": (str,), "created_at": (str,),
}
_EVALUATION_FIELDS = {f.name for f in fields(Evaluation)} - {"id", "sample_id"}
_MEASUREMENT_FIELDS = {f.name for f in fields(Measurement)} - {"id", "evaluation_id"}
_LABEL_FIELDS = {f.name for f in fields(Label)} - {"id", "sample_id"}


def parse_line(obj: Any, line: int, base: Path, default_run: str, known_tasks: set[str],
               stores: tuple = ()) -> Entry:
    """One import line → an Entry; raises ValueError naming the field. Fields beyond FIELDS are kept
    in the entry's metadata. `stores`: the store being written (a file a line names that is it, or
    any SQLite file, is refused unread)."""
    if not isinstance(obj, dict):
        raise ValueError("a line must be a JSON object")
    extra = {k: v for k, v in obj.items() if k not in FIELDS}
    for key, value in obj.items():
        if key not in FIELDS:
            continue
        kinds = FIELDS[key]
        if value is not None and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
            raise ValueError(f"{key}: expected {' or '.join(k.__name__ for k in kinds)}, got {type(value).__name__}")
    for key in ("task", "model"):
        if not obj.get(key):
            raise ValueError(f"{key}: required")
    if obj["task"] not in known_tasks:
        raise ValueError(f"task: unknown task {obj['task']!r}")
    sources = [k for k in ("response", "code", "code_file") if obj.get(k) is not None]
    if len(sources) != 1:
        raise ValueError("give exactly one of response, code, code_file" + (f" (got {', '.join(sources)})" if sources else ""))
    context = obj.get("context") or "none"
    if context not in CONTEXT_LEVELS:
        raise ValueError(f"context: must be one of {', '.join(CONTEXT_LEVELS)}, got {context!r}")
    index, turn = obj.get("sample_index", 0), obj.get("turn", 1)
    if index is None or index < 0:
        raise ValueError("sample_index: must be 0 or more")
    if turn is None or turn < 1:
        raise ValueError("turn: is 1-based")
    entry = Entry(where=f"line {line}", task=obj["task"], model=obj["model"], run=obj.get("run") or default_run,
                  context=context, sample_index=index, turn=turn, prompt_version=obj.get("prompt_version"),
                  tokens_in=obj.get("tokens_in"), tokens_out=obj.get("tokens_out"), latency_s=obj.get("latency_s"),
                  endpoint=obj.get("endpoint"), note=obj.get("source"), created_at=obj.get("created_at") or "",
                  metadata=kept_metadata(extra))
    if obj.get("response") is not None:
        if obj.get("manifest") is not None or obj.get("manifest_file") or obj.get("language"):
            raise ValueError("a response carries its own code and manifest: leave out language, manifest, manifest_file")
        entry.response = obj["response"]
        return entry
    code = obj["code"] if obj.get("code") is not None else read_text(base, obj["code_file"], stores)
    language = obj.get("language")
    if language is None and obj.get("code_file"):
        language = {".ptx": "ptx", ".cu": "cuda", ".cuh": "cuda"}.get(Path(obj["code_file"]).suffix.lower())
    if language not in ("ptx", "cuda"):
        raise ValueError("language: give ptx or cuda for code" + ("" if language is None else f" (got {language!r})"))
    assert language in LANGUAGES
    if not code.strip():
        raise ValueError("code: empty")
    manifest = obj.get("manifest")
    if obj.get("manifest_file"):
        if manifest is not None:
            raise ValueError("give manifest or manifest_file, not both")
        try:
            manifest = json.loads(read_text(base, obj["manifest_file"], stores))
        except json.JSONDecodeError as exc:
            raise ValueError(f"manifest_file: not JSON ({exc.msg}, line {exc.lineno})") from None
        except RecursionError:
            raise ValueError("manifest_file: nested deeper than a reader goes") from None
        if not isinstance(manifest, dict):
            raise ValueError("manifest_file: must hold a JSON object")
    entry.language, entry.code, entry.manifest = language, code, manifest
    return entry


def exported_entry(obj: dict[str, Any], line: int, file_name: str, known_tasks: set[str],
                   run_names: dict[tuple[str, str], Any]) -> Entry | Skipped:
    """A `ptxbench.sample/1` record → an Entry carrying its judgements and labels, or why it is skipped.
    `run_names`: (model, run name) → the exported run id first seen under that name, so two runs of one
    name stay two runs."""
    where = f"line {line}"
    if obj.get("seed_key"):
        return Skipped(where, f"a seeded sample ({obj['seed_key']}): every store seeds its own from the repository")
    task = obj.get("task_id")
    if task not in known_tasks:
        return Skipped(where, f"task {task!r} is not one of this PTXBench's tasks")
    model = obj.get("model")
    if not isinstance(model, str) or not model:
        return Skipped(where, "a sample of no model: not a model's output")
    for key, kinds in (("language", str), ("code", str), ("source", str), ("sample_index", int), ("turn", int)):
        if not isinstance(obj.get(key), kinds) or isinstance(obj.get(key), bool):
            raise ValueError(f"{key}: missing or not a {kinds.__name__}")
    if obj["language"] not in LANGUAGES:
        raise ValueError(f"language: {obj['language']!r} is not one of {', '.join(LANGUAGES)}")
    run = obj.get("run") if isinstance(obj.get("run"), dict) else None
    if run is not None:
        name = str(run.get("name") or f"export:{file_name}")
        first = run_names.setdefault((model, name), run.get("id"))
        if first != run.get("id"):
            name = f"{name} #{run.get('id')}"      # another run of the same name in the exporting store
        context = run.get("context_level") or "none"
        params = run.get("params") if isinstance(run.get("params"), dict) else {}
    else:
        name, context, params = f"export:{file_name}", "none", {}
    if context not in CONTEXT_LEVELS:
        raise ValueError(f"run.context_level: {context!r} is not one of {', '.join(CONTEXT_LEVELS)}")
    old_meta = params.get("metadata", {}) if isinstance(params.get("metadata"), dict) else {}
    params = {k: v for k, v in params.items() if k != "metadata"}
    manifest = obj.get("manifest")
    if manifest is not None and not isinstance(manifest, dict):
        raise ValueError("manifest: not an object")
    entry = Entry(where=where, task=task, model=model, run=name, context=context, sample_index=obj["sample_index"],
                  turn=obj["turn"], language=obj["language"], code=obj["code"], manifest=manifest,
                  response=obj.get("response") if isinstance(obj.get("response"), str) else None,
                  prompt_version=(run or {}).get("prompt_version"), tokens_in=_int(obj.get("tokens_in")),
                  tokens_out=_int(obj.get("tokens_out")), latency_s=_num(obj.get("latency_s")),
                  note=f"exported {SAMPLE_SCHEMA} sample {obj.get('id')}: {obj['source']}",
                  created_at=str(obj.get("created_at") or ""), judge=False, run_params=params,
                  run_started_at=str((run or {}).get("started_at") or ""), run_finished_at=(run or {}).get("finished_at"),
                  ref=str(obj.get("id")), parent_ref=None if obj.get("parent_id") is None else str(obj["parent_id"]))
    if str(obj.get("id")) in old_meta:
        entry.metadata = dict(old_meta[str(obj.get("id"))])
    for i, e in enumerate(obj.get("evaluations") or []):
        entry.recorded.append(_recorded(e, f"evaluations[{i}]"))
    for i, lab in enumerate(obj.get("labels") or []):
        if not isinstance(lab, dict) or not lab.get("author"):
            raise ValueError(f"labels[{i}]: not a label")
        if lab.get("category") is not None and not is_category(lab["category"]):
            raise ValueError(f"labels[{i}].category {lab['category']!r} is not ok or a vocabulary word")
        entry.labels.append(Label(sample_id=0, **{k: v for k, v in lab.items() if k in _LABEL_FIELDS}))
    return entry


def _recorded(obj: Any, where: str) -> Recorded:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: not an object")
    values = {k: v for k, v in obj.items() if k in _EVALUATION_FIELDS}
    for key in ("engine_version", "status", "category", "source"):
        if not isinstance(values.get(key), str) or not values[key]:
            raise ValueError(f"{where}.{key}: missing")
    if not is_category(values["category"]):
        raise ValueError(f"{where}.category {values['category']!r} is not ok or a vocabulary word of this PTXBench")
    measurements = []
    for j, m in enumerate(obj.get("measurements") or []):
        if not isinstance(m, dict) or m.get("split") not in ("train", "heldout") or not is_category(str(m.get("category"))):
            raise ValueError(f"{where}.measurements[{j}]: not a measurement this PTXBench reads")
        measurements.append(Measurement(**{k: v for k, v in m.items() if k in _MEASUREMENT_FIELDS}))
    return Recorded(Evaluation(sample_id=0, **values), measurements)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def read_jsonl(path: Path, options: Options) -> ReadResult:
    """Every line checked. Problems are listed by line; skipped lines (an export's seeded samples)
    with their reasons."""
    result = ReadResult("jsonl")
    reason = database_reason(path, stores=options.stores)
    if reason:
        result.fatal.append(f"not a JSONL file to import: {reason}")
        return result
    base = path.resolve().parent
    known = set(task_ids())
    default_run = f"import:{path.name}"
    run_names: dict[tuple[str, str], Any] = {}
    slots: dict[tuple[str, str, str, int, int], str] = {}
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_TOTAL_BYTES + 1)
    except OSError as exc:
        result.fatal.append(f"cannot read the file: {exc.strerror or exc}")
        return result
    if len(raw) > MAX_TOTAL_BYTES:
        result.fatal.append(f"over {MAX_TOTAL_BYTES} bytes: split it into several files")
        return result
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        if len(line) > MAX_LINE_BYTES:
            result.problems.append(f"{where}: over {MAX_LINE_BYTES} bytes")
            continue
        try:
            obj = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            result.problems.append(f"{where}: not UTF-8")
            continue
        except json.JSONDecodeError as exc:
            result.problems.append(f"{where}: not JSON ({exc.msg} at column {exc.colno})")
            continue
        except (ValueError, RecursionError) as exc:   # an integer past 4300 digits; nesting past the parser's depth
            result.problems.append(f"{where}: not JSON a reader can take ({type(exc).__name__}: {str(exc)[:120]})")
            continue
        try:
            schema = obj.get("schema") if isinstance(obj, dict) else None
            if schema == SAMPLE_SCHEMA:
                got: Entry | Skipped = exported_entry(obj, number, path.name, known, run_names)
            elif isinstance(schema, str) and schema.startswith("ptxbench."):
                raise ValueError(f"schema {schema!r}: this PTXBench imports {SAMPLE_SCHEMA} records")
            else:
                got = parse_line(obj, number, base, default_run, known, options.stores)
        except ValueError as exc:
            result.problems.append(f"{where}: {exc}")
            continue
        if isinstance(got, Skipped):
            result.skipped.append(got)
            continue
        key = (got.model, got.run, got.task, got.sample_index, got.turn)
        if key in slots:
            result.problems.append(f"{where}: the same model, run, task, sample_index and turn as {slots[key]}")
            continue
        slots[key] = where
        result.entries.append(got)
    orphans = [e for e in result.entries
               if e.ref is None and e.turn > 1 and (e.model, e.run, e.task, e.sample_index, e.turn - 1) not in slots]
    for e in orphans:
        result.problems.append(f"{e.where}: turn {e.turn} has no turn {e.turn - 1} in the file "
                               f"(same model, run, task and sample_index)")
    if orphans:
        result.entries = [e for e in result.entries if e not in orphans]
    if not result.entries and not result.problems and not result.skipped:
        result.fatal.append("the file holds no lines")
    return result
