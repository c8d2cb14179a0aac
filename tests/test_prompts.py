"""Prompts per task and context level: what each level states, what it never shows."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from ptxbench.engine.extract import extract
from ptxbench.tasks.prompts import (
    CONTEXT_LEVELS, FAMILY_HINTS, NOTE_ORDER, NOTES_DIR, PROMPT_VERSION, build_prompt, manifest_json, notes_for,
)
from ptxbench.tasks.spec import FAMILIES, TaskSpec, TensorSpec, Tolerance, all_tasks, get_task

# The digest of every prompt text a fixed task gives at every level, per PROMPT_VERSION.
# Changing the template or a note changes it: bump PROMPT_VERSION and record the new digest.
RECORDED = {"ptxbench-prompts/1": "2fc30bfc7e7859dd", "ptxbench-prompts/2": "8a71ef3ffceee161"}


def _sizes_text(sizes: dict[str, int]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sizes.items()) + "}"


@pytest.mark.parametrize("task", all_tasks(), ids=lambda t: t.id)
def test_every_task_and_level_states_format_interface_and_train_sizes_only(task: TaskSpec) -> None:
    for level in CONTEXT_LEVELS:
        p = build_prompt(task, level)
        assert p.version == PROMPT_VERSION and p.context == level and p.task_id == task.id
        text = p.system + p.user
        assert task.arch in p.system
        assert f"# Task `{task.id}`" in p.user                      # the loopback server reads this line
        for t in task.inputs + task.outputs:
            assert f"`{t.name}`: [{', '.join(t.shape)}] {t.dtype}" in p.user
        for sizes in task.train:
            assert _sizes_text(sizes) in p.user
        for sizes in task.heldout:
            if sizes not in task.train:
                assert _sizes_text(sizes) not in text, f"{task.id}/{level} shows a held-out size"
        # The candidate format and the default launch, as JSON that parses back to the spec's.
        assert "`.target " + task.arch + "`" in p.user and "up to 9.5" in p.user
        assert 'extern "C" __global__' in p.user
        block = re.search(r"Default launch manifest for this task:\n```json\n(.*?)\n```", p.user, re.S)
        assert block and json.loads(block.group(1)) == task.launch
        assert f"{task.tolerance.max:g}" in p.user


def test_heldout_values_never_leak_for_attention() -> None:
    task = get_task("attn_fwd_sm90a")
    for level in CONTEXT_LEVELS:
        user = build_prompt(task, level).user
        assert "S=8192" not in user and "S=16384" not in user
        assert "S=4096" in user and "S=512" in user


def test_levels_differ_as_documented() -> None:
    task = get_task("gemm_bf16_sm90a")
    none, brief, full = (build_prompt(task, level).user for level in CONTEXT_LEVELS)
    hints = [FAMILY_HINTS[f] for f in task.families]
    assert not any(h in none for h in hints)
    assert all(h in brief for h in hints) and all(h in full for h in hints)
    assert "Reference notes" not in brief and "Reference notes" in full
    # full = brief + notes: the notes are the only addition.
    assert len(full) > len(brief) + 5000
    for fact in ("bits 62–63", "SBO = 1024", "wgmma.wait_group", "mbarrier.try_wait.parity", "expect_tx",
                 "fence.proxy.async.shared::cta", "cp.async.bulk.tensor.2d", "setmaxnreg", ".version` up to 9.5"):
        assert fact in full, fact


def test_full_notes_follow_the_families_and_arch() -> None:
    hopper = notes_for(get_task("gemm_bf16_sm90a"))
    assert hopper[:2] == ["header.md", "sync.md"] and "wgmma.md" in hopper and "tcgen05.md" not in hopper
    blackwell = notes_for(get_task("gemm_bf16_sm100a"))
    assert "tcgen05.md" in blackwell and "wgmma.md" not in blackwell and "setmaxnreg.md" not in blackwell
    rms = notes_for(get_task("rmsnorm_bf16_sm90a"))
    assert "bulk_copy.md" in rms and "mbarrier.md" in rms and "wgmma.md" not in rms
    assert notes_for(get_task("vector_add_smoke")) == ["header.md", "sync.md"]
    assert {p.name for p in NOTES_DIR.glob("*.md")} == set(NOTE_ORDER)


def test_every_family_has_a_hint() -> None:
    assert set(FAMILY_HINTS) == set(FAMILIES)


def test_header_note_states_what_ptxas_accepts() -> None:
    header = (NOTES_DIR / "header.md").read_text()
    assert "up to 9.5" in header and "`sm_90a` needs at least 8.0" in header and "`sm_100a`\n  at least 8.6" in header


def test_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown context level"):
        build_prompt(get_task("vector_add_smoke"), "expert")


def test_manifest_json_round_trips_every_expert_manifest() -> None:
    for path in Path(__file__).resolve().parents[1].glob("tasks/solutions/*/manifest.json"):
        data = json.loads(path.read_text())
        assert json.loads(manifest_json(data)) == data


def test_the_prompt_example_reply_shape_extracts() -> None:
    # What the prompt asks for (one ```ptx block plus one ```json manifest) is what extract accepts.
    folder = Path(__file__).resolve().parents[1] / "tasks" / "solutions" / "vector_add_smoke"
    reply = f"Kernel:\n```ptx\n{(folder / 'kernel.ptx').read_text()}```\n```json\n{(folder / 'manifest.json').read_text()}```\n"
    result = extract(reply)
    assert result.ok and result.candidate is not None and result.candidate.manifest is not None


def _fixed_task() -> TaskSpec:
    # A copy of a real spec with its data frozen here, so the digest pins the template and notes only.
    base = get_task("gemm_bf16_sm90a")
    return replace(base, id="digest_probe", title="probe", description="C = A · Bᵀ (probe).", arch="sm_90a",
                   families=("wgmma", "tma", "mbarrier"), baseline="cublas", input_distribution="normal",
                   inputs=(TensorSpec("A", ("M", "K"), "bf16"), TensorSpec("B", ("N", "K"), "bf16")),
                   outputs=(TensorSpec("C", ("M", "N"), "bf16"),), tolerance=Tolerance("rel_l2", 1e-2), params={},
                   train=({"M": 256, "N": 256, "K": 64},), heldout=({"M": 512, "N": 512, "K": 64},),
                   headline={"M": 256, "N": 256, "K": 64}, constraints=("M % 128 == 0",),
                   launch={"launches": [{"entry": "gemm", "grid": ["N // 128", "M // 128", 1], "block": [128, 1, 1],
                                         "args": ["A", "B", "C", "i32:M", "i32:N", "i32:K"]}]})


def test_prompt_text_is_pinned_by_its_version() -> None:
    h = hashlib.sha256()
    for level in CONTEXT_LEVELS:
        h.update(build_prompt(_fixed_task(), level).digest.encode())
    digest = h.hexdigest()[:16]
    assert PROMPT_VERSION in RECORDED, f"record the digest of {PROMPT_VERSION}: {digest}"
    assert RECORDED[PROMPT_VERSION] == digest, (
        f"the prompt text changed (digest {digest}): bump PROMPT_VERSION in tasks/prompts.py and record the new "
        "digest here; runs store the version, and a changed prompt under an old version would mix results")
