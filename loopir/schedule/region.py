"""Region analysis and small tree helpers shared by the data-movement primitives.

The primitives in :mod:`cache`, :mod:`compute_at`, :mod:`inline`, :mod:`reduction` and
:mod:`pad` need the same questions answered:

* which blocks read / write a buffer, and in which textual (= sequential execution) order;
* what region of a buffer a block touches under a loop, when some loops range over their
  whole domain ("relaxed") and the others stay symbolic;
* which loops to relax for a storage scope (semantics.md, "Regions under compute_at depend on
  the storage scope").

Regions are :class:`~loopir.ir.buffer.BufferRegion` values whose ranges are simplified with
:class:`loopir.arith.Analyzer`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs

from loopir.errors import ScheduleError
from loopir.ir import op
from loopir.ir.buffer import SCOPES, Buffer, BufferRegion, Range
from loopir.ir.expr import And, BufferLoad, IntImm, PrimExpr, Var
from loopir.ir.functor import Mutator, post_order_visit, substitute
from loopir.ir.stmt import Block, BlockRealize, For, ForKind, PrimFunc, SeqStmt, Stmt, seq
from loopir.schedule import tree

if TYPE_CHECKING:  # pragma: no cover
    from loopir.arith import Analyzer

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Analyzer access
# --------------------------------------------------------------------------------------------


def make_analyzer(loops: Iterable[For] = ()) -> Analyzer:
    """An :class:`loopir.arith.Analyzer` with the ranges of ``loops`` bound."""
    from loopir.arith import Analyzer  # lazy: keeps importing the schedule cheap

    ana = Analyzer()
    for lp in loops:
        ana.bind(lp.loop_var, Range(lp.min, lp.extent))
    return ana


# --------------------------------------------------------------------------------------------
# Lookups that raise ScheduleError
# --------------------------------------------------------------------------------------------


def get_block(
    func: PrimFunc, name: str, primitive: str
) -> tuple[BlockRealize, tuple[Stmt, ...]]:
    """The BlockRealize of block ``name`` and its ancestors; ScheduleError when missing."""
    if not isinstance(name, str):
        raise ScheduleError(
            f"block must be given by name (str), got {type(name).__name__} {name!r}",
            primitive=primitive,
            func=func,
        )
    hit = tree.find_block_realize(func, name)
    if hit is None:
        known = ", ".join(repr(n) for n in tree.block_names(func))
        raise ScheduleError(
            f"no block named {name!r} (blocks: {known})", primitive=primitive, func=func
        )
    return hit


def get_loop(func: PrimFunc, loop_var: Var, primitive: str) -> tuple[For, tuple[Stmt, ...]]:
    """The For of ``loop_var`` and its ancestors; ScheduleError when missing."""
    if not isinstance(loop_var, Var):
        raise ScheduleError(
            f"loop must be given by its loop Var, got {type(loop_var).__name__} {loop_var!r}",
            primitive=primitive,
            func=func,
        )
    hit = tree.find_loop(func, loop_var)
    if hit is None:
        raise ScheduleError(
            f"no loop with loop variable {loop_var.name!r} in the function",
            primitive=primitive,
            func=func,
        )
    return hit


def root_block(func: PrimFunc, primitive: str) -> Block:
    """The root block (the function body must be a BlockRealize of it)."""
    if not isinstance(func.body, BlockRealize):
        raise ScheduleError(
            "the function body is not a root BlockRealize (was the function lowered?)",
            primitive=primitive,
            func=func,
        )
    return func.body.block


def check_scope(scope: Any, primitive: str, func: PrimFunc) -> str:
    if scope not in SCOPES:
        raise ScheduleError(
            f"invalid storage scope {scope!r}; expected one of {', '.join(SCOPES)}",
            primitive=primitive,
            func=func,
        )
    return cast(str, scope)  # in SCOPES: one of its strings


def with_root_alloc(func: PrimFunc, buffers: Sequence[Buffer], primitive: str) -> PrimFunc:
    """``func`` with ``buffers`` appended to the root block's alloc_buffers."""
    root = root_block(func, primitive)
    realize = func.body
    assert isinstance(realize, BlockRealize)
    new_root = _evolve(root, alloc_buffers=root.alloc_buffers + tuple(buffers))
    return func.with_body(_evolve(realize, block=new_root))


def without_root_alloc(func: PrimFunc, buffer: Buffer) -> PrimFunc:
    """``func`` with ``buffer`` dropped from any block's alloc_buffers."""
    for s, _ in tree.walk(func):
        if isinstance(s, Block) and any(b is buffer for b in s.alloc_buffers):
            new = _evolve(s, alloc_buffers=tuple(b for b in s.alloc_buffers if b is not buffer))
            return tree.replace(func, s, new)
    return func


def _evolve(node: Any, **changes: Any) -> Any:
    return attrs.evolve(node, **changes)


# --------------------------------------------------------------------------------------------
# Blocks, readers and writers
# --------------------------------------------------------------------------------------------


def block_realizes(root: PrimFunc | Stmt) -> list[BlockRealize]:
    """All BlockRealizes below ``root`` in pre-order (= sequential execution order)."""
    return [s for s, _ in tree.walk(root) if isinstance(s, BlockRealize)]


def reads_buffer(block: Block, buffer: Buffer) -> bool:
    return any(r.buffer is buffer for r in block.reads)


def writes_buffer(block: Block, buffer: Buffer) -> bool:
    return any(r.buffer is buffer for r in block.writes)


def is_param(func: PrimFunc, buffer: Buffer) -> bool:
    return any(p is buffer for p in func.params)


def leaf_blocks(root: PrimFunc | Stmt) -> list[BlockRealize]:
    """BlockRealizes below ``root`` that are not the root block of a function."""
    out = []
    for s, anc in tree.walk(root):
        if isinstance(s, BlockRealize) and (anc or not isinstance(root, PrimFunc)):
            out.append(s)
    return out


def check_order(
    func: PrimFunc, block_name: str, primitive: str, node: Any = None, shown: Any = None
) -> None:
    """Check the dependences of block ``block_name`` in sequential (pre-order) order.

    Every other writer of a buffer the block reads must come before it and every other reader
    of a buffer it writes must come after it. Loop-carried reuse of a stale value would show
    up as a reader placed textually before the writer, so the pre-order check suffices for the
    placements the primitives make.
    """
    order = leaf_blocks(func)
    idx = {r.block.name: i for i, r in enumerate(order)}
    me = order[idx[block_name]].block
    here = idx[block_name]
    show = func if shown is None else shown
    if shown is not None:
        _check_writer_order(func, shown, order, me, here, primitive, node)
    for i, r in enumerate(order):
        other = r.block
        if other.name == block_name:
            continue
        for reg in me.reads:
            if writes_buffer(other, reg.buffer) and i > here:
                raise ScheduleError(
                    f"block {block_name!r} would run before {other.name!r}, which produces "
                    f"the buffer {reg.buffer.name!r} it reads",
                    primitive=primitive,
                    func=show,
                    node=node,
                )
        for reg in me.writes:
            if reads_buffer(other, reg.buffer) and i < here:
                raise ScheduleError(
                    f"block {block_name!r} would run after {other.name!r}, which consumes "
                    f"the buffer {reg.buffer.name!r} it writes",
                    primitive=primitive,
                    func=show,
                    node=node,
                )


def _check_writer_order(
    func: PrimFunc, before: PrimFunc, order: list[BlockRealize], me: Block, here: int,
    primitive: str, node: Any,
) -> None:  # fmt: skip
    """Two writers of one buffer keep their order (``before`` is the function before the
    move): the later write is the value that stays, and no read between them need notice a
    swap (a constant fill followed by the in-bound copy of ``decompose_padding``)."""
    old = {r.block.name: i for i, r in enumerate(leaf_blocks(before))}
    if me.name not in old:
        return
    for i, r in enumerate(order):
        other = r.block
        if other.name == me.name or other.name not in old:
            continue
        for reg in me.writes:
            if writes_buffer(other, reg.buffer) and (i < here) != (old[other.name] < old[me.name]):
                raise ScheduleError(
                    f"block {me.name!r} would run {'after' if i < here else 'before'} "
                    f"{other.name!r}, which also writes {reg.buffer.name!r}; of two writes of "
                    "an element the later one stays, so writers keep their order",
                    primitive=primitive,
                    func=before,
                    node=node,
                )


# --------------------------------------------------------------------------------------------
# Loop nests
# --------------------------------------------------------------------------------------------


def loops_between(ancestors: tuple[Stmt, ...], top: Stmt | None) -> list[For]:
    """Loops in ``ancestors`` strictly below ``top`` (all enclosing loops when top is None).

    Raises ValueError when a Block lies in between (nested block scopes are not relaxed
    through).
    """
    start = 0
    if top is not None:
        for i, a in enumerate(ancestors):
            if a is top:
                start = i + 1
                break
        else:
            raise ValueError("top is not an ancestor")
    out: list[For] = []
    for a in ancestors[start:]:
        if isinstance(a, Block):
            raise ValueError("a nested block lies between the loop and the block")
        if isinstance(a, For):
            out.append(a)
    return out


def is_ancestor(node: Stmt, ancestors: tuple[Stmt, ...]) -> bool:
    return any(a is node for a in ancestors)


def thread_kind(loop: For) -> str | None:
    """"blockIdx", "threadIdx", "vthread" or None for a loop."""
    if loop.kind is not ForKind.THREAD_BINDING or loop.thread_tag is None:
        return None
    return loop.thread_tag.split(".")[0]


def relaxed_by_scope(loop: For, scope: str) -> bool:
    """Whether a loop *outside* a compute_at position is relaxed for a storage scope.

    The loops relaxed are those bound to threads that share the storage, as TVM 0.27's
    ``LoopDomainOfSRefTreePath`` / ``CanRelaxStorageUnderThread`` (semantics.md):
    ``global`` relaxes no loop (every (block, thread) iteration computes what its own
    consumers read there, as under a serial loop; relaxing the thread loops would make each
    thread compute, and a lowered reduction accumulate into, every thread's elements),
    ``shared`` the ``threadIdx.*`` and ``vthread.*`` loops (``blockIdx`` stays fixed: the
    copy covers what the whole thread block reads) and ``local`` nothing. Serial (and
    parallel/vectorized/unrolled) loops outside the position are never relaxed: the classic
    ``compute_at`` of an elementwise producer at its consumer's row loop computes one row,
    not the whole tensor.
    """
    return scope == "shared" and thread_kind(loop) in ("threadIdx", "vthread")


def make_loop_nest(loops: Sequence[tuple[Var, PrimExpr]], body: Stmt) -> Stmt:
    """Wrap ``body`` in serial loops ``(var, extent)``, the first one outermost, from 0."""
    out = body
    for var, extent in reversed(loops):
        out = For(var, IntImm(0, var.dtype), extent, ForKind.SERIAL, out)
    return out


def highest_own_stmt(realize: BlockRealize, ancestors: tuple[Stmt, ...]) -> Stmt:
    """The highest ancestor (or the realize) whose subtree contains only ``realize``'s loops."""
    node: Stmt = realize
    for a in reversed(ancestors):
        if isinstance(a, For) and a.body is node:
            node = a
        else:
            break
    return node


def remove_block(func: PrimFunc, realize: BlockRealize, ancestors: tuple[Stmt, ...],
                 primitive: str) -> PrimFunc:
    """Remove ``realize`` and the loops that only surround it."""
    top = highest_own_stmt(realize, ancestors)
    try:
        return tree.replace(func, top, None)
    except ValueError as exc:
        raise ScheduleError(
            f"cannot remove block {realize.block.name!r}: {exc}",
            primitive=primitive,
            func=func,
            node=realize.block,
        ) from None


def body_children(stmt: Stmt) -> list[Stmt]:
    return list(stmt.seq) if isinstance(stmt, SeqStmt) else [stmt]


def contains_block(stmt: Stmt, names: set[str]) -> bool:
    return any(isinstance(s, Block) and s.name in names for s, _ in tree.walk(stmt))


def insertion_point(
    func: PrimFunc,
    writers: set[str],
    readers: set[str],
    primitive: str,
    after_writers: bool,
) -> tuple[Stmt, int]:
    """Where to place a new stage between the ``writers`` and the ``readers`` of a buffer.

    Starting from the root block body, find the statement list in which the last child
    containing a writer precedes the first child containing a reader, descending into a child
    loop nest, or a child block, that contains both. Returns ``(container, index)``: the new stage goes before
    child ``index`` of ``container`` (the root block's body, or a For whose body is the list).
    With ``after_writers`` the index is just after the last writer, otherwise just before the
    first reader (when there is no reader: after the last writer, or at the end).
    """
    root = root_block(func, primitive)
    container: Stmt = root
    body = root.body
    while True:
        kids = body_children(body)
        w = [i for i, k in enumerate(kids) if contains_block(k, writers)]
        r = [i for i, k in enumerate(kids) if contains_block(k, readers)]
        last_w = max(w) if w else -1
        first_r = min(r) if r else len(kids)
        if last_w < first_r:
            idx = last_w + 1 if (after_writers or not r) and w else first_r
            return container, idx
        if len(w) == 1 and len(r) >= 1 and last_w == min(r) == max(w):
            child = kids[last_w]
            # descend through the loop chain of the shared child, and into a block (whose body
            # holds both: a tile's stages, say) that is neither the writer nor a reader
            while True:
                if isinstance(child, For) and not isinstance(child.body, SeqStmt):
                    child = child.body
                elif isinstance(child, BlockRealize) and child.block.name not in writers | readers:
                    child = child.block
                elif isinstance(child, Block) and not isinstance(child.body, SeqStmt):
                    child = child.body
                else:
                    break
            if isinstance(child, (For, Block)) and isinstance(child.body, SeqStmt):
                container, body = child, child.body
                continue
        raise ScheduleError(
            "cannot find a position between the producers "
            f"({', '.join(sorted(writers))}) and the consumers ({', '.join(sorted(readers))})",
            primitive=primitive,
            func=func,
        )


def insert_at(func: PrimFunc, container: Stmt, index: int, new: Stmt) -> PrimFunc:
    """Insert ``new`` before child ``index`` of ``container``'s body (a Block or a For)."""
    kids = body_children(container.body)  # type: ignore[attr-defined]
    kids.insert(index, new)
    new_container = _evolve(container, body=seq(*kids))
    if isinstance(func.body, BlockRealize) and func.body.block is container:
        return func.with_body(_evolve(func.body, block=new_container))
    return tree.replace(func, container, new_container)


# --------------------------------------------------------------------------------------------
# Regions
# --------------------------------------------------------------------------------------------


class Interval:
    """Inclusive symbolic bounds ``[lo, hi]`` of one dimension."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo: PrimExpr, hi: PrimExpr) -> None:
        self.lo = lo
        self.hi = hi

    def __repr__(self) -> str:
        return f"[{self.lo}, {self.hi}]"


def relax_region(
    region: BufferRegion,
    bindings: dict[Var, PrimExpr],
    relax: dict[Var, Range],
    ana: Analyzer,
) -> list[Interval]:
    """Bounds of ``region`` (iter vars replaced by ``bindings``) with ``relax`` vars ranging.

    Returns one inclusive :class:`Interval` per dimension; bounds are symbolic in the vars
    that are not relaxed.
    """
    out: list[Interval] = []
    for rng in region.region:
        lo_e = substitute(rng.min, bindings)
        hi_e = substitute(rng.min + rng.extent - 1, bindings)
        lo = ana.int_set(lo_e, relax).min
        hi = ana.int_set(hi_e, relax).max
        out.append(Interval(ana.simplify(lo), ana.simplify(hi)))
    return out


def union_intervals(a: list[Interval], b: list[Interval], ana: Analyzer) -> list[Interval]:
    """Per-dimension hull of two regions."""
    out = []
    for x, y in zip(a, b):
        out.append(Interval(_min(x.lo, y.lo, ana), _max(x.hi, y.hi, ana)))
    return out


def clip_interval(iv: Interval, lo: PrimExpr, hi: PrimExpr, ana: Analyzer) -> Interval:
    """``iv`` with each side that provably lies beyond ``[lo, hi]`` moved onto the bound.

    A region relaxed over thread loops (a shared copy over its vthreads, a halo) can reach
    past the buffer: the elements there do not exist, and iterating them only to mask them
    with a predicate is wasted work (issue 20 item 2; TVM intersects the region with the
    block's domain). A side is moved only when it is provably out, so the result is exactly
    the intersection on that side; when moving one side would turn a constant extent into a
    symbolic one, the interval is kept (a predicate still clips it, and constant extents keep
    loops unrollable and buffers compactable).
    """
    new_lo = lo if ana.can_prove(iv.lo <= lo) else iv.lo
    new_hi = hi if ana.can_prove(iv.hi >= hi) else iv.hi
    if new_lo is iv.lo and new_hi is iv.hi:
        return iv
    old_ext = ana.simplify(iv.hi - iv.lo + 1)
    new_ext = ana.simplify(new_hi - new_lo + 1)
    if isinstance(old_ext, IntImm) and not isinstance(new_ext, IntImm):
        return iv
    return Interval(ana.simplify(new_lo), ana.simplify(new_hi))


def _min(a: PrimExpr, b: PrimExpr, ana: Analyzer) -> PrimExpr:
    if ana.can_prove(a <= b):
        return a
    if ana.can_prove(b <= a):
        return b
    return ana.simplify(op.min_(a, b))


def _max(a: PrimExpr, b: PrimExpr, ana: Analyzer) -> PrimExpr:
    if ana.can_prove(a >= b):
        return a
    if ana.can_prove(b >= a):
        return b
    return ana.simplify(op.max_(a, b))


def intervals_to_region(buffer: Buffer, ivs: list[Interval], ana: Analyzer) -> BufferRegion:
    return BufferRegion(
        buffer, tuple(Range(iv.lo, ana.simplify(iv.hi - iv.lo + 1)) for iv in ivs)
    )


def point_region(buffer: Buffer, indices: Sequence[PrimExpr]) -> BufferRegion:
    return BufferRegion(buffer, tuple(Range(i, IntImm(1, i.dtype)) for i in indices))


def load_regions(node: Any, exclude: Iterable[Buffer] = ()) -> list[BufferRegion]:
    """Point regions of the distinct loads in ``node`` (first-use order, buffers excluded).

    Loads of one buffer at different indices are merged into their hull with ``min``/``max``
    built lazily by :func:`merge_regions`.
    """
    skip = set(exclude)
    found: list[BufferRegion] = []

    def visit(n: Any) -> None:
        if isinstance(n, BufferLoad) and n.buffer not in skip:
            found.append(point_region(n.buffer, n.indices))

    post_order_visit(node, visit)
    return found


def merge_regions(regions: Sequence[BufferRegion], ana: Analyzer) -> list[BufferRegion]:
    """Merge regions of the same buffer into one hull each (order of first appearance)."""
    by_buf: dict[Buffer, list[Interval]] = {}
    order: list[Buffer] = []
    for reg in regions:
        ivs = [
            Interval(r.min, ana.simplify(r.min + r.extent - 1)) for r in reg.region
        ]
        if reg.buffer in by_buf:
            by_buf[reg.buffer] = union_intervals(by_buf[reg.buffer], ivs, ana)
        else:
            by_buf[reg.buffer] = ivs
            order.append(reg.buffer)
    return [intervals_to_region(b, by_buf[b], ana) for b in order]


class BufferRedirect(Mutator):
    """Replace every use (loads, stores, regions) of some buffers by others."""

    def __init__(self, mapping: dict[Buffer, Buffer]) -> None:
        self.mapping = mapping

    def visit_Buffer(self, node: Buffer) -> Buffer:
        return self.mapping.get(node, node)


def conjunction(conds: Sequence[PrimExpr]) -> PrimExpr:
    """``conds[0] && conds[1] && ...`` or true."""
    if not conds:
        return IntImm(1, "bool")
    out = conds[0]
    for c in conds[1:]:
        out = And(out, c)
    return out


def conjuncts(cond: PrimExpr) -> list[PrimExpr]:
    """Split ``a && b && ...`` into its terms (a constant true gives none)."""
    if isinstance(cond, And):
        return conjuncts(cond.a) + conjuncts(cond.b)
    if isinstance(cond, IntImm) and cond.value == 1:
        return []
    return [cond]


def block_regions_under(
    realize: BlockRealize,
    ancestors: tuple[Stmt, ...],
    loop: For,
    outer: Sequence[For],
    which: str,
    buffers: Iterable[Buffer],
    ana: Analyzer,
    relax_scope: bool = True,
) -> dict[Buffer, list[Interval]]:
    """The region of each of ``buffers`` that ``realize`` reads or writes under ``loop``.

    ``which`` is ``"reads"`` or ``"writes"``. The loops between ``loop`` and the block are
    relaxed over their whole range; with ``relax_scope`` (compute_at), of the loops ``outer``
    (``loop`` and the loops above it, up to the block scope) those that share the buffer's
    storage scope are relaxed too (:func:`relaxed_by_scope`); the others stay symbolic.
    ``reverse_compute_at`` passes ``relax_scope=False``: a consumer placed under the loop
    covers what the producers wrote in the current iteration only (semantics.md). Raises
    ValueError when a nested block lies between ``loop`` and the block.
    """
    wanted = set(buffers)
    inner = loops_between(ancestors, loop)
    bindings = {iv.var: v for iv, v in zip(realize.block.iter_vars, realize.iter_values)}
    out: dict[Buffer, list[Interval]] = {}
    for reg in getattr(realize.block, which):
        if reg.buffer not in wanted:
            continue
        relax = {lp.loop_var: Range(lp.min, lp.extent) for lp in inner}
        for lp in outer if relax_scope else ():
            if relaxed_by_scope(lp, reg.buffer.scope):
                relax[lp.loop_var] = Range(lp.min, lp.extent)
        ivs = relax_region(reg, bindings, relax, ana)
        out[reg.buffer] = union_intervals(out[reg.buffer], ivs, ana) if reg.buffer in out else ivs
    return out


def region_under_loop(
    func: PrimFunc, block: str, loop_var: Var, which: str = "reads",
    primitive: str = "region_under_loop",
) -> list[BufferRegion]:
    """The regions block ``block`` reads (or writes) during one iteration of ``loop_var``.

    Relaxation follows the compute_at rules (see :func:`block_regions_under`). Block
    predicates are ignored; the region is clipped to the buffer's shape where it provably
    reaches past it (:func:`clip_interval`). Extents are simplified; for the DietCode dense
    schedule, ``C``'s read of ``A_shared`` under ``k0`` is
    ``[bx // 18 * 128 : +128, k0 * 4 : +4]``.
    """
    if which not in ("reads", "writes"):
        raise ScheduleError(
            f"which must be 'reads' or 'writes', got {which!r}", primitive=primitive, func=func
        )
    realize, anc = get_block(func, block, primitive)
    loop, anc_l = get_loop(func, loop_var, primitive)
    if not is_ancestor(loop, anc):
        raise ScheduleError(
            f"loop {loop_var.name!r} does not enclose block {block!r}",
            primitive=primitive,
            func=func,
            node=loop,
        )
    outer = tree.enclosing_loops(anc_l) + [loop]
    ana = make_analyzer(outer)
    bufs = [r.buffer for r in getattr(realize.block, which)]
    try:
        regions = block_regions_under(realize, anc, loop, outer, which, bufs, ana)
    except ValueError as exc:
        raise ScheduleError(str(exc), primitive=primitive, func=func, node=loop) from None
    out = []
    for b in dict.fromkeys(bufs):
        ivs = [
            clip_interval(iv, IntImm(0, ext.dtype), ana.simplify(ext - 1), ana)
            for iv, ext in zip(regions[b], b.shape)
        ]
        out.append(intervals_to_region(b, ivs, ana))
    return out
