"""The safe expression evaluator: arithmetic that works, and hostile input that fails fast."""

import time

import pytest

from ptxbench.tasks.expr import ExprError, check_condition, check_syntax, evaluate, evaluate_int, names_in

SIZES = {"M": 8192, "N": 7168, "K": 5120, "D": 128, "num_sms": 132}


@pytest.mark.parametrize(
    "text, value",
    [
        ("N // 128", 56),
        ("ceil_div(M, 96)", 86),
        ("2*M*N*K", 2 * 8192 * 7168 * 5120),
        ("min(M, N) + max(1, 2, 3)", 7171),
        ("log2(D)", 7),
        ("2 ** 10", 1024),
        ("-(K % 3)", -(5120 % 3)),
        ("num_sms * 2", 264),
        (42, 42),
    ],
)
def test_integer_expressions(text, value):
    assert evaluate(text, SIZES) == value
    assert isinstance(evaluate(text, SIZES), int)


def test_true_division_and_sqrt_give_floats():
    assert evaluate("1/sqrt(D)", SIZES) == pytest.approx(0.08838834764831845)
    assert evaluate("M / 128", SIZES) == 64.0
    assert evaluate_int("M / 128", SIZES) == 64


def test_evaluate_int_rejects_fractions():
    with pytest.raises(ExprError, match="not a whole number"):
        evaluate_int("M / 3", SIZES)


@pytest.mark.parametrize(
    "text, message",
    [
        ("__import__('os').system('true')", "only the functions"),
        ("M.bit_length()", "only the functions"),
        ("M.real", "Attribute is not allowed"),
        ("open('x')", "only the functions"),
        ("lambda: 1", "not allowed"),
        ("[1, 2]", "not allowed"),
        ("'abc'", "only numbers"),
        ("True + 1", "only numbers"),
        ("Q + 1", "unknown name 'Q'"),
        ("M +", "does not parse"),
        ("", "empty"),
        ("1 / 0", "division by zero"),
        ("M // 0", "division by zero"),
        ("ceil_div(M, 0)", "by zero"),
        ("sqrt(-1)", "negative"),
        ("log2(0)", "non-positive"),
        ("min()", "at least one"),
        ("ceil_div(M, N, K)", "ceil_div"),
        ("sqrt(x=1)", "keyword"),
        ("M < N", "not allowed"),
    ],
)
def test_rejected_with_a_clear_message(text, message):
    with pytest.raises(ExprError, match=message):
        evaluate(text, SIZES)


@pytest.mark.parametrize(
    "text",
    ["9 ** 9 ** 9 ** 9", "2 ** 100000000", "10 ** 19", "99999999999999999999999", "(M*N*K) ** 2",
     "1e300 * 1e300", "(1+" * 200 + "1" + ")" * 200, "-" * 5000 + "1", "1+" * 3000 + "1"],
)
def test_hostile_input_fails_fast(text):
    start = time.perf_counter()
    with pytest.raises(ExprError):
        evaluate(text, SIZES)
    assert time.perf_counter() - start < 0.5


def test_conditions():
    assert check_condition("M % 128 == 0 and K >= 64", SIZES)
    assert not check_condition("N % 4096 == 0", SIZES)
    assert check_condition("0 < D <= 256", SIZES)
    assert check_condition("not (D == 64) or M == 1", SIZES)
    with pytest.raises(ExprError, match="comparison cannot be used as a number"):
        check_condition("(M < N) + 1", SIZES)
    with pytest.raises(ExprError):
        check_condition("M in [1]", SIZES)


def test_names_in_ignores_function_names():
    assert names_in("ceil_div(M, BLOCK) * max(N, 1)") == {"M", "BLOCK", "N"}
    assert names_in(7) == set()


def test_check_syntax_without_names():
    check_syntax("ceil_div(M, 128) * num_sms + 2 ** 3 - 1 / sqrt(D)")
    for bad in ("M.real", "f(1)", "min(x=1)", "'s'", "[1]", "M < N", "a if b else c", "M +"):
        with pytest.raises(ExprError):
            check_syntax(bad)
