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
