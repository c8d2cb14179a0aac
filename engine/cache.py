"""A content-addressed cache of assemble (and disassemble) results.

An entry is a JSON report plus named binary blobs (the cubin), keyed by the
sha256 of everything that decides the result: code, language, arch, tool
versions, flags and the engine version. Files are written to a temporary
name and moved into place with os.replace, blobs first and the report last,
so a reader that finds the report finds a complete entry; several processes
may fill the same cache at once (the last writer of an identical entry wins).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ptxbench.engine import ENGINE_VERSION

ENV_DIR = "PTXBENCH_CACHE"
_REPORT = "report.json"


def default_dir() -> Path:
    override = os.environ.get(ENV_DIR)
    if override:
        return Path(override)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("ptxbench"))


def content_key(*parts: str | bytes, **fields: Any) -> str:
    """sha256 over the parts and the (sorted) fields, each length-prefixed so
    that no two different inputs can concatenate to the same bytes."""
    h = hashlib.sha256()
    h.update(f"ptxbench-engine {ENGINE_VERSION}\0".encode())
    for part in parts:
        data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    blob = json.dumps(fields, sort_keys=True, default=str).encode()
    h.update(len(blob).to_bytes(8, "little"))
    h.update(blob)
    return h.hexdigest()


def source_fingerprint(*paths: str | Path) -> str:
    """A short hash of source files whose logic decides a cached result."""
    h = hashlib.sha256()
    for p in paths:
        try:
            h.update(Path(p).read_bytes())
        except OSError:
            h.update(str(p).encode())
    return h.hexdigest()[:16]


class Cache:
    """A directory of entries: <dir>/<key[:2]>/<key>.<name>."""

    def __init__(self, directory: str | Path | None = None):
        self.dir = Path(directory) if directory is not None else default_dir()

    def _path(self, key: str, name: str) -> Path:
        return self.dir / key[:2] / f"{key}.{name}"

    def get(self, key: str, blobs: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict[str, bytes]] | None:
        """The report and those of the named blobs that exist, or None on a miss
        (or a damaged report). Which blobs an entry must have is the caller's
        business: its report says so."""
        try:
            report = json.loads(self._path(key, _REPORT).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        data: dict[str, bytes] = {}
        for name in blobs:
            try:
                data[name] = self._path(key, name).read_bytes()
            except OSError:
                pass
        if not isinstance(report, dict):
            return None
        return report, data

    def put(self, key: str, report: dict[str, Any], blobs: dict[str, bytes] | None = None) -> None:
        """Store an entry. A cache that cannot be written (read-only, disk full)
        costs only speed, never a verdict, so errors are swallowed."""
        try:
            folder = self.dir / key[:2]
            folder.mkdir(parents=True, exist_ok=True)
            for name, data in (blobs or {}).items():
                self._write(folder, self._path(key, name), data)
            self._write(folder, self._path(key, _REPORT), json.dumps(report).encode("utf-8"))
        except OSError:
            pass

    @staticmethod
    def _write(folder: Path, final: Path, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=final.suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, final)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def clear(self) -> int:
        """Remove every entry; returns how many files were removed."""
        removed = 0
        if not self.dir.is_dir():
            return 0
        for path in self.dir.glob("??/*"):
            try:
                path.unlink()
                removed += 1
            except OSError:
                pass
        return removed


class NoCache(Cache):
    """For callers that want every stage to run (benchmarks, tests of the tools)."""

    def __init__(self) -> None:
        super().__init__(Path(os.devnull))

    def get(self, key: str, blobs: tuple[str, ...] = ()) -> None:
        return None

    def put(self, key: str, report: dict[str, Any], blobs: dict[str, bytes] | None = None) -> None:
        return None
