"""The vectorized evaluator agrees with the scalar one: one rule set (C semantics) for both."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopir.arith import evaluate
from loopir.arith import vectorized as vec
from loopir.errors import ArithError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import And, Cast, FloatImm, IntImm, Or, Select, Var
from tests.arith.exprgen import bool_case, bool_expr, const_ranges, int_case, int_expr, points

x = Var("x")

_CASTS = st.sampled_from([None, "int8", "uint8", "int16", "uint32", "int64", "bool"])


def _domain(ranges):
    box = [(v, r.min.value, r.extent.value) for v, r in ranges.items()]
    return box, vec.domain(box)


@settings(max_examples=150)
@given(case=st.one_of(int_case(), bool_case()), cast=_CASTS)
def test_vectorized_matches_the_scalar_evaluator(case, cast) -> None:
    expr, ranges = case
    if cast is not None:
        # a scaled value so that narrowing casts wrap
        expr = Cast(cast, expr * 37 if expr.dtype != "bool" else expr)
    box, env = _domain(ranges)
    size = int(np.prod([ext for _, _, ext in box]))
    pts = list(points(ranges))
    try:
        got = vec.evaluate(expr, env, size)
    except vec.NotEnumerable as exc:
        # refused only where some point really divides by zero
        assert "division by zero" in str(exc), str(exc)
        with pytest.raises(ArithError, match="division by zero"):
            for p in pts:
                evaluate(expr, p)
        return
    assert got.shape == (size,)
    assert got.dtype == (np.bool_ if expr.dtype == "bool" else np.int64)
    for k, p in enumerate(pts):  # domain() and points() both enumerate in row-major order
        assert got[k] == evaluate(expr, p), (str(expr), p)


@pytest.mark.parametrize(
    "dtype, value, want",
    [("int8", 300, 44), ("int8", 200, -56), ("uint8", -1, 255), ("int16", -32769, 32767),
     ("int32", 2**31, -(2**31)), ("uint32", -2, 2**32 - 2), ("bool", 5, True), ("bool", 0, False)],
)  # fmt: skip
def test_casts_wrap_as_in_c(dtype: str, value: int, want: int) -> None:
    # Regression: passes/_enum refused every wrapping cast and the verifier's evaluator ignored
    # the target width (Cast("int8", 300) was 300): three evaluators, three Cast rules.
    v = Var("v", "int64")
    got = vec.evaluate(Cast(dtype, v), {v: np.array([value])}, 1)
    assert got[0] == want == evaluate(Cast(dtype, v), {v: value})


def test_select_and_logic_are_lazy_per_point() -> None:
    env = {x: np.arange(-2, 3)}
    sel = Select(x != 0, op.floordiv(IntImm(10), x), IntImm(0))
    assert vec.evaluate(sel, env, 5).tolist() == [-5, -10, 0, 10, 5]
    guarded = And(x != 0, op.floordiv(IntImm(10), x) > 1)
    assert vec.evaluate(guarded, env, 5).tolist() == [False, False, False, True, True]
    either = Or(x == 0, op.floormod(IntImm(10), x) == 0)
    assert vec.evaluate(either, env, 5).tolist() == [True, True, True, True, True]
    with pytest.raises(vec.NotEnumerable, match="division by zero"):
        vec.evaluate(op.floordiv(IntImm(10), x), env, 5)


def test_products_never_overflow_silently() -> None:
    # Regression: passes/_enum checked magnitudes only after a product, so 2**35 * 2**35
    # wrapped to 0 in int64, passed the check and was returned as the value.
    env = {x: np.array([2**35], dtype=np.int64)}
    big = Cast("int64", x) * IntImm(2**35, "int64")
    with pytest.raises(vec.NotEnumerable, match="int64"):
        vec.evaluate(big, env, 1)


def test_refusals_name_the_node() -> None:
    env = {x: np.arange(3)}
    with pytest.raises(vec.NotEnumerable, match="variable 'y' has no values"):
        vec.evaluate(x + Var("y"), env, 3)
    with pytest.raises(vec.NotEnumerable, match="float32"):
        vec.evaluate(FloatImm(1.0) < FloatImm(2.0), env, 3)
    with pytest.raises(vec.NotEnumerable, match="BufferLoad"):
        vec.evaluate(Buffer("B", (4,), "int32")[x], env, 3)
    with pytest.raises(vec.NotEnumerable, match="MAX_POINTS"):
        vec.domain([(x, 0, vec.MAX_POINTS + 1)])
    assert issubclass(vec.NotEnumerable, ArithError)


@st.composite
def _separable_case(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    """A sum of 1-4 random terms over subsets of 5 variables, and 0-2 conditions over subsets."""
    ranges = const_ranges(draw, 5)
    vs = list(ranges)

    def subset() -> list[Var]:
        picked = draw(st.lists(st.sampled_from(vs), min_size=0, max_size=3, unique=True))
        return picked or [draw(st.sampled_from(vs))]

    e = int_expr(draw, subset(), 3)
    for _ in range(draw(st.integers(0, 3))):
        t = int_expr(draw, subset(), 3)
        e = e + t if draw(st.booleans()) else e - t
    conds = [bool_expr(draw, subset(), 2) for _ in range(draw(st.integers(0, 2)))]
    return e, conds, ranges


@settings(max_examples=200)
@given(case=_separable_case())
def test_hull_is_the_exact_range_over_the_box(case) -> None:
    # hull() enumerates independent groups of variables separately; it must agree with the
    # whole box enumerated at once (and refuse exactly where that refuses a division by zero).
    e, conds, ranges = case
    box, env = _domain(ranges)
    size = int(np.prod([ext for _, _, ext in box]))
    try:
        vals = vec.evaluate(e, env, size)
        mask = np.ones(size, dtype=bool)
        for c in conds:
            mask &= vec.evaluate(c, env, size) != 0
        want = None if not mask.any() else (int(vals[mask].min()), int(vals[mask].max()))
    except vec.NotEnumerable:
        want = "refused"
    try:
        got = vec.hull(e, box, conds)
    except vec.NotEnumerable:
        got = "refused"
    # every point of a group's box is the projection of a point of the whole box, so both
    # meet the same divisions by zero
    assert got == want, (str(e), [str(c) for c in conds])
