"""The writable module state of a cubin, read from the ELF that the wheel's ptxas writes."""

from __future__ import annotations

import pytest

from ptxbench.engine.assemble import assemble
from ptxbench.engine.gpu.module_state import NotACubin, data_sections

PTX = """
.version 8.0
.target sm_90a
.address_size 64
.global .align 4 .u32 launches;
.visible .global .align 4 .u32 shown;
.global .align 8 .b8 stash[4096];
.global .align 4 .u32 table[4] = {1, 2, 3, 4};
.const .align 4 .u32 fixed[2] = {5, 6};
.visible .entry k(.param .u64 p)
{
    .reg .u32 %r<4>;
    .reg .u64 %rd<4>;
    .shared .align 4 .u32 tile[32];
    ld.global.u32 %r1, [launches];
    add.u32 %r1, %r1, 1;
    st.global.u32 [launches], %r1;
    ld.global.u32 %r2, [table+4];
    ld.const.u32 %r3, [fixed];
    add.u32 %r2, %r2, %r3;
    st.shared.u32 [tile], %r2;
    ld.shared.u32 %r2, [tile];
    st.global.u32 [shown], %r2;
    mov.u64 %rd1, stash;
    st.global.u32 [%rd1+100], %r1;
    ret;
}
"""

NO_GLOBALS = """
.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p)
{
    ret;
}
"""


def _cubin(text: str) -> bytes:
    result = assemble(text, "ptx", "sm_90a")
    assert result.cubin, result.evidence
    return result.cubin


def test_every_global_variable_is_found_in_its_section():
    sections = {s.name: s for s in data_sections(_cubin(PTX))}
    assert set(sections) == {".nv.global", ".nv.global.init", ".nv.constant3"}   # shared memory is not state
    zero = {sym.name: sym for sym in sections[".nv.global"].symbols}
    assert set(zero) == {"launches", "shown", "stash"}
    assert zero["stash"].size == 4096 and zero["shown"].is_global and not zero["launches"].is_global
    assert sections[".nv.global"].size >= 4096 + 8
    assert [s.name for s in sections[".nv.global.init"].symbols] == ["table"]
    assert [s.name for s in sections[".nv.constant3"].symbols] == ["fixed"]     # writable through cvta.const
    assert all(s.known for s in sections.values())


def test_a_module_without_globals_has_nothing_to_restore():
    assert data_sections(_cubin(NO_GLOBALS)) == []


@pytest.mark.parametrize("blob", [b"", b"not an elf at all", b"\x7fELF\x01\x01" + b"\0" * 60])
def test_what_is_not_a_cubin_is_refused(blob):
    with pytest.raises(NotACubin):
        data_sections(blob)
