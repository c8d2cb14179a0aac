"""The static half of the hostile corpus: every case lands in its category, fast, and nothing a
candidate holds runs on or leaks from the judging machine."""

from __future__ import annotations

import pytest
from hostile_cases import cases, judge_static_case

from ptxbench.engine.categories import is_category

STATIC = cases("static")


@pytest.mark.parametrize("case", STATIC, ids=[c.id for c in STATIC])
def test_static_case(case, workdir, asm_cache, record):
    outcome, verdict = judge_static_case(case, workdir, asm_cache)
    record(outcome)
    assert is_category(outcome.category)
    assert not outcome.problems, outcome.problems
    assert outcome.category == case.expect, (outcome.category, outcome.detail, verdict.extract_evidence)
    if outcome.category != "ok":
        # A failure says why, in words a person can act on.
        assert outcome.detail.strip(), f"{case.id}: {outcome.category} with no evidence"
