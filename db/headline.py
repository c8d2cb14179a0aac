"""The headline table: one row per model × arch × task × context level × turn budget.

The question the paper answers, over what the store holds (`ptxbench report --headline`, the
explorer's Plots view). Units are trajectories as in db/metrics.py (a first turn and the turns
that follow it; an agent episode's kernel is a trajectory of one sample whose turn is the reply it
was submitted on), each sample speaking through the evaluation db/verdict.py picks. Within a
budget T a trajectory counts its turns up to T; one with no turn by then (an agent that submitted
later) counts as failing every question at T.

Budgets: 1, 4 and 8, cut at the run's own budget (its `turns`, else the last turn stored), which
is added when it is not one of them — a 3-turn run gets rows at 1 and 3.

Columns (a rate is over trajectories whose fact is known; `None` where none is):

- compile; correct at train sizes and, apart, at held-out sizes;
- correct with every requested family in the SASS (`uses_sass`), and also executed where Nsight
  Compute measured it;
- fast₁.₀ and fast₁.₂: correct, every family in the SASS, and faster than the library by that;
- best speedup and its fraction of the speed of light, over correct trajectories;
- geometric-mean speedup over correct trajectories, and the mean speedup over all of them with a
  failure counted as 0 (a geometric mean with a 0 in it is 0, which says nothing more);
- pass@1 and pass@k (k = 5), success = correct with every family in the SASS;
- tokens and cost per trajectory where the endpoint reported them (cost: agent episodes whose
  endpoint reported `usage.cost`);
- how many judged samples were `suspected_reward_hack`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ptxbench.db import verdict
from ptxbench.db.metrics import Tri, _and, _any, _rate, geometric_mean, pass_at_k, sample_filter, samples_joined

HEADLINE_BUDGETS: tuple[int, ...] = (1, 4, 8)
FAST_P: tuple[float, ...] = (1.0, 1.2)
PASS_K: tuple[int, ...] = (1, 5)
REWARD_HACK = "suspected_reward_hack"


@dataclass
class _Turn:
    turn: int
    category: str
    compiled: Tri
    correct: Tri
    correct_heldout: Tri
    uses_sass: Tri
    executed: Tri
    executed_measured: bool
    speedup: float | None
    sol_fraction: float | None
    tokens: int | None
    cost: float | None


@dataclass
class _Trajectory:
    key: tuple[str, str, str, str]  # model, arch, task, context
    run_id: int | None
    turns: list[_Turn] = field(default_factory=list)


@dataclass(frozen=True)
class HeadlineRow:
    model: str
    arch: str
    task: str
    context: str
    turn_budget: int
    trajectories: int
    compile_rate: float | None
    correct_train: float | None
    correct_heldout: float | None
    correct_sass: float | None
    correct_executed: float | None  # None: none was measured (no marked copy ran, no Nsight Compute)
    fast: dict[float, float | None]
    best_speedup: float | None
    best_sol_fraction: float | None
    geomean_speedup: float | None  # over correct trajectories
    mean_speedup_fail0: float | None  # over all, a failure counted as 0
    pass_at: dict[int, float | None]
    tokens: float | None  # per trajectory, where reported
    cost: float | None  # per trajectory, where reported
    reward_hacks: int

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for p, v in d.pop("fast").items():
            d[f"fast_{p:g}"] = v
        for k, v in d.pop("pass_at").items():
            d[f"pass@{k}"] = v
        return d


def _load(db: Any, *, tasks: Iterable[str] | None, models: Iterable[str] | None, archs: Iterable[str] | None,
          contexts: Iterable[str] | None, run_ids: Iterable[int] | None,
          include_reference: bool) -> tuple[list[_Trajectory], dict[int, int]]:
    where, params = sample_filter(tasks=tasks, models=models, archs=archs, contexts=contexts, run_ids=run_ids,
                                  include_reference=include_reference)
    has_episodes = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'agent_episodes'").fetchone() is not None
    cost = "(SELECT SUM(a.cost) FROM agent_episodes a WHERE a.sample_id = s.id)" if has_episodes else "NULL"
    rows = db.execute(
        f"""
        SELECT s.id, s.turn, s.run_id, COALESCE(m.name, '(no model)'), t.arch, s.task_id,
               COALESCE(r.context_level, 'none'), e.category, e.compiled, e.correct, e.correct_heldout,
               e.uses_sass, e.executed, e.speedup, e.sol_fraction,
               CASE WHEN s.tokens_in IS NULL AND s.tokens_out IS NULL THEN NULL
                    ELSE COALESCE(s.tokens_in, 0) + COALESCE(s.tokens_out, 0) END, {cost}
        {samples_joined(db)}
        {where}
        ORDER BY s.id
        """,
        params,
    ).fetchall()
    parents = dict(db.execute("SELECT id, parent_id FROM samples WHERE parent_id IS NOT NULL").fetchall())
    run_turns: dict[int, int] = {}
    for run_id, raw in db.execute("SELECT id, params FROM runs"):
        try:
            turns = json.loads(raw or "{}").get("turns")
        except ValueError:
            turns = None
        if isinstance(turns, int) and turns > 0:
            run_turns[run_id] = turns

    def root(sample_id: int) -> int:
        seen = {sample_id}
        while sample_id in parents and parents[sample_id] not in seen:
            sample_id = parents[sample_id]
            seen.add(sample_id)
        return sample_id

    trajectories: dict[int, _Trajectory] = {}
    for (sid, turn, run_id, model, arch, task, context, category, compiled, correct, correct_heldout, uses_sass,
         executed, speedup, sol, tokens, spent) in rows:
        traj = trajectories.setdefault(root(sid), _Trajectory((model, arch, task, context), run_id))
        traj.turns.append(_Turn(
            turn=turn, category=category, compiled=verdict.fact(compiled, category, "compiled"),
            correct=verdict.fact(correct, category, "correct"), correct_heldout=verdict.fact(correct_heldout, category, "correct"),
            uses_sass=verdict.fact(uses_sass, category, "uses"), executed=verdict.fact(executed, category, "executed"),
            executed_measured=executed is not None, speedup=speedup if speedup and speedup > 0 else None,
            sol_fraction=sol, tokens=tokens, cost=spent))
    return list(trajectories.values()), run_turns


def budgets_for(own: int, wanted: Sequence[int] = HEADLINE_BUDGETS) -> list[int]:
    """The budgets a group of runs with `own` turns is shown at: those not above it, and its own."""
    out = sorted({b for b in wanted if b <= own} | ({own} if own not in wanted else set()))
    return out or [own]


def headline(
    db: Any,
    *,
    turn_budgets: Sequence[int] = HEADLINE_BUDGETS,
    fast_p: Sequence[float] = FAST_P,
    ks: Sequence[int] = PASS_K,
    tasks: Iterable[str] | None = None,
    models: Iterable[str] | None = None,
    archs: Iterable[str] | None = None,
    contexts: Iterable[str] | None = None,
    run_ids: Iterable[int] | None = None,
    include_reference: bool = False,
) -> list[HeadlineRow]:
    trajectories, run_turns = _load(db, tasks=tasks, models=models, archs=archs, contexts=contexts,
                                    run_ids=run_ids, include_reference=include_reference)
    groups: dict[tuple[str, str, str, str], list[_Trajectory]] = defaultdict(list)
    for traj in trajectories:
        groups[traj.key].append(traj)
    rows = []
    for key in sorted(groups):
        group = groups[key]
        own = max(run_turns.get(t.run_id, 0) if t.run_id is not None else 0 for t in group)
        own = own or max(turn.turn for t in group for turn in t.turns)
        for budget in budgets_for(own, turn_budgets):
            rows.append(HeadlineRow(*key, turn_budget=budget, **_row(group, budget, fast_p, ks)))
    return rows


def _fast(t: _Turn, p: float) -> Tri:
    # The headline asks for every family in the SASS, so its "uses" is the SASS verdict alone.
    return verdict.fast(t.correct, t.uses_sass, t.speedup, p)


def _row(group: list[_Trajectory], budget: int, fast_p: Sequence[float], ks: Sequence[int]) -> dict[str, Any]:
    compiled: list[Tri] = []
    correct: list[Tri] = []
    heldout: list[Tri] = []
    sass: list[Tri] = []
    executed: list[Tri] = []
    fast: dict[float, list[Tri]] = {p: [] for p in fast_p}
    solved_all: list[Tri] = []
    best: list[tuple[float, float | None]] = []
    zero_filled: list[float] = []
    tokens: list[int] = []
    costs: list[float] = []
    hacks = 0
    measured = False
    for traj in group:
        turns = [t for t in traj.turns if t.turn <= budget]
        if not turns:
            # Nothing by this budget (an agent that submitted later): it fails every question here.
            for column in (compiled, correct, heldout, sass, executed, solved_all):
                column.append(False)
            for p in fast_p:
                fast[p].append(False)
            zero_filled.append(0.0)
            continue
        compiled.append(_any(t.compiled for t in turns))
        correct.append(_any(t.correct for t in turns))
        heldout.append(_any(t.correct_heldout for t in turns))
        solved = _any(_and(t.correct, t.uses_sass) for t in turns)
        sass.append(solved)
        solved_all.append(solved)
        executed.append(_any(_and(t.correct, t.uses_sass, t.executed) for t in turns))
        measured = measured or any(t.executed_measured for t in turns)
        for p in fast_p:
            fast[p].append(_any(_fast(t, p) for t in turns))
        speeds = [(t.speedup, t.sol_fraction) for t in turns if t.correct is True and t.speedup is not None]
        if speeds:
            top = max(speeds, key=lambda s: s[0])
            best.append(top)
            zero_filled.append(top[0])
        elif correct[-1] is False:
            zero_filled.append(0.0)  # failed: 0; correct but never timed (no GPU) is not known, so left out
        used = [t.tokens for t in turns if t.tokens is not None]
        if used:
            tokens.append(sum(used))
        spent = [t.cost for t in turns if t.cost is not None]
        if spent:
            costs.append(sum(spent))
        hacks += sum(t.category == REWARD_HACK for t in turns)
    pass_at: dict[int, float | None] = {}
    known = [v for v in solved_all if v is not None]
    for k in ks:
        pass_at[k] = pass_at_k(len(known), sum(known), k) if len(known) >= k else None
    peak = max(best, key=lambda s: s[0]) if best else None
    return dict(
        trajectories=len(group),
        compile_rate=_rate(compiled),
        correct_train=_rate(correct),
        correct_heldout=_rate(heldout),
        correct_sass=_rate(sass),
        correct_executed=_rate(executed) if measured else None,
        fast={p: _rate(v) for p, v in fast.items()},
        best_speedup=peak[0] if peak else None,
        best_sol_fraction=peak[1] if peak else None,
        geomean_speedup=geometric_mean(s for s, _ in best),
        mean_speedup_fail0=sum(zero_filled) / len(zero_filled) if zero_filled else None,
        pass_at=pass_at,
        tokens=sum(tokens) / len(tokens) if tokens else None,
        cost=sum(costs) / len(costs) if costs else None,
        reward_hacks=hacks,
    )
