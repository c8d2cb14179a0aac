"""Diffs: noise filtering, register renumbering, pairing of changed lines."""

from __future__ import annotations

from fixture_store import read
from ptxbench.tui.diffing import DiffOptions, clean_lines, diff


def test_noise_filter_drops_debug_directives_and_comments():
    text = "// c\n.loc 1 2 3\n.file 1 \"k.cu\"\n\tadd.s32 %r1, %r2, 1;\n"
    kept = [line for _, line in clean_lines(text, DiffOptions(noise=True))]
    assert kept == ["\tadd.s32 %r1, %r2, 1;"]
    assert len(clean_lines(text, DiffOptions(noise=False))) == 4


def test_register_renumbering_makes_renamed_kernels_equal():
    a = "\tadd.s32 %r7, %r12, 1;\n\tmov.b32 %r3, %r7;\n"
    b = "\tadd.s32 %r1, %r2, 1;\n\tmov.b32 %r3, %r1;\n"
    assert diff(a, b, DiffOptions(registers=False)).changed == 2
    same = diff(a, b, DiffOptions(registers=True))
    assert (same.added, same.removed, same.changed) == (0, 0, 0)
    assert same.stats == "identical after filtering"


def test_the_syntax_mutation_differs_in_one_line():
    result = diff(read("vecadd_syntax.ptx"), read("vecadd.ptx"), DiffOptions(context=1))
    changed = [r for r in result.rows if r.kind == "replace"]
    assert len(changed) == 1 and changed[0].left_no == 37 and changed[0].right_no == 37
    assert "%f1 %f2" in changed[0].left and "%f1, %f2" in changed[0].right
    assert any(r.kind == "skip" for r in result.rows) or len(result.rows) <= 3


def test_sass_noise_drops_addresses_and_encodings():
    lines = [t for _, t in clean_lines(read("wgmma_tile.sass"), DiffOptions(target="sass"))]
    assert not any("/*0" in t or "/* 0x" in t for t in lines)
    assert any(t.strip().startswith("HGMMA") for t in lines)


def test_whitespace_option():
    a, b = "\tadd.s32 %r1, %r2, 1;\n", "  add.s32   %r1, %r2, 1;\n"
    assert diff(a, b, DiffOptions(whitespace=True)).changed == 0
    assert diff(a, b, DiffOptions(whitespace=False)).changed == 1


def test_a_manifest_only_fix_diffs_as_one_changed_line():
    from ptxbench.db.browse import SampleDetail
    from ptxbench.tui.diffing import text_of

    def detail(manifest: str) -> SampleDetail:
        return SampleDetail(id=1, task_id="t", arch="sm_90a", families=[], model="m", context_level="none", turn=1,
                            parent_id=None, language="ptx", code="", manifest=manifest, source="s", evaluations=[],
                            measurements=[], labels=[])

    failed = detail('{"launches": [{"entry": "k", "grid": ["N // 1024", 1, 1], "block": [256, 1, 1]}]}')
    fixed = detail('{"launches":[{"block":[256,1,1],"entry":"k","grid":["ceil_div(N, 1024)",1,1]}]}')
    result = diff(text_of(failed, "manifest"), text_of(fixed, "manifest"), DiffOptions(target="manifest"))
    assert (result.added, result.removed, result.changed) == (0, 0, 1)
    assert text_of(detail(None), "manifest") == ""
