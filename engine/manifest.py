"""The launch manifest: parse, merge with a task's default, resolve against sizes, validate.

docs/candidate.md is the contract. Three steps, each with its own failure:

- `parse_manifest` checks structure and types (→ `ManifestError`, category
  ``bad_manifest``): malformed JSON, unknown fields, wrong types, bad syntax.
- `merge` lays a candidate's manifest over the task's default.
- `resolve` evaluates every expression for one problem size and types every
  argument. Names that do not exist raise `ManifestError`; values that no
  GPU could launch raise `LaunchConfigError` (category ``launch_config``).

`ptx_param_kinds` and `parse_entry_params` let the worker compare the
manifest's arguments with a module's ``.entry`` signatures (``param_mismatch``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from ptxbench.engine.cuda_build import BuildError, BuildSpec, parse_build
from ptxbench.engine.ptx_params import (  # re-exported: part of this module's interface
    EntryParam as EntryParam,
    ParamKind as ParamKind,
    param_problems as param_problems,
    parse_entry_params as parse_entry_params,
    ptx_param_kinds as ptx_param_kinds,
)
from ptxbench.tasks.expr import ExprError, check_syntax, evaluate
from ptxbench.tasks.spec import BUILTIN_NAMES, DTYPE_BYTES, TaskSpec

Expr = int | float | str

MAX_MANIFEST_BYTES = 1 << 20
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_CLUSTER_BLOCKS = 16                 # 8 is portable; 16 needs the non-portable opt-in
MAX_SHARED_BYTES = 232448               # 227 KiB: Hopper's opt-in dynamic shared memory maximum
MAX_SCRATCH_BYTES = 32 << 30
SWIZZLE_SPAN = {"none": None, "32B": 32, "64B": 64, "128B": 128}
INTERLEAVES = ("none",)
L2_PROMOTIONS = ("none", "64B", "128B", "256B")
OOB_FILLS = ("zero", "nan")
SCRATCH_INITS = ("zero", "poison")
SCALAR_TYPES = ("i32", "u32", "i64", "u64", "f32")
_INT_RANGE = {"i32": (-(2**31), 2**31 - 1), "u32": (0, 2**32 - 1),
              "i64": (-(2**63), 2**63 - 1), "u64": (0, 2**64 - 1)}
_IDENT = re.compile(r"^[A-Za-z_$%][A-Za-z0-9_$]*$")


class ManifestError(ValueError):
    """The manifest does not parse or names things that do not exist (bad_manifest)."""

    category = "bad_manifest"


class LaunchConfigError(ValueError):
    """The manifest parses but asks for a launch no GPU can run (launch_config)."""

    category = "launch_config"


@dataclass(frozen=True)
class Launch:
    entry: str
    grid: tuple[Expr, ...] | None = None
    block: tuple[Expr, ...] | None = None
    cluster: tuple[Expr, ...] | None = None
    shared_bytes: Expr | None = None
    args: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TensorMapSpec:
    tensor: str
    box: tuple[Expr, ...]
    view: tuple[Expr, ...] | None = None
    swizzle: str = "none"
    interleave: str = "none"
    l2_promotion: str = "256B"
    oob_fill: str = "zero"
    element_strides: tuple[Expr, ...] | None = None


@dataclass(frozen=True)
class ScratchSpec:
    dtype: str
    shape: tuple[Expr, ...]
    init: str = "zero"


@dataclass(frozen=True)
class Manifest:
    launches: tuple[Launch, ...] = ()
    tensor_maps: dict[str, TensorMapSpec] = field(default_factory=dict)
    scratch: dict[str, ScratchSpec] = field(default_factory=dict)
    build: BuildSpec | None = None        # defines and flags for nvcc (CUDA candidates only)

    def to_dict(self) -> dict[str, Any]:
        """The manifest in docs/candidate.md's JSON form; fields left unset are omitted."""
        def clean(d: dict[str, Any]) -> dict[str, Any]:
            return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items() if v is not None}
        out: dict[str, Any] = {}
        if self.launches:
            out["launches"] = [clean(asdict(x)) for x in self.launches]
        if self.tensor_maps:
            out["tensor_maps"] = {k: clean(asdict(v)) for k, v in self.tensor_maps.items()}
        if self.scratch:
            out["scratch"] = {k: clean(asdict(v)) for k, v in self.scratch.items()}
        if self.build is not None:
            out["build"] = self.build.to_dict()
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


# -- parsing -------------------------------------------------------------------

def _fields(obj: Any, where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: expected an object, got {_tname(obj)}")
    for key in obj:
        if key not in allowed:
            raise ManifestError(f"{where}: unknown field {key!r} (allowed: {', '.join(allowed)})")
    return obj


def _tname(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _expr(v: Any, where: str) -> Expr:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ManifestError(f"{where}: expected an integer or an expression string, got {_tname(v)} {v!r}")
    try:
        check_syntax(v)
    except ExprError as exc:
        raise ManifestError(f"{where}: {exc}") from None
    return v


def _dims(v: Any, where: str, lo: int, hi: int, scalar_ok: bool = True) -> tuple[Expr, ...]:
    if scalar_ok and isinstance(v, (int, str)) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, list):
        raise ManifestError(f"{where}: expected a list of {lo}–{hi} values, got {_tname(v)}")
    if not lo <= len(v) <= hi:
        raise ManifestError(f"{where}: expected {lo}–{hi} values, got {len(v)}")
    return tuple(_expr(x, f"{where}[{i}]") for i, x in enumerate(v))


def _choice(v: Any, where: str, choices: tuple[str, ...]) -> str:
    if v not in choices:
        raise ManifestError(f"{where}: {v!r} is not one of {', '.join(choices)}")
    return v


def parse_arg(text: Any, where: str = "arg") -> tuple[str, str]:
    """Split an argument string into (kind, rest): ("ptr"|"name", NAME), ("tmap", NAME), or (scalar type, EXPR)."""
    if not isinstance(text, str):
        raise ManifestError(f"{where}: expected a string such as \"A\", \"tmap:tmA\" or \"i32:M\", got {_tname(text)} {text!r}")
    head, sep, rest = text.partition(":")
    if sep:
        head, rest = head.strip(), rest.strip()
        if head == "tmap":
            if not _IDENT.match(rest):
                raise ManifestError(f"{where}: {rest!r} is not a tensor-map name")
            return "tmap", rest
        if head in SCALAR_TYPES:
            _expr(rest, where)
            return head, rest
        raise ManifestError(f"{where}: unknown argument kind {head!r} (known: tmap, {', '.join(SCALAR_TYPES)})")
    if not _IDENT.match(text.strip()):
        raise ManifestError(f"{where}: {text!r} is neither a tensor, scratch or size name nor KIND:VALUE")
    return "name", text.strip()


def _launch(obj: Any, where: str) -> Launch:
    d = _fields(obj, where, ("entry", "grid", "block", "cluster", "shared_bytes", "args"))
    entry = d.get("entry")
    if not isinstance(entry, str) or not _IDENT.match(entry):
        raise ManifestError(f"{where}.entry: expected a kernel name, got {entry!r}")
    args = d.get("args")
    if args is not None:
        if not isinstance(args, list):
            raise ManifestError(f"{where}.args: expected a list, got {_tname(args)}")
        for i, a in enumerate(args):
            parse_arg(a, f"{where}.args[{i}]")
        args = tuple(args)
    return Launch(
        entry=entry,
        grid=_dims(d["grid"], f"{where}.grid", 1, 3) if "grid" in d else None,
        block=_dims(d["block"], f"{where}.block", 1, 3) if "block" in d else None,
        cluster=_dims(d["cluster"], f"{where}.cluster", 1, 3) if "cluster" in d else None,
        shared_bytes=_expr(d["shared_bytes"], f"{where}.shared_bytes") if "shared_bytes" in d else None,
        args=args,
    )


def _tensor_map(obj: Any, where: str) -> TensorMapSpec:
    d = _fields(obj, where, ("tensor", "view", "box", "swizzle", "interleave", "l2_promotion",
                             "oob_fill", "element_strides"))
    tensor = d.get("tensor")
    if not isinstance(tensor, str) or not _IDENT.match(tensor):
        raise ManifestError(f"{where}.tensor: expected a tensor or scratch name, got {tensor!r}")
    if "box" not in d:
        raise ManifestError(f"{where}.box: missing")
    return TensorMapSpec(
        tensor=tensor,
        box=_dims(d["box"], f"{where}.box", 1, 5, scalar_ok=False),
        view=_dims(d["view"], f"{where}.view", 1, 5, scalar_ok=False) if "view" in d else None,
        swizzle=_choice(d.get("swizzle", "none"), f"{where}.swizzle", tuple(SWIZZLE_SPAN)),
        interleave=_choice(d.get("interleave", "none"), f"{where}.interleave", INTERLEAVES),
        l2_promotion=_choice(d.get("l2_promotion", "256B"), f"{where}.l2_promotion", L2_PROMOTIONS),
        oob_fill=_choice(d.get("oob_fill", "zero"), f"{where}.oob_fill", OOB_FILLS),
        element_strides=(_dims(d["element_strides"], f"{where}.element_strides", 1, 5, scalar_ok=False)
                         if "element_strides" in d else None),
    )


def _scratch(obj: Any, where: str) -> ScratchSpec:
    d = _fields(obj, where, ("dtype", "shape", "init"))
    if "dtype" not in d or "shape" not in d:
        raise ManifestError(f"{where}: needs dtype and shape")
    return ScratchSpec(
        dtype=_choice(d["dtype"], f"{where}.dtype", tuple(DTYPE_BYTES)),
        shape=_dims(d["shape"], f"{where}.shape", 1, 8),
        init=_choice(d.get("init", "zero"), f"{where}.init", SCRATCH_INITS),
    )


def _named(obj: Any, where: str, each: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: expected an object of name → definition, got {_tname(obj)}")
    out = {}
    for name, value in obj.items():
        if not _IDENT.match(name):
            raise ManifestError(f"{where}: {name!r} is not a valid name")
        out[name] = each(value, f"{where}.{name}")
    return out


def parse_manifest(source: str | bytes | Mapping[str, Any]) -> Manifest:
    """Parse a manifest from JSON text or an already-decoded mapping (a task's TOML table)."""
    if isinstance(source, (str, bytes)):
        if len(source) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"manifest is {len(source)} bytes (at most {MAX_MANIFEST_BYTES})")
        try:
            data = json.loads(source)
        except json.JSONDecodeError as exc:
            raise ManifestError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
        except (UnicodeDecodeError, RecursionError) as exc:
            raise ManifestError(f"not valid JSON: {type(exc).__name__}") from None
        except ValueError as exc:     # an integer of more digits than Python converts (4300)
            raise ManifestError(f"not valid JSON: {str(exc)[:200]}") from None
    else:
        data = source
    d = _fields(data, "manifest", ("launches", "tensor_maps", "scratch", "build"))
    launches = d.get("launches", [])
    if not isinstance(launches, list):
        raise ManifestError(f"launches: expected a list, got {_tname(launches)}")
    try:
        build = parse_build(d["build"]) if "build" in d else None
    except BuildError as exc:
        raise ManifestError(str(exc)) from None
    return Manifest(
        launches=tuple(_launch(x, f"launches[{i}]") for i, x in enumerate(launches)),
        tensor_maps=_named(d.get("tensor_maps", {}), "tensor_maps", _tensor_map),
        scratch=_named(d.get("scratch", {}), "scratch", _scratch),
        build=build,
    )


def default_manifest(task: TaskSpec) -> Manifest:
    """The task's default launch manifest (from its spec's [launch] table)."""
    try:
        return parse_manifest(task.launch)
    except ManifestError as exc:
        raise ManifestError(f"{task.source}: launch: {exc}") from None


def merge(default: Manifest, override: Manifest | None) -> Manifest:
    """Lay a candidate's manifest over the default, as docs/candidate.md says.

    A given `launches` list replaces the default list; each launch's unset
    fields come from the default launch with the same entry name, else the
    one at the same position. `tensor_maps` and `scratch` are added to the
    default's (same name replaces).
    """
    if override is None:
        return default
    launches = default.launches
    if override.launches:
        by_entry = {x.entry: x for x in default.launches}
        filled = []
        for i, launch in enumerate(override.launches):
            base = by_entry.get(launch.entry) or (default.launches[i] if i < len(default.launches) else None)
            if base is not None:
                unset = {k: getattr(base, k) for k in ("grid", "block", "cluster", "shared_bytes", "args")
                         if getattr(launch, k) is None}
                launch = replace(launch, **unset)
            filled.append(launch)
        launches = tuple(filled)
    return Manifest(launches=launches,
                    tensor_maps={**default.tensor_maps, **override.tensor_maps},
                    scratch={**default.scratch, **override.scratch},
                    build=override.build if override.build is not None else default.build)


# -- resolving ------------------------------------------------------------------

@dataclass(frozen=True)
class ResolvedArg:
    kind: Literal["ptr", "tmap", "scalar"]
    text: str                      # as the manifest wrote it
    name: str = ""                 # ptr: tensor or scratch name; tmap: tensor-map name
    dtype: str = ""                # scalar: i32 | u32 | i64 | u64 | f32
    value: int | float = 0         # scalar value


@dataclass(frozen=True)
class ResolvedLaunch:
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    shared_bytes: int
    args: tuple[ResolvedArg, ...]

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)

    @property
    def is_cluster_launch(self) -> bool:
        return self.cluster != (1, 1, 1)


@dataclass(frozen=True)
class ResolvedTensorMap:
    name: str
    tensor: str
    dtype: str
    shape: tuple[int, ...]         # the view, outermost first (the driver wants it reversed)
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: str
    interleave: str
    l2_promotion: str
    oob_fill: str

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def strides_bytes(self) -> tuple[int, ...]:
        """Byte stride of each dimension of the contiguous view, outermost first."""
        out, step = [], self.elem_bytes
        for dim in reversed(self.shape):
            out.append(step)
            step *= dim
        return tuple(reversed(out))


@dataclass(frozen=True)
class ResolvedScratch:
    name: str
    dtype: str
    shape: tuple[int, ...]
    init: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class ResolvedManifest:
    launches: tuple[ResolvedLaunch, ...]
    tensor_maps: dict[str, ResolvedTensorMap]
    scratch: dict[str, ResolvedScratch]
    sizes: dict[str, int]
    num_sms: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Env:
    def __init__(self, task: TaskSpec, sizes: Mapping[str, int], num_sms: int) -> None:
        self.values: dict[str, int | float] = {**task.params, **sizes, "num_sms": num_sms}

    def number(self, expr: Expr, where: str) -> int | float:
        try:
            return evaluate(expr, self.values)
        except ExprError as exc:
            raise ManifestError(f"{where}: {exc}") from None

    def integer(self, expr: Expr, where: str) -> int:
        v = self.number(expr, where)
        if isinstance(v, float):
            if not v.is_integer():
                raise LaunchConfigError(f"{where}: {expr!r} = {v!r} is not a whole number")
            v = int(v)
        return v

    def dims(self, exprs: tuple[Expr, ...], where: str, pad: int = 0) -> tuple[int, ...]:
        out = [self.integer(e, f"{where}[{i}]") for i, e in enumerate(exprs)]
        for i, v in enumerate(out):
            if v <= 0:
                raise LaunchConfigError(f"{where}[{i}]: {exprs[i]!r} = {v} is not positive")
        return tuple(out + [1] * (pad - len(out)))


def resolve(manifest: Manifest, task: TaskSpec, sizes: Mapping[str, int], num_sms: int = 132) -> ResolvedManifest:
    """Evaluate every expression of a (merged) manifest for one problem size, and validate it."""
    missing = set(task.size_names()) - set(sizes)
    if missing:
        raise ValueError(f"sizes for {task.id} lack {sorted(missing)}")
    env = _Env(task, sizes, num_sms)
    shapes = task.shapes(dict(sizes))
    reserved = set(shapes) | set(sizes) | set(task.params) | set(BUILTIN_NAMES)

    scratch: dict[str, ResolvedScratch] = {}
    for name, s in manifest.scratch.items():
        if name in reserved:
            raise ManifestError(f"scratch.{name}: the name is already a task tensor or size")
        scratch[name] = ResolvedScratch(name, s.dtype, env.dims(s.shape, f"scratch.{name}.shape"), s.init)
    total = sum(s.nbytes for s in scratch.values())
    if total > MAX_SCRATCH_BYTES:
        raise LaunchConfigError(f"scratch: {total} bytes in all (at most {MAX_SCRATCH_BYTES}, 32 GiB)")
    buffers = {**{n: (shape, task.tensor(n).dtype) for n, shape in shapes.items()},
               **{n: (s.shape, s.dtype) for n, s in scratch.items()}}

    tmaps = {name: _resolve_tmap(name, t, buffers, env) for name, t in manifest.tensor_maps.items()}

    if not manifest.launches:
        raise ManifestError("launches: there is no launch")
    launches = []
    for i, launch in enumerate(manifest.launches):
        where = f"launches[{i}] ({launch.entry})"
        for key in ("grid", "block", "args"):
            if getattr(launch, key) is None:
                raise ManifestError(f"{where}.{key}: missing, and the task's default launch has no {launch.entry!r}")
        grid = env.dims(launch.grid, f"{where}.grid", 3)  # type: ignore[arg-type]
        block = env.dims(launch.block, f"{where}.block", 3)  # type: ignore[arg-type]
        cluster = env.dims(launch.cluster or (1, 1, 1), f"{where}.cluster", 3)
        smem = env.integer(launch.shared_bytes if launch.shared_bytes is not None else 0, f"{where}.shared_bytes")
        _check_launch(where, grid, block, cluster, smem)
        args = tuple(_resolve_arg(a, f"{where}.args[{j}]", buffers, tmaps, env)
                     for j, a in enumerate(launch.args or ()))
        launches.append(ResolvedLaunch(launch.entry, grid, block, cluster, smem, args))  # type: ignore[arg-type]
    return ResolvedManifest(tuple(launches), tmaps, scratch, dict(sizes), num_sms)


def _check_launch(where: str, grid: tuple[int, ...], block: tuple[int, ...],
                  cluster: tuple[int, ...], smem: int) -> None:
    threads = math.prod(block)
    if threads > MAX_THREADS_PER_BLOCK:
        raise LaunchConfigError(f"{where}.block: {threads} threads per block (at most {MAX_THREADS_PER_BLOCK})")
    for axis, (v, hi) in enumerate(zip(block, MAX_BLOCK)):
        if v > hi:
            raise LaunchConfigError(f"{where}.block[{axis}]: {v} (at most {hi})")
    for axis, (v, hi) in enumerate(zip(grid, MAX_GRID)):
        if v > hi:
            raise LaunchConfigError(f"{where}.grid[{axis}]: {v} (at most {hi})")
    if math.prod(cluster) > MAX_CLUSTER_BLOCKS:
        raise LaunchConfigError(f"{where}.cluster: {math.prod(cluster)} blocks per cluster (at most {MAX_CLUSTER_BLOCKS})")
    for axis, (g, c) in enumerate(zip(grid, cluster)):
        if g % c:
            raise LaunchConfigError(f"{where}: grid[{axis}] = {g} is not divisible by cluster[{axis}] = {c}")
    if not 0 <= smem <= MAX_SHARED_BYTES:
        raise LaunchConfigError(f"{where}.shared_bytes: {smem} (0 to {MAX_SHARED_BYTES}, 227 KiB)")


def _resolve_tmap(name: str, t: TensorMapSpec, buffers: dict[str, tuple[tuple[int, ...], str]],
                  env: _Env) -> ResolvedTensorMap:
    where = f"tensor_maps.{name}"
    if t.tensor not in buffers:
        raise ManifestError(f"{where}.tensor: {t.tensor!r} is not a task tensor or scratch buffer "
                            f"(known: {', '.join(buffers)})")
    shape, dtype = buffers[t.tensor]
    view = env.dims(t.view, f"{where}.view") if t.view is not None else shape
    if math.prod(view) != math.prod(shape):
        raise LaunchConfigError(f"{where}.view: {list(view)} has {math.prod(view)} elements, "
                                f"{t.tensor} {list(shape)} has {math.prod(shape)}")
    rank = len(view)
    if not 1 <= rank <= 5:
        raise LaunchConfigError(f"{where}: rank {rank} (a tensor map has 1 to 5 dimensions)")
    box = env.dims(t.box, f"{where}.box")
    strides = env.dims(t.element_strides, f"{where}.element_strides") if t.element_strides else (1,) * rank
    for key, values in (("box", box), ("element_strides", strides)):
        if len(values) != rank:
            raise LaunchConfigError(f"{where}.{key}: {len(values)} values for a rank-{rank} view {list(view)}")
    for i, b in enumerate(box):
        if b > 256:
            raise LaunchConfigError(f"{where}.box[{i}]: {b} (box entries are 1 to 256)")
    for i, s in enumerate(strides):
        if s > 8:
            raise LaunchConfigError(f"{where}.element_strides[{i}]: {s} (element strides are 1 to 8)")
    elem = DTYPE_BYTES[dtype]
    inner = box[-1] * elem
    if inner % 16:
        raise LaunchConfigError(f"{where}.box: the innermost box is {inner} bytes (must be a multiple of 16)")
    span = SWIZZLE_SPAN[t.swizzle]
    if span is not None and inner > span:
        raise LaunchConfigError(f"{where}.box: the innermost box is {inner} bytes, more than the "
                                f"{t.swizzle} swizzle span ({span} bytes)")
    for i, dim in enumerate(view):
        if dim > 2**32:
            raise LaunchConfigError(f"{where}.view[{i}]: {dim} (at most 2**32)")
    resolved = ResolvedTensorMap(name, t.tensor, dtype, view, box, strides, t.swizzle, t.interleave,
                                 t.l2_promotion, t.oob_fill)
    for i, stride in enumerate(resolved.strides_bytes[:-1]):
        if stride % 16 or stride >= 2**40:
            raise LaunchConfigError(f"{where}.view: dimension {i} has a stride of {stride} bytes "
                                    "(must be a multiple of 16, below 2**40)")
    return resolved


def _resolve_arg(text: str, where: str, buffers: dict[str, Any], tmaps: dict[str, ResolvedTensorMap],
                 env: _Env) -> ResolvedArg:
    kind, rest = parse_arg(text, where)
    if kind == "tmap":
        if rest not in tmaps:
            raise ManifestError(f"{where}: no tensor map {rest!r} (defined: {', '.join(tmaps) or 'none'})")
        return ResolvedArg("tmap", text, name=rest)
    if kind == "name":
        if rest in buffers:
            return ResolvedArg("ptr", text, name=rest)
        if rest in env.values:
            kind = "i32"
        else:
            known = sorted(buffers) + sorted(env.values)
            raise ManifestError(f"{where}: {rest!r} is not a tensor, scratch buffer or size (known: {', '.join(known)})")
    if kind == "f32":
        return ResolvedArg("scalar", text, dtype="f32", value=float(env.number(rest, where)))
    value = env.integer(rest, where)
    lo, hi = _INT_RANGE[kind]
    if not lo <= value <= hi:
        raise LaunchConfigError(f"{where}: {value} does not fit in {kind}")
    return ResolvedArg("scalar", text, dtype=kind, value=value)
