"""Stage `inspect`: PTX and SASS census on real cubins, and the family rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.engine.assemble import assemble
from ptxbench.engine.cache import Cache
from ptxbench.engine.families import ALL_FAMILIES, BY_NAME, KINDS, ptx_families
from ptxbench.engine.inspect import disassemble, family_row, inspect, ptx_census, sass_census
from ptxbench.tasks.spec import FAMILIES

DATA = Path(__file__).parent / "data" / "ptx"
HOPPER = ["wgmma", "tma", "mbarrier"]
BLACKWELL = ["tcgen05_mma", "tcgen05_alloc", "tcgen05_ld", "tcgen05_st", "tcgen05_commit", "tma", "mbarrier"]


@pytest.fixture(scope="session")
def cache(tmp_path_factory) -> Cache:
    return Cache(tmp_path_factory.getbasetemp() / "ptxbench-cache")


@pytest.fixture(scope="session")
def built(cache):
    """name → (ptx, cubin, sass) for the fixtures that assemble, built once."""
    made: dict[str, tuple[str, bytes, str]] = {}

    def get(name: str, arch: str = "sm_90a") -> tuple[str, bytes, str]:
        if name not in made:
            path = DATA / name
            language = "cuda" if path.suffix == ".cu" else "ptx"
            result = assemble(path.read_text(), language, arch, cache=cache)
            assert result.ok, result.log
            assert result.cubin is not None
            made[name] = (result.ptx, result.cubin, disassemble(result.cubin, cache=cache))
        return made[name]

    return get


def test_table_covers_the_canonical_families():
    assert set(FAMILIES) <= set(ALL_FAMILIES)
    for fam in BY_NAME.values():
        assert fam.kind in KINDS
        assert (fam.sass is None) == (fam.kind == "none")


TRICKY_PTX = r"""
.version 8.5
.target sm_90a
.address_size 64
// wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 in a comment
/* a block comment
   tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd1, %r1, %p1;
*/
.global .align 8 .u64 table[2] = {0, 1};
.file 1 "k.cu"
.visible .entry k(.param .u64 p)
.maxntid 128, 1, 1
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<9>;
	.pragma "setmaxnreg.inc.sync.aligned.u32 240";
	.loc	1 12 3
	mov.u32 	%r1, %tid.x;
$L__top:	mbarrier.try_wait.parity.shared::cta.b64 	%p1, [%r1], 0;
	@!%p1 bra 	$L__top;
	@%p2 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r3}], [%r1];
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r4, %r5,
		%r6, %r7}, [%r1];
	{
	.reg .pred done;
	WAIT:
	elect.sync %r8|done, -1;
	@!done bra WAIT;
	}
	tcgen05.fence::before_thread_sync; tcgen05.wait::ld.sync.aligned;
	ret;
}
"""


def test_ptx_census_reads_instructions_only():
    census = ptx_census(TRICKY_PTX)
    assert census == {
        "mov.u32": 1,
        "mbarrier.try_wait.parity.shared::cta.b64": 1,
        "bra": 2,
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes": 1,
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16": 1,
        "elect.sync": 1,
        "tcgen05.fence::before_thread_sync": 1,
        "tcgen05.wait::ld.sync.aligned": 1,
        "ret": 1,
    }
    # Commented-out and string-quoted instructions do not count.
    assert set(ptx_families(set(census))) == {"mbarrier", "tma", "ldmatrix", "elect", "tcgen05_sync"}


def test_bulk_copy_and_tma_are_told_apart():
    ops = {
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
        "cp.async.bulk.commit_group",
    }
    assert ptx_families(ops) == ["tma", "bulk_group"]
    assert ptx_families({"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"}) == ["bulk_copy"]
    assert ptx_families({"cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"}) == ["bulk_copy"]
    assert ptx_families({"cp.async.bulk.prefetch.tensor.2d.L2.global"}) == ["tma"]


def test_sass_census_per_function(built):
    _, _, sass = built("families_sm90a.ptx")
    functions = sass_census(sass)
    assert list(functions) == ["families"]
    ops = functions["families"]
    assert ops["SYNCS.EXCH.64"] == 1
    assert "LDSM.16.M88.4" in ops and "STSM.16.M88.4" in ops
    assert {"USETMAXREG.TRY_ALLOC.CTAPOOL", "UCGABAR_ARV", "UBLKCP.S.G", "UBLKCP.G.S"} <= set(ops)
    assert "EXIT" in ops


def test_hopper_families_in_sass(built):
    ptx, cubin, sass = built("families_sm90a.ptx")
    wanted = ["bulk_copy", "mbarrier", "setmaxnreg", "stmatrix", "ldmatrix", "cluster", "elect",
              "fence_proxy_async", "pdl", "st_async", "distributed_smem", "bulk_group"]
    result = inspect(ptx, cubin, wanted, sass=sass)
    assert result.ok, result.evidence
    for row in result.rows:
        assert row.in_ptx
        assert row.in_sass is (None if row.kind == "none" else True)


def test_blackwell_families_in_sass(built):
    ptx, cubin, sass = built("families_sm100a.ptx", "sm_100a")
    wanted = ["tcgen05_mma", "tcgen05_alloc", "tcgen05_ld", "tcgen05_st", "tcgen05_commit", "tcgen05_cp",
              "tcgen05_shift", "tcgen05_sync", "mbarrier", "clc"]
    result = inspect(ptx, cubin, wanted, sass=sass)
    assert result.ok, result.evidence
    assert {"UTCHMMA", "UTCBAR", "STTM", "LDTM.x2", "UTCCP.T.S", "UTCSHIFT.DOWN"} <= set(result.sass_opcodes["tc_families"])


def test_compiler_made_hopper_gemm(built):
    ptx, cubin, sass = built("triton_gemm_sm90a.ptx")
    result = inspect(ptx, cubin, HOPPER, sass=sass)
    assert result.ok
    assert set(HOPPER) <= set(result.ptx_families) and set(HOPPER) <= set(result.sass_families)
    assert [r.family for r in result.rows] == HOPPER


def test_compiler_made_blackwell_gemm(built):
    ptx, cubin, sass = built("triton_gemm_sm100a.ptx", "sm_100a")
    result = inspect(ptx, cubin, BLACKWELL, sass=sass)
    assert result.ok, result.evidence
    assert "wgmma" not in result.ptx_families


def test_nvcc_made_gemms(built):
    ptx, cubin, sass = built("gemm_sm90a.cu")
    assert inspect(ptx, cubin, HOPPER, sass=sass).ok
    ptx, cubin, sass = built("gemm_sm100a.cu", "sm_100a")
    assert inspect(ptx, cubin, ["tcgen05_mma", "tcgen05_alloc", "tcgen05_ld", "tcgen05_commit", "tma", "mbarrier"],
                   sass=sass).ok


def test_dead_code_does_not_count(built):
    ptx, cubin, sass = built("wgmma_dead.ptx")
    result = inspect(ptx, cubin, ["wgmma"], sass=sass)
    assert result.category == "required_missing_sass"
    assert result.required_missing == [{"family": "wgmma", "missing": "sass"}]
    assert "wgmma" in result.ptx_families and "wgmma" not in result.sass_families


def test_dropped_setmaxnreg_is_missing_in_sass(built):
    ptx, cubin, sass = built("setmaxnreg_ignored.ptx")
    result = inspect(ptx, cubin, ["setmaxnreg", "cluster"], sass=sass)
    assert result.category == "required_missing_sass"
    assert result.required_missing == [{"family": "setmaxnreg", "missing": "sass"}]


def test_absent_family_is_missing_in_ptx_and_wins(built):
    ptx, cubin, sass = built("wgmma_dead.ptx")
    result = inspect(ptx, cubin, ["wgmma", "tma"], sass=sass)
    assert result.category == "required_missing_ptx"
    assert {"family": "tma", "missing": "ptx"} in result.required_missing
    assert "tma" in result.evidence and "wgmma" in result.evidence


def test_generic_family_needs_the_ptx(built):
    # ptxas emits ELECT for its own reasons: SASS alone does not make the family.
    ptx, cubin, sass = built("gemm_sm90a.cu")
    result = inspect(ptx, cubin, ["elect"], sass=sass)
    assert "elect" in result.sass_families and "elect" not in result.ptx_families
    assert result.category == "required_missing_ptx"


def test_family_rule_table():
    assert family_row("wgmma", {"wgmma"}, set()).missing == "sass"
    assert family_row("wgmma", set(), {"wgmma"}).ok  # the machine code decides a distinctive family
    assert family_row("mbarrier", set(), {"mbarrier"}).missing == "ptx"
    assert family_row("mbarrier", {"mbarrier"}, set()).missing == "sass"
    assert family_row("distributed_smem", {"distributed_smem"}, set()).ok
    assert family_row("distributed_smem", {"distributed_smem"}, set()).in_sass is None
    assert family_row("wgmma", {"wgmma"}, None).in_sass is None  # no cubin: not ok
    assert not family_row("wgmma", {"wgmma"}, None).ok


def test_every_requested_family_gets_a_row(built):
    ptx, cubin, sass = built("triton_gemm_sm90a.ptx")
    result = inspect(ptx, cubin, list(FAMILIES), sass=sass)
    assert [r.family for r in result.rows] == list(FAMILIES)


def test_unknown_family_is_the_callers_mistake():
    with pytest.raises(ValueError):
        inspect("", None, ["warp_magic"])


def test_disassembly_is_cached(built, tmp_path):
    _, cubin, sass = built("triton_gemm_sm90a.ptx")
    store = Cache(tmp_path / "c")
    assert disassemble(cubin, cache=store) == sass
    assert list(store.dir.glob("??/*.blob"))
    assert disassemble(cubin, cache=store) == sass
