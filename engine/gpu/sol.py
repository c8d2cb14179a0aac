"""Speed of light: the fastest any kernel could do a task's work on this device.

A time is bounded below by two things: the arithmetic at the chip's peak dense
rate for the operands' dtype (tensor cores, at the device's maximum SM clock),
and the bytes that must cross HBM at its peak bandwidth (every input read once
after the L2 flush; outputs only past what L2 can hold, since a kernel is done
when its stores reach L2). The larger of the two is the floor. A measured time
under it, by more than a margin, is not a fast kernel but a kernel that did
not do the work (`suspected_reward_hack`); every speed is also reported as a
fraction of this floor, a yardstick that does not move when a library does.

Peaks are derived from the device's own attributes (SM count, maximum SM
clock, memory clock, bus width) and a per-SM, per-clock rate for its
architecture, from NVIDIA's published figures (sources below). They are
theoretical ceilings, above anything measured: cuBLAS reaches about 0.74 of the
bf16 figure on an H200 (results/), so an honest kernel never comes near the bound.

Plain Python: the worker reads the attributes, everything else is arithmetic.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# Dense FLOP per clock per SM by architecture and operand class.
# sm_90: NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022): dense, per SM per clock, 2048 FP16/BF16
#   FMA = 4096 FLOP; TF32 half that; FP8 and INT8 twice; FP32 on the CUDA cores 128 FMA = 256 FLOP.
#   Cross-check: the H100 SXM datasheet's 989.4 TFLOPS BF16 dense = 132 SMs × 4096 × 1.83 GHz.
# sm_100: NVIDIA B200 datasheet (2.25 PFLOPS dense FP16/BF16, 4.5 FP8, 148 SMs) read as 8192 / 16384 FLOP per
#   SM per clock (2.25e15 / (148 × 8192) = 1.86 GHz). Not measured here: no sm_100a device has been lent.
RATES: dict[str, dict[str, int]] = {
    "sm_90a": {"bf16": 4096, "f16": 4096, "tf32": 2048, "fp8": 8192, "int8": 8192, "f32": 256, "f64": 256},
    "sm_100a": {"bf16": 8192, "f16": 8192, "tf32": 4096, "fp8": 16384, "int8": 16384, "f32": 256, "f64": 256},
}
RATE_SOURCES = {
    "sm_90a": "H100 whitepaper/datasheet: 4096 dense BF16 FLOP per SM per clock",
    "sm_100a": "NVIDIA B200 datasheet (2.25 PFLOPS dense BF16 on 148 SMs): 8192 FLOP/clk/SM assumed",
}
# Where the driver cannot say: the maximum SM clock (MHz) and HBM bandwidth (bytes/s) from datasheets.
FALLBACK: dict[str, tuple[float, float]] = {
    "H200": (1980.0, 4.8e12),
    "H100 PCIe": (1755.0, 2.0e12),
    "H100 NVL": (1785.0, 3.9e12),
    "H100": (1980.0, 3.35e12),
    "B200": (1965.0, 8.0e12),
}
# Operand dtype → the fastest unit's rate class (f32 GEMMs may use TF32 tensor cores: the bound takes it).
RATE_CLASS = {"bf16": "bf16", "f16": "f16", "f32": "tf32", "f64": "f64", "f8e4m3": "fp8", "f8e5m2": "fp8",
              "i8": "int8", "u8": "int8"}
DEFAULT_MARGIN = 0.10       # a time more than 10 % under the floor is not noise


@dataclass(frozen=True)
class Peaks:
    arch: str
    num_sms: int
    sm_clock_mhz: float
    hbm_bytes_per_s: float
    l2_bytes: int
    source: str

    def flops_per_s(self, dtype: str) -> float:
        rate = RATES.get(self.arch, RATES["sm_90a"]).get(RATE_CLASS.get(dtype, "bf16"), 4096)
        return rate * self.num_sms * self.sm_clock_mhz * 1e6

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def peaks_of(name: str, arch: str, num_sms: int, l2_bytes: int, sm_clock_khz: int | None,
             mem_clock_khz: int | None, bus_width_bits: int | None) -> Peaks:
    """The device's peaks from its attributes, or from the datasheet table where an attribute is missing."""
    fallback = next((v for key, v in FALLBACK.items() if key in name), FALLBACK["H100"])
    notes = [RATE_SOURCES.get(arch, RATE_SOURCES["sm_90a"])]
    if sm_clock_khz:
        clock = sm_clock_khz / 1e3
        notes.append(f"max SM clock {clock:.0f} MHz from the driver")
    else:
        clock = fallback[0]
        notes.append(f"max SM clock {clock:.0f} MHz from the datasheet table")
    if mem_clock_khz and bus_width_bits:
        # HBM is double data rate: two transfers per memory clock over the whole bus.
        bandwidth = mem_clock_khz * 1e3 * 2 * bus_width_bits / 8
        notes.append(f"HBM {bandwidth / 1e12:.2f} TB/s from the memory clock and bus width")
    else:
        bandwidth = fallback[1]
        notes.append(f"HBM {bandwidth / 1e12:.2f} TB/s from the datasheet table")
    return Peaks(arch, num_sms, clock, bandwidth, l2_bytes, "; ".join(notes))


@dataclass(frozen=True)
class Floor:
    """The speed-of-light time of one problem size and what it is made of."""

    time_ms: float
    compute_ms: float
    memory_ms: float
    flops: int
    bytes_moved: int
    dtype: str
    peak_tflops: float
    peak_tbps: float

    def fraction(self, time_ms: float | None) -> float | None:
        """floor / measured: 1.0 would be the speed of light; honest kernels stay below it."""
        if time_ms is None or time_ms <= 0:
            return None
        return self.time_ms / time_ms

    def too_fast(self, time_ms: float, margin: float = DEFAULT_MARGIN) -> bool:
        return time_ms * (1 + margin) < self.time_ms

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def floor_of(flops: int, input_bytes: int, output_bytes: int, dtype: str, peaks: Peaks, scale: float = 1.0) -> Floor:
    """The floor for this work; `scale` multiplies the peaks (a test lowers them to prove the check fires)."""
    peak_flops = peaks.flops_per_s(dtype) * scale
    peak_bw = peaks.hbm_bytes_per_s * scale
    moved = input_bytes + max(0, output_bytes - peaks.l2_bytes)
    compute_ms = flops / peak_flops * 1e3
    memory_ms = moved / peak_bw * 1e3
    return Floor(max(compute_ms, memory_ms), compute_ms, memory_ms, int(flops), int(moved), dtype,
                 peak_flops / 1e12, peak_bw / 1e12)
