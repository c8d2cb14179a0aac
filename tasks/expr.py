"""A small, safe arithmetic evaluator for sizes, launch shapes and constraints.

Task specs and launch manifests write quantities such as ``"N // 128"``,
``"ceil_div(M, 128) * ceil_div(N, 256)"`` or ``"1/sqrt(D)"``. These strings come
from task authors and from model responses, so they are parsed with :mod:`ast`
and only a whitelist of nodes is evaluated: numbers, names bound by the caller,
``+ - * / // % **``, unary ``+ -``, and the functions ``ceil_div``, ``min``,
``max``, ``sqrt``, ``log2``. Conditions (spec constraints) also allow
comparisons and ``and`` / ``or`` / ``not``.

Work is bounded: the text length, the nesting depth, exponents and every
intermediate magnitude are capped, so a hostile string fails fast with an
:class:`ExprError` instead of hanging or exhausting memory.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping

Number = int | float
ExprLike = int | float | str

MAX_TEXT = 2000
MAX_DEPTH = 60
MAX_MAGNITUDE = 2**63          # larger results are rejected, never computed further
MAX_EXPONENT = 64


class ExprError(ValueError):
    """An expression that does not parse, names something unknown, or computes nonsense."""


def _ceil_div(a: Number, b: Number) -> int:
    if not (_is_integral(a) and _is_integral(b)):
        raise ExprError(f"ceil_div needs integers, got {a!r} and {b!r}")
    if b == 0:
        raise ExprError("ceil_div by zero")
    return -(-int(a) // int(b))


def _sqrt(x: Number) -> float:
    if x < 0:
        raise ExprError(f"sqrt of a negative number ({x!r})")
    return math.sqrt(x)


def _log2(x: Number) -> Number:
    if x <= 0:
        raise ExprError(f"log2 of a non-positive number ({x!r})")
    if isinstance(x, int) and x & (x - 1) == 0:
        return x.bit_length() - 1       # exact for powers of two
    return math.log2(x)


def _min(*xs: Number) -> Number:
    if not xs:
        raise ExprError("min needs at least one argument")
    return min(xs)


def _max(*xs: Number) -> Number:
    if not xs:
        raise ExprError("max needs at least one argument")
    return max(xs)


FUNCTIONS: dict[str, Callable[..., Number]] = {
    "ceil_div": _ceil_div,
    "min": _min,
    "max": _max,
    "sqrt": _sqrt,
    "log2": _log2,
}


def _is_integral(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) or (isinstance(x, float) and x.is_integer())


def _pow(a: Number, b: Number) -> Number:
    if abs(b) > MAX_EXPONENT:
        raise ExprError(f"exponent {b!r} is too large (at most {MAX_EXPONENT})")
    if a == 0 and b < 0:
        raise ExprError("zero raised to a negative power")
    if isinstance(a, int) and isinstance(b, int) and b >= 0:
        # bit_length * exponent bounds the result's size before computing it.
        if a.bit_length() * b > 64 * 2:
            raise ExprError(f"{a} ** {b} is too large")
    result = a**b
    if isinstance(result, complex):
        raise ExprError(f"{a} ** {b} is not a real number")
    return result


def _div(a: Number, b: Number) -> float:
    if b == 0:
        raise ExprError("division by zero")
    return a / b


def _floordiv(a: Number, b: Number) -> Number:
    if b == 0:
        raise ExprError("division by zero")
    return a // b


def _mod(a: Number, b: Number) -> Number:
    if b == 0:
        raise ExprError("modulo by zero")
    return a % b


_BINARY: dict[type, Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _div,
    ast.FloorDiv: _floordiv,
    ast.Mod: _mod,
    ast.Pow: _pow,
}

_COMPARE: dict[type, Callable[[Number, Number], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _check(value: Number, text: str) -> Number:
    if isinstance(value, float) and not math.isfinite(value):
        raise ExprError(f"{text!r} is not finite")
    if abs(value) >= MAX_MAGNITUDE:
        raise ExprError(f"{text!r} is too large (magnitude at least 2**63)")
    return value


class _Evaluator:
    def __init__(self, text: str, names: Mapping[str, Number], conditions: bool) -> None:
        self.text = text
        self.names = names
        self.conditions = conditions

    def eval(self, node: ast.AST, depth: int = 0) -> Number | bool:
        if depth > MAX_DEPTH:
            raise ExprError(f"{self.text!r} is nested too deeply")
        d = depth + 1
        if isinstance(node, ast.Expression):
            return self.eval(node.body, d)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise ExprError(f"{self.text!r}: only numbers are allowed, not {node.value!r}")
            return _check(node.value, self.text)
        if isinstance(node, ast.Name):
            if node.id not in self.names:
                known = ", ".join(sorted(self.names)) or "none"
                raise ExprError(f"{self.text!r}: unknown name {node.id!r} (known: {known})")
            return self.names[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            v = self._number(node.operand, d)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            a, b = self._number(node.left, d), self._number(node.right, d)
            return _check(_BINARY[type(node.op)](a, b), self.text)
        if isinstance(node, ast.Call):
            return self._call(node, d)
        if self.conditions:
            if isinstance(node, ast.Compare):
                left = self._number(node.left, d)
                for op, right_node in zip(node.ops, node.comparators):
                    if type(op) not in _COMPARE:
                        break
                    right = self._number(right_node, d)
                    if not _COMPARE[type(op)](left, right):
                        return False
                    left = right
                else:
                    return True
            if isinstance(node, ast.BoolOp):
                values = (bool(self.eval(v, d)) for v in node.values)
                return all(values) if isinstance(node.op, ast.And) else any(values)
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                return not self.eval(node.operand, d)
        raise ExprError(f"{self.text!r}: {type(node).__name__} is not allowed here")

    def _number(self, node: ast.AST, depth: int) -> Number:
        v = self.eval(node, depth)
        if isinstance(v, bool):
            raise ExprError(f"{self.text!r}: a comparison cannot be used as a number")
        return v

    def _call(self, node: ast.Call, depth: int) -> Number:
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            allowed = ", ".join(FUNCTIONS)
            raise ExprError(f"{self.text!r}: only the functions {allowed} may be called")
        if node.keywords:
            raise ExprError(f"{self.text!r}: keyword arguments are not allowed")
        args = [self._number(a, depth) for a in node.args]
        try:
            return _check(FUNCTIONS[node.func.id](*args), self.text)
        except TypeError as exc:
            raise ExprError(f"{self.text!r}: {node.func.id}: {exc}") from None


def parse(text: ExprLike) -> ast.Expression:
    """Parse (without evaluating) an expression; raises ExprError on bad syntax."""
    if isinstance(text, bool) or not isinstance(text, (int, float, str)):
        raise ExprError(f"an expression must be a number or a string, not {type(text).__name__}")
    source = str(text)
    if len(source) > MAX_TEXT:
        raise ExprError(f"expression is {len(source)} characters long (at most {MAX_TEXT})")
    if not source.strip():
        raise ExprError("empty expression")
    try:
        return ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"{source!r} does not parse: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ExprError(f"{source[:80]!r} is nested too deeply") from None


_SYNTAX_NODES = (ast.Expression, ast.Constant, ast.Name, ast.Load, ast.UnaryOp, ast.UAdd, ast.USub,
                 ast.BinOp, ast.Call, *_BINARY)


def check_syntax(text: ExprLike) -> None:
    """Reject, without evaluating, anything but numbers, names, arithmetic and the allowed functions."""
    tree = parse(text)
    for node in ast.walk(tree):
        if not isinstance(node, _SYNTAX_NODES):
            raise ExprError(f"{text!r}: {type(node).__name__} is not allowed here")
        if isinstance(node, ast.Call) and (not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS
                                           or node.keywords):
            raise ExprError(f"{text!r}: only the functions {', '.join(FUNCTIONS)} may be called, "
                            "with positional arguments")
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool)
                                               or not isinstance(node.value, (int, float))):
            raise ExprError(f"{text!r}: only numbers are allowed, not {node.value!r}")


def names_in(text: ExprLike) -> set[str]:
    """The free names an expression uses (function names excluded)."""
    tree = parse(text)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called}


def evaluate(text: ExprLike, names: Mapping[str, Number] | None = None) -> Number:
    """The value of an arithmetic expression; ints stay ints unless `/` or sqrt made a float."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return _check(text, str(text))
    tree = parse(text)
    try:
        value = _Evaluator(str(text), names or {}, conditions=False).eval(tree)
    except (RecursionError, MemoryError, OverflowError):
        raise ExprError(f"{str(text)[:80]!r} is too large to evaluate") from None
    assert not isinstance(value, bool)
    return value


def evaluate_int(text: ExprLike, names: Mapping[str, Number] | None = None) -> int:
    """Like evaluate, but the result must be a whole number (64.0 is accepted as 64)."""
    value = evaluate(text, names)
    if not _is_integral(value):
        raise ExprError(f"{text!r} = {value!r} is not a whole number")
    return int(value)


def check_condition(text: str, names: Mapping[str, Number] | None = None) -> bool:
    """Evaluate a condition such as ``"M % 128 == 0 and K >= 64"``."""
    tree = parse(text)
    try:
        return bool(_Evaluator(str(text), names or {}, conditions=True).eval(tree))
    except (RecursionError, MemoryError, OverflowError):
        raise ExprError(f"{str(text)[:80]!r} is too large to evaluate") from None
