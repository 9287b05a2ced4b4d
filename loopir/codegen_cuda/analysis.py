"""Small integer analyses the CUDA emitter needs: constant bounds and modular sets.

The emitter asks two questions of index expressions:

* is ``a`` provably non-negative and ``b`` provably positive? Then ``floordiv(a, b)`` and
  ``floormod(a, b)`` can be printed as C's ``/`` and ``%`` (which truncate toward zero and so
  differ from floor semantics on negative operands);
* is a vector access's flattened offset provably a multiple of its lane count? Then it can be
  printed as one ``float4``/``float2``/``half2`` access.

Both are answered here with self-contained interval and modular-set arithmetic over the
ranges of the loops that enclose the expression. When ``loopir.arith`` is importable its
``const_int_bound`` is consulted as well (both provers are sound, so their union is).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

from loopir.ir import dtype as dt
from loopir.ir.expr import (
    Add,
    Cast,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    PrimExpr,
    Select,
    Sub,
    Var,
)

logger = logging.getLogger(__name__)

# An inclusive integer interval; None stands for an unbounded end.
Bound = tuple[int | None, int | None]
UNBOUNDED: Bound = (None, None)


def _add(x: int | None, y: int | None) -> int | None:
    return None if x is None or y is None else x + y


def _mul_bounds(a: Bound, b: Bound) -> Bound:
    if None in a or None in b:
        # Unbounded operand: only the sign can survive, and only for non-negative factors.
        if a[0] is not None and b[0] is not None and a[0] >= 0 and b[0] >= 0:
            return (a[0] * b[0], None)
        return UNBOUNDED
    prods = [x * y for x in a for y in b]  # type: ignore[operator]
    return (min(prods), max(prods))


def const_int_bound(expr: PrimExpr, env: Mapping[Var, Bound]) -> Bound:
    """Inclusive constant bounds of the integer expression ``expr``.

    Parameters
    ----------
    expr
        An integer expression.
    env
        Known bounds of variables (loop variables, thread indices, symbolic sizes).
        Variables not in ``env`` are unbounded.

    Returns
    -------
    Bound
        ``(lo, hi)`` with ``None`` for an unbounded end.
    """
    if isinstance(expr, IntImm):
        return (expr.value, expr.value)
    if isinstance(expr, Var):
        return env.get(expr, UNBOUNDED)
    if isinstance(expr, Cast):
        if dt.is_int(expr.dtype) and dt.is_int(expr.value.dtype):
            inner = const_int_bound(expr.value, env)
            # A narrowing cast may wrap; keep the bound only if it fits the target type.
            lo_t, hi_t = dt.min_value(expr.dtype), dt.max_value(expr.dtype)
            if inner[0] is not None and inner[1] is not None and lo_t <= inner[0] and inner[1] <= hi_t:
                return inner
        return UNBOUNDED
    if isinstance(expr, Add):
        a, b = const_int_bound(expr.a, env), const_int_bound(expr.b, env)
        return (_add(a[0], b[0]), _add(a[1], b[1]))
    if isinstance(expr, Sub):
        a, b = const_int_bound(expr.a, env), const_int_bound(expr.b, env)
        return (
            None if a[0] is None or b[1] is None else a[0] - b[1],
            None if a[1] is None or b[0] is None else a[1] - b[0],
        )
    if isinstance(expr, Mul):
        return _mul_bounds(const_int_bound(expr.a, env), const_int_bound(expr.b, env))
    if isinstance(expr, FloorDiv):
        a, b = const_int_bound(expr.a, env), const_int_bound(expr.b, env)
        if b[0] is not None and b[0] > 0:
            # positive divisor: floor division is monotone in a
            b0, b1 = b
            if a[0] is None:
                lo = None
            elif a[0] >= 0:
                lo = a[0] // b1 if b1 is not None else 0
            else:
                lo = a[0] // b0
            if a[1] is None:
                hi = None
            elif a[1] >= 0:
                hi = a[1] // b0
            else:
                hi = a[1] // b1 if b1 is not None else -1
            return (lo, hi)
        return UNBOUNDED
    if isinstance(expr, FloorMod):
        a, b = const_int_bound(expr.a, env), const_int_bound(expr.b, env)
        if b[0] is not None and b[0] > 0:
            if a[0] is not None and a[1] is not None and b[0] == b[1] and 0 <= a[0] and a[1] < b[0]:
                return a
            return (0, None if b[1] is None else b[1] - 1)
        return UNBOUNDED
    if isinstance(expr, Min):
        a, b = const_int_bound(expr.a, env), const_int_bound(expr.b, env)
        lo = None if a[0] is None or b[0] is None else min(a[0], b[0])
        hi = b[1] if a[1] is None else a[1] if b[1] is None else min(a[1], b[1])
        return (lo, hi)
    if isinstance(expr, Max):
        a, b = const_int_bound(expr.a, env), const_int_bound(expr.b, env)
        lo = b[0] if a[0] is None else a[0] if b[0] is None else max(a[0], b[0])
        hi = None if a[1] is None or b[1] is None else max(a[1], b[1])
        return (lo, hi)
    if isinstance(expr, Select):
        a, b = const_int_bound(expr.true_value, env), const_int_bound(expr.false_value, env)
        lo = None if a[0] is None or b[0] is None else min(a[0], b[0])
        hi = None if a[1] is None or b[1] is None else max(a[1], b[1])
        return (lo, hi)
    return UNBOUNDED


def _arith_bound(expr: PrimExpr, ranges: Mapping[Var, Bound]) -> Bound:
    """Ask ``loopir.arith`` (when present) for a bound; unbounded when it cannot say."""
    try:
        from loopir import arith
        from loopir.ir.buffer import Range
    except ImportError:
        return UNBOUNDED
    try:
        rmap = {
            v: Range(lo, hi - lo + 1)
            for v, (lo, hi) in ranges.items()
            if lo is not None and hi is not None
        }
        b = arith.const_int_bound(expr, rmap)
        lo = None if b.min_value == b.NEG_INF else int(b.min_value)
        hi = None if b.max_value == b.POS_INF else int(b.max_value)
        return (lo, hi)
    except Exception as exc:  # an analysis failure must only cost us the proof
        logger.debug("loopir.arith.const_int_bound failed on %s: %s", expr, exc)
        return UNBOUNDED


def is_nonnegative(expr: PrimExpr, env: Mapping[Var, Bound]) -> bool:
    """Whether ``expr >= 0`` is provable from the variable bounds in ``env``."""
    lo = const_int_bound(expr, env)[0]
    if lo is not None and lo >= 0:
        return True
    lo = _arith_bound(expr, env)[0]
    return lo is not None and lo >= 0


def is_positive(expr: PrimExpr, env: Mapping[Var, Bound]) -> bool:
    """Whether ``expr > 0`` is provable from the variable bounds in ``env``."""
    lo = const_int_bound(expr, env)[0]
    if lo is not None and lo > 0:
        return True
    lo = _arith_bound(expr, env)[0]
    return lo is not None and lo > 0


# A modular set (coeff, base): the expression's value is always coeff * t + base for some
# integer t. coeff == 0 means the exact constant base; coeff == 1 means nothing is known.
ModSet = tuple[int, int]


def _norm(coeff: int, base: int) -> ModSet:
    coeff = abs(coeff)
    return (coeff, base % coeff) if coeff else (0, base)


def modular_set(expr: PrimExpr, env: Mapping[Var, Bound] | None = None) -> ModSet:
    """The modular set of the integer expression ``expr`` (see :data:`ModSet`).

    Variables whose bound in ``env`` is a single value count as that constant.
    """
    env = env or {}
    if isinstance(expr, IntImm):
        return (0, expr.value)
    if isinstance(expr, Var):
        lo, hi = env.get(expr, UNBOUNDED)
        if lo is not None and lo == hi:
            return (0, lo)
        return (1, 0)
    if isinstance(expr, Cast) and dt.is_int(expr.dtype) and dt.is_int(expr.value.dtype):
        return modular_set(expr.value, env)
    if isinstance(expr, (Add, Sub)):
        c1, b1 = modular_set(expr.a, env)
        c2, b2 = modular_set(expr.b, env)
        base = b1 + b2 if isinstance(expr, Add) else b1 - b2
        return _norm(math.gcd(c1, c2), base)
    if isinstance(expr, Mul):
        c1, b1 = modular_set(expr.a, env)
        c2, b2 = modular_set(expr.b, env)
        # (c1 t + b1)(c2 s + b2) = c1 c2 ts + c1 b2 t + c2 b1 s + b1 b2
        return _norm(math.gcd(math.gcd(c1 * c2, c1 * b2), c2 * b1), b1 * b2)
    if isinstance(expr, FloorDiv) and isinstance(expr.b, IntImm) and expr.b.value > 0:
        c, b = modular_set(expr.a, env)
        k = expr.b.value
        if c % k == 0:
            # (c t + b) // k == (c/k) t + b // k exactly, since c t is a multiple of k
            return _norm(c // k, b // k)
        return (1, 0)
    if isinstance(expr, FloorMod) and isinstance(expr.b, IntImm) and expr.b.value > 0:
        c, b = modular_set(expr.a, env)
        k = expr.b.value
        if c % k == 0:
            return (0, b % k)
        g = math.gcd(c, k)
        return _norm(g, b)
    return (1, 0)


def is_multiple_of(expr: PrimExpr, n: int, env: Mapping[Var, Bound] | None = None) -> bool:
    """Whether ``expr`` is provably a multiple of ``n`` for every value of its variables."""
    c, b = modular_set(expr, env)
    return c % n == 0 and b % n == 0
