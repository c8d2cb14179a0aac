"""The store's rows as dataclasses: what crosses the db/ boundary.

One dataclass per table, fields named exactly as the columns. JSON columns
are Python lists and dicts here; 0/1 columns are booleans (None where the
column is NULL: "not reached" or "not measured"). `to_row` and `from_row`
convert both ways; `from_row` ignores columns it does not know, so a reader
keeps working when a later migration adds one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

R = TypeVar("R", bound="Record")


class Record:
    """Common row conversion for the table dataclasses below."""

    TABLE: ClassVar[str]
    JSON_FIELDS: ClassVar[dict[str, Any]] = {}  # field → value when the column is NULL/empty
    BOOL_FIELDS: ClassVar[tuple[str, ...]] = ()


def _dump(value: Any) -> str:
    if not value and isinstance(value, (list, dict)):
        return "[]" if isinstance(value, list) else "{}"  # most JSON columns are empty; skip the encoder
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def to_row(record: Record) -> dict[str, Any]:
    """Column → SQLite value. `id` is left out while it is None (the store assigns it)."""
    row: dict[str, Any] = {}
    json_fields, bool_fields = record.JSON_FIELDS, record.BOOL_FIELDS
    for name in _names(type(record)):
        value = getattr(record, name)
        if name == "id" and value is None:
            continue
        if name in json_fields:
            value = None if value is None else _dump(value)
        elif name in bool_fields:
            value = None if value is None else int(bool(value))
        row[name] = value
    return row


def from_row(cls: type[R], row: dict[str, Any] | Any) -> R:
    """SQLite row (a dict or sqlite3.Row) → record."""
    data = dict(row)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            continue
        value = data[f.name]
        if f.name in cls.JSON_FIELDS:
            empty = cls.JSON_FIELDS[f.name]
            if value is None or value == "":
                value = empty() if callable(empty) else empty
            else:
                try:
                    value = json.loads(value)
                except ValueError:
                    pass  # a row written by hand with non-JSON text: keep the text rather than fail the read
        elif f.name in cls.BOOL_FIELDS and value is not None:
            value = bool(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def canonical_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def content_hash(code: str, manifest: dict[str, Any] | None) -> str:
    """sha256 of the candidate: its code and its launch manifest (canonical JSON)."""
    h = hashlib.sha256()
    h.update(code.encode("utf-8", "surrogatepass"))
    h.update(b"\x00")
    if manifest is not None:
        h.update(canonical_json(manifest).encode("utf-8"))
    return h.hexdigest()


@dataclass
class Task(Record):
    TABLE: ClassVar[str] = "tasks"
    JSON_FIELDS: ClassVar[dict[str, Any]] = {"families": list, "spec": dict}

    id: str
    title: str
    operation: str
    arch: str
    families: list[str]
    spec: dict[str, Any]
    source: str                      # repository-relative spec path
    expert_path: str | None = None   # repository-relative folder of the expert solution
    updated_at: str = ""


@dataclass
class Model(Record):
    TABLE: ClassVar[str] = "models"
    JSON_FIELDS: ClassVar[dict[str, Any]] = {"params": dict}

    name: str
    kind: str = "model"              # model | expert | mutation | import | synthetic
    source: str = ""
    endpoint: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""
    seed_key: str | None = None
    id: int | None = None


@dataclass
class Run(Record):
    TABLE: ClassVar[str] = "runs"
    JSON_FIELDS: ClassVar[dict[str, Any]] = {"params": dict}

    model_id: int
    name: str
    source: str = ""
    context_level: str = "none"      # none | brief | full
    prompt_version: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    finished_at: str | None = None
    seed_key: str | None = None
    id: int | None = None


@dataclass
class Sample(Record):
    TABLE: ClassVar[str] = "samples"
    JSON_FIELDS: ClassVar[dict[str, Any]] = {"manifest": None}

    task_id: str
    language: str                    # ptx | cuda | none
    source: str                      # "expert", "mutation of expert:… (…)", "model:NAME", "import:FILE"
    code: str = ""
    manifest: dict[str, Any] | None = None
    response: str | None = None
    run_id: int | None = None
    model_id: int | None = None
    sample_index: int = 0
    turn: int = 1
    parent_id: int | None = None
    content_hash: str = ""           # filled by add_sample from code + manifest
    tokens_in: int | None = None
    tokens_out: int | None = None
    latency_s: float | None = None
    created_at: str = ""
    seed_key: str | None = None
    id: int | None = None


@dataclass
class Evaluation(Record):
    TABLE: ClassVar[str] = "evaluations"
    JSON_FIELDS: ClassVar[dict[str, Any]] = {
        "tool_versions": dict,
        "ptx_families": list,
        "sass_families": list,
        "required_missing": list,
        "resources": dict,
        "warnings": list,
        "evidence": dict,
    }
    BOOL_FIELDS: ClassVar[tuple[str, ...]] = (
        "compiled", "correct", "correct_heldout", "uses_ptx", "uses_sass", "executed",
    )

    sample_id: int
    engine_version: str
    status: str                      # judged | static | "skipped: no sm_100a device"
    category: str                    # ok or one word of ptxbench.engine.categories
    source: str                      # "ptxbench eval", "recorded: … on NVIDIA H200, 2026-11-29"
    created_at: str = ""
    device: str | None = None
    driver: str | None = None
    tool_versions: dict[str, Any] = field(default_factory=dict)
    stage: str | None = None
    compiled: bool | None = None
    correct: bool | None = None
    correct_heldout: bool | None = None
    uses_ptx: bool | None = None
    uses_sass: bool | None = None
    executed: bool | None = None
    ptx_families: list[str] = field(default_factory=list)
    sass_families: list[str] = field(default_factory=list)
    required_missing: list[str] = field(default_factory=list)
    resources: dict[str, Any] = field(default_factory=dict)
    warnings: list[Any] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    assembler_log: str | None = None
    ptx: str | None = None
    sass: str | None = None
    time_ms: float | None = None
    baseline_ms: float | None = None
    speedup: float | None = None
    tflops: float | None = None
    sol_fraction: float | None = None     # speed-of-light floor / time_ms (engine/gpu/sol.py)
    seed_key: str | None = None
    id: int | None = None


@dataclass
class Measurement(Record):
    TABLE: ClassVar[str] = "measurements"
    JSON_FIELDS: ClassVar[dict[str, Any]] = {"sizes": dict, "worst": None}

    split: str                       # train | heldout
    sizes: dict[str, int]
    category: str
    evaluation_id: int | None = None  # filled by add_evaluation
    max_rel_err: float | None = None
    worst: dict[str, Any] | None = None
    time_ms: float | None = None
    time_spread: float | None = None
    baseline_ms: float | None = None
    speedup: float | None = None
    tflops: float | None = None
    sol_fraction: float | None = None
    id: int | None = None


@dataclass
class Fix(Record):
    TABLE: ClassVar[str] = "fixes"

    failed_sample_id: int
    fixed_sample_id: int
    explanation: str
    explanation_source: str          # "written with the mutation", "model:NAME", "derived from diff"
    source: str
    created_at: str = ""
    seed_key: str | None = None
    id: int | None = None


@dataclass
class Label(Record):
    TABLE: ClassVar[str] = "labels"
    BOOL_FIELDS: ClassVar[tuple[str, ...]] = ("fixit_candidate",)

    sample_id: int
    author: str
    category: str | None = None      # a person's category, beside the automatic one
    note: str = ""
    fixit_candidate: bool = False
    created_at: str = ""
    id: int | None = None


RECORD_TYPES: tuple[type[Record], ...] = (Task, Model, Run, Sample, Evaluation, Measurement, Fix, Label)
