"""Index arithmetic helpers of the CUDA emitter: linearity, lane invariance, folding.

These work on integer index expressions only; they are small, exact rewrites (no general
simplifier), used to flatten buffer accesses readably and to prove vector accesses legal.
"""

from __future__ import annotations

from collections.abc import Mapping

from loopir.codegen_cuda import analysis as an
from loopir.codegen_cuda.ctypes import float_literal
from loopir.ir.expr import (
    GE,
    LT,
    Add,
    And,
    Cast,
    FloatImm,
    IntImm,
    Mul,
    PrimExpr,
    Sub,
    Var,
)
from loopir.ir.functor import collect_vars, substitute


def linear_coeff(e: PrimExpr, v: Var) -> int | None:
    """c if ``e`` is ``c * v + (terms without v)``; None if ``v`` enters non-linearly."""
    if e is v:
        return 1
    if v not in collect_vars(e):
        return 0
    if isinstance(e, (Add, Sub)):
        a, b = linear_coeff(e.a, v), linear_coeff(e.b, v)
        if a is None or b is None:
            return None
        return a + b if isinstance(e, Add) else a - b
    if isinstance(e, Mul):
        if isinstance(e.b, IntImm):
            a = linear_coeff(e.a, v)
            return None if a is None else a * e.b.value
        if isinstance(e.a, IntImm):
            b = linear_coeff(e.b, v)
            return None if b is None else b * e.a.value
    return None


def lane_invariant(
    cond: PrimExpr, v: Var, lanes: int, env: Mapping[Var, an.Bound]
) -> PrimExpr | None:
    """``cond`` rewritten without ``v`` (0 <= v < lanes), or None if it really depends on it.

    Conjuncts ``L + v < R`` and ``L + v >= R`` with ``L`` and ``R`` multiples of ``lanes``
    have the same truth value for every lane, so they become ``L < R`` / ``L >= R``.
    """
    if v not in collect_vars(cond):
        return cond
    if isinstance(cond, And):
        a = lane_invariant(cond.a, v, lanes, env)
        b = lane_invariant(cond.b, v, lanes, env)
        return None if a is None or b is None else And(a, b)
    if isinstance(cond, (LT, GE)):
        lhs, rhs = cond.a, cond.b
        if v in collect_vars(rhs) or linear_coeff(lhs, v) != 1:
            return None
        base = fold_constants(substitute(lhs, {v: IntImm(0, v.dtype)}))
        if an.is_multiple_of(base, lanes, env) and an.is_multiple_of(rhs, lanes, env):
            return type(cond)(base, rhs)
    return None


def vector_splat(carrier: str, value: IntImm | FloatImm, lanes: int) -> str | None:
    """A ``carrier`` value with every lane equal to the constant ``value``, or None."""
    if carrier in ("float2", "float4"):
        lit = float_literal(value.value, "float32")
        return f"make_{carrier}({', '.join([lit] * lanes)})"
    if carrier in ("int2", "int4") and isinstance(value, IntImm):
        return f"make_{carrier}({', '.join([str(value.value)] * lanes)})"
    if carrier == "half2":
        return f"__float2half2_rn({float_literal(value.value, 'float32')})"
    if carrier == "nv_bfloat162":
        return f"__float2bfloat162_rn({float_literal(value.value, 'float32')})"
    if value.value == 0:  # raw carriers: all-zero bits are 0 in every float and int type
        return {"unsigned int": "0u", "uint2": "make_uint2(0u, 0u)",
                "uint4": "make_uint4(0u, 0u, 0u, 0u)"}.get(carrier)
    return None


def fold_constants(e: PrimExpr) -> PrimExpr:
    """Fold ``x + 0``, ``x * 1``, ``x * 0`` and constant sums in an index expression."""
    if isinstance(e, Add):
        return add(fold_constants(e.a), fold_constants(e.b))
    if isinstance(e, Mul):
        return mul(fold_constants(e.a), fold_constants(e.b))
    if isinstance(e, Sub):
        a, b = fold_constants(e.a), fold_constants(e.b)
        if isinstance(b, IntImm) and b.value == 0:
            return a
        if isinstance(a, IntImm) and isinstance(b, IntImm):
            return IntImm(a.value - b.value, a.dtype)
        return e if a is e.a and b is e.b else Sub(a, b)
    return e


def mul(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """``a * b`` with constants folded (keeps flattened indices readable)."""
    a, b = match_int(a, b)
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return IntImm(a.value * b.value, a.dtype)
    if isinstance(b, IntImm) and b.value == 1:
        return a
    if isinstance(a, IntImm) and a.value == 1:
        return b
    if (isinstance(a, IntImm) and a.value == 0) or (isinstance(b, IntImm) and b.value == 0):
        return IntImm(0, a.dtype)
    return Mul(a, b)


def add(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    a, b = match_int(a, b)
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return IntImm(a.value + b.value, a.dtype)
    if isinstance(b, IntImm) and b.value == 0:
        return a
    if isinstance(a, IntImm) and a.value == 0:
        return b
    return Add(a, b)


def match_int(a: PrimExpr, b: PrimExpr) -> tuple[PrimExpr, PrimExpr]:
    if a.dtype == b.dtype:
        return a, b
    wide = "int64" if "int64" in (a.dtype, b.dtype) else a.dtype
    def conv(x: PrimExpr) -> PrimExpr:
        if x.dtype == wide:
            return x
        if isinstance(x, IntImm):
            return IntImm(x.value, wide)
        return Cast(wide, x)

    return conv(a), conv(b)
