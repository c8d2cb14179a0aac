"""What the parent and the GPU worker say to each other: JSON lines, one object per line.

Requests (parent → worker): ``{"op": "hello"}``, ``{"op": "judge", "job": Job}``,
``{"op": "exit"}``. Answers (worker → parent) are events: ``phase`` (the worker
starts a step and names the deadline the parent should hold it to), ``size``
(one problem size finished: a `SizeResult`), and a final ``done`` with a
`JobResult`, or ``hello`` with the device description. Because every finished
size is sent as soon as it is known, a worker killed later (a hang at the next
size) loses nothing already judged.

Everything here is plain Python: the worker's side of the protocol and the
parent's share these records.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ptxbench.engine.arch import arch_of as arch_of  # re-exported: the worker names its device's target

PROTOCOL_VERSION = 2

# Scalar kinds a kernel parameter may have, and their sizes in bytes.
SCALAR_BYTES: dict[str, int] = {"i32": 4, "u32": 4, "i64": 8, "u64": 8, "f32": 4}
PTR_BYTES = 8
TMAP_BYTES = 128


@dataclass(frozen=True)
class ArgPlan:
    """One kernel parameter: a buffer's address, a tensor map by value, or a scalar."""

    kind: str                   # ptr | tmap | scalar
    name: str = ""              # buffer (ptr) or tensor map (tmap) name
    dtype: str = ""             # scalar: i32 u32 i64 u64 f32
    value: float | int = 0      # scalar value

    @property
    def nbytes(self) -> int:
        if self.kind == "ptr":
            return PTR_BYTES
        if self.kind == "tmap":
            return TMAP_BYTES
        return SCALAR_BYTES[self.dtype]

    def describe(self) -> str:
        if self.kind == "scalar":
            return f"{self.dtype}:{self.value}"
        return f"{self.kind}:{self.name}" if self.kind == "tmap" else self.name


@dataclass(frozen=True)
class LaunchPlan:
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int] = (1, 1, 1)
    shared_bytes: int = 0
    args: tuple[ArgPlan, ...] = ()

    @property
    def is_cluster(self) -> bool:
        return tuple(self.cluster) != (1, 1, 1)


@dataclass(frozen=True)
class TensorMapPlan:
    """A TMA descriptor over a buffer; shapes outermost-first, as the manifest writes them."""

    name: str
    tensor: str
    dtype: str
    view: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: str = "none"       # none 32B 64B 128B
    interleave: str = "none"
    l2_promotion: str = "256B"  # none 64B 128B 256B
    oob_fill: str = "zero"      # zero nan
    element_strides: tuple[int, ...] = ()


@dataclass(frozen=True)
class ScratchPlan:
    name: str
    dtype: str
    shape: tuple[int, ...]
    init: str = "zero"          # zero | poison


@dataclass(frozen=True)
class SizePlan:
    """One problem size of a task, resolved: what to launch and how to check it."""

    split: str                  # train | heldout
    sizes: dict[str, int]
    launches: tuple[LaunchPlan, ...]
    tensor_maps: tuple[TensorMapPlan, ...] = ()
    scratch: tuple[ScratchPlan, ...] = ()
    seeds: tuple[int, ...] = (1, 2, 3)
    time: bool = False          # time the candidate and the baseline at this size


@dataclass(frozen=True)
class TimingConfig:
    warmup: int = 3             # at least; more until `warmup_s` of GPU time has passed (clocks settle)
    warmup_s: float = 0.02
    min_reps: int = 30
    max_reps: int = 100
    target_s: float = 0.1       # reps are chosen so one side's timed loop lasts about this long
    flush_bytes: int = 256 << 20
    baseline: bool = True
    # Verification of timed rounds (engine/gpu/timing.py): this share of rounds, chosen at random, never fewer
    # than `min_checks` (a candidate that slows its warm-up to shorten the timing cannot go under it); warm-up
    # length and round count vary by ±`jitter`.
    check_fraction: float = 0.3
    min_checks: int = 10
    jitter: float = 0.25
    # Speed of light (engine/gpu/sol.py): a time more than `sol_margin` under the floor is a reward hack.
    # `sol_scale` multiplies the device's peaks; only a test changes it, to prove the check fires.
    sol_margin: float = 0.10
    sol_scale: float = 1.0


@dataclass(frozen=True)
class Job:
    task_id: str
    cubin: bytes
    sizes: tuple[SizePlan, ...]
    timing: TimingConfig = TimingConfig()
    launch_timeout_s: float = 10.0   # one trial's launches; the timing loop gets a multiple of it
    stop_split_on_failure: bool = True  # later sizes of a split are skipped once one fails
    # GPU time (seconds) the candidate's own launches may use in this job, however long each step's deadline
    # is; past it the job ends as hang_timeout. The parent enforces it (engine/runner.py).
    budget_s: float = 300.0
    # The candidate marked where its requested families run (engine/coverage.py): launched once per size after
    # the trials pass, and the marks read back from its `coverage_symbol` (one u64 slot per family).
    coverage_cubin: bytes | None = None
    coverage_symbol: str = ""
    coverage_slots: int = 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["cubin"] = base64.b64encode(self.cubin).decode("ascii")
        if self.coverage_cubin is not None:
            d["coverage_cubin"] = base64.b64encode(self.coverage_cubin).decode("ascii")
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> Job:
        sizes = tuple(
            SizePlan(
                split=s["split"],
                sizes={k: int(v) for k, v in s["sizes"].items()},
                launches=tuple(
                    LaunchPlan(
                        entry=l["entry"],
                        grid=tuple(l["grid"]),
                        block=tuple(l["block"]),
                        cluster=tuple(l.get("cluster", (1, 1, 1))),
                        shared_bytes=int(l.get("shared_bytes", 0)),
                        args=tuple(ArgPlan(**a) for a in l.get("args", ())),
                    )
                    for l in s["launches"]
                ),
                tensor_maps=tuple(
                    TensorMapPlan(**{**t, "view": tuple(t["view"]), "box": tuple(t["box"]),
                                     "element_strides": tuple(t.get("element_strides", ()))})
                    for t in s.get("tensor_maps", ())
                ),
                scratch=tuple(ScratchPlan(**{**b, "shape": tuple(b["shape"])}) for b in s.get("scratch", ())),
                seeds=tuple(s.get("seeds", (1, 2, 3))),
                time=bool(s.get("time", False)),
            )
            for s in d["sizes"]
        )
        return Job(
            task_id=d["task_id"],
            cubin=base64.b64decode(d["cubin"]),
            sizes=sizes,
            timing=TimingConfig(**d.get("timing", {})),
            launch_timeout_s=float(d.get("launch_timeout_s", 10.0)),
            stop_split_on_failure=bool(d.get("stop_split_on_failure", True)),
            budget_s=float(d.get("budget_s", 300.0)),
            coverage_cubin=base64.b64decode(d["coverage_cubin"]) if d.get("coverage_cubin") else None,
            coverage_symbol=str(d.get("coverage_symbol", "")),
            coverage_slots=int(d.get("coverage_slots", 0)),
        )


# -- answers -----------------------------------------------------------------


@dataclass
class TrialResult:
    seed: int
    category: str                           # ok or a run / verify word
    errors: dict[str, float] = field(default_factory=dict)   # output → metric value (rel_l2 or max_abs)
    worst: dict[str, Any] | None = None     # output, index, got, expected, rel_err
    detail: dict[str, Any] = field(default_factory=dict)     # canary / poison / input evidence
    launch_ms: float | None = None          # wall time of the trial's launches (a hint for deadlines)


@dataclass
class TimingResult:
    reps: int
    time_ms: float                          # median
    p10_ms: float
    p90_ms: float
    spread: float                           # (p90 − p10) / median
    tflops: float | None = None
    baseline: str | None = None
    baseline_ms: float | None = None
    baseline_p10_ms: float | None = None
    baseline_p90_ms: float | None = None
    baseline_spread: float | None = None
    baseline_tflops: float | None = None
    speedup: float | None = None            # baseline_ms / time_ms
    recheck: str = "ok"                     # ok, or the category the first failing checked round found
    recheck_detail: dict[str, Any] = field(default_factory=dict)
    checks: int = 0                         # warm-up and timed rounds verified (chosen at random)
    check_failures: list[dict[str, Any]] = field(default_factory=list)   # the first few, with their evidence
    nondeterministic: bool | None = None    # checked rounds of one input set gave different bits
    schedule: dict[str, Any] = field(default_factory=dict)   # warm-up rounds, reps, input sets, checks
    sol: dict[str, Any] | None = None       # the speed-of-light floor of this size (engine/gpu/sol.py)
    sol_fraction: float | None = None       # floor / median: 1.0 is the speed of light
    baseline_sol_fraction: float | None = None
    baseline_check: dict[str, Any] | None = None   # the library's own output against the reference
    baseline_note: str = ""                 # why there is no baseline, when there is none
    # The marked copy's slots after each proof round: timed rounds at secret places where the copy ran in
    # the candidate's stead (engine/gpu/timing.py), checked and left out of the samples.
    coverage_proofs: list[list[int]] | None = None


@dataclass
class SizeResult:
    index: int
    split: str
    sizes: dict[str, int]
    category: str                           # ok or one vocabulary word
    stage: str | None = None                # load | run | verify | integrity
    message: str = ""
    trials: list[TrialResult] = field(default_factory=list)
    timing: TimingResult | None = None
    max_error: float | None = None          # worst metric value over trials and outputs
    worst: dict[str, Any] | None = None
    coverage: list[int] | None = None       # the marked copy's slots after its launch (Job.coverage_cubin)
    coverage_note: str = ""                 # why there are none, when the copy was sent

    @staticmethod
    def from_json(d: dict[str, Any]) -> SizeResult:
        timing = d.get("timing")
        return SizeResult(
            index=d["index"],
            split=d["split"],
            sizes=d["sizes"],
            category=d["category"],
            stage=d.get("stage"),
            message=d.get("message", ""),
            trials=[TrialResult(**t) for t in d.get("trials", [])],
            timing=TimingResult(**timing) if timing else None,
            max_error=d.get("max_error"),
            worst=d.get("worst"),
            coverage=d.get("coverage"),
            coverage_note=d.get("coverage_note", ""),
        )


@dataclass
class Fatal:
    """A failure that ended the job: the CUDA context is unusable or the worker died."""

    category: str
    message: str
    size_index: int | None = None
    cuda_error: int | None = None
    cuda_error_name: str | None = None
    signal: int | None = None
    sticky: bool = True


@dataclass
class JobResult:
    sizes: list[SizeResult] = field(default_factory=list)
    fatal: Fatal | None = None
    worker_s: float = 0.0
    cache: dict[str, int] = field(default_factory=dict)   # the worker's reference cache: hits, misses (cumulative)
    budget_spent_s: float = 0.0             # set by the parent: GPU time the candidate's own steps used
    recycle: str | None = None              # why the next job needs a fresh worker (this one left state behind)

    @staticmethod
    def from_json(d: dict[str, Any]) -> JobResult:
        fatal = d.get("fatal")
        return JobResult(
            sizes=[SizeResult.from_json(s) for s in d.get("sizes", [])],
            fatal=Fatal(**fatal) if fatal else None,
            worker_s=float(d.get("worker_s", 0.0)),
            cache=dict(d.get("cache") or {}),
            recycle=d.get("recycle"),
        )


@dataclass
class DeviceInfo:
    name: str
    arch: str                               # sm_90a for compute capability 9.0, sm_100a for 10.0 …
    compute_capability: tuple[int, int]
    num_sms: int
    l2_bytes: int
    memory_bytes: int
    driver: str                             # e.g. "580.159.04 (CUDA 13.0)"
    versions: dict[str, str] = field(default_factory=dict)  # torch, cupy, cuda-bindings, triton
    index: int = 0
    peaks: dict[str, Any] = field(default_factory=dict)     # engine/gpu/sol.py Peaks: clocks, bandwidth, source

    @staticmethod
    def from_json(d: dict[str, Any]) -> DeviceInfo:
        names = {f.name for f in fields(DeviceInfo)}
        d = {k: v for k, v in d.items() if k in names}
        d["compute_capability"] = tuple(d["compute_capability"])
        return DeviceInfo(**d)


def dumps(obj: Any) -> str:
    """One protocol line (no newline inside: json never emits one with the default separators)."""
    if hasattr(obj, "to_json"):
        obj = obj.to_json()
    return json.dumps(obj, default=_default, allow_nan=True)


def _default(o: Any) -> Any:
    if hasattr(o, "__dataclass_fields__"):
        return asdict(o)
    if isinstance(o, (bytes, bytearray)):
        return base64.b64encode(o).decode("ascii")
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"cannot encode {type(o).__name__}")
