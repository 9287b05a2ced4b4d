"""``blockize``: wrap the subtree under a loop (or a group of sibling blocks) in a new block.

As TVM 0.27's ``blockize``: the block under the loop is divided by
[`loopir.schedule.subspace.divide`][loopir.schedule.subspace.divide] into an *outer* block over
the loops above (iter vars ``<v>_o``, named ``<block>_o``) and an *inner* block over the loops of
the subtree (iter vars ``<v>_i``, the block's own name); every use of an old iter var ``v``
becomes ``v_o * inner_extent + v_i``. The outer block's reads and writes are the inner
block's with the inner iter vars relaxed over their domains. A reduction block's ``init``
moves to the outer block as a loop nest over a block ``<block>_init`` (the subtree's loops
that its spatial bindings use), and the inner block, which no longer initializes, lists what
it writes among its reads.

The inner block refers to the outer block's iter vars: as in TensorIR, a block sees the iter
vars of the blocks around it (only loop vars must enter a block through its bindings).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs

from loopir.arith import Analyzer
from loopir.errors import ScheduleError
from loopir.ir.buffer import BufferRegion, Range
from loopir.ir.expr import IntImm, PrimExpr, Var
from loopir.ir.functor import collect_vars, substitute
from loopir.ir.stmt import Block, BlockRealize, For, IterKind, IterVar, PrimFunc, SeqStmt, Stmt, seq
from loopir.schedule import region as rg
from loopir.schedule import tree
from loopir.schedule.subspace import Division, NotDivisible, divide

logger = logging.getLogger(__name__)

__all__ = ["blockize", "blockize_blocks"]

_P = "blockize"


@attrs.frozen
class _Parts:
    """What the division of one block gives: the outer iter vars and bindings, the inner
    block (realized), the old-iter-var substitution and the inner iter var domains."""

    outer_vars: tuple[IterVar, ...]
    outer_values: tuple[PrimExpr, ...]
    outer_pred: PrimExpr
    inner: BlockRealize
    subst: dict[Var, PrimExpr]
    inner_doms: dict[Var, Range]
    block: Block  # the old block with its iter vars substituted
    division: Division


def _chain_to_block(loop: For, func: PrimFunc) -> tuple[list[For], BlockRealize]:
    """The loops from ``loop`` down to the only block below it (outermost first)."""
    loops = [loop]
    node = loop.body
    while isinstance(node, For):
        loops.append(node)
        node = node.body
    if not isinstance(node, BlockRealize):
        blocks = tree.child_blocks(loop)
        what = (
            f"{len(blocks)} blocks ({', '.join(r.block.name for r in blocks)})" if len(blocks) != 1
            else f"the block {blocks[0].block.name!r} under a {type(node).__name__}"
        )  # fmt: skip
        raise ScheduleError(
            f"loop {loop.loop_var.name} holds {what}; blockize needs a loop whose subtree is "
            "a chain of loops over one block (blockize a list of sibling blocks instead)",
            primitive=_P, func=func, node=loop,
        )  # fmt: skip
    return loops, node


def _check_inner_loops(loops: Sequence[For], outer: Sequence[For], func: PrimFunc) -> None:
    """The loops moving into the new block must not depend on the loops left outside: a
    block sees outer loop vars only through its bindings."""
    outside = {lp.loop_var for lp in outer}
    for lp in loops:
        if any(v in outside for e in (lp.min, lp.extent) for v in collect_vars(e)):
            raise ScheduleError(
                f"the range of loop {lp.loop_var.name} uses a loop outside the blockized "
                "subtree; the new block could not see it",
                primitive=_P, func=func, node=lp,
            )  # fmt: skip


def _iter_name(iv: IterVar, suffix: str) -> Var:
    return Var(iv.var.name + suffix, iv.var.dtype)


def _divide_block(
    realize: BlockRealize,
    outer: Sequence[For],
    inner: Sequence[For],
    pui: bool,
    func: PrimFunc,
    scope_loop: Stmt,
) -> _Parts:
    blk = realize.block
    try:
        div: Division = divide(
            blk.iter_vars, realize.iter_values, rg.conjuncts(realize.predicate), outer, inner, pui
        )
    except NotDivisible as exc:
        raise ScheduleError(
            f"the bindings of block {blk.name!r} cannot be divided by the loops from "
            f"{_name(scope_loop)} down: {exc} (as TVM: blockize needs bindings that split "
            "into an outer tile index times the tile size plus an index inside the tile)",
            primitive=_P, func=func, node=realize,
        ) from None  # fmt: skip
    outer_vars: list[IterVar] = []
    inner_vars: list[IterVar] = []
    inner_values: list[PrimExpr] = []
    subst: dict[Var, PrimExpr] = {}
    ana = Analyzer()
    for iv, d in zip(blk.iter_vars, div.iters):
        if iv.kind is IterKind.REDUCE and d.inner is None and not ana.can_prove_equal(d.outer_dom.min, iv.dom.min):
            # the outer binding is the old one: so is the domain, whose minimum is where
            # the init runs (a tile of a partitioned reduction may not start there)
            d = attrs.evolve(d, outer_dom=iv.dom)
        vo = IterVar(_iter_name(iv, "_o"), d.outer_dom, iv.kind)
        outer_vars.append(vo)
        one_outer = _is_one(d.outer_dom.extent)
        if d.inner is None or d.inner_dom is None:
            # No inner part: the outer var is the old one (or, simplifying a unit outer
            # iter var away, its one value), as TVM's DeriveBlockBinding.
            subst[iv.var] = d.outer if one_outer and not pui and isinstance(d.outer, IntImm) else vo.var
            continue
        vi = IterVar(_iter_name(iv, "_i"), d.inner_dom, iv.kind)
        inner_vars.append(vi)
        inner_values.append(d.inner)
        ana.bind(vi.var, d.inner_dom)
        if one_outer and _is_zero(d.outer):
            subst[iv.var] = vi.var
        else:
            subst[iv.var] = vo.var * d.inner_dom.extent + vi.var
    new_blk = _substitute_block(blk, subst, ana)
    inner_blk = attrs.evolve(new_blk, iter_vars=tuple(inner_vars), init=None)
    if blk.init is not None:
        # The inner block accumulates without initializing: it reads what it writes (TVM).
        inner_blk = attrs.evolve(inner_blk, reads=(*new_blk.writes, *new_blk.reads))
    inner_r = BlockRealize(tuple(inner_values), rg.conjunction(list(div.inner_predicate)), inner_blk)
    return _Parts(
        tuple(outer_vars), tuple(d.outer for d in div.iters),
        rg.conjunction(list(div.outer_predicate)), inner_r, subst,
        {v.var: v.dom for v in inner_vars}, new_blk, div,
    )  # fmt: skip


def _name(node: Stmt) -> str:
    if isinstance(node, For):
        return f"loop {node.loop_var.name}"
    if isinstance(node, Block):
        return f"block {node.name!r}"
    return type(node).__name__


def _is_one(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 1


def _is_zero(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 0


def _substitute_block(blk: Block, subst: dict[Var, PrimExpr], ana: Analyzer) -> Block:
    """``blk`` with its iter vars replaced, the changed index expressions simplified knowing
    the inner iter var domains (TVM simplifies what the substitution changed)."""
    from loopir.ir.functor import Mutator

    class _Sub(Mutator):
        def visit_Var(self, v: Var) -> PrimExpr:
            return subst.get(v, v)

        def generic_visit(self, node: object) -> object:
            out = super().generic_visit(node)
            if out is not node and isinstance(out, PrimExpr) and _is_index(out):
                return ana.simplify(out)
            return out

    out = _Sub().visit(blk)
    assert isinstance(out, Block)
    return out


def _is_index(e: PrimExpr) -> bool:
    from loopir.ir import dtype as dt

    return dt.is_int(e.dtype) and dt.lanes(e.dtype) == 1


def _relaxed_regions(
    regions: Sequence[BufferRegion], doms: dict[Var, Range], outer_vars: Sequence[IterVar]
) -> tuple[BufferRegion, ...]:
    """``regions`` with the inner iter vars ranging over their domains, clipped to the
    buffer where provably beyond it."""
    # The outer iter vars stay symbolic (TVM's EvalSetRegions relaxes the inner ones only);
    # their domains serve to prove a side beyond the buffer.
    plain = Analyzer()
    ana = Analyzer({iv.var: iv.dom for iv in outer_vars})
    out = []
    for reg in regions:
        ivs = rg.relax_region(reg, {}, doms, plain)
        ivs = [_clip(iv, ext, ana) for iv, ext in zip(ivs, reg.buffer.shape)]
        out.append(rg.intervals_to_region(reg.buffer, ivs, ana))
    return tuple(out)


def _clip(iv: rg.Interval, extent: PrimExpr, ana: Analyzer) -> rg.Interval:
    """``iv`` with a side that provably lies outside ``[0, extent)`` moved onto the bound (a
    tile of an inexact split reaching past the buffer); a side inside stays as it is."""
    hi = ana.simplify(extent - 1)
    zero = IntImm(0, extent.dtype)
    past_lo, past_hi = ana.can_prove(iv.lo < zero), ana.can_prove(iv.hi > hi)
    if not (past_lo or past_hi):
        return iv
    return rg.Interval(zero if past_lo else iv.lo, hi if past_hi else iv.hi)


def _check_init_hoist(
    realize: BlockRealize, parts: _Parts, outer: Sequence[For], loops: Sequence[For], func: PrimFunc
) -> None:
    """The init moves from the block (run at every spatial point when the reduce iter vars
    are at their minimum) to the outer block (run for the whole tile when the outer reduce
    iter vars are at theirs): the same points, when every loop of the subtree feeds a binding
    or the predicate and each reduce iter var's tile starts at its domain's minimum; and no
    reduction loop is bound to threadIdx (a cross-thread reduction keeps its init)."""
    blk = realize.block
    reduce_uses = {v for iv, e in zip(blk.iter_vars, realize.iter_values)
                   if iv.kind is IterKind.REDUCE for v in collect_vars(e)}  # fmt: skip
    for lp in (*outer, *loops):
        if lp.loop_var in reduce_uses and str(lp.thread_tag or "").startswith("threadIdx."):
            # as decompose_reduction: LowerCrossThreadReduction writes this init per thread
            raise ScheduleError(
                f"loop {lp.loop_var.name} feeding a reduction iter var of {blk.name!r} is bound "
                f"to {lp.thread_tag}: a cross-thread reduction keeps its init (lowering writes "
                "it per thread); blockize before binding, or a loop inside the reduction",
                primitive=_P, func=func, node=lp,
            )  # fmt: skip
    fed = {v for e in (*realize.iter_values, realize.predicate) for v in collect_vars(e)}
    for lp in loops:
        if lp.loop_var not in fed and not _is_one(lp.extent):
            raise ScheduleError(
                f"loop {lp.loop_var.name} feeds no iter var of reduction block {blk.name!r}, so "
                "it repeats the reduction, initializing each time; the init moved to the outer "
                "block would run once (blockize at a loop below it)",
                primitive=_P, func=func, node=lp,
            )  # fmt: skip
    ana = Analyzer()
    for iv, d, vo in zip(blk.iter_vars, parts.division.iters, parts.outer_vars):
        if iv.kind is not IterKind.REDUCE:
            continue
        ext = d.inner_dom.extent if d.inner_dom is not None else IntImm(1, iv.var.dtype)
        lo = d.inner_dom.min if d.inner_dom is not None else IntImm(0, iv.var.dtype)
        if not (d.reaches_min and ana.can_prove_equal(vo.dom.min * ext + lo, iv.dom.min)):
            raise ScheduleError(
                f"the reduction over {iv.var.name} of block {blk.name!r} does not start at the "
                f"minimum of its domain {iv.dom} in the outer block's first iteration; its "
                "init cannot move to the outer block",
                primitive=_P, func=func, node=realize,
            )  # fmt: skip


def _outer_init(
    init: Stmt, inner: BlockRealize, loops: Sequence[For], name: str, func: PrimFunc
) -> Stmt:
    """TVM's GenerateOuterInit: the init as a block over the inner spatial iter vars it uses
    (renamed ``<v>_init``), under copies of the subtree loops its bindings use. Of the inner
    predicate, the init keeps the conjuncts over those loops and drops those over reduce
    loops (as ``decompose_reduction``; TVM keeps all, referring to loops it did not copy)."""
    blk = inner.block
    used = set(collect_vars(init))
    ivs: list[IterVar] = []
    values: list[PrimExpr] = []
    vmap: dict[Var, PrimExpr] = {}
    reduce_uses: set[Var] = set()
    for iv, value in zip(blk.iter_vars, inner.iter_values):
        if iv.kind is IterKind.SPATIAL and iv.var in used:
            nv = IterVar(Var(iv.var.name + "_init", iv.var.dtype), iv.dom, iv.kind)
            vmap[iv.var] = nv.var
            ivs.append(nv)
            values.append(value)
        elif iv.kind is IterKind.REDUCE:
            reduce_uses |= set(collect_vars(value))
    loop_vars = {lp.loop_var for lp in loops}
    copied = {v for e in values for v in collect_vars(e)} & loop_vars
    copied |= (set(collect_vars(inner.predicate)) & loop_vars) - reduce_uses
    kept: list[PrimExpr] = []
    for c in rg.conjuncts(inner.predicate):
        over = set(collect_vars(c)) & loop_vars
        if over <= copied:
            kept.append(c)
        elif over & copied:
            raise ScheduleError(
                f"the predicate {c} of block {blk.name!r} mixes reduction loops with spatial "
                "ones; it cannot be split between the init and the update",
                primitive=_P, func=func, node=inner,
            )  # fmt: skip
    writes = tuple(substitute(w, vmap) for w in blk.writes)
    stmt: Stmt = BlockRealize(
        tuple(values), rg.conjunction(kept),
        Block(name, tuple(ivs), (), writes, substitute(init, vmap)),
    )  # fmt: skip
    lvmap: dict[Var, PrimExpr] = {}
    for lp in reversed(loops):
        if lp.loop_var in copied:
            copy = Var(lp.loop_var.name, lp.loop_var.dtype)
            lvmap[lp.loop_var] = copy
            stmt = attrs.evolve(lp, loop_var=copy, body=stmt)
    out: Stmt = substitute(stmt, lvmap)
    return out


def _wrap(stmt: Stmt, loops: Sequence[For]) -> Stmt:
    for lp in reversed(loops):
        stmt = attrs.evolve(lp, body=stmt)
    return stmt


def blockize(func: PrimFunc, loop_var: Var, preserve_unit_iters: bool = True) -> tuple[PrimFunc, str]:
    """Wrap the subtree under loop ``loop_var`` in a new outer block (TVM's ``blockize``).

    Before / after ``blockize(i_1)`` on a 64x32 elementwise block tiled 16x8::

        for i_0, j_0 in T.grid(4, 4):                 for i_0, j_0 in T.grid(4, 4):
          for i_1, j_1 in T.grid(16, 8):                with T.block("B_o"):
            with T.block("B"):                            v_i_o = T.axis.spatial(4, i_0)
              v_i = T.axis.spatial(64, i_0 * 16 + i_1)    v_j_o = T.axis.spatial(4, j_0)
              v_j = T.axis.spatial(32, j_0 * 8 + j_1)     T.reads(A[v_i_o * 16:v_i_o * 16 + 16, ...])
              B[v_i, v_j] = A[v_i, v_j] * 2.0             for i_1, j_1 in T.grid(16, 8):
                                                            with T.block("B"):
                                                              v_i_i = T.axis.spatial(16, i_1)
                                                              v_j_i = T.axis.spatial(8, j_1)
                                                              B[v_i_o * 16 + v_i_i, ...] = ...

    Parameters
    ----------
    func
        The function.
    loop_var
        A loop whose subtree is a chain of loops over one block.
    preserve_unit_iters
        Keep unit (extent-1) outer loops in the outer bindings (TVM's flag); False replaces
        them by their value, and an iter var left with one value by that value.

    Returns
    -------
    (PrimFunc, str)
        The new function and the outer block's name (``<block>_o``).

    Raises
    ------
    ScheduleError
        When the subtree is not a chain of loops over one block, an inner loop's range uses
        an outer loop, or the bindings (or predicate) cannot be divided; the error marks the
        block.
    """
    hit = tree.find_loop(func, loop_var) if isinstance(loop_var, Var) else None
    if hit is None:
        raise ScheduleError(f"loop {loop_var!r} is not in the function", primitive=_P, func=func)
    loop, anc = hit
    inner_loops, realize = _chain_to_block(loop, func)
    outer_loops = tree.enclosing_loops(anc)
    _check_inner_loops(inner_loops, outer_loops, func)
    parts = _divide_block(realize, outer_loops, inner_loops, preserve_unit_iters, func, loop)
    blk = parts.block
    taken = set(tree.block_names(func))
    name = tree.fresh_name(func, blk.name + "_o")
    init = None
    if blk.init is not None:
        _check_init_hoist(realize, parts, outer_loops, inner_loops, func)
        init_name = tree.fresh_name(func, blk.name + "_init", taken | {name})
        init = _outer_init(blk.init, parts.inner, inner_loops, init_name, func)
    outer_blk = Block(
        name, parts.outer_vars,
        _relaxed_regions(blk.reads, parts.inner_doms, parts.outer_vars),
        _relaxed_regions(blk.writes, parts.inner_doms, parts.outer_vars),
        _wrap(parts.inner, inner_loops), init,
    )  # fmt: skip
    new = BlockRealize(parts.outer_values, parts.outer_pred, outer_blk)
    logger.debug("blockize %s: block %s", loop.loop_var.name, name)
    return tree.replace(func, loop, new), name


# --------------------------------------------------------------------------------------------
# The list-of-blocks form
# --------------------------------------------------------------------------------------------


def _lca(anc_lists: Sequence[tuple[Stmt, ...]]) -> Stmt:
    """The deepest statement that is an ancestor of every block (a For or a Block)."""
    common: Stmt | None = None
    for nodes in zip(*anc_lists):
        if any(n is not nodes[0] for n in nodes):
            break
        if isinstance(nodes[0], (For, Block)):
            common = nodes[0]
    assert common is not None  # the root block encloses everything
    return common


def blockize_blocks(
    func: PrimFunc, names: Sequence[str], preserve_unit_iters: bool = True
) -> tuple[PrimFunc, str]:
    """Wrap sibling blocks in one new block (TVM's ``blockize`` of a list of blocks).

    The blocks' lowest common ancestor (a loop or block) must hold them in consecutive
    statements of its body, each a chain of loops over one of the blocks. Every block is
    divided between the loops above the common ancestor (outer, shared: the blocks' outer
    bindings must agree) and the loops below it; the new block ``outer_<b1>_<b2>_`` runs
    their loop nests in order. As in TVM, the blocks may not be reductions with an outer
    reduce iter var.

    Raises
    ------
    ScheduleError
        For fewer than one block, blocks that are not consecutive siblings, outer bindings
        that differ, or bindings that cannot be divided.
    """
    P = _P
    if not names:
        raise ScheduleError("blockize needs at least one block", primitive=P, func=func)
    if len(set(names)) != len(names):
        raise ScheduleError(f"blockize: a block is listed twice in {list(names)}", primitive=P, func=func)
    hits = [rg.get_block(func, n, P) for n in names]
    if any(not anc for _, anc in hits):
        raise ScheduleError("blockize cannot wrap the root block", primitive=P, func=func)
    lca = _lca([anc for _, anc in hits])
    assert isinstance(lca, (For, Block))
    body = lca.body
    seq_items = list(body.seq) if isinstance(body, SeqStmt) else [body]
    index_of: dict[int, int] = {}
    for k, item in enumerate(seq_items):
        for r in tree.child_blocks(item) if not isinstance(item, BlockRealize) else [item]:
            index_of[id(r)] = k
    positions = sorted({index_of.get(id(r), -1) for r, _ in hits})
    if -1 in positions or positions != list(range(positions[0], positions[0] + len(positions))):
        raise ScheduleError(
            f"blocks {list(names)} are not in consecutive statements of {_name(lca)}; "
            "blockize wraps sibling blocks next to each other",
            primitive=P, func=func, node=lca,
        )  # fmt: skip
    wanted = {id(r) for r, _ in hits}
    outer_loops = tree.enclosing_loops((*_ancestors_of(func, lca), lca)) if isinstance(lca, For) else []
    parts_list: list[tuple[_Parts, list[For]]] = []
    for k in positions:
        item = seq_items[k]
        loops, realize = _chain(item, func, lca)
        if id(realize) not in wanted:
            raise ScheduleError(
                f"statement {k} of {_name(lca)} holds block {realize.block.name!r}, which is "
                "not in the list; blockize wraps whole statements",
                primitive=P, func=func, node=realize,
            )  # fmt: skip
        _check_inner_loops(loops, outer_loops, func)
        parts = _divide_block(realize, outer_loops, loops, preserve_unit_iters, func, lca)
        if parts.block.init is not None:
            # TVM's list form drops the init (its GenerateInner clears it) or stops on an
            # outer reduce iter var; a block of several has no single init to move
            raise ScheduleError(
                f"block {realize.block.name!r} is a reduction with an init; blockize of several "
                "blocks takes no outer reduction and moves no init (decompose_reduction first)",
                primitive=P, func=func, node=realize,
            )  # fmt: skip
        parts_list.append((parts, loops))
    return _assemble(func, lca, seq_items, positions, parts_list, names)


def _ancestors_of(func: PrimFunc, node: Stmt) -> tuple[Stmt, ...]:
    hit = tree.find(func, lambda s: s is node)
    assert hit is not None
    return hit[1]


def _chain(item: Stmt, func: PrimFunc, lca: Stmt) -> tuple[list[For], BlockRealize]:
    if isinstance(item, BlockRealize):
        return [], item
    if isinstance(item, For):
        return _chain_to_block(item, func)
    raise ScheduleError(
        f"{_name(lca)} holds a {type(item).__name__} where blockize expects a loop nest over "
        "one block", primitive=_P, func=func, node=lca,
    )  # fmt: skip


def _assemble(
    func: PrimFunc, lca: For | Block, items: list[Stmt], positions: list[int],
    parts_list: list[tuple[_Parts, list[For]]], names: Sequence[str],
) -> tuple[PrimFunc, str]:
    first = parts_list[0][0]
    ana = Analyzer()
    for parts, _ in parts_list[1:]:
        same = len(parts.outer_vars) == len(first.outer_vars) and all(
            ana.can_prove_equal(a.dom.extent, b.dom.extent) and ana.can_prove_equal(x, y)
            for a, b, x, y in zip(parts.outer_vars, first.outer_vars, parts.outer_values, first.outer_values)
        )
        if not same:
            raise ScheduleError(
                f"blocks {list(names)} divide into different outer iterations "
                f"({list(first.outer_values)} vs {list(parts.outer_values)}); blockize of "
                "several blocks needs the same outer bindings",
                primitive=_P, func=func, node=parts.inner,
            )  # fmt: skip
    bodies: list[Stmt] = []
    reads: list[BufferRegion] = []
    writes: list[BufferRegion] = []
    for parts, loops in parts_list:
        # every block refers to the first block's outer iter vars
        remap = {v.var: f.var for v, f in zip(parts.outer_vars, first.outer_vars)}
        inner = substitute(parts.inner, remap)
        bodies.append(_wrap(inner, loops))
        blk = substitute(parts.block, remap)
        reads += _relaxed_regions(blk.reads, parts.inner_doms, first.outer_vars)
        writes += _relaxed_regions(blk.writes, parts.inner_doms, first.outer_vars)
    ana = Analyzer({iv.var: iv.dom for iv in first.outer_vars})
    name = tree.fresh_name(func, "outer_" + "".join(f"{n}_" for n in names))
    outer_blk = Block(
        name, first.outer_vars, tuple(rg.merge_regions(reads, ana)),
        tuple(rg.merge_regions(writes, ana)), seq(*bodies),
    )  # fmt: skip
    new = BlockRealize(first.outer_values, first.outer_pred, outer_blk)
    kept = items[: positions[0]] + [new] + items[positions[-1] + 1 :]
    body = seq(*kept)
    new_lca = attrs.evolve(lca, body=body)
    return tree.replace(func, lca, new_lca), name
