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


def test_an_input_set_is_found_by_identity():
    from ptxbench.engine.gpu.datacache import TaskData
    from ptxbench.engine.gpu.datacache import index_of

    sets = [TaskData({"X": torch.ones(4)}, {"Z": torch.ones(4)}) for _ in range(3)]
    with pytest.raises(RuntimeError):
        sets.index(sets[2])  # `==` on tensors: what a list's own index does
    assert index_of(sets, sets[2]) == 2
