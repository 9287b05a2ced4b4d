"""Helpers of [`loopir.passes.race_ws`][loopir.passes.race_ws]: the loops whose
indices the simplifier may have specialized, and a persistent pipeline's global steps."""

from __future__ import annotations

from loopir import arith
from loopir.ir import op
from loopir.ir.expr import FloorDiv, FloorMod, IntImm, PrimExpr, Var
from loopir.ir.functor import collect_vars, substitute
from loopir.ir.stmt import For
from loopir.passes.race_problem import const_int as const

__all__ = ["Steps", "guard_is_from", "most", "parity_is", "small"]


def small(extent: int | None, v: int) -> bool:
    """Whether a loop's constant extent is small enough that the simplifier may have
    specialized its indices (``j % V`` is ``j`` below ``V``): then each iteration is checked
    (at most ``2V``; any other loop symbolically)."""
    return extent is not None and extent <= 2 * v


def most(e: PrimExpr) -> int | None:
    """The largest value of a loop extent (its variables, sizes or block indices, from 0 to
    ``2**31``), or None: a loop that never runs more iterations is checked as one of that
    constant extent (``_small``: the simplifier may have specialized its indices)."""
    c = const(e)
    if c is not None:
        return c
    b = arith.Analyzer({u: (0, 1 << 31) for u in collect_vars(e)}).const_int_bound(e)
    return None if b.max_value == arith.POS_INF else int(b.max_value)


def parity_is(p: PrimExpr, var: Var, v: int, ahead: int, extent: int | None = None, lo: int = 0) -> bool:
    """Whether ``p`` is ``(var // v + ahead) % 2`` (mod 2) at every ``var = v * q + s``, or at
    each iteration ``lo <= var < extent`` of a small loop."""
    x = p.a if isinstance(p, FloorMod) and const(p.b) == 2 else p
    if small(extent, v):
        assert extent is not None
        return all((c := const(substitute(x, {var: IntImm(i, var.dtype)}))) is not None
                   and (c - i // v - ahead) % 2 == 0 for i in range(lo, extent))  # fmt: skip
    q = Var("ws_q", "int32")
    for s in range(v):
        d = arith.simplify(substitute(x, {var: v * q + s}) - (q + ahead))
        if not (isinstance(d, IntImm) and d.value % 2 == 0):
            return False
    return True


def guard_is_from(guards: list[tuple[PrimExpr, bool]], var: Var, lo: int, extent: int | None = None,
                   start: int = 0) -> bool:  # fmt: skip
    """Whether the guards hold exactly when ``var >= lo`` (``var`` from ``start`` to
    ``extent``): for every ``var >= lo`` and for no ``var < lo``."""
    hi = (1 << 30) if extent is None else extent
    if not guards:
        return lo <= start or hi <= start
    c = op.all_(*(cond if taken else op.not_(cond) for cond, taken in guards))
    above = max(lo, start) >= hi or arith.Analyzer({var: (max(lo, start), hi)}).can_prove(c)
    return above and (lo <= start or arith.Analyzer({var: (start, min(lo, hi))}).can_prove(op.not_(c)))


class Steps:
    """A persistent pipeline's consumer steps (``pipeline_ws``): iteration ``k`` of the K loop
    (extent ``n``) in iteration ``t`` of the tile loop is the global step ``t * n + k``. Its
    checks hold at every ``t = v * q + s`` (``q`` free) and every ``k`` (each of a small
    constant extent, else ``v * q' + s'``), so their cost is ``v`` squared, whatever the sizes."""

    def __init__(self, lt: For, lc: For, v: int) -> None:
        self.t, self.k, self.n, self.v = lt.loop_var, lc.loop_var, lc.extent, v
        self.extent, self.tiles = const(lc.extent), most(lt.extent)

    def at(self, k: PrimExpr) -> PrimExpr:
        return self.t * self.n + k

    def _points(self, lo: int, tail: bool = False) -> list[dict[Var, PrimExpr]]:
        q, q2, v = Var("ws_qt", "int32"), Var("ws_qk", "int32"), self.v

        def values(extent: int | None, lo: int, q: Var) -> list[PrimExpr]:
            if small(extent, v):
                assert extent is not None
                return [IntImm(c, "int32") for c in range(lo, extent)]
            return [v * q + s for s in range(v)]

        ks = [self.n] if tail else values(self.extent, lo, q2)
        return [{self.t: t, self.k: kk} for t in values(self.tiles, 0, q) for kk in ks]

    def lag(self, idx: PrimExpr, tail: bool = False) -> int | None:
        """The least ``d`` with ``idx == (t * n + k - d) % v`` (``k >= d``; ``tail``: after
        the K loop, ``k = n``)."""
        for d in range(self.v):
            want = FloorMod(self.at(self.k) - d + self.v, IntImm(self.v, "int32"))
            if all(const(substitute(idx - want, p)) == 0 for p in self._points(d, tail)):
                return d
        return None

    def parity_is(self, p: PrimExpr) -> bool:
        """Whether ``p`` is the parity of the global step's phase, ``(t * n + k) // v % 2``."""
        x = p.a if isinstance(p, FloorMod) and const(p.b) == 2 else p
        want = FloorDiv(self.at(self.k), IntImm(self.v, "int32"))
        # the difference even at every point (``t * n // v`` may stay: ``q * n`` for even ``n / v``)
        return all(const(FloorMod(substitute(x - want, pt), IntImm(2, "int32"))) == 0 for pt in self._points(0))
