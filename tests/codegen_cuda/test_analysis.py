"""Soundness of the emitter's integer analyses, checked by brute-force evaluation."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from loopir.codegen_cuda import analysis as an
from loopir.codegen_cuda.exprs import eval_int
from loopir.codegen_cuda.indexing import lane_invariant, linear_coeff
from loopir.ir import op
from loopir.ir.expr import IntImm, PrimExpr, Var
from loopir.ir.functor import collect_vars

X, Y = Var("x"), Var("y")


@st.composite
def int_exprs(draw, depth: int = 3) -> PrimExpr:
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from([X, Y])) if draw(st.booleans()) else IntImm(
            draw(st.integers(-20, 20)))
    a = draw(int_exprs(depth=depth - 1))
    b = draw(int_exprs(depth=depth - 1))
    kind = draw(st.sampled_from(["add", "sub", "mul", "div", "mod", "min", "max"]))
    if kind in ("div", "mod"):
        b = IntImm(draw(st.integers(1, 9)))
        return op.floordiv(a, b) if kind == "div" else op.floormod(a, b)
    return {"add": a + b, "sub": a - b, "mul": a * b, "min": op.min_(a, b),
            "max": op.max_(a, b)}[kind]


RANGES = st.tuples(st.integers(-8, 8), st.integers(0, 8))


@given(int_exprs(), RANGES, RANGES)
def test_const_int_bound_is_sound(e, rx, ry):
    env = {X: (rx[0], rx[0] + rx[1]), Y: (ry[0], ry[0] + ry[1])}
    lo, hi = an.const_int_bound(e, env)
    for x, y in itertools.product(range(env[X][0], env[X][1] + 1), range(env[Y][0], env[Y][1] + 1)):
        v = eval_int(e, {X: x, Y: y})
        assert lo is None or v >= lo, (str(e), x, y, v, lo)
        assert hi is None or v <= hi, (str(e), x, y, v, hi)


@given(int_exprs())
def test_modular_set_is_sound(e):
    coeff, base = an.modular_set(e)
    for x, y in itertools.product(range(-6, 7), range(-6, 7)):
        v = eval_int(e, {X: x, Y: y})
        if coeff == 0:
            assert v == base, (str(e), x, y)
        else:
            assert (v - base) % coeff == 0, (str(e), x, y, coeff, base)


@given(int_exprs(), st.integers(-3, 3))
def test_linear_coeff_matches_finite_difference(e, c):
    e2 = e + X * c
    k = linear_coeff(e2, X)
    if k is None:
        return
    for x, y in itertools.product(range(-5, 5), range(-3, 4)):
        assert eval_int(e2, {X: x + 1, Y: y}) - eval_int(e2, {X: x, Y: y}) == k


@given(st.integers(0, 40), st.integers(1, 12), st.sampled_from([2, 4, 8]))
def test_lane_invariant_guard_is_equivalent_for_every_lane(t, q, lanes):
    v = Var("v")
    cond = X * lanes + v < IntImm(q * lanes)
    inv = lane_invariant(cond, v, lanes, {})
    assert inv is not None and v not in collect_vars(inv)
    for x in range(-3, t):
        expect = [x * lanes + w < q * lanes for w in range(lanes)]
        got = bool(eval_int(inv, {X: x}))
        assert all(e == got for e in expect)


def test_lane_invariant_refuses_unaligned_bounds():
    v = Var("v")
    assert lane_invariant(X * 4 + v < IntImm(770), v, 4, {}) is None
    assert lane_invariant(X * 4 + v < IntImm(770), v, 2, {}) is not None
    assert lane_invariant(X * 3 + v < IntImm(12), v, 4, {}) is None


def test_positive_and_nonnegative_proofs():
    env = {X: (0, 31), Y: (-4, 4)}
    assert an.is_nonnegative(X * 3 + 1, env)
    assert not an.is_nonnegative(X - 1, env)
    assert an.is_positive(op.floormod(Y, 5) + 1, env)
    assert not an.is_positive(Y, env)
