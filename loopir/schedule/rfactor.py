"""``rfactor``: factor a reduction loop out into a buffer of partial results (TVM semantics)."""

from __future__ import annotations

import logging

import attrs

from loopir.errors import ScheduleError
from loopir.ir.buffer import Buffer, Range
from loopir.ir.expr import BufferLoad, PrimExpr, Var
from loopir.ir.functor import collect_vars, substitute
from loopir.ir.reducer import Reducer, combine, identity, match_reducer
from loopir.ir.stmt import (
    Block,
    BlockRealize,
    BufferStore,
    For,
    IterKind,
    IterVar,
    PrimFunc,
    Stmt,
    seq,
)
from loopir.schedule import region as rg
from loopir.schedule import tree

__all__ = ["rfactor"]

logger = logging.getLogger(__name__)

_P = "rfactor"


def rfactor(func: PrimFunc, loop_var: Var, factor_axis: int) -> tuple[PrimFunc, str]:
    """Factor reduction loop ``loop_var`` of the block under it into a new buffer.

    The reduction block ``B`` (a sum, max or min, see [`loopir.ir.reducer`][loopir.ir.reducer])
    becomes two blocks, as in TVM: ``B_rf`` computes one partial result per iteration of
    ``loop_var`` into ``<C>_rf`` (``C``'s shape with the loop's extent inserted at ``factor_axis``),
    where that loop now feeds a spatial iter var; the write-back block, which keeps the name ``B``,
    reduces ``<C>_rf`` over that axis into ``C`` (with ``B``'s init) under copies of the spatial
    loops and ``loop_var``. Binding the write-back's reduction loop to ``threadIdx.x`` then gives a
    cross-thread reduction (LowerCrossThreadReduction).

    Parameters
    ----------
    func
        The function.
    loop_var
        A loop feeding only reduce iter vars of the one block below it; the loops from the
        outermost one of that block's nest down to the block must be a perfect nest.
    factor_axis
        Where the new dimension goes in ``<C>_rf`` (``0 .. ndim``; negative counts from the
        end, ``-1`` appends).

    Returns
    -------
    (PrimFunc, str)
        The new function and the name of the rfactor block (``<B>_rf``).

    Raises
    ------
    ScheduleError
        A loop that does not feed a reduce iter var, a loop over several blocks, a block that
        is not a sum/max/min reduction, a non-perfect nest, loops feeding both spatial and
        reduce iter vars, a predicate over the reduction loops (an inexact split: the
        partials would start uninitialized), or ``factor_axis`` out of range.

    Examples
    --------
    Before (``k`` split into ``ko, ki``)::

        for i, ko, ki in T.grid(128, 4, 32):
            with T.block("B"):
                vi = T.axis.spatial(128, i); vk = T.axis.reduce(128, ko * 32 + ki)
                with T.init(): B[vi] = 0.0
                B[vi] = B[vi] + A[vi, vk]

    After ``rfactor(ki, 0)``::

        for i, ko, ki in T.grid(128, 4, 32):
            with T.block("B_rf"):
                vi = T.axis.spatial(128, i); v_ki = T.axis.spatial(32, ki)
                v_ko = T.axis.reduce(4, ko)
                with T.init(): B_rf[v_ki, vi] = 0.0
                B_rf[v_ki, vi] = B_rf[v_ki, vi] + A[vi, v_ko * 32 + v_ki]
        for i, ki in T.grid(128, 32):
            with T.block("B"):
                vi = T.axis.spatial(128, i); v_ki = T.axis.reduce(32, ki)
                with T.init(): B[vi] = 0.0
                B[vi] = B[vi] + B_rf[v_ki, vi]
    """
    loop, anc = rg.get_loop(func, loop_var, _P)
    realizes = [n for n, _ in tree.walk(loop.body) if isinstance(n, BlockRealize)]
    if len(realizes) != 1:
        raise ScheduleError(
            f"loop {loop_var.name} must have exactly one block below it, found {len(realizes)}",
            primitive=_P, func=func, node=loop,
        )  # fmt: skip
    realize = realizes[0]
    block = realize.block
    red = match_reducer(block)
    if isinstance(red, str):
        raise ScheduleError(red, primitive=_P, func=func, node=block)
    nest = _nest(func, realize, anc, loop)
    _check(func, realize, nest, loop)
    rf_ext = loop.extent
    ndim = len(red.store.buffer.shape)
    axis = factor_axis + ndim + 1 if factor_axis < 0 else factor_axis
    if not 0 <= axis <= ndim:
        raise ScheduleError(
            f"factor_axis {factor_axis} is out of range for {red.store.buffer.name} with {ndim} "
            f"dimension(s) (expected {-ndim - 1} .. {ndim})",
            primitive=_P, func=func, node=loop,
        )  # fmt: skip
    c = red.store.buffer
    shape = list(c.shape)
    shape.insert(axis, rf_ext)
    rf_buf = Buffer(tree.fresh_name(func, f"{c.name}_rf"), tuple(shape), c.dtype, scope=c.scope)
    rf_name = tree.fresh_name(func, f"{block.name}_rf")
    rf_realize = _rf_block(realize, red, nest, loop, rf_buf, axis, rf_name)
    wb = _write_back(realize, red, nest, loop, rf_buf, axis)
    top = nest[0]
    rf_nest: Stmt = rf_realize
    for lp in reversed(nest):
        rf_nest = attrs.evolve(lp, body=rf_nest)
    out = tree.replace(func, top, rf_nest)
    placed, _ = rg.get_loop(out, top.loop_var, _P)
    out = tree.replace(out, placed, seq(placed, wb))
    out = rg.with_root_alloc(out, [rf_buf], _P)
    logger.debug("rfactor %s at %s -> %s", block.name, loop_var.name, rf_name)
    return out, rf_name


def _nest(func: PrimFunc, realize: BlockRealize, anc: tuple[Stmt, ...], loop: For) -> list[For]:
    """The perfect nest of loops from the top of the block's nest down to the block."""
    found = tree.find_block_realize(func, realize.block.name)
    assert found is not None
    _, banc = found
    loops = tree.enclosing_loops(banc)
    # the top of the nest: the outermost loop whose parent is not a loop (or a block)
    start = 0
    for k in range(len(loops) - 1, 0, -1):
        if loops[k - 1].body is not loops[k]:
            start = k
            break
    nest = loops[start:]
    if loop not in nest:
        raise ScheduleError(
            f"loop {loop.loop_var.name} is not in the perfect nest around block "
            f"{realize.block.name!r} (the loops between it and the block must each have the "
            "next one as their whole body)",
            primitive=_P, func=func, node=loop,
        )  # fmt: skip
    if nest[-1].body is not realize:
        raise ScheduleError(
            f"block {realize.block.name!r} is not the whole body of its innermost loop",
            primitive=_P, func=func, node=nest[-1],
        )  # fmt: skip
    return nest


def _check(func: PrimFunc, realize: BlockRealize, nest: list[For], loop: For) -> None:
    block = realize.block
    spatial_uses: set[Var] = set()
    reduce_uses: set[Var] = set()
    for iv, value in zip(block.iter_vars, realize.iter_values):
        (spatial_uses if iv.kind is IterKind.SPATIAL else reduce_uses).update(collect_vars(value))
    if loop.loop_var not in reduce_uses:
        raise ScheduleError(
            f"loop {loop.loop_var.name} feeds no reduce iter var of block {block.name!r}",
            primitive=_P, func=func, node=loop,
        )  # fmt: skip
    nest_vars = {lp.loop_var for lp in nest}
    for lp in nest:
        if lp.loop_var in spatial_uses and lp.loop_var in reduce_uses:
            raise ScheduleError(
                f"loop {lp.loop_var.name} feeds both spatial and reduce iter vars of block "
                f"{block.name!r} (a fused loop)",
                primitive=_P, func=func, node=lp,
            )  # fmt: skip
        if (set(collect_vars(lp.min)) | set(collect_vars(lp.extent))) & nest_vars:
            raise ScheduleError(
                f"the range of loop {lp.loop_var.name} depends on another loop of the nest",
                primitive=_P, func=func, node=lp,
            )  # fmt: skip
    if set(collect_vars(realize.predicate)) & reduce_uses:
        raise ScheduleError(
            f"block {block.name!r} has a predicate over its reduction loops (an inexact "
            f"split: {realize.predicate}); rfactor needs every partial to start from the init, "
            "so split the reduction by a divisor of its extent (or bind the reduction loop to "
            "threadIdx.x directly, which handles the remainder)",
            primitive=_P, func=func, node=block,
        )  # fmt: skip


def _rf_block(realize: BlockRealize, red: Reducer, nest: list[For], loop: For, rf_buf: Buffer,
              axis: int, name: str) -> BlockRealize:  # fmt: skip
    """``B_rf``: one iter var per reduction loop (the factored one spatial), the original
    reduce iter vars replaced by their bindings."""
    block = realize.block
    reduce_vals = {iv.var: v for iv, v in zip(block.iter_vars, realize.iter_values)
                   if iv.kind is not IterKind.SPATIAL}  # fmt: skip
    used = {v for e in reduce_vals.values() for v in collect_vars(e)}
    spatial = [(iv, v) for iv, v in zip(block.iter_vars, realize.iter_values) if iv.kind is IterKind.SPATIAL]
    loop_ivs: list[tuple[IterVar, PrimExpr]] = []
    lmap: dict[Var, PrimExpr] = {}
    for lp in nest:
        if lp.loop_var not in used:
            continue
        kind = IterKind.SPATIAL if lp is loop else IterKind.REDUCE
        iv = IterVar(Var(f"v_{lp.loop_var.name}", lp.loop_var.dtype), Range(lp.min, lp.extent), kind)
        loop_ivs.append((iv, lp.loop_var))
        lmap[lp.loop_var] = iv.var
    rmap = {v: substitute(e, lmap) for v, e in reduce_vals.items()}
    rf_var = lmap[loop.loop_var]
    idx = list(red.store.indices)
    idx.insert(axis, rf_var)
    value = substitute(red.value, rmap)
    load = BufferLoad(rf_buf, tuple(idx))
    body = BufferStore(rf_buf, combine(red.op, load, value), tuple(idx))
    init = BufferStore(rf_buf, identity(red.op, rf_buf.dtype), tuple(idx))
    ana = rg.make_analyzer(nest)
    reads = rg.merge_regions(rg.load_regions(value), ana)
    ivs = [iv for iv, _ in spatial] + [iv for iv, _ in loop_ivs]
    vals = [v for _, v in spatial] + [v for _, v in loop_ivs]
    new = Block(name, tuple(ivs), tuple(reads), (rg.point_region(rf_buf, idx),), body, init,
                annotations=block.annotations)  # fmt: skip
    return BlockRealize(tuple(vals), realize.predicate, new)


def _write_back(realize: BlockRealize, red: Reducer, nest: list[For], loop: For, rf_buf: Buffer,
                axis: int) -> Stmt:  # fmt: skip
    """``B``: ``C[...] = op(C[...], <C>_rf[..., v, ...])`` under copies of the spatial loops
    and the factored loop."""
    block = realize.block
    spatial = [(iv, v) for iv, v in zip(block.iter_vars, realize.iter_values) if iv.kind is IterKind.SPATIAL]
    spatial_uses = {u for _, v in spatial for u in collect_vars(v)}
    copied = [lp for lp in nest if lp.loop_var in spatial_uses or lp is loop]
    lmap: dict[Var, PrimExpr] = {lp.loop_var: Var(lp.loop_var.name, lp.loop_var.dtype) for lp in copied}
    new_spatial = [IterVar(Var(iv.var.name, iv.var.dtype), iv.dom, IterKind.SPATIAL) for iv, _ in spatial]
    vmap: dict[Var, PrimExpr] = {iv.var: n.var for (iv, _), n in zip(spatial, new_spatial)}
    rv = IterVar(Var(f"v_{loop.loop_var.name}", loop.loop_var.dtype), Range(loop.min, loop.extent), IterKind.REDUCE)
    idx = [substitute(i, vmap) for i in red.store.indices]
    rf_idx = list(idx)
    rf_idx.insert(axis, rv.var)
    c = red.store.buffer
    body = BufferStore(c, combine(red.op, BufferLoad(c, tuple(idx)), BufferLoad(rf_buf, tuple(rf_idx))), tuple(idx))
    init = substitute(block.init, vmap) if block.init is not None else None
    assert isinstance(init, Stmt)
    nest_ana = rg.make_analyzer(nest)
    init_reads = rg.load_regions(init)
    reads = rg.merge_regions([*init_reads, rg.point_region(rf_buf, rf_idx)], nest_ana)
    writes = tuple(attrs.evolve(w, region=tuple(substitute(r, vmap) for r in w.region)) for w in block.writes)
    new = Block(block.name, (*new_spatial, rv), tuple(reads), writes, body, init,
                annotations=block.annotations)  # fmt: skip
    pred = substitute(realize.predicate, lmap)
    stmt: Stmt = BlockRealize(
        (*(substitute(v, lmap) for _, v in spatial), lmap[loop.loop_var]), pred, new
    )
    for lp in reversed(copied):
        new_var = lmap[lp.loop_var]
        assert isinstance(new_var, Var)
        stmt = For(new_var, lp.min, lp.extent, lp.kind, stmt, lp.thread_tag, lp.annotations)
    return stmt

