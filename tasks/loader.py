"""Reading a spec file into a `TaskSpec`, checking every field on the way.

Use `ptxbench.tasks.spec.load_task`; this module holds the checks so that
spec.py stays the small public face of the format (docs/tasks.md).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from ptxbench.tasks.expr import ExprError, check_condition, evaluate, evaluate_int, names_in
from ptxbench.tasks.records import (
    ARCHES,
    BASELINES,
    BUILTIN_NAMES,
    DEFAULT_ELEMENT_FACTOR,
    DISTRIBUTIONS,
    DTYPE_BYTES,
    FAMILIES,
    METRICS,
    ROW_SAMPLED,
    Sizes,
    TaskSpec,
    TaskSpecError,
    TensorSpec,
    Tolerance,
)

_TOP_FIELDS = {
    "id", "title", "operation", "arch", "families", "baseline", "flops", "bytes",
    "input_distribution", "constraints", "description", "inputs", "outputs",
    "tolerance", "sizes", "launch", "params",
}


class _Reader:
    """Typed field access on a TOML table, with errors that name the file and field."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    def fail(self, field_name: str, message: str) -> TaskSpecError:
        return TaskSpecError(self.path, field_name, message)

    def get(self, table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str,
            default: Any = ...) -> Any:
        name = f"{where}.{key}" if where else key
        if key not in table:
            if default is ...:
                raise self.fail(name, "missing")
            return default
        value = table[key]
        if isinstance(value, bool) and kind is not bool:
            raise self.fail(name, f"expected {_kind_name(kind)}, got a boolean")
        if not isinstance(value, kind):
            raise self.fail(name, f"expected {_kind_name(kind)}, got {type(value).__name__} {value!r}")
        return value

    def str_list(self, table: dict[str, Any], key: str, where: str = "", default: Any = ...) -> list[str]:
        value = self.get(table, key, list, where, default)
        name = f"{where}.{key}" if where else key
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.fail(f"{name}[{i}]", f"expected a string, got {item!r}")
        return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", list: "a list",
             dict: "a table", bool: "true or false"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _tensors(r: _Reader, key: str, sizes: set[str], is_input: bool) -> tuple[TensorSpec, ...]:
    items = r.get(r.data, key, list, "")
    if not items:
        raise r.fail(key, "needs at least one tensor")
    out: list[TensorSpec] = []
    for i, item in enumerate(items):
        where = f"{key}[{i}]"
        if not isinstance(item, dict):
            raise r.fail(where, "expected a table")
        allowed = {"name", "shape", "dtype"} | ({"distribution", "derived"} if is_input else set())
        for k in item:
            if k not in allowed:
                raise r.fail(f"{where}.{k}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
        name = r.get(item, "name", str, where)
        if not name.isidentifier():
            raise r.fail(f"{where}.name", f"{name!r} is not an identifier")
        shape = []
        for j, dim in enumerate(r.get(item, "shape", list, where)):
            if isinstance(dim, bool) or not isinstance(dim, (str, int)):
                raise r.fail(f"{where}.shape[{j}]", f"expected an expression string or integer, got {dim!r}")
            _check_expr(r, f"{where}.shape[{j}]", dim, sizes)
            shape.append(str(dim))
        dtype = r.get(item, "dtype", str, where)
        if dtype not in DTYPE_BYTES:
            raise r.fail(f"{where}.dtype", f"unknown dtype {dtype!r} (known: {', '.join(DTYPE_BYTES)})")
        dist = r.get(item, "distribution", str, where, None)
        if dist is not None and dist not in DISTRIBUTIONS:
            raise r.fail(f"{where}.distribution", f"unknown distribution {dist!r} (known: {', '.join(DISTRIBUTIONS)})")
        derived = r.get(item, "derived", bool, where, False)
        out.append(TensorSpec(name, tuple(shape), dtype, dist, derived))
    return tuple(out)


def _check_expr(r: _Reader, where: str, expr: str | int, allowed: set[str]) -> None:
    try:
        unknown = names_in(expr) - allowed
    except ExprError as exc:
        raise r.fail(where, str(exc)) from None
    if unknown:
        raise r.fail(where, f"unknown size name(s) {', '.join(sorted(unknown))} "
                            f"(sizes: {', '.join(sorted(allowed))})")


def _size_table(r: _Reader, where: str, value: Any, names: tuple[str, ...] | None) -> Sizes:
    if not isinstance(value, dict) or not value:
        raise r.fail(where, "expected a table of size names to integers, e.g. { M = 128, N = 128 }")
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise r.fail(f"{where}.{k}", f"expected a positive integer, got {v!r}")
        if not k.isidentifier():
            raise r.fail(f"{where}.{k}", "a size name must be an identifier")
    if names is not None and tuple(sorted(value)) != tuple(sorted(names)):
        raise r.fail(where, f"has sizes {sorted(value)}, the headline has {sorted(names)}")
    return dict(value)


def load_spec_file(path: Path) -> TaskSpec:
    """Load and check one spec file; raises TaskSpecError naming the file and the field."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskSpecError(path, "(file)", f"cannot be read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskSpecError(path, "(toml)", str(exc)) from None
    r = _Reader(path, data)
    for key in data:
        if key not in _TOP_FIELDS:
            raise r.fail(key, f"unknown field (allowed: {', '.join(sorted(_TOP_FIELDS))})")

    task_id = r.get(data, "id", str, "")
    if task_id != path.stem:
        raise r.fail("id", f"{task_id!r} must equal the file name without .toml ({path.stem!r})")
    arch = r.get(data, "arch", str, "")
    if arch not in ARCHES:
        raise r.fail("arch", f"{arch!r} is not one of {', '.join(ARCHES)}")
    families = r.str_list(data, "families")
    for i, fam in enumerate(families):
        if fam not in FAMILIES:
            raise r.fail(f"families[{i}]", f"unknown family {fam!r} (known: {', '.join(FAMILIES)})")
    if len(set(families)) != len(families):
        raise r.fail("families", "lists a family twice")
    baseline = r.get(data, "baseline", str, "")
    if baseline not in BASELINES:
        raise r.fail("baseline", f"unknown baseline {baseline!r} (known: {', '.join(BASELINES)})")
    dist = r.get(data, "input_distribution", str, "", "normal")
    if dist not in DISTRIBUTIONS:
        raise r.fail("input_distribution", f"unknown distribution {dist!r} (known: {', '.join(DISTRIBUTIONS)})")
    params = r.get(data, "params", dict, "", {})
    for k, v in params.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise r.fail(f"params.{k}", f"expected a number, got {v!r}")

    # Sizes first: every other expression is checked against their names.
    sizes_t = r.get(data, "sizes", dict, "")
    for k in sizes_t:
        if k not in ("headline", "train", "heldout"):
            raise r.fail(f"sizes.{k}", "unknown field (allowed: headline, train, heldout)")
    headline = _size_table(r, "sizes.headline", r.get(sizes_t, "headline", dict, "sizes"), None)
    names = tuple(headline)
    train = tuple(_size_table(r, f"sizes.train[{i}]", s, names)
                  for i, s in enumerate(r.get(sizes_t, "train", list, "sizes")))
    heldout = tuple(_size_table(r, f"sizes.heldout[{i}]", s, names)
                    for i, s in enumerate(r.get(sizes_t, "heldout", list, "sizes", [])))
    if headline not in train:
        raise r.fail("sizes.headline", f"{headline} must also be one of the train sizes")
    for i, s in enumerate(heldout):
        if s in train:
            raise r.fail(f"sizes.heldout[{i}]", f"{s} is also a train size; held-out sizes must be unseen")
    clash = set(names) & (set(BUILTIN_NAMES) | set(params))
    if clash:
        raise r.fail("sizes.headline", f"size name(s) {sorted(clash)} clash with built-in or param names")

    allowed = set(names) | set(params)
    inputs = _tensors(r, "inputs", allowed, is_input=True)
    outputs = _tensors(r, "outputs", allowed, is_input=False)
    seen: set[str] = set()
    for key, tensors in (("inputs", inputs), ("outputs", outputs)):
        for t in tensors:
            if t.name in seen or t.name in allowed:
                raise r.fail(f"{key}.{t.name}", "name is used twice (tensor and tensor, or tensor and size)")
            seen.add(t.name)

    flops = r.get(data, "flops", (str, int), "")
    bytes_ = r.get(data, "bytes", (str, int), "")
    _check_expr(r, "flops", flops, allowed)
    _check_expr(r, "bytes", bytes_, allowed)
    constraints = r.str_list(data, "constraints", default=[])
    for i, c in enumerate(constraints):
        _check_expr(r, f"constraints[{i}]", c, allowed)

    tol_t = r.get(data, "tolerance", dict, "")
    for k in tol_t:
        if k not in ("metric", "max", "per_output", "element_factor", "outliers", "heldout_rows"):
            raise r.fail(f"tolerance.{k}", "unknown field (allowed: metric, max, per_output, element_factor, "
                                           "outliers, heldout_rows)")
    metric = r.get(tol_t, "metric", str, "tolerance")
    if metric not in METRICS:
        raise r.fail("tolerance.metric", f"unknown metric {metric!r} (known: {', '.join(METRICS)})")
    tol_max = float(r.get(tol_t, "max", (int, float), "tolerance"))
    per_output = dict(r.get(tol_t, "per_output", dict, "tolerance", {}))
    for k, v in per_output.items():
        if k not in {t.name for t in outputs}:
            raise r.fail(f"tolerance.per_output.{k}", "is not an output of this task")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise r.fail(f"tolerance.per_output.{k}", f"expected a number, got {v!r}")
    if tol_max <= 0 or any(v <= 0 for v in per_output.values()):
        raise r.fail("tolerance", "tolerances must be positive")
    element_factor = float(r.get(tol_t, "element_factor", (int, float), "tolerance", DEFAULT_ELEMENT_FACTOR))
    if element_factor < 1:
        raise r.fail("tolerance.element_factor", "must be at least 1 (the element bound is looser than the aggregate)")
    outliers = float(r.get(tol_t, "outliers", (int, float), "tolerance", 0.0))
    if not 0 <= outliers <= 1e-3:
        raise r.fail("tolerance.outliers", "a fraction between 0 and 0.001 (a tiny share of elements, or none)")
    heldout_rows = r.get(tol_t, "heldout_rows", int, "tolerance", 0)
    if isinstance(heldout_rows, bool) or not 0 <= heldout_rows <= 1 << 20 or 0 < heldout_rows < 512:
        raise r.fail("tolerance.heldout_rows", "0 (every row) or a count of rows from 512 to 1048576")
    operation = r.get(data, "operation", str, "")
    if heldout_rows and operation not in ROW_SAMPLED:
        raise r.fail("tolerance.heldout_rows", f"the reference of {operation!r} cannot be computed at a sample of rows")

    launch = _launch(r, data.get("launch"), allowed | seen)

    task = TaskSpec(
        id=task_id,
        title=r.get(data, "title", str, ""),
        operation=operation,
        arch=arch,
        families=tuple(families),
        baseline=baseline,
        flops_expr=str(flops),
        bytes_expr=str(bytes_),
        input_distribution=dist,
        constraints=tuple(constraints),
        description=r.get(data, "description", str, "").strip(),
        inputs=inputs,
        outputs=outputs,
        tolerance=Tolerance(metric, tol_max, {k: float(v) for k, v in per_output.items()}, element_factor, outliers,
                            heldout_rows),
        headline=headline,
        train=train,
        heldout=heldout,
        launch=launch,
        source=path,
        params={k: v for k, v in params.items()},
    )
    _check_sizes(r, task)
    return task


_LAUNCH_FIELDS = ("entry", "grid", "block", "cluster", "shared_bytes", "args")


def _launch(r: _Reader, value: Any, known: set[str]) -> dict[str, Any]:
    """Light checks only; ptxbench.engine.manifest parses and resolves it fully."""
    if value is None:
        raise r.fail("launch", "missing (every task states a default launch)")
    if not isinstance(value, dict):
        raise r.fail("launch", "expected a table")
    for key in value:
        if key not in ("launches", "tensor_maps", "scratch"):
            raise r.fail(f"launch.{key}", "unknown field (allowed: launches, tensor_maps, scratch)")
    launches = value.get("launches")
    if not isinstance(launches, list) or not launches:
        raise r.fail("launch.launches", "needs at least one [[launch.launches]] table")
    for i, item in enumerate(launches):
        where = f"launch.launches[{i}]"
        if not isinstance(item, dict):
            raise r.fail(where, "expected a table")
        for key in item:
            if key not in _LAUNCH_FIELDS:
                raise r.fail(f"{where}.{key}", f"unknown field (allowed: {', '.join(_LAUNCH_FIELDS)})")
        for key in ("entry", "grid", "block", "args"):
            if key not in item:
                raise r.fail(f"{where}.{key}", "missing (the default launch must be complete)")
        for key in ("grid", "block", "cluster"):
            for j, dim in enumerate(item.get(key, [])):
                if isinstance(dim, bool) or not isinstance(dim, (str, int)):
                    raise r.fail(f"{where}.{key}[{j}]", f"expected an expression, got {dim!r}")
                _check_expr(r, f"{where}.{key}[{j}]", dim, known | set(BUILTIN_NAMES))
    return value


def _check_sizes(r: _Reader, task: TaskSpec) -> None:
    env_extra: dict[str, float] = dict(task.params)
    for split, sizes in (("headline", task.headline),) + tuple(task.all_sizes()):
        env = {**env_extra, **sizes}
        try:
            for c in task.constraints:
                if not check_condition(c, env):
                    raise r.fail("constraints", f"{c!r} does not hold for {split} size {sizes}")
            for t in task.inputs + task.outputs:
                for d in t.shape:
                    if evaluate_int(d, env) <= 0:
                        raise r.fail(f"{t.name}.shape", f"{d!r} is not positive for {split} size {sizes}")
            evaluate(task.flops_expr, env)
            evaluate(task.bytes_expr, env)
        except ExprError as exc:
            raise r.fail("sizes", f"{split} size {sizes}: {exc}") from None
