"""Which loop points the verifier's range checks enumerate, and when a bound is exact.

The verifier must never reject valid IR, so it reports a range violation only when it is *certain*:
either an exhaustive evaluation ([`loopir.arith.vectorized`][loopir.arith.vectorized]) over every
point of the relevant loop space found a counterexample, or the expression is a sum of distinct
variables with constant coefficients (for which the interval bound of
[`loopir.arith.bound`][loopir.arith.bound] is exact). This module chooses the conditions and
variables to enumerate; the evaluation and the bounds are loopir.arith's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from loopir.arith.vectorized import MAX_POINTS
from loopir.ir.expr import Add, And, IntImm, Mul, PrimExpr, Sub, Var
from loopir.ir.functor import collect_vars

# Largest number of points enumerated exhaustively (numpy-vectorised, a few ms each).
ENUM_LIMIT = MAX_POINTS

Interval = tuple[int, int]  # inclusive


def linear_distinct(e: PrimExpr) -> bool:
    """Whether ``e`` is ``c0 + sum(ci * vi)`` with every variable occurring once.

    For such expressions interval arithmetic is exact (every bound is attained).
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
    seed: Iterable[Var], conds: list[PrimExpr], ranges: Mapping[Var, Interval]
) -> tuple[list[PrimExpr], list[Var]]:
    """The conditions (and variables) to enumerate for a question about ``seed``.

    All conditions when the whole space fits
    [`ENUM_LIMIT`][loopir.analysis.verifier_eval.ENUM_LIMIT] (exact, even when a condition unrelated
    to ``seed`` is unsatisfiable); otherwise only the connected ones.
    """
    seed = list(seed)
    everything: dict[int, Var] = {id(v): v for v in seed}
    for c in conds:
        for v in collect_vars(c):
            everything.setdefault(id(v), v)
    total = 1
    for v in everything.values():
        r = ranges.get(v)
        if r is None:
            total = ENUM_LIMIT + 1
            break
        total *= r[1] - r[0] + 1
    if total <= ENUM_LIMIT:
        return list(conds), list(everything.values())
    return relevant_conditions(seed, conds)
