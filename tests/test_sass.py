"""The batch disassembler gives cuobjdump's instructions, line for line, with one nvdisasm run for
a whole batch."""

from __future__ import annotations

import hashlib
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ptxbench.engine import sass as sass_mod
from ptxbench.engine.assemble import assemble
from ptxbench.engine.cache import Cache
from ptxbench.engine.sass import disassemble, disassemble_many, sass_census
from ptxbench.engine.toolchain import find_tool, run_tool

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = [(f"tests/data/ptx/{name}", arch) for name, arch in (
    ("triton_gemm_sm90a.ptx", "sm_90a"), ("triton_gemm_sm100a.ptx", "sm_100a"), ("families_sm90a.ptx", "sm_90a"),
    ("families_sm100a.ptx", "sm_100a"), ("two_entries_sm90a.ptx", "sm_90a"), ("wgmma_serialized.ptx", "sm_90a"))]
FIXTURES += [(str(p.relative_to(ROOT)), "sm_100a" if p.parent.name.endswith("sm100a") else "sm_90a")
             for p in sorted((ROOT / "tasks" / "solutions").glob("*/kernel.ptx"))]
# The GPU test kernels and the hostile corpus's GPU kernels: loops, traps, spins, odd control flow.
FIXTURES += [(str(p.relative_to(ROOT)), "sm_90a") for folder in ("tests/data/gpu", "tests/hostile/gpu")
             for p in sorted((ROOT / folder).glob("*.ptx"))]
_LINE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


@pytest.fixture(scope="module")
def cubins(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("asm"))
    out = []
    for path, arch in FIXTURES:
        result = assemble((ROOT / path).read_text(), "ptx", arch, cache=cache)
        out.append(result.cubin)
    return out


def _instructions(listing: str) -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    current = None
    for line in listing.splitlines():
        if m := re.match(r"^\s*Function\s*:\s*(\S+)", line):
            current = out.setdefault(m.group(1), [])
        elif current is not None and (m := _LINE.match(line)):
            current.append((int(m.group(1), 16), m.group(2)))
    return out


def _cuobjdump(cubin: bytes, tmp_path: Path) -> str:
    path = tmp_path / f"{hashlib.sha256(cubin).hexdigest()[:16]}.cubin"
    path.write_bytes(cubin)
    run = run_tool([str(find_tool("cuobjdump")), "-sass", path.name], timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.output
    return run.stdout


def test_one_batch_listing_matches_cuobjdump_line_for_line(cubins, tmp_path):
    # Every fixture in one batch, so that most functions sit far from the start of the code laid
    # end to end: addresses and branch targets must come back relative to each function.
    made = [(f, c) for f, c in zip(FIXTURES, cubins) if c is not None]
    assert len(made) > 50
    listings = disassemble_many([c for _, c in made])
    with ThreadPoolExecutor(2) as pool:       # cuobjdump starts nvdisasm once per cubin: 0.4 s each
        references = list(pool.map(lambda c: _cuobjdump(c, tmp_path), [c for _, c in made]))
    for ((path, _), _cubin), listing, reference in zip(made, listings, references):
        assert _instructions(listing) == _instructions(reference), path
        assert sass_census(listing) == sass_census(reference), path


def test_a_batch_is_one_nvdisasm_run_per_arch(cubins, monkeypatch, tmp_path):
    runs = []

    def counting(argv, **kwargs):
        runs.append(argv)
        return run_tool(argv, **kwargs)

    monkeypatch.setattr(sass_mod, "run_tool", counting)
    cache = Cache(tmp_path)
    cubins = [c for c in cubins if c is not None]
    together = disassemble_many(cubins, cache=cache)
    assert sorted(argv[2] for argv in runs) == ["SM100a", "SM90a"]
    runs.clear()
    assert disassemble_many(cubins, cache=cache) == together and runs == []     # all from the cache
    assert disassemble(cubins[2]) == together[2]                                 # alone, the same text

