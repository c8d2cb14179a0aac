"""The timing schedule's arithmetic, on the CPU: how many warm-up and checked rounds a judgement gets."""

from __future__ import annotations

import math
import random

import pytest

torch = pytest.importorskip("torch")

from ptxbench.engine.gpu.protocol import TimingConfig  # noqa: E402
from ptxbench.engine.gpu.timing import checks_for, estimate_timing_seconds, warmup_rounds  # noqa: E402

CONFIG = TimingConfig()


@pytest.mark.parametrize("seed", range(20))
def test_rounds_that_cost_host_time_are_not_multiplied_by_a_tiny_kernel(seed):
    # A 20 µs kernel whose round draws a new 16M-element input set (about 5 ms of wall time):
    # the warm-up lasts about warmup_s of wall time, not a thousand rounds.
    rng = random.Random(seed)
    n = warmup_rounds(20e-6, 5e-3, CONFIG, rng)
    assert CONFIG.warmup - 1 <= n <= CONFIG.warmup - 1 + CONFIG.warmup + CONFIG.warmup_s * (1 + CONFIG.jitter) / 5e-3
    assert (1 + n) * 5e-3 < estimate_timing_seconds(20e-6, CONFIG) + 5e-3 * CONFIG.warmup


@pytest.mark.parametrize("seed", range(20))
def test_a_kernel_whose_rounds_are_all_gpu_time_warms_up_for_warmup_s(seed):
    rng = random.Random(seed)
    n = warmup_rounds(1e-3, 1.1e-3, CONFIG, rng)
    wanted_low = CONFIG.warmup_s * (1 - CONFIG.jitter) / 1.1e-3
    assert n + 1 >= wanted_low and n <= 1000


def test_the_warm_up_length_is_jittered():
    lengths = {warmup_rounds(50e-6, 60e-6, CONFIG, random.Random(s)) for s in range(30)}
    assert len(lengths) > 5


@pytest.mark.parametrize("rounds", [10, 30, 57, 130])
def test_checked_rounds_are_a_random_subset_of_at_least_min_checks(rounds):
    picked = [checks_for(rounds, CONFIG, random.Random(s)) for s in range(10)]
    wanted = min(rounds, max(CONFIG.min_checks, math.ceil(CONFIG.check_fraction * rounds)))
    assert all(len(p) == wanted for p in picked)
    assert all(p <= set(range(rounds)) for p in picked)
    if rounds > CONFIG.min_checks:
        assert len({frozenset(p) for p in picked}) > 1


def test_a_job_s_sets_stay_cached_when_the_cache_cannot_hold_them_all():
    """Three sets in order, room for two: plain LRU evicts each just before its next use; the cache keeps
    what the running job has used and does without the one that does not fit."""
    from ptxbench.engine.gpu.datacache import DataCache
    from ptxbench.tasks.spec import get_task

    task = get_task("vector_add_smoke")
    sizes = {"N": 4096}
    probe = DataCache(torch.device("cpu"), 1 << 40)
    one = probe.get(task, sizes, 1).nbytes
    cache = DataCache(torch.device("cpu"), int(2.5 * one))
    for _job in range(3):
        cache.begin_job()
        for seed in (1, 2, 3):
            cache.get(task, sizes, seed)
    assert cache.misses == 3 + 1 + 1          # all three once, then only the one there is no room for
    assert cache.hits == 4


def test_sets_of_an_earlier_job_make_room_for_this_one():
    from ptxbench.engine.gpu.datacache import DataCache
    from ptxbench.tasks.spec import get_task

    task = get_task("vector_add_smoke")
    probe = DataCache(torch.device("cpu"), 1 << 40)
    one = probe.get(task, {"N": 4096}, 1).nbytes
    cache = DataCache(torch.device("cpu"), int(2.5 * one))
    cache.begin_job()
    cache.get(task, {"N": 4096}, 1)
    cache.get(task, {"N": 4096}, 2)
    cache.begin_job()
    for seed in (5, 6):
        cache.get(task, {"N": 4096}, seed)
    cache.get(task, {"N": 4096}, 5)
    cache.get(task, {"N": 4096}, 6)
    assert cache.hits == 2 and cache.misses == 4


@pytest.mark.parametrize("seed", range(5))
def test_nothing_before_a_run_depends_on_whether_its_round_is_checked(monkeypatch, seed):
    """The timing loop, with the GPU calls faked: every round's work up to the candidate's run is the same
    sequence, checked round or not, and a check comes only after the run it checks (work enqueued ahead of
    checked rounds alone would show in the gap a kernel can time from its previous run)."""
    import contextlib

    from ptxbench.engine.gpu import timing
    from ptxbench.engine.gpu.timing import TimedSet, time_interleaved

    log: list[str] = []

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            pass

        def record(self, stream: object = None) -> None:
            log.append("event")

        def elapsed_time(self, other: object) -> float:
            return 0.5                      # ms: a round of the candidate, or of the baseline

    class Sets:
        def __len__(self) -> int:
            return 1 << 20

        def __getitem__(self, k: int) -> TimedSet:
            return TimedSet(reset=lambda: log.append("reset"), run=lambda: log.append("run"),
                            check=lambda: log.append("check") or torch.zeros(1), baseline=lambda: log.append("baseline"))

    monkeypatch.setattr(timing.torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(timing.torch.cuda, "Event", Event)
    out = time_interleaved(None, lambda: log.append("flush"), Sets(), CONFIG, lambda: log.append("sync"), random.Random(seed))

    runs = [i for i, op in enumerate(log) if op == "run"]
    assert len(runs) == out.warmup_rounds + out.reps
    checked = 0
    for j, at in enumerate(runs):
        begins = log.index("reset", runs[j - 1] if j else 0)
        assert log[begins:at] == ["reset", "flush", "event"]        # the same for every round
        after = log[at + 1:runs[j + 1] if j + 1 < len(runs) else len(log)]
        after = [op for op in (after[:after.index("reset")] if "reset" in after else after) if op != "sync"]
        assert after in (["event", "flush", "event", "baseline", "event"],
                         ["event", "check", "flush", "event", "baseline", "event"])
        checked += "check" in after
    assert checked == len(out.checks) >= CONFIG.min_checks
