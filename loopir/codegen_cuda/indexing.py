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
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    PrimExpr,
    Sub,
    Var,
)
from loopir.ir.functor import collect_vars, post_order_visit, substitute


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


def _plain_index(e: PrimExpr) -> bool:
    """Whether ``e`` is integer arithmetic on variables and constants only: no load, call or
    select, and divisions by positive constants only (so it can be evaluated anywhere)."""
    ok = True

    def f(n: object) -> None:
        nonlocal ok
        if isinstance(n, (FloorDiv, FloorMod, Div)):
            ok &= isinstance(n.b, IntImm) and n.b.value > 0
        elif not isinstance(n, (Var, IntImm, Add, Sub, Mul, Min, Max)):
            ok = False

    post_order_visit(e, f)
    return ok


def _scale(x: PrimExpr, c: IntImm) -> PrimExpr:
    """``x * c``, with ``(y * k) * c`` as ``y * (k * c)``."""
    if isinstance(x, Mul) and isinstance(x.b, IntImm) and x.b.dtype == c.dtype:
        return mul(x.a, IntImm(x.b.value * c.value, c.dtype))
    return mul(x, c)


def split_invariant(
    e: PrimExpr, inner: frozenset[Var], outer: frozenset[Var]
) -> tuple[PrimExpr, PrimExpr] | None:
    """``(base, offset)`` with ``e == base + offset``: ``base`` reads only ``outer`` variables,
    ``offset`` only ``inner`` ones (constants once their loops are unrolled); None if some term
    mixes both or reads anything else.

    Only sums and products by integer constants are distributed, which is exact in wrapping
    integer arithmetic as well, so the two parts add up to ``e``'s value in ``e``'s type.
    """
    if not _plain_index(e):
        return None
    zero = IntImm(0, e.dtype)
    vs = set(collect_vars(e))
    if not vs & inner:
        return (e, zero) if vs <= outer else None
    if vs <= inner:
        return zero, e
    if isinstance(e, (Add, Sub)):
        a, b = split_invariant(e.a, inner, outer), split_invariant(e.b, inner, outer)
        if a is None or b is None:
            return None
        if isinstance(e, Add):
            return add(a[0], b[0]), add(a[1], b[1])
        return (fold_constants(Sub(a[0], b[0])), fold_constants(Sub(a[1], b[1])))
    if isinstance(e, Mul):
        c, x = (e.a, e.b) if isinstance(e.a, IntImm) else (e.b, e.a)
        if isinstance(c, IntImm):
            s = split_invariant(x, inner, outer)
            return None if s is None else (_scale(s[0], c), _scale(s[1], c))
    return None
