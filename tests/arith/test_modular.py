"""The modular-set analysis is sound, checked by brute force (narrowing casts included)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopir.arith import Analyzer, ModularSet, evaluate, modular_set
from loopir.codegen_cuda import analysis as an
from loopir.ir.buffer import Range
from loopir.ir.expr import Cast, IntImm, Var
from tests.arith.exprgen import int_case, points

x = Var("x")


@settings(max_examples=150)
@given(case=int_case(), cast=st.sampled_from([None, "int8", "uint8", "int16", "int64"]))
def test_modular_set_is_sound(case, cast) -> None:
    expr, ranges = case
    if cast is not None:
        expr = Cast(cast, expr * 37)
    m = modular_set(expr)
    for p in points(ranges):
        try:
            v = evaluate(expr, p)
        except Exception:  # division by zero at this point: no value to check
            continue
        if m.coeff == 0:
            assert v == m.base, (str(expr), p)
        else:
            assert (v - m.base) % m.coeff == 0, (str(expr), p, m)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_narrowing_cast_keeps_only_moduli_of_its_width(dtype: str) -> None:
    # Regression: codegen_cuda/analysis.py passed the operand's modular set through every
    # int->int cast, so Cast("int8", x * 3) was "a multiple of 3" although x = 100 gives 44.
    e = Cast(dtype, x * 3)
    assert evaluate(e, {x: 100}) % 3 != 0
    assert not an.is_multiple_of(e, 3)
    assert modular_set(Cast(dtype, x * 4)).is_multiple_of(4)  # 4 divides 256: kept
    assert modular_set(Cast(dtype, IntImm(300))) == ModularSet(0, evaluate(Cast(dtype, IntImm(300)), {}))


def test_widening_cast_and_fixed_variables() -> None:
    assert modular_set(Cast("int64", x * 6 + 4)) == ModularSet(6, 4)
    assert Analyzer({x: Range(5, 1)}).modular_set(x * 4 + 1) == ModularSet(0, 21)
    assert Analyzer({x: Range(0, 8)}).modular_set(x * 4 + 1) == ModularSet(4, 1)
