"""The assembly cache stays within its bound: least recently used entries go first, blobs are stored
once, and an entry whose blob was evicted is a miss, never a verdict without its cubin."""

from __future__ import annotations

import os
import time

from ptxbench.engine.cache import Cache


def _put(cache: Cache, i: int, size: int = 100_000) -> None:
    cache.put(f"{i:064x}", {"i": i}, {"cubin": bytes([i % 256]) * size + i.to_bytes(4, "little")})


def test_the_cache_never_grows_past_its_bound(tmp_path):
    cache = Cache(tmp_path, max_bytes=1_000_000)
    for i in range(60):
        _put(cache, i)
    assert cache.size() <= 1_000_000
    assert cache.evicted > 0
    assert cache.get(f"{59:064x}", blobs=("cubin",)) is not None      # the newest stays
    assert cache.get(f"{0:064x}", blobs=("cubin",)) is None           # the oldest went


def test_a_recently_used_entry_outlives_newer_ones(tmp_path):
    cache = Cache(tmp_path, max_bytes=1_000_000)
    for i in range(6):
        _put(cache, i)
    old = time.time() - 3600
    for _, _, path in cache.files():
        os.utime(path, (old, old))          # all of them an hour old ...
    assert cache.get(f"{0:064x}", blobs=("cubin",)) is not None      # ... but entry 0 is used now
    for i in range(6, 11):          # past the bound: five must go, and 1-5 are the least recently used
        _put(cache, i)
    assert cache.get(f"{0:064x}", blobs=("cubin",)) is not None
    assert cache.get(f"{1:064x}", blobs=("cubin",)) is None


def test_a_blob_shared_by_two_entries_is_stored_once(tmp_path):
    cache = Cache(tmp_path)
    cubin = b"\x7fELF" + b"x" * 50_000
    cache.put("a" * 64, {"stage": "assemble"}, {"cubin": cubin})
    cache.put("b" * 64, {"stage": "static"}, {"cubin": cubin, "ptx": b".version 8.0"})
    blobs = [p for _, _, p in cache.files() if p.suffix == ".blob"]
    assert len(blobs) == 2 and cache.size() < 2 * len(cubin)
    assert cache.get("b" * 64, blobs=("cubin", "ptx"))[1]["cubin"] == cubin


def test_an_entry_whose_blob_was_evicted_is_a_miss(tmp_path):
    cache = Cache(tmp_path)
    cache.put("c" * 64, {"has_cubin": True}, {"cubin": b"cubin bytes"})
    for _, _, path in cache.files():
        if path.suffix == ".blob":
            path.unlink()
    assert cache.get("c" * 64, blobs=("cubin",)) is None
    assert cache.stats()["misses"] == 1


def test_an_entry_larger_than_an_eighth_of_the_bound_is_not_kept(tmp_path):
    cache = Cache(tmp_path, max_bytes=800_000)
    cache.put("d" * 64, {}, {"cubin": b"x" * 200_000})
    assert cache.get("d" * 64) is None and not cache.files()


def test_hits_and_misses_are_counted(tmp_path):
    cache = Cache(tmp_path)
    _put(cache, 1)
    cache.get(f"{1:064x}", blobs=("cubin",))
    cache.get(f"{2:064x}")
    assert cache.stats()["hits"] == 1 and cache.stats()["misses"] == 1 and cache.stats()["hit_rate"] == 0.5
