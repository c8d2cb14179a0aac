"""The whole judgement of one candidate: static stages, then run, verify and time on the GPU.

`judge(candidate, task)` returns a `Judgement`: the static verdict, one
`SizeMeasurement` per problem size (train and held-out apart), and the
summary an evaluation row stores. It never raises for anything a candidate
does. Hardware that is not there is a status, never a verdict: a task whose
arch has no device here is ``skipped: no sm_100a device`` (or sm_90a on a
machine with no GPU).

Category of the whole: the earliest-stage failure among the static verdict
and the train sizes (engine/categories.py orders them); held-out sizes are
reported in `correct_heldout` and their own measurements. A correct kernel
that uses what was asked but is slower than the library is
`slower_than_baseline`.
"""

from __future__ import annotations

import atexit
import hashlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.engine import ENGINE_VERSION
from ptxbench.engine.candidate import Candidate
from ptxbench.engine.categories import CORRECT, OK, SKIPPED_PREFIX, STAGE_OF, worst
from ptxbench.engine.coverage import states as coverage_states
from ptxbench.engine.coverage import work_done
from ptxbench.engine.extract import ExtractResult
from ptxbench.engine.gpu.protocol import (
    ArgPlan, DeviceInfo, Job, LaunchPlan, ScratchPlan, SizePlan, SizeResult, TensorMapPlan,
    TimingConfig,
)
from ptxbench.engine.launch_check import check_launches
from ptxbench.engine.manifest import ResolvedManifest
from ptxbench.engine.runner import Runner, WorkerUnavailable
from ptxbench.engine.static import StaticVerdict, judge_static
from ptxbench.tasks.records import DTYPE_BYTES
from ptxbench.tasks.spec import TaskSpec, get_task

Progress = Callable[[str, str, str | None], None]      # (stage, "begin" | "end", category)
TRIALS = 3
DEFAULT_BUDGET_S = 300.0            # GPU time one candidate's own launches may use, over all its sizes
# A speedup this close to 1 is a tie, not "slower": back-to-back medians of one kernel move by about
# this much on an H200 (results/gpu-engine-20261129-2340.md), so a smaller gap is not evidence.
TIE_BAND = 0.02


class EngineError(RuntimeError):
    """The tool itself failed on a candidate (a worker that cannot start, a bug): not a verdict."""


@dataclass
class SizeMeasurement:
    """One problem size's result: a `measurements` row."""

    split: str
    sizes: dict[str, int]
    category: str
    max_rel_err: float | None = None
    worst: dict[str, Any] | None = None
    time_ms: float | None = None
    time_spread: float | None = None
    baseline_ms: float | None = None
    speedup: float | None = None
    tflops: float | None = None
    sol_fraction: float | None = None       # speed-of-light floor / time (engine/gpu/sol.py)
    message: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Judgement:
    static: StaticVerdict
    status: str                     # judged | static | "skipped: no sm_100a device"
    category: str
    stage: str | None
    measurements: list[SizeMeasurement] = field(default_factory=list)
    correct: bool | None = None
    correct_heldout: bool | None = None
    executed: bool | None = None
    time_ms: float | None = None
    baseline_ms: float | None = None
    speedup: float | None = None
    tflops: float | None = None
    sol_fraction: float | None = None
    baseline: str | None = None
    device: DeviceInfo | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    tool_versions: dict[str, str] = field(default_factory=dict)
    engine_version: str = ENGINE_VERSION
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.category == OK and self.status == "judged"


# -- the shared runner ---------------------------------------------------------------

_default_runner: Runner | None = None


_session_secret: bytes | None = None


def session_seeds(task_id: str) -> tuple[int, ...]:
    """The trial seeds of this process for a task: secret (from a key drawn from the OS at first use), then
    fixed, so a batch's candidates meet the same inputs and the worker draws each set once. Every
    evaluation records them. Each task has its own: attention forward and backward share shapes and
    distributions, and backward's inputs hold forward's output of the same Q, K, V."""
    global _session_secret
    if _session_secret is None:
        _session_secret = os.urandom(32)
    digest = hashlib.blake2b(task_id.encode(), key=_session_secret, digest_size=8 * TRIALS).digest()
    return tuple((int.from_bytes(digest[8 * i:8 * i + 8], "little") >> 2) or 1 for i in range(TRIALS))


def default_runner() -> Runner:
    """One worker for this process, started on first use and kept for the next candidate."""
    global _default_runner
    if _default_runner is None:
        _default_runner = Runner()
        # A worker left behind would hold the GPU (and any kernel still spinning on it).
        atexit.register(_default_runner.close)
    return _default_runner


# -- manifest → plans --------------------------------------------------------------------

def size_plan(resolved: ResolvedManifest, split: str, *, seeds: tuple[int, ...], timed: bool) -> SizePlan:
    launches = tuple(
        LaunchPlan(
            entry=l.entry, grid=l.grid, block=l.block, cluster=l.cluster, shared_bytes=l.shared_bytes,
            args=tuple(ArgPlan(kind=a.kind, name=a.name, dtype=a.dtype, value=a.value) for a in l.args),
        )
        for l in resolved.launches
    )
    tmaps = tuple(
        TensorMapPlan(name=t.name, tensor=t.tensor, dtype=t.dtype, view=t.shape, box=t.box, swizzle=t.swizzle,
                      interleave=t.interleave, l2_promotion=t.l2_promotion, oob_fill=t.oob_fill,
                      element_strides=t.element_strides)
        for t in resolved.tensor_maps.values()
    )
    scratch = tuple(ScratchPlan(s.name, s.dtype, s.shape, s.init) for s in resolved.scratch.values())
    return SizePlan(split, dict(resolved.sizes), launches, tmaps, scratch, tuple(seeds), timed)


def plan_sizes(candidate: Candidate | None, task: TaskSpec, ptx: str, num_sms: int, *,
               seeds: tuple[int, ...] = (1, 2, 3),
               sizes: list[tuple[str, dict[str, int]]] | None = None,
               resources: dict[str, dict[str, Any]] | None = None,
               ) -> tuple[list[SizePlan], list[SizeMeasurement]]:
    """Resolve the candidate's manifest at every size: plans to run, and sizes already decided
    (engine.launch_check, the same check the static verdict makes)."""
    checked = check_launches(candidate, task, ptx, num_sms=num_sms, resources=resources, sizes=sizes)
    plans = [size_plan(c.resolved, c.split, seeds=seeds, timed=c.sizes == dict(task.headline))
             for c in checked.sizes if c.resolved is not None]
    decided = [SizeMeasurement(c.split, dict(c.sizes), c.category, message=c.message)
               for c in checked.sizes if c.resolved is None]
    return plans, decided


# -- judging ---------------------------------------------------------------------------------

def judge(
    candidate: Candidate | ExtractResult | str | Path,
    task: TaskSpec | str,
    *,
    gpu: bool = True,
    sanitize: bool = False,
    executed: bool = False,
    runner: Runner | None = None,
    static: StaticVerdict | None = None,
    sizes: list[tuple[str, dict[str, int]]] | None = None,
    seeds: tuple[int, ...] | None = None,
    timing: TimingConfig | None = None,
    launch_timeout_s: float = 10.0,
    budget_s: float = DEFAULT_BUDGET_S,
    progress: Progress | None = None,
) -> Judgement:
    """Judge one candidate for `task`. Raises EngineError only when the tool itself fails.

    `seeds` default to this process's secret trial seeds of the task (`session_seeds`); `budget_s` bounds the GPU time
    the candidate's own launches may take, after which it is `hang_timeout`."""
    spec = get_task(task) if isinstance(task, str) else task
    note = progress or (lambda stage, status, category=None: None)
    started = time.perf_counter()
    if static is None:
        note("assemble", "begin", None)
        static = judge_static(candidate, spec)
        note("inspect", "end", static.category)
    out = Judgement(static=static, status="static", category=static.category, stage=STAGE_OF.get(static.category),
                    tool_versions=dict(static.tool_versions))
    out.seconds["static"] = sum(v for k, v in static.seconds.items() if k == "total")
    if static.cubin is None or not gpu:
        # Nothing to run (extract or assemble failed), or the caller asked for the static stages only.
        out.status = "judged" if static.cubin is None else "static"
        return out

    runner = runner or default_runner()
    try:
        device = runner.start()
    except WorkerUnavailable as exc:
        raise EngineError(str(exc)) from None
    if device is None or device.arch != spec.arch:
        out.device = device         # the GPU that is here (of another arch), or None
        out.status = f"{SKIPPED_PREFIX}no {spec.arch} device"
        out.evidence["device"] = runner.no_device_reason if device is None else f"{device.name} is {device.arch}"
        return out
    out.device = device
    out.tool_versions.update(device.versions)

    cand = static.candidate
    seeds = seeds or session_seeds(spec.id)
    out.evidence["seeds"] = list(seeds)
    plans, decided = plan_sizes(cand, spec, static.ptx, device.num_sms, seeds=seeds, sizes=sizes,
                                resources=static.resources)
    measured = _run_plans(runner, spec, static, plans, timing or TimingConfig(), launch_timeout_s, budget_s,
                          note, out)
    _judge_coverage(static, measured, out, spec, plans)
    out.measurements = _in_size_order(spec, sizes, decided + measured)
    _summarise(out)
    if sanitize or executed:
        from ptxbench.engine.gpu.tools import run_executed, run_sanitize

        smallest = plans[0] if plans else None
        if sanitize and smallest is not None:
            note("sanitize", "begin", None)
            report = run_sanitize(spec, static.cubin, smallest, device.index)
            out.evidence["sanitize"] = report
            if report.get("category") in ("illegal_address", "misaligned_address") and out.category in CORRECT:
                # Reads past a buffer leave the canaries intact; memcheck sees them.
                out.category, out.stage = report["category"], STAGE_OF[report["category"]]
            note("sanitize", "end", report.get("category"))
        if executed and smallest is not None:
            note("executed", "begin", None)
            report = run_executed(spec, static, smallest, device.index)
            out.evidence["executed"] = report
            counted = report.get("executed")
            if counted is False or out.executed is None:    # either "not run" stands; else the marks' answer
                out.executed = counted
            if out.executed is False and out.category == OK:
                out.category, out.stage = "required_not_executed", STAGE_OF["required_not_executed"]
            note("executed", "end", None)
    out.seconds["total"] = time.perf_counter() - started
    return out


def _run_plans(runner: Runner, task: TaskSpec, static: StaticVerdict, plans: list[SizePlan], timing: TimingConfig,
               launch_timeout_s: float, budget_s: float, note: Callable[..., None],
               out: Judgement) -> list[SizeMeasurement]:
    """Send the plans to the worker; after a hang or crash, give each split not yet reached one fresh worker.

    The GPU-time budget is the candidate's, over every attempt: a fresh worker gets what is left of it."""
    results: list[SizeMeasurement] = []
    pending = list(plans)
    retried: set[str] = set()
    fatals: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    spent = 0.0
    for _attempt in range(1 + len({p.split for p in plans})):
        if not pending:
            break
        if spent >= budget_s:
            results += [SizeMeasurement(p.split, dict(p.sizes), "hang_timeout",
                                        message=f"not run: the candidate's GPU-time budget of {budget_s:g} s is used up")
                        for p in pending]
            break
        assert static.cubin is not None
        job = Job(task.id, static.cubin, tuple(pending), timing, launch_timeout_s, budget_s=budget_s - spent,
                  coverage_cubin=static.coverage_cubin, coverage_symbol=static.coverage.get("symbol", ""),
                  coverage_slots=2 * len(static.coverage.get("families", ())))
        stages = _Stages(note)
        stages.enter("run")
        result = runner.judge(job, on_event=stages.on_event)
        spent += result.budget_spent_s
        done = {r.index for r in result.sizes}
        if result.cache:
            out.evidence["reference_cache"] = result.cache
        results += [_measurement(r) for r in result.sizes]
        fatal = result.fatal
        stages.finish(fatal.category if fatal is not None else None)
        if fatal is None:
            break
        if fatal.category == "tool_error":
            raise EngineError(fatal.message)
        fatals.append({"category": fatal.category, "message": fatal.message[-2000:],
                       "cuda_error": fatal.cuda_error_name, "signal": fatal.signal})
        failed_at = fatal.size_index
        if failed_at is None:
            # The worker died outside any size (it never reached one): nothing more can be learned here.
            raise EngineError(f"the worker failed before judging a size: {fatal.message[-800:]}")
        if failed_at not in done:
            plan = pending[failed_at]
            results.append(SizeMeasurement(plan.split, dict(plan.sizes), fatal.category, message=fatal.message[-2000:]))
            done.add(failed_at)
        failed_split = pending[failed_at].split
        retried.add(failed_split)
        pending = [p for i, p in enumerate(pending) if i not in done and p.split not in retried]
    out.seconds["gpu"] = time.perf_counter() - t0
    if fatals:
        out.evidence["worker_fatal"] = fatals
    return results


class _Stages:
    """Turns the worker's many phase events into one begin/end pair per stage change (docs/eval-progress.md)."""

    _STAGE_OF_PHASE = {"launch": "run", "verify": "verify", "time": "time"}

    def __init__(self, note: Callable[..., None]) -> None:
        self.note = note
        self.current: str | None = None

    def enter(self, stage: str) -> None:
        if stage != self.current:
            self.finish()
            self.note(stage, "begin", None)
            self.current = stage

    def finish(self, category: str | None = None) -> None:
        if self.current is not None:
            self.note(self.current, "end", category)
            self.current = None

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("event") == "phase" and event.get("phase") in self._STAGE_OF_PHASE:
            self.enter(self._STAGE_OF_PHASE[event["phase"]])


# The least share of a size's work each counted family must be seen to do in the marked copy: its FLOPs
# (wgmma) against the task's, the bytes it moved (bulk and tensor copies) against the size's inputs. An
# honest kernel does all of it (a tiled GEMM loads its inputs many times over); one copy into a scratch
# word, or a token MMA beside FFMA loops, does next to none.
WORK_FLOOR = {"flops": 0.5, "bytes": 0.25, "boxes": 0.25}
# A tensor copy's bytes are its box, which the instruction does not name: the largest box of the launch's
# tensor maps stands for every copy (without one, 227 KiB, a block's whole shared memory).
_MAX_BOX_BYTES = 227 << 10


def _work_needed(spec: TaskSpec, sizes: dict[str, int], kind: str, plan: SizePlan | None) -> tuple[float, float]:
    """What a size needs of a counter kind, and what one count of it is worth."""
    if kind == "flops":
        return float(spec.flops(sizes) if spec.flops_expr else 0), 1.0
    shapes = spec.shapes(sizes)
    need = float(sum(math.prod(shapes[t.name]) * DTYPE_BYTES[t.dtype] for t in spec.inputs))
    if kind == "bytes":
        return need, 1.0
    boxes = [math.prod(m.box) * DTYPE_BYTES.get(m.dtype, 4) for m in (plan.tensor_maps if plan else ())]
    return need, float(max(boxes, default=_MAX_BOX_BYTES))


def _short_of_work(static: StaticVerdict, spec: TaskSpec, m: SizeMeasurement, plan: SizePlan | None,
                   slots: list[int]) -> dict[str, dict[str, Any]]:
    """Counted families that did under WORK_FLOOR of the size's work in the marked copy, with the figures."""
    families, kinds = static.coverage["families"], static.coverage.get("work") or []
    short: dict[str, dict[str, Any]] = {}
    for family, count in work_done(families, kinds, slots).items():
        kind = kinds[families.index(family)]
        assert kind is not None
        need, unit = _work_needed(spec, m.sizes, kind, plan)
        if need <= 0:
            continue
        share = count * unit / need
        if share < WORK_FLOOR[kind]:
            short[family] = {"kind": kind, "counted": count, "share": round(share, 6), "floor": WORK_FLOOR[kind]}
    return short


def _judge_coverage(static: StaticVerdict, measured: list[SizeMeasurement], out: Judgement,
                    spec: TaskSpec | None = None, plans: list[SizePlan] | None = None) -> None:
    """The marked copy's slots, size by size (engine/coverage.py): a train size that passed but where a
    requested family never ran, or did under WORK_FLOOR of the size's work, is `required_not_executed`;
    held-out sizes say so as information (an honest kernel may take a plainer path at an awkward size).
    `executed` is True only when every train size that passed was looked at and every family ran there;
    False when one did not run; None when not measured.

    A copy that could not be made, loaded or launched for the candidate's sake shows nothing ran: such a
    train size is `required_not_executed` too (0.6 let it pass unmeasured; round 7 built candidates whose
    copy failed on purpose). No copy asked for (`static.coverage` empty) measures nothing and decides nothing."""
    families, tokens = static.coverage.get("families"), static.coverage.get("tokens")
    if not families or not tokens:
        error = static.coverage.get("error")
        if static.require and static.category == OK:
            out.evidence["coverage"] = {"note": error or "no marked copy was made"}
        if error and static.require:
            out.executed = False if _not_seen(measured, f"no marked copy could be made ({error})") else None
        return
    by_sizes = {tuple(sorted(p.sizes.items())): p for p in plans or ()}
    rows: list[dict[str, Any]] = []
    looked, unseen, failed = 0, 0, False
    for m in measured:
        slots, why = m.detail.pop("coverage", None), m.detail.pop("coverage_note", "")
        proofs = m.detail.pop("coverage_proofs", None)
        train_ok = m.split == "train" and m.category == OK
        if slots is None:
            if why:
                rows.append({"split": m.split, "sizes": m.sizes, "note": why})
                failed = _not_seen([m], why) or failed
            else:
                unseen += train_ok
            continue
        plan = by_sizes.get(tuple(sorted(m.sizes.items())))
        # After the trials, and in the timed rounds at secret places where the copy ran instead: a family must
        # have run, and done its share, in every one of them.
        looks = [("after the trials", slots)] + [(f"in proof round {i + 1} of {len(proofs)}", p)
                                                 for i, p in enumerate(proofs or [])]
        row: dict[str, Any] = {"split": m.split, "sizes": m.sizes}
        problems: list[str] = []
        for where, seen in looks:
            states = coverage_states(families, tokens, seen)
            short = _short_of_work(static, spec, m, plan, seen) if spec is not None else {}
            look: dict[str, Any] = {"families": states,
                                    "work": work_done(families, static.coverage.get("work") or [], seen)}
            if short:
                look["short_of_work"] = short
            if where == looks[0][0]:
                row.update(look)
            else:
                row.setdefault("proofs", []).append(look)
            missing = [f for f, state in states.items() if state != "ran"]
            if missing:
                problems.append(f"the requested {', '.join(missing)} never ran {where}: the marked copy of the "
                                f"candidate left no mark ({', '.join(f'{f}: {states[f]}' for f in missing)})")
            elif short:
                problems.append("the requested " + ", ".join(
                    f"{f} did {v['share']:.2%} of this size's {v['kind']} (at least {v['floor']:.0%} asked)"
                    for f, v in short.items()) + f" {where}, in the marked copy of the candidate")
        if "timing" in m.detail and proofs is None:
            problems.append("no timed round ran the marked copy: "
                            + str(m.detail["timing"].get("schedule", {}).get("proof_note", "none was made")))
        rows.append(row)
        if train_ok:
            looked += 1
            if problems:
                failed = True
                m.category = "required_not_executed"
                m.message = problems[0]
    unmeasured = static.coverage.get("unmeasured")
    out.evidence["coverage"] = {"families": families, "sites": static.coverage.get("sites"), "sizes": rows,
                                **({"unmeasured": unmeasured} if unmeasured else {})}
    out.executed = False if failed else (True if looked and not unseen else None)


def _not_seen(measured: list[SizeMeasurement], why: str) -> bool:
    """Train sizes that passed become `required_not_executed`: the requested families were not seen to run.
    True when one did."""
    hit = False
    for m in measured:
        if m.split == "train" and m.category == OK:
            m.category = "required_not_executed"
            m.message = f"the requested families were not seen to run at this size: {why}"
            hit = True
    return hit


def _measurement(r: SizeResult) -> SizeMeasurement:
    m = SizeMeasurement(r.split, dict(r.sizes), r.category, r.max_error, r.worst, message=r.message)
    m.detail = {"trials": [{"seed": t.seed, "category": t.category, "errors": t.errors, "launch_ms": t.launch_ms,
                            **({"detail": t.detail} if t.detail else {})} for t in r.trials]}
    if r.coverage is not None:
        m.detail["coverage"] = r.coverage       # read by _judge_coverage, which keeps what the slots mean instead
    if r.coverage_note:
        m.detail["coverage_note"] = r.coverage_note
    if r.timing is not None and r.timing.coverage_proofs is not None:
        m.detail["coverage_proofs"] = r.timing.coverage_proofs     # read (and removed) by _judge_coverage too
    if r.timing is not None:
        t = r.timing
        m.time_ms, m.time_spread, m.tflops, m.sol_fraction = t.time_ms, t.spread, t.tflops, t.sol_fraction
        m.baseline_ms, m.speedup = t.baseline_ms, t.speedup
        m.detail["timing"] = {
            "reps": t.reps, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms, "baseline": t.baseline,
            "baseline_p10_ms": t.baseline_p10_ms, "baseline_p90_ms": t.baseline_p90_ms,
            "baseline_spread": t.baseline_spread, "baseline_tflops": t.baseline_tflops,
            "recheck": t.recheck, "recheck_detail": t.recheck_detail, "checks": t.checks,
            "check_failures": t.check_failures, "nondeterministic": t.nondeterministic, "schedule": t.schedule,
            "sol": t.sol, "sol_fraction": t.sol_fraction, "baseline_sol_fraction": t.baseline_sol_fraction,
            "baseline_check": t.baseline_check, "baseline_note": t.baseline_note,
        }
    return m


def _in_size_order(task: TaskSpec, sizes: list[tuple[str, dict[str, int]]] | None,
                   found: list[SizeMeasurement]) -> list[SizeMeasurement]:
    order = {(split, tuple(sorted(s.items()))): i for i, (split, s) in enumerate(sizes or task.all_sizes())}
    return sorted(found, key=lambda m: order.get((m.split, tuple(sorted(m.sizes.items()))), len(order)))


def _summarise(out: Judgement) -> None:
    out.status = "judged"
    train = [m for m in out.measurements if m.split == "train"]
    heldout = [m for m in out.measurements if m.split == "heldout"]
    out.correct = bool(train) and all(m.category == OK for m in train)
    out.correct_heldout = (all(m.category == OK for m in heldout) and bool(heldout)) if heldout else None
    categories = [out.static.category] + [m.category for m in train]
    out.category = worst(categories)
    timed = next((m for m in train if m.time_ms is not None), None)
    if timed is not None:
        out.time_ms, out.baseline_ms, out.speedup, out.tflops = (timed.time_ms, timed.baseline_ms, timed.speedup,
                                                                  timed.tflops)
        out.sol_fraction = timed.sol_fraction
        timing = timed.detail.get("timing") or {}
        out.baseline = timing.get("baseline")
        if timing.get("sol"):
            out.evidence["speed_of_light"] = {**timing["sol"], "fraction": timed.sol_fraction,
                                              "baseline_fraction": timing.get("baseline_sol_fraction")}
        if out.baseline is None:
            # No library time: the speed question is not answered, and nothing here claims it was.
            out.evidence["baseline_missing"] = timing.get("baseline_note") or "no library baseline was timed"
        if timing.get("baseline_check"):
            out.evidence["baseline_check"] = timing["baseline_check"]
    if out.category == OK and out.speedup is not None and out.speedup < 1.0 - TIE_BAND:
        out.category = "slower_than_baseline"
    elif out.category == OK and timed is not None and out.speedup is None:
        out.category = "no_baseline"        # correct, but the third question was not answered
    out.stage = STAGE_OF.get(out.category)
    failing = next((m for m in train + heldout if m.category != OK), None)
    if failing is not None:
        out.evidence["first_failure"] = {"split": failing.split, "sizes": failing.sizes,
                                         "category": failing.category, "message": failing.message,
                                         "worst": failing.worst}
    if out.baseline:
        out.evidence["baseline"] = out.baseline
