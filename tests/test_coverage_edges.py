"""The marked copy (engine/coverage.py) at the edges of PTX, against candidates that try to break it, and
the statement splitting it shares with the census (engine/inspect.py), held to the census it replaced.

Everything is static: the real ptxas assembles the copies; no GPU is used.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from ptxbench.engine.assemble import assemble
from ptxbench.engine.coverage import instrument
from ptxbench.engine.families import get_family
from ptxbench.engine.inspect import ptx_census, ptx_statement_spans, ptx_statements
from ptxbench.engine.pipeline import Judgement, SizeMeasurement, _judge_coverage
from ptxbench.engine.static import judge_static
from ptxbench.tasks.spec import get_task

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "hostile" / "gpu"

HEADER = """.version 8.7
.target sm_90a
.address_size 64
"""


def kernel(body: str, extra: str = "", header: str = HEADER) -> str:
    return header + extra + """
.visible .entry k(.param .u64 p)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .shared .align 8 .b64 bar;
    .shared .align 128 .b8 buf[256];
    ld.param.u64 %rd1, [p];
    ld.global.u32 %r1, [%rd1];
    setp.lt.s32 %p1, %r1, 0;
    mov.u32 %r2, bar;
    mov.u32 %r3, buf;
""" + body + """
    ret;
}
"""


MB = "mbarrier.init.shared.b64 [%r2], 1;"


def _copy(ptx: str, families: list[str]):
    assert assemble(ptx, "ptx", "sm_90a").ok, "the test's own PTX must assemble"
    marked = instrument(ptx, families)
    assert marked is not None
    return marked, assemble(marked.ptx, "ptx", "sm_90a")


# ---------------------------------------------------------------------------------------------------------
# 1. PTX editing: forms that work


ORDINARY = {
    "label_and_negated_guard": "L1: @!%p1 mbarrier.init.shared.b64 [%r2], 1;\n    @%p1 bra L1;",
    "two_statements_on_a_line": "mbarrier.init.shared.b64 [%r2], 1; @%p1 mbarrier.arrive.shared.b64 %rd2, [%r2];",
    "comments_with_braces_and_names": "@%p1 /* { ; } mbarrier.init */ mbarrier.init.shared.b64 [%r2], 1; // wgmma { ;",
    "guard_on_its_own_line": "@%p1\n    mbarrier.init.shared.b64 [%r2], 1;",
    "nvcc_inline_asm_scope": ("// begin inline asm\n{\n.reg .pred P1;\nWAIT:\n"
                              "mbarrier.try_wait.parity.shared::cta.b64 P1, [%r2], 0;\n@!P1 bra WAIT;\n}\n// end inline asm"),
    "pragma_string": '.pragma "nounroll";\n' + MB,
    "label_then_scope": "L2: { mbarrier.init.shared.b64 [%r2], 1; }",
    "candidate_register_named_like_the_mark_s": ".reg .b64 %ptxbench_a;\nmov.u64 %ptxbench_a, 0;\n" + MB,
    "guard_from_an_inner_scope": "{\n.reg .pred P;\nsetp.eq.u32 P, %r1, 3;\n@P mbarrier.init.shared.b64 [%r2], 1;\n}",
    "vector_operand_before": "mov.b64 {%r4, %r5}, %rd1;\n" + MB,
}


@pytest.mark.parametrize("name", list(ORDINARY))
def test_ordinary_forms_are_marked_once_and_the_copy_assembles(name):
    marked, asm = _copy(kernel(ORDINARY[name]), ["mbarrier"])
    census = sum(n for op, n in ptx_census(kernel(ORDINARY[name])).items() if get_family("mbarrier").matches_ptx(op))
    assert marked.sites["mbarrier"] == census
    assert asm.ok, asm.evidence


@pytest.mark.parametrize("variant", ["no_address_size", "crlf", "extern_func_declaration"])
def test_header_and_line_ending_variants(variant):
    ptx = kernel(MB)
    if variant == "no_address_size":
        ptx = ptx.replace(".address_size 64\n", "")
    elif variant == "crlf":
        ptx = ptx.replace("\n", "\r\n")
    else:
        ptx = kernel(MB, extra=".extern .func foo(.param .b32 a);\n")
    marked, asm = _copy(ptx, ["mbarrier"])
    assert marked.sites == {"mbarrier": 1} and asm.ok, asm.evidence


def test_label_stays_on_the_mark_and_guard_stays_on_the_instruction():
    marked, asm = _copy(kernel(ORDINARY["label_and_negated_guard"]), ["mbarrier"])
    line = next(ln for ln in marked.ptx.splitlines() if ln.lstrip().startswith("L1:"))
    assert line.index("L1:") < line.index("{ .reg") < line.index("} @!%p1 mbarrier.init")
    assert re.search(r"%ptxbench_\w+_t, !%p1;", line) and asm.ok


def test_a_tma_copy_with_a_vector_coordinate_operand_is_one_site():
    body = ("@%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
            "[%r3], [%rd1, {%r4, %r5}], [%r2];")
    marked, asm = _copy(kernel("mov.u32 %r4, 0;\nmov.u32 %r5, 0;\n" + body), ["tma"])
    assert marked.sites == {"tma": 1} and asm.ok, asm.evidence
    # The mark is before the guard, not inside the coordinate vector.
    assert re.search(r"\} @%p1 cp\.async\.bulk\.tensor[^\n]*\{%r4, %r5\}", marked.ptx)


def test_names_in_comments_and_strings_are_not_marked():
    ptx = kernel('// mbarrier.init.shared.b64 [%r2], 1;\n/* mbarrier.arrive.shared.b64 %rd2, [%r2]; { */\n'
                 '.pragma "nounroll";\n' + MB)
    marked, asm = _copy(ptx, ["mbarrier"])
    assert marked.sites == {"mbarrier": 1} and asm.ok


# ---------------------------------------------------------------------------------------------------------
# 1. PTX editing: forms that break it (these FAIL today)


def test_a_guard_with_a_space_after_the_at_sign_is_marked(tmp_path):
    """`@ %p1 instr` is valid PTX (ptxas takes it). The census and instrument() both miss the instruction;
    for a distinctive family the SASS still passes the static stage, so the copy leaves that family's
    slot at 0 and an honest kernel is judged required_not_executed (false positive)."""
    body = ("setp.eq.s32 %p2, %r1, 7;\n"
            "@%p2 mbarrier.init.shared.b64 [%r2], 1;\n"
            "@ %p2 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd1], 16, [%r2];")
    path = tmp_path / "k.ptx"
    path.write_text(kernel(body))
    verdict = judge_static(path, require=["bulk_copy", "mbarrier"], arch="sm_90a", use_cache=False)
    assert verdict.category == "ok", verdict.evidence      # UBLKCP is in the SASS: the static stage passes
    assert verdict.coverage.get("sites", {}).get("bulk_copy", 0) > 0, (
        f"BUG: the bulk copy under `@ %p2` got no mark (sites {verdict.coverage.get('sites')}), so its slot stays 0 "
        "on the GPU and a kernel whose bulk copy runs is judged required_not_executed")


def test_an_instruction_of_two_requested_families_is_marked_for_both():
    """st.async ... .shared::cluster is both st_async and distributed_smem by the family table (the census
    counts it for both); instrument() breaks after the first match, so the second family's slot never fills."""
    body = ("mov.u32 %r4, 1;\n"
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r3], %r4, [%r2];")
    ptx = kernel(body)
    families = ["st_async", "distributed_smem"]
    ops = set(ptx_census(ptx))
    assert all(any(get_family(f).matches_ptx(op) for op in ops) for f in families)
    marked, asm = _copy(ptx, families)
    assert asm.ok
    assert all(marked.sites[f] > 0 for f in families), (
        f"BUG: sites {marked.sites}: distributed_smem is in the census but never marked (`break` in instrument)")


def test_a_guard_named_like_a_mark_s_predicate_is_not_shadowed():
    """The mark declares `.reg .pred %ptxbench_q` in its own scope and then reads the instruction's guard by
    name: a candidate predicate called %ptxbench_q is replaced by the mark's uninitialised one (ptxas uses an
    undefined P register), so the mark may fire where the instruction does not run."""
    body = (".reg .pred %ptxbench_q;\nsetp.lt.s32 %ptxbench_q, %r1, -5;\n"
            "@%ptxbench_q mbarrier.init.shared.b64 [%r2], 1;")
    marked, asm = _copy(kernel(body), ["mbarrier"])
    assert asm.ok
    mark = re.search(r"\{ \.reg[^}]*\}", marked.ptx).group(0)
    declared = set(re.findall(r"%ptxbench_\w+", mark.split("mov.u64")[0]))
    guard = re.search(r"setp\.ne\.and\.u64 [^;]*, (!?%[\w$]+);", mark).group(1).lstrip("!")
    assert guard not in declared, f"BUG: the mark's guard {guard} is its own fresh register, not the candidate's"


@pytest.mark.parametrize("extra", [
    ".global .align 8 .u64 __ptxbench_coverage[1];\n",
    ".visible .global .align 8 .u64 __ptxbench_coverage[1];\n",
    ".weak .global .align 8 .u64 __ptxbench_coverage[1];\n",
], ids=["local", "visible", "weak"])
def test_a_candidate_variable_named_like_the_slots_does_not_break_the_copy(extra):
    ptx = kernel(MB, extra=extra)
    marked, asm = _copy(ptx, ["mbarrier"])
    assert asm.ok, (f"BYPASS: one unused declaration makes the marked copy fail to assemble ({asm.evidence[:80]}); "
                    "the static verdict stays ok with coverage['error'] and no size is ever checked")


@pytest.mark.parametrize("where", ["comment_before_header", "comment_opened_on_the_header_line"])
def test_a_block_comment_cannot_swallow_the_slots_declaration(where):
    """The declaration goes after the first `.address_size` line of the raw text, comments not masked."""
    ptx = kernel(MB)
    if where == "comment_before_header":
        ptx = "/*\n.address_size 64\n*/\n" + ptx
    else:
        ptx = ptx.replace(".address_size 64\n", ".address_size 64 /* the header\n   ends here */\n")
    marked, asm = _copy(ptx, ["mbarrier"])
    assert asm.ok, f"BYPASS: the slots' declaration lands inside a comment: {asm.evidence[:80]}"


def test_a_cuda_candidate_with_a_device_variable_of_that_name_is_still_checked(tmp_path):
    """End to end in the static stage: the round-3 hostile kernel (families behind D < 0) plus one line."""
    src = (HOSTILE / "rmsnorm_families_never_run.cu").read_text()
    src = src.replace("#include <cuda_bf16.h>\n",
                      "#include <cuda_bf16.h>\n__device__ unsigned long long __ptxbench_coverage[2];\n", 1)
    path = tmp_path / "rmsnorm_families_never_run.cu"
    path.write_text(src)
    verdict = judge_static(path, get_task("rmsnorm_bf16_sm90a"), use_cache=False)
    assert verdict.category == "ok"
    assert verdict.coverage_cubin is not None, (
        f"BYPASS: no marked copy ({verdict.coverage.get('error', '')[:90]}): the GPU stage cannot say "
        "required_not_executed for a kernel whose families never run")


# ---------------------------------------------------------------------------------------------------------
# 2. The judgement of the slots


def _judged(static, rows):
    out = Judgement(static=static, status="judged", category="ok", stage=None)
    measured = []
    for split, category, slots, note in rows:
        m = SizeMeasurement(split, {"N": 1}, category)
        if slots is not None:
            m.detail["coverage"] = slots
        if note:
            m.detail["coverage_note"] = note
        measured.append(m)
    _judge_coverage(static, measured, out)
    return out, measured


@pytest.fixture(scope="module")
def rmsnorm_static():
    task = get_task("rmsnorm_bf16_sm90a")
    return judge_static(ROOT / "tasks" / "solutions" / task.id / "kernel.ptx", task, use_cache=False)


def test_a_copy_that_fails_to_launch_shows_nothing_ran(rmsnorm_static):
    """Fail-closed since 0.7 (docs/harness.md, "The requested instructions run"): a copy whose launch is
    refused for the candidate's sake shows no family running, so the train size is required_not_executed
    (round 7 made its copy fail on purpose); the evidence says why, size by size."""
    out, measured = _judged(rmsnorm_static, [("train", "ok", None, "the marked copy's launch failed: x")] * 2)
    assert [m.category for m in measured] == ["required_not_executed"] * 2 and out.executed is False
    assert "the marked copy's launch failed: x" in measured[0].message
    assert [r["note"] for r in out.evidence["coverage"]["sizes"]] == ["the marked copy's launch failed: x"] * 2


def test_a_copy_that_could_not_be_made_shows_nothing_ran(rmsnorm_static):
    import copy

    static = copy.copy(rmsnorm_static)
    static.coverage = {"error": "the marked copy did not assemble: x"}
    out, measured = _judged(static, [("train", "ok", None, ""), ("heldout", "ok", None, "")])
    assert [m.category for m in measured] == ["required_not_executed", "ok"] and out.executed is False
    static.coverage = {}            # no copy asked for: nothing measured, nothing decided
    out, measured = _judged(static, [("train", "ok", None, "")])
    assert measured[0].category == "ok" and out.executed is None


def test_a_family_on_the_line_of_a_loc_is_marked():
    """ptxas reads `.loc 1 41 9` as a directive of three numbers and the rest of the line as the next
    statement; the census and the marker read it so too (round 7, rmsnorm_bulk_copy_after_loc)."""
    ptx = kernel(".loc 1 41 9\tmbarrier.init.shared.b64 [%r2], 1;\n.loc 1 42 3 mbarrier.inval.shared.b64 [%r2];")
    assert ptx_census(ptx)["mbarrier.init.shared.b64"] == 1 and ptx_census(ptx)["mbarrier.inval.shared.b64"] == 1
    marked, asm = _copy(ptx, ["mbarrier"])
    assert asm.ok and marked.sites["mbarrier"] == 2


def test_the_slots_are_declared_after_a_header_split_over_lines():
    """`.address_size` with its 64 on the next line (round 7, rmsnorm_marked_copy_does_not_assemble)."""
    ptx = kernel(MB).replace(".address_size 64", ".address_size\n   64")
    marked, asm = _copy(ptx, ["mbarrier"])
    assert asm.ok, asm.evidence


def test_a_copy_that_needs_more_registers_is_capped_at_the_candidate_s(tmp_path):
    """Round 7, rmsnorm_marked_copy_over_register_budget: 64 registers at 1024 threads, the marks made it 70."""
    src = HOSTILE / "rmsnorm_marked_copy_over_register_budget.cu"
    verdict = judge_static(src, get_task("rmsnorm_bf16_sm90a"), manifest_path=src.with_suffix(".manifest.json"),
                           use_cache=False)
    assert verdict.category == "ok" and verdict.coverage_cubin is not None, verdict.coverage
    from ptxbench.engine.sass import disassemble
    assert verdict.resources["rmsnorm"]["registers"] == 64
    copy_sass = disassemble(verdict.coverage_cubin)
    assert "rmsnorm" in copy_sass


def test_executed_is_not_claimed_for_a_train_size_never_looked_at(rmsnorm_static):
    tokens = rmsnorm_static.coverage["tokens"]
    out, _ = _judged(rmsnorm_static, [("train", "ok", tokens, ""),
                                      ("train", "ok", None, "the marked copy's launch failed: x")])
    assert out.executed is not True, "NIT: executed=True claims every train size, one was never checked"


def test_overwritten_slot_is_not_ran(rmsnorm_static):
    tokens = rmsnorm_static.coverage["tokens"]
    out, measured = _judged(rmsnorm_static, [("train", "ok", [tokens[0], tokens[1] ^ 1], "")])
    assert measured[0].category == "required_not_executed" and out.executed is False


# ---------------------------------------------------------------------------------------------------------
# 3. ptx_statements / ptx_census against the implementation on main

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_LINE_DIRECTIVE = re.compile(r"^[ \t]*\.(loc|file|version|target|address_size|section)\b[^\n]*", re.M)
_LABEL = re.compile(r"^[A-Za-z_$%][\w$]*\s*:(?!:)\s*")
_GUARD = re.compile(r"^@!?[%\w$]+\s+")
_OPCODE = re.compile(r"^([a-z][\w]*(?:(?:\.|::)\w+)*)")


def _old_opcode(stmt: str) -> str | None:
    s = stmt.strip()
    while m := _LABEL.match(s):
        s = s[m.end():]
    s = _GUARD.sub("", s, count=1)
    m = _OPCODE.match(s)
    return m.group(1) if m else None


def _old_statements(ptx: str) -> list[str]:
    """engine/inspect.py ptx_statements as on main (before the refactor), verbatim."""
    text = _BLOCK_COMMENT.sub(" ", ptx)
    text = _LINE_COMMENT.sub("", text)
    text = _STRING.sub('""', text)
    text = _LINE_DIRECTIVE.sub("", text)
    statements: list[str] = []
    start = 0
    operand_depth = 0
    buf: list[str] = []
    for m in re.finditer(r"[;{}]", text):
        piece = text[start:m.start()]
        start = m.end()
        ch = m.group(0)
        if ch == ";" and operand_depth == 0:
            buf.append(piece)
            statements.append("".join(buf))
            buf = []
        elif ch == "{":
            so_far = "".join(buf) + piece
            if operand_depth or "=" in so_far or _old_opcode(so_far):
                operand_depth += 1
                buf.append(piece + ch)
            else:
                statements.append(so_far)
                buf = []
        elif ch == "}":
            if operand_depth:
                operand_depth -= 1
                buf.append(piece + ch)
            else:
                statements.append("".join(buf) + piece)
                buf = []
        else:
            buf.append(piece + ch)
    statements.append("".join(buf) + text[start:])
    return [st.strip() for st in statements if st.strip()]


def _old_census(ptx: str) -> Counter[str]:
    return Counter(op for st in _old_statements(ptx) if (op := _old_opcode(st)))


# Round 7 wrote these two to exploit where 0.6 ended a directive (at the line's end): 0.7 reads them as
# ptxas does, so they are the two files where the old reading and the new must differ.
READ_AS_PTXAS_DOES = {"rmsnorm_bulk_copy_after_loc.ptx", "rmsnorm_marked_copy_does_not_assemble.ptx"}
CORPUS = sorted(p for p in ROOT.rglob("*.ptx") if ".git" not in p.parts and ".venv" not in p.parts
                and p.name not in READ_AS_PTXAS_DOES)
SYNTHETIC = {
    **{name: kernel(body) for name, body in ORDINARY.items()},
    "strings": kernel('.pragma "nounroll";\n' + MB + '\n.pragma "nounroll";'),
    "crlf": kernel(MB).replace("\n", "\r\n"),
    "initializer": HEADER + ".global .align 4 .b32 tab[3] = {1, 2, 3};\n" + kernel(MB),
    "loc_lines": kernel(".loc 1 2 3\n" + MB + "\n.loc 1 3 4\nmbarrier.inval.shared.b64 [%r2];"),
}


@pytest.mark.parametrize("path", CORPUS, ids=[str(p.relative_to(ROOT)) for p in CORPUS])
def test_census_unchanged_on_the_repository_s_ptx(path):
    ptx = path.read_text(errors="surrogateescape")
    assert ptx_census(ptx) == _old_census(ptx)
    assert [re.sub(r"\s+", "", s) for s in ptx_statements(ptx)] == [re.sub(r"\s+", "", s) for s in _old_statements(ptx)]


@pytest.mark.parametrize("name", list(SYNTHETIC))
def test_census_unchanged_on_edge_cases(name):
    ptx = SYNTHETIC[name]
    assert ptx_census(ptx) == _old_census(ptx)
    assert [re.sub(r"\s+", "", s) for s in ptx_statements(ptx)] == [re.sub(r"\s+", "", s) for s in _old_statements(ptx)]


def test_a_loc_after_a_multi_line_comment_no_longer_hides_the_next_instruction():
    """Before 0.6.0 a block comment became one space, so a `.loc` after a multi-line comment that began
    mid-line was no longer at a line start and was not dropped, swallowing the next instruction. Now the
    newline is kept, the `.loc` dropped and the instruction counted: a change in the census, for the better."""
    ptx = kernel("mov.u32 %r4, 1; /* a\n b */ .loc 1 2 3\n" + MB)
    assert ptx_census(ptx)["mbarrier.init.shared.b64"] == 1 and _old_census(ptx)["mbarrier.init.shared.b64"] == 0


def test_spans_cover_the_statements_at_their_offsets():
    """Every non-blank character of a span is the original's at the same offset (only comments, string
    contents and line directives are blanked)."""
    for ptx in SYNTHETIC.values():
        for at, piece, _depth in ptx_statement_spans(ptx):
            original = ptx[at:at + len(piece)]
            assert len(original) == len(piece)
            assert all(c == o for c, o in zip(piece, original) if not c.isspace())
