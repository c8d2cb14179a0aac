"""Finding fix pairs among judged samples: a failed sample and one that fixes it.

For each failed sample, in order of preference:

- `later_turn`: the first passing later turn of its own trajectory (the turns
  that follow it through `parent_id`);
- `same_model`: a passing sample of the same model and task from another
  trajectory, the most similar one (shingle Jaccard of the normalised PTX);
- `expert`: the task's expert solution.

Repairs made by another model (`repair`) and recorded pairs (`mutation`,
`recorded`) come from the store's fixes. A pair *counts* only when its fixed
half passes the engine on the train sizes (see `Pair.counts`); the others are
reported as unverified, never silently dropped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ptxbench.fixit.normalize import abstract_lines, jaccard, shingles
from ptxbench.fixit.records import GPU_VERIFIED, PAIR_KINDS, STATIC_ONLY, FixitSample, Pair

AUTO_KINDS: tuple[str, ...] = ("later_turn", "same_model", "expert")
REFERENCE_KINDS = frozenset({"expert", "mutation"})
MAX_SIMILARITY_CANDIDATES = 24  # same-model partners compared per failed sample
# The `source` a pair made here is stored with; `kind_of` reads it back.
SOURCE_PREFIX = "fixit pairs: "
REPAIR_SOURCE_PREFIX = "fixit repair: "


@dataclass
class Proposals:
    """What pairing found: pairs that count, and pairs held back with the reason."""

    pairs: list[Pair] = field(default_factory=list)
    unverified: list[Pair] = field(default_factory=list)   # fixed half passes statically only
    failed_without_fix: list[int] = field(default_factory=list)
    already_stored: int = 0

    def summary(self) -> dict[str, int]:
        return {"pairs": len(self.pairs), "unverified": len(self.unverified),
                "failed_without_fix": len(self.failed_without_fix), "already_stored": self.already_stored}


def _rank(s: FixitSample) -> int:
    return {GPU_VERIFIED: 0, STATIC_ONLY: 1}.get(s.verification, 9)


def _usable(s: FixitSample, allow_static: bool) -> bool:
    return s.verification == GPU_VERIFIED or (allow_static and s.verification == STATIC_ONLY)


def _passes(s: FixitSample) -> bool:
    return s.verification in (GPU_VERIFIED, STATIC_ONLY)


def descendants(sample: FixitSample, children: dict[int, list[FixitSample]]) -> list[FixitSample]:
    """The later turns of a sample's trajectory, nearest first."""
    out: list[FixitSample] = []
    frontier = sorted(children.get(sample.id, []), key=lambda s: (s.turn, s.id))
    seen = {sample.id}
    while frontier:
        nxt: list[FixitSample] = []
        for s in frontier:
            if s.id in seen:
                continue  # a cycle in hand-made data must not loop forever
            seen.add(s.id)
            out.append(s)
            nxt.extend(children.get(s.id, []))
        frontier = sorted(nxt, key=lambda s: (s.turn, s.id))
    return out


def trajectory_root(sample: FixitSample, by_id: dict[int, FixitSample]) -> int:
    seen: set[int] = set()
    s = sample
    while s.parent_id is not None and s.parent_id in by_id and s.id not in seen:
        seen.add(s.id)
        s = by_id[s.parent_id]
    return s.id


def propose_pairs(
    samples: Sequence[FixitSample],
    *,
    existing: Iterable[tuple[int, int]] = (),
    kinds: Sequence[str] = AUTO_KINDS,
    allow_static: bool = False,
    marked_only: bool = False,
    one_per_failed: bool = True,
) -> Proposals:
    """Pairs for every failed sample among `samples` (which must include the candidates for the
    fixed half: later turns, other samples of the model, the experts)."""
    unknown = [k for k in kinds if k not in AUTO_KINDS]
    if unknown:
        raise ValueError(f"unknown pair kind(s) {', '.join(unknown)}; pairing finds {', '.join(AUTO_KINDS)}")
    stored = set(existing)
    by_id = {s.id: s for s in samples}
    children: dict[int, list[FixitSample]] = defaultdict(list)
    for s in samples:
        if s.parent_id is not None:
            children[s.parent_id].append(s)
    experts: dict[str, list[FixitSample]] = defaultdict(list)
    by_model_task: dict[tuple[str, str], list[FixitSample]] = defaultdict(list)
    for s in samples:
        if s.model_kind == "expert":
            experts[s.task_id].append(s)
        elif s.model is not None and s.model_kind not in REFERENCE_KINDS and _passes(s):
            by_model_task[(s.model, s.task_id)].append(s)
    for group in experts.values():
        group.sort(key=lambda s: (_rank(s), -s.id))
    shingle_cache: dict[int, frozenset[int]] = {}

    def sh(s: FixitSample) -> frozenset[int]:
        if s.id not in shingle_cache:
            shingle_cache[s.id] = shingles(abstract_lines(s.code, s.manifest))
        return shingle_cache[s.id]

    out = Proposals()
    for failed in sorted(samples, key=lambda s: s.id):
        if not failed.failure or (marked_only and not failed.fixit_marked):
            continue
        if failed.model_kind == "expert":
            continue  # a failing expert is a bug report, not training data
        found: list[Pair] = []
        if "later_turn" in kinds:
            for later in descendants(failed, children):
                if _passes(later):
                    found.append(Pair(failed, later, "later_turn", source=SOURCE_PREFIX + "later_turn"))
                    break
        if "same_model" in kinds and failed.model is not None and failed.model_kind not in REFERENCE_KINDS:
            root = trajectory_root(failed, by_id)
            partners = [s for s in by_model_task.get((failed.model, failed.task_id), [])
                        if s.id != failed.id and trajectory_root(s, by_id) != root]
            if partners:
                partners.sort(key=lambda s: (_rank(s), -s.id))
                partners = partners[:MAX_SIMILARITY_CANDIDATES]
                best = max(partners, key=lambda s: (-_rank(s), jaccard(sh(failed), sh(s)), -s.id))
                found.append(Pair(failed, best, "same_model", source=SOURCE_PREFIX + "same_model"))
        if "expert" in kinds and experts.get(failed.task_id):
            found.append(Pair(failed, experts[failed.task_id][0], "expert", source=SOURCE_PREFIX + "expert"))

        found.sort(key=lambda p: (_rank(p.fixed), PAIR_KINDS.index(p.kind)))
        if one_per_failed:
            found = found[:1]
        if not found:
            out.failed_without_fix.append(failed.id)
        for pair in found:
            if pair.key in stored:
                out.already_stored += 1
            elif pair.counts(allow_static=allow_static):
                out.pairs.append(pair)
            elif _passes(pair.fixed):
                out.unverified.append(pair)
            else:
                out.failed_without_fix.append(failed.id)
    return out


def kind_of(source: str, failed: FixitSample, fixed: FixitSample) -> str:
    """The kind of a stored pair: from its source when Fixit made it, else from its two samples."""
    if source.startswith(SOURCE_PREFIX):
        kind = source[len(SOURCE_PREFIX):].split()[0] if source[len(SOURCE_PREFIX):].strip() else ""
        if kind in PAIR_KINDS:
            return kind
    if source.startswith(REPAIR_SOURCE_PREFIX):
        return "repair"
    if failed.model_kind == "mutation":
        return "mutation"
    if (fixed.run_id is not None and fixed.run_id == failed.run_id and fixed.sample_index == failed.sample_index
            and fixed.turn > failed.turn):
        return "later_turn"
    if fixed.model_kind == "expert":
        return "expert"
    if failed.model is not None and failed.model == fixed.model:
        return "same_model"
    return "recorded"
