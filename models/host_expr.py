"""C++ expressions of a model's host wrapper → launch-manifest values (docs/candidate.md, "Expressions").

A wrapper (a TVM-FFI `run`, a PyTorch extension function) computes a launch's grid, block, shared
memory and scalar arguments from its tensors' sizes and from constants. This reads such an
expression without running anything: numbers, names bound earlier in the wrapper or defined as
constants in the file, `X.size(i)` and the data pointer of a tensor parameter, casts, `sizeof` of
CUDA's scalar types, `+ - * / % << >>`, `min`, `max`, `sqrt`, ceil-division helpers and `dim3`.
Anything else (a ternary, a comparison, a call the importer does not know, a name it cannot trace)
raises `Unreadable` with the reason: a launch is read exactly or not at all.

The text is untrusted: tokens are read once, the nesting and the chain of names followed are
bounded, and every number that comes out is checked by tasks/expr.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ptxbench.tasks.expr import ExprError, evaluate, names_in

MAX_DEPTH = 48            # nesting of one expression
MAX_CHAIN = 24            # names followed to their definitions, one inside another

_TOKEN = re.compile(
    r"\s*+(?:(?P<num>0[xX][0-9a-fA-F]++[uUlL]*+|(?:\d++\.?\d*+|\.\d++)(?:[eE][+-]?\d++)?[fFuUlL]*+)"
    r"|(?P<id>::?[A-Za-z_]\w*+(?:\s*+::\s*+[A-Za-z_]\w*+)*+|[A-Za-z_]\w*+(?:\s*+::\s*+[A-Za-z_]\w*+)*+)"
    r"|(?P<op><<|>>|->|&&|\|\||==|!=|<=|>=|[-+*/%(),.<>\[\]?:!&|^~{}=]))"
)
SIZEOF = {
    "char": 1, "int8_t": 1, "uint8_t": 1, "signed char": 1, "unsigned char": 1, "bool": 1,
    "__nv_fp8_e4m3": 1, "__nv_fp8_e5m2": 1,
    "half": 2, "__half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "short": 2, "int16_t": 2, "uint16_t": 2,
    "int": 4, "unsigned": 4, "unsigned int": 4, "int32_t": 4, "uint32_t": 4, "float": 4, "half2": 4,
    "__half2": 4, "__nv_bfloat162": 4, "nv_bfloat162": 4,
    "long": 8, "long long": 8, "unsigned long long": 8, "int64_t": 8, "uint64_t": 8, "size_t": 8,
    "double": 8, "float2": 8, "int2": 8, "uint2": 8, "cuuint64_t": 8, "cuuint32_t": 4,
    "float4": 16, "int4": 16, "uint4": 16, "double2": 16, "CUtensorMap": 128,
}
INT_TYPES = {"int", "unsigned", "unsigned int", "long", "long long", "unsigned long", "unsigned long long",
             "int32_t", "uint32_t", "int64_t", "uint64_t", "size_t", "short", "int16_t", "uint16_t",
             "int8_t", "uint8_t", "char", "index_t", "ssize_t", "ptrdiff_t", "auto", "cuuint64_t", "cuuint32_t",
             "unsigned long int", "long int", "uint"}
FLOAT_TYPES = {"float", "double"}
CEIL_DIV = {"ceil_div", "cdiv", "div_up", "ceildiv", "CEIL_DIV", "DIV_UP", "ceilDiv", "divUp", "div_ceil",
            "CDIV", "ceil_div_int", "DIVUP", "cuda::ceil_div"}
MINMAX = {"min": "min", "max": "max", "std::min": "min", "std::max": "max", "fminf": "min", "fmaxf": "max",
          "::min": "min", "::max": "max", "std::fmin": "min", "std::fmax": "max", "cuda::std::min": "min",
          "cuda::std::max": "max"}
SQRT = {"sqrt", "sqrtf", "std::sqrt", "::sqrt", "::sqrtf"}
RSQRT = {"rsqrt", "rsqrtf"}
LOG2 = {"log2", "log2f", "std::log2"}
CASTS = {"static_cast", "reinterpret_cast", "const_cast", "std::static_cast"}
_QUALIFIERS = re.compile(r"\b(?:const|volatile|__restrict__|__restrict|restrict|struct|__grid_constant__)\b")


class Unreadable(ValueError):
    """An expression (or a launch) the importer cannot read exactly; the message says why."""


class Mismatch(Unreadable):
    """The kernel reads a task tensor as another element type than the task's: it computes something else."""


@dataclass(frozen=True)
class Scalar:
    text: str                 # a manifest expression over the task's size names and num_sms
    is_float: bool = False


@dataclass(frozen=True)
class Pointer:
    tensor: str               # the task tensor it points at
    ctype: str | None = None  # its element type as the wrapper cast it


@dataclass(frozen=True)
class Dims:
    parts: tuple[Scalar, ...]


@dataclass(frozen=True)
class TensorParam:
    """A tensor the wrapper takes (or, for a PyTorch extension, returns): one of the task's tensors."""
    tensor: str
    shape: tuple[str, ...]


@dataclass(frozen=True)
class Opaque:
    why: str                  # what it is, said when something needs its value


@dataclass(frozen=True)
class DeviceProps:
    """A cudaDeviceProp filled by cudaGetDeviceProperties: only its multiProcessorCount is read."""


@dataclass(frozen=True)
class Enum:
    """A CUDA driver enumerator (`CU_TENSOR_MAP_SWIZZLE_128B`): a tensor map's options are read by name."""
    name: str


@dataclass(frozen=True)
class Ref:
    """`&name`: where a call (cuTensorMapEncodeTiled, a helper) writes. `owner` is the scope that holds it."""
    name: str
    owner: object = None


@dataclass(frozen=True)
class TensorMap:
    """A CUtensorMap the wrapper encoded, as a manifest's `tensor_maps` entry (docs/candidate.md)."""
    spec: tuple[tuple[str, object], ...]

    def as_dict(self) -> dict[str, object]:
        return dict(self.spec)


Value = Scalar | Pointer | Dims | TensorParam | Opaque | DeviceProps | Enum | Ref | TensorMap


def normal_type(text: str) -> str:
    """A C++ type's words without qualifiers or spaces around `*` (`const __nv_bfloat16 *` → `__nv_bfloat16*`)."""
    text = _QUALIFIERS.sub(" ", text).replace("&", " ")
    text = re.sub(r"\s*\*\s*", "*", text)
    return " ".join(text.split()).removeprefix("std::").removeprefix("::")


def scalar_number(value: int | float) -> Scalar:
    return Scalar(repr(value) if isinstance(value, float) else str(value), isinstance(value, float))


def folded(text: str, is_float: bool) -> Scalar:
    """`text`, computed when it names nothing (`128 * 64 * 2` → `16384`)."""
    try:
        if not names_in(text):
            value = evaluate(text)
            if not is_float and isinstance(value, float) and value.is_integer():
                value = int(value)
            return scalar_number(value)
    except ExprError as exc:
        raise Unreadable(f"{text}: {exc}") from None
    return Scalar(text, is_float)


@dataclass
class Context:
    """What names mean where an expression is read: `lookup` answers a name (None: unknown), `types`
    maps `using`/`typedef` aliases to the types they stand for."""

    lookup: Callable[[str], Value | None]
    types: Mapping[str, str] = field(default_factory=dict)
    depth: int = 0

    def resolve_type(self, name: str) -> str:
        seen = 0
        name = normal_type(name)
        while name in self.types and seen < MAX_CHAIN:
            name, seen = normal_type(self.types[name]), seen + 1
        return name


def tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) of every token; Unreadable for a character no C++ expression here holds."""
    out: list[tuple[str, str]] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if not text[pos:].strip():
                break
            raise Unreadable(f"cannot read {text[pos:pos + 20].strip()!r}")
        kind = m.lastgroup or ""
        out.append((kind, re.sub(r"\s+", "", m.group(kind))))
        pos = m.end()
    return out


class Reader:
    """A recursive-descent reader over one expression's tokens, giving a Value."""

    def __init__(self, text: str, ctx: Context) -> None:
        self.text, self.ctx = text, ctx
        self.toks = tokens(text)
        self.i = 0
        self.depth = 0

    # -- tokens
    def peek(self, k: int = 0) -> tuple[str, str]:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else ("end", "")

    def take(self, want: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if want is not None and tok[1] != want:
            raise Unreadable(f"expected {want!r} in {self.text.strip()[:120]!r}")
        self.i += 1
        return tok

    def read(self) -> Value:
        value = self.expr()
        if self.peek()[0] != "end":
            raise Unreadable(f"cannot read {self.peek()[1]!r} in {self.text.strip()[:120]!r}")
        return value

    # -- grammar: additive and multiplicative levels, shifts, unary, postfix, primary
    def expr(self) -> Value:
        self.depth += 1
        if self.depth + self.ctx.depth > MAX_DEPTH:
            raise Unreadable("an expression nested too deeply")
        try:
            value = self.shift()
            if self.peek()[1] in ("?", "==", "!=", "<", ">", "<=", ">=", "&&", "||", "&", "|", "^"):
                raise Unreadable(f"{self.peek()[1]!r}: a condition or a bit operation decides the value")
            return value
        finally:
            self.depth -= 1

    def shift(self) -> Value:
        left = self.additive()
        while self.peek()[1] in ("<<", ">>"):
            op = self.take()[1]
            right = self.additive()
            a, b = scalar(left), scalar(right)
            if a.is_float or b.is_float:
                raise Unreadable("a shift of a floating-point value")
            left = folded(f"({a.text} * 2 ** {b.text})" if op == "<<" else f"({a.text} // 2 ** {b.text})", False)
        return left

    def additive(self) -> Value:
        left = self.term()
        while self.peek()[1] in ("+", "-"):
            op = self.take()[1]
            a, b = scalar(left), scalar(self.term())
            left = folded(f"({a.text} {op} {b.text})", a.is_float or b.is_float)
        return left

    def term(self) -> Value:
        left = self.unary()
        while self.peek()[1] in ("*", "/", "%"):
            op = self.take()[1]
            a, b = scalar(left), scalar(self.unary())
            is_float = a.is_float or b.is_float
            if op == "%" and is_float:
                raise Unreadable("% of a floating-point value")
            py = "//" if op == "/" and not is_float else op
            left = folded(f"({a.text} {py} {b.text})", is_float)
        return left

    def unary(self) -> Value:
        op = self.peek()[1]
        if op in ("-", "+"):
            self.take()
            a = scalar(self.unary())
            return folded(f"(-{a.text})", a.is_float) if op == "-" else a
        if op == "&" and self.peek(1)[0] == "id" and self.peek(2)[1] in (")", ",", "end", ""):
            self.take()
            return Ref(self.take()[1])
        if op in ("!", "~", "*", "&"):
            raise Unreadable(f"{op!r} in {self.text.strip()[:120]!r}: the importer reads arithmetic only")
        if op == "(" and (cast := self.c_cast()) is not None:
            return cast
        return self.postfix(self.primary())

    def c_cast(self) -> Value | None:
        """`(T)x` and `(T*)x`: a parenthesis holding a type only, then an operand."""
        j, words = self.i + 1, []
        while self.peek(j - self.i)[1] not in (")", ""):
            kind, text = self.peek(j - self.i)
            if kind == "id" or text == "*":
                words.append(text)
                j += 1
            else:
                return None
        if not words or self.peek(j - self.i + 1)[0] in ("op", "end") and self.peek(j - self.i + 1)[1] not in ("(", "-"):
            return None
        type_text = " ".join(words)
        base = self.ctx.resolve_type(type_text.replace("*", "").strip())
        if "*" not in type_text and base not in INT_TYPES | FLOAT_TYPES and base not in SIZEOF:
            return None                       # `(N)` followed by an operator: a parenthesised name
        self.i = j + 1
        return cast(self.ctx, type_text, self.unary())

    def primary(self) -> Value:
        kind, text = self.take()
        if kind == "num":
            return number(text)
        if text == "(":
            value = self.expr()
            self.take(")")
            return value
        if text == "{":
            return Dims(self.listed("}"))
        if kind != "id":
            raise Unreadable(f"cannot read {text!r} in {self.text.strip()[:120]!r}")
        name = text.removeprefix("::") if text.count("::") == 1 and text.startswith("::") else text
        if name in CASTS:
            self.take("<")
            type_text = self.template_text()
            self.take("(")
            value = self.expr()
            self.take(")")
            return cast(self.ctx, type_text, value)
        if name == "sizeof":
            self.take("(")
            words = []
            while self.peek()[1] not in (")", ""):
                words.append(self.take()[1])
            self.take(")")
            t = self.ctx.resolve_type(" ".join(words))
            if t not in SIZEOF:
                raise Unreadable(f"sizeof({' '.join(words)}): not a CUDA scalar type the importer knows")
            return Scalar(str(SIZEOF[t]))
        if self.peek()[1] == "<" and name not in ("dim3",):
            self.take("<")
            self.template_text()              # `std::min<int>(…)`: the template argument changes nothing read here
        if self.peek()[1] == "(":
            return self.call(name)
        return self.name(name)

    def template_text(self) -> str:
        level, words = 1, []
        while level:
            kind, text = self.take()
            if kind == "end":
                raise Unreadable("an unclosed template argument")
            level += {"<": 1, ">": -1, ">>": -2}.get(text, 0)
            if level > 0:
                words.append(text)
            elif level < 0:
                raise Unreadable("a template argument the importer cannot read")
        return " ".join(words)

    def listed(self, close: str) -> tuple[Scalar, ...]:
        parts: list[Scalar] = []
        if self.peek()[1] != close:
            while True:
                parts.append(scalar(self.expr()))
                if self.peek()[1] != ",":
                    break
                self.take(",")
        self.take(close)
        return tuple(parts)

    def call(self, name: str) -> Value:
        self.take("(")
        if name == "dim3":
            parts = self.listed(")")
            if not 1 <= len(parts) <= 3:
                raise Unreadable("dim3 takes one to three values")
            return Dims(parts)
        target = self.ctx.resolve_type(name)
        if target in INT_TYPES | FLOAT_TYPES:       # a functional cast: int(x), float(x)
            value = self.expr()
            self.take(")")
            return cast(self.ctx, target, value)
        short = name.rsplit("::", 1)[-1]
        known = (name in MINMAX or short in ("min", "max") or name in CEIL_DIV or short in CEIL_DIV
                 or name in SQRT | RSQRT | LOG2)
        if not known:
            raise Unreadable(f"a call to {name}(): the importer does not run the wrapper's functions")
        args = self.listed(")")
        if name in MINMAX or short in ("min", "max"):
            if len(args) < 2:
                raise Unreadable(f"{name} with {len(args)} argument(s)")
            fn = MINMAX.get(name, short)
            return folded(f"{fn}({', '.join(a.text for a in args)})", any(a.is_float for a in args))
        if name in CEIL_DIV or short in CEIL_DIV:
            if len(args) != 2 or any(a.is_float for a in args):
                raise Unreadable(f"{name} needs two integers")
            return folded(f"ceil_div({args[0].text}, {args[1].text})", False)
        if len(args) != 1:
            raise Unreadable(f"{name} with {len(args)} arguments")
        if name in SQRT:
            return folded(f"sqrt({args[0].text})", True)
        if name in RSQRT:
            return folded(f"(1 / sqrt({args[0].text}))", True)
        return folded(f"log2({args[0].text})", True)

    def name(self, name: str) -> Value:
        if name.startswith("CU_"):
            return Enum(name)
        value = self.ctx.lookup(name)
        if value is None and "::" in name:
            value = self.ctx.lookup(name.rsplit("::", 1)[-1])
        if value is None:
            raise Unreadable(f"{name!r} is not known where the kernel is launched")
        return value

    # -- postfix: .member, ->member, .method(…), [i]
    def postfix(self, value: Value) -> Value:
        while self.peek()[1] in (".", "->", "["):
            op = self.take()[1]
            if op == "[":
                index = scalar(self.expr())
                self.take("]")
                value = indexed(value, index)
                continue
            member = self.take()[1]
            template = None
            if self.peek()[1] == "<":
                self.take("<")
                template = self.template_text()
            if self.peek()[1] == "(":
                self.take("(")
                args = self.listed(")")
                value = method(value, member, args, template)
            else:
                value = field_of(value, member)
        return value


def number(text: str) -> Scalar:
    body = text.rstrip("uUlL")
    if body.lower().startswith("0x"):
        return Scalar(str(int(body, 16)))
    if any(c in body for c in ".eE") or body.endswith(("f", "F")):
        return scalar_number(float(body.rstrip("fF")))
    return Scalar(str(int(body)))


def scalar(value: Value) -> Scalar:
    if isinstance(value, Scalar):
        return value
    if isinstance(value, Opaque):
        raise Unreadable(value.why)
    if isinstance(value, Dims) and len(value.parts) == 1:
        return value.parts[0]
    what = {Pointer: "a data pointer", Dims: "a dim3", TensorParam: "a tensor", DeviceProps: "device properties"}
    raise Unreadable(f"{what.get(type(value), 'a value')} where a number is needed")


def cast(ctx: Context, type_text: str, value: Value) -> Value:
    target = ctx.resolve_type(type_text)
    if isinstance(value, (Enum, Ref)):
        return value                          # a cast of an enumerator or of an address changes nothing read here
    if target.endswith("*"):
        element = ctx.resolve_type(target.rstrip("*").strip())
        if isinstance(value, Pointer):
            return Pointer(value.tensor, element if element not in ("void", "char", "unsigned char") else value.ctype)
        raise Unreadable(f"a cast to {type_text} of something that is not a tensor's data")
    if isinstance(value, (Pointer, TensorParam, Dims, DeviceProps)):
        raise Unreadable(f"a cast of a pointer or a tensor to {type_text}")
    s = scalar(value)
    if target in FLOAT_TYPES:
        return Scalar(s.text, True)
    if target in INT_TYPES or target in SIZEOF:
        if s.is_float:
            try:
                if not names_in(s.text):
                    return Scalar(str(int(evaluate(s.text))))
            except ExprError as exc:
                raise Unreadable(str(exc)) from None
            raise Unreadable(f"a floating-point value cast to {type_text}")
        return s
    raise Unreadable(f"a cast to {type_text}")


def indexed(value: Value, index: Scalar) -> Value:
    if isinstance(value, Dims):
        i = _constant_index(index, len(value.parts))
        return value.parts[i]
    if isinstance(value, Pointer):
        raise Unreadable("an element of a tensor read on the host")
    raise Unreadable("an index into something the importer does not read")


def _constant_index(index: Scalar, n: int) -> int:
    try:
        i = int(evaluate(index.text))
    except ExprError:
        raise Unreadable("an index that is not a constant") from None
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise Unreadable(f"index {i} of {n} dimension(s)")
    return i


def _dim(shape: tuple[str, ...], i: int) -> Scalar:
    text = shape[i]
    return Scalar(text if re.fullmatch(r"\w+", text) else f"({text})")


def _product(parts: tuple[str, ...]) -> Scalar:
    if not parts:
        return Scalar("1")
    if len(parts) == 1:
        return _dim(parts, 0)
    return folded("(" + " * ".join(p if re.fullmatch(r"\w+", p) else f"({p})" for p in parts) + ")", False)


_DATA = {"data_ptr", "data", "const_data_ptr", "mutable_data_ptr"}


def method(value: Value, name: str, args: tuple[Scalar, ...], template: str | None) -> Value:
    if isinstance(value, TensorParam):
        shape = value.shape
        if name in _DATA and not args:
            return Pointer(value.tensor, normal_type(template) if template else None)
        if name in ("size", "stride") and len(args) == 1:
            i = _constant_index(args[0], len(shape))
            return _dim(shape, i) if name == "size" else _product(shape[i + 1:])
        if name == "numel" and not args:
            return _product(shape)
        if name in ("ndim", "dim") and not args:
            return Scalar(str(len(shape)))
        if name in ("sizes", "shape") and not args:
            return Dims(tuple(_dim(shape, i) for i in range(len(shape))))
        if name in ("contiguous",) and not args:
            return value
        return Opaque(f"{value.tensor}.{name}(): not a size or a data pointer")
    if isinstance(value, Opaque):
        raise Unreadable(value.why)
    raise Unreadable(f".{name}() of something that is not a tensor")


def field_of(value: Value, name: str) -> Value:
    if isinstance(value, Dims) and name in ("x", "y", "z"):
        i = "xyz".index(name)
        return value.parts[i] if i < len(value.parts) else Scalar("1")
    if isinstance(value, DeviceProps):
        if name == "multiProcessorCount":
            return Scalar("num_sms")
        raise Unreadable(f"the device property {name}: only multiProcessorCount is known")
    if isinstance(value, TensorParam) and name == "shape":
        return Dims(tuple(_dim(value.shape, i) for i in range(len(value.shape))))
    if isinstance(value, Opaque):
        raise Unreadable(value.why)
    raise Unreadable(f".{name} of something the importer does not read")


def read_value(text: str, ctx: Context) -> Value:
    """The value of one C++ expression; raises Unreadable."""
    if ctx.depth > MAX_CHAIN:
        raise Unreadable("names defined through too many other names")
    return Reader(text, ctx).read()
