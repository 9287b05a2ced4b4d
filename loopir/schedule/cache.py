"""``cache_read`` and ``cache_write``: stage a buffer through a copy in another storage scope.

Naming follows TVM: caching ``A`` in ``shared`` creates the buffer ``A_shared`` (``A_shared_1``
... when taken) and a copy block of the same name. The copy block has its own loop nest over
the whole buffer; ``compute_at`` / ``reverse_compute_at`` later shrink it to a tile.

When the producer and the consumers share a loop, the copy has to go inside that loop; there
it covers only what one iteration produces (cache_write) or consumes (cache_read), as in
TVM, with the region rules of compute_at. A whole-buffer copy there would, in each
iteration, read elements that later iterations have not produced yet.
"""

from __future__ import annotations

import logging

from loopir.errors import ScheduleError
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import IntImm, PrimExpr, Var
from loopir.ir.stmt import Block, BlockRealize, BufferStore, IterKind, IterVar, PrimFunc, Stmt
from loopir.schedule import region as rg
from loopir.schedule import tree

logger = logging.getLogger(__name__)


BufferArg = str | int | Buffer  # a name, an index into the block's reads/writes, or a Buffer


def _as_buffer(buffer: object) -> Buffer | None:
    """``buffer`` as a Buffer when it is one, or a te Tensor (through its buffer)."""
    from loopir.te.tensor import Tensor  # lazily: the schedule does not need te otherwise

    if isinstance(buffer, Buffer):
        return buffer
    return buffer.buffer if isinstance(buffer, Tensor) else None


def _pick_buffer(
    func: PrimFunc, blk: Block, buffer: BufferArg, regions: tuple[BufferRegion, ...],
    what: str, primitive: str,
) -> Buffer:
    """The buffer named ``buffer``, at index ``buffer``, or the Buffer ``buffer``, among
    ``regions`` (TVM's cache_read/cache_write accept a buffer or its index)."""
    names = [r.buffer.name for r in regions]
    listed = ", ".join(names) or "none"
    given = _as_buffer(buffer)
    if given is not None:
        for r in regions:
            if r.buffer is given:
                return r.buffer
        # Buffers compare by identity: one of the same name is another function's buffer
        # (e.g. one from before a rewrite that replaced it, or from a different workload).
        same_name = " (a different Buffer of the same name: from another function?)" if (
            given.name in names
        ) else ""
        raise ScheduleError(
            f"block {blk.name!r} does not have buffer {given.name!r}{same_name} in its {what} "
            f"({listed}); pass a buffer the block {'reads' if what == 'reads' else 'writes'}, "
            "its name or its index",
            primitive=primitive,
            func=func,
            node=blk,
        )
    if isinstance(buffer, bool) or not isinstance(buffer, (str, int)):
        raise ScheduleError(
            f"buffer must be a name, an index into the block's {what} or a Buffer, got "
            f"{type(buffer).__name__} {buffer!r}",
            primitive=primitive,
            func=func,
            node=blk,
        )
    if isinstance(buffer, int):
        if not 0 <= buffer < len(regions):
            raise ScheduleError(
                f"buffer index {buffer} is out of range: block {blk.name!r} has "
                f"{len(regions)} {what} ({listed})",
                primitive=primitive,
                func=func,
                node=blk,
            )
        return regions[buffer].buffer
    for r in regions:
        if r.buffer.name == buffer:
            return r.buffer
    raise ScheduleError(
        f"block {blk.name!r} has no buffer named {buffer!r} in its {what} ({listed})",
        primitive=primitive,
        func=func,
        node=blk,
    )


def buffer_index(func: PrimFunc, block: str, buffer: BufferArg, primitive: str) -> str | int:
    """``buffer`` as a trace can record it: a Buffer becomes its index in ``block``'s reads
    (``primitive="cache_read"``) or writes (``"cache_write"``); names and indices are kept.

    Raises
    ------
    ScheduleError
        If ``buffer`` is a Buffer the block does not read (write), or ``block`` is unknown.
    """
    if _as_buffer(buffer) is None:
        return buffer  # type: ignore[return-value]  # checked by the primitive itself
    realize, _ = rg.get_block(func, block, primitive)
    blk = realize.block
    regions = blk.reads if primitive == "cache_read" else blk.writes
    what = "reads" if primitive == "cache_read" else "writes"
    buf = _pick_buffer(func, blk, buffer, regions, what, primitive)
    return next(i for i, r in enumerate(regions) if r.buffer is buf)


def _copy_block(
    name: str, src: Buffer, dst: Buffer
) -> tuple[BlockRealize, list[tuple[Var, PrimExpr]]]:
    """``dst[v...] = src[v...]`` over the whole buffer, wrapped in loops ``ax0, ax1...``."""
    loops = [Var(f"ax{d}") for d in range(src.ndim)]
    ivars = [Var(f"v{d}") for d in range(src.ndim)]
    body = BufferStore(dst, src[tuple(ivars)] if ivars else src[()], tuple(ivars))
    block = Block(
        name,
        tuple(IterVar(v, Range.from_extent(e), IterKind.SPATIAL) for v, e in zip(ivars, src.shape)),
        (rg.point_region(src, ivars),),
        (rg.point_region(dst, ivars),),
        body,
    )
    realize = BlockRealize(tuple(loops), IntImm(1, "bool"), block)
    return realize, list(zip(loops, src.shape))


def cache_read(
    func: PrimFunc,
    block: str,
    buffer: BufferArg,
    scope: str,
    consumer_blocks: list[str] | None = None,
) -> tuple[PrimFunc, str]:
    """Read ``buffer`` through a cache copy in ``scope`` for its consumers.

    Parameters
    ----------
    func
        The function.
    block
        Name of a block that reads the buffer.
    buffer
        The buffer's name, an index into ``block``'s reads, or the Buffer (or te Tensor)
        itself.
    scope
        Storage scope of the cache: ``"global"``, ``"shared"`` or ``"local"``.
    consumer_blocks
        Names of the blocks to redirect to the cache; default: every block reading the
        buffer.

    Returns
    -------
    (PrimFunc, str)
        The new function and the name of the copy block (also the cache buffer's name).

    Raises
    ------
    ScheduleError
        Unknown block or buffer, invalid scope, a consumer that does not read (or also
        writes) the buffer, or no position between the buffer's producer and its consumers.

    Examples
    --------
    Before::

        for i, j, k in grid(64, 64, 64):
            with block("C"): C[vi, vj] += A[vi, vk] * B[vk, vj]

    After ``cache_read(func, "C", "A", "shared")``::

        A_shared = alloc_buffer((64, 64), scope="shared")   # in the root block
        for ax0, ax1 in grid(64, 64):
            with block("A_shared"): A_shared[v0, v1] = A[v0, v1]
        for i, j, k in grid(64, 64, 64):
            with block("C"): C[vi, vj] += A_shared[vi, vk] * B[vk, vj]
    """
    prim = "cache_read"
    realize, _ = rg.get_block(func, block, prim)
    blk = realize.block
    rg.check_scope(scope, prim, func)
    rg.root_block(func, prim)
    buf = _pick_buffer(func, blk, buffer, blk.reads, "reads", prim)

    if consumer_blocks is None:
        consumers = [r.block.name for r in rg.leaf_blocks(func) if rg.reads_buffer(r.block, buf)]
    else:
        if isinstance(consumer_blocks, str) or not all(
            isinstance(c, str) for c in consumer_blocks
        ):
            raise ScheduleError(
                f"consumer_blocks must be a list of block names, got {consumer_blocks!r}",
                primitive=prim,
                func=func,
            )
        consumers = list(dict.fromkeys(consumer_blocks))
        for c in consumers:
            r, _ = rg.get_block(func, c, prim)
            if not rg.reads_buffer(r.block, buf):
                raise ScheduleError(
                    f"consumer block {c!r} does not read buffer {buf.name!r}",
                    primitive=prim,
                    func=func,
                    node=r.block,
                )
    for c in consumers:
        r, _ = rg.get_block(func, c, prim)
        if rg.writes_buffer(r.block, buf):
            raise ScheduleError(
                f"block {c!r} both reads and writes {buf.name!r}; cache_read would read a "
                "stale copy",
                primitive=prim,
                func=func,
                node=r.block,
            )

    name = tree.fresh_name(func, f"{buf.name}_{scope}")
    cache = Buffer(name, buf.shape, buf.dtype, scope)
    copy, loops = _copy_block(name, buf, cache)
    nest = rg.make_loop_nest(loops, copy)

    writers = {r.block.name for r in rg.leaf_blocks(func) if rg.writes_buffer(r.block, buf)}
    container, index = rg.insertion_point(func, writers, set(consumers), prim, after_writers=False)

    redirect = rg.BufferRedirect({buf: cache})
    out = func
    for c in consumers:
        r, _ = rg.get_block(out, c, prim)
        out = tree.replace(out, r.block, redirect.visit(r.block))
    # the container may have been rebuilt by the redirects: find it again by identity path
    container = _refind(out, func, container)
    out = _place(out, container, index, nest, name, reverse=False, source=buf)
    out = rg.with_root_alloc(out, [cache], prim)
    logger.debug("cache_read %s -> %s for %s", buf.name, name, consumers)
    return out, name


def cache_write(
    func: PrimFunc,
    block: str,
    buffer: BufferArg,
    scope: str,
    consumer_blocks: list[str] | None = None,
) -> tuple[PrimFunc, str]:
    """Write ``buffer`` through a cache in ``scope``, copied back after the block.

    Parameters
    ----------
    func
        The function.
    block
        Name of the block writing the buffer; it must be the buffer's only writer.
    buffer
        The buffer's name, an index into ``block``'s writes, or the Buffer (or te Tensor)
        itself.
    scope
        Storage scope of the cache: ``"global"``, ``"shared"`` or ``"local"``.
    consumer_blocks
        Names of consumers that should read the cache directly instead of the written-back
        buffer (TVM's ``consumer_blocks``); default: none, every consumer reads ``buffer``.
        The write-back is placed before the first of the other consumers only.

    Returns
    -------
    (PrimFunc, str)
        The new function and the name of the write-back block (also the cache buffer's name,
        e.g. ``"C_local"``).

    Raises
    ------
    ScheduleError
        Unknown block or buffer, invalid scope, several writers of the buffer, a consumer
        block that does not read the buffer (or is the writer itself).

    Examples
    --------
    Before::

        for i, j, k in grid(64, 64, 64):
            with block("C"): C[vi, vj] += A[vi, vk] * B[vk, vj]

    After ``cache_write(func, "C", "C", "local")``::

        C_local = alloc_buffer((64, 64), scope="local")
        for i, j, k in grid(64, 64, 64):
            with block("C"): C_local[vi, vj] += A[vi, vk] * B[vk, vj]
        for ax0, ax1 in grid(64, 64):
            with block("C_local"): C[v0, v1] = C_local[v0, v1]

    With ``consumer_blocks=["D"]`` for a consumer ``D`` of an intermediate ``C``, ``D``
    reads ``C_local`` and the write-back of ``C`` follows the writer directly.
    """
    prim = "cache_write"
    realize, _ = rg.get_block(func, block, prim)
    blk = realize.block
    rg.check_scope(scope, prim, func)
    rg.root_block(func, prim)
    buf = _pick_buffer(func, blk, buffer, blk.writes, "writes", prim)
    # the blocks nested in a blockized writer are its own (TVM sees the outer block only)
    nested = {r.block.name for r in rg.leaf_blocks(blk.body)}
    if blk.init is not None:
        nested |= {r.block.name for r in rg.leaf_blocks(blk.init)}
    writers = {r.block.name for r in rg.leaf_blocks(func) if rg.writes_buffer(r.block, buf)} - nested
    if writers != {block}:
        others = ", ".join(sorted(writers - {block}))
        raise ScheduleError(
            f"buffer {buf.name!r} is also written by {others}; cache_write needs a single "
            "writer",
            primitive=prim,
            func=func,
            node=blk,
        )
    readers = {
        r.block.name for r in rg.leaf_blocks(func)
        if rg.reads_buffer(r.block, buf) and r.block.name != block and r.block.name not in nested
    }
    direct = _direct_consumers(func, block, buf, consumer_blocks, prim)
    name = tree.fresh_name(func, f"{buf.name}_{scope}")
    cache = Buffer(name, buf.shape, buf.dtype, scope)
    copy, loops = _copy_block(name, cache, buf)
    nest = rg.make_loop_nest(loops, copy)
    container, index = rg.insertion_point(
        func, writers, readers - set(direct), prim, after_writers=True
    )
    redirect = rg.BufferRedirect({buf: cache})
    out = tree.replace(func, blk, redirect.visit(blk))
    for c in direct:
        r, _ = rg.get_block(out, c, prim)
        out = tree.replace(out, r.block, redirect.visit(r.block))
    container = _refind(out, func, container)
    out = _place(out, container, index, nest, name, reverse=True, source=cache)
    out = rg.with_root_alloc(out, [cache], prim)
    logger.debug("cache_write %s -> %s (read directly by %s)", buf.name, name, direct)
    return out, name


def _direct_consumers(
    func: PrimFunc, block: str, buf: Buffer, consumer_blocks: object, prim: str
) -> list[str]:
    """The checked ``consumer_blocks`` of cache_write (names, without repetitions)."""
    if consumer_blocks is None:
        return []
    if isinstance(consumer_blocks, str) or not isinstance(consumer_blocks, (list, tuple)) or not all(
        isinstance(c, str) for c in consumer_blocks
    ):
        raise ScheduleError(
            f"consumer_blocks must be a list of block names, got {consumer_blocks!r}",
            primitive=prim,
            func=func,
        )
    out = list(dict.fromkeys(consumer_blocks))
    order = [r.block.name for r in rg.leaf_blocks(func)]
    for c in out:
        r, _ = rg.get_block(func, c, prim)
        if c != block and rg.reads_buffer(r.block, buf) and order.index(c) < order.index(block):
            # it reads the value from before the writer ran; the cache holds nothing yet
            raise ScheduleError(
                f"consumer block {c!r} reads {buf.name!r} before {block!r} writes it; only "
                "blocks running after the writer can read the cache",
                primitive=prim,
                func=func,
                node=r.block,
            )
        if c == block or not rg.reads_buffer(r.block, buf):
            what = "is the block writing it" if c == block else "does not read it"
            raise ScheduleError(
                f"consumer block {c!r} of buffer {buf.name!r} {what}; consumer_blocks lists "
                "blocks that read the buffer, to redirect them to the cache",
                primitive=prim,
                func=func,
                node=r.block,
            )
    return out


def _place(func: PrimFunc, container: Stmt, index: int, nest: Stmt, name: str,
           reverse: bool, source: Buffer) -> PrimFunc:  # fmt: skip
    """Insert the copy ``nest`` (block ``name``) at child ``index`` of ``container``.

    In the root block the copy covers the whole buffer. Inside a loop it is first put at the
    level of the block holding the loop (the root, or a nested block), just before
    (cache_read) or after (cache_write) the nest holding the loop, then moved under the loop by compute_at / reverse_compute_at, which shrink it to
    what one iteration needs. When that move is refused (e.g. a consumer outside the loop
    reads the cache), the whole-buffer copy stays at the position found -- unless the loop
    produces ``source``, the buffer copied from, which is a ScheduleError.
    """
    from loopir.ir.stmt import For
    from loopir.schedule import compute_at as ca

    if not isinstance(container, For):
        return rg.insert_at(func, container, index, nest)
    # the block whose body holds the loop: the root, or a block nested in it (a tile's stages)
    found = tree.find_loop(func, container.loop_var)
    scope = (tree.enclosing_block(found[1]) if found else None) or func.body.block  # type: ignore[attr-defined]
    kids = rg.body_children(scope.body)
    top = next(
        (i for i, k in enumerate(kids) if tree.find_loop(k, container.loop_var) is not None),
        None,
    )
    if top is not None:
        staged = rg.insert_at(func, scope, top + 1 if reverse else top, nest)
        try:
            return ca._move(staged, name, container.loop_var, False, reverse=reverse)
        except ScheduleError as exc:
            logger.debug("%s: keeping the whole-buffer copy in the loop (%s)", name, exc.message)
    # A whole-buffer copy in the loop is only right when the loop does not produce what it
    # copies: otherwise each iteration would copy elements no iteration has produced yet.
    if any(rg.writes_buffer(r.block, source) for r in rg.leaf_blocks(container)):
        raise ScheduleError(
            f"the copy {name!r} must go inside loop {container.loop_var.name!r}, where "
            f"{source.name!r} is produced, but it cannot be shrunk to what one iteration "
            "produces (a consumer outside the loop also reads the cache); move the consumers "
            "first or cache a buffer the loop does not produce",
            primitive="cache_write" if reverse else "cache_read",
            func=func,
            node=container,
        )
    return rg.insert_at(func, container, index, nest)


def _refind(new: PrimFunc, old: PrimFunc, container: Stmt) -> Stmt:
    """The node of ``new`` at the position ``container`` had in ``old``.

    Containers are the root block, a nested block or a For; a For keeps its loop var through
    rebuilds, a block its name, the root block is the body's block.
    """
    from loopir.ir.stmt import Block, For

    if isinstance(container, For):
        hit = tree.find_loop(new, container.loop_var)
        assert hit is not None
        return hit[0]
    assert isinstance(new.body, BlockRealize)
    if isinstance(container, Block) and container is not old.body.block:  # type: ignore[attr-defined]
        realize = tree.find_block_realize(new, container.name)
        assert realize is not None
        return realize[0].block
    return new.body.block
