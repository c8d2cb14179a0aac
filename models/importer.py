"""Import model output made elsewhere: the one place an import writes (docs/models.md, docs/store.md).

A reader (models/interop.py and its format modules) turns a file or a folder into entries, lines
it skips (with the reason) and problems. Problems refuse the whole file, every one listed, and
nothing is written, unless the import is told to skip bad lines: then they are skipped lines too.
The entries are written in one transaction (samples, with their runs and models created as
needed, the judgements and labels an export carries, the metadata a line carries beside the
sample), then each new sample is judged like a sample of `ptxbench run`.

A slot is a (run, task, sample_index, turn). A line whose slot is stored with the same code (and
response) is skipped as already stored, so importing the same file again only judges what is
still unjudged. A line whose slot is stored with *other* code is never silently left as it was:
by default it is a conflict (listed; nothing of that line, nor of the later turns of its
trajectory, is written), and with `on_change="new-attempt"` its whole trajectory is stored again
as a new attempt, at the next free sample_index of that run and task.

Fields a line has beyond its format's are kept in its run's params under `metadata`, by sample
id (the store has no metadata column on samples). A sample a reader cannot make judgeable (a
launch its host wrapper does not state) is stored, never judged, and listed with the reason.

Two imports of one file at once judge each sample once: a sample is claimed before it is judged
(db/writes.py `claim`), and one another live import holds, or has judged meanwhile, is left to
it. A run is marked finished (`finished_at`) when the import that wrote or judged its samples
ends. A judgement the store will not take is kept in its recovery journal (db/recovery.py) and
the import stops with `Kept`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import sqlite_utils

from ptxbench.db.generation import find_run, run_samples, update_run_params
from ptxbench.db.judgement import add_judgement
from ptxbench.db.queries import get_run, latest_evaluation
from ptxbench.db.records import Run, Sample, content_hash
from ptxbench.db.store import StoreError, store_file, write_transaction
from ptxbench.db.writes import (
    add_evaluation,
    add_label,
    add_sample,
    claim,
    create_run,
    finish_run,
    get_or_create_model,
    release,
)
from ptxbench.models.interop import FORMATS, Entry, Options, ReadResult, Skipped, detect
from ptxbench.models.interop_jsonl import FIELDS, MAX_LINE_BYTES, parse_line, read_jsonl  # noqa: F401  (their old home)
from ptxbench.models.judging import JudgeFailed, fill_candidate, judge_sample
from ptxbench.tasks.spec import get_task

EVALUATION_SOURCE = "ptxbench import"
ON_CHANGE = ("conflict", "new-attempt")
Progress = Callable[[dict[str, Any]], None]
Slot = tuple[str, str, str, int, int]             # model, run, task, sample_index, turn


class ImportFileError(ValueError):
    """The file cannot be imported; `problems` lists every bad line."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.problems = problems
        shown = "\n".join(problems[:50]) + (f"\n… {len(problems) - 50} more" if len(problems) > 50 else "")
        super().__init__(f"{path}: nothing imported, {len(problems)} problem(s):\n{shown}")


@dataclass
class ImportReport:
    path: str
    format: str = "jsonl"
    lines: int = 0                    # entries read (lines, turns, solutions)
    imported: int = 0
    skipped: int = 0                  # every line not written, whatever the reason (skipped_lines says each)
    already_stored: int = 0           # of them: the slot holds the same code
    new_attempts: int = 0             # trajectories stored again at a new sample_index (on_change="new-attempt")
    judged: int = 0
    judged_elsewhere: int = 0         # judged by another import of the same samples running at the same time
    recorded: int = 0                 # judgements the file carried, stored as they were
    runs: dict[str, int] = field(default_factory=dict)
    categories: dict[str, int] = field(default_factory=dict)
    judge_failures: list[str] = field(default_factory=list)
    skipped_lines: list[dict[str, str]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    not_judged: list[dict[str, Any]] = field(default_factory=list)
    metadata_kept: int = 0            # samples whose extra fields were kept in their run's params
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def skip(self, s: Skipped) -> None:
        self.skipped += 1
        self.already_stored += s.kind == "stored"
        self.skipped_lines.append(s.to_dict())


def read_entries(path: Path, stores: tuple = ()) -> list[Entry]:
    """The entries of a PTXBench JSONL file, every line checked; ImportFileError lists every problem."""
    result = read_jsonl(path, Options(stores=stores))
    if result.fatal or result.problems:
        raise ImportFileError(path, result.fatal + result.problems)
    return result.entries


def read_source(path: Path, fmt: str | None, options: Options) -> ReadResult:
    """Any format's reader, chosen by `fmt` or by the look of `path` (models/interop.py `detect`)."""
    fmt = fmt or detect(path)
    if fmt not in FORMATS:
        raise ImportFileError(path, [f"not a format PTXBench imports (give --format: {', '.join(FORMATS)})"])
    if fmt == "jsonl":
        return read_jsonl(path, options)
    if fmt == "paper":
        from ptxbench.models.interop_paper import read_paper

        return read_paper(path, options)
    if fmt == "kernelbench":
        from ptxbench.models.interop_kernelbench import read_kernelbench

        return read_kernelbench(path, options)
    from ptxbench.models.interop_flashinfer import read_flashinfer

    return read_flashinfer(path, options)


def import_file(db: sqlite_utils.Database, path: str | Path, *, judge: bool = True, gpu: bool = False,
                progress: Progress | None = None, fmt: str | None = None, on_change: str = "conflict",
                skip_bad: bool = False, options: Options | None = None) -> ImportReport:
    """Read, store and (by default) judge an import source. Raises ImportFileError before writing
    anything when it has problems (unless `skip_bad`)."""
    if on_change not in ON_CHANGE:
        raise ValueError(f"on_change must be one of {', '.join(ON_CHANGE)}")
    path = Path(path)
    note = progress or (lambda event: None)
    stores = tuple(s for s in (store_file(db),) if s is not None)
    options = replace(options or Options(), stores=stores)
    result = read_source(path, fmt, options)
    if result.fatal or (result.problems and not skip_bad):
        raise ImportFileError(path, result.fatal + result.problems)
    report = ImportReport(path=str(path), format=result.format, lines=len(result.entries), notes=list(result.notes))
    for problem in result.problems:
        where, _, reason = problem.partition(": ")
        report.skip(Skipped(where if reason else "file", reason or problem, "bad"))
    for s in result.skipped:
        report.skip(s)
    if not result.entries and not result.skipped and not result.problems:
        raise ImportFileError(path, ["nothing to import"])
    writer = _Writer(db, path, report, on_change, skip_bad)
    with write_transaction(db):
        writer.write(result.entries)
    report.skipped_lines.sort(key=_position)
    note({"event": "imported", "imported": report.imported, "skipped": report.skipped})
    if judge:
        for sample in writer.to_judge:
            _judge_once(db, sample, gpu, report, note)
    _finish_runs(db, report, writer.keep_finished)
    return report


def _position(skipped: dict[str, str]) -> tuple[int, int, str]:
    """Skipped lines in file order: JSONL lines by number, other places by name."""
    head, _, number = skipped["where"].partition(" ")
    return (0, int(number), "") if head == "line" and number.isdigit() else (1, 0, skipped["where"])


def _same(stored: Sample, e: Entry) -> bool:
    """The stored sample holds what the line holds: the same response, or the same code and manifest."""
    if e.response is not None and (stored.response or "") != e.response:
        return False
    if e.code or e.language != "none":
        return stored.content_hash == content_hash(e.code, e.manifest)
    return e.response is not None


class _Writer:
    def __init__(self, db: sqlite_utils.Database, path: Path, report: ImportReport, on_change: str,
                 skip_bad: bool) -> None:
        self.db, self.path, self.report = db, path, report
        self.on_change, self.skip_bad = on_change, skip_bad
        self.source = f"import:{path}"
        self.runs: dict[tuple[str, str, str], Run | None] = {}
        self.slots: dict[int, dict[tuple[str, int, int], Sample]] = {}    # run id → its stored samples by slot
        self.used: dict[tuple[int, str], int] = {}                        # (run, task) → highest sample_index
        self.ids: dict[Slot, int] = {}
        self.refs: dict[str, int] = {}
        self.metadata: dict[int, dict[str, Any]] = {}
        self.to_judge: list[Sample] = []
        self.keep_finished: set[int] = set()

    def write(self, entries: list[Entry]) -> None:
        trajectories: dict[tuple[str, str, str, int], list[Entry]] = {}
        for e in entries:
            trajectories.setdefault((e.model, e.run, e.task, e.sample_index), []).append(e)
        plan: list[tuple[Entry, int]] = []           # (entry, the sample_index it is stored at)
        for items in trajectories.values():
            items.sort(key=lambda e: e.turn)
            run = self.run_for(items[0])
            if run is None:
                for e in items:
                    self.report.skip(Skipped(e.where, f"run {e.run!r} of {e.model} exists with another context "
                                             f"level than {e.context}", "bad"))
                continue
            plan.extend(self.decide(run, items))
        order = {id(e): i for i, e in enumerate(entries)}
        plan.sort(key=lambda p: (p[0].turn, order[id(p[0])]))
        planned = {e.ref for e, _ in plan if e.ref is not None}
        while plan:                                   # parents first: an export's parent may be a later line
            waiting = {id(e) for e, _ in plan
                       if e.parent_ref in planned and e.parent_ref not in self.refs and e.parent_ref != e.ref}
            if len(waiting) == len(plan):             # a cycle of parents: stored as they come
                waiting = set()
            for e, index in plan:
                if id(e) not in waiting:
                    self.store(e, index)
                    planned.discard(e.ref)
            plan = [p for p in plan if id(p[0]) in waiting]
        self.save_metadata()

    def run_for(self, e: Entry) -> Run | None:
        key = (e.model, e.run, e.context)
        if key in self.runs:
            return self.runs[key]
        model = get_or_create_model(self.db, e.model, kind="import", source=self.source, endpoint=e.endpoint)
        run = find_run(self.db, model.id, e.run)  # type: ignore[arg-type]
        if run is not None and run.context_level != e.context:
            if not self.skip_bad:
                raise ImportFileError(self.path, [f"{e.where}: run {e.run!r} of {e.model} exists with context "
                                                  f"{run.context_level}, not {e.context}"])
            run = None
        elif run is None:
            params = {**e.run_params, "imported_from": self.source}
            run = create_run(self.db, Run(model_id=model.id, name=e.run, source=self.source,  # type: ignore[arg-type]
                                          context_level=e.context, prompt_version=e.prompt_version, params=params,
                                          started_at=e.run_started_at, finished_at=e.run_finished_at))
            if e.run_finished_at:
                self.keep_finished.add(run.id)  # type: ignore[arg-type]
        self.runs[key] = run
        if run is not None:
            self.report.runs[f"{e.model} / {e.run}"] = run.id  # type: ignore[assignment]
        return run

    def stored(self, run: Run) -> dict[tuple[str, int, int], Sample]:
        assert run.id is not None
        if run.id not in self.slots:
            found: dict[tuple[str, int, int], Sample] = {}
            for s in run_samples(self.db, run.id):    # ordered by id within a slot: the newest wins
                found[(s.task_id, s.sample_index, s.turn)] = s
                self.used[(run.id, s.task_id)] = max(self.used.get((run.id, s.task_id), -1), s.sample_index)
            self.slots[run.id] = found
        return self.slots[run.id]

    def decide(self, run: Run, items: list[Entry]) -> list[tuple[Entry, int]]:
        """Where each turn of one trajectory goes: its own slot, a new attempt's, or nowhere (a conflict)."""
        stored = self.stored(run)
        assert run.id is not None
        for e in items:
            self.used[(run.id, e.task)] = max(self.used.get((run.id, e.task), -1), e.sample_index)
        differ = [e for e in items if (s := stored.get((e.task, e.sample_index, e.turn))) is not None
                  and not _same(s, e)]
        if not differ:
            return [(e, e.sample_index) for e in items]
        first = differ[0]
        held = stored[(first.task, first.sample_index, first.turn)]
        if self.on_change == "new-attempt":
            for index in sorted({i for (task, i, _t) in stored if task == first.task}):
                if all((s := stored.get((e.task, index, e.turn))) is not None and _same(s, e) for e in items):
                    return [(e, index) for e in items]     # stored as an attempt already (an import run again)
            index = self.used[(run.id, first.task)] + 1
            self.used[(run.id, first.task)] = index
            self.report.new_attempts += 1
            self.report.conflicts.append({"where": first.where, "stored_sample": held.id, "resolved": "new attempt",
                                          "sample_index": index})
            return [(e, index) for e in items]
        self.report.conflicts.append({"where": first.where, "stored_sample": held.id, "resolved": "not imported"})
        out = []
        for e in items:
            if e.turn < first.turn:
                out.append((e, e.sample_index))
            elif e is first:
                self.report.skip(Skipped(e.where, f"conflict: {e.task} sample {e.sample_index} turn {e.turn} of run "
                                         f"{e.run!r} is stored (sample {held.id}) with other code; not imported "
                                         "(--on-change new-attempt stores it as a new attempt)", "conflict"))
            else:
                self.report.skip(Skipped(e.where, f"follows a conflicting turn ({first.where})", "follows"))
        return out

    def store(self, e: Entry, index: int) -> None:
        run = self.runs[(e.model, e.run, e.context)]
        assert run is not None and run.id is not None
        slot: Slot = (e.model, e.run, e.task, index, e.turn)
        held = self.stored(run).get((e.task, index, e.turn))
        if held is not None and _same(held, e):
            self.report.skip(Skipped(e.where, f"already stored (sample {held.id})", "stored"))
            self.ids[slot] = held.id  # type: ignore[assignment]
            if e.ref is not None:
                self.refs[e.ref] = held.id  # type: ignore[assignment]
            if e.unjudged:
                self.report.not_judged.append({"where": e.where, "sample_id": held.id, "reason": e.unjudged})
            elif e.judge and latest_evaluation(self.db, held.id) is None:  # type: ignore[arg-type]
                self.to_judge.append(held)
            return
        if e.parent_ref is not None:
            parent = self.refs.get(e.parent_ref)
        else:
            parent = self.ids.get((e.model, e.run, e.task, index, e.turn - 1)) if e.turn > 1 else None
            if e.turn > 1 and parent is None:
                self.report.skip(Skipped(e.where, f"follows turn {e.turn - 1}, which was not imported", "follows"))
                return
        note = " (" + "; ".join(n for n in (e.note, e.unjudged and f"not judged: {e.unjudged}") if n) + ")"
        sample = add_sample(self.db, Sample(
            task_id=e.task, language=e.language, source=self.source + (note if note != " ()" else ""),
            code=e.code, manifest=e.manifest, response=e.response, run_id=run.id, sample_index=index,
            turn=e.turn, parent_id=parent, tokens_in=e.tokens_in, tokens_out=e.tokens_out,
            latency_s=e.latency_s, created_at=e.created_at,
        ))
        assert sample.id is not None
        self.ids[slot] = sample.id
        self.stored(run)[(e.task, index, e.turn)] = sample
        if e.ref is not None:
            self.refs[e.ref] = sample.id
        self.report.imported += 1
        for r in e.recorded:
            add_evaluation(self.db, replace(r.evaluation, sample_id=sample.id, id=None), r.measurements)
            self.report.recorded += 1
        for label in e.labels:
            add_label(self.db, replace(label, sample_id=sample.id, id=None))
        if e.metadata:
            self.metadata.setdefault(run.id, {})[str(sample.id)] = e.metadata
            self.report.metadata_kept += 1
        if e.unjudged:
            self.report.not_judged.append({"where": e.where, "sample_id": sample.id, "reason": e.unjudged})
        elif e.judge and not e.recorded:
            self.to_judge.append(sample)

    def save_metadata(self) -> None:
        for run_id, by_sample in self.metadata.items():
            run = get_run(self.db, run_id)
            assert run is not None
            params = dict(run.params)
            kept = dict(params.get("metadata") or {})
            kept.update(by_sample)
            params["metadata"] = kept
            update_run_params(self.db, run_id, params)


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


def _finish_runs(db: sqlite_utils.Database, report: ImportReport, keep: set[int]) -> None:
    """An import is the whole of its runs' work: they are finished when it ends (again, after a resume
    that added or judged something). A run the file says was finished keeps that time."""
    for run_id in report.runs.values():
        if run_id in keep:
            continue
        run = get_run(db, run_id)
        if run is not None and (run.finished_at is None or report.imported or report.judged):
            finish_run(db, run_id)
