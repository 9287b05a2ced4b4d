"""Integer evaluation helpers for the verifier: intervals and exhaustive enumeration.

The verifier must never reject valid IR, so it reports a range violation only when it is
*certain*: either an exhaustive evaluation over every point of the relevant loop space found
a counterexample, or the expression is a sum of distinct variables with constant
coefficients (for which interval arithmetic is exact). Everything here works on integer
expressions; anything else (loads, calls, floats) raises :class:`Unsupported`, which callers
treat as "cannot decide".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

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
from loopir.ir.functor import collect_vars

# Largest number of points enumerated exhaustively (numpy-vectorised, a few ms each).
ENUM_LIMIT = 1 << 18

Interval = tuple[int, int]  # inclusive


class Unsupported(Exception):
    """The expression is outside what these helpers can evaluate."""


def const_int(e: PrimExpr) -> int | None:
    """The value of an integer constant expression, or None."""
    if isinstance(e, IntImm):
        return e.value
    try:
        lo_hi = interval(e, {})
    except Unsupported:
        return None
    if lo_hi is not None and lo_hi[0] == lo_hi[1]:
        return lo_hi[0]
    return None


def interval(e: PrimExpr, ranges: Mapping[int, Interval]) -> Interval | None:
    """Inclusive bounds of integer ``e`` when each var ``v`` lies in ``ranges[id(v)]``.

    Returns None when a variable has no known range. Sound (an over-approximation).
    """
    if isinstance(e, IntImm):
        return (e.value, e.value)
    if isinstance(e, Var):
        return ranges.get(id(e))
    if isinstance(e, Cast) and (dt.is_int(e.dtype) or dt.is_bool(e.dtype)):
        return interval(e.value, ranges)
    if isinstance(e, (Add, Sub, Mul, Min, Max, FloorDiv, FloorMod)):
        a = interval(e.a, ranges)
        b = interval(e.b, ranges)
        if a is None or b is None:
            return None
        if isinstance(e, Add):
            return (a[0] + b[0], a[1] + b[1])
        if isinstance(e, Sub):
            return (a[0] - b[1], a[1] - b[0])
        if isinstance(e, Mul):
            prods = [x * y for x in a for y in b]
            return (min(prods), max(prods))
        if isinstance(e, Min):
            return (min(a[0], b[0]), min(a[1], b[1]))
        if isinstance(e, Max):
            return (max(a[0], b[0]), max(a[1], b[1]))
        if b[0] != b[1] or b[0] <= 0:
            return None  # division by a non-constant or non-positive divisor: give up
        c = b[0]
        if isinstance(e, FloorDiv):
            return (a[0] // c, a[1] // c)
        if a[0] // c == a[1] // c:
            return (a[0] % c, a[1] % c)
        return (0, c - 1)
    raise Unsupported(type(e).__name__)


def linear_distinct(e: PrimExpr) -> bool:
    """Whether ``e`` is ``c0 + sum(ci * vi)`` with every variable occurring once.

    For such expressions :func:`interval` is exact (every bound is attained).
    """
    seen: set[int] = set()

    def walk(x: PrimExpr) -> bool:
        if isinstance(x, IntImm):
            return True
        if isinstance(x, Var):
            if id(x) in seen:
                return False
            seen.add(id(x))
            return True
        if isinstance(x, (Add, Sub)):
            return walk(x.a) and walk(x.b)
        if isinstance(x, Mul):
            if isinstance(x.b, IntImm):
                return walk(x.a)
            if isinstance(x.a, IntImm):
                return walk(x.b)
        return False

    return walk(e)


def split_and(e: PrimExpr) -> list[PrimExpr]:
    """The conjuncts of ``e`` (``a and (b and c)`` -> ``[a, b, c]``); constant True dropped."""
    if isinstance(e, And):
        return split_and(e.a) + split_and(e.b)
    if isinstance(e, IntImm) and e.value:
        return []
    return [e]


def relevant_conditions(
    seed: Iterable[Var], conds: list[PrimExpr]
) -> tuple[list[PrimExpr], list[Var]]:
    """Conditions connected (through shared variables) to ``seed``, and all their vars.

    A condition over variables unrelated to ``seed`` cannot change the set of values an
    expression over ``seed`` takes (when it is satisfiable at all), so it can be ignored.
    """
    vars_: dict[int, Var] = {id(v): v for v in seed}
    cond_vars = [(c, collect_vars(c)) for c in conds]
    chosen: list[PrimExpr] = []
    changed = True
    while changed:
        changed = False
        for c, cv in cond_vars:
            if any(c is x for x in chosen):
                continue
            if any(id(v) in vars_ for v in cv):
                chosen.append(c)
                for v in cv:
                    vars_.setdefault(id(v), v)
                changed = True
    return chosen, list(vars_.values())


def conditions_to_enumerate(
    seed: Iterable[Var], conds: list[PrimExpr], ranges: Mapping[int, Interval]
) -> tuple[list[PrimExpr], list[Var]]:
    """The conditions (and variables) to enumerate for a question about ``seed``.

    All conditions when the whole space fits :data:`ENUM_LIMIT` (exact, even when a condition
    unrelated to ``seed`` is unsatisfiable); otherwise only the connected ones.
    """
    seed = list(seed)
    everything: dict[int, Var] = {id(v): v for v in seed}
    for c in conds:
        for v in collect_vars(c):
            everything.setdefault(id(v), v)
    total = 1
    for v in everything.values():
        r = ranges.get(id(v))
        if r is None:
            total = ENUM_LIMIT + 1
            break
        total *= r[1] - r[0] + 1
    if total <= ENUM_LIMIT:
        return list(conds), list(everything.values())
    return relevant_conditions(seed, conds)


def enumerate_space(
    variables: list[Var], ranges: Mapping[int, Interval], limit: int = ENUM_LIMIT
) -> dict[int, np.ndarray] | None:
    """Every combination of the variables' values as flat arrays (None if too many/unknown)."""
    axes = []
    total = 1
    for v in variables:
        r = ranges.get(id(v))
        if r is None or r[1] < r[0]:
            return None
        n = r[1] - r[0] + 1
        total *= n
        if total > limit:
            return None
        axes.append(np.arange(r[0], r[1] + 1, dtype=np.int64))
    if not axes:
        return {}
    grids = np.meshgrid(*axes, indexing="ij")
    return {id(v): g.ravel() for v, g in zip(variables, grids)}


def evaluate(e: PrimExpr, env: Mapping[int, Any]) -> Any:
    """Evaluate integer/bool ``e`` element-wise over numpy arrays bound in ``env``."""
    if isinstance(e, IntImm):
        return np.int64(e.value) if not dt.is_bool(e.dtype) else np.bool_(e.value)
    if isinstance(e, Var):
        try:
            return env[id(e)]
        except KeyError:
            raise Unsupported(f"unbound variable {e.name}") from None
    if isinstance(e, Cast):
        v = evaluate(e.value, env)
        if dt.is_bool(e.dtype):
            return np.asarray(v) != 0
        if dt.is_int(e.dtype):
            return np.asarray(v).astype(np.int64)
        raise Unsupported("float cast")
    if isinstance(e, (And, Or)):
        a, b = evaluate(e.a, env), evaluate(e.b, env)
        return np.logical_and(a, b) if isinstance(e, And) else np.logical_or(a, b)
    if isinstance(e, Not):
        return np.logical_not(evaluate(e.a, env))
    if isinstance(e, Select):
        return np.where(
            evaluate(e.condition, env),
            evaluate(e.true_value, env),
            evaluate(e.false_value, env),
        )
    ops = {
        Add: np.add,
        Sub: np.subtract,
        Mul: np.multiply,
        Min: np.minimum,
        Max: np.maximum,
        EQ: np.equal,
        NE: np.not_equal,
        LT: np.less,
        LE: np.less_equal,
        GT: np.greater,
        GE: np.greater_equal,
    }
    fn = ops.get(type(e))
    if fn is not None:
        if dt.is_float(e.a.dtype):  # type: ignore[attr-defined]
            raise Unsupported("float arithmetic")
        return fn(evaluate(e.a, env), evaluate(e.b, env))  # type: ignore[attr-defined]
    if isinstance(e, (FloorDiv, FloorMod)):
        a, b = evaluate(e.a, env), evaluate(e.b, env)
        b_arr = np.asarray(b)
        if np.any(b_arr == 0):
            raise Unsupported("division by zero")
        # numpy's // and % on integers are floor division / floor modulo, as in the IR.
        return np.floor_divide(a, b) if isinstance(e, FloorDiv) else np.mod(a, b)
    raise Unsupported(type(e).__name__)
