"""Choosing the pairs of a fine-tuning set: verified, deduplicated, balanced, split.

In order:

1. only pairs that count (`Pair.counts`): the fixed half passes the train
   sizes on a GPU (statically too with `allow_static`);
2. one pair per failed sample (the preferred one);
3. exact duplicates (same task, same normalised failed and fixed code) and
   near duplicates (same task, shingle Jaccard ≥ threshold of the failed
   code, *and* the same change: Jaccard ≥ threshold of the changed lines, or
   one line apart with a line in common) are dropped, the preferred copy kept;
4. the held-out split: whole tasks or variants held out (`heldout_tasks`,
   `heldout_variants` such as `causal` or `sm_100a`), and failures that show
   only at held-out problem sizes;
5. the leak guard: no near copy of a held-out task's kernels (failed or
   fixed) stays in training; for a pair held out because it fails only at
   held-out sizes, no training pair of its task makes the same fix to a near
   copy of its failed kernel (its fixed kernel, the task's train-size answer,
   may stay);
6. caps per task and per failure category, filled round-robin over the
   categories so that no category crowds out the others;
7. a validation split drawn by a stable hash.

Every dropped pair is kept with its reason (`Selection.dropped`).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ptxbench.fixit.normalize import (
    abstract_lines, content_key, could_reach, edit_signature, jaccard, normalize_ptx, shingles,
)
from ptxbench.fixit.records import GPU_VERIFIED, PAIR_KINDS, STATIC_ONLY, Pair

SPLITS: tuple[str, ...] = ("train", "val", "heldout")
EXPLANATION_RANK = ("model", "mutation", "derived")  # preferred explanation sources, best first


@dataclass(frozen=True)
class SelectConfig:
    cap_per_task: int | None = 200
    cap_per_category: int | None = 100
    val_fraction: float = 0.1
    heldout_tasks: tuple[str, ...] = ()
    heldout_variants: tuple[str, ...] = ()          # words of a task id or arch: causal, bwd, sm_100a …
    heldout_size_failures: bool = True              # failures seen only at held-out sizes go to held-out
    dedup_threshold: float = 0.9
    allow_static: bool = False
    one_per_failed: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if not 0.0 < self.dedup_threshold <= 1.0:
            raise ValueError(f"dedup_threshold must be in (0, 1], got {self.dedup_threshold}")
        for name in ("cap_per_task", "cap_per_category"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 (or None for no cap), got {value}")


def variant_tags(task_id: str, arch: str) -> frozenset[str]:
    """The words a held-out variant can name: the task id's parts and the arch, both spellings."""
    words = set(task_id.lower().split("_"))
    words |= {arch.lower(), arch.lower().replace("_", "")}
    for w in list(words):
        if w.startswith("sm") and not w.startswith("sm_"):
            words.add("sm_" + w[2:])
    return frozenset(words)


def heldout_reason(pair: Pair, config: SelectConfig) -> str | None:
    """Why a pair belongs to the held-out split, or None."""
    if pair.task_id in config.heldout_tasks:
        return f"task {pair.task_id}"
    tags = variant_tags(pair.task_id, pair.arch)
    for v in config.heldout_variants:
        if v.lower() in tags:
            return f"variant {v}"
    if pair.heldout_only:
        return "fails only at held-out sizes"
    return None


def explanation_rank(source: str | None) -> int:
    s = (source or "").lower()
    if s.startswith("model:"):
        return 0
    if "mutation" in s or s.startswith("written"):
        return 1
    return 2


@dataclass
class _Features:
    pair: Pair
    key: str
    failed_sh: frozenset[int]
    fixed_sh: frozenset[int]
    edit: frozenset[str]


def _features(pair: Pair) -> _Features:
    f, g = pair.failed, pair.fixed
    failed_text = f.code if f.language != "none" else (f.response or "")
    failed_norm, fixed_norm = normalize_ptx(failed_text, f.manifest), normalize_ptx(g.code, g.manifest)
    key = content_key(pair.task_id, failed_norm, fixed_norm)
    # What the fix changes is read with registers renumbered, not erased: a fix that only
    # renames a register (an undeclared one) is still a change.
    edit = edit_signature(failed_norm.split("\n"), fixed_norm.split("\n"))
    return _Features(pair, key, shingles(abstract_lines(failed_text, f.manifest)),
                     shingles(abstract_lines(g.code, g.manifest)), edit)


def _near(a: frozenset, b: frozenset, t: float) -> bool:
    return could_reach(len(a), len(b), t) and jaccard(a, b) >= t


def _near_edit(a: frozenset, b: frozenset, t: float) -> bool:
    """Two fixes make nearly the same change: Jaccard ≥ t, or they share a changed line and
    differ by a single one (edits are small sets, where one extra line would swing the
    Jaccard far below t)."""
    return _near(a, b, t) or (len(a ^ b) <= 1 and not a.isdisjoint(b))


def _contained(part: frozenset, whole: frozenset, t: float) -> bool:
    """At least a fraction t of `part` lies in `whole`."""
    if not part:
        return not whole
    return len(part & whole) / len(part) >= t


def _leak(f: _Features, held: _Features, reason: str, t: float) -> str | None:
    """How a training candidate `f` would leak the held-out pair `held`, or None.

    A task or variant held out keeps every near copy of its kernels (failed or fixed) out of
    training. A pair held out because it fails only at held-out sizes keeps its *bug* out: a
    near copy of its failed kernel whose fix makes (at least) the same change. Its fixed kernel
    may still be taught: it is the task's answer at the train sizes."""
    if reason.startswith("fails only"):
        if _near(f.failed_sh, held.failed_sh, t) and _contained(held.edit, f.edit, t):
            return f"makes the fix of held-out pair {held.pair.failed.id}→{held.pair.fixed.id} to a near copy of its kernel"
        return None
    for mine, name in ((f.failed_sh, "failed"), (f.fixed_sh, "fixed")):
        for theirs in (held.failed_sh, held.fixed_sh):
            if _near(mine, theirs, t):
                return f"its {name} kernel is a near copy of a kernel of held-out {held.pair.task_id} ({reason})"
    return None


def _leak_index(held: list[tuple[_Features, str]]) -> Any:
    """task id → the held-out pairs a training pair of that task could leak: a size-only held-out
    pair through its own task only, a held-out task or variant through any task."""
    by_task: dict[str, list[tuple[_Features, str]]] = defaultdict(list)
    everywhere: list[tuple[_Features, str]] = []
    for h, r in held:
        (by_task[h.pair.task_id] if r.startswith("fails only") else everywhere).append((h, r))
    return lambda task_id: by_task.get(task_id, []) + everywhere


def preference(pair: Pair) -> tuple:
    """Sort key: GPU-verified first, then the kind, then the explanation's source."""
    ver = {GPU_VERIFIED: 0, STATIC_ONLY: 1}.get(pair.verification, 2)
    kind = PAIR_KINDS.index(pair.kind) if pair.kind in PAIR_KINDS else len(PAIR_KINDS)
    return (ver, kind, explanation_rank(pair.explanation_source), pair.failed.id, pair.fixed.id)


@dataclass
class Selected:
    pair: Pair
    split: str
    key: str
    heldout_reason: str | None = None


@dataclass
class Selection:
    chosen: list[Selected] = field(default_factory=list)
    dropped: list[tuple[Pair, str]] = field(default_factory=list)   # (pair, reason)
    config: SelectConfig = field(default_factory=SelectConfig)

    def split(self, name: str) -> list[Selected]:
        return [s for s in self.chosen if s.split == name]

    def dropped_counts(self) -> dict[str, int]:
        return dict(Counter(reason.split(":")[0] for _, reason in self.dropped))


def _stable_fraction(key: str, seed: int) -> float:
    h = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def _cap(items: list[_Features], config: SelectConfig, dropped: list[tuple[Pair, str]]) -> list[_Features]:
    """Round-robin over categories, each in preference order, under both caps."""
    by_cat: dict[str, list[_Features]] = defaultdict(list)
    for it in items:
        by_cat[it.pair.category].append(it)
    queues = {cat: list(v) for cat, v in sorted(by_cat.items())}
    per_task: Counter[str] = Counter()
    per_cat: Counter[str] = Counter()
    kept: list[_Features] = []
    cap_t, cap_c = config.cap_per_task, config.cap_per_category
    while queues:
        for cat in list(queues):
            queue = queues[cat]
            while queue:
                it = queue.pop(0)
                if cap_t is not None and per_task[it.pair.task_id] >= cap_t:
                    dropped.append((it.pair, f"cap_per_task: {it.pair.task_id} has {cap_t}"))
                    continue
                kept.append(it)
                per_task[it.pair.task_id] += 1
                per_cat[cat] += 1
                break
            if cap_c is not None and per_cat[cat] >= cap_c:
                for it in queue:
                    dropped.append((it.pair, f"cap_per_category: {cat} has {cap_c}"))
                queue.clear()
            if not queue:
                del queues[cat]
    return kept


def select_pairs(pairs: Iterable[Pair], config: SelectConfig = SelectConfig()) -> Selection:
    out = Selection(config=config)
    t = config.dedup_threshold
    counted: list[Pair] = []
    for p in pairs:
        if not p.failed.failure:
            out.dropped.append((p, "not_failing: the failed half's latest verdict is a pass"))
        elif p.counts(allow_static=config.allow_static):
            counted.append(p)
        elif p.verification == STATIC_ONLY:
            out.dropped.append((p, "unverified: the fix passes statically only (no GPU evaluation)"))
        elif p.heldout_only and p.fixed.correct_heldout is not True:
            out.dropped.append((p, "fix_fails_heldout: the fix is not correct at the held-out sizes"))
        else:
            out.dropped.append((p, f"fix_not_passing: the fixed half is {p.verification}"))
    counted.sort(key=preference)

    if config.one_per_failed:
        seen_failed: set[int] = set()
        unique: list[Pair] = []
        for p in counted:
            if p.failed.id in seen_failed:
                out.dropped.append((p, "same_failed: another fix of this failed sample is preferred"))
            else:
                seen_failed.add(p.failed.id)
                unique.append(p)
        counted = unique

    feats: list[_Features] = []
    by_key: set[str] = set()
    by_task: dict[str, list[_Features]] = defaultdict(list)
    for p in counted:
        f = _features(p)
        if f.key in by_key:
            out.dropped.append((p, "duplicate: same normalised failed and fixed code as a kept pair"))
            continue
        twin = next((k for k in by_task[p.task_id] if _near(f.failed_sh, k.failed_sh, t) and _near_edit(f.edit, k.edit, t)),
                    None)
        if twin is not None:
            out.dropped.append((p, f"near_duplicate: of pair {twin.pair.failed.id}→{twin.pair.fixed.id}"))
            continue
        by_key.add(f.key)
        by_task[p.task_id].append(f)
        feats.append(f)

    held: list[tuple[_Features, str]] = []
    pool: list[_Features] = []
    for f in feats:
        reason = heldout_reason(f.pair, config)
        if reason == "fails only at held-out sizes" and not config.heldout_size_failures:
            out.dropped.append((f.pair, "heldout_only_failure: fails only at held-out sizes (not exported)"))
        elif reason is not None:
            held.append((f, reason))
        else:
            pool.append(f)

    against = _leak_index(held)
    clean: list[_Features] = []
    for f in pool:
        candidates = against(f.pair.task_id)
        why = next((w for h, r in candidates if (w := _leak(f, h, r, t))), None)
        if why:
            out.dropped.append((f.pair, f"leak: {why}"))
        else:
            clean.append(f)

    kept = _cap(clean, config, out.dropped)
    held_kept = _cap([f for f, _ in held], config, out.dropped)
    reasons = {id(f): r for f, r in held}

    n_val = 0
    if config.val_fraction > 0 and len(kept) >= 2:
        n_val = max(1, math.floor(len(kept) * config.val_fraction + 0.5))
        n_val = min(n_val, len(kept) - 1)
    order = sorted(kept, key=lambda f: _stable_fraction(f.key, config.seed))
    val_keys = {f.key for f in order[:n_val]}
    for f in kept:
        out.chosen.append(Selected(f.pair, "val" if f.key in val_keys else "train", f.key))
    for f in held_kept:
        out.chosen.append(Selected(f.pair, "heldout", f.key, reasons[id(f)]))
    return out


def leaks(selection: Selection, threshold: float = 0.9) -> list[str]:
    """Every way the held-out split shows up in train or val, by the rules of the leak guard
    (and by task id); empty when there is none."""
    problems: list[str] = []
    held = [(s, _features(s.pair)) for s in selection.split("heldout")]
    held_tasks = {s.pair.task_id for s, _ in held if not (s.heldout_reason or "").startswith("fails only")}
    against = _leak_index([(hf, s.heldout_reason or "") for s, hf in held])
    for s in selection.chosen:
        if s.split == "heldout":
            continue
        if s.pair.task_id in held_tasks:
            problems.append(f"{s.split} pair {s.pair.key} is of held-out task {s.pair.task_id}")
        mine = _features(s.pair)
        for hf, reason in against(s.pair.task_id):
            why = _leak(mine, hf, reason, threshold)
            if why:
                problems.append(f"{s.split} pair {s.pair.key}: {why}")
    return problems


def pairs_by_split(selection: Selection) -> dict[str, Sequence[Pair]]:
    return {name: [s.pair for s in selection.split(name)] for name in SPLITS}
