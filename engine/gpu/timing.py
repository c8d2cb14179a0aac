"""Time a candidate and the library baseline the same way, interleaved, on one stream.

Every round, outside the timed region: the candidate's state is put back
(`reset`: the round's input set copied in, outputs poisoned, scratch
re-initialised, module globals restored) and L2 is emptied (engine/gpu/l2.py: a
buffer several times its size stored under an evict_last policy, then discarded, so no line a kernel
marked to be kept survives); then an event, the candidate's launches, an event;
then the same for the baseline on the same inputs.

Nothing about a round tells the candidate whether it counts. A schedule drawn
per judgement from a secret seed (`random.Random(os.urandom)`) decides which
input set each round uses (in no fixed order), how long the warm-up lasts and
how many rounds are timed (both jittered), and which rounds are checked: a
random subset of warm-up and timed rounds has its outputs verified against the
reference of its input set, on the GPU right after the round (`check`
enqueues the reductions; nothing waits for them until the end). What a check costs
comes after the round's run, never before it, so the time between a kernel's runs tells it at most
whether the round before was checked, never whether this one is. A kernel that
skips work, serves a saved result or counts launches is caught on whichever
round it cheats in, with a probability that grows with every round it cheats.

Runs inside the worker process only (imports torch).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

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
class TimedSet:
    """One input set as the timing loop sees it: every callable only enqueues work on the stream."""

    reset: Callable[[], None]                   # put the candidate's state back and this set's inputs in place
    run: Callable[[], None]                     # the candidate's launches
    check: Callable[[], torch.Tensor]           # the verification summary of what `run` just wrote
    baseline: Callable[[], object] | None = None


@dataclass
class Check:
    phase: str                                  # warmup | timed
    round: int
    set: int
    summary: torch.Tensor


@dataclass
class Interleaved:
    candidate: Samples
    baseline: Samples | None
    reps: int
    warmup_rounds: int
    order: list[int]                            # the input set of each timed round
    checks: list[Check] = field(default_factory=list)
    proofs: list[int] = field(default_factory=list)   # timed rounds where the marked copy ran instead


@dataclass
class Proof:
    """The marked copy (engine/coverage.py) in a few timed rounds at secret places, in the candidate's stead:
    the same reset, the same flush and events, then `keep(i)` enqueues a copy of its slots for proof `i`."""

    run: Callable[[], None]                     # its module's state restored, then its launches
    keep: Callable[[int], None]
    rounds: int = 3


def _timed(stream: torch.cuda.Stream, flush: Callable[[], None], fn: Callable[[], object],
           start: torch.cuda.Event, end: torch.cuda.Event) -> None:
    flush()
    start.record(stream)
    fn()
    end.record(stream)


def checks_for(rounds: int, config: TimingConfig, rng: random.Random) -> set[int]:
    """Which of `rounds` timed rounds are verified: a random subset, never fewer than `min_checks`."""
    n = min(rounds, max(config.min_checks, math.ceil(config.check_fraction * rounds)))
    return set(rng.sample(range(rounds), n))


def jittered(value: float, jitter: float, rng: random.Random) -> float:
    return value * rng.uniform(1 - jitter, 1 + jitter)


def time_interleaved(stream: torch.cuda.Stream, flush: Callable[[], None], sets: list[TimedSet], config: TimingConfig,
                     synchronize: Callable[[], None], rng: random.Random, proof: Proof | None = None) -> Interleaved:
    """Warm up, then time `reps` rounds; `synchronize` raises on a fault. `proof`: that many of the timed
    rounds, drawn with the rest of the schedule, run the marked copy instead; each is checked, and left out
    of the candidate's samples (and the baseline's, so both medians come from the same rounds)."""
    # Every set of a judgement has a baseline or none has; `sets` may be a lazy million (fresh inputs each round).
    with_baseline = len(sets) > 0 and sets[0].baseline is not None
    checks: list[Check] = []
    with torch.cuda.stream(stream):
        warm = [torch.cuda.Event(enable_timing=True) for _ in range(4)]

        def round_(k: int, phase: str, index: int, check: bool, events: tuple, proof_at: int | None = None) -> None:
            # Nothing before the run depends on whether the round is checked: work enqueued only ahead of
            # checked rounds would show in the gap a kernel can time from its own previous run
            # (%globaltimer kept in memory the reset does not reach). A check's work comes after the run.
            s = sets[k]
            s.reset()
            if proof_at is None:
                _timed(stream, flush, s.run, events[0], events[1])
            else:
                assert proof is not None
                _timed(stream, flush, proof.run, events[0], events[1])
                proof.keep(proof_at)
            if check:
                checks.append(Check(phase, index, k, s.check()))
            if with_baseline:
                assert s.baseline is not None
                _timed(stream, flush, s.baseline, events[2], events[3])

        def last_cost() -> float:
            cost = warm[0].elapsed_time(warm[1]) / 1e3
            return max(cost, warm[2].elapsed_time(warm[3]) / 1e3) if with_baseline else cost

        # Warm-up: one round to learn the cost, then enough rounds for `warmup` and a jittered `warmup_s`
        # (a round costing the larger of its GPU time and its wall time: `warmup_rounds`), enqueued back to
        # back (no host gaps) so clocks reach their working state.
        began = time.perf_counter()
        round_(rng.randrange(len(sets)), "warmup", 0, rng.random() < config.check_fraction, tuple(warm))
        synchronize()
        first_round_s = time.perf_counter() - began
        pair = last_cost() * (2 if with_baseline else 1)
        more = warmup_rounds(pair, first_round_s, config, rng)
        for r in range(1, 1 + more):
            round_(rng.randrange(len(sets)), "warmup", r, rng.random() < config.check_fraction, tuple(warm))
        synchronize()
        per_rep = last_cost()
        target = jittered(config.target_s, config.jitter, rng)
        reps = config.max_reps if per_rep <= 0 else math.ceil(target / per_rep)
        reps = max(config.min_reps, min(config.max_reps, reps)) + rng.randint(0, max(1, config.min_reps // 4))

        order = [rng.randrange(len(sets)) for _ in range(reps)]
        checked = checks_for(reps, config, rng)
        proofs = sorted(rng.sample(range(reps), min(reps, proof.rounds))) if proof is not None else []
        checked |= set(proofs)
        c_events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        b_events = ([(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(reps)] if with_baseline else [])
        for i, k in enumerate(order):
            round_(k, "timed", i, i in checked, c_events[i] + (b_events[i] if with_baseline else ()),
                   proofs.index(i) if i in proofs else None)
        synchronize()
    timed = [i for i in range(reps) if i not in proofs]
    cand = Samples([c_events[i][0].elapsed_time(c_events[i][1]) for i in timed])
    base = Samples([b_events[i][0].elapsed_time(b_events[i][1]) for i in timed]) if with_baseline else None
    return Interleaved(cand, base, reps, 1 + more, order, checks, proofs)


def warmup_rounds(gpu_s: float, round_s: float, config: TimingConfig, rng: random.Random) -> int:
    """Warm-up rounds after the first: at least `warmup` - 1, enough for a jittered `warmup_s`, plus a random few.

    A round's cost is the larger of its GPU time (`gpu_s`: the launches it times) and the whole first
    round's wall time (`round_s`: resetting the state, drawing a fresh input set, checking). Counting
    the kernel alone would ask a 20 µs kernel whose rounds each draw new inputs for a thousand rounds
    and seconds of host work, which buys no warmer clocks."""
    cost = max(gpu_s, round_s)
    wanted = jittered(config.warmup_s, config.jitter, rng)
    more = max(config.warmup - 1, math.ceil(wanted / cost) - 1 if cost > 0 else 0)
    return min(more + rng.randint(0, config.warmup), 1000)


def estimate_timing_seconds(trial_seconds: float, config: TimingConfig) -> float:
    """An upper bound on the timing step's duration, from one trial's launch time (for its deadline)."""
    # Each round: the candidate and the baseline, the state reset, the flush, and sometimes a check.
    per_rep = max(trial_seconds, 1e-4) * (3 if config.baseline else 2) + 5e-3
    warm = max((2 * config.warmup + 1) * per_rep, config.warmup_s * (1 + config.jitter) * 2)
    return warm + (config.max_reps + config.min_reps // 4 + 1) * per_rep
