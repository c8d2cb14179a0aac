"""Fixes in the engine and the store found by the hostile corpus, each shown by a small direct test."""

from __future__ import annotations

import sys
from pathlib import Path

from ptxbench.engine.extract import load_candidate_file
from ptxbench.engine.static import judge_static

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
CONTROL = (HERE / "gpu" / "control_ok.ptx").read_text()


def test_a_ptx_file_with_cr_line_endings_is_read_like_any_other(tmp_path):
    """The file loader turned CRLF into LF but left lone CRs, so ptxas saw one long line and said
    `Missing .version directive` (bad_header) for a correct kernel; a response with the same text
    was normalised."""
    path = tmp_path / "mac.ptx"
    path.write_bytes(CONTROL.replace("\n", "\r").encode())
    loaded = load_candidate_file(path)
    assert loaded.ok and loaded.candidate is not None
    assert "\r" not in loaded.candidate.code
    assert loaded.evidence.get("entries") == ["vector_add"]
    assert judge_static(path, "vector_add_smoke", use_cache=False).category == "ok"


def test_address_size_32_is_a_header_problem(tmp_path):
    """ptxas 13 answers `.address_size 32` with "32-Bit ABI (--machine 32 or 32-Bit addressing) is
    not supported on sm_90 or higher architectures", which fell through to assemble_other."""
    path = tmp_path / "k32.ptx"
    path.write_text(CONTROL.replace(".address_size 64", ".address_size 32"))
    verdict = judge_static(path, "vector_add_smoke", use_cache=False)
    assert verdict.category == "bad_header", verdict.evidence
    assert "32-Bit" in verdict.evidence


KERNEL_CU = """
extern "C" __global__ void vector_add(const float* x, const float* y, float* z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = x[i] + y[i];
}
"""


def test_cuda_cannot_include_files_of_the_judging_machine():
    """nvcc read any file a candidate named (its lines came back in the stored log) and would read
    /dev/zero until memory ran out. Such includes are refused before nvcc runs; CUDA's own
    headers still work."""
    from ptxbench.engine.assemble import assemble
    from ptxbench.engine.cuda_build import directive_problem

    passwd = Path("/etc/passwd").read_text().splitlines()[0]
    for head in ('#include "/etc/passwd"', "#include </dev/zero>", '#include "../../../../etc/passwd"',
                 '#define P "/etc/passwd"\n#include P', '/* a\n   b */ #include "/etc/passwd"',
                 '#inc\\\nlude "/etc/passwd"', '%:include "/etc/passwd"'):
        result = assemble(head + "\n" + KERNEL_CU, "cuda", "sm_90a")
        assert result.category == "forbidden_directive", head
        assert "nvcc" not in result.seconds, f"nvcc ran on {head!r}"
        assert passwd not in result.log + result.evidence
        assert result.evidence_line is not None
    assert directive_problem('#include <cuda_bf16.h>\n#include "cuda/barrier"\n#include <cstdint>\n') is None
    ok = assemble("#include <cuda_bf16.h>\n" + KERNEL_CU, "cuda", "sm_90a")
    assert ok.category == "ok", ok.evidence


def test_a_search_of_only_quotes_or_stars_finds_nothing_instead_of_failing(tmp_path):
    """The explorer's search turned `""` or `**` into an empty FTS5 MATCH, which SQLite refuses
    ("fts5: syntax error"): the samples view showed an error and no page."""
    from hostile_store import build_store

    from ptxbench.db import browse

    store = tmp_path / "store.sqlite"
    build_store(store, 4)
    conn = browse.connect(store, cached=False)
    try:
        for text in ('""', "**", '"" **', '"'):
            flt = browse.SampleFilter(text=text)
            assert browse.sample_page(conn, flt).rows == []
            assert browse.sample_count(conn, flt) == 0
            assert browse.sample_ids(conn, flt) == []
        assert browse.sample_count(conn, browse.SampleFilter(text="wgmma")) == 0
        assert browse.sample_count(conn, browse.SampleFilter(text="add.rn.f32")) == 3
    finally:
        conn.close()


def test_a_cached_input_set_written_into_after_it_was_drawn_is_drawn_again():
    """The worker's reference cache keeps every size's inputs and references in device memory a kernel
    can write, and a job fingerprinted only the sizes it judged: a candidate that wrote into another
    size's entry, or one a later candidate would use, left that candidate judged against what it
    wrote. Every entry is now sealed with its fingerprint (in host memory) when drawn and checked when
    handed out."""
    import pytest

    torch = pytest.importorskip("torch")
    from ptxbench.engine.gpu.datacache import DataCache
    from ptxbench.tasks.spec import get_task

    task = get_task("vector_add_smoke")
    cache = DataCache(torch.device("cpu"), 1 << 30)
    sizes = {"N": 4096}
    first = cache.get(task, sizes, 7)
    want_x, want_z = first.inputs["X"].clone(), first.reference["Z"].clone()
    assert cache.get(task, sizes, 7) is first and cache.hits == 1 and cache.corrupted == 0

    # A kernel of an earlier job swaps two elements of the reference (a sum would not see it) and
    # zeroes one input element.
    first.reference["Z"][[3, 9]] = first.reference["Z"][[9, 3]].clone()
    first.inputs["X"][100] = 0
    again = cache.get(task, sizes, 7)
    assert again is not first and cache.corrupted == 1
    assert torch.equal(again.inputs["X"], want_x) and torch.equal(again.reference["Z"], want_z)
    assert cache.get(task, sizes, 7) is again and cache.corrupted == 1
