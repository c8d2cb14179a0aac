"""A tensor map a model's host wrapper encodes → a launch manifest's `tensor_maps` entry (docs/candidate.md).

`cuTensorMapEncodeTiled(&map, dtype, rank, base, dims, strides, box, element_strides, interleave,
swizzle, l2_promotion, oob_fill)`, called by name or through the pointer the driver's entry point
gave, with its arrays filled by the wrapper: the driver's arrays are innermost-first, a manifest's
outermost-first, so each is reversed. The tensor is the one `base` points at; `view` is written
only where the sizes are not the tensor's own shape. Strides are the harness's (contiguous), so
they are not read. An option the manifest cannot state, or a value the wrapper does not make
plainly, is Unreadable; an element size other than the tensor's is Mismatch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from ptxbench.models.host_expr import Dims, Enum, Mismatch, Opaque, Pointer, Scalar, Unreadable, Value, scalar
from ptxbench.models.host_source import split_top
from ptxbench.tasks.records import TaskSpec

ENCODE = re.compile(r"\bCU_TENSOR_MAP_DATA_TYPE_(\w+)")
_ELEMENT_BYTES = {"UINT8": 1, "UINT16": 2, "UINT32": 4, "INT32": 4, "UINT64": 8, "INT64": 8, "FLOAT16": 2,
                  "FLOAT32": 4, "FLOAT64": 8, "BFLOAT16": 2, "FLOAT32_FTZ": 4, "TFLOAT32": 4, "TFLOAT32_FTZ": 4}
_DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "f8e4m3": 1, "f8e5m2": 1, "i8": 1, "u8": 1, "i32": 4,
                "i64": 8, "u32": 4}
# (option, the enumerators' prefix, enumerator → the manifest's word, the manifest's default)
_OPTIONS = (
    ("interleave", "CU_TENSOR_MAP_INTERLEAVE_", {"NONE": "none"}, "none"),
    ("swizzle", "CU_TENSOR_MAP_SWIZZLE_", {"NONE": "none", "32B": "32B", "64B": "64B", "128B": "128B"}, "none"),
    ("l2_promotion", "CU_TENSOR_MAP_L2_PROMOTION_",
     {"NONE": "none", "L2_64B": "64B", "L2_128B": "128B", "L2_256B": "256B"}, "256B"),
    ("oob_fill", "CU_TENSOR_MAP_FLOAT_OOB_FILL_", {"NONE": "zero", "NAN_REQUEST_ZERO_FMA": "nan"}, "zero"),
)
Expr = Callable[[Scalar, str], "int | str"]


def bare(expr: str) -> str:
    """A shape entry as the importer writes expressions: a name as it is, anything else in parentheses."""
    return expr if re.fullmatch(r"\w+", expr) else f"({expr})"


def encode_call(stmt: str) -> tuple[str, list[str]]:
    """(the data type's enumerator name, the 12 argument texts) of the encode call in a statement."""
    found = ENCODE.search(stmt)
    assert found is not None
    opens: list[int] = []
    pairs: dict[int, int] = {}
    for i, c in enumerate(stmt):
        if c == "(":
            opens.append(i)
        elif c == ")" and opens:
            pairs[opens.pop()] = i
    holder = max((o for o, c in pairs.items() if o < found.start() < c), default=None)
    args = split_top(stmt[holder + 1:pairs[holder]]) if holder is not None else []
    if len(args) != 12:
        raise Unreadable("a tensor map encoded by a call the importer cannot read (cuTensorMapEncodeTiled takes 12 "
                         "arguments)")
    return found.group(1), args


def tensor_map(element: str, values: Sequence[Value], task: TaskSpec, expr: Expr) -> dict:
    """The manifest's entry for an encode call, from the values of its arguments after the rank
    (base, dims, strides, box, element strides, interleave, swizzle, L2 promotion, fill)."""
    for v in values:
        if isinstance(v, Opaque):
            raise Unreadable(f"a tensor map: {v.why}")
    base, dims, _strides, box, elements, *options = values
    if not isinstance(base, Pointer):
        raise Unreadable("a tensor map over memory that is not a task tensor's")
    spec = next((t for t in (*task.inputs, *task.outputs) if t.name == base.tensor), None)
    size = _ELEMENT_BYTES.get(element)
    if spec is not None and size is not None and size != _DTYPE_BYTES.get(spec.dtype, size):
        raise Mismatch(f"a tensor map reads {base.tensor} as {element}; {task.id}'s {base.tensor} is {spec.dtype}")
    if not (isinstance(dims, Dims) and isinstance(box, Dims) and isinstance(elements, Dims)):
        raise Unreadable("a tensor map whose dimensions, box or element strides are not arrays the wrapper fills")
    view = [expr(scalar(p), "tensor map's size") for p in reversed(dims.parts)]
    out: dict = {"tensor": base.tensor, "box": [expr(scalar(p), "tensor map's box") for p in reversed(box.parts)]}
    if spec is None or [str(v) for v in view] != [bare(d) for d in spec.shape]:
        out["view"] = view
    for (what, prefix, words, default), value in zip(_OPTIONS, options):
        name = value.name.removeprefix(prefix) if isinstance(value, Enum) and value.name.startswith(prefix) else None
        if name not in words:
            raise Unreadable(f"a tensor map's {what} the importer does not know ({getattr(value, 'name', value)})")
        if what != "interleave" and words[name] != default:
            out[what] = words[name]
    strides = [expr(scalar(p), "tensor map's element stride") for p in reversed(elements.parts)]
    if any(x != 1 for x in strides):
        out["element_strides"] = strides
    return out
