"""Read regions of te blocks: the bounding box, per buffer, of the accesses in a body.

Most te bodies access each buffer at one point, or at points that differ by constant offsets
(stencils: ``A[i, j]`` and ``A[i, j + 1]``). Those give exact regions. Anything else falls back to
[`loopir.arith`][loopir.arith] when it can prove a constant difference, and otherwise to the whole
dimension, which is always a sound (if loose) answer.
"""

from __future__ import annotations

import logging
from typing import Any

from loopir.arith import StructuralKey, simplify, structural_key
from loopir.errors import ArithError
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import (
    Add,
    BinaryOp,
    BufferLoad,
    IntImm,
    Mul,
    PrimExpr,
    Sub,
    make_const,
)
from loopir.ir.functor import post_order_visit

logger = logging.getLogger(__name__)

__all__ = ["access_regions"]


def _affine(e: PrimExpr) -> tuple[dict[StructuralKey, int], int] | None:
    """``e`` as ``sum(coef * atom) + const`` with atoms keyed structurally, or None."""
    if isinstance(e, IntImm):
        return {}, e.value
    if isinstance(e, (Add, Sub)):
        a, b = _affine(e.a), _affine(e.b)
        if a is None or b is None:
            return None
        sign = 1 if isinstance(e, Add) else -1
        terms = dict(a[0])
        for k, c in b[0].items():
            terms[k] = terms.get(k, 0) + sign * c
        return {k: c for k, c in terms.items() if c != 0}, a[1] + sign * b[1]
    if isinstance(e, Mul):
        a, b = _affine(e.a), _affine(e.b)
        if a is None or b is None:
            return None
        if not a[0]:
            a, b = b, a
        if b[0]:  # product of two non-constants: an atom of its own
            return {structural_key(e): 1}, 0
        return {k: c * b[1] for k, c in a[0].items() if c * b[1] != 0}, a[1] * b[1]
    if isinstance(e, BinaryOp) or isinstance(e, PrimExpr):
        return {structural_key(e): 1}, 0
    return None


def _const_difference(a: PrimExpr, b: PrimExpr) -> int | None:
    """``a - b`` when it is a provable constant, else None."""
    fa, fb = _affine(a), _affine(b)
    if fa is not None and fb is not None and fa[0] == fb[0]:
        return fa[1] - fb[1]
    # the arithmetic analyzer may know more (floordiv/floormod identities, ...)
    try:
        d = simplify(a - b)
    except ArithError as exc:  # too deep to analyze: fall back to the whole dimension
        logger.debug("arith.simplify gave up on %s - %s: %s", a, b, exc)
        return None
    return d.value if isinstance(d, IntImm) else None


def _dim_range(indices: list[PrimExpr], extent: PrimExpr) -> Range:
    base = indices[0]
    offsets: list[int] = [0]
    for e in indices[1:]:
        if e is base or structural_key(e) == structural_key(base):
            offsets.append(0)
            continue
        d = _const_difference(e, base)
        if d is None:
            # not a constant offset: the whole dimension is the sound bounding box
            return Range(make_const(0, extent.dtype), extent)
        offsets.append(d)
    lo = min(offsets)
    lo_expr = indices[offsets.index(lo)]
    return Range(lo_expr, make_const(max(offsets) - lo + 1, lo_expr.dtype))


def access_regions(exprs: list[PrimExpr], exclude: tuple[Buffer, ...] = ()) -> list[BufferRegion]:
    """Bounding-box regions of the buffers loaded in ``exprs``, in first-access order.

    Parameters
    ----------
    exprs
        Expressions to scan (children first, so ``A[i] * B[i]`` lists A before B).
    exclude
        Buffers to leave out (a reduction's own output, as in TVM).
    """
    accesses: dict[Buffer, list[tuple[PrimExpr, ...]]] = {}

    def visit(node: Any) -> None:
        if isinstance(node, BufferLoad) and node.buffer not in exclude:
            accesses.setdefault(node.buffer, []).append(node.indices)

    for e in exprs:
        post_order_visit(e, visit)
    out = []
    for buf, idx_list in accesses.items():
        region = tuple(
            _dim_range([idx[d] for idx in idx_list], buf.shape[d]) for d in range(buf.ndim)
        )
        out.append(BufferRegion(buf, region))
    return out
