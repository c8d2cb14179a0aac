"""The PTX lexer fixes the gaps of Pygments' PtxLexer listed in ptx-facts.md."""

from __future__ import annotations

from pygments.lexers.ptx import PtxLexer
from pygments.token import Error

from fixture_store import read
from ptxbench.tui.ptx_lexer import FamilyOpcode, Guard, Modifier, Opcode, PtxbenchLexer, Register, SassLexer, StateSpace, Type

HOPPER = """\
\t@%p1 bra \t$L__BB0_2;
\t@!%p2 mbarrier.try_wait.parity.shared::cta.b64 \t%p3, [%r1], %r2;
\tsetp.lt.and.s32 \t%p4|%p5, %r1, 4, %p1;
\tcp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd1, {%r4, %r4}], [%r3];
\ttcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r2, %p1;
\ttensormap.replace.tile.global_address.shared::cta.b1024.b64 [%r1], %rd2;
\tclusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [%r1], [%r2];
\tcvt.rn.satfinite.e4m3x2.f32 %rs1, %f1, %f2;
\twgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
\t\t{%f1, %f2,
\t\t %f3, %f4}, %rd6, %rd7, 1, 1, 1, 0, 0;
"""


def tokens(lexer, text):
    return [(t, v) for t, v in lexer.get_tokens(text) if v.strip()]


def test_pygments_ptx_lexer_has_the_gaps():
    # The reason for the subclass: stock Pygments marks Hopper PTX as errors.
    errors = [v for t, v in tokens(PtxLexer(), HOPPER) if t in Error]
    assert any(":" in v for v in errors) and "@" in "".join(errors) and "|" in "".join(errors)


def test_no_error_tokens_on_hopper_and_blackwell_ptx():
    for text in (HOPPER, read("wgmma_tile.ptx"), read("vecadd.ptx")):
        assert not [v for t, v in tokens(PtxbenchLexer(), text) if t in Error]


def test_qualifiers_guards_and_dual_destinations():
    toks = tokens(PtxbenchLexer(), HOPPER)
    as_dict = {}
    for t, v in toks:
        as_dict.setdefault(v, t)
    assert as_dict["@%p1"] is Guard and as_dict["@!%p2"] is Guard
    assert as_dict["|"].__str__() == "Token.Operator"
    assert as_dict[".shared::cta"] is StateSpace
    assert as_dict[".mbarrier::complete_tx::bytes"] is Modifier
    assert as_dict[".kind::f16"] is Modifier and as_dict[".cta_group::1"] is Modifier
    for family in ("tcgen05", "tensormap", "clusterlaunchcontrol", "wgmma", "mbarrier"):
        assert as_dict[family] is FamilyOpcode, family
    assert as_dict["bra"] is Opcode and as_dict["cvt"] is Opcode
    for ty in (".bf16", ".e4m3x2", ".b128", ".b64", ".f32"):
        assert as_dict[ty] is Type, ty
    # Modifiers come one by one, not as one chunk.
    modifiers = [v for t, v in toks if v.startswith(".") and t in Modifier]
    assert modifiers[:4] == [".try_wait", ".parity", ".lt", ".and"]


def test_operand_lists_span_lines():
    toks = tokens(PtxbenchLexer(), HOPPER)
    regs = [v for t, v in toks if t is Register]
    assert "%f3" in regs and "%f4" in regs


def test_sass_lexer_reads_cuobjdump_listings():
    toks = tokens(SassLexer(), read("wgmma_tile.sass"))
    opcodes = {v for t, v in toks if t is Opcode}
    assert {"HGMMA.64x8x16.F32.BF16", "UTMALDG.2D", "SYNCS.EXCH.64"} <= opcodes
    assert not [v for t, v in toks if t in Error]
