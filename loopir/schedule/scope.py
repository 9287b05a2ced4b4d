"""``set_scope``: change the storage scope of an intermediate buffer in place.

Unlike ``cache_write``, no copy stage is created: the buffer itself moves to the new scope
(TVM's ``set_scope``), so e.g. a per-row scalar can be kept in registers without the
order-sensitive ``compute_inline(cache_write(...))`` workaround.

The scope decides how ``compute_at`` relaxes the buffer's region over thread-bound loops
(semantics.md); regions already computed are not recomputed, as in TVM, so set the scope
before moving the producer when the region should follow the new scope.
"""

from __future__ import annotations

import logging

import attrs

from loopir.errors import ScheduleError
from loopir.ir.buffer import Buffer
from loopir.ir.stmt import Block, PrimFunc
from loopir.schedule import cache, tree
from loopir.schedule import region as rg

logger = logging.getLogger(__name__)


def set_scope(func: PrimFunc, block: str, buffer: cache.BufferArg, scope: str) -> PrimFunc:
    """Set the storage scope of a buffer ``block`` writes.

    Parameters
    ----------
    func
        The function.
    block
        Name of a block writing the buffer.
    buffer
        The buffer's name, an index into ``block``'s writes, or the Buffer (or te Tensor).
        It must be allocated inside the function (a parameter's scope is the caller's).
    scope
        ``"global"``, ``"shared"`` or ``"local"``.

    Returns
    -------
    PrimFunc
        The function with every use and the allocation of the buffer in ``scope``; ``func``
        itself when the buffer already is in ``scope``.

    Raises
    ------
    ScheduleError
        Unknown block or buffer, invalid scope, a function parameter.

    Examples
    --------
    Before::

        B = alloc_buffer((16, 8))
        for i, j in grid(16, 8):
            with block("B"): B[vi, vj] = A[vi, vj] * 2
        for i, j in grid(16, 8):
            with block("C"): C[vi, vj] = B[vi, vj] + 1

    After ``set_scope(func, "B", 0, "shared")``: the same, with
    ``B = alloc_buffer((16, 8), scope="shared")``.
    """
    prim = "set_scope"
    realize, _ = rg.get_block(func, block, prim)
    blk = realize.block
    rg.check_scope(scope, prim, func)
    buf = cache._pick_buffer(func, blk, buffer, blk.writes, "writes", prim)
    if rg.is_param(func, buf):
        raise ScheduleError(
            f"buffer {buf.name!r} is a parameter of {func.name!r}; set_scope changes the scope "
            "of buffers allocated in the function only (use cache_write to stage an output "
            "through another scope)",
            primitive=prim,
            func=func,
            node=blk,
        )
    owner = next(
        (s for s, _ in tree.walk(func)
         if isinstance(s, Block) and any(b is buf for b in s.alloc_buffers)),
        None,
    )  # fmt: skip
    if owner is None:  # pragma: no cover - verify() requires allocated or parameter buffers
        raise ScheduleError(
            f"buffer {buf.name!r} is not allocated by any block", primitive=prim, func=func,
            node=blk,
        )  # fmt: skip
    if buf.scope == scope:
        return func
    new = attrs.evolve(buf, scope=scope)
    out = func.with_body(rg.BufferRedirect({buf: new}).visit(func.body))
    logger.debug("set_scope %s: %s -> %s", buf.name, buf.scope, scope)
    return out


def allocated_written(
    func: PrimFunc, block: str, buffer: cache.BufferArg, prim: str, why: str
) -> tuple[Block, Buffer]:
    """The block and the buffer it writes that ``buffer`` names, which must be allocated in
    the function: for a parameter, a ScheduleError saying ``why``."""
    realize, _ = rg.get_block(func, block, prim)
    blk = realize.block
    buf = cache._pick_buffer(func, blk, buffer, blk.writes, "writes", prim)
    if rg.is_param(func, buf):
        raise ScheduleError(
            f"buffer {buf.name!r} is a parameter of {func.name!r}; {why}",
            primitive=prim, func=func, node=blk,
        )  # fmt: skip
    return blk, buf


# The block annotation loopir.passes.storage_align reads (the two layers share the name only).
ANNOTATION = "buffer_dim_align"


def storage_align(func: PrimFunc, block: str, buffer: cache.BufferArg, axis: int, factor: int,
                  offset: int) -> PrimFunc:  # fmt: skip
    """Pad the stride of ``axis`` of a buffer ``block`` writes so that
    ``stride % factor == offset`` (TVM's ``storage_align``).

    The requirement is recorded on the block as the ``"buffer_dim_align"`` annotation and
    applied when the buffer's allocation is compacted in lowering
    (:mod:`loopir.passes.storage_align`), whatever the tile's final shape. The classic use is a
    shared tile read along columns: with factor 32 and offset 1 on axis 0 a 32 x 32 float tile
    gets row stride 33, and the 32 threads of a warp reading one column hit 32 different banks.

    Parameters
    ----------
    func
        The function.
    block
        Name of a block writing the buffer.
    buffer
        The buffer's name, an index into ``block``'s writes, or the Buffer; it must be
        allocated in the function.
    axis
        The dimension whose stride is padded (negative counts from the end).
    factor, offset
        ``factor >= 1`` and ``0 <= offset < factor``.

    Returns
    -------
    PrimFunc
        The function with the annotation on ``block`` (an earlier requirement for the same
        buffer and axis is replaced).

    Raises
    ------
    ScheduleError
        Unknown block or buffer, a function parameter, an axis out of range, a bad factor or
        offset, or two allocated buffers with the buffer's name.

    Examples
    --------
    Before::

        A_shared = alloc_buffer((32, 32), scope="shared")
        with block("A_shared"): A_shared[v0, v1] = A[v0, v1]

    After ``storage_align(func, "A_shared", 0, 0, 32, 1)``: the block carries
    ``T.block_attr({"buffer_dim_align": (("A_shared", 0, 32, 1),)})``, and the lowered
    allocation is ``A_shared = T.Buffer((32, 32), strides=(33, 1), scope="shared")``.
    """
    from loopir.schedule import annotate

    prim = "storage_align"
    blk, buf = allocated_written(
        func, block, buffer, prim,
        "its layout is the caller's (storage_align pads buffers allocated in the function, e.g. "
        "a cache_read tile)",
    )  # fmt: skip
    ndim = len(buf.shape)
    for name, value in (("axis", axis), ("factor", factor), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScheduleError(f"{name} must be an int, got {value!r}", primitive=prim, func=func, node=blk)
    if not -ndim <= axis < ndim:
        raise ScheduleError(
            f"axis {axis} is out of range for buffer {buf.name!r} of {ndim} dimensions",
            primitive=prim, func=func, node=blk,
        )  # fmt: skip
    if factor < 1 or not 0 <= offset < factor:
        raise ScheduleError(
            f"need factor >= 1 and 0 <= offset < factor, got factor={factor}, offset={offset}",
            primitive=prim, func=func, node=blk,
        )  # fmt: skip
    same_name = [s for s, _ in tree.walk(func) if isinstance(s, Block)
                 for b in s.alloc_buffers if b.name == buf.name]  # fmt: skip
    if len(same_name) > 1:
        raise ScheduleError(
            f"{len(same_name)} allocated buffers are named {buf.name!r}; the requirement is "
            "kept by name until lowering, so it must be unique",
            primitive=prim, func=func, node=blk,
        )  # fmt: skip
    axis %= ndim
    entries = tuple(e for e in blk.annotations.get(ANNOTATION, ()) if tuple(e[:2]) != (buf.name, axis))
    aligned = (*entries, (buf.name, axis, factor, offset))
    return annotate._set(func, block, ANNOTATION, aligned, prim)
