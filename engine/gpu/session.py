"""One worker's GPU state and the judging of one job: trials, verification, timing.

For each problem size, one set of buffers (the arena: inputs, outputs,
scratch, each between guard canaries) and one set of prepared launches over
it. Every run of the candidate, trial or timing round, starts from the same
state: the input set of that run copied in, outputs NaN-poisoned, scratch as
the manifest asks, module globals restored to their loaded image
(engine/gpu/module_state.py). The trials run the secret per-process seeds,
each verified at once; then, at the timed size, the candidate and the library
baseline are timed interleaved over those sets plus one drawn for this
judgement alone, with a random subset of rounds verified (engine/gpu/timing.py)
and the median held to the device's speed of light (engine/gpu/sol.py).

A sticky CUDA error (the kernel faulted) ends the job: the context is unusable,
so the worker reports and exits, and the parent starts a fresh one. Anything
else the candidate's demands cause (memory its manifest asks for, a launch the
driver refuses) is a verdict with its evidence, never a tool error.

Runs inside the worker process only.
"""

from __future__ import annotations

import os
import random
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cupy
import torch

from ptxbench.engine.categories import OK, STAGE_OF, worst
from ptxbench.engine.gpu import at_rest, sol
from ptxbench.engine.gpu.buffers import Arena
from ptxbench.engine.gpu.datacache import (
    DataCache, FreshSets, TaskData, draw, fingerprint, row_sample,
)
from ptxbench.engine.gpu.l2 import LINE, L2Flush
from ptxbench.engine.gpu.launch import (
    CudaFailure, Module, PreparedLaunch, check_params, copy_async, encode_tensor_map, prepare_launch, synchronize,
)
from ptxbench.engine.gpu.protocol import Fatal, Job, JobResult, SizePlan, SizeResult, TimingResult, TrialResult
from ptxbench.engine.gpu.timing import Proof, TimedSet, estimate_timing_seconds, time_interleaved
from ptxbench.engine.gpu.verify import Verdict, decode, summarize, verify
from ptxbench.tasks.spec import ElementBound, TaskSpec, get_task

Emit = Callable[[dict[str, Any]], None]
TRUSTED_DEADLINE_S = 900.0          # reference computation, verification: our own code
MAX_FAILURES_KEPT = 3


class JobEnded(Exception):
    """A sticky failure: the CUDA context is gone; report and exit."""

    def __init__(self, fatal: Fatal) -> None:
        super().__init__(fatal.message)
        self.fatal = fatal


def _ended(exc: CudaFailure, index: int, during: str = "") -> JobEnded:
    return JobEnded(Fatal(exc.category, f"{during}{exc}", index, exc.code, exc.evidence()["cuda_error_name"]))


@dataclass
class Bench:
    """A size's arena, its launches, and what every run starts from."""

    arena: Arena
    launches: list[PreparedLaunch]
    module: Module
    scratch_init: dict[str, str]
    stream: torch.cuda.Stream
    tensor_maps: dict[str, Any]

    def reset(self, data: TaskData) -> None:
        """Enqueue: this set's inputs in place, outputs poisoned, scratch re-initialised, globals restored."""
        with torch.cuda.stream(self.stream):
            self.arena.load(data.inputs, self.scratch_init)
        self.module.restore_state(self.stream.cuda_stream)

    def run(self) -> None:
        for launch in self.launches:
            launch()


@dataclass
class Checks:
    """What verification needs besides the arena: the metric, the limits and the element bounds."""

    metric: str
    limits: dict[str, float]
    bounds: dict[str, ElementBound | None]

    def verify(self, arena: Arena, data: TaskData, rows: torch.Tensor | None = None) -> Verdict:
        """`rows`: the values compared at those positions along S only (the reference computed there alone)."""
        if rows is None:
            return verify(arena, data.inputs, data.reference, self.metric, self.limits, self.bounds)
        return verify(arena, data.inputs, data.reference_at(rows), self.metric, self.limits, self.bounds, rows)

    def summarize(self, arena: Arena, data: TaskData) -> torch.Tensor:
        return summarize(arena, data.inputs, data.reference, self.metric, self.bounds)

    def decode(self, values: list[float], arena: Arena) -> Verdict:
        return decode(values, arena, self.metric, self.limits, self.bounds)


def _device_full(exc: BaseException) -> bool:
    """An allocation of the harness's refused for want of device memory: PyTorch's, CuPy's, or a CuPy
    module load (the fused checks' kernels load on first use)."""
    if isinstance(exc, (torch.cuda.OutOfMemoryError, cupy.cuda.memory.OutOfMemoryError)):
        return True
    return isinstance(exc, cupy.cuda.driver.CUDADriverError) and "CUDA_ERROR_OUT_OF_MEMORY" in str(exc)


PROOF_ROUNDS = 3                    # timed rounds at secret places where the marked copy runs instead
RECYCLE_GROWTH_BYTES = 4 << 30      # more than this held outside the pools after a job: a fresh worker next


def _secret_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") >> 2


class _Lazy(Sequence[Any]):
    """`make(k)` for k < n, made when asked for."""

    def __init__(self, make: Callable[[int], Any], n: int) -> None:
        self.make, self.n = make, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: Any) -> Any:
        return self.make(k)


class Session:
    def __init__(self, device_index: int = 0, peaks: sol.Peaks | None = None) -> None:
        torch.cuda.set_device(device_index)
        cupy.cuda.Device(device_index).use()
        self.device = torch.device("cuda", device_index)
        self.stream = torch.cuda.Stream(self.device)
        self.cupy_stream = cupy.cuda.ExternalStream(self.stream.cuda_stream)
        props = torch.cuda.get_device_properties(self.device)
        # References of the largest attention sizes are costly to recompute; a long run of many experts may give
        # the cache more of the device (PTXBENCH_REFERENCE_CACHE, a fraction of its memory).
        share = float(os.environ.get("PTXBENCH_REFERENCE_CACHE", "0.4"))
        self.cache = DataCache(self.device, int(props.total_memory * min(max(share, 0.05), 0.7)))
        self.peaks = peaks
        self._flush: L2Flush | None = None
        self.recycle: str | None = None
        self._outside_torch = self._memory_outside_torch()

    def _memory_outside_torch(self) -> int:
        """Device memory this process holds beyond PyTorch's pools: the driver's local-memory reservation,
        module images, the malloc heap, CuPy."""
        free, total = torch.cuda.mem_get_info(self.device)
        return total - free - torch.cuda.memory_reserved(self.device)

    def _leftovers(self, job: Job) -> str | None:
        """Why the next candidate should get a fresh worker: what this one leaves behind that a reset cannot
        reach (a local-memory reservation the driver keeps at its largest, a device malloc heap)."""
        try:
            at_rest.release(self.device)
            grown = self._memory_outside_torch() - self._outside_torch
        except Exception as exc:  # a fault the job did not see as sticky: start afresh
            return f"the device could not be measured after the job ({type(exc).__name__})"
        if grown > RECYCLE_GROWTH_BYTES:
            return f"{grown / 2**30:.1f} GiB of device memory outside the harness's pools stayed reserved"
        if b"\0malloc\0" in job.cubin:
            return "the kernel allocates from the device heap, which outlives it"
        return None

    def l2_flush(self, nbytes: int) -> L2Flush:
        if self._flush is None or self._flush.nbytes != nbytes // LINE * LINE:
            self._flush = None                      # the old buffer goes before the new one is made
            self._flush = L2Flush(nbytes, self.device)
        return self._flush

    def sync(self, what: str) -> None:
        synchronize(self.stream.cuda_stream, what)

    # -- one job --------------------------------------------------------------------

    def judge(self, job: Job, emit: Emit) -> JobResult:
        started = time.perf_counter()
        result = JobResult()
        task = get_task(job.task_id)
        self.cache.begin_job()
        try:
            module = Module(job.cubin)
        except CudaFailure as exc:
            return self._all_sizes_fail(job, result, exc.category, str(exc), started, emit)
        marked, marked_note = None, ""
        if job.coverage_cubin is not None:
            try:
                marked = Module(job.coverage_cubin)
            except CudaFailure as exc:
                marked_note = f"the marked copy did not load: {exc}"
        try:
            failed_splits: set[str] = set()
            for index, plan in enumerate(job.sizes):
                if job.stop_split_on_failure and plan.split in failed_splits:
                    continue
                size = self._judge_size(job, task, module, marked, index, plan, emit)
                if marked_note and size.category == OK:
                    size.coverage_note = marked_note
                result.sizes.append(size)
                emit({"event": "size", "result": size})
                if size.category != OK:
                    failed_splits.add(plan.split)
        except JobEnded as ended:
            result.fatal = ended.fatal
        finally:
            module.close()
            if marked is not None:
                marked.close()
        # After a sticky fault the context is gone and the worker ends with this job: nothing to measure.
        result.recycle = self.recycle or (self._leftovers(job) if result.fatal is None else None)
        result.worker_s = time.perf_counter() - started
        result.cache = {"hits": self.cache.hits, "misses": self.cache.misses, "corrupted": self.cache.corrupted}
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

    def _settle(self, index: int, what: str, during: str = "after a refused launch: ") -> None:
        """After a refused launch (or an error of ours): wait for the launches already enqueued, so none
        outlives this step; a sticky fault among them ends the job as the candidate's."""
        try:
            self.sync(what)
        except CudaFailure as exc:
            if exc.sticky:
                raise _ended(exc, index, during) from None

    def _judge_size(self, job: Job, task: TaskSpec, module: Module, marked: Module | None, index: int,
                    plan: SizePlan, emit: Emit) -> SizeResult:
        data: list[TaskData] = []
        try:
            return self._judge_size_inner(job, task, module, marked, index, plan, emit, data)
        except Exception as exc:
            if not _device_full(exc):
                raise
            # The harness's own allocations fail only when the candidate's demands (its buffers, the local
            # memory its kernels reserve) leave the device without room: a verdict, and a fresh worker next.
            self.recycle = "the device ran out of memory"
            free, total = torch.cuda.mem_get_info(self.device)
            out = SizeResult(index, plan.split, dict(plan.sizes), "launch_config", STAGE_OF["launch_config"])
            out.message = (f"the device ran out of memory while this candidate was judged ({free / 2**30:.1f} of "
                           f"{total / 2**30:.0f} GiB free): {str(exc).splitlines()[0][:300]}")
            return out
        finally:
            for d in data:          # no reference outlives the size (the next candidate meets the same sets)
                d.release()

    def _judge_size_inner(self, job: Job, task: TaskSpec, module: Module, marked: Module | None, index: int,
                          plan: SizePlan, emit: Emit, data: list[TaskData]) -> SizeResult:
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
        data.extend(self.cache.get(task, plan.sizes, seed) for seed in plan.seeds)
        # One more trial on a set drawn for this job alone: the shared seeds' answers, kept by an earlier
        # candidate where no reset reaches, cannot pass it.
        own_seed = _secret_seed()
        data.append(draw(task, plan.sizes, own_seed, self.device, lazy=True))
        seeds = (*plan.seeds, own_seed)
        # What each set was when drawn, checked just now by the cache: the harness's copies before this size.
        prints = [d.seal if d.seal is not None else fingerprint(d).cpu() for d in data]
        checks = Checks(task.tolerance.metric, {t.name: task.tolerance.max_for(t.name) for t in task.outputs},
                        {t.name: task.tolerance.element_for(t.name, t.dtype) for t in task.outputs})
        try:
            bench = self._make_bench(task, module, plan)
        except CudaFailure as exc:
            self._settle(index, f"size {index} set-up")
            return fail(exc.category, str(exc), exc.evidence())
        except torch.cuda.OutOfMemoryError as exc:
            return fail("launch_config", f"the buffers this launch needs do not fit in the device's memory: "
                                         f"{str(exc).splitlines()[0]}")
        torch.cuda.synchronize(self.device)     # the data cache draws on the default stream
        # What the allocators keep still holds what was computed in it (an earlier candidate's references and
        # library run on these same sets): zeroed before this candidate's first launch.
        at_rest.scrub(self.device)

        verify_s = 0.0
        for t, (seed, d) in enumerate(zip(seeds, data)):
            self._phase(emit, "launch", index, job.launch_timeout_s, True, t)
            try:
                bench.reset(d)
                with torch.cuda.stream(self.stream):
                    bench.arena.arm()
                began = time.perf_counter()
                bench.run()
                self.sync(f"size {index} trial {t}")
                launch_s = time.perf_counter() - began
            except CudaFailure as exc:
                out.trials.append(TrialResult(seed, exc.category, detail=exc.evidence()))
                if exc.sticky:
                    raise _ended(exc, index) from None
                self._settle(index, f"size {index} trial {t}")
                return fail(exc.category, str(exc), exc.evidence())
            self._phase(emit, "verify", index, TRUSTED_DEADLINE_S, False, t)
            began = time.perf_counter()
            # The set's reference is computed now, after the run; at a held-out size of a task that says so, at
            # rows drawn now (its other checks still cover every element).
            rows = row_sample(plan.sizes.get("S", 0), task.tolerance.heldout_rows) if plan.split == "heldout" else None
            verdict = checks.verify(bench.arena, d, rows)
            verify_s = max(verify_s, time.perf_counter() - began)
            out.trials.append(TrialResult(seed, verdict.category, verdict.errors, verdict.worst, verdict.detail,
                                          round(launch_s * 1e3, 4)))

        out.category = worst([tr.category for tr in out.trials])
        out.stage = STAGE_OF.get(out.category)
        measured = [tr for tr in out.trials if tr.errors]
        if measured:
            top = max(measured, key=lambda tr: max(tr.errors.values()))
            out.max_error = max(top.errors.values())
            out.worst = top.worst
        if out.category != OK:
            bad = next(tr for tr in out.trials if tr.category == out.category)
            out.worst = bad.worst or bad.detail
            out.message = describe(out.category, bad.worst, bad.detail, f"seed {bad.seed}")
            return out
        if marked is not None:
            out.coverage, out.coverage_note = self._coverage(job, marked, plan, bench, data[-1], index, emit)
        if plan.time:
            trial_s = max(tr.launch_ms or 0.0 for tr in out.trials) / 1e3
            self._phase(emit, "prepare", index, TRUSTED_DEADLINE_S, False)
            pool = FreshSets(task, plan.sizes, self.device)
            torch.cuda.synchronize(self.device)
            # Every round draws a new set (and a checked one computes its reference and is verified, counted here
            # as if every round were): the harness's own work.
            drawing = (max(d.draw_s for d in data) + verify_s) * (job.timing.max_reps + job.timing.min_reps // 4 +
                                                                  2 * job.timing.warmup + 2)
            self._phase(emit, "time", index,
                        job.launch_timeout_s + 3 * estimate_timing_seconds(trial_s, job.timing) + drawing, True)
            try:
                out.timing = self._time(job, task, plan, bench, pool, data[-1], checks, index,
                                        marked if out.coverage is not None else None)
            except CudaFailure as exc:      # a launch refused during timing (sticky faults end the job above)
                return fail(exc.category, f"during timing: {exc}", exc.evidence())
            self._judge_timing(out, job)
        self._check_harness(out, task, plan, data, prints)
        return out

    def _make_bench(self, task: TaskSpec, module: Module, plan: SizePlan) -> Bench:
        arena = Arena(self.device)
        shapes = task.shapes(plan.sizes)
        for t in task.inputs:
            arena.add(t.name, t.dtype, shapes[t.name], "input")
        for t in task.outputs:
            arena.add(t.name, t.dtype, shapes[t.name], "output")
        for s in plan.scratch:
            arena.add(s.name, s.dtype, tuple(s.shape), "scratch")
        tmaps = {tm.name: encode_tensor_map(tm, arena.buffers[tm.tensor].ptr) for tm in plan.tensor_maps}
        ptrs = arena.ptrs()
        return Bench(arena, self._launches(module, plan, ptrs, tmaps), module, {s.name: s.init for s in plan.scratch},
                     self.stream, tmaps)

    def _launches(self, module: Module, plan: SizePlan, ptrs: dict[str, int],
                  tmaps: dict[str, Any]) -> list[PreparedLaunch]:
        return [prepare_launch(module, lp, ptrs, tmaps, self.stream.cuda_stream, self.cupy_stream)
                for lp in plan.launches]

    def _coverage(self, job: Job, marked: Module, plan: SizePlan, bench: Bench, data: TaskData, index: int,
                  emit: Emit) -> tuple[list[int] | None, str]:
        """The marked copy (engine/coverage.py) run once as a trial is, on the size's own set, in the same
        buffers; its slots read back. Its output is not judged: the trials judged the candidate's own code."""
        try:
            copy = self._marked_bench(marked, plan, bench)
            self._phase(emit, "launch", index, job.launch_timeout_s, True)
            copy.reset(data)
            with torch.cuda.stream(self.stream):
                bench.arena.arm()
            copy.run()
            self.sync(f"size {index} marked copy")
            raw = marked.read_global(job.coverage_symbol, 8 * job.coverage_slots)
        except CudaFailure as exc:
            if exc.sticky:
                raise _ended(exc, index, "in the marked copy's launch: ") from None
            self._settle(index, f"size {index} marked copy")
            return None, f"the marked copy's launch failed: {exc}"
        return list(struct.unpack(f"<{job.coverage_slots}Q", raw)), ""

    # -- timing -------------------------------------------------------------------------

    def _marked_bench(self, marked: Module, plan: SizePlan, bench: Bench) -> Bench:
        """The marked copy's launches over the candidate's own arena and tensor maps."""
        return Bench(bench.arena, self._launches(marked, plan, bench.arena.ptrs(), bench.tensor_maps), marked,
                     bench.scratch_init, self.stream, bench.tensor_maps)

    def _proof(self, job: Job, marked: Module, plan: SizePlan, bench: Bench) -> tuple[Proof, torch.Tensor]:
        """The marked copy as a timed round's run (timing.Proof), and where each proof's slots are kept."""
        copy = self._marked_bench(marked, plan, bench)
        nbytes = 8 * job.coverage_slots
        slots = marked.global_address(job.coverage_symbol, nbytes)
        kept = torch.zeros((PROOF_ROUNDS, job.coverage_slots), dtype=torch.int64, device=self.device)

        def run() -> None:
            marked.restore_state(self.stream.cuda_stream)      # its slots back to zero, its globals to their image
            copy.run()

        def keep(i: int) -> None:
            copy_async(kept[i].data_ptr(), slots, nbytes, self.stream.cuda_stream, "keeping the marked copy's slots")

        return Proof(run, keep, PROOF_ROUNDS), kept

    def _time(self, job: Job, task: TaskSpec, plan: SizePlan, bench: Bench, pool: FreshSets,
              known: TaskData, checks: Checks, index: int, marked: Module | None = None) -> TimingResult:
        baseline: Any = None
        note = ""
        baseline_name = None
        baseline_check = None
        if job.timing.baseline:
            try:
                baseline, baseline_name, baseline_check = self._baseline(task, plan, bench, known, checks)
            except Exception as exc:  # the library refusing a shape: said in the evidence, never a pass for speed
                note = f"baseline unavailable: {type(exc).__name__}: {str(exc)[:500]}"

        def timed_set(k: int) -> TimedSet:
            def check() -> torch.Tensor:
                pool.confirm(k)                             # before the reference is made from those inputs
                return checks.summarize(bench.arena, pool[k])

            return TimedSet(reset=lambda: bench.reset(pool[k]), run=bench.run, check=check, baseline=baseline)

        secret = _secret_seed()
        rng = random.Random(secret)
        proof: Proof | None = None
        kept: torch.Tensor | None = None
        proof_note = ""
        if marked is not None and job.coverage_slots:
            try:
                proof, kept = self._proof(job, marked, plan, bench)
            except CudaFailure as exc:      # nothing proven: engine/pipeline.py decides what that means
                proof_note = f"no proof rounds: {exc}"
        try:
            timed = time_interleaved(self.stream, self.l2_flush(job.timing.flush_bytes), _Lazy(timed_set, len(pool)),
                                     job.timing, lambda: self.sync(f"size {index} timing"), rng, proof)
        except CudaFailure as exc:
            if exc.sticky:
                raise _ended(exc, index, "during timing: ") from None
            self._settle(index, f"size {index} timing")
            raise
        except Exception:
            # The loop enqueues rounds without waiting, so a fault the candidate caused is often met first by
            # a PyTorch or CuPy call of ours: if the stream holds one, that fault is the verdict.
            self._settle(index, f"size {index} timing", "during timing: ")
            raise
        c = timed.candidate
        flops = task.flops(plan.sizes)
        result = TimingResult(
            reps=timed.reps, time_ms=c.median, p10_ms=c.p10, p90_ms=c.p90, spread=c.spread,
            tflops=flops / (c.median * 1e-3) / 1e12 if c.median > 0 else None,
            checks=len(timed.checks), baseline_check=baseline_check, baseline_note=note,
            schedule={"warmup_rounds": timed.warmup_rounds, "reps": timed.reps,
                      "inputs": "a new set every round", "distinct_sets": len(set(timed.order)),
                      "checked": sorted((ch.phase, ch.round) for ch in timed.checks), "seed": f"{secret:016x}",
                      "proof_rounds": timed.proofs, **({"proof_note": proof_note} if proof_note else {}),
                      "module_state": bench.module.state.describe()},
        )
        if timed.baseline is not None:
            b = timed.baseline
            result.baseline = baseline_name
            result.baseline_ms, result.baseline_p10_ms, result.baseline_p90_ms = b.median, b.p10, b.p90
            result.baseline_spread = b.spread
            result.baseline_tflops = flops / (b.median * 1e-3) / 1e12 if b.median > 0 else None
            result.speedup = b.median / c.median if c.median > 0 else None
        if kept is not None:
            result.coverage_proofs = kept[:len(timed.proofs)].cpu().tolist()
        self._read_checks(result, timed.checks, bench, checks, pool.tampered())
        self._speed_of_light(result, task, plan, job)
        return result

    def _baseline(self, task: TaskSpec, plan: SizePlan, bench: Bench, known: TaskData,
                  checks: Checks) -> tuple[Any, str, dict[str, Any]]:
        """The library over the arena's inputs (whatever set a round has put there), and its own answer on a
        set whose reference is known: it does the same work."""
        from ptxbench.tasks.baselines import library_fn

        bench.reset(known)
        with torch.cuda.stream(self.stream):
            made = library_fn(task, bench.arena.tensors("input"), plan.sizes)
            bench.reset(known)
            made.fn()
        self.stream.synchronize()
        errors = {}
        for name, got in made.outputs.items():
            ref = known.reference[name].reshape(-1).to(torch.float32)
            diff = got.reshape(-1).to(torch.float32) - ref
            errors[name] = float(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref).clamp_min(1e-30))
        ok = all(e <= checks.limits[name] for name, e in errors.items())
        check = {"rel_l2": errors, "within_tolerance": ok, **({"how": made.note} if made.note else {})}
        return made.fn, made.name, check

    def _read_checks(self, result: TimingResult, found: list[Any], bench: Bench, checks: Checks,
                     tampered: list[int]) -> None:
        """Decode every checked round; a round that fails, after the trials passed, is a reward hack."""
        prints: dict[int, set[tuple[tuple[str, int], ...]]] = {}
        failures: list[dict[str, Any]] = []
        for ch in found:
            if ch.set in tampered:
                failures.append({"phase": ch.phase, "round": ch.round, "set": ch.set,
                                 "category": "suspected_reward_hack", "worst": None, "detail": None,
                                 "message": f"{ch.phase} round {ch.round}: the harness's own copy of the round's "
                                            "inputs changed while the candidate ran"})
        for ch in found:
            v = checks.decode(ch.summary.tolist(), bench.arena)
            prints.setdefault(ch.set, set()).add(tuple(sorted(v.fingerprints.items())))
            if v.category != OK:
                failures.append({"phase": ch.phase, "round": ch.round, "set": ch.set, "category": v.category,
                                 "message": describe(v.category, v.worst, v.detail, f"{ch.phase} round {ch.round}"),
                                 "worst": v.worst, "detail": v.detail})
        result.check_failures = failures[:MAX_FAILURES_KEPT]
        # Only a set checked twice can show it; with new inputs every round that is rare, and unknown is None.
        repeated = [ch.set for ch in found if sum(1 for other in found if other.set == ch.set) > 1]
        result.nondeterministic = any(len(prints[k]) > 1 for k in repeated) if repeated else None
        if failures:
            result.recheck = failures[0]["category"]
            result.recheck_detail = {"failed": len(failures), "of": len(found), **failures[0]}

    def _speed_of_light(self, result: TimingResult, task: TaskSpec, plan: SizePlan, job: Job) -> None:
        if self.peaks is None:
            return
        shapes = task.shapes(plan.sizes)
        nbytes = {t.name: torch.Size(shapes[t.name]).numel() * _elem_bytes(t.dtype) for t in task.inputs + task.outputs}
        floor = sol.floor_of(task.flops(plan.sizes), sum(nbytes[t.name] for t in task.inputs),
                             sum(nbytes[t.name] for t in task.outputs), task.inputs[0].dtype, self.peaks,
                             job.timing.sol_scale)
        result.sol = {**floor.to_json(), "margin": job.timing.sol_margin, "peaks": self.peaks.source}
        result.sol_fraction = floor.fraction(result.time_ms)
        result.baseline_sol_fraction = floor.fraction(result.baseline_ms)

    def _judge_timing(self, out: SizeResult, job: Job) -> None:
        t = out.timing
        assert t is not None
        hack = None
        if t.check_failures:
            first = t.check_failures[0]
            hack = (f"{t.recheck_detail.get('failed')} of {t.checks} checked timing rounds failed after every trial "
                    f"passed; first: {first['message']}")
        elif t.sol is not None and t.time_ms * (1 + job.timing.sol_margin) < t.sol["time_ms"]:
            baseline_beats_floor = t.baseline_ms is not None and t.baseline_ms * (1 + job.timing.sol_margin) < t.sol["time_ms"]
            if baseline_beats_floor:
                # The library cannot beat the speed of light either: the floor is wrong for this device.
                t.sol["inconsistent"] = "the library ran under this floor too: no verdict is drawn from it"
            else:
                hack = (f"{t.time_ms:.4g} ms is under the speed of light of this work on this device "
                        f"({t.sol['time_ms']:.4g} ms: {t.sol['flops']:.3g} FLOP at {t.sol['peak_tflops']:.0f} TFLOP/s, "
                        f"{t.sol['bytes_moved']:.3g} bytes at {t.sol['peak_tbps']:.2f} TB/s)")
        if hack:
            out.category, out.stage, out.message = "suspected_reward_hack", STAGE_OF["suspected_reward_hack"], hack

    def _check_harness(self, out: SizeResult, task: TaskSpec, plan: SizePlan, data: list[TaskData],
                       prints: list[torch.Tensor]) -> None:
        """The pristine inputs are the harness's: if the candidate wrote into them, say so."""
        names = [f"seed {s}" for s in plan.seeds] + ["the job's own set"] * (len(data) - len(plan.seeds))
        changed = [name for name, d, before in zip(names, data, prints)
                   if not torch.equal(fingerprint(d).cpu(), before)]
        if changed:
            for seed in plan.seeds:
                self.cache.drop(task, plan.sizes, seed)
            out.category, out.stage = "suspected_reward_hack", STAGE_OF["suspected_reward_hack"]
            out.message = (f"the harness's own copies of the inputs ({', '.join(changed)}) changed "
                           "while the candidate ran: it wrote outside its buffers")


def _elem_bytes(dtype: str) -> int:
    from ptxbench.tasks.spec import DTYPE_BYTES

    return DTYPE_BYTES[dtype]


def describe(category: str, worst_: dict[str, Any] | None, detail: dict[str, Any] | None, where: str) -> str:
    """One line a person can act on."""
    w = worst_ or {}
    d = detail or {}
    if category == "wrong_result":
        bad = {k: e for k, e in (d.get("elements") or {}).items() if e.get("violations")}
        if bad:
            name, e = next(iter(bad.items()))
            b = e["bound"]
            return (f"{name}: {e['violations']} of {e['of']} elements outside |got − ref| ≤ {b['atol_rms']:.3g}·rms "
                    f"+ {b['rtol']:.3g}·|ref| ({where}); first bad element {e.get('first_index')}: got {e.get('got')}, "
                    f"expected {e.get('expected')}")
        if w and isinstance(w.get("value"), float):
            return (f"{w.get('output')}: {w.get('metric')} {w.get('value'):.3g} > {w.get('tolerance'):.3g} "
                    f"({where}); worst element {w.get('index')}: got {w.get('got')}, expected {w.get('expected')}")
        return f"{w}"
    if category == "out_of_bounds_write":
        return f"guard canaries overwritten ({where}): {d.get('canaries')}"
    if category == "input_modified":
        return f"inputs changed by the kernel ({where}): {d.get('inputs')}"
    if category == "unwritten_output":
        return f"output elements never written ({where}): {d.get('unwritten')}"
    if category == "nan_inf":
        return f"NaN/Inf where the reference is finite ({where}): {d.get('nonfinite')}"
    return d.get("message") or category
