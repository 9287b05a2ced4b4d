"""``compute_at`` and ``reverse_compute_at``: move a block under another block's loop.

The moved block gets a fresh loop nest covering exactly the region the other side needs (or
provides) under the loop: the accesses of the consumers (producers) in the loop's subtree are
relaxed over the loops inside the position. ``compute_at`` also relaxes the loops outside it
bound to threads that share the storage (semantics.md, TVM 0.27): ``shared`` the
``threadIdx`` and ``vthread`` loops; ``global`` and ``local`` none (a global producer under a
thread loop computes what that thread's consumers read, as under a serial loop).
``reverse_compute_at`` relaxes no
loop outside the position (as TVM): the consumer covers what the producers wrote in the
current iteration, so a consumer under a thread loop handles its thread's tile only. The
new loops start at 0 and the block's iter vars are bound to ``min + ax``; a region past the
iteration domain is cut back to it where provable, and where it may still leave the domain
(inexact tiles) a predicate clips it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from loopir.errors import ScheduleError
from loopir.ir.buffer import Buffer, Range
from loopir.ir.equality import structural_equal
from loopir.ir.expr import FloorDiv, FloorMod, IntImm, Or, PrimExpr, Var
from loopir.ir.functor import collect_vars, substitute
from loopir.ir.stmt import Block, BlockRealize, For, IterKind, PrimFunc, Stmt, seq
from loopir.schedule import region as rg
from loopir.schedule import tree
from loopir.schedule import written as wr
from loopir.schedule.cross_thread_consumers import check_no_new_conflict

if TYPE_CHECKING:
    from loopir.arith import Analyzer

logger = logging.getLogger(__name__)


def compute_at(
    func: PrimFunc, block: str, loop_var: Var, preserve_unit_loops: bool = False, index: int = -1
) -> PrimFunc:
    """Move producer ``block`` under ``loop_var``, computing what the consumers there need.

    Parameters
    ----------
    func
        The function.
    block
        Name of the producer block. It must be the only writer of the buffers it writes, not
        write a function parameter, and sit alone in its own loop nest.
    loop_var
        Loop variable of the target loop. Every consumer of the block's output must be inside
        this loop, and the block's inputs must be produced before the new position.
    preserve_unit_loops
        Keep loops of extent 1 in the regenerated nest (otherwise the binding is the constant).
    index
        Where among the statements of the loop body the block goes (TVM's ``index``): ``-1``
        the last valid position (just before the first statement holding a consumer), ``-2``
        the first one (just after the last statement holding a producer of the block's
        inputs), or a position ``p >= 0`` in that range (the block goes before statement
        ``p``).

    Returns
    -------
    PrimFunc
        The rewritten function.

    Raises
    ------
    ScheduleError
        On a violated precondition (unknown block or loop, output block, consumers outside
        the loop, a position that breaks a dependence, an unsupported access pattern).

    Examples
    --------
    Before (``B`` produced in full, then consumed per row)::

        for i in range(128):
            for j in range(128):
                with block("B"): B[vi, vj] = A[vi, vj] * 2
        for i in range(128):
            for j in range(128):
                with block("C"): C[vi, vj] = B[vi, vj] + 1

    After ``compute_at(func, "B", i)`` on C's ``i``::

        for i in range(128):
            for ax0 in range(128):
                with block("B"): vi = i; vj = ax0; B[vi, vj] = A[vi, vj] * 2
            for j in range(128):
                with block("C"): C[vi, vj] = B[vi, vj] + 1
    """
    return _move(func, block, loop_var, preserve_unit_loops, reverse=False, index=index)


def reverse_compute_at(
    func: PrimFunc, block: str, loop_var: Var, preserve_unit_loops: bool = False, index: int = -1
) -> PrimFunc:
    """Move consumer ``block`` under ``loop_var``, consuming what the producers there wrote.

    Parameters
    ----------
    func
        The function.
    block
        Name of the consumer block; it must sit alone in its own loop nest. Every producer of
        the buffers it reads must be inside the loop. A block without producers (it reads
        only the function's inputs) is computed whole in each iteration of the loops around
        the position, as in TVM; it must then be the only writer of its output, and its
        consumers must still run after it.
    loop_var
        Loop variable of the target loop. No loop at or above it is relaxed (whatever its
        thread binding): the block covers what the producers under the loop write in the
        current iteration, and its predicate keeps exactly the elements they wrote there
        (their predicates included), so a write-back under a thread loop copies only what
        its thread computed.
    preserve_unit_loops
        Keep loops of extent 1 in the regenerated nest.
    index
        As for :func:`compute_at`: ``-1`` the last valid position in the loop body (before
        the first statement consuming the block's output, else the end), ``-2`` the first
        (just after the last statement holding one of its producers), or ``p >= 0`` in that
        range.

    Returns
    -------
    PrimFunc
        The rewritten function.

    Raises
    ------
    ScheduleError
        On a violated precondition, or when under a thread-bound loop the elements a
        producer writes in one iteration cannot be described exactly (e.g. a fused-then-split
        tile: the block would copy elements another thread computes), or when the block
        would lie among the loops of a cross-thread reduction whose output it accesses
        (:mod:`loopir.schedule.cross_thread_consumers`; TVM accepts it and fails in lowering).

    Examples
    --------
    Before::

        for i in range(128):
            for j in range(128):
                with block("C"): C_local[vi, vj] = A[vi, vj] * 2
        for ax0 in range(128):
            for ax1 in range(128):
                with block("C_local"): C[v0, v1] = C_local[v0, v1]

    After ``reverse_compute_at(func, "C_local", i)``::

        for i in range(128):
            for j in range(128):
                with block("C"): C_local[vi, vj] = A[vi, vj] * 2
            for ax0 in range(128):
                with block("C_local"): v0 = i; v1 = ax0; C[v0, v1] = C_local[v0, v1]
    """
    return _move(func, block, loop_var, preserve_unit_loops, reverse=True, index=index)


def _move(
    func: PrimFunc, block: str, loop_var: Var, preserve_unit_loops: bool, reverse: bool,
    index: int = -1,
) -> PrimFunc:
    prim = "reverse_compute_at" if reverse else "compute_at"
    if isinstance(index, bool) or not isinstance(index, int) or index < -2:
        raise ScheduleError(
            f"index must be -1 (last valid position), -2 (first valid position) or a "
            f"position >= 0 in the loop body, got {index!r}",
            primitive=prim,
            func=func,
        )
    realize, anc_b = rg.get_block(func, block, prim)
    loop, anc_l = rg.get_loop(func, loop_var, prim)
    blk = realize.block
    if not anc_b:
        raise ScheduleError("cannot move the root block", primitive=prim, func=func, node=blk)
    if rg.is_ancestor(realize, anc_l + (loop,)) or rg.is_ancestor(loop, anc_b):
        raise ScheduleError(
            f"block {block!r} is already under loop {loop_var.name!r}; {prim} moves a block "
            "under a loop of another block's nest that does not contain it",
            primitive=prim,
            func=func,
            node=loop,
        )
    scope_b = tree.enclosing_block(anc_b)
    scope_l = tree.enclosing_block(anc_l)
    if scope_b is not scope_l:
        raise ScheduleError(
            f"block {block!r} and loop {loop_var.name!r} are in different block scopes",
            primitive=prim,
            func=func,
            node=loop,
        )
    # The statement to remove: the block and the loops that surround only it (a block that
    # shares loops with others leaves them in place, as TVM's leaf-block removal does).
    top: Stmt = rg.highest_own_stmt(realize, anc_b)
    parent = anc_b[-1] if top is realize else anc_b[[id(a) for a in anc_b].index(id(top)) - 1]
    if isinstance(parent, Block):
        raise ScheduleError(
            f"block {block!r} (with its loops) is the only statement of block "
            f"{parent.name!r}; it cannot be moved out",
            primitive=prim,
            func=func,
            node=blk,
        )

    # The buffers linking the block to the loop's subtree.
    if reverse:
        linked = [r.buffer for r in blk.reads]
        partners_fn = rg.writes_buffer  # producers under the loop
        role, other_role = "consumer", "producer"
    else:
        linked = [r.buffer for r in blk.writes]
        partners_fn = rg.reads_buffer  # consumers under the loop
        role, other_role = "producer", "consumer"
        for buf in linked:
            if rg.is_param(func, buf):
                raise ScheduleError(
                    f"block {block!r} writes the function output {buf.name!r}; an output "
                    "block cannot be computed at a loop (it would be computed only partially)",
                    primitive=prim,
                    func=func,
                    node=blk,
                )
    inside = {id(r) for r in rg.block_realizes(loop)}
    partners: list[tuple[BlockRealize, tuple[Stmt, ...]]] = []
    linked_used: list[Buffer] = []
    for s, anc in tree.walk(func):
        if not isinstance(s, BlockRealize) or s is realize or not anc:
            continue
        if tree.enclosing_block(anc) is not scope_b:
            # as TVM: only the blocks of the same scope are producers/consumers; a block
            # nested in a blockized one is covered by its outer block's regions
            continue
        hits = [b for b in linked if partners_fn(s.block, b)]
        if not hits:
            continue
        if id(s) not in inside:
            raise ScheduleError(
                f"block {s.block.name!r} is a {other_role} of {block!r} (buffer "
                f"{hits[0].name!r}) but is not inside loop {loop_var.name!r}; every "
                f"{other_role} must be under the loop",
                primitive=prim,
                func=func,
                node=loop,
            )
        partners.append((s, anc))
        for b in hits:
            if b not in linked_used:
                linked_used.append(b)
    if not partners and not reverse:
        raise ScheduleError(
            f"no {other_role} of block {block!r} is inside loop {loop_var.name!r}; the "
            f"{role} must be moved to a loop enclosing its {other_role}s",
            primitive=prim,
            func=func,
            node=loop,
        )

    if not partners:  # reverse_compute_at of a block without producers
        _check_sole_writer(func, realize, loop, prim)

    # Region needed (or provided) under the loop, relaxed per storage scope.
    outer = tree.enclosing_loops(anc_l) + [loop]
    ana = rg.make_analyzer(outer)
    need: dict[Buffer, list[rg.Interval]] = {}
    for s, anc in partners:
        try:
            regions = rg.block_regions_under(
                s, anc, loop, outer, "writes" if reverse else "reads", linked_used, ana,
                relax_scope=not reverse,
            )
        except ValueError as exc:
            raise ScheduleError(
                f"cannot analyse block {s.block.name!r} under loop {loop_var.name!r}: {exc}",
                primitive=prim,
                func=func,
                node=s.block,
            ) from None
        for buf, ivs in regions.items():
            need[buf] = rg.union_intervals(need[buf], ivs, ana) if buf in need else ivs
    logger.debug("%s %s at %s: regions %s", prim, block, loop_var.name, need)

    # Solve the moved block's iter var ranges from its accesses of the linked buffers.
    iv_range = _solve_iter_ranges(func, blk, need, ana, prim, reverse)

    if reverse:
        _check_consumer_covered(func, blk, iv_range, outer, ana, prim)

    # Regenerate the loop nest: one loop per iter var whose range is not a single point.
    loops: list[tuple[Var, PrimExpr]] = []
    values: list[PrimExpr] = []
    preds: list[PrimExpr] = []
    for iv in blk.iter_vars:
        dom_lo = iv.dom.min
        dom_hi = ana.simplify(iv.dom.min + iv.dom.extent - 1)
        # a region past the domain (the buffer's shape for a cache copy) is cut back to it
        want = rg.clip_interval(iv_range[iv.var], dom_lo, dom_hi, ana) \
            if iv.var in iv_range else rg.Interval(dom_lo, dom_hi)
        extent = ana.simplify(want.hi - want.lo + 1)
        if _is_one(extent) and not preserve_unit_loops:
            value = want.lo
        else:
            ax = Var(f"ax{len(loops)}", iv.var.dtype)
            loops.append((ax, extent))
            value = ana.simplify(want.lo + ax)
            ana.bind(ax, Range(IntImm(0, ax.dtype), extent))
        values.append(value)
        if iv.var in iv_range:
            # clip to the iteration domain when the region may leave it (inexact tiles)
            if not ana.can_prove(value >= dom_lo):
                preds.append(value >= dom_lo)
            if not ana.can_prove(value <= dom_hi):
                preds.append(value < ana.simplify(iv.dom.min + iv.dom.extent))
    _check_binding_kinds(blk, values, [f.loop_var for f in outer] + [ax for ax, _ in loops],
                         prim, func, loop)  # fmt: skip
    _check_not_repeated(blk, values, preds, outer, prim, func, loop)
    if reverse:
        preds += _written_guard(
            func, blk, values, preds, partners, loop, outer, linked_used, ana, prim
        )
    new_realize = BlockRealize(tuple(values), rg.conjunction(preds), blk)
    new_nest = rg.make_loop_nest(loops, new_realize)

    # Remove the old nest, then insert the new one at the position in the loop body.
    out = rg.remove_block(func, realize, anc_b, prim)
    loop_now, _ = rg.get_loop(out, loop_var, prim)
    kids = rg.body_children(loop_now.body)
    partner_names = {s.block.name for s, _ in partners}
    # TVM placement: before the first child that consumes the block's output.
    consumer_names = (
        {r.block.name for r in rg.leaf_blocks(loop_now) if any(
            rg.reads_buffer(r.block, w.buffer) for w in blk.writes)}
        if reverse else partner_names
    )
    producer_names = {
        r.block.name for r in rg.leaf_blocks(loop_now)
        if any(rg.writes_buffer(r.block, rd.buffer) for rd in blk.reads)
    }  # fmt: skip
    position = _insertion_index(kids, producer_names, consumer_names, index, prim, func, loop)
    new_loop = attrs.evolve(
        loop_now, body=_seq(kids[:position] + [new_nest] + kids[position:])
    )
    out = tree.replace(out, loop_now, new_loop)
    rg.check_order(out, block, prim, node=loop, shown=func)
    check_no_new_conflict(func, out, prim, loop)
    return out


def _solve_iter_ranges(
    func: PrimFunc, blk: Block, need: dict[Buffer, list[rg.Interval]], ana: Analyzer,
    prim: str, reverse: bool,
) -> dict[Var, rg.Interval]:
    """The range of each iter var of the moved block that indexes a linked buffer.

    Each index (other than a plain iter var) is simplified over the iter vars' domains
    (``v // 2`` is 0 when ``v < 2``). It must then be a constant, one iter var (whose range is
    the dimension's), or one of the pair ``v // c``, ``v % c`` that ``transform_layout``
    splits a dimension into: ``v`` ranges over ``[c * q.lo + r.lo, c * q.hi + r.hi]`` for
    the ranges ``q`` and ``r`` of the two dimensions. compute_at takes the whole ``[c * q.lo, c * q.hi + c - 1]`` instead (as TVM
    0.27: the rows the quotient holds, a superset the producer may recompute);
    reverse_compute_at the exact hull (the consumer must not read what was not produced).
    """
    own = blk.reads if reverse else blk.writes
    dom_ana = rg.make_analyzer()
    for iv in blk.iter_vars:
        dom_ana.bind(iv.var, iv.dom)
    iter_set = {iv.var for iv in blk.iter_vars}
    out: dict[Var, rg.Interval] = {}

    def add(v: Var, want: rg.Interval) -> None:
        out[v] = rg.union_intervals([out[v]], [want], ana)[0] if v in out else want

    for reg in own:
        if reg.buffer not in need:
            continue
        splits: dict[tuple[Var, int], dict[str, rg.Interval]] = {}
        for dim, (rng, want) in enumerate(zip(reg.region, need[reg.buffer])):
            index = rng.min
            if not isinstance(index, (Var, IntImm)):  # a plain iter var keeps its range
                index = dom_ana.simplify(index)
            if isinstance(index, IntImm):
                continue
            part = _split_part(index, iter_set) if _is_one(rng.extent) else None
            if _is_one(rng.extent) and isinstance(index, Var) and index in iter_set:
                add(index, want)
            elif part is not None:
                splits.setdefault((part[1], part[2]), {})[part[0]] = want
            else:
                raise ScheduleError(
                    f"block {blk.name!r} accesses {reg.buffer.name!r} at dimension {dim} with "
                    f"index {rng.min} (extent {rng.extent}); {prim} needs each index to be a "
                    "single block iter var, a constant, or one of the pair v // c, v % c of "
                    "transform_layout",
                    primitive=prim,
                    func=func,
                    node=blk,
                )
        for (v, c), parts in splits.items():
            if set(parts) != {"div", "mod"}:
                raise ScheduleError(
                    f"block {blk.name!r} accesses {reg.buffer.name!r} with {v.name} // {c} or "
                    f"{v.name} % {c} without the other; {prim} cannot solve {v.name}'s range",
                    primitive=prim,
                    func=func,
                    node=blk,
                )
            q, r = parts["div"], parts["mod"]
            lo = c * q.lo + (r.lo if reverse else 0)
            hi = c * q.hi + (r.hi if reverse else c - 1)
            add(v, rg.Interval(ana.simplify(lo), ana.simplify(hi)))
    return out


def _split_part(index: PrimExpr, iter_set: set[Var]) -> tuple[str, Var, int] | None:
    """``("div", v, c)`` for ``v // c``, ``("mod", v, c)`` for ``v % c`` (v an iter var, c a
    positive constant), else None."""
    if isinstance(index, (FloorDiv, FloorMod)) and isinstance(index.a, Var) and (
        index.a in iter_set and isinstance(index.b, IntImm) and index.b.value > 0
    ):
        return ("div" if isinstance(index, FloorDiv) else "mod", index.a, index.b.value)
    return None


def _insertion_index(
    kids: list[Stmt], producers: set[str], consumers: set[str], index: int, prim: str,
    func: PrimFunc, loop: For,
) -> int:
    """The child position of the loop body for the moved block (TVM's FindInsertionPoint).

    The valid positions are ``[last producer + 1, first consumer]``: after every statement
    holding a block that writes what the moved block reads, before every one holding a block
    that reads what it writes. An empty range (a dependence cycle through the loop body) is
    left to the order check, which names the blocks.
    """
    last_p = max((i for i, k in enumerate(kids) if rg.contains_block(k, producers)), default=-1)
    first_c = next(
        (i for i, k in enumerate(kids) if rg.contains_block(k, consumers)), len(kids)
    )
    if index == -1:
        return first_c
    if index == -2:
        return min(last_p + 1, first_c)
    if not last_p + 1 <= index <= first_c:
        raise ScheduleError(
            f"index {index} is not a valid position in the body of loop {loop.loop_var.name!r}: "
            f"valid are -1, -2 or {last_p + 1}..{first_c} (after the producers, before the "
            f"consumers of the block; the body has {len(kids)} statements)",
            primitive=prim,
            func=func,
            node=loop,
        )
    return index


def _check_sole_writer(func: PrimFunc, realize: BlockRealize, loop: For, prim: str) -> None:
    """Refuse to recompute a block without producers whose output another block writes.

    A block whose inputs no block writes is computed whole (its full domain) under the loop,
    again in each iteration of the loops around it, as TVM 0.27 does; that is right when the
    recomputation writes the same values again, i.e. when no other block writes its output
    (TVM requires a complete or reduction block: the only writer of its output). A
    decomposed init moved under its update's loop would reset what the update accumulated.
    """
    blk = realize.block
    written = [w.buffer for w in blk.writes]
    for other in rg.leaf_blocks(func):
        if other is realize:
            continue
        for w in other.block.writes:
            if w.buffer in written:
                raise ScheduleError(
                    f"block {blk.name!r} has no producer, so under loop "
                    f"{loop.loop_var.name!r} it would be computed whole in every iteration of "
                    f"the loops around it; block {other.block.name!r} also writes "
                    f"{w.buffer.name}, whose values each recomputation would overwrite",
                    primitive=prim,
                    func=func,
                    node=other.block,
                )


def _check_not_repeated(
    blk: Block, values: list[PrimExpr], preds: list[PrimExpr], outer: list[For], prim: str,
    func: PrimFunc, loop: For,
) -> None:
    """Refuse to repeat a block that accumulates without an init (a decomposed update).

    A loop at or above the position that the new bindings do not use runs the moved block
    again in each of its iterations (its region was relaxed over the loop). That is harmless
    for a block that overwrites, or re-initializes through its init, but an update
    ``C = C + ...`` would add its terms once per iteration.
    """
    if blk.init is not None:
        return
    written = {w.buffer for w in blk.writes}
    if not any(r.buffer in written for r in blk.reads):
        return
    used: set[Var] = set()
    for e in [*values, *preds]:
        used |= set(collect_vars(e))
    for f in outer:
        if f.loop_var not in used and not (isinstance(f.extent, IntImm) and f.extent.value == 1):
            raise ScheduleError(
                f"block {blk.name!r} accumulates into a buffer it reads without an init; under "
                f"loop {loop.loop_var.name!r} it would run again in each iteration of loop "
                f"{f.loop_var.name!r} (which none of its iter vars uses) and add its terms "
                "repeatedly",
                primitive=prim,
                func=func,
                node=loop,
            )


def _check_binding_kinds(
    blk: Block, values: list[PrimExpr], loop_vars: list[Var], prim: str, func: PrimFunc, loop: For
) -> None:
    """Refuse a position where one loop would feed both a spatial and a reduce iter var.

    TensorIR forbids it (``loopir.verify`` rejects it): e.g. a reduction block moved under a
    loop that fuses one of its spatial axes with its reduce axis, as the fused copy loop of a
    cache_read is.
    """
    in_scope = set(loop_vars)
    users: dict[IterKind, dict[Var, str]] = {IterKind.SPATIAL: {}, IterKind.REDUCE: {}}
    for iv, value in zip(blk.iter_vars, values):
        for v in collect_vars(value):
            if v in in_scope:
                users[iv.kind].setdefault(v, iv.var.name)
    for v, spatial in users[IterKind.SPATIAL].items():
        red = users[IterKind.REDUCE].get(v)
        if red is not None:
            raise ScheduleError(
                f"under loop {loop.loop_var.name!r}, block {blk.name!r} would bind both its "
                f"spatial iter var {spatial} and its reduce iter var {red} to loop {v.name}; a "
                "loop cannot feed both (choose a loop that does not mix the two kinds of axes)",
                primitive=prim,
                func=func,
                node=loop,
            )


def _check_consumer_covered(
    func: PrimFunc,
    blk: Block,
    iv_range: dict[Var, rg.Interval],
    outer: list[For],
    ana: Analyzer,
    prim: str,
) -> None:
    """Refuse when the consumer's iterations under the loop, over all its iterations, miss part
    of the consumer's domain.

    The consumer's new loops only cover what the producers provide; iterations that read no
    produced element (a padding copy writes its pad rows without reading) would never run and
    their output would stay unwritten.
    """
    relax = {lp.loop_var: Range(lp.min, lp.extent) for lp in outer}
    for iv in blk.iter_vars:
        want = iv_range.get(iv.var)
        if want is None:
            continue
        lo = ana.int_set(want.lo, relax).min
        hi = ana.int_set(want.hi, relax).max
        dom_hi = ana.simplify(iv.dom.min + iv.dom.extent - 1)
        if not (ana.can_prove(lo <= iv.dom.min) and ana.can_prove(hi >= dom_hi)):
            raise ScheduleError(
                f"block {blk.name!r} iterates {iv.var.name} over [{iv.dom.min}, {dom_hi}] but "
                f"the producers under the loop provide only [{lo}, {hi}] of it; the rest of its "
                "output would never be written (e.g. the pad rows of a padding copy)",
                primitive=prim,
                func=func,
                node=blk,
            )


def _written_guard(
    func: PrimFunc,
    blk: Block,
    values: list[PrimExpr],
    preds: list[PrimExpr],
    partners: list[tuple[BlockRealize, tuple[Stmt, ...]]],
    loop: For,
    outer: list[For],
    linked: list[Buffer],
    ana: Analyzer,
    prim: str,
) -> list[PrimExpr]:
    """Conditions for the consumer's element to have been written in the current iteration.

    The consumer's loops cover the hull of the producers' writes under the loop; this
    restricts it to what they wrote in this iteration, with their predicates (see
    :mod:`loopir.schedule.written`): for each linked buffer, one producer's write must cover
    the element read. Without it, a write-back under a thread loop copies elements its thread
    never computed (threads past the problem size, or elements of another thread's tile).
    When the written set cannot be described exactly, a position under thread-bound loops is
    refused (the consumer might copy what another thread owns); under serial loops alone
    every iteration's copy is overwritten by the one that produced the element, so the
    conditions over the position's loops (as far as they go) suffice.
    """
    val_of = {iv.var: v for iv, v in zip(blk.iter_vars, values)}
    out: list[PrimExpr] = []
    for buf in linked:
        reads = [r for r in blk.reads if r.buffer is buf]
        element = [ana.simplify(substitute(r.min, val_of)) for r in reads[0].region]
        alts: list[PrimExpr] = []
        for s, anc in partners:
            for w in s.block.writes:
                if w.buffer is not buf:
                    continue
                try:
                    if len(reads) > 1 or not all(_is_one(r.extent) for r in reads[0].region):
                        raise wr.Inexact(f"{blk.name!r} reads {buf.name!r} at several points")
                    alts.append(wr.written_condition(s, anc, loop, w, element, ana))
                except wr.Inexact as exc:
                    threads = [lp for lp in outer if rg.thread_kind(lp) is not None]
                    if threads:
                        raise ScheduleError(
                            f"cannot tell which elements of {buf.name!r} block "
                            f"{s.block.name!r} writes in one iteration of loop "
                            f"{loop.loop_var.name!r} ({exc}); under the thread-bound loop "
                            f"{threads[0].loop_var.name!r} the consumer {blk.name!r} could "
                            "copy elements another thread computes (a race, and garbage from "
                            "a per-thread buffer)",
                            primitive=prim,
                            func=func,
                            node=s.block,
                        ) from None
                    alts.append(_fixed_terms(s, anc, outer))
        # what the clip predicates (or an earlier buffer's guard) already say is left out
        terms = [[t for t in rg.conjuncts(a) if not _implied(t, preds + out, ana)] for a in alts]
        if any(not t for t in terms):
            continue  # some producer writes every element the consumer's loops cover
        unique: list[PrimExpr] = []
        for t in terms:
            a = rg.conjunction(t)
            if not any(structural_equal(a, u, map_free_vars=False) for u in unique):
                unique.append(a)
        cond = unique[0]
        for extra in unique[1:]:
            cond = Or(cond, extra)
        out.extend(rg.conjuncts(cond))
    return out


def _fixed_terms(s: BlockRealize, anc: tuple[Stmt, ...], outer: list[For]) -> PrimExpr:
    """The producer predicate's terms over the position's loops only (a weaker guard)."""
    fixed = {lp.loop_var for lp in outer}
    loop_vars = {a.loop_var for a in anc if isinstance(a, For)}
    terms = [c for c in rg.conjuncts(s.predicate) if set(collect_vars(c)) & loop_vars <= fixed]
    return rg.conjunction(terms)


def _implied(g: PrimExpr, preds: list[PrimExpr], ana: Analyzer) -> bool:
    """Whether ``g`` holds wherever the loop ranges and ``preds`` hold (cheap checks)."""
    if ana.can_prove(g):
        return True
    sg = ana.simplify(g)
    # map_free_vars=False: `j_1 < 1` and `ax0 < 1` are different conditions
    return any(structural_equal(sg, ana.simplify(p), map_free_vars=False) for p in preds)


def _is_true(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 1


def _seq(items: list[Stmt]) -> Stmt:
    return seq(*items)


def _is_one(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 1

