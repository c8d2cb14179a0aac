"""A model's CUDA file with its own host wrapper → PTXBench's candidate: device code and a launch manifest.

The paper's outputs (zhang677/PTXBench: `run(tvm::ffi::TensorView …)` exported with TVM-FFI),
FlashInfer-Bench CUDA solutions and KernelBench's inline PyTorch extensions hold the kernels and
the host code that launches them in one file. PTXBench owns the host side (docs/candidate.md),
so the file is split in two:

- **device code**: everything but host-only functions (models/host_source.py), the TVM-FFI and
  PyTorch includes and their export macros; every non-template kernel is declared `extern "C"`,
  so its entry keeps the name the wrapper launches it by;
- **the launches**, read from the wrapper's body statement by statement, as it runs:
  `kernel<<<grid, block, shared, stream>>>(args)` with grid, block and shared memory as
  expressions over the task's sizes and each argument a task tensor or a typed scalar
  (models/host_expr.py). Its tensor parameters are the task's tensors in the task's order
  (inputs, then outputs, as the paper's and FlashInfer's destination-passing `run` takes them);
  a PyTorch extension takes the inputs and returns the one output.

Nothing is guessed: a launch inside a branch or a loop, one through cudaLaunchKernelEx, a tensor
map, a buffer or a memset of the wrapper's own, a template kernel, a value set by a call: each
makes `why_not` say so, and the caller then needs a stated manifest or leaves the sample
unjudged with that reason. A kernel that reads a tensor as another element type than the task's
is `Mismatch`: it computes something else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ptxbench.models.host_expr import (
    INT_TYPES,
    Context,
    DeviceProps,
    Dims,
    Enum,
    Mismatch,
    Opaque,
    Pointer,
    Ref,
    Scalar,
    TensorMap,
    TensorParam,
    Unreadable,
    Value,
    cast,
    normal_type,
    read_value,
    scalar,
)
from ptxbench.models.host_source import (
    Item,
    Param,
    Source,
    aliases,
    constants,
    device_code,
    params,
    read_source,
    split_top,
    statements,
)
from ptxbench.models.host_tma import ENCODE, encode_call, tensor_map
from ptxbench.tasks.expr import ExprError, check_syntax, names_in
from ptxbench.tasks.records import TaskSpec

MAX_INLINE = 2            # helper functions followed from the wrapper, one inside another
MAX_STATEMENTS = 2000     # statements read in one wrapper
_CONDITIONAL = re.compile(r"^[ \t]*+#[ \t]*+(?:if|ifdef|ifndef|elif|else)\b", re.M)
_ASSIGNED = re.compile(r"\b([A-Za-z_]\w*+)(?:\.[xyz])?\s*+(?:[-+*/%|&^]|<<|>>)?=(?!=)|\b([A-Za-z_]\w*+)\s*+(?:\+\+|--)"
                       r"|(?:\+\+|--)\s*+([A-Za-z_]\w*+)")
_ADDRESS = re.compile(r"&\s*+([A-Za-z_]\w*+)")
_LAUNCH_API = re.compile(r"\b(?:cudaLaunchKernelEx|cudaLaunchKernel|cuLaunchKernelEx|cuLaunchKernel|"
                         r"cudaLaunchCooperativeKernel)\b")
_MEMORY_API = re.compile(r"\b(?:cudaMemset\w*|cudaMemcpy\w*|cuMemset\w*|cuMemcpy\w*)\b")
_ALLOC_API = re.compile(r"\b(?:cudaMalloc\w*|cuMemAlloc\w*)\b")
_TORCH_NEW = re.compile(r"^(?:torch|at)::(empty|zeros|ones|full|empty_like|zeros_like|ones_like|empty_strided)\b")
_DTYPES = {
    "__nv_bfloat16": "bf16", "nv_bfloat16": "bf16", "at::BFloat16": "bf16", "c10::BFloat16": "bf16", "BFloat16": "bf16",
    "half": "f16", "__half": "f16", "at::Half": "f16", "c10::Half": "f16",
    "float": "f32", "double": "f64", "int": "i32", "int32_t": "i32", "int64_t": "i64", "long": "i64",
    "uint8_t": "u8", "int8_t": "i8", "uint32_t": "u32", "unsigned": "u32", "unsigned int": "u32",
    "__nv_fp8_e4m3": "f8e4m3", "__nv_fp8_e5m2": "f8e5m2",
}
_SCALAR_ARGS = {
    "int": "i32", "int32_t": "i32", "signed": "i32", "signed int": "i32", "unsigned": "u32", "unsigned int": "u32",
    "uint32_t": "u32", "int64_t": "i64", "long": "i64", "long long": "i64", "long int": "i64", "ssize_t": "i64",
    "ptrdiff_t": "i64", "uint64_t": "u64", "size_t": "u64", "unsigned long": "u64", "unsigned long long": "u64",
    "cuuint64_t": "u64", "cuuint32_t": "u32", "uint": "u32", "float": "f32",
}


@dataclass
class Split:
    code: str                              # the device code
    manifest: dict | None                  # the launches read from the wrapper, or None
    why_not: str | None = None             # why no launch was read
    notes: list[str] = field(default_factory=list)
    kernels: tuple[str, ...] = ()
    host_only: str | None = None           # why the device code cannot stand alone (not judgeable at all)


@dataclass
class _Kernel:
    item: Item
    params: list[Param]


class _Scope:
    def __init__(self, parent: _Scope | None = None) -> None:
        self.values: dict[str, Value] = {}
        self.parent = parent

    def get(self, name: str) -> Value | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            scope = scope.parent
        return None

    def owner_of(self, name: str) -> _Scope | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.values:
                return scope
            scope = scope.parent
        return None

    def set(self, name: str, value: Value) -> None:
        scope: _Scope | None = self
        while scope is not None:                 # an assignment changes the binding where it lives
            if name in scope.values:
                scope.values[name] = value
                return
            scope = scope.parent
        self.values[name] = value


class _Reading:
    """The launches of one wrapper, read statement by statement."""

    def __init__(self, src: Source, task: TaskSpec, kernels: dict[str, _Kernel], host: dict[str, Item]) -> None:
        self.src, self.task, self.kernels, self.host = src, task, kernels, host
        self.consts = constants(src)
        self.types = aliases(src)
        self.launches: list[dict] = []
        self.tensor_maps: dict[str, dict] = {}
        self.notes: list[str] = []
        self.results: list[Value | None] = []           # what each helper being followed returned
        self.returned: str | None = None
        self.count = 0
        self.chain = 0
        self.depth = 0
        self.calls = re.compile(r"\b(?:" + "|".join(map(re.escape, host)) + r")\s*+\(") if host else None

    # -- names
    def context(self, scope: _Scope) -> Context:
        return Context(lambda name: self.lookup(scope, name), self.types, self.chain)

    def lookup(self, scope: _Scope, name: str) -> Value | None:
        found = scope.get(name)
        if found is not None:
            return found
        if name in self.consts:
            text = self.consts[name]
            if text is None:
                return Opaque(f"{name!r} is defined twice with different values")
            self.chain += 1
            try:
                return read_value(text, Context(lambda n: self.lookup(_Scope(), n), self.types, self.chain))
            finally:
                self.chain -= 1
        return None

    def value(self, text: str, scope: _Scope) -> Value:
        try:
            value = read_value(text, self.context(scope))
        except Unreadable as exc:
            return Opaque(str(exc))
        if isinstance(value, Ref) and value.owner is None:
            return Ref(value.name, scope.owner_of(value.name) or scope)
        return value

    # -- statements
    def body(self, item: Item, scope: _Scope, depth: int = 0) -> None:
        outer, self.depth = self.depth, depth
        try:
            self._body(item, scope, depth)
        finally:
            self.depth = outer

    def _body(self, item: Item, scope: _Scope, depth: int) -> None:
        text = self.src.text
        for start, end, compound in statements(text, item.body[0], item.body[1], self.src.pairs):
            self.count += 1
            if self.count > MAX_STATEMENTS:
                raise Unreadable(f"the wrapper has more than {MAX_STATEMENTS} statements")
            stmt = " ".join(text[start:end].split())
            if compound:
                self.control(stmt, scope)
            else:
                self.statement(stmt, scope, depth)

    def control(self, stmt: str, scope: _Scope) -> None:
        if "<<<" in stmt or _LAUNCH_API.search(stmt) or (self.calls is not None and self.calls.search(stmt)):
            raise Unreadable("a launch inside a branch or a loop: it depends on control flow the importer does not run")
        if _MEMORY_API.search(stmt):
            raise Unreadable(f"the wrapper sets memory itself ({_MEMORY_API.search(stmt).group()}) in a branch "  # type: ignore[union-attr]
                             "or a loop")
        for m in _ASSIGNED.finditer(stmt):
            name = next(g for g in m.groups() if g)
            if scope.get(name) is not None:
                scope.set(name, Opaque(f"{name!r} is changed inside a branch or a loop"))

    def statement(self, stmt: str, scope: _Scope, depth: int) -> None:
        if "<<<" in stmt:
            self.launch(stmt, scope)
            return
        if stmt.startswith("return") and not stmt[6:7].isalnum() and stmt[6:7] != "_":
            rest = stmt[len("return"):].strip()
            if depth:
                self.results[-1] = self.value(rest, scope) if rest else None
            else:
                self.returned = rest or None
            return
        if ENCODE.search(stmt):
            self.encode(stmt, scope)
            return
        api = _LAUNCH_API.search(stmt)
        if api:
            raise Unreadable(f"a launch through {api.group()} (its configuration is built on the host)")
        mem = _MEMORY_API.search(stmt)
        if mem:
            raise Unreadable(f"the wrapper sets memory itself ({mem.group()}): the harness owns every buffer")
        call = re.match(r"([A-Za-z_][\w:]*+)\s*+\((.*)\)$", stmt)
        if call and call.group(1).rsplit("::", 1)[-1] in self.host:
            self.inline(call.group(1).rsplit("::", 1)[-1], call.group(2), scope, depth)
            return
        if self.special_call(stmt, scope):
            return
        if self.declaration(stmt, scope) or self.assignment(stmt, scope):
            return
        for m in _ADDRESS.finditer(stmt):           # a value a call fills in is not known here
            if _ALLOC_API.search(stmt):
                scope.set(m.group(1), Opaque(f"{m.group(1)!r} is a buffer the wrapper allocates itself: "
                                             "state it as scratch in a manifest"))
            else:
                scope.set(m.group(1), Opaque(f"{m.group(1)!r} is set by a call the importer does not run"))

    def special_call(self, stmt: str, scope: _Scope) -> bool:
        m = re.match(r"(?:\w+\s*+\(\s*+)?cudaDeviceGetAttribute\s*+\(\s*+&\s*+(\w+)\s*+,\s*+(\w+)", stmt)
        if m:
            scope.set(m.group(1), Scalar("num_sms") if m.group(2) == "cudaDevAttrMultiProcessorCount"
                      else Opaque(f"{m.group(1)!r} is the device attribute {m.group(2)}"))
            return True
        m = re.match(r"(?:\w+\s*+\(\s*+)?cudaGetDeviceProperties\s*+\(\s*+&\s*+(\w+)", stmt)
        if m:
            scope.set(m.group(1), DeviceProps())
            return True
        return False

    def inline(self, name: str, args_text: str, scope: _Scope, depth: int) -> Value | None:
        """Follow a helper the wrapper calls, its parameters bound to the call's values; what it returns."""
        item = self.host[name]
        if depth >= MAX_INLINE:
            raise Unreadable(f"launches through helpers nested deeper than {MAX_INLINE}")
        ps = params(self.src, item)
        args = split_top(args_text) if args_text.strip() else []
        if len(args) != len(ps):
            raise Unreadable(f"{name}() is called with {len(args)} argument(s) for {len(ps)} parameter(s)")
        inner = _Scope()
        for p, a in zip(ps, args):
            value = self.value(a, scope)
            if p.type and not isinstance(value, (Opaque, TensorParam, Dims, DeviceProps, Ref, Enum, TensorMap)):
                value = self.typed(p.type, value)
            inner.values[p.name] = value
        self.results.append(None)
        try:
            self.body(item, inner, depth + 1)
        finally:
            returned = self.results.pop()
        return returned

    def encode(self, stmt: str, scope: _Scope) -> None:
        """A cuTensorMapEncodeTiled call (by name, or through the pointer the driver gave): its tensor map,
        written where its first argument points."""
        element, args = encode_call(stmt)
        target = self.value(args[0], scope)
        if not isinstance(target, Ref) or not isinstance(target.owner, _Scope):
            raise Unreadable(f"a tensor map encoded into {args[0]!r}, not a local variable the importer sees")
        values = [self.value(a, scope) for a in args[3:]]
        spec = tensor_map(element, values, self.task, self.manifest_expr)
        target.owner.set(target.name, TensorMap(tuple(spec.items())))

    def typed(self, type_text: str, value: Value) -> Value:
        t = normal_type(type_text)
        base = Context(lambda n: None, self.types).resolve_type(t.replace("*", "").strip())
        if "*" in t and isinstance(value, Pointer):
            return Pointer(value.tensor, base if base not in ("void", "char") else value.ctype)
        if base in INT_TYPES | {"float", "double"} and "*" not in t:
            try:
                return cast(Context(lambda n: None, self.types), base, value)
            except Unreadable as exc:
                return Opaque(str(exc))
        return value

    def declaration(self, stmt: str, scope: _Scope) -> bool:
        m = re.match(r"((?:(?:const|constexpr|static|volatile|unsigned|signed|long|short|inline|struct)\s++)*+"
                     r"[A-Za-z_][\w:]*+(?:\s*+<[^<>;]*+>)?(?:\s*+[*&]++)?)\s*+([*&]*+\s*+[A-Za-z_]\w*+)\s*+(=|\(|\{|,|\[|$)",
                     stmt)
        if m is None or m.group(1).split()[0] in ("return", "delete", "throw", "goto", "case", "else", "new"):
            return False
        type_text = m.group(1)
        for decl in split_top(stmt[m.start(2):]):
            d = re.match(r"([*&]*+)\s*+([A-Za-z_]\w*+)\s*+(?:\[[^\]]*+\]\s*+)?(.*)$", decl, re.S)
            if d is None:
                continue
            stars, name, init = d.group(1), d.group(2), d.group(3).strip()
            full_type = type_text + stars
            scope.values[name] = self.initial(full_type, name, init, scope)
        return True

    def initial(self, type_text: str, name: str, init: str, scope: _Scope) -> Value:
        base = normal_type(type_text)
        if init.startswith("="):
            expr = init[1:].strip()
            torch_new = _TORCH_NEW.match(expr)
            if torch_new:
                return self.torch_buffer(name, torch_new.group(1))
            helper = re.fullmatch(r"([A-Za-z_]\w*+)\s*+\((.*)\)", expr, re.S)
            if helper and helper.group(1) in self.host:
                returned = self.inline(helper.group(1), helper.group(2), scope, self.depth)
                value = returned if returned is not None else Opaque(f"{helper.group(1)}() returns nothing read here")
            else:
                value = self.value(expr, scope)
        elif init.startswith(("(", "{")) and init.endswith((")", "}")):
            inner = init[1:-1]
            if base == "dim3":
                value = self.value(f"dim3({inner})", scope)
            else:
                parts = split_top(inner) if inner.strip() else []
                value = self.value(parts[0], scope) if len(parts) == 1 else Opaque(
                    f"{name!r} is built from {len(parts)} values")
        elif not init:
            if base == "dim3":
                return Dims((Scalar("1"), Scalar("1"), Scalar("1")))     # what dim3's constructor makes
            if base == "cudaDeviceProp":
                return Opaque(f"{name!r} is filled by a call the importer does not see")
            if "CUtensorMap" in base:
                return Opaque(f"{name!r} is a tensor map the wrapper encodes on the host: state its box and "
                              "swizzle in a manifest")
            return Opaque(f"{name!r} is declared without a value")
        else:
            return Opaque(f"{name!r} is set in a way the importer does not read")
        if base == "dim3" and isinstance(value, Scalar):
            return Dims((value,))
        if isinstance(value, (Opaque, TensorMap, Ref, Enum, Dims)) or base in ("auto", "auto*", "auto&") or \
                base.endswith("Tensor") or base.endswith("TensorView"):
            return value
        return self.typed(type_text, value)

    def torch_buffer(self, name: str, how: str) -> Value:
        if name != self.returned:
            return Opaque(f"{name!r} is a buffer the wrapper allocates itself (torch::{how}): state it as "
                          "scratch in a manifest")
        outputs = self.task.outputs
        if len(outputs) != 1:
            return Opaque(f"the wrapper returns one tensor; {self.task.id} has {len(outputs)} outputs")
        if how.startswith(("zeros", "ones", "full")):
            self.notes.append(f"the wrapper fills its output with torch::{how} before the launch; the harness "
                              "fills outputs with NaN")
        out = outputs[0]
        return TensorParam(out.name, tuple(out.shape))

    def assignment(self, stmt: str, scope: _Scope) -> bool:
        m = re.match(r"([A-Za-z_]\w*+)(?:\.([xyz]))?\s*+((?:[-+*/%]|<<|>>)?)=(?!=)\s*+(.+)$", stmt, re.S)
        if m is None:
            return False
        name, member, op, expr = m.groups()
        if scope.get(name) is None:
            scope.values[name] = Opaque(f"{name!r} is assigned without a declaration the importer saw")
            return True
        if op:
            expr = f"{name}{'.' + member if member else ''} {op} ({expr})"
        value = self.value(expr, scope)
        if member:
            current = scope.get(name)
            if isinstance(current, Dims) and not isinstance(value, Opaque):
                parts = list(current.parts) + [Scalar("1")] * (3 - len(current.parts))
                try:
                    parts["xyz".index(member)] = scalar(value)
                    scope.set(name, Dims(tuple(parts)))
                except Unreadable as exc:
                    scope.set(name, Opaque(str(exc)))
            else:
                scope.set(name, Opaque(value.why if isinstance(value, Opaque) else f"{name}.{member} of a non-dim3"))
            return True
        scope.set(name, value)
        return True

    # -- a launch
    def launch(self, stmt: str, scope: _Scope) -> None:
        head, _, rest = stmt.partition("<<<")
        config, sep, call = rest.partition(">>>")
        head = head.strip()
        if not sep or not call.strip().startswith("(") or not call.strip().endswith(")"):
            raise Unreadable(f"a launch the importer cannot read: {stmt[:120]}")
        if "<" in head:
            raise Unreadable(f"{head} is a template kernel: its entry is a C++ mangled name the wrapper does not "
                             "state; state a manifest")
        name = head.rsplit("::", 1)[-1]
        kernel = self.kernels.get(name)
        if kernel is None:
            raise Unreadable(f"it launches {head}, which the file does not define as a kernel the importer can name")
        parts = split_top(config)
        if not 2 <= len(parts) <= 4:
            raise Unreadable(f"a launch configuration of {len(parts)} parts")
        launch: dict = {"entry": name, "grid": self.dims(parts[0], scope, "grid"),
                        "block": self.dims(parts[1], scope, "block")}
        if len(parts) >= 3 and parts[2] not in ("0", ""):
            launch["shared_bytes"] = self.expression(parts[2], scope, "shared memory")
        inner = call.strip()[1:-1]
        args = split_top(inner) if inner.strip() else []
        if len(args) != len(kernel.params):
            raise Unreadable(f"{name} takes {len(kernel.params)} parameter(s) and is launched with {len(args)}")
        launch["args"] = [self.argument(a, p, scope, name) for a, p in zip(args, kernel.params)]
        self.launches.append(launch)

    def dims(self, text: str, scope: _Scope, what: str) -> list:
        value = read_value(text, self.context(scope))
        if isinstance(value, Opaque):
            raise Unreadable(value.why)
        if isinstance(value, Scalar):
            value = Dims((value,))
        if not isinstance(value, Dims) or not 1 <= len(value.parts) <= 3:
            raise Unreadable(f"the {what} is not a dim3 or a number")
        return [self.manifest_expr(p, what) for p in value.parts]

    def expression(self, text: str, scope: _Scope, what: str) -> int | str:
        return self.manifest_expr(scalar(read_value(text, self.context(scope))), what)

    def manifest_expr(self, s: Scalar, what: str) -> int | str:
        if s.is_float and what != "argument":
            raise Unreadable(f"the {what} is a floating-point value")
        allowed = {n for t in (*self.task.inputs, *self.task.outputs) for d in t.shape for n in _names(d)}
        allowed |= set(self.task.headline) | {"num_sms"}
        try:
            check_syntax(s.text)
            unknown = names_in(s.text) - allowed
        except ExprError as exc:
            raise Unreadable(f"the {what}: {exc}") from None
        if unknown:
            raise Unreadable(f"the {what} uses {', '.join(sorted(unknown))}, not a size of {self.task.id}")
        return int(s.text) if re.fullmatch(r"-?\d+", s.text) else s.text

    def argument(self, text: str, param: Param, scope: _Scope, kernel: str) -> str:
        ctx = Context(lambda n: None, self.types)
        ptype = normal_type(param.type)
        where = f"{kernel}'s parameter {param.name or '?'}"
        base = ctx.resolve_type(ptype)
        value = read_value(text, self.context(scope))
        if "*" not in ptype and ("CUtensorMap" in base or base not in _SCALAR_ARGS):
            if isinstance(value, TensorMap) and re.fullmatch(r"[A-Za-z_]\w*", text.strip()):
                return self.map_argument(text.strip(), value)
            why = f" ({value.why})" if isinstance(value, Opaque) else ""
            raise Unreadable(f"{where} is a {param.type.strip()} the wrapper builds on the host (a tensor map or a "
                             f"struct) in a way the importer does not read{why}: state the launch in a manifest")
        if isinstance(value, Opaque):
            raise Unreadable(value.why)
        if "*" in ptype:
            if isinstance(value, TensorParam):
                raise Unreadable(f"{where}: a tensor passed without its data pointer")
            if not isinstance(value, Pointer):
                raise Unreadable(f"{where} is a pointer the wrapper does not take from a task tensor")
            element = ctx.resolve_type(ptype.replace("*", "").strip())
            self.check_dtype(value.tensor, element if element in _DTYPES else value.ctype, where)
            return value.tensor
        prefix = _SCALAR_ARGS[base]
        s = scalar(value)
        if prefix != "f32" and s.is_float:
            raise Unreadable(f"{where}: a floating-point value for an integer parameter")
        return f"{prefix}:{self.manifest_expr(s, 'argument')}"

    def map_argument(self, name: str, value: TensorMap) -> str:
        spec, key, n = value.as_dict(), name, 1
        while key in self.tensor_maps and self.tensor_maps[key] != spec:
            n += 1
            key = f"{name}_{n}"
        self.tensor_maps[key] = spec
        return f"tmap:{key}"

    def check_dtype(self, tensor: str, ctype: str | None, where: str) -> None:
        if ctype is None:
            return
        dtype = _DTYPES.get(normal_type(ctype))
        spec = next((t for t in (*self.task.inputs, *self.task.outputs) if t.name == tensor), None)
        if dtype is not None and spec is not None and dtype != spec.dtype:
            raise Mismatch(f"{where} reads {tensor} as {dtype}; {self.task.id}'s {tensor} is {spec.dtype}")


def _names(expr: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", expr))


def split_wrapper(code: str, task: TaskSpec, *, function: str = "run", returns_output: bool = False) -> Split:
    """Split `code` into device code and the launches its host function `function` makes.
    `returns_output`: a PyTorch extension, whose tensor parameters are the task's inputs and whose
    returned tensor is its one output; else every tensor parameter is given (inputs, then outputs)."""
    src = read_source(code)
    if isinstance(src, str):
        return Split(code, None, f"the file cannot be read: {src}", host_only=f"the file cannot be read: {src}")
    kernels: dict[str, _Kernel] = {}
    seen: dict[str, int] = {}
    for item in src.functions():
        if item.kernel and not item.template:
            seen[item.name] = seen.get(item.name, 0) + 1
            kernels[item.name] = _Kernel(item, params(src, item))
    for name, n in seen.items():
        if n > 1:
            kernels.pop(name, None)
    host = {i.name: i for i in src.functions() if not i.device}
    device, host_only = device_code(src, {n: k.item for n, k in kernels.items()})
    names = tuple(sorted(i.name for i in src.functions() if i.kernel))
    split = Split(device, None, None, [], names, host_only)
    wrapper = host.get(function)
    if wrapper is None:
        split.why_not = f"no host function {function}() launches the kernels"
        return split
    reading = _Reading(src, task, kernels, {n: i for n, i in host.items() if n != function})
    if _CONDITIONAL.search(src.masked, wrapper.start, wrapper.end):
        split.why_not = f"{function}() holds preprocessor conditionals (#if …): which launch runs is not known"
        return split
    try:
        scope = _bind(src, wrapper, task, returns_output, reading)
        reading.body(wrapper, scope)
        if not reading.launches:
            raise Unreadable(f"{function}() launches no kernel with <<<…>>>")
    except Mismatch:
        raise
    except Unreadable as exc:
        split.why_not = str(exc)
        return split
    split.manifest = {"launches": reading.launches}
    if reading.tensor_maps:
        split.manifest["tensor_maps"] = reading.tensor_maps
    split.notes = reading.notes
    return split


def _bind(src: Source, wrapper: Item, task: TaskSpec, returns_output: bool, reading: _Reading) -> _Scope:
    ps = params(src, wrapper)
    tensors = [p for p in ps if re.search(r"\b(?:Tensor|TensorView)\b", p.type)]
    if len(tensors) != len(ps):
        others = ", ".join(p.name or p.type for p in ps if p not in tensors)
        raise Unreadable(f"{wrapper.name}() takes parameters that are not tensors ({others}): the harness passes "
                         "the task's tensors only")
    expected = list(task.inputs) if returns_output else [*task.inputs, *task.outputs]
    if len(tensors) != len(expected):
        raise Unreadable(f"{wrapper.name}() takes {len(tensors)} tensor(s); {task.id} has "
                         + (f"{len(task.inputs)} input(s)" if returns_output
                            else f"{len(task.inputs)} input(s) and {len(task.outputs)} output(s)"))
    scope = _Scope()
    for p, spec in zip(tensors, expected):
        scope.values[p.name] = TensorParam(spec.name, tuple(spec.shape))
    if returns_output:
        last = statements(src.text, wrapper.body[0], wrapper.body[1], src.pairs)
        if last:
            s, e, _ = last[-1]
            m = re.fullmatch(r"\s*return\s+([A-Za-z_]\w*)\s*", src.text[s:e])
            reading.returned = m.group(1) if m else None
        if reading.returned is None:
            raise Unreadable(f"{wrapper.name}() does not end by returning one tensor it made")
        if reading.returned in scope.values:
            raise Unreadable(f"{wrapper.name}() returns its input {reading.returned}")
    return scope
