"""The headline table: one row per model × device × arch × task × context level × turn budget.

The question the paper answers, asked like for like over what the store holds (`ptxbench report
--headline`, the explorer's Plots view). Units are trajectories as in db/metrics.py (a first turn
and the turns that follow it), each sample speaking through the evaluation db/verdict.py picks.

Turns and budgets, as run:

- A trajectory's budget is its run's: the `turns` the run was made with (a run may state one per
  task, `turns_by_task`), else the deepest turn the run stored for any of its tasks, so a task
  solved early is not given a smaller budget than its neighbours. A sample of no run (an expert
  solution, a mutation) has the turns it stored. `ptxbench mcp` sessions have no turn limit.
- An agent episode's kernel is a trajectory of one sample at the turn it was submitted on: the
  reply (`ptxbench run --agent`), or for `ptxbench mcp`, which sees calls and not replies, the
  number of calls that judged a kernel (assemble, check, time, and the submit itself).
- A row at budget T counts the trajectories whose budget reaches T, each with its turns up to T;
  one with no turn by then (an agent that submitted later) fails every question at T. A run made
  with fewer turns than T is not in the row at T, so a 2-turn run never stands beside the paper's
  8-turn number.

Devices: a trajectory belongs to the GPU that judged its turns (the one most of them name), else
to the GPU that judged the rest of its run on that arch, else to `no GPU`: an H100 result and an
H200 result are never pooled, and a turn that failed to assemble stays in its run's row.

Columns (a rate is over trajectories whose fact is known; `None` where none is). *Solved* is
db/verdict.py's facts together: correct at the train sizes and at the held-out sizes, with every
requested family in the code (`verdict.both`, `verdict.uses`), in one turn.

- compile; correct at train sizes and, apart, at held-out sizes; solved; solved and executed where
  the marked copy or Nsight Compute measured it;
- fast₁.₀ and fast₁.₂: solved, and faster than the library by more than that (`verdict.fast`);
- best speedup over solved trajectories and that kernel's fraction of the speed of light; 0 where
  every trajectory is known not to be solved (as the paper writes it);
- geometric-mean speedup over solved trajectories and over correct ones (train sizes, any code:
  generic fallbacks included), and the mean over all with an unsolved trajectory counted as 0;
- pass@1 and pass@k (k = 5), success = solved;
- tokens and cost per trajectory where the endpoint reported them; judged samples whose verdict
  is `suspected_reward_hack`.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ptxbench.db import verdict
from ptxbench.db.metrics import Tri, _and, _any, _rate, geometric_mean, pass_at_k, sample_filter, samples_joined
from ptxbench.tasks.published import TURN_LIMITS

# The paper's turn limits: rows at any other budget (--turn-budgets) have no number of theirs beside them.
HEADLINE_BUDGETS: tuple[int, ...] = TURN_LIMITS
FAST_P: tuple[float, ...] = (1.0, 1.2)
PASS_K: tuple[int, ...] = (1, 5)
REWARD_HACK = "suspected_reward_hack"
NO_GPU = "no GPU"
# What an evaluation names as its device when no GPU ran it (db/judgement.py CPU_DEVICE and "no GPU").
NOT_A_GPU = frozenset({"cpu (static stages only)", NO_GPU, ""})
# services/mcp_server.AGENT and models/agent_tools.JUDGE_TOOLS (tests/test_headline.py holds them equal).
MCP_AGENT = "ptxbench mcp"
JUDGE_TOOLS: tuple[str, ...] = ("assemble", "check", "time", "submit")
OPEN = "open"  # how a budget with no turn limit is written


@dataclass
class _Turn:
    turn: int
    category: str
    compiled: Tri
    correct: Tri
    correct_heldout: Tri
    uses: Tri
    executed: Tri
    executed_measured: bool
    speedup: float | None
    sol_fraction: float | None
    tokens: int | None
    cost: float | None
    gpu: str | None  # the GPU that ran its GPU stages; None: none did

    @property
    def solved(self) -> Tri:
        return verdict.both(self.correct, self.correct_heldout, self.uses)


@dataclass
class _Trajectory:
    key: tuple[str, str, str, str]  # model, arch, task, context
    run_id: int | None
    turns: list[_Turn] = field(default_factory=list)
    budget: int | None = None  # None: no turn limit
    device: str = NO_GPU


@dataclass(frozen=True)
class HeadlineRow:
    model: str
    device: str
    arch: str
    task: str
    context: str
    turn_budget: int
    budgets_as_run: str  # the budgets its trajectories were run with: "8", "4, 8", "open"
    trajectories: int
    compile_rate: float | None
    correct_train: float | None
    correct_heldout: float | None
    solved: float | None  # correct at train and held-out sizes, every requested family used
    solved_executed: float | None  # None: none was measured (no marked copy ran, no Nsight Compute)
    fast: dict[float, float | None]
    best_speedup: float | None  # over solved trajectories; 0.0 when every one is known unsolved
    best_sol_fraction: float | None
    geomean_solved: float | None
    geomean_correct: float | None  # correct at the train sizes, whatever the code
    mean_speedup_fail0: float | None  # over all, an unsolved trajectory counted as 0
    pass_at: dict[int, float | None]
    tokens: float | None  # per trajectory, where reported
    cost: float | None  # per trajectory, where reported
    reward_hacks: int

    @property
    def correct_sass(self) -> float | None:
        """The share the explorer's plot draws for all tasks: solved."""
        return self.solved

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for p, v in d.pop("fast").items():
            d[f"fast_{p:g}"] = v
        for k, v in d.pop("pass_at").items():
            d[f"pass@{k}"] = v
        return d


def _has_table(db: Any, name: str) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [name]).fetchone() is not None


def mcp_turns(db: Any) -> dict[int, int]:
    """The turn of each `ptxbench mcp` episode's sample: the calls of the episode that judged a kernel
    (an error answer judged nothing), at least 1."""
    if not _has_table(db, "agent_episodes") or not _has_table(db, "agent_steps"):
        return {}
    tools = ", ".join(f"'{t}'" for t in JUDGE_TOOLS)
    rows = db.execute(
        f"""
        SELECT a.sample_id, (SELECT count(*) FROM agent_steps st WHERE st.episode_id = a.id AND st.kind = 'tool'
                             AND st.tool IN ({tools}) AND st.status NOT LIKE 'error: %')
        FROM agent_episodes a WHERE a.agent = ? AND a.sample_id IS NOT NULL
        """,
        [MCP_AGENT],
    ).fetchall()
    return {sample_id: max(int(n), 1) for sample_id, n in rows}


def _run_budgets(db: Any) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
    """Each run's params, and the deepest turn it stored."""
    params: dict[int, dict[str, Any]] = {}
    for run_id, raw in db.execute("SELECT id, params FROM runs"):
        try:
            loaded = json.loads(raw or "{}")
        except ValueError:
            loaded = {}
        params[run_id] = loaded if isinstance(loaded, dict) else {}
    deepest = dict(db.execute("SELECT run_id, max(turn) FROM samples WHERE run_id IS NOT NULL GROUP BY run_id"))
    return params, deepest


def stored_turns(db: Any, run_id: int) -> int:
    """The deepest turn a run has stored (0: none yet): once it has one, its budget is what its
    trajectories were run with (models/generate.py refuses to change it)."""
    row = db.execute("SELECT max(turn) FROM samples WHERE run_id = ?", [run_id]).fetchone()
    return int(row[0] or 0)


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def budget_as_run(params: dict[str, Any] | None, task: str, deepest: int) -> int | None:
    """The turn budget a task was run with (None: no limit), from its run's params: `ptxbench mcp`
    has none; else the task's own `turns_by_task`, the run's `turns`, or the deepest turn stored."""
    if params is None:
        return deepest
    if params.get("mode") == "mcp":
        return None
    per_task = params.get("turns_by_task")
    if isinstance(per_task, dict) and _positive(per_task.get(task)):
        return int(per_task[task])
    return _positive(params.get("turns")) or deepest


def _load(db: Any, *, tasks: Iterable[str] | None, models: Iterable[str] | None, archs: Iterable[str] | None,
          contexts: Iterable[str] | None, run_ids: Iterable[int] | None,
          include_reference: bool) -> list[_Trajectory]:
    where, params = sample_filter(tasks=tasks, models=models, archs=archs, contexts=contexts, run_ids=run_ids,
                                  include_reference=include_reference)
    cost = "(SELECT SUM(a.cost) FROM agent_episodes a WHERE a.sample_id = s.id)" if _has_table(db, "agent_episodes") \
        else "NULL"
    rows = db.execute(
        f"""
        SELECT s.id, s.turn, s.run_id, COALESCE(m.name, '(no model)'), t.arch, s.task_id,
               COALESCE(r.context_level, 'none'), e.category, e.compiled, e.correct, e.correct_heldout,
               e.uses_ptx, e.uses_sass, e.executed, e.speedup, e.sol_fraction,
               CASE WHEN s.tokens_in IS NULL AND s.tokens_out IS NULL THEN NULL
                    ELSE COALESCE(s.tokens_in, 0) + COALESCE(s.tokens_out, 0) END, {cost},
               CASE WHEN e.status = '{verdict.COMPLETE_STATUS}' THEN e.device END
        {samples_joined(db)}
        {where}
        ORDER BY s.id
        """,
        params,
    ).fetchall()
    parents = dict(db.execute("SELECT id, parent_id FROM samples WHERE parent_id IS NOT NULL").fetchall())
    run_params, deepest = _run_budgets(db)
    mcp = mcp_turns(db)

    def root(sample_id: int) -> int:
        seen = {sample_id}
        while sample_id in parents and parents[sample_id] not in seen:
            sample_id = parents[sample_id]
            seen.add(sample_id)
        return sample_id

    trajectories: dict[int, _Trajectory] = {}
    for (sid, turn, run_id, model, arch, task, context, category, compiled, correct, correct_heldout, uses_ptx,
         uses_sass, executed, speedup, sol, tokens, spent, device) in rows:
        traj = trajectories.setdefault(root(sid), _Trajectory((model, arch, task, context), run_id))
        traj.turns.append(_Turn(
            turn=mcp.get(sid, turn), category=category, compiled=verdict.fact(compiled, category, "compiled"),
            correct=verdict.fact(correct, category, "correct"),
            correct_heldout=verdict.fact(correct_heldout, category, "correct"),
            uses=verdict.uses(verdict.fact(uses_ptx, category, "uses"), verdict.fact(uses_sass, category, "uses")),
            executed=verdict.fact(executed, category, "executed"), executed_measured=executed is not None,
            speedup=speedup if speedup and speedup > 0 else None, sol_fraction=sol, tokens=tokens, cost=spent,
            gpu=device if device and device not in NOT_A_GPU else None))

    # Devices: the trajectory's own GPU, else its run's (or, with no run, its model's) on that arch.
    scope_gpus: dict[tuple[Any, str], Counter[str]] = defaultdict(Counter)
    own: dict[int, str | None] = {}
    for key, traj in trajectories.items():
        gpus = Counter(t.gpu for t in traj.turns if t.gpu)
        own[key] = gpus.most_common(1)[0][0] if gpus else None
        scope_gpus[_scope(traj)].update(gpus)
    for key, traj in trajectories.items():
        found = own[key] or next(iter(g for g, _ in scope_gpus[_scope(traj)].most_common(1)), None)
        traj.device = found or NO_GPU
        task = traj.key[2]
        stored = max(t.turn for t in traj.turns)
        if traj.run_id is None:
            traj.budget = stored
        else:
            traj.budget = budget_as_run(run_params.get(traj.run_id), task, deepest.get(traj.run_id, stored))
    return list(trajectories.values())


def _scope(traj: _Trajectory) -> tuple[Any, str]:
    who = ("run", traj.run_id) if traj.run_id is not None else ("model", traj.key[0])
    return who, traj.key[1]


def budgets_written(budgets: Iterable[int | None]) -> str:
    """`8`, `4, 8`, `open`: the budgets a row's trajectories were run with."""
    values = set(budgets)
    out = [str(b) for b in sorted(b for b in values if b is not None)]
    return ", ".join(out + ([OPEN] if None in values else []))


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
    trajectories = _load(db, tasks=tasks, models=models, archs=archs, contexts=contexts, run_ids=run_ids,
                         include_reference=include_reference)
    groups: dict[tuple[str, str, str, str, str], list[_Trajectory]] = defaultdict(list)
    for traj in trajectories:
        model, arch, task, context = traj.key
        groups[(model, traj.device, arch, task, context)].append(traj)
    rows = []
    for key in sorted(groups):
        for budget in sorted(set(turn_budgets)):
            reached = [t for t in groups[key] if t.budget is None or t.budget >= budget]
            if reached:
                rows.append(HeadlineRow(*key, turn_budget=budget, budgets_as_run=budgets_written(t.budget for t in reached),
                                        **_row(reached, budget, fast_p, ks)))
    return rows


def _row(group: list[_Trajectory], budget: int, fast_p: Sequence[float], ks: Sequence[int]) -> dict[str, Any]:
    compiled: list[Tri] = []
    correct: list[Tri] = []
    heldout: list[Tri] = []
    solved: list[Tri] = []
    executed: list[Tri] = []
    fast: dict[float, list[Tri]] = {p: [] for p in fast_p}
    best: list[tuple[float, float | None]] = []
    correct_speeds: list[float] = []
    zero_filled: list[float] = []
    tokens: list[int] = []
    costs: list[float] = []
    hacks = 0
    measured = False
    for traj in group:
        turns = [t for t in traj.turns if t.turn <= budget]
        if not turns:
            # Nothing by this budget (an agent that submitted later): it fails every question here.
            for column in (compiled, correct, heldout, solved, executed):
                column.append(False)
            for p in fast_p:
                fast[p].append(False)
            zero_filled.append(0.0)
            continue
        compiled.append(_any(t.compiled for t in turns))
        correct.append(_any(t.correct for t in turns))
        heldout.append(_any(t.correct_heldout for t in turns))
        solved.append(_any(t.solved for t in turns))
        executed.append(_any(_and(t.solved, t.executed) for t in turns))
        measured = measured or any(t.executed_measured for t in turns)
        for p in fast_p:
            fast[p].append(_any(verdict.fast(_and(t.correct, t.correct_heldout), t.uses, t.speedup, p) for t in turns))
        speeds = [(t.speedup, t.sol_fraction) for t in turns if t.solved is True and t.speedup is not None]
        if speeds:
            top = max(speeds, key=lambda s: s[0])
            best.append(top)
            zero_filled.append(top[0])
        elif solved[-1] is False:
            zero_filled.append(0.0)  # unsolved: 0; solved but never timed is not known, so left out
        timed = [t.speedup for t in turns if t.correct is True and t.speedup is not None]
        if timed:
            correct_speeds.append(max(timed))
        used = [t.tokens for t in turns if t.tokens is not None]
        if used:
            tokens.append(sum(used))
        spent = [t.cost for t in turns if t.cost is not None]
        if spent:
            costs.append(sum(spent))
        hacks += sum(t.category == REWARD_HACK for t in turns)
    pass_at: dict[int, float | None] = {}
    known = [v for v in solved if v is not None]
    for k in ks:
        pass_at[k] = pass_at_k(len(known), sum(known), k) if len(known) >= k else None
    peak = max(best, key=lambda s: s[0]) if best else None
    # The paper writes 0 where no trajectory was correct; an unknown stays unknown.
    none_solved = bool(solved) and all(v is False for v in solved)
    return dict(
        trajectories=len(group),
        compile_rate=_rate(compiled),
        correct_train=_rate(correct),
        correct_heldout=_rate(heldout),
        solved=_rate(solved),
        solved_executed=_rate(executed) if measured else None,
        fast={p: _rate(v) for p, v in fast.items()},
        best_speedup=peak[0] if peak else (0.0 if none_solved else None),
        best_sol_fraction=peak[1] if peak else None,
        geomean_solved=geometric_mean(s for s, _ in best),
        geomean_correct=geometric_mean(correct_speeds),
        mean_speedup_fail0=sum(zero_filled) / len(zero_filled) if zero_filled else None,
        pass_at=pass_at,
        tokens=sum(tokens) / len(tokens) if tokens else None,
        cost=sum(costs) / len(costs) if costs else None,
        reward_hacks=hacks,
    )
