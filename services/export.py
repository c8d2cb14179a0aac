"""Export the store's samples and agent trajectories, every verdict field with them, under a versioned
schema (db/export.py: `ptxbench.sample/1`, `ptxbench.trajectory/1`).

JSON Lines always: one record a line, each carrying its `schema`, nested as the store holds it (a
sample's evaluations, each with its measurements, evidence, seeds in the evidence, engine version and
device). Parquet where pyarrow is installed (the `train` extra): one row a record, its scalar fields as
columns and its nested ones (`evaluations`, `labels`, `steps`, `run`, …) as JSON text, so a reader
needs no nested schema. The file is written next to its target and renamed over it at the end
(db/files.py), never over a store or any SQLite file; the store is read in one snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptxbench.db.export import SAMPLE_SCHEMA, TRAJECTORY_SCHEMA, sample_records, trajectory_records
from ptxbench.db.files import atomic_output, check_output
from ptxbench.db.reader import StoreReader
from ptxbench.services.errors import UsageError

KINDS = {"samples": SAMPLE_SCHEMA, "trajectories": TRAJECTORY_SCHEMA}
FORMATS = ("jsonl", "parquet")


class ExportFailed(UsageError):
    pass


@dataclass
class Exported:
    path: Path
    kind: str
    schema: str
    format: str
    records: int


def _records(kind: str, texts: bool) -> Callable[[Any], Iterator[dict[str, Any]]]:
    if kind == "samples":
        return lambda conn: sample_records(conn, texts=texts)
    return trajectory_records


def export(store: Path, kind: str, out: Path, *, fmt: str | None = None, texts: bool = False) -> Exported:
    """Write every record of `kind` (samples | trajectories) in `store` to `out`, as `fmt` (jsonl | parquet;
    by default from the file's suffix, else jsonl)."""
    if kind not in KINDS:
        raise ExportFailed(f"nothing to export called {kind!r} (known: {', '.join(KINDS)})")
    fmt = fmt or ("parquet" if out.suffix == ".parquet" else "jsonl")
    if fmt not in FORMATS:
        raise ExportFailed(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    if not store.is_file():
        raise ExportFailed(f"no store at {store}")
    check_output(out, stores=[store])
    reader = StoreReader(store)
    try:
        if fmt == "jsonl":
            count = reader.read(lambda conn: _jsonl(_records(kind, texts)(conn), out, store))
        else:
            count = reader.read(lambda conn: _parquet(_records(kind, texts)(conn), out, store))
    finally:
        reader.close()
    return Exported(Path(out), kind, KINDS[kind], fmt, count)


def _jsonl(records: Iterator[dict[str, Any]], out: Path, store: Path) -> int:
    n = 0
    with atomic_output(out, stores=[store]) as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False, sort_keys=True, default=str))
            fh.write("\n")
            n += 1
    return n


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (json.dumps(v, ensure_ascii=False, sort_keys=True, default=str) if isinstance(v, (dict, list)) else v)
        for k, v in record.items()
    }


def _parquet(records: Iterator[dict[str, Any]], out: Path, store: Path) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportFailed("Parquet needs pyarrow (pip install 'ptxbench[train]'); JSON Lines needs nothing") from None
    rows = [_flat(r) for r in records]
    table = pa.Table.from_pylist(rows)
    with atomic_output(out, stores=[store], binary=True) as fh:
        pq.write_table(table, fh)
    return len(rows)
