"""The corpus itself: the table is complete and consistent, and every GPU case is a candidate
that gets through the static stages (real ptxas) and the manifest checks to the GPU, so that its
run on the GPU machine tests what it says it tests."""

from __future__ import annotations

import re

import pytest
from hostile_cases import GENERATORS, HERE, STAGES, cases, load_cases

from ptxbench.engine.assemble import assemble
from ptxbench.engine.categories import CATEGORIES, OK
from ptxbench.engine.extract import load_candidate_file
from ptxbench.engine.inspect import disassemble
from ptxbench.engine.pipeline import plan_sizes
from ptxbench.tasks.spec import get_task, task_ids

ALL = load_cases()
GPU = cases("gpu")
DOC = HERE.parents[1] / "docs" / "hostile.md"


def test_the_table_is_complete_and_consistent():
    assert len(ALL) >= 40
    ids = [c.id for c in ALL]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    for c in ALL:
        assert c.stage in STAGES, c.id
        assert c.expect == OK or c.expect in CATEGORIES, (c.id, c.expect)
        assert c.task in task_ids(), (c.id, c.task)
        assert c.tries.strip(), c.id
        assert (c.file is None) != (c.make is None), f"{c.id}: give `file` or `make`, not both"
        if c.file is not None:
            assert (HERE / c.file).is_file(), c.file
        if c.make is not None or c.make_manifest is not None:
            assert (c.make or c.make_manifest) in GENERATORS, c.id
        if c.manifest is not None:
            assert (HERE / c.manifest).is_file(), c.manifest
        if c.sizes is not None:
            names = set(get_task(c.task).size_names())
            assert all(split in ("train", "heldout") and set(s) == names for split, s in c.sizes), c.id


def test_every_data_file_belongs_to_a_case():
    used = {c.file for c in ALL} | {c.manifest for c in ALL}
    on_disk = {str(p.relative_to(HERE)) for folder in ("static", "gpu") for p in (HERE / folder).iterdir()}
    assert on_disk - used == set(), "files no case uses"


def test_the_gpu_cases_cover_what_the_issue_lists():
    wanted = {"hang_timeout", "illegal_address", "misaligned_address", "out_of_bounds_write", "unwritten_output",
              "nan_inf", "wrong_result", "input_modified", "suspected_reward_hack"}
    assert wanted <= {c.expect for c in GPU}
    # The launches the driver refuses (.maxntid, shared memory over the limit) are known before any
    # launch now (engine/launch_check.py): static cases, judged in CI.
    assert {"maxntid_64", "shared_over_limit"} <= {c.id for c in ALL if c.stage == "static"}


def test_the_note_lists_every_case():
    text = DOC.read_text()
    rows = set(re.findall(r"^\| `?([a-z0-9_]+)`? \|", text, re.M))
    assert {c.id for c in ALL} <= rows, sorted({c.id for c in ALL} - rows)


@pytest.mark.parametrize("case", GPU, ids=[c.id for c in GPU])
def test_gpu_case_reaches_the_gpu(case, asm_cache):
    """Assembles with the wheel's ptxas, and every size it runs at resolves to a launch whose
    arguments fit the kernel: its category can only come from running it. (Inspection, which
    adds cuobjdump's time, runs with the case on the GPU machine.)"""
    task = get_task(case.task)
    loaded = load_candidate_file(HERE / case.file, HERE / case.manifest if case.manifest else None)
    assert loaded.ok and loaded.candidate is not None, loaded.evidence
    asm = assemble(loaded.candidate.code, loaded.candidate.language, task.arch, cache=asm_cache)
    assert asm.ok and asm.cubin, (asm.category, asm.evidence, asm.log[-2000:])
    plans, decided = plan_sizes(loaded.candidate, task, asm.ptx, 132,
                                sizes=list(case.sizes) if case.sizes else [("train", {"N": 65536})])
    assert not decided, [(m.category, m.message) for m in decided]
    assert plans


SASS_CHECKED = [c for c in GPU if c.sass]


@pytest.mark.parametrize("case", SASS_CHECKED, ids=[c.id for c in SASS_CHECKED])
def test_the_hostile_operation_survives_ptxas(case, asm_cache):
    """ptxas removes what it can prove useless (a first version of misaligned_vector_load lost its
    vector load that way and would have passed as correct): the machine code must still hold it."""
    loaded = load_candidate_file(HERE / case.file, HERE / case.manifest if case.manifest else None)
    assert loaded.ok and loaded.candidate is not None, loaded.evidence
    asm = assemble(loaded.candidate.code, loaded.candidate.language, get_task(case.task).arch, cache=asm_cache)
    assert asm.cubin is not None, asm.evidence
    sass = disassemble(asm.cubin, cache=asm_cache)
    for pattern, count in case.sass.items():
        found = len(re.findall(pattern, sass))
        assert found >= count, f"{case.id}: {pattern!r} {found} times in the SASS (want {count})"


def test_the_timed_cases_run_at_the_headline_size():
    """Reward hacks show up in timing, which runs at the headline size (of the case's own task) only."""
    for c in GPU:
        if c.expect == "suspected_reward_hack":
            headline = get_task(c.task).headline
            assert c.sizes and any(dict(s) == dict(headline) for _, s in c.sizes), c.id
