"""Hypothesis strategies of random integer/boolean expression trees and brute-force helpers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping

from hypothesis import strategies as st

from loopir.arith import evaluate
from loopir.errors import ArithError
from loopir.ir import op
from loopir.ir.buffer import Range
from loopir.ir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    And,
    IntImm,
    Not,
    Or,
    PrimExpr,
    Select,
    Var,
)

CMPS = (LT, LE, GT, GE, EQ, NE)


def const_ranges(draw: st.DrawFn, n: int) -> dict[Var, Range]:
    """``n`` fresh variables with small constant ranges (negative ones included)."""
    out: dict[Var, Range] = {}
    for i in range(n):
        lo = draw(st.integers(-9, 9))
        ext = draw(st.integers(1, 6))
        out[Var(f"v{i}")] = Range(lo, ext)
    return out


def int_expr(draw: st.DrawFn, vs: list[Var], depth: int) -> PrimExpr:
    """A random integer expression over ``vs`` (affine-heavy, with // % min max select and the
    bitwise ``^ & | << >> ~``)."""
    if depth <= 0 or draw(st.integers(0, 5)) == 0:
        if draw(st.booleans()):
            return draw(st.sampled_from(vs))
        return IntImm(draw(st.integers(-40, 40)))
    kind = draw(
        st.sampled_from(
            ["add", "sub", "mulc", "mulc", "mul", "divc", "modc", "divc", "modc", "divn", "modn",
             "divv", "modv", "min", "max", "select", "add", "sub", "xor", "and", "or", "shlc",
             "shrc", "maskc", "not"]
        )
    )
    a = int_expr(draw, vs, depth - 1)
    if kind in ("shlc", "shrc"):  # bitwise intrinsics (issue 31): shifts by defined amounts
        c = draw(st.integers(0, 5))
        return a << c if kind == "shlc" else a >> c
    if kind == "maskc":
        return a & draw(st.sampled_from([0, 1, 3, 7, 15, 31, -1, -8, 6]))
    if kind == "not":
        return ~a
    if kind in ("mulc", "divc", "modc"):
        c = draw(st.sampled_from([1, 2, 3, 4, 8, 16, 32, 5, 6, 7]))
        if kind == "mulc":
            return a * draw(st.sampled_from([c, -c]))
        return a // c if kind == "divc" else a % c
    if kind in ("divn", "modn"):
        c = -draw(st.sampled_from([1, 2, 3, 4, 8]))
        return a // c if kind == "divn" else a % c
    b = int_expr(draw, vs, depth - 1)
    if kind == "add":
        return a + b
    if kind == "sub":
        return a - b
    if kind == "mul":
        return a * b
    if kind in ("xor", "and", "or"):
        return a ^ b if kind == "xor" else (a & b if kind == "and" else a | b)
    if kind == "divv":
        return op.floordiv(a, b)
    if kind == "modv":
        return op.floormod(a, b)
    if kind == "min":
        return op.min_(a, b)
    if kind == "max":
        return op.max_(a, b)
    cond = bool_expr(draw, vs, depth - 1)
    return Select(cond, a, b)


def bool_expr(draw: st.DrawFn, vs: list[Var], depth: int) -> PrimExpr:
    """A random condition: comparisons of integer expressions combined with and/or/not."""
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "and", "or", "not"])) if depth > 0 else "cmp"
    if kind == "cmp":
        cmp = draw(st.sampled_from(CMPS))
        return cmp(int_expr(draw, vs, max(depth - 1, 1)), int_expr(draw, vs, max(depth - 1, 0)))
    if kind == "not":
        return Not(bool_expr(draw, vs, depth - 1))
    a, b = bool_expr(draw, vs, depth - 1), bool_expr(draw, vs, depth - 1)
    return And(a, b) if kind == "and" else Or(a, b)


def points(ranges: Mapping[Var, Range]) -> Iterator[dict[Var, int]]:
    """Every assignment of the (constant) ranges."""
    vs = list(ranges)
    spans = []
    for v in vs:
        r = ranges[v]
        assert type(r.min) is IntImm and type(r.extent) is IntImm
        spans.append(range(r.min.value, r.min.value + r.extent.value))
    for combo in itertools.product(*spans):
        yield dict(zip(vs, combo))


def value(e: PrimExpr, env: Mapping[Var, int]) -> int | bool | None:
    """The value of ``e`` at ``env``, or None where it is undefined (division by zero)."""
    try:
        return evaluate(e, env)
    except ArithError as exc:
        if "division by zero" in str(exc):
            return None
        raise


@st.composite
def int_case(draw: st.DrawFn, max_vars: int = 3, depth: int = 4) -> tuple[PrimExpr, dict[Var, Range]]:
    n = draw(st.integers(1, max_vars))
    ranges = const_ranges(draw, n)
    return int_expr(draw, list(ranges), depth), ranges


@st.composite
def bool_case(draw: st.DrawFn, max_vars: int = 3, depth: int = 3) -> tuple[PrimExpr, dict[Var, Range]]:
    n = draw(st.integers(1, max_vars))
    ranges = const_ranges(draw, n)
    return bool_expr(draw, list(ranges), depth), ranges


@st.composite
def index_case(draw: st.DrawFn) -> tuple[PrimExpr, dict[Var, Range]]:
    """Split/fuse-like index arithmetic: power-of-two (and odd) coefficients and divisors over
    loop-like ranges ``[0, extent)`` (or shifted ones), nested // and %."""
    n = draw(st.integers(1, 3))
    ranges: dict[Var, Range] = {}
    for i in range(n):
        ext = draw(st.sampled_from([1, 2, 3, 4, 5, 8, 12, 16, 32] if n < 3 else [1, 2, 3, 4, 8]))
        lo = draw(st.sampled_from([0, 0, 0, 1, -3]))
        ranges[Var(f"i{i}")] = Range(lo, ext)
    vs = list(ranges)
    coefs = st.sampled_from([1, 2, 3, 4, 8, 16, 32, 64, -1, -4])
    divs = st.sampled_from([2, 3, 4, 8, 16, 32, 64])

    def build(depth: int) -> PrimExpr:
        e: PrimExpr = IntImm(draw(st.integers(-70, 70)))
        for v in vs:
            if draw(st.booleans()):
                e = e + v * draw(coefs)
        if depth > 0 and draw(st.booleans()):
            inner = build(depth - 1)
            e = e + (inner // draw(divs) if draw(st.booleans()) else inner % draw(divs)) * draw(coefs)
        return e

    e = build(2)
    kind = draw(st.sampled_from(["div", "mod", "plain", "roundtrip"]))
    if kind == "div":
        e = e // draw(divs)
    elif kind == "mod":
        e = e % draw(divs)
    elif kind == "roundtrip":
        c = draw(divs)
        e = (e // c) * c + e % c
    return e, ranges
