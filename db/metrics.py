"""Benchmark metrics from the store (DESIGN.md, "Metrics").

The unit is a *trajectory*: a first-turn sample and the turns that follow it
(`parent_id` chains). A single-turn sample is a trajectory of one. Each sample
speaks through the evaluation db/verdict.py picks (a complete judgement
before a partial one, then the newest engine version); samples never judged
are left out.

Within a turn budget T a trajectory has a property if any of its first T
turns has it (T = None: all its turns). Its speedup is the best speedup of its
correct turns within the budget.

Every per-sample fact is three-valued, as db/verdict.py defines it once for
every view and count (`verdict.fact`, `verdict.uses`, `verdict.fast`). A NULL
column means "not reached" when the evaluation's category failed at an
earlier stage (then the fact is false: a kernel that did not assemble is not
correct) and "not measured" otherwise
(a `skipped: no sm_100a device` or static-only judgement): unknown, which is
neither a failure nor a pass. A rate is true / known, and None when nothing
is known. "Uses what was asked" follows the explorer: the SASS verdict where
the engine made one (it implies the PTX one), else the PTX verdict.

Splits: `train` uses `evaluations.correct` and the headline `speedup`;
`heldout` uses `correct_heldout` and the geometric mean of the held-out
measurements' speedups.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlite_utils

from ptxbench.db import verdict

FAST_P: tuple[float, ...] = (0.0, 1.0, 1.5)
TURN_BUDGETS: tuple[int, ...] = (1, 4, 8)
PASS_K: tuple[int, ...] = (1, 5, 10)
GROUP_KEYS: tuple[str, ...] = ("task", "model", "arch", "context", "split", "turns")
SPLITS: tuple[str, ...] = verdict.SPLITS
# Rows that are not model output: the expert solutions and the mutations made from them.
REFERENCE_KINDS: tuple[str, ...] = ("expert", "mutation")

Tri = verdict.Tri


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 − C(n−c, k) / C(n, k),
    computed as 1 − ∏_{i=n−c+1}^{n} (1 − k/i), which never forms the huge binomials."""
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    survive = 1.0
    for i in range(n - c + 1, n + 1):
        survive *= 1.0 - k / i
    return 1.0 - survive


def geometric_mean(values: Iterable[float]) -> float | None:
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


@dataclass(frozen=True)
class MetricsRow:
    """One group's metrics. A group key is None when the rows were not split by it
    (all values pooled); `turn_budget` None means every turn counts."""

    task: str | None
    model: str | None
    arch: str | None
    context: str | None
    split: str
    turn_budget: int | None
    trajectories: int            # units counted (judged trajectories)
    samples: int                 # judged samples within the budget
    judged: int                  # trajectories whose correctness is known
    timed: int                   # trajectories with a correct, timed turn
    compile_rate: float | None
    correct_rate: float | None
    uses_ptx_rate: float | None
    uses_sass_rate: float | None
    executed_rate: float | None
    uses_rate: float | None      # uses every requested family (SASS verdict, else PTX)
    correct_and_uses_rate: float | None
    fast: dict[float, float | None]   # p → fast_p: correct, uses what was asked, speedup > p
    geomean_speedup: float | None     # over correct trajectories with a speedup
    best_speedup: float | None
    pass_at: dict[int, float | None]  # k → pass@k (success = correct and uses), mean over task×model×context cells with n ≥ k

    def as_dict(self) -> dict[str, Any]:
        """Flat, JSON/CSV-ready: fast_0, fast_1, fast_1.5, pass@1 …"""
        d = asdict(self)
        fast = d.pop("fast")
        passes = d.pop("pass_at")
        for p, v in fast.items():
            d[f"fast_{p:g}"] = v
        for k, v in passes.items():
            d[f"pass@{k}"] = v
        return d


@dataclass
class _Turn:
    turn: int
    compiled: Tri
    uses_ptx: Tri
    uses_sass: Tri
    executed: Tri
    executed_measured: bool          # the executed column was filled (Nsight Compute ran)
    correct: dict[str, Tri]
    speedup: dict[str, float | None]


@dataclass
class _Trajectory:
    task: str
    model: str
    arch: str
    context: str
    turns: list[_Turn] = field(default_factory=list)


_and = verdict.both


def _any(values: Iterable[Tri]) -> Tri:
    seen_unknown = False
    for v in values:
        if v is True:
            return True
        if v is None:
            seen_unknown = True
    return None if seen_unknown else False


def _uses(t: _Turn) -> Tri:
    return verdict.uses(t.uses_ptx, t.uses_sass)


def _fast(t: _Turn, split: str, p: float) -> Tri:
    return verdict.fast(t.correct[split], _uses(t), t.speedup[split], p)


def _rate(values: Sequence[Tri]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _in_list(column: str, values: Iterable[Any] | None, params: list[Any]) -> str:
    if values is None:
        return ""
    params.append(json.dumps(list(values)))
    return f" AND {column} IN (SELECT value FROM json_each(?))"


def samples_joined(db: Any) -> str:
    """FROM samples s with their task t, run r, model m and the evaluation e that speaks (db/verdict.py)."""
    return (
        "FROM samples s JOIN tasks t ON t.id = s.task_id LEFT JOIN runs r ON r.id = s.run_id "
        "LEFT JOIN models m ON m.id = COALESCE(s.model_id, r.model_id) "
        f"LEFT JOIN evaluations e ON e.id = {verdict.shown_for(db)}"
    )


def sample_filter(
    *,
    tasks: Iterable[str] | None,
    models: Iterable[str] | None,
    archs: Iterable[str] | None,
    contexts: Iterable[str] | None,
    run_ids: Iterable[int] | None,
    include_reference: bool,
) -> tuple[str, list[Any]]:
    """The WHERE clause (over samples s, tasks t, runs r, models m and the speaking evaluation e) and its
    parameters: judged samples of these tasks, models, archs, levels and runs; no reference rows unless asked."""
    params: list[Any] = []
    where = "WHERE e.id IS NOT NULL"
    where += _in_list("s.task_id", tasks, params)
    where += _in_list("m.name", models, params)
    where += _in_list("t.arch", archs, params)
    where += _in_list("COALESCE(r.context_level, 'none')", contexts, params)
    where += _in_list("s.run_id", run_ids, params)
    if not include_reference:
        params.append(json.dumps(list(REFERENCE_KINDS)))
        where += " AND COALESCE(m.kind, '') NOT IN (SELECT value FROM json_each(?))"
    return where, params


def _load(
    db: sqlite_utils.Database,
    *,
    tasks: Iterable[str] | None,
    models: Iterable[str] | None,
    archs: Iterable[str] | None,
    contexts: Iterable[str] | None,
    run_ids: Iterable[int] | None,
    include_reference: bool,
) -> list[_Trajectory]:
    where, params = sample_filter(tasks=tasks, models=models, archs=archs, contexts=contexts, run_ids=run_ids,
                                  include_reference=include_reference)
    rows = db.execute(
        f"""
        SELECT s.id, s.parent_id, s.turn, s.task_id, t.arch, COALESCE(m.name, '(no model)'),
               COALESCE(r.context_level, 'none'), e.id, e.category, e.compiled, e.correct,
               e.correct_heldout, e.uses_ptx, e.uses_sass, e.executed, e.speedup
        {samples_joined(db)}
        {where}
        ORDER BY s.id
        """,
        params,
    ).fetchall()
    if not rows:
        return []
    heldout: dict[int, list[float]] = defaultdict(list)
    for eval_id, speed in db.execute(
        f"""
        SELECT me.evaluation_id, me.speedup FROM measurements me
        JOIN (SELECT {verdict.shown_for(db)} AS id FROM samples s) shown ON shown.id = me.evaluation_id
        WHERE me.split = 'heldout' AND me.speedup > 0
        """
    ):
        heldout[eval_id].append(speed)
    parents = dict(db.execute("SELECT id, parent_id FROM samples WHERE parent_id IS NOT NULL").fetchall())

    def root(sample_id: int) -> int:
        seen = {sample_id}
        while sample_id in parents and parents[sample_id] not in seen:
            sample_id = parents[sample_id]
            seen.add(sample_id)
        return sample_id

    trajectories: dict[int, _Trajectory] = {}
    for (sid, _parent, turn, task, arch, model, context, eval_id, category, compiled, correct,
         correct_heldout, uses_ptx, uses_sass, executed, speedup) in rows:
        key = root(sid)
        traj = trajectories.get(key)
        if traj is None:
            traj = trajectories[key] = _Trajectory(task=task, model=model, arch=arch, context=context)
        traj.turns.append(
            _Turn(
                turn=turn,
                compiled=verdict.fact(compiled, category, "compiled"),
                uses_ptx=verdict.fact(uses_ptx, category, "uses"),
                uses_sass=verdict.fact(uses_sass, category, "uses"),
                executed=verdict.fact(executed, category, "executed"),
                executed_measured=executed is not None,
                correct={"train": verdict.fact(correct, category, "correct"),
                         "heldout": verdict.fact(correct_heldout, category, "correct")},
                speedup={"train": speedup if speedup and speedup > 0 else None,
                         "heldout": geometric_mean(heldout.get(eval_id, ()))},
            )
        )
    return list(trajectories.values())


def compute_metrics(
    db: sqlite_utils.Database,
    *,
    group_by: Sequence[str] = ("task", "model"),
    split: str = "train",
    turn_budget: int | None = None,
    turn_budgets: Sequence[int] = TURN_BUDGETS,
    fast_p: Sequence[float] = FAST_P,
    ks: Sequence[int] = PASS_K,
    tasks: Iterable[str] | None = None,
    models: Iterable[str] | None = None,
    archs: Iterable[str] | None = None,
    contexts: Iterable[str] | None = None,
    run_ids: Iterable[int] | None = None,
    include_reference: bool = False,
) -> list[MetricsRow]:
    """Metrics grouped by any of GROUP_KEYS. With "split" in `group_by` every group
    gets a train and a held-out row, else `split` picks one; with "turns" every
    group gets a row per budget in `turn_budgets`, else `turn_budget` applies.
    Expert and mutation rows are left out unless `include_reference`."""
    unknown = [g for g in group_by if g not in GROUP_KEYS]
    if unknown:
        raise ValueError(f"cannot group by {', '.join(unknown)} (choose from {', '.join(GROUP_KEYS)})")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    trajectories = _load(db, tasks=tasks, models=models, archs=archs, contexts=contexts,
                         run_ids=run_ids, include_reference=include_reference)
    splits = SPLITS if "split" in group_by else (split,)
    budgets: Sequence[int | None] = tuple(turn_budgets) if "turns" in group_by else (turn_budget,)

    groups: dict[tuple, list[_Trajectory]] = defaultdict(list)
    for traj in trajectories:
        key = tuple(getattr(traj, g) if g in group_by else None for g in ("task", "model", "arch", "context"))
        groups[key].append(traj)

    rows = []
    for key in sorted(groups, key=lambda k: tuple("" if v is None else v for v in k)):
        for sp in splits:
            for budget in budgets:
                row = _group_row(groups[key], sp, budget, fast_p, ks)
                if row is not None:
                    rows.append(MetricsRow(*key, split=sp, turn_budget=budget, **row))
    return rows


def _group_row(
    trajectories: list[_Trajectory], split: str, budget: int | None, fast_p: Sequence[float], ks: Sequence[int]
) -> dict[str, Any] | None:
    compiled, correct, uses_ptx, uses_sass, executed, uses, cu = [], [], [], [], [], [], []
    fast: dict[float, list[Tri]] = {p: [] for p in fast_p}
    best: list[float] = []
    cells: dict[tuple[str, str, str], list[Tri]] = defaultdict(list)
    n_samples = 0
    executed_measured = False
    for traj in trajectories:
        turns = [t for t in traj.turns if budget is None or t.turn <= budget]
        if not turns:
            continue
        n_samples += len(turns)
        compiled.append(_any(t.compiled for t in turns))
        correct.append(_any(t.correct[split] for t in turns))
        uses_ptx.append(_any(t.uses_ptx for t in turns))
        uses_sass.append(_any(t.uses_sass for t in turns))
        executed.append(_any(t.executed for t in turns))
        executed_measured = executed_measured or any(t.executed_measured for t in turns)
        uses.append(_any(_uses(t) for t in turns))
        solved = _any(_and(t.correct[split], _uses(t)) for t in turns)
        cu.append(solved)
        cells[(traj.task, traj.model, traj.context)].append(solved)
        for p in fast_p:
            fast[p].append(_any(_fast(t, split, p) for t in turns))
        speeds = [t.speedup[split] for t in turns if t.correct[split] is True and t.speedup[split] is not None]
        if speeds:
            best.append(max(speeds))
    if not compiled:
        return None
    pass_at: dict[int, float | None] = {}
    for k in ks:
        values = []
        for outcomes in cells.values():
            known = [v for v in outcomes if v is not None]
            if len(known) >= k:
                values.append(pass_at_k(len(known), sum(known), k))
        pass_at[k] = sum(values) / len(values) if values else None
    return dict(
        trajectories=len(compiled),
        samples=n_samples,
        judged=sum(v is not None for v in correct),
        timed=len(best),
        compile_rate=_rate(compiled),
        correct_rate=_rate(correct),
        uses_ptx_rate=_rate(uses_ptx),
        uses_sass_rate=_rate(uses_sass),
        # Nsight Compute is optional: with no measurement at all, a rate built only
        # from kernels that never ran would read as "0% executed".
        executed_rate=_rate(executed) if executed_measured else None,
        uses_rate=_rate(uses),
        correct_and_uses_rate=_rate(cu),
        fast={p: _rate(v) for p, v in fast.items()},
        geomean_speedup=geometric_mean(best),
        best_speedup=max(best) if best else None,
        pass_at=pass_at,
    )
