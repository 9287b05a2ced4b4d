"""Analyzer API: bounds, proofs, intervals, linear detection, binding and errors."""

from __future__ import annotations

import pytest

from loopir.arith import (
    NEG_INF,
    POS_INF,
    Analyzer,
    ConstIntBound,
    can_prove,
    ceildiv,
    const_int_bound,
    detect_linear,
    evaluate,
    int_set,
    simplify,
)
from loopir.arith.canonical import ExprKeys
from loopir.errors import ArithError, LoopIRError
from loopir.ir import op
from loopir.ir.buffer import Buffer, Range
from loopir.ir.expr import Cast, FloorDiv, IntImm, Not, Or, PrimExpr, Select, Var

_keys = ExprKeys()


def check(got: PrimExpr, want: PrimExpr | int) -> None:
    if isinstance(want, int):
        want = IntImm(want, got.dtype)
    assert _keys.key(got) == _keys.key(want), f"got {got}, want {want}"


x, y, n = Var("x"), Var("y"), Var("n")
i0, i1, k0, k1 = Var("i0"), Var("i1"), Var("k0"), Var("k1")


# ---- const_int_bound --------------------------------------------------------------------------


def test_bound_of_affine_and_divisions():
    r = {x: Range(-5, 11), y: Range(0, 4)}  # x in [-5, 5], y in [0, 3]
    assert const_int_bound(x * 3 - y, r) == ConstIntBound(-18, 15)
    assert const_int_bound(x // 4, r) == ConstIntBound(-2, 1)
    assert const_int_bound(x % 4, r) == ConstIntBound(0, 3)
    assert const_int_bound(op.floordiv(x, -2), r) == ConstIntBound(-3, 2)
    assert const_int_bound(op.floormod(x, -3), r) == ConstIntBound(-2, 0)
    assert const_int_bound(op.min_(x, y), r) == ConstIntBound(-5, 3)
    assert const_int_bound(op.max_(x, y), r) == ConstIntBound(0, 5)
    assert const_int_bound(x * y, r) == ConstIntBound(-15, 15)
    assert const_int_bound(Select(x < 0, y, x), r) == ConstIntBound(-5, 5)
    # symbolic divisor of known sign
    assert const_int_bound(op.floordiv(x, y + 1), r) == ConstIntBound(-5, 5)
    assert const_int_bound(op.floormod(x, y + 1), r) == ConstIntBound(0, 3)


def test_bound_of_unbound_variables_uses_the_dtype():
    assert const_int_bound(x) == ConstIntBound(-(2**31), 2**31 - 1)
    u = Var("u", "uint8")
    assert const_int_bound(u) == ConstIntBound(0, 255)
    a = Var("a", "int64")
    b = const_int_bound(a)
    assert b.min_value == ConstIntBound.NEG_INF and b.max_value == ConstIntBound.POS_INF
    assert const_int_bound(a * 2 + 1).max_value == POS_INF
    assert const_int_bound(a // 2).min_value == NEG_INF


def test_bound_of_division_by_range_containing_zero_is_unbounded():
    b = const_int_bound(op.floordiv(IntImm(7), x), {x: Range(-1, 3)})
    assert b == ConstIntBound(-(2**31), 2**31 - 1)  # clipped to the dtype, no more


def test_bound_of_casts_and_bools():
    r = {x: Range(0, 300)}
    assert const_int_bound(Cast("int8", x), r) == ConstIntBound(-128, 127)
    assert const_int_bound(Cast("int16", x), r) == ConstIntBound(0, 299)
    assert const_int_bound(x < 500, r) == ConstIntBound(1, 1)
    assert const_int_bound(x < 100, r) == ConstIntBound(0, 1)


def test_bound_with_symbolic_range():
    r = {n: Range(1, 16), x: Range(0, n)}  # n in [1, 16], x in [0, n)
    assert const_int_bound(x, r) == ConstIntBound(0, 15)


def test_const_int_bound_object():
    b = ConstIntBound(-3, 4)
    assert b.contains(0) and not b.contains(5)
    assert not b.is_const and ConstIntBound(2, 2).is_const
    with pytest.raises(ArithError, match="exceeds"):
        ConstIntBound(3, 2)
    assert ConstIntBound(NEG_INF, POS_INF).contains(10**30)


# ---- can_prove -------------------------------------------------------------------------------


def test_split_predicate_provability():
    e = i0 * 32 + i1 < 100
    assert not can_prove(e, {i0: Range(0, 4), i1: Range(0, 32)})
    assert can_prove(e, {i0: Range(0, 3), i1: Range(0, 32)})
    assert can_prove(e, {i0: (0, 3), i1: (0, 32)})  # (lo, hi_exclusive) pairs


def test_can_prove_logic():
    r = {x: Range(0, 8), y: Range(0, 8)}
    ana = Analyzer(r)
    assert ana.can_prove((x < 8) & (y >= 0))
    assert not ana.can_prove((x < 8) & (y > 0))
    assert ana.can_prove(Or(x < 3, x >= 3))  # neither side alone: complementary conditions
    assert ana.can_prove(Or(x < 9, y < 0))
    assert ana.can_prove(Not((x > 10) | (y > 10)))
    assert ana.can_prove(x * 4 + y // 2 < 32)
    assert not ana.can_prove(x < y)
    assert ana.can_prove(x % 4 < 4)
    assert ana.can_prove((x // 4) * 4 <= x)


def test_can_prove_with_symbolic_extent():
    r = {n: Range(1, 1000), x: Range(0, n)}
    ana = Analyzer(r)
    assert ana.can_prove(x < n)
    assert ana.can_prove(x <= n - 1)
    assert ana.can_prove(x + 1 <= n)
    assert not ana.can_prove(x < n - 1)
    assert ana.can_prove(x >= 0)
    # a tiled symbolic loop: xo*4 + xi < n is not provable without a guard
    xo, xi = Var("xo"), Var("xi")
    ana.bind(xo, Range(0, (n + 3) // 4))
    ana.bind(xi, Range(0, 4))
    assert not ana.can_prove(xo * 4 + xi < n)


def test_can_prove_rejects_non_bool():
    with pytest.raises(ArithError, match="can_prove"):
        can_prove(x + 1)


def test_can_prove_equal():
    ana = Analyzer({x: Range(0, 32)})
    assert ana.can_prove_equal((x // 8) * 8 + x % 8, x)
    assert ana.can_prove_equal(x // 32, 0)
    assert not ana.can_prove_equal(x // 8, x // 4)
    a = Var("a", "float32")
    assert ana.can_prove_equal(a + 1.0, a + 1.0)
    assert not ana.can_prove_equal(a + 1.0, a + 2.0)


# ---- int_set ---------------------------------------------------------------------------------


def test_int_set_of_split_index():
    s = int_set(k0 * 4 + k1, {k1: Range(0, 4)})
    check(s.min, k0 * 4)
    check(s.max, k0 * 4 + 3)
    check(s.extent, 4)
    assert s.exact


def test_int_set_negative_coefficient_and_symbolic_range():
    s = int_set(n - x * 2, {x: Range(0, n)})
    check(s.min, 2 - n)
    check(s.max, n)
    assert s.exact


def test_int_set_floordiv_floormod():
    ana = Analyzer({k0: Range(0, 8)})
    s = ana.int_set((k0 * 128 + x) // 32, {x: Range(0, 128)})
    check(s.min, k0 * 4)
    check(s.max, k0 * 4 + 3)
    s2 = ana.int_set((k0 * 128 + x) % 256, {x: Range(0, 128)})
    check(s2.min, k0 % 2 * 128)
    check(s2.max, k0 % 2 * 128 + 127)
    s3 = ana.int_set((k0 * 128 + x) % 32, {x: Range(0, 128)})
    check(s3.min, 0)
    check(s3.max, 31)
    assert not s3.exact


def test_int_set_fully_relaxed_gives_constants():
    s = int_set(i0 * 32 + i1, {i0: Range(0, 4), i1: Range(0, 32)})
    check(s.min, 0)
    check(s.max, 127)
    assert s.exact


def test_int_set_nested_relaxed_ranges():
    # j in [k1, k1 + 2) with k1 in [0, 4) relaxed too
    j = Var("j")
    s = int_set(j, {k1: Range(0, 4), j: Range(k1, 2)})
    check(s.min, 0)
    check(s.max, 4)
    assert not s.exact


def test_int_set_unanalyzable_falls_back_to_bounds():
    buf = Buffer("B", (8,), "int32")
    s = int_set(buf[x] + x, {x: Range(0, 8)})
    check(s.min, -(2**31))
    check(s.max, 2**31 - 1 + 7)  # sound, even if beyond the dtype
    s2 = int_set(x * x, {x: Range(-3, 5)})
    # interval arithmetic: x*x over [-3, 1] is bounded by the corner products
    check(s2.min, -3)
    check(s2.max, 9)


def test_int_set_without_relax_is_the_point():
    s = int_set(x + y, {})
    check(s.min, x + y)
    assert s.exact


def test_int_set_errors():
    with pytest.raises(ArithError, match="int_set"):
        int_set(Var("a", "float32"), {})
    with pytest.raises(ArithError, match="int_set"):
        int_set(x, {x: "bad"})


# ---- detect_linear, ceildiv, bind --------------------------------------------------------------


def test_detect_linear():
    res = detect_linear(i0 * 32 + i1 * n + 5, [i0, i1])
    assert res is not None
    check(res[0], 32)
    check(res[1], n)
    check(res[2], 5)
    res2 = detect_linear((x + 1) * n * 2 + y, [x])
    assert res2 is not None
    check(res2[0], n * 2)
    check(res2[1], n * 2 + y)
    assert detect_linear(x * x, [x]) is None
    assert detect_linear(x // 4, [x]) is None
    res3 = detect_linear(y // 4, [x])
    assert res3 is not None
    check(res3[0], 0)


def test_ceildiv():
    assert ceildiv(10, 4) == 3 and ceildiv(8, 4) == 2 and ceildiv(-7, 2) == -3
    e = ceildiv(n, 4)
    assert evaluate(e, {n: 9}) == 3
    with pytest.raises(ArithError, match="division by zero"):
        ceildiv(3, 0)


def test_bind_replaces_and_scope_restores():
    ana = Analyzer()
    ana.bind(x, Range(0, 4))
    assert ana.can_prove(x < 4)
    ana.bind(x, (0, 8))
    assert not ana.can_prove(x < 4)
    with ana.scope({x: Range(0, 2)}):
        assert ana.can_prove(x < 2)
    assert not ana.can_prove(x < 2)
    ana.unbind(x)
    assert not ana.can_prove(x >= 0)


def test_bind_errors_are_clear():
    ana = Analyzer()
    with pytest.raises(ArithError, match="Analyzer.bind.*Var"):
        ana.bind(IntImm(3), Range(0, 4))  # type: ignore[arg-type]
    with pytest.raises(ArithError, match="float32"):
        ana.bind(Var("a", "float32"), Range(0, 4))
    with pytest.raises(ArithError, match="Range or a"):
        ana.bind(x, 5)  # type: ignore[arg-type]
    assert issubclass(ArithError, LoopIRError)


def test_empty_range_is_tolerated():
    ana = Analyzer({x: Range(0, 0)})
    b = ana.const_int_bound(x)
    assert b.min_value == 0


def test_memoized_results_are_consistent():
    ana = Analyzer({x: Range(0, 32)})
    e = (x * 4 + 3) // 4
    assert ana.simplify(e) is ana.simplify(e)
    check(ana.simplify(e), x)


def test_module_functions_accept_plain_ints():
    check(simplify(5), 5)
    assert const_int_bound(7) == ConstIntBound(7, 7)
    assert can_prove(True)


def test_evaluate_semantics():
    assert evaluate(op.floordiv(IntImm(-7), IntImm(2)), {}) == -4
    assert evaluate(op.floormod(IntImm(-7), IntImm(2)), {}) == 1
    assert evaluate(Cast("int8", IntImm(300)), {}) == 44
    assert evaluate(Cast("uint8", IntImm(-1)), {}) == 255
    assert evaluate(x < 3, {x: 2}) is True
    with pytest.raises(ArithError, match="no value"):
        evaluate(x + 1, {})
    with pytest.raises(ArithError, match="division by zero"):
        evaluate(x // 0, {x: 1})
    with pytest.raises(ArithError, match="cannot evaluate"):
        evaluate(Buffer("B", (2,), "int32")[0], {})
    # only the taken branch is evaluated
    assert evaluate(Select(x > 0, 10 // x, IntImm(0)), {x: 0}) == 0
    # and/or short-circuit as in C
    from loopir.ir.expr import And

    assert evaluate(And(x != 0, 10 // x > 1), {x: 0}) is False
    assert evaluate(Or(x == 0, 10 // x > 1), {x: 0}) is True
    assert evaluate(And(x != 0, 10 // x > 1), {x: 2}) is True


def test_division_by_zero_kept_in_analyzer_output():
    s = simplify(x // 0)
    assert isinstance(s, FloorDiv)


def test_int64_variable_with_int32_range():
    a, b = Var("a", "int64"), Var("b", "int64")
    ana = Analyzer({a: Range(0, 8)})  # int32 range bound to an int64 variable
    s = ana.int_set(a * 4 + b, {a: Range(0, 8)})
    check(s.min, b)
    check(s.max, b + IntImm(28, "int64"))
    assert ana.can_prove(a < 8)


def test_long_sums_are_handled():
    vs = [Var(f"v{i}") for i in range(40)]
    e: PrimExpr = vs[0]
    for i in range(500):
        e = e + vs[i % 40] * (i % 5 + 1)
    ana = Analyzer({v: Range(0, 4) for v in vs})
    s = ana.simplify(e)
    env = {v: (i * 7) % 4 for i, v in enumerate(vs)}
    assert evaluate(s, env) == evaluate(e, env)
    b = ana.const_int_bound(e)
    assert b.min_value == 0 and b.contains(evaluate(e, env))


def test_binding_after_queries_is_respected():
    ana = Analyzer()
    check(ana.simplify(x // 4), x // 4)
    ana.bind(x, Range(0, 4))  # x was seen: memoized results are dropped
    check(ana.simplify(x // 4), 0)
    # a variable bound after it appeared only inside another variable's range
    w = Var("w")
    ana.bind(w, Range(0, n))
    assert not ana.can_prove(w < 100)
    ana.bind(n, Range(0, 50))
    assert ana.can_prove(w < 100)
    # binding a fresh variable keeps earlier results and sees the new range
    assert ana.can_prove(x < 4)
    ana.bind(y, Range(2, 3))
    assert ana.can_prove(y + x < 9)
    check(ana.simplify(x + y * 0), x)


def test_non_expression_inputs_are_refused_clearly():
    ana = Analyzer()
    with pytest.raises(ArithError, match="simplify: expected an expression.*Range"):
        ana.simplify(Range(0, 4))  # type: ignore[arg-type]
    with pytest.raises(ArithError, match="const_int_bound"):
        ana.const_int_bound("x")  # type: ignore[arg-type]
    with pytest.raises(ArithError, match="detect_linear"):
        ana.detect_linear(x, [IntImm(1)])  # type: ignore[list-item]
    with pytest.raises(ArithError, match="detect_linear"):
        detect_linear(Var("a", "float32"), [x])
