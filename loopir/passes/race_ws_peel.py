"""Helpers of [`loopir.passes.race_ws`][loopir.passes.race_ws]: a consumer loop whose first
iteration is peeled (``pipeline_ws``: FlashAttention's consumers, the first step without the
later stage, ``if (n >= 1) { step 0 }`` then the loop over ``[1, n)``). The proof takes the
peeled step as iteration 0 of the producer's range ``[0, n)``: these checks make the two
forms run exactly the iterations ``0 .. n - 1``, each once, in order."""

from __future__ import annotations

from loopir import arith
from loopir.ir import op
from loopir.ir.expr import IntImm, Max, PrimExpr, Var
from loopir.ir.functor import collect_vars
from loopir.ir.stmt import For
from loopir.passes.race_problem import const_int as const

__all__ = ["peeled_range"]


def _analyzer(bounds: dict[Var, tuple[int, int]], *exprs: PrimExpr) -> arith.Analyzer:
    """Each variable of ``exprs`` non-negative, in its loop's range ``[lo, hi)`` where ``bounds``
    has it."""
    return arith.Analyzer({u: bounds.get(u, (0, 1 << 31)) for e in exprs for u in collect_vars(e)})


def _equal(a: PrimExpr, b: PrimExpr, bounds: dict[Var, tuple[int, int]]) -> bool:
    c = const(arith.simplify(a - b))
    if c is not None:
        return c == 0
    return bool(_analyzer(bounds, a, b).can_prove(a == b))


def _holds(c: PrimExpr, n: PrimExpr, bounds: dict[Var, tuple[int, int]]) -> bool:
    ana = _analyzer(bounds, c, n)
    one = IntImm(1, n.dtype)
    return bool(ana.can_prove(op.any_(op.not_(c), n >= one)) and ana.can_prove(op.any_(n < one, c)))


def peeled_range(lc: For, n: PrimExpr, guards: list[tuple[PrimExpr, bool]],
                 bounds: dict[Var, tuple[int, int]] | None = None) -> str | None:
    """Why the peeled step under ``guards`` (the non-thread conditions on its path, each with
    the branch taken) and the loop ``lc`` do not run iterations ``0 .. n - 1`` of the
    producer's ``n``, or None: the loop from 1 over ``max(n - 1, 0)`` iterations, the guards
    holding exactly when ``n >= 1``. ``bounds``: the ranges ``[lo, hi)`` of the loops around the
    step (the other variables are only known non-negative)."""
    bounds = bounds or {}
    if const(lc.min) != 1 or not _equal(lc.extent, Max(n - IntImm(1, n.dtype), IntImm(0, n.dtype)), bounds):
        return f"the consumers' loop {lc.loop_var.name} after the peeled first step does not run [1, {n})"
    c = op.all_(*(g if taken else op.not_(g) for g, taken in guards)) if guards else None
    if c is None:
        ok = (lo := const(n)) is not None and lo >= 1 or bool(
            _analyzer(bounds, n).can_prove(n >= IntImm(1, n.dtype)))
    else:
        ok = _holds(c, n, bounds)
    return None if ok else f"the peeled first step does not run exactly when {n} >= 1"
