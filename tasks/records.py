"""The records of a task spec: `TaskSpec`, its tensors and tolerance, and the format's words.

Plain frozen dataclasses and constants, importable by the loader (tasks/loader.py) that fills
them and by everything that reads them, with no import back: `ptxbench.tasks.spec` is the
public face that loads and catalogues them (docs/tasks.md describes the format).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.tasks.expr import evaluate_int

SPECS_DIR = Path(__file__).resolve().parent / "specs"
SOLUTIONS_DIR = Path(__file__).resolve().parent / "solutions"

# The canonical names of requested instruction families; the engine's family
# table is keyed by these (ptxbench.engine imports this tuple, never the reverse).
FAMILIES: tuple[str, ...] = (
    "wgmma",
    "tma",
    "bulk_copy",
    "mbarrier",
    "setmaxnreg",
    "stmatrix",
    "ldmatrix",
    "cluster",
    "tcgen05_mma",
    "tcgen05_alloc",
    "tcgen05_ld",
    "tcgen05_st",
    "tcgen05_commit",
    "tcgen05_cp",
)
ARCHES: tuple[str, ...] = ("sm_90a", "sm_100a")

# Element sizes in bytes of every dtype a tensor, scratch buffer or tensor map may have.
DTYPE_BYTES: dict[str, int] = {
    "bf16": 2,
    "f16": 2,
    "f32": 4,
    "f64": 8,
    "f8e4m3": 1,
    "f8e5m2": 1,
    "i8": 1,
    "i32": 4,
    "i64": 8,
    "u8": 1,
    "u32": 4,
}
DISTRIBUTIONS: tuple[str, ...] = ("normal", "spiky", "uniform", "scaled_rows", "hot_rows", "offset_rows")
METRICS: tuple[str, ...] = ("rel_l2", "max_abs")
BASELINES: tuple[str, ...] = ("cublas", "cudnn_sdpa", "cudnn_sdpa_backward", "torch_rms_norm", "torch_layer_norm",
                               "torch_softmax", "torch_add")
# Names every expression may use besides the task's size names.
BUILTIN_NAMES: tuple[str, ...] = ("num_sms",)

Sizes = dict[str, int]


class TaskSpecError(ValueError):
    """A spec file that cannot be loaded; the message names the file and the field."""

    def __init__(self, path: Path | str, field_name: str, message: str) -> None:
        self.path = str(path)
        self.field = field_name
        super().__init__(f"{path}: {field_name}: {message}")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[str, ...]          # expression strings, outermost first
    dtype: str
    distribution: str | None = None  # inputs only; None = the task's input_distribution
    derived: bool = False            # inputs only; computed by the reference's derive_inputs


# The element-wise bound never asks for more than the output dtype can hold: about two units in the
# last place (bf16 keeps 8 significant bits, f16 11, f32 24, f64 53).
ROUNDING_FLOOR: dict[str, float] = {"bf16": 2.0 ** -7, "f16": 2.0 ** -10, "f32": 2.0 ** -22, "f64": 2.0 ** -51,
                                    "f8e4m3": 2.0 ** -3, "f8e5m2": 2.0 ** -2}
DEFAULT_ELEMENT_FACTOR = 8.0
# Operations whose reference can be computed at a sample of rows along S (dimension 2 of every output).
ROW_SAMPLED = frozenset({"attn_fwd", "attn_fwd_causal", "attn_bwd", "attn_bwd_causal"})


@dataclass(frozen=True)
class ElementBound:
    """|got − ref| ≤ atol·rms(ref) + rtol·|ref| for every element but at most `outliers` of them (a fraction)."""

    rtol: float
    atol: float                      # in units of the reference's root-mean-square: scales with the output
    outliers: float = 0.0


@dataclass(frozen=True)
class Tolerance:
    metric: str                      # rel_l2: ‖out − ref‖₂ / ‖ref‖₂; max_abs: max |out − ref|
    max: float
    per_output: dict[str, float] = field(default_factory=dict)
    # The aggregate metric measures precision; the element bound catches what an aggregate averages away
    # (zeros in a few rows, a wrong tail, sparse garbage). It is `element_factor` times the aggregate limit,
    # so an honest kernel whose errors are spread out passes it with a wide margin.
    element_factor: float = DEFAULT_ELEMENT_FACTOR
    outliers: float = 0.0
    # At held-out sizes, compare the values at this many positions along S (drawn in secret after the run,
    # the first and last 128 among them) rather than all: 0 compares every element.
    heldout_rows: int = 0

    def max_for(self, output: str) -> float:
        return self.per_output.get(output, self.max)

    def element_for(self, output: str, dtype: str) -> ElementBound | None:
        """The element-wise bound of one output; None for max_abs, which is element-wise already."""
        if self.metric == "max_abs":
            return None
        r = max(self.element_factor * self.max_for(output), ROUNDING_FLOOR.get(dtype, 0.0))
        return ElementBound(rtol=r, atol=r, outliers=self.outliers)


@dataclass(frozen=True)
class TaskSpec:
    id: str
    title: str
    operation: str
    arch: str
    families: tuple[str, ...]
    baseline: str
    flops_expr: str
    bytes_expr: str
    input_distribution: str
    constraints: tuple[str, ...]
    description: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    tolerance: Tolerance
    headline: Sizes
    train: tuple[Sizes, ...]
    heldout: tuple[Sizes, ...]
    launch: dict[str, Any]           # the default launch manifest, as docs/candidate.md writes it
    source: Path
    params: dict[str, float] = field(default_factory=dict)  # fixed constants such as eps

    # -- derived quantities -------------------------------------------------
    def size_names(self) -> tuple[str, ...]:
        return tuple(self.headline)

    def tensor_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs + self.outputs)

    def tensor(self, name: str) -> TensorSpec:
        for t in self.inputs + self.outputs:
            if t.name == name:
                return t
        raise KeyError(f"{self.id} has no tensor {name!r}")

    def flops(self, sizes: Sizes) -> int:
        return evaluate_int(self.flops_expr, sizes)

    def bytes(self, sizes: Sizes) -> int:
        return evaluate_int(self.bytes_expr, sizes)

    def shapes(self, sizes: Sizes) -> dict[str, tuple[int, ...]]:
        return {t.name: tuple(evaluate_int(d, sizes) for d in t.shape) for t in self.inputs + self.outputs}

    def all_sizes(self) -> list[tuple[str, Sizes]]:
        """(split, sizes) for every train and held-out size, train first."""
        return [("train", s) for s in self.train] + [("heldout", s) for s in self.heldout]

    def expert_dir(self) -> Path | None:
        path = SOLUTIONS_DIR / self.id
        return path if path.is_dir() else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view of the whole spec (what the store keeps in tasks.spec)."""
        return {
            "id": self.id,
            "title": self.title,
            "operation": self.operation,
            "arch": self.arch,
            "families": list(self.families),
            "baseline": self.baseline,
            "flops": self.flops_expr,
            "bytes": self.bytes_expr,
            "input_distribution": self.input_distribution,
            "constraints": list(self.constraints),
            "description": self.description,
            "params": dict(self.params),
            "inputs": [_tensor_dict(t) for t in self.inputs],
            "outputs": [_tensor_dict(t) for t in self.outputs],
            "tolerance": {"metric": self.tolerance.metric, "max": self.tolerance.max,
                          "per_output": dict(self.tolerance.per_output),
                          "element_factor": self.tolerance.element_factor, "outliers": self.tolerance.outliers},
            "sizes": {"headline": dict(self.headline), "train": [dict(s) for s in self.train],
                      "heldout": [dict(s) for s in self.heldout]},
            "launch": self.launch,
        }


def _tensor_dict(t: TensorSpec) -> dict[str, Any]:
    d: dict[str, Any] = {"name": t.name, "shape": list(t.shape), "dtype": t.dtype}
    if t.distribution:
        d["distribution"] = t.distribution
    if t.derived:
        d["derived"] = True
    return d
