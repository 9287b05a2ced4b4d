"""Linear-form detection and small integer helpers used by schedule primitives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, overload

from loopir.arith.canonical import Sum
from loopir.errors import ArithError
from loopir.ir import op
from loopir.ir.expr import Mul, PrimExpr, Var
from loopir.ir.functor import collect_vars

if TYPE_CHECKING:
    from loopir.arith.simplify import Simplifier


def _mentions(e: PrimExpr, vs: frozenset[Var]) -> bool:
    return any(v in vs for v in collect_vars(e))


def _factors(e: PrimExpr) -> list[PrimExpr]:
    if type(e) is Mul:
        return _factors(e.a) + _factors(e.b)
    return [e]


def _linear(
    s: Simplifier, S: Sum, vs: frozenset[Var], depth: int = 0
) -> tuple[dict[Var, Sum], Sum] | None:
    """``S == sum(coeff[v] * v) + base`` with coefficients and base free of ``vs``."""
    coeffs: dict[Var, Sum] = {}
    base = Sum.constant(S.const, S.dtype)
    for k, (a, c) in S.terms.items():
        if type(a) is Var and a in vs:
            coeffs[a] = coeffs.get(a, Sum.constant(0, S.dtype)).add_const(c)
            continue
        if not _mentions(a, vs):
            base = base.add(Sum.atom(k, a, c))
            continue
        if type(a) is not Mul or depth > 8:
            return None
        factors = _factors(a)
        dep = [f for f in factors if _mentions(f, vs)]
        if len(dep) != 1:
            return None  # a product of two varying factors is not linear
        inner = _linear(s, s.canon(dep[0]), vs, depth + 1)
        if inner is None:
            return None
        rest = Sum.constant(c, S.dtype)
        for f in factors:
            if f is not dep[0]:
                rest = s.mul(rest, s.canon(f))
        icoeffs, ibase = inner
        for v, cv in icoeffs.items():
            coeffs[v] = coeffs.get(v, Sum.constant(0, S.dtype)).add(s.mul(cv, rest))
        base = base.add(s.mul(ibase, rest))
    return coeffs, base


def detect_linear_sum(s: Simplifier, e: PrimExpr, vars: Sequence[Var]) -> list[PrimExpr] | None:
    """See [`loopir.arith.detect_linear`][loopir.arith.analyzer.detect_linear]."""
    from loopir.arith.simplify import is_index

    if not is_index(e.dtype):
        raise ArithError(f"detect_linear: needs a scalar integer expression, got {e.dtype}: {e}")
    vs = frozenset(vars)
    found = _linear(s, s.canon(e), vs)
    if found is None:
        return None
    coeffs, base = found
    zero = Sum.constant(0, e.dtype)
    return [s.to_expr(coeffs.get(v, zero)) for v in vars] + [s.to_expr(base)]


@overload
def ceildiv(a: int, b: int) -> int: ...


@overload
def ceildiv(a: PrimExpr | int, b: PrimExpr | int) -> PrimExpr | int: ...


def ceildiv(a: PrimExpr | int, b: PrimExpr | int) -> PrimExpr | int:
    """``ceil(a / b)``: an int for ints (b != 0), else the expression ``(a + b - 1) // b``.

    Raises
    ------
    ArithError
        For an integer division by zero.
    """
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ArithError(f"ceildiv: division by zero ({a} / 0)")
        return -(-a // b)
    return op.ceildiv(a, b)


__all__ = ["detect_linear_sum", "ceildiv"]
