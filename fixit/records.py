"""The records Fixit works on: a sample with its latest judgement, and a pair.

They are plain dataclasses filled by `ptxbench.db.fixit` (or by hand in
tests), so pairing, explaining and exporting need no database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ptxbench.engine.categories import CORRECT, OK, STAGE_OF, worst

# A verdict that counts as a pass on train sizes: correct (and, for `ok`, fast).
PASSING: frozenset[str] = CORRECT

# Where the fixed half of a pair came from, in order of preference when one
# failed sample has several: the model's own later turn teaches the most.
PAIR_KINDS: tuple[str, ...] = ("later_turn", "repair", "same_model", "mutation", "expert", "recorded")

# How far the fixed half is known to pass.
GPU_VERIFIED = "gpu"          # its latest evaluation is correct on the train sizes
STATIC_ONLY = "static"        # assembles and uses what was asked, never run (no GPU here)
NOT_PASSING = "failed"        # its latest evaluation is not a pass
UNJUDGED = "unjudged"         # never evaluated


@dataclass
class SizeResult:
    """One problem size's outcome (a `measurements` row, trimmed)."""

    split: str                                 # train | heldout
    sizes: dict[str, int]
    category: str
    max_rel_err: float | None = None


@dataclass
class FixitSample:
    """A candidate and its latest evaluation, as Fixit needs them."""

    id: int
    task_id: str
    arch: str
    language: str                              # ptx | cuda | none
    code: str
    manifest: dict[str, Any] | None = None
    response: str | None = None                # the raw reply, kept for samples with no code (language none)
    source: str = ""
    model: str | None = None
    model_kind: str | None = None              # model | import | expert | mutation | synthetic
    run_id: int | None = None
    context_level: str = "none"
    turn: int = 1
    parent_id: int | None = None
    sample_index: int = 0
    created_at: str = ""
    # latest evaluation (None when never judged)
    evaluation_id: int | None = None
    status: str | None = None                  # judged | static | "skipped: …"
    category: str | None = None
    compiled: bool | None = None
    correct: bool | None = None
    correct_heldout: bool | None = None
    uses_ptx: bool | None = None
    uses_sass: bool | None = None
    device: str | None = None
    evaluation_source: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    assembler_log: str | None = None
    required_missing: list[str] = field(default_factory=list)
    ptx_families: list[str] = field(default_factory=list)
    sizes: list[SizeResult] = field(default_factory=list)
    # a person's triage, beside the automatic category
    label_category: str | None = None
    fixit_marked: bool = False
    # the feedback a model run would have shown for this judgement (filled by the CLI when available)
    feedback: str | None = None

    @property
    def judged(self) -> bool:
        return self.evaluation_id is not None and self.category is not None

    @property
    def stage(self) -> str | None:
        return STAGE_OF.get(self.category or "")

    @property
    def train_failure(self) -> bool:
        """Its latest verdict is a failure word of the vocabulary (not a pass, not a skip)."""
        return self.judged and self.category in STAGE_OF and self.category not in PASSING

    @property
    def heldout_failure(self) -> bool:
        """Correct on every train size but not on the held-out sizes: a failure to generalise."""
        return (self.judged and self.category in PASSING and self.correct is True
                and self.correct_heldout is False)

    @property
    def failure(self) -> bool:
        return self.train_failure or self.heldout_failure

    @property
    def balance_category(self) -> str:
        """The category used for caps and statistics: a person's label where there is one."""
        if self.label_category and self.label_category != OK:
            return self.label_category
        if self.heldout_failure:
            return _heldout_category(self)
        return self.category or "unjudged"

    @property
    def verification(self) -> str:
        """How far this sample is known to pass, as the fixed half of a pair."""
        if not self.judged:
            return UNJUDGED
        if self.category in PASSING and self.correct is True:
            return GPU_VERIFIED
        if self.category == OK and self.correct is None and self.status != "judged":
            # static-only or "skipped: no sm_90a device": assembles and uses what was asked, never ran
            return STATIC_ONLY
        return NOT_PASSING

    def train_sizes(self) -> list[SizeResult]:
        return [s for s in self.sizes if s.split == "train"]

    def heldout_sizes(self) -> list[SizeResult]:
        return [s for s in self.sizes if s.split == "heldout"]


def _heldout_category(s: FixitSample) -> str:
    bad = [m.category for m in s.heldout_sizes() if m.category not in PASSING and m.category in STAGE_OF]
    if bad:
        return worst(bad)
    return "wrong_result"


@dataclass
class Pair:
    """A failed sample and a sample that fixes it, with why."""

    failed: FixitSample
    fixed: FixitSample
    kind: str                                  # one of PAIR_KINDS
    explanation: str | None = None
    explanation_source: str | None = None      # "written with the mutation", "model:NAME", "derived from diff"
    fix_id: int | None = None                  # the `fixes` row, once stored
    source: str = ""

    @property
    def task_id(self) -> str:
        return self.failed.task_id

    @property
    def arch(self) -> str:
        return self.failed.arch

    @property
    def category(self) -> str:
        return self.failed.balance_category

    @property
    def verification(self) -> str:
        return self.fixed.verification

    @property
    def heldout_only(self) -> bool:
        """The failure shows only at held-out sizes."""
        return not self.failed.train_failure and self.failed.heldout_failure

    @property
    def key(self) -> tuple[int, int]:
        return (self.failed.id, self.fixed.id)

    def counts(self, *, allow_static: bool = False) -> bool:
        """A pair counts when its failed half fails and its fixed half passes the train sizes
        (on a GPU; with `allow_static`, statically too). A held-out failure's fix must also
        pass the held-out sizes."""
        if not self.failed.failure:
            return False
        ok = self.verification == GPU_VERIFIED or (allow_static and self.verification == STATIC_ONLY)
        if ok and self.heldout_only:
            ok = self.fixed.correct_heldout is True
        return ok
