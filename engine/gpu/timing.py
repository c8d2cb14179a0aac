"""Time a candidate and the library baseline the same way, interleaved, on one stream.

Each repetition: flush L2 by writing a buffer of at least twice its size
(outside the timed region), record an event, enqueue the launches, record an
event; then the same for the baseline. Repetitions rotate through the trial's
input sets (different seeds, each in its own buffers), so neither side can be
served from a result or a cache line left by the previous repetition. Before
every candidate launch its outputs are poisoned again (outside the timed
region), so a kernel cannot skip work it finds already done; before the last
one the caller may also put fresh inputs in place, so the re-check afterwards
sees what that launch computed from data it has never seen. Warm-up runs first; the number of
repetitions is chosen from the warm-up time (at least `min_reps`).

Runs inside the worker process only (imports torch).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ptxbench.engine.gpu.protocol import TimingConfig


@dataclass
class Samples:
    ms: list[float]

    @property
    def median(self) -> float:
        return float(np.median(self.ms))

    @property
    def p10(self) -> float:
        return float(np.percentile(self.ms, 10))

    @property
    def p90(self) -> float:
        return float(np.percentile(self.ms, 90))

    @property
    def spread(self) -> float:
        m = self.median
        return (self.p90 - self.p10) / m if m > 0 else math.inf


@dataclass
class Interleaved:
    candidate: Samples
    baseline: Samples | None
    reps: int
    last_set: int                  # which input set the last timed candidate launch used


def _timed(stream: torch.cuda.Stream, flush: torch.Tensor, fn: Callable[[], None],
           start: torch.cuda.Event, end: torch.cuda.Event) -> None:
    flush.zero_()
    start.record(stream)
    fn()
    end.record(stream)


def time_interleaved(
    stream: torch.cuda.Stream,
    flush: torch.Tensor,
    candidate: list[Callable[[], None]],
    baseline: list[Callable[[], None]] | None,
    config: TimingConfig,
    synchronize: Callable[[], None],
    before_last: Callable[[int], None] | None = None,
    before_each: Callable[[int], None] | None = None,
) -> Interleaved:
    """`candidate[k]` / `baseline[k]` enqueue one run on input set k; `synchronize` raises on a fault."""
    sets = len(candidate)
    with torch.cuda.stream(stream):
        # Warm-up: one timed round to learn the cost, then enough rounds for `warmup` and `warmup_s` of
        # GPU time, enqueued back to back (no host gaps) so clocks reach their working state.
        warm = [torch.cuda.Event(enable_timing=True) for _ in range(4)]

        def round_(k: int) -> None:
            if before_each is not None:
                before_each(k % sets)
            _timed(stream, flush, candidate[k % sets], warm[0], warm[1])
            if baseline:
                _timed(stream, flush, baseline[k % sets], warm[2], warm[3])

        def last_cost() -> float:
            cost = warm[0].elapsed_time(warm[1]) / 1e3
            return max(cost, warm[2].elapsed_time(warm[3]) / 1e3) if baseline else cost

        round_(0)
        synchronize()
        pair = last_cost() * (2 if baseline else 1)
        more = max(config.warmup - 1, math.ceil(config.warmup_s / pair) - 1 if pair > 0 else 0)
        for r in range(1, 1 + min(more, 1000)):
            round_(r)
        synchronize()
        per_rep = last_cost()
        reps = config.max_reps if per_rep <= 0 else math.ceil(config.target_s / per_rep)
        reps = max(config.min_reps, min(config.max_reps, reps))

        c_events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        b_events = ([(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(reps)] if baseline else [])
        for i in range(reps):
            k = i % sets
            if i == reps - 1 and before_last is not None:
                before_last(k)
            elif before_each is not None:
                before_each(k)
            _timed(stream, flush, candidate[k], *c_events[i])
            if baseline:
                _timed(stream, flush, baseline[k], *b_events[i])
        synchronize()
    cand = Samples([a.elapsed_time(b) for a, b in c_events])
    base = Samples([a.elapsed_time(b) for a, b in b_events]) if baseline else None
    return Interleaved(cand, base, reps, (reps - 1) % sets)


def estimate_timing_seconds(trial_seconds: float, config: TimingConfig) -> float:
    """An upper bound on the timing step's duration, from one trial's launch time (for its deadline)."""
    per_rep = max(trial_seconds, 1e-4) * (2 if config.baseline else 1) + 2e-3
    warm = max(config.warmup * per_rep, config.warmup_s * 2)
    return warm + config.max_reps * per_rep
