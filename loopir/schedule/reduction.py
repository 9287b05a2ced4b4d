"""``decompose_reduction``: hoist a reduction block's ``init`` into its own block."""

from __future__ import annotations

import logging

import attrs

from loopir.errors import ScheduleError
from loopir.ir.expr import IntImm, PrimExpr, Var
from loopir.ir.functor import collect_vars, substitute
from loopir.ir.stmt import Block, BlockRealize, For, IterKind, IterVar, PrimFunc, Stmt, seq
from loopir.schedule import region as rg
from loopir.schedule import tree

logger = logging.getLogger(__name__)


def _no_init(func: PrimFunc, blk: Block) -> str:
    """Why ``blk`` has no init: decomposed before (reduce iter vars, its init in another block)
    or not a reduction at all."""
    if not any(iv.kind is IterKind.REDUCE for iv in blk.iter_vars):
        return f"block {blk.name!r} is not a reduction block (it has no init)"
    written = {w.buffer for w in blk.writes}
    inits = [
        r.block.name for r in rg.block_realizes(func)
        if r.block is not blk and r.block.name.startswith(f"{blk.name}_init")
        and any(w.buffer in written for w in r.block.writes)
    ]  # fmt: skip
    where = f" (its init is block {inits[0]!r})" if inits else ""
    return (
        f"block {blk.name!r} was already decomposed{where}: it has reduce iter vars but no init "
        "left to hoist; decompose_reduction applies once per block"
    )


def decompose_reduction(func: PrimFunc, block: str, loop_var: Var) -> tuple[PrimFunc, str]:
    """Split reduction ``block`` into an init block placed before ``loop_var`` and an update.

    The init block (named ``<block>_init``) has the block's spatial iter vars only, bound
    through copies (``i_init``) of the loops from ``loop_var`` down to the block whose
    variables the spatial bindings use; reduce-only loops are not copied. Conjuncts of the
    block predicate over copied or outer loops are kept for the init block (inexact tiles),
    those over reduce-only loops are dropped. The update block loses its ``init`` and lists
    the output among its reads.

    Parameters
    ----------
    func
        The function.
    block
        Name of a reduction block (a block with ``init``).
    loop_var
        A loop enclosing the block; no loop above it may feed a reduce iter var (the init
        would otherwise run in every iteration of that reduction loop).

    Returns
    -------
    (PrimFunc, str)
        The new function and the init block's name.

    Raises
    ------
    ScheduleError
        Not a reduction block or one already decomposed (said as such), a loop that does not enclose the block, a reduction loop above
        the position, or a predicate mixing copied and reduce-only loops.

    Examples
    --------
    Before::

        for i, j, k in grid(64, 64, 64):
            with block("C"):
                with init(): C[vi, vj] = 0.0
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    After ``decompose_reduction(func, "C", k)``::

        for i, j in grid(64, 64):
            for ... (no loop: k is reduce-only)
            with block("C_init"): C[vi, vj] = 0.0
            for k in range(64):
                with block("C"): C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
    """
    prim = "decompose_reduction"
    realize, anc = rg.get_block(func, block, prim)
    loop, _ = rg.get_loop(func, loop_var, prim)
    blk = realize.block
    if blk.init is None:
        raise ScheduleError(_no_init(func, blk), primitive=prim, func=func, node=blk)
    loops = tree.enclosing_loops(anc)
    pos = next((i for i, lp in enumerate(loops) if lp is loop), None)
    if pos is None:
        raise ScheduleError(
            f"loop {loop_var.name!r} does not enclose block {block!r} (within its scope)",
            primitive=prim,
            func=func,
            node=loop,
        )
    spatial = [(iv, v) for iv, v in zip(blk.iter_vars, realize.iter_values)
               if iv.kind is IterKind.SPATIAL]
    reduce_vals = [v for iv, v in zip(blk.iter_vars, realize.iter_values)
                   if iv.kind is IterKind.REDUCE]
    reduce_uses = {v for e in reduce_vals for v in collect_vars(e)}
    for lp in loops:
        if lp.loop_var in reduce_uses and str(lp.thread_tag or "").startswith("threadIdx."):
            # a cross-thread reduction: LowerCrossThreadReduction writes the init itself (per
            # thread, then the write-back); split off, the block would be no reduction to lower
            raise ScheduleError(
                f"loop {lp.loop_var.name!r} feeding a reduction iter var of {block!r} is bound "
                f"to {lp.thread_tag}: a cross-thread reduction keeps its init (lowering writes "
                "it per thread); decompose before binding, or do not decompose",
                primitive=prim,
                func=func,
                node=lp,
            )
    for lp in loops[:pos]:
        if lp.loop_var in reduce_uses:
            raise ScheduleError(
                f"loop {lp.loop_var.name!r} above {loop_var.name!r} feeds a reduction iter var "
                f"of {block!r}; the init block would re-initialize in each of its iterations",
                primitive=prim,
                func=func,
                node=lp,
            )
    spatial_uses = {v for _, e in spatial for v in collect_vars(e)}
    # A loop at or below the position that feeds no binding nor the predicate repeats the
    # whole reduction (a producer recomputed per iteration, e.g. after compute_at under a
    # blockIdx loop relaxes it): with the init hoisted above it, later repetitions would add
    # onto the finished sums instead of starting again from the identity.
    pred_uses = set(collect_vars(realize.predicate))
    for lp in loops[pos:]:
        used = lp.loop_var in spatial_uses or lp.loop_var in reduce_uses or lp.loop_var in pred_uses
        if not used and not (isinstance(lp.extent, IntImm) and lp.extent.value == 1):
            raise ScheduleError(
                f"loop {lp.loop_var.name!r} at or below {loop_var.name!r} feeds no iter var of "
                f"{block!r}, so the reduction is repeated in each of its iterations; its init "
                "cannot be hoisted above it (decompose at a loop below it)",
                primitive=prim,
                func=func,
                node=lp,
            )
    # A loop that feeds no iter var but appears in the predicate (its binding simplified away,
    # e.g. an extent-1 dimension) still selects which spatial points run: copy it as spatial.
    inner = loops[pos:]
    inner_vars = {lp.loop_var for lp in inner}
    spatial_uses |= (set(collect_vars(realize.predicate)) & inner_vars) - reduce_uses
    copied = [lp for lp in inner if lp.loop_var in spatial_uses]
    dropped = {lp.loop_var for lp in inner if lp.loop_var not in spatial_uses}
    vmap: dict[Var, PrimExpr] = {
        lp.loop_var: Var(f"{lp.loop_var.name}_init", lp.loop_var.dtype) for lp in copied
    }

    # Predicate: keep conjuncts over kept loops only.
    kept: list[PrimExpr] = []
    for c in rg.conjuncts(realize.predicate):
        term_vars = set(collect_vars(c))
        if term_vars & dropped:
            if term_vars & (spatial_uses | {lp.loop_var for lp in loops[:pos]}):
                raise ScheduleError(
                    f"the predicate term {c} of {block!r} mixes reduction loops with spatial "
                    "ones; it cannot be split between the init and the update",
                    primitive=prim,
                    func=func,
                    node=blk,
                )
            continue
        kept.append(substitute(c, vmap))

    new_ivars = [IterVar(Var(iv.var.name, iv.var.dtype), iv.dom, IterKind.SPATIAL)
                 for iv, _ in spatial]
    ivmap: dict[Var, PrimExpr] = {iv.var: n.var for (iv, _), n in zip(spatial, new_ivars)}
    init_body = substitute(blk.init, ivmap)
    ana = rg.make_analyzer(loops)
    reads = rg.merge_regions(rg.load_regions(init_body), ana)
    writes = [substitute(w, ivmap) for w in blk.writes]
    name = tree.fresh_name(func, f"{block}_init")
    init_block = Block(name, tuple(new_ivars), tuple(reads), tuple(writes), init_body)
    init_realize = BlockRealize(
        tuple(substitute(v, vmap) for _, v in spatial), rg.conjunction(kept), init_block
    )
    nest: Stmt = init_realize
    for lp in reversed(copied):
        new_var = vmap[lp.loop_var]
        assert isinstance(new_var, Var)
        nest = For(new_var, lp.min, lp.extent, lp.kind, nest, lp.thread_tag, lp.annotations)

    # The update: no init; its output is now also an input.
    reads_now = list(blk.reads)
    for w in blk.writes:
        if not rg.reads_buffer(blk, w.buffer):
            reads_now.insert(0, w)
    update = attrs.evolve(blk, init=None, reads=tuple(reads_now))
    out = tree.replace(func, blk, update)
    loop_now, _ = rg.get_loop(out, loop_var, prim)
    out = tree.replace(out, loop_now, seq(nest, loop_now))
    logger.debug("decompose_reduction %s at %s -> %s", block, loop_var.name, name)
    return out, name
