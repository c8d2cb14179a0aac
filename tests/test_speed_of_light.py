"""The speed-of-light floor: peaks from device attributes, the floor of a task's work, the verdict margin."""

from __future__ import annotations

import pytest

from ptxbench.engine.gpu.sol import FALLBACK, floor_of, peaks_of
from ptxbench.tasks.spec import get_task

H200 = dict(name="NVIDIA H200", arch="sm_90a", num_sms=132, l2_bytes=60 << 20)


def test_h200_peaks_from_its_attributes():
    p = peaks_of(**H200, sm_clock_khz=1_980_000, mem_clock_khz=3_201_000, bus_width_bits=6144)
    assert p.flops_per_s("bf16") == pytest.approx(132 * 4096 * 1.98e9)          # 1070 TFLOP/s dense
    assert p.hbm_bytes_per_s == pytest.approx(4.917e12, rel=1e-3)              # the datasheet's 4.8 TB/s
    assert p.flops_per_s("f8e4m3") == 2 * p.flops_per_s("bf16")
    assert "from the driver" in p.source


def test_missing_attributes_fall_back_to_the_datasheet_table():
    p = peaks_of(**H200, sm_clock_khz=None, mem_clock_khz=None, bus_width_bits=None)
    assert p.sm_clock_mhz == FALLBACK["H200"][0] and p.hbm_bytes_per_s == FALLBACK["H200"][1]
    assert "datasheet" in p.source


def test_the_headline_gemm_floor_is_compute_bound_and_below_what_cublas_reaches():
    task = get_task("gemm_bf16_sm90a")
    s = task.headline
    p = peaks_of(**H200, sm_clock_khz=1_980_000, mem_clock_khz=3_201_000, bus_width_bits=6144)
    shapes = task.shapes(s)
    in_bytes = sum(2 * shapes[t.name][0] * shapes[t.name][1] for t in task.inputs)
    out_bytes = 2 * shapes["C"][0] * shapes["C"][1]
    f = floor_of(task.flops(s), in_bytes, out_bytes, "bf16", p)
    assert f.compute_ms > f.memory_ms
    assert 0.55 < f.time_ms < 0.57                       # 6.0e11 FLOP at 1070 TFLOP/s
    cublas_ms = 0.8419                                   # results/gpu-engine-20261129-2348.md
    assert f.fraction(cublas_ms) == pytest.approx(0.66, abs=0.01)
    assert not f.too_fast(cublas_ms)
    assert f.too_fast(f.time_ms / 2) and not f.too_fast(f.time_ms * 0.95)


def test_outputs_that_fit_in_l2_do_not_count_toward_the_memory_floor():
    p = peaks_of(**H200, sm_clock_khz=1_980_000, mem_clock_khz=3_201_000, bus_width_bits=6144)
    small = floor_of(0, 32 << 20, 32 << 20, "bf16", p)
    assert small.bytes_moved == 32 << 20
    big = floor_of(0, 32 << 20, 100 << 20, "bf16", p)
    assert big.bytes_moved == (32 << 20) + (40 << 20)


def test_a_lowered_peak_makes_an_honest_time_too_fast():
    p = peaks_of(**H200, sm_clock_khz=1_980_000, mem_clock_khz=3_201_000, bus_width_bits=6144)
    honest = floor_of(6 * 10**11, 10**8, 10**8, "bf16", p)
    scaled = floor_of(6 * 10**11, 10**8, 10**8, "bf16", p, scale=1e-3)
    assert not honest.too_fast(0.8) and scaled.too_fast(0.8)
