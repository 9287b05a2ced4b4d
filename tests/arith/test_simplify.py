"""Targeted rules of the simplifier (exact output forms)."""

from __future__ import annotations

import pytest

from loopir.arith import simplify
from loopir.arith.canonical import ExprKeys
from loopir.ir import op
from loopir.ir.buffer import Buffer, Range
from loopir.ir.expr import (
    GE,
    LT,
    And,
    Cast,
    FloatImm,
    FloorDiv,
    IntImm,
    Not,
    Or,
    PrimExpr,
    Select,
    Var,
)

_keys = ExprKeys()


def same(a: PrimExpr, b: PrimExpr | int | bool) -> bool:
    if isinstance(b, bool):
        b = IntImm(int(b), "bool")
    elif isinstance(b, int):
        b = IntImm(b, a.dtype)
    return _keys.key(a) == _keys.key(b)


def check(got: PrimExpr, want: PrimExpr | int | bool) -> None:
    assert same(got, want), f"got {got}, want {want}"


x, y, z, n = Var("x"), Var("y"), Var("z"), Var("n")
i0, i1, f = Var("i0"), Var("i1"), Var("f")


def test_collects_like_terms_and_folds_constants():
    check(simplify(x + y - x + 3 - 1), y + 2)
    check(simplify(x * 2 + x * 3 - y * 0), x * 5)
    check(simplify((x + 1) * 4 - 4), x * 4)
    check(simplify(x - x), 0)
    check(simplify(IntImm(3) * 4 + 2), 14)


def test_term_order_is_deterministic_and_canonical():
    # positive terms by decreasing coefficient, then negative ones, then the constant
    check(simplify(i1 + i0 * 32), i0 * 32 + i1)
    check(simplify(3 - y + x * 4), x * 4 - y + 3)
    check(simplify(0 - y), 0 - y)
    check(simplify(5 - y), 5 - y)
    # equal coefficients: by name
    check(simplify(y + x), x + y)
    assert str(simplify(y + x)) == str(simplify(x + y))


def test_split_patterns_under_ranges():
    rng = {x: Range(0, 10), y: Range(0, 32)}
    check(simplify((x * 32 + y) // 32, rng), x)
    check(simplify((x * 32 + y) % 32, rng), y)
    check(simplify((x * 64 + y) // 32, rng), x * 2)
    check(simplify((x * 64 + y + 32) // 32, rng), x * 2 + 1)
    # without the range of y nothing can be dropped
    check(simplify((x * 32 + y) // 32), x + y // 32)
    check(simplify((x * 32 + y) % 32), y % 32)


def test_floordiv_with_divisible_coefficients():
    # (a*c1 + b) // c2 with c1 % c2 == 0
    check(simplify((x * 8 + y) // 4, {y: Range(0, 4)}), x * 2)
    check(simplify((x * 8 + y) // 4), x * 2 + y // 4)
    check(simplify((x * 16 + y) // 32, {y: Range(0, 16)}), x // 2)
    check(simplify((x * 16 + y) % 32, {y: Range(0, 16)}), x % 2 * 16 + y)


def test_trivial_division_rules():
    check(simplify(x // 1), x)
    check(simplify(x % 1), 0)
    check(simplify(op.floordiv(x, -1)), 0 - x)
    check(simplify(x // 4 // 8), x // 32)
    check(simplify((x % 32) // 8), x % 32 // 8)
    check(simplify((x % 32) % 8), x % 8)
    check(simplify((x % 8) % 32), x % 8)
    check(simplify(x % 8 % 6 % 2), x % 2)  # the inner remainders cascade
    check(simplify(x % 8 // 8), 0)
    check(simplify(x * 4 % 2), 0)
    check(simplify((x * 4 + 2) // 2), x * 2 + 1)


def test_small_operand_division():
    r = {x: Range(0, 7)}
    check(simplify(x % 7, r), x)
    check(simplify(x // 7, r), 0)
    check(simplify(x % 8, r), x)
    check(simplify((x + 7) // 7, r), 1)
    # negative operand: floor semantics
    rn = {x: Range(-7, 7)}
    check(simplify(x // 7, rn), -1)
    check(simplify(x % 7, rn), x + 7)


def test_fuse_split_round_trips():
    check(simplify((f // 32) * 32 + f % 32), f)
    check(simplify(f % 32 + (f // 32) * 32), f)
    check(simplify((f // 256) * 256 + ((f // 8) % 32) * 8 + f % 8), f)
    # with an outer scale and offset
    check(simplify(((f // 16) * 16 + f % 16) * 4 + 1), f * 4 + 1)
    # the inverse direction
    check(simplify(f - (f // 8) * 8), f % 8)
    # split after fuse: f = fo * 4 + fi, then f // 32 with fi < 4
    fo, fi = Var("fo"), Var("fi")
    rng = {fo: Range(0, 100), fi: Range(0, 4)}
    check(simplify((fo * 4 + fi) // 32, rng), fo // 8)
    check(simplify((fo * 4 + fi) % 32, rng), fo % 8 * 4 + fi)


def test_negative_divisors_use_floor_semantics():
    check(simplify(op.floordiv(x * 4, -4)), 0 - x)
    check(simplify(op.floormod(x * 4, -4)), 0)
    check(simplify(op.floordiv(IntImm(-7), IntImm(2))), -4)
    check(simplify(op.floormod(IntImm(-7), IntImm(2))), 1)
    check(simplify(op.floormod(IntImm(7), IntImm(-2))), -1)


def test_division_by_zero_is_never_folded():
    e = op.floordiv(x, IntImm(0))
    s = simplify(e)
    assert type(s) is FloorDiv and same(s.b, 0)


def test_symbolic_divisor():
    check(simplify(op.floordiv(x * n, n)), x)
    check(simplify(op.floordiv(x, n), {n: Range(1, 100), x: Range(0, n)}), 0)
    check(simplify(op.floormod(x, n), {n: Range(1, 100), x: Range(0, n)}), x)


def test_predicates():
    four = {i0: Range(0, 4), i1: Range(0, 32)}
    three = {i0: Range(0, 3), i1: Range(0, 32)}
    check(simplify(i0 * 32 + i1 < 100, four), i0 * 32 + i1 < 100)
    check(simplify(i1 + i0 * 32 < 100, four), i0 * 32 + i1 < 100)
    check(simplify(i0 * 32 + i1 < 100, three), True)
    check(simplify(i0 * 32 + i1 >= 128, four), False)


def test_comparison_canonical_forms():
    check(simplify(x * 4 < 8), x < 2)
    check(simplify(x * 4 < 9), x < 3)
    check(simplify(x * 4 <= 8), x < 3)
    check(simplify(x > 5), x >= 6)
    check(simplify(5 < x), x >= 6)
    check(simplify(x >= 0), x >= 0)
    check(simplify(x + 1 < y), x < y - 1)
    check(simplify(x < y), x < y)
    check(simplify(x * 2 == 3), False)
    check(simplify(x * 2 != 3), True)
    check(simplify(x * 2 == y * 2 + 4), x == y + 2)
    check(simplify(3 == x), x == 3)
    assert isinstance(simplify(x - 3 < 0), LT)
    assert isinstance(simplify(0 - x < -3), GE)


def test_boolean_logic():
    t = IntImm(1, "bool")
    c = x < y
    check(simplify(And(t, c)), x < y)
    check(simplify(And(c, IntImm(0, "bool"))), False)
    check(simplify(Or(c, t)), True)
    check(simplify(Or(IntImm(0, "bool"), c)), x < y)
    check(simplify(And(c, x < y)), x < y)
    check(simplify(Not(Not(c))), x < y)
    check(simplify(Not(x < y)), y <= x)
    check(simplify(x <= y), x <= y)
    check(simplify(Not(x == y)), x != y)
    rng = {x: Range(0, 4)}
    check(simplify(And(x < 4, y < 2), rng), y < 2)


def test_float_comparisons_are_not_inverted():
    a, b = Var("a", "float32"), Var("b", "float32")
    s = simplify(Not(a < b))  # NaN: not(a < b) is not (a >= b)
    assert isinstance(s, Not)


def test_min_max():
    rng = {x: Range(0, 10)}
    check(simplify(op.min_(x, 20), rng), x)
    check(simplify(op.max_(x, 20), rng), 20)
    check(simplify(op.min_(x, x + 1)), x)
    check(simplify(op.max_(x - 1, x)), x)
    check(simplify(op.min_(op.min_(y, 5), 3)), op.min_(y, 3))
    check(simplify(op.max_(x, y)), op.max_(x, y))


def test_select():
    rng = {x: Range(0, 10)}
    check(simplify(Select(x < 10, x + 1, x), rng), x + 1)
    check(simplify(Select(x >= 10, x + 1, x), rng), x)
    check(simplify(Select(y < 3, x, x)), x)
    s = simplify(Select(y < 3, x + 0, y * 1))
    check(s, Select(y < 3, x, y))


def test_casts():
    check(simplify(Cast("int64", IntImm(5))), IntImm(5, "int64"))
    check(simplify(Cast("float32", IntImm(3))), FloatImm(3.0, "float32"))
    check(simplify(Cast("int32", FloatImm(-2.5, "float32"))), -2)
    # 2**24 + 1 is not a float32: not folded
    assert isinstance(simplify(Cast("float32", IntImm(2**24 + 1))), Cast)
    # out of range for int8: not folded
    assert isinstance(simplify(Cast("int8", IntImm(300))), Cast)
    check(simplify(Cast("bool", x), {x: Range(1, 5)}), True)


def test_float_arithmetic_is_left_alone():
    a = Var("a", "float32")
    e = a * 1.0 + 0.0
    assert simplify(e) is e
    buf = Buffer("A", (16,), "float32")
    load = buf[x * 4 // 4] * 1.0
    s = simplify(load)
    check(s.a.indices[0], x)
    assert same(s.b, FloatImm(1.0, "float32"))


def test_unchanged_expression_is_returned_as_is():
    e = i0 * 32 + i1
    assert simplify(e) is e
    c = e < 100
    assert simplify(c, {i0: Range(0, 4), i1: Range(0, 32)}) is c


def test_extent_one_variable_folds_to_its_min():
    check(simplify(x * 4 + y, {x: Range(3, 1)}), y + 12)


def test_loads_and_calls_are_atoms():
    buf = Buffer("B", (8,), "int32")
    e = buf[x] + buf[x] - buf[x] * 2
    check(simplify(e), 0)
    e2 = buf[x + 1 - 1] * 2 + 1
    s = simplify(e2)
    check(s, buf[x] * 2 + 1)


def test_int64_expressions():
    a = Var("a", "int64")
    check(simplify((a * 32 + 5) // 32, {a: Range(IntImm(0, "int64"), IntImm(10, "int64"))}), a)


@pytest.mark.parametrize("shape", [(4, 32), (7, 13), (1, 8), (3, 1)])
def test_split_then_fuse_is_identity(shape):
    a, b = shape
    o, i = Var("o"), Var("i")
    rng = {o: Range(0, a), i: Range(0, b)}
    fused = Var("fused")
    # fuse(o, i): o = fused // b, i = fused % b; the original index is o*b + i
    from loopir.ir.functor import substitute

    idx = substitute(o * b + i, {o: fused // b, i: fused % b})
    check(simplify(idx, {fused: Range(0, a * b), **rng}), fused)


def test_and_or_of_comparisons_on_one_linear_form():
    check(simplify(And(x < 5, x < 10)), x < 5)
    check(simplify(And(x < 10, x < 5)), x < 5)
    check(simplify(Or(x < 5, x < 10)), x < 10)
    check(simplify(And(x < 5, x >= 5)), False)
    check(simplify(Or(x < 5, x >= 5)), True)
    check(simplify(And(And(x < 5, y < 3), x < 10)), And(x < 5, y < 3))
    check(simplify(And(And(x < 5, y < 3), x > 7)), False)
    check(simplify(And(x * 2 + y < 10, x * 2 + y <= 3)), x * 2 + y < 4)
    # nothing known: kept
    check(simplify(And(x < 5, x >= 4)), And(x < 5, x >= 4))
    check(simplify(Or(x < 5, x >= 7)), Or(x < 5, x >= 7))
