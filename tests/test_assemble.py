"""Stage `assemble` on real ptxas/nvcc output: every category, resources, warnings, bad input, the cache."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from ptxbench.engine.assemble import MAX_CODE_BYTES, PTXAS_ARCHES, assemble, ptx_header
from ptxbench.engine.cache import Cache, content_key
from ptxbench.engine.categories import BY_STAGE
from ptxbench.engine.ptxas_messages import classify, parse_nvcc, parse_ptxas, parse_resources, verdict
from ptxbench.engine.toolchain import find_tool, run_tool

DATA = Path(__file__).parent / "data" / "ptx"
ASSEMBLE = DATA / "assemble"


@pytest.fixture(scope="session")
def cache(tmp_path_factory) -> Cache:
    # One cache for the whole session (the base temp folder is shared by every module).
    return Cache(tmp_path_factory.getbasetemp() / "ptxbench-cache")


def _expected(path: Path) -> str:
    stem = path.stem
    if stem.startswith("ok_"):
        return "ok"
    return max((c for c in BY_STAGE["assemble"] if stem.startswith(c)), key=len)


def _arch(path: Path) -> str:
    return "sm_100a" if path.stem.endswith("on_sm100a") else "sm_90a"


CASES = sorted(p for p in ASSEMBLE.iterdir() if p.suffix in (".ptx", ".cu"))


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
def test_each_fixture_gets_its_category(path, cache):
    language = "cuda" if path.suffix == ".cu" else "ptx"
    result = assemble(path.read_text(), language, _arch(path), cache=cache)
    assert result.category == _expected(path), result.log
    if result.ok:
        assert result.cubin and result.cubin[:4] == b"\x7fELF"
    else:
        assert result.cubin is None
        assert result.evidence


def test_every_assemble_category_has_a_fixture():
    covered = {_expected(p) for p in CASES} - {"ok"}
    assert covered == set(BY_STAGE["assemble"])


def test_evidence_points_at_the_line(cache):
    result = assemble((ASSEMBLE / "syntax.ptx").read_text(), "ptx", "sm_90a", cache=cache)
    assert result.evidence_line == 8
    assert result.evidence_source == "mov.b32 \t%r1 %r2;"
    assert "Parsing error" in result.evidence


def test_priority_not_first_line(cache):
    # ptxas prints "Arguments mismatch" first and "Unknown symbol" second for one line.
    result = assemble((ASSEMBLE / "undefined_symbol.ptx").read_text(), "ptx", "sm_90a", cache=cache)
    assert [m.category for m in result.errors] == ["operand_mismatch", "undefined_symbol"]
    assert result.category == "undefined_symbol"
    assert result.evidence == "Unknown symbol '%r99'"


def _ptxas_output(ptx: str, arch: str, tmp_path: Path) -> str:
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    run = run_tool([str(find_tool("ptxas")), f"-arch={arch}", src.name, "-o", "k.cubin"], timeout=60, cwd=tmp_path)
    assert run.returncode != 0
    return run.output


@pytest.mark.parametrize(
    "fixture, arch, category, text",
    [
        ("ok_add.ptx", "sm_100a", "target_mismatch", "cannot be compiled to future architecture"),
        ("target_mismatch_sm100a.ptx", "sm_90a", "target_mismatch", "SM version specified by .target is higher"),
        ("ptx_version_newer.ptx", "sm_90a", "ptx_version", "Unsupported .version 9.6"),
    ],
)
def test_ptxas_own_messages_for_header_problems(fixture, arch, category, text, tmp_path):
    # assemble() catches these from the header before running ptxas; the
    # classifier must still know ptxas's own words for them.
    output = _ptxas_output((ASSEMBLE / fixture).read_text(), arch, tmp_path)
    cat, first = verdict(parse_ptxas(output))
    assert cat == category and first is not None and text in first.text


def test_header_checks_say_both_sides(cache):
    sm100 = assemble((ASSEMBLE / "target_mismatch_sm100a.ptx").read_text(), "ptx", "sm_90a", cache=cache)
    assert sm100.category == "target_mismatch"
    assert "sm_100a" in sm100.evidence and "sm_90a" in sm100.evidence
    assert sm100.evidence_line == 2
    newer = assemble((ASSEMBLE / "ptx_version_newer.ptx").read_text(), "ptx", "sm_90a", cache=cache)
    assert newer.category == "ptx_version"
    assert "9.6" in newer.evidence and "9.5" in newer.evidence
    assert newer.evidence_source == ".version 9.6"


def test_current_triton_output_assembles_with_a_driver_note(cache):
    # Triton 3.9 emits .version 9.4: ptxas 13.5 reads it; the GPU machine's driver (CUDA 13.0)
    # runs the cubin only through minor-version compatibility, which the verdict says.
    v94 = assemble((DATA / "triton_gemm_sm90a_v94.ptx").read_text(), "ptx", "sm_90a", cache=cache)
    assert v94.category == "ok", v94.evidence
    assert v94.cubin
    assert len(v94.notes) == 1 and "9.4" in v94.notes[0] and "minor-version compatibility" in v94.notes[0]
    old = assemble((DATA / "triton_gemm_sm90a.ptx").read_text(), "ptx", "sm_90a", cache=cache)
    assert old.ok and old.notes == []


def test_an_arch_newer_than_the_driver_is_noted(cache):
    ptx = ".version 9.5\n.target sm_107a\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n"
    result = assemble(ptx, "ptx", "sm_107a", cache=cache)
    assert result.ok, result.evidence
    assert any("sm_107a" in n and "cannot load" in n for n in result.notes)


def test_both_ptx_version_and_arch_messages(tmp_path):
    ptx = ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{\n\ttcgen05.fence::before_thread_sync;\n\tret;\n}\n"
    messages = parse_ptxas(_ptxas_output(ptx, "sm_90a", tmp_path))
    assert {m.category for m in messages if m.is_error} == {"ptx_version", "arch_unsupported"}
    assert verdict(messages)[0] == "ptx_version"


def test_unknown_text_is_assemble_other():
    assert classify("Illegal call target, device function expected") == "assemble_other"
    assert classify("No initial value is allowed for 'x' in this state space") == "assemble_other"


def test_resources_from_v(cache):
    ok = assemble((ASSEMBLE / "ok_add.ptx").read_text(), "ptx", "sm_90a", cache=cache)
    add = ok.resources["add"]
    assert add.registers and add.registers > 0 and add.barriers == 0
    big = assemble((ASSEMBLE / "resource_limit_shared.ptx").read_text(), "ptx", "sm_90a", cache=cache)
    assert big.resources["k"].shared_bytes == 300000
    assert "0x38c00 max" in big.evidence


def test_spills_are_reported(cache):
    result = assemble((DATA / "spill.cu").read_text(), "cuda", "sm_90a", cache=cache)
    assert result.ok
    spill = result.resources["spill"]
    assert spill.spill_store_bytes > 0 and spill.spill_load_bytes > 0 and spill.stack_frame_bytes > 0
    assert any("spills registers" in w.text for w in result.warnings)


def test_resource_parser_reads_non_entry_functions():
    text = (
        "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
        "ptxas info    : Function properties for k\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 30 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]\n"
        "ptxas info    : Function properties for _Z6helperi\n"
        "    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    )
    res = parse_resources(text)
    assert res["k"].registers == 30 and res["k"].shared_bytes == 1024
    assert res["k"].constant_bytes == {"cmem[0]": 380}
    assert res["_Z6helperi"].stack_frame_bytes == 16 and res["_Z6helperi"].registers is None


@pytest.mark.parametrize(
    "fixture, codes",
    [("setmaxnreg_ignored.ptx", {"C7508"}), ("wgmma_serialized.ptx", {"C7511"})],
)
def test_performance_notes_are_warnings(fixture, codes, cache):
    result = assemble((DATA / fixture).read_text(), "ptx", "sm_90a", cache=cache)
    assert result.ok
    assert codes <= {w.code for w in result.warnings}


def test_cuda_goes_through_nvcc(cache):
    result = assemble((DATA / "gemm_sm90a.cu").read_text(), "cuda", "sm_90a", cache=cache)
    assert result.ok, result.log
    # nvcc and ptxas are one release (13.5): nvcc's .version 9.5 is what that ptxas reads.
    assert ptx_header(result.ptx) == ((9, 5), "sm_90a")
    assert result.tool_versions["nvcc"].startswith("13.5.")
    assert result.tool_versions["nvcc"] == result.tool_versions["ptxas"]
    assert result.resources["gemm"].registers


def test_cuda_errors_point_at_the_source(cache):
    result = assemble((ASSEMBLE / "cuda_compile_error.cu").read_text(), "cuda", "sm_90a", cache=cache)
    assert result.category == "cuda_compile_error"
    assert result.evidence == 'identifier "undefined_thing" is undefined'
    assert result.evidence_line == 2
    assert "undefined_thing" in result.evidence_source
    assert len(result.errors) == 2


def test_nvcc_message_forms():
    out = (
        'k.cu(2): error: identifier "x" is undefined\n'
        'k.cu(1): warning #177-D: variable "u" was declared but never referenced\n'
        "k.cu:1:10: fatal error: cute/tensor.hpp: No such file or directory\n"
        "nvcc fatal   : Unsupported gpu architecture 'compute_95a'\n"
    )
    msgs = parse_nvcc(out)
    assert [(m.severity, m.line) for m in msgs] == [("error", 2), ("warning", 1), ("fatal", 1), ("fatal", None)]
    assert msgs[1].code == "177-D"
    assert all(m.category == "cuda_compile_error" for m in msgs if m.is_error)


@pytest.mark.parametrize(
    "code, language, category",
    [
        ("", "ptx", "bad_header"),
        ("   \n\t\n", "ptx", "bad_header"),
        ("", "cuda", "cuda_compile_error"),
        (b"\xff\xfe\x00junk", "ptx", "syntax"),
        (b".version 8.5\n.target sm_90a\n\xc3\x28 broken", "ptx", "syntax"),
        (".version 8.5\n.target sm_90a\n\0\0\0", "ptx", "syntax"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00", "cuda", "cuda_compile_error"),
        ("\ud800 lone surrogate", "ptx", "syntax"),
    ],
)
def test_bad_input_is_a_category(code, language, category):
    result = assemble(code, language, "sm_90a")
    assert result.category == category
    assert result.evidence


def test_oversized_input():
    result = assemble("// padding\n" * (MAX_CODE_BYTES // 11 + 10), "ptx", "sm_90a")
    assert result.category == "assemble_other"
    assert str(MAX_CODE_BYTES) in result.evidence


def test_deadline_is_assemble_other_and_not_cached(tmp_path):
    store = Cache(tmp_path / "cache")
    ptx = (DATA / "triton_gemm_sm90a.ptx").read_text()
    result = assemble(ptx, "ptx", "sm_90a", cache=store, timeout=0.001)
    assert result.category == "assemble_other" and result.timed_out
    assert "did not finish within" in result.evidence
    assert not list(store.dir.glob("??/*"))


def test_unknown_arch_or_language_is_the_callers_mistake():
    with pytest.raises(ValueError):
        assemble("x", "ptx", "sm_70")
    with pytest.raises(ValueError):
        assemble("x", "fortran", "sm_90a")
    assert "sm_90a" in PTXAS_ARCHES and "sm_100a" in PTXAS_ARCHES


def test_cache_hit_returns_the_same_result(tmp_path):
    store = Cache(tmp_path / "cache")
    ptx = (ASSEMBLE / "ok_add.ptx").read_text()
    first = assemble(ptx, "ptx", "sm_90a", cache=store)
    again = assemble(ptx, "ptx", "sm_90a", cache=store)
    assert not first.cached and again.cached
    assert again.cubin == first.cubin
    assert again.resources == first.resources and again.log == first.log
    other_arch = assemble(ptx.replace("sm_90a", "sm_100a"), "ptx", "sm_100a", cache=store)
    assert not other_arch.cached
    bad = (ASSEMBLE / "syntax.ptx").read_text()
    assemble(bad, "ptx", "sm_90a", cache=store)
    bad_again = assemble(bad, "ptx", "sm_90a", cache=store)
    assert bad_again.cached and bad_again.category == "syntax" and bad_again.evidence_line == 8


def test_damaged_cache_entry_is_a_miss(tmp_path):
    store = Cache(tmp_path / "cache")
    ptx = (ASSEMBLE / "ok_add.ptx").read_text()
    assemble(ptx, "ptx", "sm_90a", cache=store)
    for report in store.dir.glob("??/*.report.json"):
        report.write_text("{ not json")
    result = assemble(ptx, "ptx", "sm_90a", cache=store)
    assert result.ok and not result.cached
    for cubin in store.dir.glob("??/*.blob"):
        cubin.unlink()
    result = assemble(ptx, "ptx", "sm_90a", cache=store)
    assert result.ok and not result.cached and result.cubin


def test_cache_key_depends_on_everything_that_decides_the_result():
    base = content_key("code", language="ptx", arch="sm_90a", versions={"ptxas": "13.0.88"})
    assert base == content_key("code", language="ptx", arch="sm_90a", versions={"ptxas": "13.0.88"})
    assert base != content_key("code", language="ptx", arch="sm_100a", versions={"ptxas": "13.0.88"})
    assert base != content_key("code", language="ptx", arch="sm_90a", versions={"ptxas": "13.0.48"})
    assert base != content_key("code ", language="ptx", arch="sm_90a", versions={"ptxas": "13.0.88"})
    assert content_key("ab", "c") != content_key("a", "bc")


def _assemble_into(args: tuple[str, str]) -> tuple[str, bool, int]:
    directory, ptx = args
    r = assemble(ptx, "ptx", "sm_90a", cache=Cache(directory))
    return r.category, r.cached, len(r.cubin or b"")


def test_concurrent_processes_share_one_cache(tmp_path):
    directory = str(tmp_path / "shared")
    ptx = (ASSEMBLE / "ok_add.ptx").read_text().replace("z = x + y", "z = x + y (shared)")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_assemble_into, [(directory, ptx)] * 8)
    assert {r[0] for r in results} == {"ok"}
    assert len({r[2] for r in results}) == 1
    assert not list(Path(directory).glob("??/.tmp-*"))
    reports = list(Path(directory).glob("??/*.report.json"))
    assert len(reports) == 1
    assert json.loads(reports[0].read_text())["category"] == "ok"
    assert _assemble_into((directory, ptx))[1] is True


def test_a_flood_of_errors_is_trimmed_but_judged():
    body = "".join(f"\tmovv.b32 \t%r1, %r{i % 3};\n" for i in range(3000))
    ptx = f".version 8.5\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{{\n\t.reg .b32 %r<3>;\n{body}\tret;\n}}\n"
    result = assemble(ptx, "ptx", "sm_90a")
    assert result.category == "unknown_instruction"
    assert result.evidence_line == 7
    assert len(result.errors) == 201 and "more errors left out" in result.errors[-1].text
    assert len(result.log) < 70_000 and "left out" in result.log


def test_cuda_headers_come_from_the_wheels(cache):
    # <cuda_bf16.h> pulls in CCCL's <nv/target>: the nvidia-cuda-cccl wheel must be beside nvcc.
    code = (
        "#include <cuda_bf16.h>\n"
        'extern "C" __global__ void scale(__nv_bfloat16* x, float s, int n) {\n'
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) x[i] = __float2bfloat16(__bfloat162float(x[i]) * s);\n"
        "}\n"
    )
    result = assemble(code, "cuda", "sm_90a", cache=cache)
    assert result.ok, result.log
    assert "cvt.rn.bf16.f32" in result.ptx
