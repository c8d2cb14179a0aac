"""A content-addressed cache of assemble (and disassemble, and whole static) results, bounded in size.

An entry is a JSON report plus named binary blobs (the cubin, the PTX, the SASS), keyed by the
sha256 of everything that decides the result: code, language, arch, tool versions, flags, the
sandbox's limits and the engine version. Blobs are stored once by the sha256 of their bytes, so
the cubin that the assembly entry and the static verdict's entry both name is one file. Files are
written to a temporary name and moved into place with os.replace, blobs first and the report
last, so a reader that finds a report finds its blobs, unless eviction took one since: then the
entry is a miss. Several processes may fill the same cache at once.

The cache is bounded (PTXBENCH_CACHE_MAX_MB, 2 GiB by default): a small ledger file keeps an
estimate of its size, and when that passes the bound the least recently used files go until it
is under 80 % again. One entry larger than an eighth of the bound is not kept at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from ptxbench.engine import ENGINE_VERSION

ENV_DIR = "PTXBENCH_CACHE"
ENV_MAX_MB = "PTXBENCH_CACHE_MAX_MB"
DEFAULT_MAX_BYTES = 2 << 30
_REPORT = "report.json"
_BLOB = "blob"
_LEDGER = "usage"
_BLOBS_FIELD = "_blobs"
_LOW_WATER = 0.8


def default_dir() -> Path:
    override = os.environ.get(ENV_DIR)
    if override:
        return Path(override)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("ptxbench"))


def default_max_bytes() -> int:
    try:
        return max(int(float(os.environ.get(ENV_MAX_MB, "")) * (1 << 20)), 1 << 20)
    except ValueError:
        return DEFAULT_MAX_BYTES


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
    """A directory of entries: <dir>/<key[:2]>/<key>.report.json, and blobs <dir>/<sha[:2]>/<sha>.blob."""

    def __init__(self, directory: str | Path | None = None, max_bytes: int | None = None):
        self.dir = Path(directory) if directory is not None else default_dir()
        self.max_bytes = max_bytes if max_bytes is not None else default_max_bytes()
        self.hits = 0
        self.misses = 0
        self.evicted = 0

    def _report_path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.{_REPORT}"

    def _blob_path(self, digest: str) -> Path:
        return self.dir / digest[:2] / f"{digest}.{_BLOB}"

    def get(self, key: str, blobs: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict[str, bytes]] | None:
        """The report and those of the named blobs the entry has, or None on a miss (or a damaged
        or partly evicted entry). Which blobs an entry must have is the caller's business: its
        report says so."""
        path = self._report_path(key)
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.misses += 1
            return None
        if not isinstance(report, dict):
            self.misses += 1
            return None
        digests = report.pop(_BLOBS_FIELD, {})
        data: dict[str, bytes] = {}
        touched = [path]
        for name in blobs:
            digest = digests.get(name) if isinstance(digests, dict) else None
            if digest is None:
                continue
            blob_path = self._blob_path(digest)
            try:
                data[name] = blob_path.read_bytes()
            except OSError:
                self.misses += 1
                return None      # evicted since the report was written
            touched.append(blob_path)
        self.hits += 1
        self._touch(touched)
        return report, data

    @staticmethod
    def _touch(paths: list[Path]) -> None:
        """Mark as recently used (eviction goes by modification time)."""
        now = time.time()
        for p in paths:
            try:
                os.utime(p, (now, now))
            except OSError:
                pass

    def put(self, key: str, report: dict[str, Any], blobs: dict[str, bytes] | None = None) -> None:
        """Store an entry. A cache that cannot be written (read-only, disk full) costs only speed,
        never a verdict, so errors are swallowed. An entry over an eighth of the bound is not kept."""
        blobs = blobs or {}
        size = sum(len(b) for b in blobs.values())
        if size > self.max_bytes // 8:
            return
        try:
            text = json.dumps({**report, _BLOBS_FIELD: {}}).encode("utf-8")
        except (TypeError, ValueError):
            return
        if size + len(text) > self.max_bytes // 8:        # a report can carry the PTX inline
            return
        try:
            digests: dict[str, str] = {}
            written = 0
            for name, data in blobs.items():
                digest = hashlib.sha256(data).hexdigest()
                digests[name] = digest
                path = self._blob_path(digest)
                if path.exists():
                    self._touch([path])
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                self._write(path, data)
                written += len(data)
            text = json.dumps({**report, _BLOBS_FIELD: digests}).encode("utf-8")
            path = self._report_path(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._write(path, text)
            self._account(written + len(text))
        except OSError:
            pass

    @staticmethod
    def _write(final: Path, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=".tmp-", suffix=final.suffix)
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

    # -- the bound ---------------------------------------------------------------------------------

    def _account(self, added: int) -> None:
        """Add to the ledger's estimate; past the bound, measure and evict. Writers racing on the
        ledger can lose an addition: the estimate runs low, and the next pruning measures anew."""
        ledger = self.dir / _LEDGER
        try:
            used = int(ledger.read_text() or 0)
        except (OSError, ValueError):
            used = 0
        used += added
        if used > self.max_bytes:
            used = self.prune()
        try:
            self._write(ledger, str(used).encode())
        except OSError:
            pass

    def files(self) -> list[tuple[float, int, Path]]:
        """Every entry file: (last used, bytes, path)."""
        out: list[tuple[float, int, Path]] = []
        if not self.dir.is_dir():
            return out
        for sub in os.scandir(self.dir):
            if not (sub.is_dir(follow_symlinks=False) and len(sub.name) == 2):
                continue
            for f in os.scandir(sub.path):
                if f.name.startswith(".tmp-"):
                    continue
                try:
                    st = f.stat(follow_symlinks=False)
                except OSError:
                    continue
                out.append((st.st_mtime, st.st_size, Path(f.path)))
        return out

    def size(self) -> int:
        return sum(size for _, size, _ in self.files())

    def prune(self, target: int | None = None) -> int:
        """Remove the least recently used files until the cache holds at most `target` bytes (80 %
        of the bound by default); returns the bytes left."""
        target = int(self.max_bytes * _LOW_WATER) if target is None else target
        entries = sorted(self.files())
        used = sum(size for _, size, _ in entries)
        for _, size, path in entries:
            if used <= target:
                break
            try:
                path.unlink()
                used -= size
                self.evicted += 1
            except OSError:
                pass
        return used

    def stats(self) -> dict[str, Any]:
        looked = self.hits + self.misses
        return {"hits": self.hits, "misses": self.misses, "hit_rate": self.hits / looked if looked else None,
                "evicted": self.evicted, "max_bytes": self.max_bytes}

    def clear(self) -> int:
        """Remove every entry; returns how many files were removed."""
        removed = 0
        for _, _, path in self.files():
            try:
                path.unlink()
                removed += 1
            except OSError:
                pass
        try:
            (self.dir / _LEDGER).unlink()
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
