"""The two integer questions the CUDA emitter asks of index expressions, answered by arith.

* is ``a`` provably non-negative and ``b`` provably positive? Then ``floordiv(a, b)`` and
  ``floormod(a, b)`` can be printed as C's ``/`` and ``%`` (which truncate toward zero and so
  differ from floor semantics on negative operands);
* is a vector access's flattened offset provably a multiple of its lane count? Then it can be
  printed as one ``float4``/``float2``/``half2`` access.

The emitter tracks variable bounds as ``(lo, hi)`` pairs that may be open (``None``) on one side (a
size is ``>= 0`` with no upper bound); this module translates them for
[`loopir.arith.bound`][loopir.arith.bound] and [`loopir.arith.modular`][loopir.arith.modular], which
do the analysis.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from loopir.arith.analyzer import Analyzer
from loopir.arith.bound import NEG_INF, POS_INF, BoundEvaluator, ConstIntBound, clamp
from loopir.arith.modular import ModularSet
from loopir.arith.modular import modular_set as _modular_set
from loopir.errors import ArithError
from loopir.ir.buffer import Range
from loopir.ir.expr import PrimExpr, Var

logger = logging.getLogger(__name__)

# An inclusive integer interval; None stands for an unbounded end.
Bound = tuple[int | None, int | None]
UNBOUNDED: Bound = (None, None)

# A modular set (coeff, base): the expression's value is always coeff * t + base for some
# integer t. coeff == 0 means the exact constant base; coeff == 1 means nothing is known.
ModSet = tuple[int, int]


def _to_arith(b: Bound) -> ConstIntBound:
    lo = NEG_INF if b[0] is None else clamp(b[0])
    hi = POS_INF if b[1] is None else clamp(b[1])
    # an empty loop (hi < lo) binds a variable that takes no value: any bound is sound
    return ConstIntBound(lo, max(lo, hi))


def _from_arith(b: ConstIntBound) -> Bound:
    return (
        None if b.min_value == NEG_INF else b.min_value,
        None if b.max_value == POS_INF else b.max_value,
    )


def const_int_bound(expr: PrimExpr, env: Mapping[Var, Bound]) -> Bound:
    """Inclusive constant bounds of the integer expression ``expr``.

    Parameters
    ----------
    expr
        An integer expression.
    env
        Known bounds of variables (loop variables, thread indices, symbolic sizes).
        Variables not in ``env`` range over their dtype.

    Returns
    -------
    Bound
        ``(lo, hi)`` with ``None`` for an unbounded end.
    """
    bounds = {v: _to_arith(b) for v, b in env.items()}
    return _from_arith(BoundEvaluator({}, var_bounds=bounds)(expr))


def _simplified_lower_bound(expr: PrimExpr, env: Mapping[Var, Bound]) -> int | None:
    """The lower bound after simplification (``x - x % 4 >= 0`` needs it), with the vars
    bounded on both sides as ranges."""
    ranges = {
        v: Range(lo, hi - lo + 1)
        for v, (lo, hi) in env.items()
        if lo is not None and hi is not None and hi >= lo
    }
    try:
        lo = Analyzer(ranges).const_int_bound(expr).min_value
    except ArithError as exc:  # too deep to analyze: only the proof is lost
        logger.debug("analysis: Analyzer.const_int_bound gave up on %s: %s", expr, exc)
        return None
    return None if lo == NEG_INF else lo


def is_nonnegative(expr: PrimExpr, env: Mapping[Var, Bound]) -> bool:
    """Whether ``expr >= 0`` is provable from the variable bounds in ``env``."""
    lo = const_int_bound(expr, env)[0]
    if lo is not None and lo >= 0:
        return True
    lo = _simplified_lower_bound(expr, env)
    return lo is not None and lo >= 0


def is_positive(expr: PrimExpr, env: Mapping[Var, Bound]) -> bool:
    """Whether ``expr > 0`` is provable from the variable bounds in ``env``."""
    lo = const_int_bound(expr, env)[0]
    if lo is not None and lo > 0:
        return True
    lo = _simplified_lower_bound(expr, env)
    return lo is not None and lo > 0


def modular_set(expr: PrimExpr, env: Mapping[Var, Bound] | None = None) -> ModSet:
    """The modular set of the integer expression ``expr`` (see
    [`ModSet`][loopir.codegen_cuda.analysis.ModSet]).

    Variables whose bound in ``env`` is a single value count as that constant.
    """
    fixed = {v: ModularSet(0, lo) for v, (lo, hi) in (env or {}).items() if lo is not None and lo == hi}
    m = _modular_set(expr, fixed)
    return (m.coeff, m.base)


def is_multiple_of(expr: PrimExpr, n: int, env: Mapping[Var, Bound] | None = None) -> bool:
    """Whether ``expr`` is provably a multiple of ``n`` for every value of its variables."""
    c, b = modular_set(expr, env)
    return c % n == 0 and b % n == 0
