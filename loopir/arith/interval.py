"""Symbolic integer intervals: the range of an expression when some variables vary.

[`interval_of`][loopir.arith.interval.interval_of] computes inclusive bounds ``[min, max]`` of an
integer expression while the *relaxed* variables range over their Ranges; all other variables stay
symbolic. Affine parts use the coefficient signs; floordiv by a positive constant is monotone;
floormod is exact when the operand's interval provably does not wrap; anything else falls back to
constant bounds (the dtype's range at worst). The result is always sound.

``exact`` says that the bounds are attained for every value of the other variables, i.e.
the value range is exactly ``[min, max]`` (possibly with holes, e.g. ``4*k``). It is set
when every relaxed variable appears in one monotone term and every step was exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from loopir.arith import divmod as dm
from loopir.arith.bound import NEG_INF, POS_INF, BoundEvaluator, dtype_bound
from loopir.arith.canonical import Key, Sum
from loopir.errors import ArithError
from loopir.ir.buffer import Range
from loopir.ir.expr import FloorDiv, FloorMod, IntImm, Max, Min, Mul, PrimExpr, Select, Var
from loopir.ir.functor import collect_vars

if TYPE_CHECKING:
    from loopir.arith.simplify import Simplifier


@attrs.frozen(eq=False)
class IntervalSet:
    """Inclusive symbolic bounds of an integer expression.

    Attributes
    ----------
    min, max
        Simplified expressions in the non-relaxed variables.
    extent
        Simplified ``max - min + 1``.
    exact
        True when ``min`` and ``max`` are attained (the bounds are tight).
    """

    min: PrimExpr
    max: PrimExpr
    extent: PrimExpr | None = None
    exact: bool = False

    def __repr__(self) -> str:
        tight = ", exact" if self.exact else ""
        return f"IntervalSet[{self.min}, {self.max}{tight}]"


class _Relaxer:
    def __init__(self, s: Simplifier, relax: Mapping[Var, Range]) -> None:
        self.s = s
        self.relax = relax
        self._vars: dict[Key, frozenset[Var]] = {}
        self._fallback: BoundEvaluator | None = None

    def relaxed_in(self, key: Key, atom: PrimExpr) -> frozenset[Var]:
        hit = self._vars.get(key)
        if hit is None:
            hit = frozenset(v for v in collect_vars(atom) if v in self.relax)
            self._vars[key] = hit
        return hit

    def const_fallback(self, atom: PrimExpr) -> tuple[Sum, Sum, bool]:
        if self._fallback is None:
            merged = dict(self.s.ranges)
            merged.update(self.relax)
            self._fallback = BoundEvaluator(merged)
        b = self._fallback(atom)
        full = dtype_bound(atom.dtype)
        lo = full.min_value if b.min_value == NEG_INF else b.min_value
        hi = full.max_value if b.max_value == POS_INF else b.max_value
        return Sum.constant(lo, atom.dtype), Sum.constant(hi, atom.dtype), False

    def of_sum(self, S: Sum) -> tuple[Sum, Sum, bool]:
        lo = hi = Sum.constant(S.const, S.dtype)
        exact = True
        seen: set[Var] = set()
        for k, (a, c) in S.terms.items():
            rv = self.relaxed_in(k, a)
            if not rv:
                part = Sum.atom(k, a, c)
                lo, hi = lo.add(part), hi.add(part)
                continue
            if rv & seen:
                exact = False  # a variable in two terms: the extremes need not coincide
            seen |= rv
            alo, ahi, aex = self.of_atom(a)
            exact = exact and aex
            if c > 0:
                lo, hi = lo.add(alo, c), hi.add(ahi, c)
            else:
                lo, hi = lo.add(ahi, c), hi.add(alo, c)
        return lo, hi, exact

    def of_atom(self, a: PrimExpr) -> tuple[Sum, Sum, bool]:
        s = self.s
        if isinstance(a, Var):
            r = self.relax[a]
            lo = s.canon(r.min)
            return lo, lo.add(s.canon(r.extent)).add_const(-1), True
        if isinstance(a, (FloorDiv, FloorMod)) and isinstance(a.b, IntImm) and a.b.value > 0:
            c = a.b.value
            ulo, uhi, ex = self.of_sum(s.canon(a.a))
            qlo, qhi = dm.floordiv_const(s, ulo, c), dm.floordiv_const(s, uhi, c)
            if isinstance(a, FloorDiv):
                return qlo, qhi, ex  # monotone: the extremes map to extremes
            if qlo.key() == qhi.key():
                # no wrap-around: floormod is the operand shifted by a fixed multiple of c
                return s.merge_divmod(ulo.add(qlo, -c)), s.merge_divmod(uhi.add(qlo, -c)), ex
            return Sum.constant(0, a.dtype), Sum.constant(c - 1, a.dtype), False
        if isinstance(a, (Min, Max)):
            alo, ahi, _ = self.of_sum(s.canon(a.a))
            blo, bhi, _ = self.of_sum(s.canon(a.b))
            return s.minmax(type(a), alo, blo), s.minmax(type(a), ahi, bhi), False
        if isinstance(a, Select):
            tlo, thi, _ = self.of_sum(s.canon(a.true_value))
            flo, fhi, _ = self.of_sum(s.canon(a.false_value))
            return s.minmax(Min, tlo, flo), s.minmax(Max, thi, fhi), False
        if isinstance(a, Mul):
            for x, f in ((a.a, a.b), (a.b, a.a)):
                fk = s.keys.key(f)
                if self.relaxed_in(fk, f):
                    continue
                fb = s.expr_bound(f)
                if fb.min_value < 0 < fb.max_value:
                    break
                xlo, xhi, ex = self.of_sum(s.canon(x))
                sf = s.canon(f)
                plo, phi = s.mul(xlo, sf), s.mul(xhi, sf)
                return (plo, phi, ex) if fb.min_value >= 0 else (phi, plo, ex)
        return self.const_fallback(a)


def interval_of(s: Simplifier, e: PrimExpr, relax: Mapping[Var, Range]) -> IntervalSet:
    """Bounds of the scalar integer expression ``e`` with ``relax``'s variables relaxed."""
    from loopir.arith.simplify import is_index

    if not is_index(e.dtype):
        raise ArithError(f"int_set: needs a scalar integer expression, got {e.dtype}: {e}")
    for v, r in relax.items():
        if not isinstance(v, Var) or not isinstance(r, Range):
            raise ArithError(f"int_set: relax must map Var to Range, got {v!r}: {r!r}")
    rx = _Relaxer(s, relax)
    S = s.canon(e)
    lo, hi, exact = rx.of_sum(S)
    # ranges of relaxed variables may mention other relaxed variables: relax again
    for _ in range(len(relax) + 1):
        lo_left = any(rx.relaxed_in(k, a) for k, (a, _c) in lo.terms.items())
        hi_left = any(rx.relaxed_in(k, a) for k, (a, _c) in hi.terms.items())
        if not (lo_left or hi_left):
            break
        exact = False
        if lo_left:
            lo = rx.of_sum(lo)[0]
        if hi_left:
            hi = rx.of_sum(hi)[1]
    else:
        lo = rx.const_fallback(s.to_expr(lo))[0]
        hi = rx.const_fallback(s.to_expr(hi))[1]
    lo, hi = s.merge_divmod(lo), s.merge_divmod(hi)
    mn, mx = s.to_expr(lo), s.to_expr(hi)
    extent = s.to_expr(hi.add(lo, -1).add_const(1))
    return IntervalSet(mn, mx, extent, exact)


__all__ = ["IntervalSet", "interval_of"]
