"""One worker's GPU state and the judging of one job: trials, verification, timing.

For each problem size: for each seed, fresh buffers (inputs copied from the
cached pristine draw, outputs NaN-poisoned, scratch as asked, canaries armed),
tensor maps encoded over those buffers, the manifest's launches enqueued in
order, the stream synchronized, then `verify`. If the size is the timed one
and every trial passed, the candidate and the library baseline are timed
interleaved over the trial buffers, and the last timed launch is re-checked.

A sticky CUDA error (the kernel faulted) ends the job: the context is unusable,
so the worker reports and exits, and the parent starts a fresh one.

Runs inside the worker process only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cupy
import torch

from ptxbench.engine.categories import OK, STAGE_OF, worst
from ptxbench.engine.gpu.buffers import Arena
from ptxbench.engine.gpu.datacache import DataCache, TaskData
from ptxbench.engine.gpu.launch import (
    CudaFailure, Module, PreparedLaunch, TensorMap, check_params, encode_tensor_map, prepare_launch, synchronize,
)
from ptxbench.engine.gpu.protocol import Fatal, Job, JobResult, SizePlan, SizeResult, TimingResult, TrialResult
from ptxbench.engine.gpu.timing import estimate_timing_seconds, time_interleaved

FRESH_SEED_OFFSET = 1_000_003  # the re-check's draw: far from any trial seed
from ptxbench.engine.gpu.verify import verify
from ptxbench.tasks.spec import TaskSpec, get_task

Emit = Callable[[dict[str, Any]], None]
TRUSTED_DEADLINE_S = 900.0          # reference computation, verification: our own code


class JobEnded(Exception):
    """A sticky failure: the CUDA context is gone; report and exit."""

    def __init__(self, fatal: Fatal) -> None:
        super().__init__(fatal.message)
        self.fatal = fatal


@dataclass
class Trial:
    arena: Arena
    data: TaskData
    launches: list[PreparedLaunch]
    tmaps: dict[str, TensorMap] = field(default_factory=dict)

    def run(self) -> None:
        for launch in self.launches:
            launch()


class Session:
    def __init__(self, device_index: int = 0) -> None:
        torch.cuda.set_device(device_index)
        cupy.cuda.Device(device_index).use()
        self.device = torch.device("cuda", device_index)
        self.stream = torch.cuda.Stream(self.device)
        self.cupy_stream = cupy.cuda.ExternalStream(self.stream.cuda_stream)
        props = torch.cuda.get_device_properties(self.device)
        self.cache = DataCache(self.device, int(props.total_memory * 0.3))
        self._flush: torch.Tensor | None = None
        self._flush_bytes = 0

    def flush_buffer(self, nbytes: int) -> torch.Tensor:
        if self._flush is None or self._flush_bytes != nbytes:
            self._flush = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            self._flush_bytes = nbytes
        return self._flush

    def sync(self, what: str) -> None:
        synchronize(self.stream.cuda_stream, what)

    # -- one job --------------------------------------------------------------------

    def judge(self, job: Job, emit: Emit) -> JobResult:
        started = time.perf_counter()
        result = JobResult()
        task = get_task(job.task_id)
        try:
            module = Module(job.cubin)
        except CudaFailure as exc:
            return self._all_sizes_fail(job, result, exc.category, str(exc), started, emit)
        try:
            failed_splits: set[str] = set()
            for index, plan in enumerate(job.sizes):
                if job.stop_split_on_failure and plan.split in failed_splits:
                    continue
                size = self._judge_size(job, task, module, index, plan, emit)
                result.sizes.append(size)
                emit({"event": "size", "result": size})
                if size.category != OK:
                    failed_splits.add(plan.split)
        except JobEnded as ended:
            result.fatal = ended.fatal
        finally:
            module.close()
        result.worker_s = time.perf_counter() - started
        result.cache = {"hits": self.cache.hits, "misses": self.cache.misses}
        return result

    def _all_sizes_fail(self, job: Job, result: JobResult, category: str, message: str, started: float,
                        emit: Emit) -> JobResult:
        for index, plan in enumerate(job.sizes):
            size = SizeResult(index, plan.split, dict(plan.sizes), category, STAGE_OF.get(category), message)
            result.sizes.append(size)
            emit({"event": "size", "result": size})
        result.worker_s = time.perf_counter() - started
        return result

    def _phase(self, emit: Emit, phase: str, index: int, deadline_s: float, untrusted: bool,
               trial: int | None = None) -> None:
        emit({"event": "phase", "phase": phase, "size": index, "trial": trial,
              "deadline_s": round(deadline_s, 3), "untrusted": untrusted})

    def _judge_size(self, job: Job, task: TaskSpec, module: Module, index: int, plan: SizePlan,
                    emit: Emit) -> SizeResult:
        out = SizeResult(index, plan.split, dict(plan.sizes), OK)

        def fail(category: str, message: str, detail: dict[str, Any] | None = None) -> SizeResult:
            out.category, out.stage, out.message = category, STAGE_OF.get(category), message
            if detail:
                out.worst = detail
            return out

        # Kernels and their parameters, before any buffer is made.
        try:
            for lp in plan.launches:
                problem = check_params(module.kernel(lp.entry), lp)
                if problem:
                    return fail("param_mismatch", problem)
        except CudaFailure as exc:
            return fail(exc.category, str(exc), exc.evidence())

        self._phase(emit, "prepare", index, TRUSTED_DEADLINE_S, False)
        data = [self.cache.get(task, plan.sizes, seed) for seed in plan.seeds]
        torch.cuda.synchronize(self.device)
        tolerances = {t.name: task.tolerance.max_for(t.name) for t in task.outputs}
        trials: list[Trial] = []
        for t, (seed, d) in enumerate(zip(plan.seeds, data)):
            self._phase(emit, "launch", index, job.launch_timeout_s, True, t)
            try:
                trial = self._make_trial(task, module, plan, d)
                began = time.perf_counter()
                trial.run()
                self.sync(f"size {index} trial {t}")
                launch_s = time.perf_counter() - began
            except CudaFailure as exc:
                out.trials.append(TrialResult(seed, exc.category, detail=exc.evidence()))
                fail(exc.category, str(exc), exc.evidence())
                if exc.sticky:
                    raise JobEnded(Fatal(exc.category, str(exc), index, exc.code,
                                         exc.evidence()["cuda_error_name"])) from None
                return out
            self._phase(emit, "verify", index, TRUSTED_DEADLINE_S, False, t)
            verdict = verify(trial.arena, d.inputs, d.reference, task.tolerance.metric, tolerances)
            out.trials.append(TrialResult(seed, verdict.category, verdict.errors, verdict.worst, verdict.detail,
                                          round(launch_s * 1e3, 4)))
            trials.append(trial)

        categories = [tr.category for tr in out.trials]
        out.category = worst(categories)
        out.stage = STAGE_OF.get(out.category)
        measured = [tr for tr in out.trials if tr.errors]
        if measured:
            top = max(measured, key=lambda tr: max(tr.errors.values()))
            out.max_error = max(top.errors.values())
            out.worst = top.worst
        if out.category != OK:
            bad = next(tr for tr in out.trials if tr.category == out.category)
            out.worst = bad.worst or bad.detail
            out.message = _describe(out.category, bad)
            return out
        if plan.time:
            trial_s = max(tr.launch_ms or 0.0 for tr in out.trials) / 1e3
            self._phase(emit, "time", index, job.launch_timeout_s + 3 * estimate_timing_seconds(trial_s, job.timing),
                        True)
            out.timing = self._time(job, task, plan, trials, tolerances, emit, index)
            if out.timing.recheck != OK:
                out.category, out.stage = "suspected_reward_hack", STAGE_OF["suspected_reward_hack"]
                out.message = (f"the last timed launch's output failed its re-check ({out.timing.recheck}); "
                               "it passed the trials")
        return out

    def _make_trial(self, task: TaskSpec, module: Module, plan: SizePlan, data: TaskData) -> Trial:
        arena = Arena(self.device)
        shapes = task.shapes(plan.sizes)
        for t in task.inputs:
            arena.add(t.name, t.dtype, shapes[t.name], "input")
        for t in task.outputs:
            arena.add(t.name, t.dtype, shapes[t.name], "output")
        for s in plan.scratch:
            arena.add(s.name, s.dtype, tuple(s.shape), "scratch")
        with torch.cuda.stream(self.stream):
            arena.fill(data.inputs, {s.name: s.init for s in plan.scratch})
        self.stream.synchronize()
        tmaps = {tm.name: encode_tensor_map(tm, arena.buffers[tm.tensor].ptr) for tm in plan.tensor_maps}
        ptrs = arena.ptrs()
        launches = [prepare_launch(module.kernel(lp.entry), lp, ptrs, tmaps, self.stream.cuda_stream,
                                   self.cupy_stream) for lp in plan.launches]
        return Trial(arena, data, launches, tmaps)

    def _time(self, job: Job, task: TaskSpec, plan: SizePlan, trials: list[Trial],
              tolerances: dict[str, float], emit: Emit, index: int) -> TimingResult:
        baselines = None
        baseline_name = None
        baseline_note = ""
        if job.timing.baseline:
            try:
                from ptxbench.tasks.baselines import library_fn

                with torch.cuda.stream(self.stream):
                    made = [library_fn(task, tr.arena.tensors("input"), plan.sizes) for tr in trials]
                baselines = [b.fn for b in made]
                baseline_name = made[0].name
            except Exception as exc:  # the library refusing a shape is a note, not a verdict
                baseline_note = f"baseline unavailable: {exc}"

        # The last timed launch runs on a draw none of the trials used, in buffers it has seen:
        # a kernel that memoises results by address or by content is caught by the re-check.
        fresh = self.cache.get(task, plan.sizes, FRESH_SEED_OFFSET + max(plan.seeds))
        scratch_init = {s.name: s.init for s in plan.scratch}

        def before_each(k: int) -> None:
            for buf in trials[k].arena.by_role("output"):
                buf.poison()

        def before_last(k: int) -> None:
            trials[k].arena.fill(fresh.inputs, scratch_init)

        try:
            timed = time_interleaved(self.stream, self.flush_buffer(job.timing.flush_bytes),
                                     [tr.run for tr in trials], baselines, job.timing,
                                     lambda: self.sync(f"size {index} timing"), before_last, before_each)
        except CudaFailure as exc:
            if exc.sticky:
                raise JobEnded(Fatal(exc.category, f"during timing: {exc}", index, exc.code,
                                     exc.evidence()["cuda_error_name"])) from None
            raise
        self._phase(emit, "verify", index, TRUSTED_DEADLINE_S, False)
        last = trials[timed.last_set]
        recheck = verify(last.arena, fresh.inputs, fresh.reference, task.tolerance.metric, tolerances)
        flops = task.flops(plan.sizes)
        c = timed.candidate
        result = TimingResult(
            reps=timed.reps, time_ms=c.median, p10_ms=c.p10, p90_ms=c.p90, spread=c.spread,
            tflops=flops / (c.median * 1e-3) / 1e12 if c.median > 0 else None,
            recheck=recheck.category,
            recheck_detail={"set": timed.last_set, "worst": recheck.worst, **recheck.detail},
        )
        if timed.baseline is not None:
            b = timed.baseline
            result.baseline = baseline_name
            result.baseline_ms, result.baseline_p10_ms, result.baseline_p90_ms = b.median, b.p10, b.p90
            result.baseline_spread = b.spread
            result.baseline_tflops = flops / (b.median * 1e-3) / 1e12 if b.median > 0 else None
            result.speedup = b.median / c.median if c.median > 0 else None
        elif baseline_note:
            result.recheck_detail["baseline_note"] = baseline_note
        return result


def _describe(category: str, trial: TrialResult) -> str:
    """One line a person can act on."""
    w = trial.worst or {}
    d = trial.detail or {}
    if category == "wrong_result" and w:
        return (f"{w.get('output')}: {w.get('metric')} {w.get('value'):.3g} > {w.get('tolerance'):.3g} "
                f"(seed {trial.seed}); worst element {w.get('index')}: got {w.get('got')}, expected "
                f"{w.get('expected')}") if isinstance(w.get("value"), float) else f"{w}"
    if category == "out_of_bounds_write":
        return f"guard canaries overwritten: {d.get('canaries')}"
    if category == "input_modified":
        return f"inputs changed by the kernel: {d.get('inputs')}"
    if category == "unwritten_output":
        return f"output elements never written: {d.get('unwritten')}"
    if category == "nan_inf":
        return f"NaN/Inf where the reference is finite: {d.get('nonfinite')}"
    return d.get("message") or category
