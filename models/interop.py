"""Model output made elsewhere, read into import entries; models/importer.py is what writes them.

Formats (`ptxbench import FILE --format …`, docs/store.md "Importing"):

- `jsonl`: PTXBench's own import lines (docs/models.md), and the records of `ptxbench export
  samples` (schema `ptxbench.sample/1`, with their judgements), told apart line by line
  (models/interop_jsonl.py);
- `paper`: the paper's runs (zhang677/PTXBench), through the experiments CSV its own tools read
  (models/interop_paper.py);
- `kernelbench`: a KernelBench run folder (models/interop_kernelbench.py);
- `flashinfer`: a FlashInfer-Bench trace set, or one Solution JSON (models/interop_flashinfer.py).

A reader gives a `ReadResult`: the entries to store, what it skipped and why (a problem that is
not an error: a workload PTXBench has no task for, a Triton solution), and problems (a line that
is wrong: the import refuses the whole file for them unless it is told to skip bad lines). Every
file is read through `read_bytes`: relative to the import's folder and never outside it, never a
store or any SQLite file (db/files.py), and never more than its limit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.db.files import PathLike, database_reason
from ptxbench.db.records import Evaluation, Label, Measurement

MAX_FILE_BYTES = 4 << 20           # a kernel, a manifest, a solution
MAX_JSON_BYTES = 64 << 20          # a trajectory holds every turn with its prompts
MAX_FILES = 20_000                 # files a folder import looks at
MAX_METADATA_BYTES = 64 << 10      # kept fields of one line, as JSON
MAX_TOTAL_BYTES = 2 << 30          # everything one folder import reads
FORMATS = ("jsonl", "paper", "kernelbench", "flashinfer")


@dataclass
class Recorded:
    """A judgement that comes with the line (an export's), stored as it was."""

    evaluation: Evaluation
    measurements: list[Measurement]


@dataclass
class Entry:
    where: str                       # "line 3", "trajectories/exp_000.json turn 2": said in every message
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
    note: str | None = None          # appended to the sample's source
    created_at: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)    # fields kept beside the sample (its run's params)
    recorded: list[Recorded] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)
    judge: bool = True               # False: the line's judgements are what it carries (an export)
    unjudged: str | None = None      # why this sample cannot be judged: stored, said, never judged
    run_params: dict[str, Any] = field(default_factory=dict)  # a new run's params
    run_started_at: str = ""
    run_finished_at: str | None = None
    ref: str | None = None           # the line's own id where it came from (an export's sample id)
    parent_ref: str | None = None    # the id of the sample it follows, where it came from


@dataclass
class Skipped:
    where: str
    reason: str
    kind: str = "refused"            # refused | bad | stored | conflict | follows

    def to_dict(self) -> dict[str, str]:
        return {"where": self.where, "reason": self.reason, "kind": self.kind}


@dataclass
class ReadResult:
    format: str
    entries: list[Entry] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)     # bad lines: the file is refused unless they are skipped
    fatal: list[str] = field(default_factory=list)        # the source as a whole cannot be read: always refused
    notes: list[str] = field(default_factory=list)


@dataclass
class Options:
    stores: tuple[PathLike, ...] = ()          # the store being written: never read as an input
    model: str | None = None                   # the model's name where the format does not say it
    run: str | None = None                     # the run's name (default: from the file or folder)
    context: str | None = None                 # the context level where the format does not say it
    arch: str | None = None                    # sm_90a or sm_100a where the format does not say it
    task_map: dict[str, str] = field(default_factory=dict)   # a format's workload name → a task id
    budget: list[int] = field(default_factory=lambda: [MAX_TOTAL_BYTES])  # bytes the readers may still read


def as_dict(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one: fields of untrusted JSON read without raising."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def inside(base: Path, name: str) -> Path:
    """`name` resolved against `base`; refuses anything that lands outside it."""
    if not name or Path(name).is_absolute() or name.startswith("~"):
        raise ValueError(f"{name!r} must be a path relative to the JSONL file's folder")
    target = (base / name).resolve()
    if not target.is_relative_to(base.resolve()):
        raise ValueError(f"{name!r} points outside {base}")
    return target


def read_bytes(base: Path, name: str, stores: tuple[PathLike, ...] = (), limit: int = MAX_FILE_BYTES,
               budget: list[int] | None = None) -> bytes:
    """The bytes of `name` under `base`: inside it, not a store or an SQLite file, at most `limit`, and at most
    what is left of `budget` (the whole import's)."""
    path = inside(base, name)
    if not path.is_file():
        raise ValueError(f"{name!r}: no such file in {base}")
    reason = database_reason(path, stores=stores)
    if reason:
        raise ValueError(f"{name!r}: not read: {reason}")
    if budget is not None:
        limit = min(limit, budget[0])
    with path.open("rb") as fh:          # at most one byte past the limit: /dev/zero-like files end here
        data = fh.read(limit + 1)
    if len(data) > limit:
        if budget is not None and budget[0] == limit:
            raise ValueError(f"{name!r}: not read, the import has read its {MAX_TOTAL_BYTES} bytes")
        raise ValueError(f"{name!r} is over {limit} bytes")
    if budget is not None:
        budget[0] -= len(data)
    return data


def read_text(base: Path, name: str, stores: tuple[PathLike, ...] = (), limit: int = MAX_FILE_BYTES,
              budget: list[int] | None = None) -> str:
    try:
        return read_bytes(base, name, stores, limit, budget).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{name!r} is not UTF-8 text") from None


def read_json(base: Path, name: str, stores: tuple[PathLike, ...] = (), limit: int = MAX_JSON_BYTES,
              budget: list[int] | None = None) -> Any:
    text = read_text(base, name, stores, limit, budget)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name!r}: not JSON ({exc.msg}, line {exc.lineno})") from None
    except (RecursionError, ValueError) as exc:
        raise ValueError(f"{name!r}: not JSON a reader can take ({type(exc).__name__})") from None


def files_under(base: Path, folder: str, keep: Callable[[str], bool]) -> list[str]:
    """Files below `base/folder` (links not followed, at most MAX_FILES looked at) whose name `keep`
    accepts, as paths relative to `base`, in name order."""
    root = inside(base, folder) if folder not in ("", ".") else base.resolve()
    out: list[str] = []
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            seen += 1
            if seen > MAX_FILES:
                raise ValueError(f"{folder or base}: more than {MAX_FILES} files")
            if keep(name):
                out.append(os.path.relpath(os.path.join(dirpath, name), base.resolve()))
    return out


def kept_metadata(fields: dict[str, Any]) -> dict[str, Any]:
    """Fields a line carries beyond the format's own, kept as they are up to MAX_METADATA_BYTES."""
    if not fields:
        return {}
    text = json.dumps(fields, ensure_ascii=False, sort_keys=True, default=str)
    if len(text.encode("utf-8")) <= MAX_METADATA_BYTES:
        return dict(fields)
    return {"_not_kept": sorted(fields), "_why": f"over {MAX_METADATA_BYTES} bytes as JSON"}


def arch_of(text: str | None) -> str | None:
    """sm_90a / sm_100a from the names formats use for a machine (hopper, H100, NVIDIA_B200, …)."""
    if not text:
        return None
    t = text.lower().replace("nvidia", "").replace("_", " ").replace("-", " ").strip()
    if t in ("sm_90a", "sm 90a", "hopper") or t.startswith(("h100", "h200", "h800", "h20", "gh200")):
        return "sm_90a"
    if t in ("sm_100a", "sm 100a", "blackwell") or t.startswith(("b200", "b100", "gb200", "b300", "gb300")):
        return "sm_100a"
    return None


def detect(path: Path) -> str | None:
    """The format of an import source by its look (None: not one PTXBench reads)."""
    if path.is_dir():
        if (path / "solutions").is_dir() or (path / "traces").is_dir():
            return "flashinfer"
        try:
            names = [n for _, n in zip(range(MAX_FILES), os.listdir(path))]
        except OSError:
            return None
        if any(n.startswith("level_") and n.endswith("_kernel.py") for n in names) or "eval_results.json" in names:
            return "kernelbench"
        return None
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "paper"
    if suffix == ".json":
        return "flashinfer"
    return "jsonl"
