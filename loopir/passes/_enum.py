"""Exhaustive evaluation of integer index expressions over small constant loop domains.

Some facts the lowering needs are hard for an interval analysis but trivial to decide by
looking at every point of a small iteration domain: "is this store index injective over the
iterations where this guard holds?", "what rows does this guarded fetch really touch?". For
domains of at most :data:`MAX_POINTS` points with constant loop ranges, this module evaluates
the expressions on all points at once with numpy (exact int64 arithmetic with floor semantics).
The result is a proof by exhaustion; anything it cannot evaluate raises :class:`NotEnumerable`
and callers fall back to the symbolic analyzer or to the conservative answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from loopir.ir import dtype as dt
from loopir.ir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    Cast,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    Not,
    Or,
    PrimExpr,
    Select,
    Sub,
    Var,
)

__all__ = ["MAX_POINTS", "NotEnumerable", "domain", "evaluate"]

#: Largest iteration domain enumerated (keeps every proof well under a second).
MAX_POINTS = 1 << 18

# Values beyond this magnitude could overflow int64 in a product: refuse instead.
_SAFE = 1 << 40


class NotEnumerable(Exception):
    """The expression or domain cannot be evaluated exhaustively."""


def domain(ranges: Sequence[tuple[Var, int, int]]) -> dict[Var, np.ndarray]:
    """All points of the box ``{v: [lo, lo + extent)}`` as flat int64 arrays (one per var).

    Raises
    ------
    NotEnumerable
        If the domain has more than :data:`MAX_POINTS` points.
    """
    total = 1
    for _, _, ext in ranges:
        total *= max(int(ext), 0)
    if total > MAX_POINTS:
        raise NotEnumerable(f"domain of {total} points is too large")
    if not ranges:
        return {}
    axes = [np.arange(lo, lo + ext, dtype=np.int64) for _, lo, ext in ranges]
    grids = np.meshgrid(*axes, indexing="ij")
    return {v: g.reshape(-1) for (v, _, _), g in zip(ranges, grids)}


def _check(a: np.ndarray) -> np.ndarray:
    if a.size and int(np.abs(a).max()) > _SAFE:
        raise NotEnumerable("values too large for exact int64 evaluation")
    return a


def evaluate(e: PrimExpr, env: Mapping[Var, np.ndarray], size: int) -> np.ndarray:
    """Evaluate integer/bool expression ``e`` at every point (arrays of length ``size``).

    Raises
    ------
    NotEnumerable
        For a variable not in ``env``, a buffer load, a call, a float or vector expression.
    """
    if dt.lanes(e.dtype) != 1 or dt.is_float(e.dtype):
        raise NotEnumerable(f"not a scalar integer expression: {type(e).__name__}")
    if isinstance(e, IntImm):
        return np.full(size, e.value, dtype=np.int64)
    if isinstance(e, Var):
        if e not in env:
            raise NotEnumerable(f"free variable {e.name}")
        return env[e]
    if isinstance(e, (Add, Sub, Mul, FloorDiv, FloorMod, Min, Max)):
        a = evaluate(e.a, env, size)
        b = evaluate(e.b, env, size)
        if isinstance(e, Add):
            return _check(a + b)
        if isinstance(e, Sub):
            return _check(a - b)
        if isinstance(e, Mul):
            return _check(a * b)
        if isinstance(e, Min):
            return np.minimum(a, b)
        if isinstance(e, Max):
            return np.maximum(a, b)
        if np.any(b == 0):
            raise NotEnumerable("division by zero")
        return np.floor_divide(a, b) if isinstance(e, FloorDiv) else np.mod(a, b)
    if isinstance(e, (LT, LE, GT, GE, EQ, NE)):
        a = evaluate(e.a, env, size)
        b = evaluate(e.b, env, size)
        ops = {LT: np.less, LE: np.less_equal, GT: np.greater, GE: np.greater_equal,
               EQ: np.equal, NE: np.not_equal}  # fmt: skip
        return ops[type(e)](a, b).astype(np.int64)
    if isinstance(e, And):
        return (evaluate(e.a, env, size) != 0) & (evaluate(e.b, env, size) != 0)
    if isinstance(e, Or):
        return (evaluate(e.a, env, size) != 0) | (evaluate(e.b, env, size) != 0)
    if isinstance(e, Not):
        return (evaluate(e.a, env, size) == 0).astype(np.int64)
    if isinstance(e, Select):
        c = evaluate(e.condition, env, size) != 0
        return np.where(c, evaluate(e.true_value, env, size), evaluate(e.false_value, env, size))
    if isinstance(e, Cast):
        v = evaluate(e.value, env, size)
        if dt.is_bool(e.dtype):
            return (v != 0).astype(np.int64)
        bits = dt.bits(e.dtype)
        if bits < 64 and v.size and (v.min() < -(1 << (bits - 1)) or v.max() >= 1 << (bits - 1)):
            raise NotEnumerable("integer cast would wrap")
        return v
    raise NotEnumerable(f"cannot enumerate {type(e).__name__}")
