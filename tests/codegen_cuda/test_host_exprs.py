"""Host-side evaluation of launch extents, host loop bounds and conditions (codegen_cuda.exprs).

``eval_int`` runs on the host, without a GPU, so these tests need none: they compare it with
the reference evaluator of loopir.arith and check the cases where the host must agree with
the device (a narrowing cast wraps, a cast to bool tests for nonzero).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopir.arith import evaluate
from loopir.codegen_cuda.exprs import eval_int
from loopir.errors import ArithError, CodegenError
from loopir.ir import op
from loopir.ir.expr import (
    And,
    Cast,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Not,
    Or,
    Select,
    Var,
)
from tests.arith.exprgen import bool_case, int_case, points

n = Var("n")
m = Var("m")
ENV = {n: 7, m: -3}


@pytest.mark.parametrize(
    "expr, want",
    [
        (n + m * 2, 1),
        (n - m, 10),
        (op.floordiv(m, 2), -2),  # floor, not C's truncation
        (op.floormod(m, 2), 1),
        (op.min_(n, m), -3),
        (op.max_(n, m), 7),
        (n < m, 0),
        (n >= 7, 1),
        (n == 7, 1),
        (n != 7, 0),
        (n <= m, 0),
        (n > m, 1),
        (And(n > 0, m > 0), 0),
        (And(n > 0, m < 0), 1),
        (Or(n < 0, m < 0), 1),
        (Or(n < 0, m > 0), 0),
        (Not(n < 0), 1),
        (Not(n > 0), 0),
        (Select(n > m, n, m), 7),
        (Select(n < m, n, m), -3),
        (Cast("int64", n * 3), 21),
        (IntImm(1, "bool"), 1),
    ],
)  # fmt: skip
def test_eval_int_nodes(expr, want: int) -> None:
    assert eval_int(expr, ENV) == want


@pytest.mark.parametrize(
    "dtype, value, want",
    [
        ("int8", 300, 44),
        ("int8", 200, -56),
        ("uint8", -1, 255),
        ("uint8", 256, 0),
        ("int16", -32769, 32767),
        ("int32", 2**31, -(2**31)),
        ("uint32", -2, 2**32 - 2),
        ("int64", 2**40, 2**40),
        ("bool", 5, 1),
        ("bool", -1, 1),
        ("bool", 0, 0),
    ],
)
def test_cast_converts_as_the_device_does(dtype: str, value: int, want: int) -> None:
    # Regression: Cast used to return its operand unchanged, so a host extent
    # Cast("int8", 300) was 300 where the device computes 44, and Cast("bool", 5) was 5.
    x = Var("x", "int64")
    assert eval_int(Cast(dtype, x), {x: value}) == want
    assert eval_int(Cast(dtype, x), {x: value}) == int(evaluate(Cast(dtype, x), {x: value}))


def test_cast_to_float_is_refused() -> None:
    with pytest.raises(CodegenError, match="Cast.*float32 is not an integer type"):
        eval_int(Cast("float32", n), ENV)


def test_select_evaluates_only_the_chosen_side() -> None:
    # as C's ?: does: the other side may divide by zero
    zero = Var("zero")
    e = Select(zero == 0, IntImm(1), op.floordiv(n, zero))
    assert eval_int(e, {n: 4, zero: 0}) == 1
    with pytest.raises(CodegenError, match="division by zero"):
        eval_int(Select(zero != 0, IntImm(1), op.floordiv(n, zero)), {n: 4, zero: 0})


def test_and_or_short_circuit() -> None:
    zero = Var("zero")
    guarded = And(zero != 0, op.floordiv(n, zero) > 1)
    assert eval_int(guarded, {n: 4, zero: 0}) == 0
    assert eval_int(Or(zero == 0, op.floormod(n, zero) > 1), {n: 4, zero: 0}) == 1


@pytest.mark.parametrize(
    "expr, match",
    [
        (FloorDiv(n, IntImm(0)), "division by zero"),
        (FloorMod(n, IntImm(0)), "modulo by zero"),
        (Var("k") + 1, r"variable k has no value \(known: m, n\)"),
        (FloatImm(1.5), "cannot evaluate FloatImm"),
        (Div(FloatImm(1.0), FloatImm(2.0)), "cannot evaluate"),
    ],
)
def test_eval_int_errors(expr, match: str) -> None:
    with pytest.raises(CodegenError, match=match):
        eval_int(expr, ENV)


def test_missing_variable_with_empty_env() -> None:
    with pytest.raises(CodegenError, match=r"known: none"):
        eval_int(n, {})


_CASTS = st.sampled_from([None, "int8", "uint8", "int16", "int64", "bool"])


@given(case=st.one_of(int_case(), bool_case()), cast=_CASTS)
def test_eval_int_matches_the_reference_evaluator(case, cast) -> None:
    expr, ranges = case
    if cast is not None:
        # a scaled value so that narrowing casts wrap
        expr = Cast(cast, expr * 37 if expr.dtype != "bool" else expr)
    for env in points(ranges):
        try:
            want = evaluate(expr, env)
        except ArithError:  # division by zero: the host must refuse it too
            with pytest.raises(CodegenError):
                eval_int(expr, env)
            continue
        assert eval_int(expr, env) == int(want), (str(expr), env)
