"""Modular sets: every value of an integer expression is ``coeff * t + base`` for some int ``t``.

The CUDA emitter asks whether a vector access's flattened offset is a multiple of its lane
count (then it can be one ``float4`` access); TVM answers the same question with its
``ModularSetAnalyzer``. The analysis is sound for negative values (floor semantics for ``//``
and ``%``) and never assumes anything about a variable it is not told about.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

from loopir.arith.evaluate import wrap_int
from loopir.ir import dtype as dt
from loopir.ir.expr import Add, Cast, FloorDiv, FloorMod, IntImm, Mul, PrimExpr, Sub, Var

__all__ = ["ModularSet", "modular_set", "EVERYTHING_MOD"]


@attrs.frozen
class ModularSet:
    """The set ``{coeff * t + base}``; ``coeff == 0`` is the constant ``base``, ``coeff == 1``
    says nothing. Normalized: ``coeff >= 0`` and ``0 <= base < coeff`` when ``coeff > 0``."""

    coeff: int
    base: int

    @staticmethod
    def make(coeff: int, base: int) -> ModularSet:
        coeff = abs(coeff)
        return ModularSet(coeff, base % coeff) if coeff else ModularSet(0, base)

    def is_multiple_of(self, n: int) -> bool:
        """Whether every value of the set is a multiple of ``n``."""
        return self.coeff % n == 0 and self.base % n == 0


EVERYTHING_MOD = ModularSet(1, 0)


def modular_set(expr: PrimExpr, var_sets: Mapping[Var, ModularSet] | None = None) -> ModularSet:
    """The modular set of the integer expression ``expr``.

    Parameters
    ----------
    expr
        An integer expression.
    var_sets
        Known modular sets of variables (a variable fixed to one value is ``ModularSet(0, v)``);
        other variables can be anything.
    """
    env = var_sets or {}
    if isinstance(expr, IntImm):
        return ModularSet(0, expr.value)
    if isinstance(expr, Var):
        return env.get(expr, EVERYTHING_MOD)
    if isinstance(expr, Cast) and dt.is_int(expr.dtype) and dt.is_int(expr.value.dtype):
        # a narrowing cast may wrap, but wrapping subtracts a multiple of 2**bits, which keeps
        # every modulus that divides 2**bits; other moduli are lost
        inner = modular_set(expr.value, env)
        src, dst = expr.value.dtype, expr.dtype
        if dt.min_value(dst) <= dt.min_value(src) and dt.max_value(src) <= dt.max_value(dst):
            return inner  # every source value fits: the cast changes nothing
        if inner.coeff == 0:
            return ModularSet(0, wrap_int(inner.base, dst))
        return ModularSet.make(math.gcd(inner.coeff, 1 << dt.bits(dst)), inner.base)
    if isinstance(expr, (Add, Sub)):
        a, b = modular_set(expr.a, env), modular_set(expr.b, env)
        base = a.base + b.base if isinstance(expr, Add) else a.base - b.base
        return ModularSet.make(math.gcd(a.coeff, b.coeff), base)
    if isinstance(expr, Mul):
        a, b = modular_set(expr.a, env), modular_set(expr.b, env)
        # (c1 t + b1)(c2 s + b2) = c1 c2 ts + c1 b2 t + c2 b1 s + b1 b2
        g = math.gcd(math.gcd(a.coeff * b.coeff, a.coeff * b.base), b.coeff * a.base)
        return ModularSet.make(g, a.base * b.base)
    if isinstance(expr, FloorDiv) and isinstance(expr.b, IntImm) and expr.b.value > 0:
        a, k = modular_set(expr.a, env), expr.b.value
        if a.coeff % k == 0:
            # (c t + b) // k == (c/k) t + b // k exactly, since c t is a multiple of k
            return ModularSet.make(a.coeff // k, a.base // k)
        return EVERYTHING_MOD
    if isinstance(expr, FloorMod) and isinstance(expr.b, IntImm) and expr.b.value > 0:
        a, k = modular_set(expr.a, env), expr.b.value
        if a.coeff % k == 0:
            return ModularSet(0, a.base % k)
        return ModularSet.make(math.gcd(a.coeff, k), a.base)
    return EVERYTHING_MOD
