"""Instruction families: what to look for in the PTX and in the SASS, and how much the SASS proves.

kind:
- distinctive: the SASS opcode is only ever emitted for this family, so its
  presence in the machine code is the evidence (a PTX hit alone does not
  count: ptxas deletes dead code);
- generic: ptxas also emits the SASS opcode for other reasons (ELECT, SYNCS,
  FENCE.VIEW.ASYNC), so the family needs the PTX hit and the SASS only
  confirms it;
- none: nothing in the SASS is specific; the PTX is checked alone.

PTX patterns match a whole instruction name with its qualifiers
(`cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes`);
SASS patterns match an opcode with its modifiers (`HGMMA.64x128x16.F32.BF16`).
The SASS opcodes were read off cubins made by ptxas 13.0 from the modules in
tests/data/ptx/ (disassembled by cuobjdump 13.5; engine.sass gives the same instructions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ptxbench.tasks.spec import FAMILIES

KINDS = ("distinctive", "generic", "none")


@dataclass(frozen=True)
class Family:
    name: str
    kind: str
    ptx: re.Pattern[str]
    sass: re.Pattern[str] | None
    archs: str  # where the PTX exists, for messages
    ptx_text: str  # what to look for, in words, for reports
    sass_text: str
    ptx_exclude: re.Pattern[str] | None = None

    def matches_ptx(self, opcode: str) -> bool:
        if not self.ptx.match(opcode):
            return False
        return not (self.ptx_exclude and self.ptx_exclude.search(opcode))

    def matches_sass(self, opcode: str) -> bool:
        return bool(self.sass and self.sass.match(opcode))


def _f(name: str, kind: str, ptx: str, sass: str | None, archs: str, ptx_text: str, sass_text: str,
       exclude: str | None = None) -> Family:
    assert kind in KINDS
    return Family(
        name=name,
        kind=kind,
        ptx=re.compile(ptx),
        sass=re.compile(sass) if sass else None,
        archs=archs,
        ptx_text=ptx_text,
        sass_text=sass_text,
        ptx_exclude=re.compile(exclude) if exclude else None,
    )


_TABLE: tuple[Family, ...] = (
    # Hopper and sm_90+
    _f("wgmma", "distinctive", r"wgmma\.mma_async(\.|$)", r"[HQIB]GMMA(\.|$)", "sm_90a",
       "warpgroup MMA (wgmma.mma_async)", "HGMMA/QGMMA/IGMMA/BGMMA"),
    _f("tma", "distinctive", r"cp\.(reduce\.)?async\.bulk\.(prefetch\.)?tensor(\.|$)", r"UTMA(LDG|STG|REDG|PF)(\.|$)",
       "sm_90+", "tensor-map bulk copies (cp.async.bulk.tensor)", "UTMALDG/UTMASTG/UTMAREDG/UTMAPF"),
    _f("bulk_copy", "distinctive", r"cp\.(reduce\.)?async\.bulk(\.|$)", r"UBLK(CP|RED|PF)(\.|$)", "sm_90+",
       "non-tensor bulk copies (cp.async.bulk, cp.reduce.async.bulk)", "UBLKCP/UBLKRED/UBLKPF",
       exclude=r"\.tensor(\.|$)|^cp\.async\.bulk\.(commit_group|wait_group)"),
    _f("mbarrier", "generic", r"mbarrier\.", r"SYNCS\.", "sm_80+ (expect_tx, try_wait: sm_90+)",
       "mbarrier.init/arrive/expect_tx/try_wait", "SYNCS.*"),
    _f("setmaxnreg", "distinctive", r"setmaxnreg\.", r"USETMAXREG(\.|$)", "sm_90a, sm_100a",
       "setmaxnreg.inc/dec", "USETMAXREG"),
    _f("stmatrix", "distinctive", r"stmatrix\.", r"STSM(\.|$)", "sm_90+", "stmatrix", "STSM"),
    _f("ldmatrix", "distinctive", r"ldmatrix\.", r"LDSM(\.|$)", "sm_75+", "ldmatrix", "LDSM"),
    _f("cluster", "distinctive", r"barrier\.cluster\.", r"UCGABAR_(ARV|WAIT)(\.|$)", "sm_90+",
       "cluster barrier (barrier.cluster.arrive/wait)", "UCGABAR_ARV/UCGABAR_WAIT"),
    # Blackwell datacenter
    _f("tcgen05_mma", "distinctive", r"tcgen05\.mma(\.|$)", r"UTC[A-Z]*MMA(\.|$)", "sm_100a/f, sm_103a/f, sm_110a",
       "tcgen05.mma", "UTCHMMA/UTCQMMA/UTCIMMA/UTCOMMA"),
    _f("tcgen05_alloc", "distinctive", r"tcgen05\.(alloc|dealloc|relinquish_alloc_permit)\.",
       r"(UTCATOMSWS|UVIRTCOUNT\.DEALLOC)(\.|$)", "sm_100a/f, sm_103a/f, sm_110a",
       "tensor-memory allocation (tcgen05.alloc/dealloc/relinquish_alloc_permit)", "UTCATOMSWS/UVIRTCOUNT.DEALLOC"),
    _f("tcgen05_ld", "distinctive", r"tcgen05\.ld\.", r"LDTM(\.|$)", "sm_100a/f, sm_103a/f, sm_110a",
       "tcgen05.ld (tensor memory to registers)", "LDTM"),
    _f("tcgen05_st", "distinctive", r"tcgen05\.st\.", r"STTM(\.|$)", "sm_100a/f, sm_103a/f, sm_110a",
       "tcgen05.st (registers to tensor memory)", "STTM"),
    _f("tcgen05_commit", "distinctive", r"tcgen05\.commit\.", r"UTCBAR(\.|$)", "sm_100a/f, sm_103a/f, sm_110a",
       "tcgen05.commit to an mbarrier", "UTCBAR"),
    _f("tcgen05_cp", "distinctive", r"tcgen05\.cp\.", r"UTCCP(\.|$)", "sm_100a/f, sm_103a/f, sm_110a",
       "tcgen05.cp (shared memory to tensor memory)", "UTCCP"),
    # Further families, for reports and for tasks that want them.
    _f("tcgen05_shift", "distinctive", r"tcgen05\.shift\.", r"UTCSHIFT(\.|$)", "sm_100a, sm_103a, sm_110a",
       "tcgen05.shift", "UTCSHIFT"),
    _f("tcgen05_sync", "none", r"tcgen05\.(fence|wait)(\.|::|$)", None, "sm_100a/f, sm_103a/f, sm_110a",
       "tcgen05.fence::*, tcgen05.wait::ld/st", "nothing specific (NOP, FENCE.VIEW.ASYNC.T)"),
    _f("wgmma_sync", "none", r"wgmma\.(fence|commit_group|wait_group)(\.|$)", None, "sm_90a",
       "wgmma.fence / commit_group / wait_group", "nothing specific (WARPGROUP.ARRIVE, WARPGROUP.DEPBAR)"),
    _f("bulk_group", "generic", r"cp\.async\.bulk\.(commit_group|wait_group)(\.|$)", r"(UTMACMDFLUSH|DEPBAR)(\.|$)",
       "sm_90+", "cp.async.bulk.commit_group/wait_group", "UTMACMDFLUSH/DEPBAR"),
    _f("elect", "generic", r"elect\.sync(\.|$)", r"ELECT(\.|$)", "sm_90+", "elect.sync", "ELECT"),
    _f("fence_proxy_async", "generic", r"fence\.proxy\.async(\.|::|$)", r"FENCE\.VIEW\.ASYNC(\.|$)", "sm_90+",
       "fence.proxy.async", "FENCE.VIEW.ASYNC.*"),
    _f("pdl", "distinctive", r"griddepcontrol\.", r"(ACQBULK|PREEXIT)(\.|$)", "sm_90+",
       "programmatic dependent launch (griddepcontrol)", "ACQBULK/PREEXIT"),
    _f("st_async", "generic", r"(st|red)\.async(\.|$)", r"(STAS|REDAS)(\.|$)", "sm_90+",
       "st.async / red.async to a cluster peer", "STAS/REDAS"),
    # Qualifiers up to `.shared::cluster`, read once (possessive): a long qualifier chain is not backtracked over.
    _f("distributed_smem", "none",
       r"(mapa|getctarank)(\.|$)|(ld|st|atom|red)(?:\.(?!shared::cluster(?:\.|$))[\w:]++)*+\.shared::cluster(\.|$)",
       None, "sm_90+", "cluster shared memory (mapa, getctarank, ld/st.shared::cluster)", "nothing specific"),
    _f("clc", "distinctive", r"clusterlaunchcontrol\.try_cancel(\.|$)", r"UGETNEXTWORKID(\.|$)", "sm_100+",
       "cluster launch control (clusterlaunchcontrol.try_cancel)", "UGETNEXTWORKID"),
)

BY_NAME: dict[str, Family] = {f.name: f for f in _TABLE}
ALL_FAMILIES: tuple[str, ...] = tuple(BY_NAME)

_missing = set(FAMILIES) - set(BY_NAME)
assert not _missing, f"family table lacks canonical families: {sorted(_missing)}"


def get_family(name: str) -> Family:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown family {name!r} (known: {', '.join(ALL_FAMILIES)})") from None


def ptx_families(opcodes: set[str] | list[str]) -> list[str]:
    """Families whose PTX pattern matches any of the given instruction names, in table order."""
    return [f.name for f in _TABLE if any(f.matches_ptx(op) for op in opcodes)]


def sass_families(opcodes: set[str] | list[str]) -> list[str]:
    """Families whose SASS pattern matches any of the given opcodes, in table order."""
    return [f.name for f in _TABLE if f.sass is not None and any(f.matches_sass(op) for op in opcodes)]
