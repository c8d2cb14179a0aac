"""Seeding a store from data files in the repository, so the explorer opens on real data
with no GPU and no network.

What is seeded: every task spec (tasks/specs/), every expert solution found
beside its spec (tasks/solutions/<task>/kernel.ptx + manifest.json), and the
JSON files in db/seed/ (samples such as mutation variants, their recorded
evaluations and measurements, fix records). docs/store.md gives the format.

Seeding only ever inserts. A seeded row carries a seed key; rows a person
added have none and are never touched. Samples, evaluations and fixes are
keyed by `<declared key>@<digest of their content>`, so seeding the same files
again inserts nothing, while a changed entry (new code, a re-recorded
evaluation) becomes a new row beside the old one, never an overwrite.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

import sqlite_utils

from ptxbench.db.access import CREATE_HINT, require_store
from ptxbench.db.queries import get_model, get_sample, get_task
from ptxbench.db.records import Evaluation, Fix, Measurement, Run, Sample, Task, canonical_json, content_hash
from ptxbench.db.seed_files import SampleEntry, SeedData, SeedError, load_seed_dir, read_repo_file
from ptxbench.db.recovery import replay
from ptxbench.db.store import get_meta, now_iso, open_store, say_on_stderr, set_meta, write_transaction
from ptxbench.db.writes import add_evaluation, add_fix, add_sample, create_run, get_or_create_model, upsert_task

log = logging.getLogger(__name__)

DEFAULT_SEED_DIR = Path(__file__).resolve().parent / "seed"
SEED_FORMAT = 1
EXPERT_MODEL = "expert"
MUTATION_MODEL = "mutation"
BUILTIN_MODELS: dict[str, dict[str, str]] = {
    EXPERT_MODEL: {"kind": "expert", "source": "expert solutions shipped in tasks/solutions/"},
    MUTATION_MODEL: {"kind": "mutation", "source": "variants made by mutating the expert solutions"},
}

__all__ = [
    "DEFAULT_SEED_DIR", "SeedError", "SeedReport", "ensure_default_store", "find_seeded_sample",
    "read_repo_file", "seed_fingerprint", "seed_store",
]


class TaskLike(Protocol):
    """What seeding needs of a task spec (ptxbench.tasks.spec.TaskSpec)."""

    id: str
    title: str
    operation: str
    arch: str
    families: Sequence[str]
    source: Path

    def to_dict(self) -> dict[str, Any]: ...

    def expert_dir(self) -> Path | None: ...


@dataclass
class SeedReport:
    tasks_added: int = 0
    tasks_updated: int = 0
    models: int = 0
    runs: int = 0
    samples: int = 0
    evaluations: int = 0
    measurements: int = 0
    fixes: int = 0
    already_present: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def inserted(self) -> int:
        return self.models + self.runs + self.samples + self.evaluations + self.fixes

    def summary(self) -> str:
        parts = [f"{f.name.replace('_', ' ')}: {getattr(self, f.name)}" for f in fields(self)
                 if f.name != "warnings" and getattr(self, f.name)]
        return ", ".join(parts) or "nothing new"


def _digest(*parts: Any) -> str:
    return hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).hexdigest()[:16]


def _task_paths(spec: TaskLike) -> tuple[str, str | None]:
    """Repository-relative spec path and expert folder (as the store keeps them)."""
    import ptxbench.tasks

    tasks_root = Path(ptxbench.tasks.__file__).resolve().parent

    def rel(p: Path) -> str:
        try:
            return "tasks/" + Path(p).resolve().relative_to(tasks_root).as_posix()
        except ValueError:
            return str(p)

    expert = spec.expert_dir()
    has_kernel = expert is not None and any((expert / n).is_file() for n in ("kernel.ptx", "kernel.cu"))
    return rel(spec.source), (rel(expert) if has_kernel else None)  # type: ignore[arg-type]


def _task_record(spec: TaskLike) -> Task:
    source, expert = _task_paths(spec)
    return Task(id=spec.id, title=spec.title, operation=spec.operation, arch=spec.arch,
                families=list(spec.families), spec=spec.to_dict(), source=source, expert_path=expert)


def _expert_entries(specs: Sequence[TaskLike], declared: set[str], report: SeedReport) -> list[SampleEntry]:
    """A sample for each expert solution on disk, unless a seed file already declares it."""
    entries = []
    for spec in specs:
        key = f"expert:{spec.id}"
        folder = spec.expert_dir()
        if key in declared or folder is None or not (folder / "kernel.ptx").is_file():
            continue
        manifest = None
        if (folder / "manifest.json").is_file():
            try:
                manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
            except (ValueError, OSError) as exc:
                report.warnings.append(f"{folder / 'manifest.json'}: not seeded, manifest does not parse: {exc}")
                continue
        entries.append(SampleEntry(
            seed_key=key, task_id=spec.id, model=EXPERT_MODEL, language="ptx",
            code=(folder / "kernel.ptx").read_text(encoding="utf-8"), manifest=manifest,
            source="expert", origin=str(folder),
        ))
    return entries


def seed_fingerprint(seed_dir: Path | None = None, tasks: Sequence[TaskLike] | None = None) -> str:
    """A digest of everything seeding reads: when it changes, the store is re-seeded."""
    seed_dir = seed_dir or DEFAULT_SEED_DIR
    tasks = _all_tasks() if tasks is None else tasks
    h = hashlib.sha256(f"seed format {SEED_FORMAT}".encode())
    if seed_dir.is_dir():
        for path in sorted(seed_dir.glob("*.json")):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    for spec in sorted(tasks, key=lambda t: t.id):
        h.update(canonical_json(spec.to_dict()).encode())
        folder = spec.expert_dir()
        for name in ("kernel.ptx", "manifest.json"):
            if folder is not None and (folder / name).is_file():
                h.update(name.encode() + b"\0" + (folder / name).read_bytes())
    return h.hexdigest()


def _all_tasks() -> list[TaskLike]:
    from ptxbench.tasks.spec import all_tasks

    return list(all_tasks())


def find_seeded_sample(db: sqlite_utils.Database, key: str) -> Sample | None:
    """The newest sample seeded under the declared key `key` (any content version)."""
    prefix = key + "@"
    row = db.execute(
        "SELECT id FROM samples WHERE substr(seed_key, 1, ?) = ? ORDER BY id DESC LIMIT 1", [len(prefix), prefix]
    ).fetchone()
    return get_sample(db, row[0]) if row else None


def seed_store(
    db: sqlite_utils.Database, seed_dir: Path | None = None, *, tasks: Sequence[TaskLike] | None = None
) -> SeedReport:
    """Insert what the seed files and task specs hold and the store lacks, in one
    transaction (a bad file changes nothing: SeedError names the file and entry)."""
    seed_dir = DEFAULT_SEED_DIR if seed_dir is None else Path(seed_dir)
    specs = _all_tasks() if tasks is None else list(tasks)
    data = load_seed_dir(seed_dir)
    report = SeedReport()
    data.samples.extend(_expert_entries(specs, {s.seed_key for s in data.samples}, report))
    with write_transaction(db):
        _seed_tasks(db, specs, report)
        _check_references(db, data, {s.id for s in specs})
        _seed_rows(db, data, report)
    return report


def _seed_tasks(db: sqlite_utils.Database, specs: Sequence[TaskLike], report: SeedReport) -> None:
    for spec in specs:
        record = _task_record(spec)
        old = get_task(db, spec.id)
        if old is None:
            report.tasks_added += 1
        elif (old.title, old.operation, old.arch, old.families, old.spec, old.source, old.expert_path) == (
            record.title, record.operation, record.arch, record.families, record.spec, record.source, record.expert_path
        ):
            continue
        else:
            report.tasks_updated += 1
        upsert_task(db, record)


def _check_references(db: sqlite_utils.Database, data: SeedData, task_ids: set[str]) -> None:
    problems = []
    known_tasks = task_ids | {r[0] for r in db.execute("SELECT id FROM tasks")}
    models = {m.name for m in data.models} | set(BUILTIN_MODELS) | {r[0] for r in db.execute("SELECT name FROM models")}
    runs = {r.seed_key for r in data.runs}
    samples = {s.seed_key for s in data.samples}
    for run in data.runs:
        if run.model not in models:
            problems.append(f"{run.origin}: run {run.seed_key}: unknown model {run.model!r} (declare it under models)")
    for s in data.samples:
        where = f"{s.origin}: sample {s.seed_key}"
        if s.task_id not in known_tasks:
            problems.append(f"{where}: unknown task {s.task_id!r}")
        if s.model is not None and s.model not in models:
            problems.append(f"{where}: unknown model {s.model!r} (declare it under models)")
        if s.run is not None and s.run not in runs:
            problems.append(f"{where}: unknown run {s.run!r}")
        if s.parent is not None and s.parent not in samples:
            problems.append(f"{where}: unknown parent sample {s.parent!r}")
    for e in data.evaluations:
        if e.sample not in samples:
            problems.append(f"{e.origin}: evaluation {e.seed_key}: unknown sample {e.sample!r}")
    for f in data.fixes:
        for key in (f.failed, f.fixed):
            if key not in samples:
                problems.append(f"{f.origin}: fix {f.seed_key}: unknown sample {key!r}")
    if problems:
        raise SeedError(problems)


def _seed_rows(db: sqlite_utils.Database, data: SeedData, report: SeedReport) -> None:
    model_ids: dict[str, int] = {}

    def model_id(name: str) -> int:
        if name not in model_ids:
            declared = next((m for m in data.models if m.name == name), None)
            existing = get_model(db, name)
            if existing is not None:
                model_ids[name] = existing.id  # type: ignore[assignment]
            else:
                info = declared.as_kwargs() if declared else {**BUILTIN_MODELS[name], "seed_key": f"model:{name}"}
                model_ids[name] = get_or_create_model(db, name, **info).id  # type: ignore[assignment]
                report.models += 1
        return model_ids[name]

    for m in data.models:
        model_id(m.name)

    run_ids: dict[str, int] = {}
    for r in data.runs:
        row = db.execute("SELECT id FROM runs WHERE seed_key = ?", [r.seed_key]).fetchone()
        if row:
            run_ids[r.seed_key] = row[0]
            report.already_present += 1
            continue
        run = Run(model_id=model_id(r.model), name=r.name, source=r.source, context_level=r.context_level,
                  prompt_version=r.prompt_version, params=r.params, started_at=r.started_at or now_iso(),
                  finished_at=r.finished_at, seed_key=r.seed_key)
        run_ids[r.seed_key] = create_run(db, run).id  # type: ignore[assignment]
        report.runs += 1

    sample_ids: dict[str, int] = {}
    stored_keys: dict[str, str] = {}
    for s in _parents_first(data.samples):
        stored = f"{s.seed_key}@{content_hash(s.code, s.manifest)[:16]}"
        stored_keys[s.seed_key] = stored
        row = db.execute("SELECT id FROM samples WHERE seed_key = ?", [stored]).fetchone()
        if row:
            sample_ids[s.seed_key] = row[0]
            report.already_present += 1
            continue
        sample = add_sample(db, Sample(
            task_id=s.task_id, language=s.language, source=s.source, code=s.code, manifest=s.manifest,
            response=s.response, run_id=run_ids.get(s.run) if s.run else None,
            model_id=model_id(s.model) if s.model else None, sample_index=s.sample_index, turn=s.turn,
            parent_id=sample_ids[s.parent] if s.parent else None, tokens_in=s.tokens_in,
            tokens_out=s.tokens_out, latency_s=s.latency_s, created_at=s.created_at or "", seed_key=stored,
        ))
        sample_ids[s.seed_key] = sample.id  # type: ignore[assignment]
        report.samples += 1

    for e in data.evaluations:
        stored = f"{e.seed_key}@{_digest(e.fields, e.measurements, stored_keys[e.sample])}"
        if db.execute("SELECT 1 FROM evaluations WHERE seed_key = ?", [stored]).fetchone():
            report.already_present += 1
            continue
        evaluation = Evaluation(**{**e.fields, "sample_id": sample_ids[e.sample], "seed_key": stored})
        add_evaluation(db, evaluation, [Measurement(**m) for m in e.measurements])
        report.evaluations += 1
        report.measurements += len(e.measurements)

    for f in data.fixes:
        stored = f"{f.seed_key}@{_digest(stored_keys[f.failed], stored_keys[f.fixed], f.explanation)}"
        if db.execute("SELECT 1 FROM fixes WHERE seed_key = ?", [stored]).fetchone():
            report.already_present += 1
            continue
        add_fix(db, Fix(failed_sample_id=sample_ids[f.failed], fixed_sample_id=sample_ids[f.fixed],
                        explanation=f.explanation, explanation_source=f.explanation_source, source=f.source,
                        created_at=f.created_at or "", seed_key=stored))
        report.fixes += 1


def _parents_first(samples: list[SampleEntry]) -> list[SampleEntry]:
    by_key = {s.seed_key: s for s in samples}
    ordered: list[SampleEntry] = []
    placed: set[str] = set()

    def place(s: SampleEntry, trail: tuple[str, ...]) -> None:
        if s.seed_key in placed:
            return
        if s.seed_key in trail:
            raise SeedError([f"{s.origin}: sample {s.seed_key}: parent chain loops ({' → '.join(trail)})"])
        if s.parent is not None:
            place(by_key[s.parent], trail + (s.seed_key,))
        placed.add(s.seed_key)
        ordered.append(s)

    for s in samples:
        place(s, ())
    return ordered


# -- the default store --------------------------------------------------------------


def open_for_writing(
    path: str | Path | None,
    *,
    create: bool = False,
    seed: bool = True,
    hint: str = CREATE_HINT,
    report: Callable[[str], None] | None = say_on_stderr,
) -> sqlite_utils.Database:
    """The store a command adds data to (`eval`, `import`, `run`, `mcp`, Fixit's writers).

    `path` None is the default store, created on first use (and with `seed`, seeded) as
    always. A path a person named must already be a store unless `create`: a mistyped `--db`
    would otherwise become a new, empty store that silently takes the data. NoStore says the
    path and `hint`. With `seed` the store is seeded as `ensure_default_store` does. What the
    store's recovery journal holds is written first (db/recovery.py) and said to `report`."""
    if path is not None and not create:
        require_store(Path(path), hint=hint)
    db = ensure_default_store(path) if seed else open_store(path)
    try:
        said = replay(db).message()
    except BaseException:
        db.conn.close()
        raise
    if said and report is not None:
        report(said)
    return db


def ensure_default_store(
    path: str | Path | None = None,
    *,
    seed_dir: Path | None = None,
    tasks: Sequence[TaskLike] | None = None,
) -> sqlite_utils.Database:
    """Open (creating and migrating) the store at `path` (default: the user's data
    folder) and seed it when it is new or the seed data changed since it was last
    seeded. A seeding problem is logged and kept in meta `seed_error`; the store
    still opens with what it holds."""
    db = open_store(path)
    try:
        specs = _all_tasks() if tasks is None else list(tasks)
        fingerprint = seed_fingerprint(seed_dir, specs)
        if get_meta(db, "seed_digest") == fingerprint:
            return db
        report = seed_store(db, seed_dir, tasks=specs)
    except (SeedError, ValueError, OSError) as exc:
        # A broken spec or seed file is the repository's problem; the user's store stays usable.
        log.warning("the store was not seeded: %s", exc)
        with write_transaction(db):
            set_meta(db, "seed_error", str(exc))
        return db
    for warning in report.warnings:
        log.warning("%s", warning)
    with write_transaction(db):
        set_meta(db, "seed_digest", fingerprint)
        set_meta(db, "seeded_at", now_iso())
        set_meta(db, "seed_summary", report.summary())
        db.execute("DELETE FROM meta WHERE key = 'seed_error'")
    log.info("seeded %s: %s", path or "the default store", report.summary())
    return db

