"""Import model output generated elsewhere: JSONL of responses or candidates (docs/models.md).

The whole file is read and checked first; any bad line stops the import with
every problem listed by line number, and nothing is written. A good file is
written in one transaction (samples, with their runs and models created as
needed), then each new sample is judged like a sample of `ptxbench run`.
Lines whose (run, task, sample_index, turn) slot is already stored are
skipped, so importing the same file again only judges what is still unjudged.
Two imports of one file at once judge each sample once: a sample is claimed
before it is judged (db/writes.py `claim`), and one another live import holds,
or has judged meanwhile, is left to it. A run is marked finished
(`finished_at`) when the import that wrote or judged its samples ends. A
judgement the store will not take is kept in its recovery journal
(db/recovery.py) and the import stops with `Kept`.

Files named by a line (`code_file`, `manifest_file`) are read relative to the
JSONL file's folder and must stay inside it: absolute paths, `..` that climbs
out, and links that point outside are refused. A file that is the store, its
-wal, -shm or -journal, or any other SQLite database is a problem of its line and
is never opened (db/files.py: closing a descriptor of the store would drop this
process's SQLite locks on it).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

from ptxbench.db.files import PathLike, database_reason
from ptxbench.db.generation import find_run
from ptxbench.db.judgement import add_judgement
from ptxbench.db.queries import find_sample, get_run, latest_evaluation
from ptxbench.db.records import Run, Sample
from ptxbench.db.store import StoreError, store_file, write_transaction
from ptxbench.db.writes import (
    CONTEXT_LEVELS,
    LANGUAGES,
    add_sample,
    claim,
    create_run,
    finish_run,
    get_or_create_model,
    release,
)
from ptxbench.models.judging import JudgeFailed, fill_candidate, judge_sample
from ptxbench.tasks.spec import get_task, task_ids

MAX_LINE_BYTES = 8 << 20
MAX_FILE_BYTES = 4 << 20
EVALUATION_SOURCE = "ptxbench import"
FIELDS: dict[str, tuple[type | tuple[type, ...], ...]] = {
    "task": (str,), "model": (str,), "response": (str,), "code": (str,), "language": (str,),
    "manifest": (dict,), "code_file": (str,), "manifest_file": (str,), "run": (str,), "context": (str,),
    "prompt_version": (str,), "sample_index": (int,), "turn": (int,), "tokens_in": (int,), "tokens_out": (int,),
    "latency_s": (int, float), "endpoint": (str,), "source": (str,), "created_at": (str,),
}
Progress = Callable[[dict[str, Any]], None]


class ImportFileError(ValueError):
    """The file cannot be imported; `problems` lists every bad line."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.problems = problems
        shown = "\n".join(problems[:50]) + (f"\n… {len(problems) - 50} more" if len(problems) > 50 else "")
        super().__init__(f"{path}: nothing imported, {len(problems)} problem(s):\n{shown}")


@dataclass
class Entry:
    line: int
    task: str
    model: str
    run: str
    context: str
    sample_index: int
    turn: int
    language: str = "none"
    code: str = ""
    manifest: dict[str, Any] | None = None
    response: str | None = None
    prompt_version: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    latency_s: float | None = None
    endpoint: str | None = None
    note: str | None = None
    created_at: str = ""


@dataclass
class ImportReport:
    path: str
    lines: int = 0
    imported: int = 0
    skipped: int = 0                  # slots already stored
    judged: int = 0
    judged_elsewhere: int = 0         # judged by another import of the same samples running at the same time
    runs: dict[str, int] = field(default_factory=dict)
    categories: dict[str, int] = field(default_factory=dict)
    judge_failures: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _inside(base: Path, name: str) -> Path:
    """`name` resolved against `base`; refuses anything that lands outside it."""
    if not name or Path(name).is_absolute() or name.startswith("~"):
        raise ValueError(f"{name!r} must be a path relative to the JSONL file's folder")
    target = (base / name).resolve()
    if not target.is_relative_to(base.resolve()):
        raise ValueError(f"{name!r} points outside {base}")
    return target


def _read_text(base: Path, name: str, stores: tuple[PathLike, ...] = ()) -> str:
    path = _inside(base, name)
    if not path.is_file():
        raise ValueError(f"{name!r}: no such file in {base}")
    reason = database_reason(path, stores=stores)
    if reason:
        raise ValueError(f"{name!r}: not read: {reason}")
    with path.open("rb") as fh:          # at most one byte past the limit: /dev/zero-like files end here
        data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{name!r} is over {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{name!r} is not UTF-8 text") from None


def parse_line(obj: Any, line: int, base: Path, default_run: str, known_tasks: set[str],
               stores: tuple[PathLike, ...] = ()) -> Entry:
    """One JSON object → an Entry; raises ValueError naming the field. `stores`: the store being
    written (a file a line names that is it, or any SQLite file, is refused unread)."""
    if not isinstance(obj, dict):
        raise ValueError("a line must be a JSON object")
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(unknown)} (docs/models.md lists the fields)")
    for key, value in obj.items():
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
    if index < 0:
        raise ValueError("sample_index: must be 0 or more")
    if turn < 1:
        raise ValueError("turn: is 1-based")
    entry = Entry(line=line, task=obj["task"], model=obj["model"], run=obj.get("run") or default_run,
                  context=context, sample_index=index, turn=turn, prompt_version=obj.get("prompt_version"),
                  tokens_in=obj.get("tokens_in"), tokens_out=obj.get("tokens_out"), latency_s=obj.get("latency_s"),
                  endpoint=obj.get("endpoint"), note=obj.get("source"), created_at=obj.get("created_at") or "")
    if obj.get("response") is not None:
        if obj.get("manifest") is not None or obj.get("manifest_file") or obj.get("language"):
            raise ValueError("a response carries its own code and manifest: leave out language, manifest, manifest_file")
        entry.response = obj["response"]
        return entry
    code = obj["code"] if obj.get("code") is not None else _read_text(base, obj["code_file"], stores)
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
            manifest = json.loads(_read_text(base, obj["manifest_file"], stores))
        except json.JSONDecodeError as exc:
            raise ValueError(f"manifest_file: not JSON ({exc.msg}, line {exc.lineno})") from None
        except RecursionError:
            raise ValueError("manifest_file: nested deeper than a reader goes") from None
        if not isinstance(manifest, dict):
            raise ValueError("manifest_file: must hold a JSON object")
    entry.language, entry.code, entry.manifest = language, code, manifest
    return entry


def read_entries(path: Path, stores: tuple[PathLike, ...] = ()) -> list[Entry]:
    """Every line checked; raises ImportFileError listing all problems, or returns the entries.
    `stores`: the store being written; the file itself, or a file a line names, that is it (or any
    SQLite file) is refused without being opened."""
    reason = database_reason(path, stores=stores)
    if reason:
        raise ImportFileError(path, [f"not a JSONL file to import: {reason}"])
    base = path.resolve().parent
    known = set(task_ids())
    default_run = f"import:{path.name}"
    entries: list[Entry] = []
    problems: list[str] = []
    slots: dict[tuple[str, str, str, int, int], int] = {}
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ImportFileError(path, [f"cannot read the file: {exc.strerror or exc}"]) from None
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        if len(line) > MAX_LINE_BYTES:
            problems.append(f"{where}: over {MAX_LINE_BYTES} bytes")
            continue
        try:
            obj = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            problems.append(f"{where}: not UTF-8")
            continue
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: not JSON ({exc.msg} at column {exc.colno})")
            continue
        except (ValueError, RecursionError) as exc:   # an integer past 4300 digits; nesting past the parser's depth
            problems.append(f"{where}: not JSON a reader can take ({type(exc).__name__}: {str(exc)[:120]})")
            continue
        try:
            entry = parse_line(obj, number, base, default_run, known, stores)
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
            continue
        key = (entry.model, entry.run, entry.task, entry.sample_index, entry.turn)
        if key in slots:
            problems.append(f"{where}: the same model, run, task, sample_index and turn as line {slots[key]}")
            continue
        slots[key] = number
        entries.append(entry)
    for e in entries:
        if e.turn > 1 and (e.model, e.run, e.task, e.sample_index, e.turn - 1) not in slots:
            problems.append(f"line {e.line}: turn {e.turn} has no turn {e.turn - 1} in the file "
                            f"(same model, run, task and sample_index)")
    if not entries and not problems:
        problems.append("the file holds no lines")
    if problems:
        raise ImportFileError(path, problems)
    return entries


def import_file(db: sqlite_utils.Database, path: str | Path, *, judge: bool = True, gpu: bool = False,
                progress: Progress | None = None) -> ImportReport:
    """Check, store and (by default) judge the lines of a JSONL file. Raises ImportFileError before
    writing anything when a line is bad."""
    path = Path(path)
    note = progress or (lambda event: None)
    entries = read_entries(path, stores=tuple(s for s in (store_file(db),) if s is not None))
    report = ImportReport(path=str(path), lines=len(entries))
    source = f"import:{path}"
    new: list[Sample] = []
    with write_transaction(db):
        runs: dict[tuple[str, str, str], Run] = {}
        ids: dict[tuple[str, str, str, int, int], int] = {}
        for e in sorted(entries, key=lambda e: e.turn):  # parents before the turns that follow them
            run = runs.get((e.model, e.run, e.context))
            if run is None:
                run = _run_for(db, e, source)
                runs[(e.model, e.run, e.context)] = run
                report.runs[f"{e.model} / {e.run}"] = run.id  # type: ignore[assignment]
            found = find_sample(db, run_id=run.id, task_id=e.task, sample_index=e.sample_index, turn=e.turn)  # type: ignore[arg-type]
            if found is not None:
                report.skipped += 1
                ids[(e.model, e.run, e.task, e.sample_index, e.turn)] = found.id  # type: ignore[assignment]
                if latest_evaluation(db, found.id) is None:  # type: ignore[arg-type]
                    new.append(found)
                continue
            parent = ids.get((e.model, e.run, e.task, e.sample_index, e.turn - 1)) if e.turn > 1 else None
            sample = add_sample(db, Sample(
                task_id=e.task, language=e.language, source=source + (f" ({e.note})" if e.note else ""),
                code=e.code, manifest=e.manifest, response=e.response, run_id=run.id, sample_index=e.sample_index,
                turn=e.turn, parent_id=parent, tokens_in=e.tokens_in, tokens_out=e.tokens_out,
                latency_s=e.latency_s, created_at=e.created_at,
            ))
            ids[(e.model, e.run, e.task, e.sample_index, e.turn)] = sample.id  # type: ignore[assignment]
            new.append(sample)
            report.imported += 1
    note({"event": "imported", "imported": report.imported, "skipped": report.skipped})
    if judge:
        for sample in new:
            _judge_once(db, sample, gpu, report, note)
    _finish_runs(db, report)
    return report


def _judge_once(db: sqlite_utils.Database, sample: Sample, gpu: bool, report: ImportReport, note: Progress) -> None:
    """Judge one imported sample unless another import judges it (now, or did meanwhile)."""
    what = f"judge:{sample.id}"
    if not claim(db, what):
        report.judged_elsewhere += 1
        note({"event": "elsewhere", "sample_id": sample.id})
        return
    try:
        if latest_evaluation(db, sample.id) is not None:  # type: ignore[arg-type]
            report.judged_elsewhere += 1
            note({"event": "elsewhere", "sample_id": sample.id})
            return
        spec = get_task(sample.task_id)
        extracted = fill_candidate(db, sample)
        try:
            result = judge_sample(extracted, spec, gpu=gpu)
        except JudgeFailed as exc:
            report.judge_failures.append(f"sample {sample.id}: {exc}")
            note({"event": "failure", "sample_id": sample.id, "message": str(exc)})
            return
        evaluation = add_judgement(db, result, sample.id, EVALUATION_SOURCE)  # type: ignore[arg-type]
        report.judged += 1
        report.categories[evaluation.category] = report.categories.get(evaluation.category, 0) + 1
        note({"event": "judged", "sample_id": sample.id, "task": sample.task_id, "category": evaluation.category})
    finally:
        with contextlib.suppress(StoreError):  # a claim left behind is taken over once this process has ended
            release(db, what)


def _finish_runs(db: sqlite_utils.Database, report: ImportReport) -> None:
    """An import is the whole of its runs' work: they are finished when it ends (again, after a resume
    that added or judged something)."""
    for run_id in report.runs.values():
        run = get_run(db, run_id)
        if run is not None and (run.finished_at is None or report.imported or report.judged):
            finish_run(db, run_id)


def _run_for(db: sqlite_utils.Database, e: Entry, source: str) -> Run:
    model = get_or_create_model(db, e.model, kind="import", source=source, endpoint=e.endpoint)
    run = find_run(db, model.id, e.run)  # type: ignore[arg-type]
    if run is not None:
        if run.context_level != e.context:
            raise ImportFileError(Path(source.removeprefix("import:")),
                               [f"line {e.line}: run {e.run!r} of {e.model} exists with context "
                                f"{run.context_level}, not {e.context}"])
        return run
    return create_run(db, Run(model_id=model.id, name=e.run, source=source, context_level=e.context,  # type: ignore[arg-type]
                              prompt_version=e.prompt_version, params={"imported_from": source}))
