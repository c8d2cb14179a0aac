"""The generic-fallback finding: of the correct kernels, how many use what the task asked for and how
many fall back to generic code, and how fast each group is against the library.

Per model × device × arch × task × context level, over kernels (judged samples, every turn of every
trajectory), each speaking through the evaluation db/verdict.py picks:

- *correct*: correct at the train sizes and at the held-out sizes (`verdict.both` of the two facts);
- *families*: of those, every requested family is in the code (`verdict.uses`: the SASS verdict
  where the engine made one, else the PTX verdict);
- *generic*: correct without every requested family, the generic code the task did not ask for;
  of those, *earlier target*: the module's `.target` was an earlier architecture the GPU runs
  (`evidence.generic_target`, set by engine/assemble.py), the rest kept the task's target;
- shares are over the correct kernels whose use of the families is known; each group's speed is
  the geometric mean of its kernels' speedups over the library (headline size), over those timed.

A row with task `*` pools a model's tasks at one device, arch and level (where it has more than one).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ptxbench.db import verdict
from ptxbench.db.metrics import geometric_mean, sample_filter, samples_joined

SCHEMA = "ptxbench.fallback/1"
ALL_TASKS = "*"
NO_DEVICE = "no GPU"


@dataclass(frozen=True)
class FallbackRow:
    model: str
    device: str
    arch: str
    task: str
    context: str
    kernels: int  # judged samples
    correct: int  # correct at train and held-out sizes
    families: int  # correct, every requested family in the code
    generic: int  # correct, not every requested family
    earlier_target: int  # generic, with an earlier .target than the task's
    unknown: int  # correct, whether the families are used not known
    families_share: float | None  # of correct kernels whose use is known
    generic_share: float | None
    earlier_target_share: float | None
    families_geomean: float | None  # speedup over the library
    generic_geomean: float | None
    families_timed: int
    generic_timed: int
    targets: dict[str, int]  # the earlier targets seen, with their counts

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def flat(self) -> dict[str, Any]:
        """For CSV: the targets as `sm_80 ×2, sm_89 ×1`."""
        d = self.as_dict()
        d["targets"] = targets_written(self.targets)
        return d


def targets_written(targets: dict[str, int]) -> str:
    return ", ".join(f"{t} ×{n}" for t, n in sorted(targets.items()))


@dataclass
class _Kernel:
    correct: bool
    uses: verdict.Tri
    earlier: str | None
    speedup: float | None


def fallback(
    db: Any,
    *,
    tasks: Iterable[str] | None = None,
    models: Iterable[str] | None = None,
    archs: Iterable[str] | None = None,
    contexts: Iterable[str] | None = None,
    run_ids: Iterable[int] | None = None,
    include_reference: bool = False,
) -> list[FallbackRow]:
    where, params = sample_filter(tasks=tasks, models=models, archs=archs, contexts=contexts, run_ids=run_ids,
                                  include_reference=include_reference)
    rows = db.execute(
        f"""
        SELECT COALESCE(m.name, '(no model)'), CASE WHEN e.status = '{verdict.COMPLETE_STATUS}' THEN e.device END,
               t.arch, s.task_id,
               COALESCE(r.context_level, 'none'), e.category, e.correct, e.correct_heldout, e.uses_ptx, e.uses_sass,
               e.speedup, CASE WHEN json_valid(e.evidence) THEN json_extract(e.evidence, '$.generic_target') END
        {samples_joined(db)}
        {where}
        ORDER BY s.id
        """,
        params,
    ).fetchall()
    groups: dict[tuple[str, str, str, str, str], list[_Kernel]] = defaultdict(list)
    for model, device, arch, task, context, category, correct, heldout, uses_ptx, uses_sass, speedup, earlier in rows:
        both = verdict.both(verdict.fact(correct, category, "correct"), verdict.fact(heldout, category, "correct"))
        kernel = _Kernel(
            correct=both is True,
            uses=verdict.uses(verdict.fact(uses_ptx, category, "uses"), verdict.fact(uses_sass, category, "uses")),
            earlier=earlier if isinstance(earlier, str) and earlier else None,
            speedup=speedup if speedup and speedup > 0 else None,
        )
        # A correct kernel ran on a GPU, which its evaluation names; the rest join their task's row (_place_unrun).
        groups[(model, device or NO_DEVICE, arch, task, context)].append(kernel)
    _place_unrun(groups)
    pooled: dict[tuple[str, str, str, str, str], list[_Kernel]] = defaultdict(list)
    pooled_tasks: Counter[tuple[str, str, str, str, str]] = Counter()
    for (model, device, arch, _task, context), kernels in groups.items():
        pooled[(model, device, arch, ALL_TASKS, context)].extend(kernels)
        pooled_tasks[(model, device, arch, ALL_TASKS, context)] += 1
    out = [_row(key, kernels) for key, kernels in groups.items()]
    out += [_row(key, kernels) for key, kernels in pooled.items() if pooled_tasks[key] > 1]
    return sorted(out, key=lambda r: (r.model, r.device, r.arch, r.context, r.task == ALL_TASKS, r.task))


def _place_unrun(groups: dict[tuple[str, str, str, str, str], list[_Kernel]]) -> None:
    """A kernel judged without a GPU (it failed to assemble, say) joins the GPU row of its model, task and
    level when there is exactly one, so that a row's kernel count is what the model wrote there."""
    gpus: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
    for model, device, arch, task, context in groups:
        if device not in _NOT_A_GPU:
            gpus[(model, arch, task, context)].add(device)
    for key in [k for k in groups if k[1] in _NOT_A_GPU]:
        model, _device, arch, task, context = key
        found = gpus.get((model, arch, task, context), set())
        if len(found) == 1:
            groups[(model, next(iter(found)), arch, task, context)].extend(groups.pop(key))


_NOT_A_GPU = frozenset({NO_DEVICE, "cpu (static stages only)"})


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _row(key: tuple[str, str, str, str, str], kernels: list[_Kernel]) -> FallbackRow:
    correct = [k for k in kernels if k.correct]
    families = [k for k in correct if k.uses is True]
    generic = [k for k in correct if k.uses is False]
    earlier = [k for k in generic if k.earlier]
    known = len(families) + len(generic)
    fam_speeds = [k.speedup for k in families if k.speedup is not None]
    gen_speeds = [k.speedup for k in generic if k.speedup is not None]
    return FallbackRow(
        *key,
        kernels=len(kernels),
        correct=len(correct),
        families=len(families),
        generic=len(generic),
        earlier_target=len(earlier),
        unknown=len(correct) - known,
        families_share=_share(len(families), known),
        generic_share=_share(len(generic), known),
        earlier_target_share=_share(len(earlier), known),
        families_geomean=geometric_mean(fam_speeds),
        generic_geomean=geometric_mean(gen_speeds),
        families_timed=len(fam_speeds),
        generic_timed=len(gen_speeds),
        targets=dict(Counter(k.earlier for k in earlier if k.earlier)),
    )
