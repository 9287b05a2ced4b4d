"""Interval arithmetic of ConstIntBound: brute force on small intervals, and the sentinels."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loopir.arith.bound import (
    NEG_INF,
    POS_INF,
    ConstIntBound,
    bound_add,
    bound_floordiv,
    bound_floormod,
    bound_max,
    bound_min,
    bound_mul,
    bound_scale,
    bound_sub,
    decide_compare,
)
from loopir.ir.expr import EQ, GE, GT, LE, LT, NE


@st.composite
def _interval(draw):
    lo = draw(st.integers(-12, 12))
    return ConstIntBound(lo, lo + draw(st.integers(0, 8)))


def _span(b: ConstIntBound) -> range:
    return range(b.min_value, b.max_value + 1)


@given(_interval(), _interval())
def test_binary_bounds_contain_every_result(x, y):
    ops = {
        bound_add: lambda a, b: a + b,
        bound_sub: lambda a, b: a - b,
        bound_mul: lambda a, b: a * b,
        bound_min: min,
        bound_max: max,
    }
    for fn, ref in ops.items():
        got = fn(x, y)
        vals = [ref(a, b) for a in _span(x) for b in _span(y)]
        # tight for these monotone operations
        assert got.min_value == min(vals) and got.max_value == max(vals), fn.__name__


@given(_interval(), _interval())
def test_division_bounds_contain_every_result(x, y):
    d = bound_floordiv(x, y)
    m = bound_floormod(x, y)
    for a in _span(x):
        for b in _span(y):
            if b == 0:
                continue
            assert d.contains(a // b), (x, y, a, b, d)
            assert m.contains(a % b), (x, y, a, b, m)
    if 0 not in _span(y):
        vals = [a // b for a in _span(x) for b in _span(y)]
        assert d.min_value == min(vals) and d.max_value == max(vals)  # corners are exact


@given(_interval(), st.integers(-5, 5))
def test_scale(x, c):
    got = bound_scale(x, c)
    vals = [a * c for a in _span(x)]
    assert got.min_value == min(vals) and got.max_value == max(vals)


@given(_interval())
def test_decide_compare_is_sound(d):
    for op, ref in ((LT, lambda v: v < 0), (LE, lambda v: v <= 0), (GT, lambda v: v > 0),
                    (GE, lambda v: v >= 0), (EQ, lambda v: v == 0), (NE, lambda v: v != 0)):
        r = decide_compare(op, d)
        if r is not None:
            assert all(ref(v) == r for v in _span(d))


def test_infinities_never_become_finite():
    inf = ConstIntBound(NEG_INF, POS_INF)
    half = ConstIntBound(0, POS_INF)
    assert bound_add(half, ConstIntBound(-5, -5)).max_value == POS_INF
    assert bound_sub(half, ConstIntBound(10**6, 10**6)).max_value == POS_INF
    assert bound_mul(half, ConstIntBound(-2, -1)) == ConstIntBound(NEG_INF, 0)
    assert bound_mul(half, ConstIntBound(0, 0)) == ConstIntBound(0, 0)
    assert bound_scale(inf, 0) == ConstIntBound(0, 0)
    assert bound_floordiv(half, ConstIntBound(2, 4)) == ConstIntBound(0, POS_INF)
    assert bound_floordiv(ConstIntBound(-3, 5), ConstIntBound(1, POS_INF)) == ConstIntBound(-3, 5)
    assert bound_floordiv(ConstIntBound(1, 1), ConstIntBound(-1, 1)) == inf
    assert bound_floormod(inf, ConstIntBound(8, 8)) == ConstIntBound(0, 7)
    assert bound_floormod(inf, ConstIntBound(-8, -8)) == ConstIntBound(-7, 0)
    assert bound_floormod(half, ConstIntBound(1, POS_INF)) == ConstIntBound(0, POS_INF)
    # a huge finite sum saturates onto the sentinel instead of overflowing past it
    big = ConstIntBound(POS_INF - 1, POS_INF - 1)
    assert bound_add(big, big).max_value == POS_INF
