"""Extraction of a candidate from a model response or a file, including every bad-input case."""

import json
import os

import pytest

from ptxbench.engine.candidate import Candidate
from ptxbench.engine.categories import BY_STAGE
from ptxbench.engine.extract import MAX_RESPONSE_BYTES, extract, load_candidate_file
from ptxbench.engine.manifest import parse_manifest

PTX = """//
// Generated for a test
//
.version 8.4
.target sm_90a
.address_size 64

.visible .entry add(
    .param .u64 add_param_0
)
{
    ret;
}
"""
PTX2 = PTX.replace("add(", "add_v2(").replace("add_param", "add_v2_param")
CUDA = """#include <cuda.h>
extern "C" __global__ void __launch_bounds__(256) add(const float* x, float* y) {
    asm volatile("// inline");
    y[threadIdx.x] = x[threadIdx.x];
}
"""
HOST = """int main() {
    cuModuleLoad(&mod, "k.ptx");
    cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, args, 0);
}
"""
MANIFEST = {"launches": [{"entry": "add", "grid": ["ceil_div(N, 256)"], "block": [256]}]}


def fence(tag: str, body: str, ticks: str = "```") -> str:
    return f"{ticks}{tag}\n{body.rstrip()}\n{ticks}\n"


def ok(result, language: str) -> Candidate:
    assert result.ok and result.category == "ok", result.evidence
    assert result.candidate is not None and result.candidate.language == language
    return result.candidate


def failed(result, category: str) -> dict:
    assert not result.ok and result.category == category, (result.category, result.evidence)
    assert result.candidate is None and result.category in BY_STAGE["extract"]
    assert result.evidence["reason"]
    return result.evidence


def test_single_fenced_ptx_block():
    c = ok(extract("Here is the kernel.\n\n" + fence("ptx", PTX) + "\nIt copies."), "ptx")
    assert c.code == PTX and c.manifest is None and "block 1" in c.origin


@pytest.mark.parametrize("tag", ["cuda", "cu", "cpp", "c++", "c", "CUDA", ""])
def test_cuda_block_with_any_cuda_tag(tag):
    c = ok(extract(fence(tag, CUDA)), "cuda")
    assert "__global__" in c.code


@pytest.mark.parametrize("tag", ["", "asm", "text", "python"])
def test_untagged_or_mistagged_ptx_is_classified_by_content(tag):
    ok(extract(fence(tag, PTX)), "ptx")


def test_tilde_fences_and_longer_backtick_fences():
    ok(extract(fence("ptx", PTX, "~~~")), "ptx")
    body = "// a comment with ``` inside a longer fence\n" + PTX
    c = ok(extract(fence("ptx", body, "````")), "ptx")
    assert "```" in c.code


def test_whole_response_is_ptx_or_cuda():
    c = ok(extract(PTX), "ptx")
    assert c.origin == "response: whole text"
    ok(extract(CUDA), "cuda")
    r = extract("Sure! Below is the module.\n\n" + PTX)
    c = ok(r, "ptx")
    assert c.code.startswith("//") and "prose" in r.evidence["trimmed"]


def test_ptx_with_a_host_launcher_takes_the_device_code():
    r = extract(fence("ptx", PTX) + "To launch it:\n" + fence("cpp", HOST))
    ok(r, "ptx")
    assert any(b.get("note") == "host code that launches a kernel" for b in r.evidence["blocks"])


def test_cuda_source_and_its_ptx_take_the_ptx():
    r = extract(fence("cuda", CUDA) + "which compiles to\n" + fence("ptx", PTX))
    ok(r, "ptx")
    assert "PTX is judged" in r.evidence["note"]


def test_identical_duplicates_are_fine():
    ok(extract(fence("ptx", PTX) + "Again:\n" + fence("", PTX + "\n\n")), "ptx")


def test_several_different_kernels_are_ambiguous():
    ev = failed(extract(fence("ptx", PTX) + "or better:\n" + fence("ptx", PTX2)), "ambiguous_candidate")
    assert [c["entries"] for c in ev["candidates"]] == [["add"], ["add_v2"]]
    failed(extract(fence("cuda", CUDA) + fence("ptx", PTX2)), "ambiguous_candidate")
    failed(extract(fence("cuda", CUDA) + fence("cuda", CUDA.replace("add(", "add2("))), "ambiguous_candidate")


def test_manifest_block_is_attached():
    c = ok(extract(fence("ptx", PTX) + fence("json", json.dumps(MANIFEST))), "ptx")
    assert c.manifest == parse_manifest(MANIFEST)
    c = ok(extract(fence("ptx", PTX) + fence("manifest", json.dumps(MANIFEST))), "ptx")
    assert c.manifest is not None
    # Unfenced PTX with a fenced manifest.
    c = ok(extract(PTX + "\n" + fence("json", json.dumps(MANIFEST))), "ptx")
    assert c.manifest is not None and "```" not in c.code


def test_unrelated_json_is_not_a_manifest():
    c = ok(extract(fence("ptx", PTX) + "Example output:\n" + fence("json", '{"result": [1, 2]}')), "ptx")
    assert c.manifest is None


def test_manifest_that_does_not_parse_is_bad_manifest():
    ev = failed(extract(fence("ptx", PTX) + fence("json", '{"launches": [{"entry": "add",}]}')), "bad_manifest")
    assert "not valid JSON" in ev["reason"]
    ev = failed(extract(fence("ptx", PTX) + fence("json", '{"launches": [{"entry": "add", "blocks": [1]}]}')),
                "bad_manifest")
    assert "unknown field 'blocks'" in ev["reason"]


def test_two_different_manifests_are_ambiguous():
    other = {"launches": [{"entry": "add", "block": [128]}]}
    failed(extract(fence("ptx", PTX) + fence("json", json.dumps(MANIFEST)) + fence("json", json.dumps(other))),
           "ambiguous_candidate")


@pytest.mark.parametrize(
    "response, reason",
    [
        ("", "empty"),
        (b"", "empty"),
        ("   \n\t\n", "only whitespace"),
        ("I am sorry, I cannot write that kernel.", "no fenced code block"),
        (fence("python", "print('hello')"), "no fenced block"),
        (fence("ptx", "wgmma.fence.sync.aligned;"), "no fenced block"),
        (fence("cpp", HOST), "no fenced block"),
        (fence("json", json.dumps(MANIFEST)), "no fenced block"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)) * 8, "binary"),
        (bytes(range(1, 32)) * 100, "binary"),
        ("\x01\x02\x03\x04" * 1000 + PTX, "binary"),
    ],
)
def test_no_candidate_cases(response, reason):
    ev = failed(extract(response), "no_candidate")
    assert reason in ev["reason"]


def test_size_cap():
    big = "x" * (MAX_RESPONSE_BYTES + 1)
    ev = failed(extract(big), "no_candidate")
    assert str(MAX_RESPONSE_BYTES + 1) in ev["reason"] and ev["size_bytes"] == MAX_RESPONSE_BYTES + 1
    # Just under the cap is judged normally.
    ok(extract(fence("ptx", PTX) + "x" * (MAX_RESPONSE_BYTES - 1000)), "ptx")


def test_undecodable_bytes_are_replaced_and_reported():
    r = extract(fence("ptx", PTX).encode() + b"\nNotes: caf\xe9 \xff\xfe\n")
    ok(r, "ptx")
    assert "not valid UTF-8" in r.evidence["decode"]
    ev = failed(extract(b"\xff\xfe\xfd" * 2000), "no_candidate")
    assert "undecodable" in ev["binary"] or "binary" in ev["reason"]


def test_crlf_reasoning_and_unclosed_fences():
    ok(extract(fence("ptx", PTX).replace("\n", "\r\n")), "ptx")
    r = extract("<think>\n" + fence("ptx", PTX2) + "</think>\n" + fence("ptx", PTX))
    assert ok(r, "ptx").code == PTX and "reasoning_removed" in r.evidence
    r = extract("```ptx\n" + PTX)          # truncated: no closing fence
    ok(r, "ptx")
    assert "unclosed_fence" in r.evidence


def test_content_hash_depends_on_code_and_manifest_only():
    a = Candidate("ptx", PTX, None, "x")
    assert a.content_hash == Candidate("ptx", PTX, None, "y").content_hash
    assert a.content_hash != Candidate("cuda", PTX).content_hash
    assert a.content_hash != Candidate("ptx", PTX, parse_manifest(MANIFEST)).content_hash
    assert a.code_hash == Candidate("ptx", PTX, parse_manifest(MANIFEST)).code_hash
    assert len(a.content_hash) == 64


# -- files ---------------------------------------------------------------------

def test_load_ptx_and_cuda_files(tmp_path):
    (tmp_path / "k.ptx").write_text(PTX)
    c = ok(load_candidate_file(tmp_path / "k.ptx"), "ptx")
    assert c.code == PTX and c.origin.startswith("file:")
    (tmp_path / "k.cu").write_text(CUDA)
    r = load_candidate_file(tmp_path / "k.cu")
    assert ok(r, "cuda") and r.evidence["entries"] == ["add"]
    (tmp_path / "response.md").write_text("Answer:\n" + fence("ptx", PTX))
    assert ok(load_candidate_file(tmp_path / "response.md"), "ptx").code == PTX


def test_sidecar_and_explicit_manifests(tmp_path):
    (tmp_path / "k.ptx").write_text(PTX)
    (tmp_path / "manifest.json").write_text(json.dumps(MANIFEST))
    assert ok(load_candidate_file(tmp_path / "k.ptx"), "ptx").manifest == parse_manifest(MANIFEST)
    stem = {"launches": [{"entry": "add", "block": [64]}]}
    (tmp_path / "k.manifest.json").write_text(json.dumps(stem))
    assert ok(load_candidate_file(tmp_path / "k.ptx"), "ptx").manifest == parse_manifest(stem)
    explicit = tmp_path / "other.json"
    explicit.write_text(json.dumps({"launches": [{"entry": "add", "block": [32]}]}))
    assert ok(load_candidate_file(tmp_path / "k.ptx", explicit), "ptx").manifest.launches[0].block == (32,)
    explicit.write_text("{not json")
    ev = failed(load_candidate_file(tmp_path / "k.ptx", explicit), "bad_manifest")
    assert "other.json" in ev["reason"]


@pytest.mark.parametrize(
    "name, data, category",
    [
        ("empty.ptx", b"", "no_candidate"),
        ("blank.cu", b"\n\n  \n", "no_candidate"),
        ("junk.ptx", os.urandom(4096) + b"\x00", "no_candidate"),
        ("junk.txt", bytes(range(256)) * 16, "no_candidate"),
        ("latin1.ptx", PTX.encode() + b"// caf\xe9\n", "ok"),
        ("big.ptx", b"// filler\n" * (1 << 20), "no_candidate"),
        ("big.txt", b"a" * (10 << 20), "no_candidate"),
    ],
)
def test_bad_files_get_a_category(tmp_path, name, data, category):
    path = tmp_path / name
    path.write_bytes(data)
    result = load_candidate_file(path)
    assert result.category == category, result.evidence
    if name.startswith("big"):
        assert "4 MiB" in result.evidence["reason"]


def test_unreadable_path_raises_a_clear_oserror(tmp_path):
    with pytest.raises(OSError, match="cannot read .*missing.ptx"):
        load_candidate_file(tmp_path / "missing.ptx")
    with pytest.raises(OSError, match="cannot read"):
        load_candidate_file(tmp_path)


def test_an_unclosed_think_makes_the_rest_of_the_response_reasoning():
    r = extract(fence("ptx", PTX) + "<think>\nor maybe\n" + fence("ptx", PTX2))
    assert ok(r, "ptx").code == PTX
    assert "never closed" in r.evidence["reasoning_removed"]
    ev = failed(extract("Let me see.\n<think>\n" + fence("ptx", PTX)), "no_candidate")
    assert "never closed" in ev["reasoning_removed"]
    ev = failed(extract("<think>" + fence("ptx", PTX) + "</think>"), "no_candidate")
    assert "only reasoning" in ev["reason"]
