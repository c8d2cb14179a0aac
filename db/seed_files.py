"""Reading and checking the seed files (db/seed/*.json) before anything is written.

Every problem names the file and the entry; all problems of all files are
reported at once. docs/store.md describes the format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import Any

from ptxbench.db.records import Evaluation, Measurement
from ptxbench.engine.categories import is_category

TOP_KEYS = {"format", "description", "models", "runs", "samples", "evaluations", "fixes"}
FORMATS = (1,)


class SeedError(ValueError):
    """Seed data that cannot be used; lists every problem found, each naming its file."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        shown = problems[:20] + ([f"… and {len(problems) - 20} more"] if len(problems) > 20 else [])
        super().__init__("bad seed data:\n  " + "\n  ".join(shown))


@dataclass
class ModelEntry:
    seed_key: str
    name: str
    kind: str
    source: str
    endpoint: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    origin: str = ""

    def as_kwargs(self) -> dict[str, Any]:
        return dict(kind=self.kind, source=self.source, endpoint=self.endpoint, params=self.params,
                    seed_key=self.seed_key)


@dataclass
class RunEntry:
    seed_key: str
    model: str
    name: str
    source: str
    context_level: str = "none"
    prompt_version: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    started_at: str | None = None
    finished_at: str | None = None
    origin: str = ""


@dataclass
class SampleEntry:
    seed_key: str
    task_id: str
    language: str
    code: str
    source: str
    model: str | None = None
    run: str | None = None
    manifest: dict[str, Any] | None = None
    response: str | None = None
    sample_index: int = 0
    turn: int = 1
    parent: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    latency_s: float | None = None
    created_at: str | None = None
    origin: str = ""


@dataclass
class EvaluationEntry:
    seed_key: str
    sample: str                      # the sample's declared seed key
    fields: dict[str, Any]           # Evaluation fields
    measurements: list[dict[str, Any]]
    origin: str = ""


@dataclass
class FixEntry:
    seed_key: str
    failed: str
    fixed: str
    explanation: str
    explanation_source: str
    source: str
    created_at: str | None = None
    origin: str = ""


@dataclass
class SeedData:
    models: list[ModelEntry] = field(default_factory=list)
    runs: list[RunEntry] = field(default_factory=list)
    samples: list[SampleEntry] = field(default_factory=list)
    evaluations: list[EvaluationEntry] = field(default_factory=list)
    fixes: list[FixEntry] = field(default_factory=list)


def read_repo_file(name: str, seed_dir: Path) -> str:
    """A file named in a seed entry: relative to the seed folder if it is there,
    else relative to the repository (`tasks/…`, `db/…`, also inside an installed wheel)."""
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise ValueError(f"{name!r} must be a relative path inside the repository")
    local = seed_dir / rel
    if local.is_file():
        return local.read_text(encoding="utf-8")
    import ptxbench.db
    import ptxbench.engine
    import ptxbench.tasks

    roots = {
        "tasks": Path(ptxbench.tasks.__file__).parent,
        "db": Path(ptxbench.db.__file__).parent,
        "engine": Path(ptxbench.engine.__file__).parent,
    }
    root = roots.get(rel.parts[0])
    if root is None or not (root.joinpath(*rel.parts[1:])).is_file():
        raise ValueError(f"{name!r} not found (looked in {seed_dir} and the repository)")
    return root.joinpath(*rel.parts[1:]).read_text(encoding="utf-8")


class _Checker:
    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.problems: list[str] = []

    def fail(self, where: str, message: str) -> None:
        self.problems.append(f"{self.origin}: {where}: {message}")

    def obj(self, value: Any, where: str, required: dict[str, type | tuple], optional: dict[str, type | tuple]) -> bool:
        if not isinstance(value, dict):
            self.fail(where, "expected an object")
            return False
        ok = True
        for key in value:
            if key not in required and key not in optional:
                self.fail(f"{where}.{key}", f"unknown field (allowed: {', '.join(sorted({**required, **optional}))})")
                ok = False
        for key in required:
            if key not in value:
                self.fail(where, f"missing {key!r}")
                ok = False
        for key, kind in {**required, **optional}.items():
            if key in value and value[key] is not None and not _is(value[key], kind):
                self.fail(f"{where}.{key}", f"expected {_kind(kind)}, got {value[key]!r:.60}")
                ok = False
        for key in required:
            if key in value and isinstance(value[key], str) and not value[key].strip():
                self.fail(f"{where}.{key}", "is empty")
                ok = False
        return ok


def _is(value: Any, kind: type | tuple) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if object in kinds:
        return True
    if isinstance(value, bool) and bool not in kinds:
        return False
    return isinstance(value, kinds)


def _kind(kind: type | tuple) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


_EVAL_FIELDS = {f.name for f in fields(Evaluation)} - {"sample_id", "id", "seed_key"}
_EVAL_REQUIRED = {"engine_version": str, "status": str, "category": str, "source": str}
_MEASUREMENT_FIELDS = {f.name for f in fields(Measurement)} - {"evaluation_id", "id"}
_MEASUREMENT_REQUIRED = {"split": str, "sizes": dict, "category": str}
_NUM = (int, float)


def load_seed_dir(seed_dir: Path) -> SeedData:
    """Every *.json file of the folder, in name order; a missing folder is no data."""
    data = SeedData()
    problems: list[str] = []
    if seed_dir.is_dir():
        for path in sorted(seed_dir.glob("*.json")):
            problems += _load_file(path, seed_dir, data)
    seen: dict[str, dict[str, str]] = {"model": {}, "run": {}, "sample": {}, "evaluation": {}, "fix": {}}
    for kind, entries in (("model", data.models), ("run", data.runs), ("sample", data.samples),
                          ("evaluation", data.evaluations), ("fix", data.fixes)):
        for e in entries:
            if e.seed_key in seen[kind]:
                problems.append(f"{e.origin}: {kind} seed_key {e.seed_key!r} is also used in {seen[kind][e.seed_key]}")
            seen[kind][e.seed_key] = e.origin
    if problems:
        raise SeedError(problems)
    return data


def _load_file(path: Path, seed_dir: Path, data: SeedData) -> list[str]:
    origin = path.name
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return [f"{origin}: cannot be read: {exc}"]
    except ValueError as exc:
        return [f"{origin}: not valid JSON: {exc}"]
    c = _Checker(origin)
    if not c.obj(doc, "(file)", {}, {k: (int, str, list) for k in TOP_KEYS}):
        return c.problems
    if doc.get("format", 1) not in FORMATS:
        c.fail("format", f"unknown seed format {doc.get('format')!r} (this PTXBench reads {FORMATS})")
        return c.problems
    for key in ("models", "runs", "samples", "evaluations", "fixes"):
        if key in doc and not isinstance(doc[key], list):
            c.fail(key, "expected a list")
            return c.problems

    for i, m in enumerate(doc.get("models", [])):
        where = f"models[{i}]"
        if c.obj(m, where, {"seed_key": str, "name": str, "kind": str, "source": str},
                 {"endpoint": str, "params": dict}):
            data.models.append(ModelEntry(**m, origin=origin))

    for i, r in enumerate(doc.get("runs", [])):
        where = f"runs[{i}]"
        if c.obj(r, where, {"seed_key": str, "model": str, "name": str, "source": str},
                 {"context_level": str, "prompt_version": str, "params": dict, "started_at": str, "finished_at": str}):
            if r.get("context_level", "none") not in ("none", "brief", "full"):
                c.fail(f"{where}.context_level", "must be none, brief or full")
                continue
            data.runs.append(RunEntry(**r, origin=origin))

    for i, s in enumerate(doc.get("samples", [])):
        _sample(c, s, f"samples[{i}]", seed_dir, data)

    for i, e in enumerate(doc.get("evaluations", [])):
        where = f"evaluations[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("sample"), str):
            c.fail(where, "expected an object with 'sample' (the seed_key of a sample)")
            continue
        _evaluation(c, {k: v for k, v in e.items() if k != "sample"}, where, e["sample"], data)

    for i, f in enumerate(doc.get("fixes", [])):
        where = f"fixes[{i}]"
        if c.obj(f, where, {"seed_key": str, "failed": str, "fixed": str, "explanation": str,
                            "explanation_source": str, "source": str}, {"created_at": str}):
            data.fixes.append(FixEntry(**f, origin=origin))
    return c.problems


def _sample(c: _Checker, s: Any, where: str, seed_dir: Path, data: SeedData) -> None:
    required = {"seed_key": str, "task_id": str, "language": str, "source": str}
    optional = {
        "code": str, "code_path": str, "manifest": dict, "manifest_path": str, "model": str, "run": str,
        "response": str, "sample_index": int, "turn": int, "parent": str, "tokens_in": int, "tokens_out": int,
        "latency_s": _NUM, "created_at": str, "evaluations": list,
    }
    if not c.obj(s, where, required, optional):
        return
    where = f"{where} ({s['seed_key']})"
    if s["language"] not in ("ptx", "cuda", "none"):
        c.fail(f"{where}.language", "must be ptx, cuda or none")
        return
    if ("code" in s) == ("code_path" in s):
        c.fail(where, "give exactly one of 'code' and 'code_path'")
        return
    if "manifest" in s and "manifest_path" in s:
        c.fail(where, "give at most one of 'manifest' and 'manifest_path'")
        return
    try:
        code = s["code"] if "code" in s else read_repo_file(s["code_path"], seed_dir)
        manifest = s.get("manifest")
        if "manifest_path" in s:
            manifest = json.loads(read_repo_file(s["manifest_path"], seed_dir))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        c.fail(where, str(exc))
        return
    if s.get("turn", 1) < 1:
        c.fail(f"{where}.turn", "turns are 1-based")
        return
    entry = SampleEntry(
        **{k: v for k, v in s.items() if k not in ("code", "code_path", "manifest", "manifest_path", "evaluations")},
        code=code, manifest=manifest, origin=c.origin,
    )
    data.samples.append(entry)
    for j, e in enumerate(s.get("evaluations", [])):
        _evaluation(c, e, f"{where}.evaluations[{j}]", s["seed_key"], data, default_key=f"{s['seed_key']}#eval{j}")


def _evaluation(c: _Checker, e: Any, where: str, sample: str, data: SeedData, default_key: str | None = None) -> None:
    optional: dict[str, Any] = {k: object for k in _EVAL_FIELDS if k not in _EVAL_REQUIRED}
    optional.update(measurements=list, seed_key=str)
    if not c.obj(e, where, dict(_EVAL_REQUIRED), optional):
        return
    key = e.get("seed_key") or default_key
    if key is None:
        c.fail(where, "missing 'seed_key'")
        return
    if not is_category(e["category"]):
        c.fail(f"{where}.category", f"{e['category']!r} is not ok or a vocabulary word")
        return
    measurements = []
    for k, m in enumerate(e.get("measurements", [])):
        mw = f"{where}.measurements[{k}]"
        if not c.obj(m, mw, dict(_MEASUREMENT_REQUIRED),
                     {f: object for f in _MEASUREMENT_FIELDS if f not in _MEASUREMENT_REQUIRED}):
            return
        if m["split"] not in ("train", "heldout") or not is_category(m["category"]):
            c.fail(mw, "split must be train or heldout and category ok or a vocabulary word")
            return
        measurements.append(m)
    fields_ = {k: v for k, v in e.items() if k not in ("measurements", "seed_key")}
    data.evaluations.append(EvaluationEntry(seed_key=key, sample=sample, fields=fields_,
                                            measurements=measurements, origin=c.origin))
