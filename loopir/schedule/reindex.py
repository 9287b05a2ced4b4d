"""``reindex``: stage one buffer access of a block through a buffer laid out like the block's
iteration space (TVM 0.27's ``reindex``), and TVM's ``("read" | "write", index)`` buffer
specifiers.

``reindex(block, ("read", 0))`` on ``B[vi, vj] = A[vj, vi]`` makes ``A_reindex[vi, vj] =
A[vj, vi]`` before the block's loop nest and has the block read ``A_reindex[vi, vj]``; a
``"write"`` specifier has the block write the new buffer and copies it back after the nest.
The new buffer has one dimension per block iter var that the access uses (in the block's
order), of the iter var's ``min + extent``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import attrs

from loopir.errors import ScheduleError
from loopir.ir.buffer import Buffer, BufferRegion
from loopir.ir.equality import structural_equal
from loopir.ir.expr import BufferLoad, IntImm, PrimExpr, Var
from loopir.ir.functor import Mutator, collect_vars, post_order_visit, substitute
from loopir.ir.stmt import (
    Block,
    BlockRealize,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    IterKind,
    IterVar,
    PrimFunc,
    SeqStmt,
    Stmt,
    seq,
)
from loopir.schedule import cache, tree
from loopir.schedule import region as rg

logger = logging.getLogger(__name__)

_P = "reindex"

#: TVM's buffer specifier: which list of the block's regions, and the index in it.
AccessSpec = tuple[str, int]


def access_spec(spec: Any, primitive: str) -> AccessSpec | None:
    """``("read", i)`` / ``("write", i)`` (a tuple, or the list a trace records) as a pair;
    None for anything else (a name, an index, a Buffer)."""
    if not isinstance(spec, (tuple, list)):
        return None
    if (
        len(spec) != 2
        or spec[0] not in ("read", "write")
        or isinstance(spec[1], bool)
        or not isinstance(spec[1], int)
    ):
        raise ScheduleError(
            f"a buffer specifier is ('read', index) or ('write', index), got {spec!r}",
            primitive=primitive,
        )
    return str(spec[0]), int(spec[1])


def resolve_access(
    func: PrimFunc, blk: Block, buffer: Any, primitive: str
) -> tuple[Buffer, str]:
    """The buffer ``buffer`` specifies in ``blk`` and whether it is reindexed as ``"read"``
    or ``"write"`` (TVM's rule for a name or Buffer: a written buffer is a write)."""
    spec = access_spec(buffer, primitive)
    if spec is not None:
        kind, index = spec
        regions = blk.reads if kind == "read" else blk.writes
        what = "reads" if kind == "read" else "writes"
        return cache._pick_buffer(func, blk, index, regions, what, primitive), kind
    both = (*blk.reads, *blk.writes)
    buf = cache._pick_buffer(func, blk, buffer, both, "reads or writes", primitive)
    return buf, "write" if rg.writes_buffer(blk, buf) else "read"


def spec_for(blk: Block, buf: Buffer, kind: str) -> list[Any]:
    """The specifier a trace records for ``buf`` (``["read", 0]``)."""
    regions = blk.reads if kind == "read" else blk.writes
    return [kind, next(i for i, r in enumerate(regions) if r.buffer is buf)]


def _accesses(func: PrimFunc, blk: Block, buf: Buffer) -> tuple[PrimExpr, ...]:
    """The one index tuple every load and store of ``buf`` in ``blk`` uses."""
    found: list[tuple[PrimExpr, ...]] = []

    def visit(n: object) -> None:
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer is buf:
            found.append(n.indices)
        elif isinstance(n, BlockRealize):
            raise ScheduleError(
                f"block {blk.name!r} has the block {n.block.name!r} inside; reindex needs a "
                "leaf block (as in TVM)",
                primitive=_P, func=func, node=blk,
            )  # fmt: skip

    for part in (blk.body, blk.init):
        if part is not None:
            post_order_visit(part, visit)
    if not found:
        raise ScheduleError(
            f"block {blk.name!r} does not load or store {buf.name!r} (it is only in its "
            "region declarations); reindex rewrites the accesses of the buffer",
            primitive=_P, func=func, node=blk,
        )  # fmt: skip
    first = found[0]
    for other in found[1:]:
        if not all(structural_equal(a, b, map_free_vars=False) for a, b in zip(first, other)):
            raise ScheduleError(
                f"block {blk.name!r} accesses {buf.name!r} with different indices "
                f"[{', '.join(map(str, first))}] and [{', '.join(map(str, other))}]; reindex "
                "needs one access pattern (as in TVM)",
                primitive=_P, func=func, node=blk,
            )  # fmt: skip
    return first


def _nest_top(func: PrimFunc, realize: BlockRealize, anc: tuple[Stmt, ...]) -> Stmt:
    """The outermost loop of the block's nest, which must be a chain of loops directly in
    its scope's body (TVM's requirement: the new stage goes right before / after it)."""
    top = rg.highest_own_stmt(realize, anc)
    k = max(i for i, a in enumerate(anc) if isinstance(a, Block))
    below = list(anc[k + 1:])
    if below and isinstance(below[0], SeqStmt):
        below = below[1:]  # the scope's statement list
    if any(not isinstance(a, For) for a in below) or top is not (below[0] if below else realize):
        raise ScheduleError(
            f"block {realize.block.name!r} is not alone in a loop nest directly in its scope "
            "(other statements share its loops); reindex places its copy before / after that "
            "nest, as in TVM: reindex before compute_at, or reindex the other block",
            primitive=_P, func=func, node=realize.block,
        )  # fmt: skip
    return top


class _Rewrite(Mutator):
    """The block's accesses of ``old`` become accesses of ``new`` at ``indices``."""

    def __init__(self, old: Buffer, new: Buffer, indices: Sequence[PrimExpr]) -> None:
        super().__init__()
        self.old, self.new, self.indices = old, new, tuple(indices)

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        if node.buffer is self.old:
            return BufferLoad(self.new, self.indices)
        out: PrimExpr = self.generic_visit(node)
        return out

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        value = self.visit(node.value)
        if node.buffer is self.old:
            return BufferStore(self.new, value, self.indices)
        return node if value is node.value else attrs.evolve(node, value=value)

    def visit_BufferRegion(self, node: BufferRegion) -> BufferRegion:
        if node.buffer is self.old:
            return rg.point_region(self.new, self.indices)
        return node


def reindex(func: PrimFunc, block: str, buffer: Any) -> tuple[PrimFunc, str]:
    """Stage ``block``'s access of ``buffer`` through a buffer indexed by its iter vars.

    Parameters
    ----------
    func
        The function.
    block
        A leaf block that accesses the buffer with one index pattern (all its loads and
        stores use the same indices), alone in a loop nest directly in its scope.
    buffer
        ``("read", i)`` or ``("write", i)`` (an index into the block's reads / writes), the
        buffer's name or the Buffer (a buffer the block writes is then reindexed as a
        write, as in TVM).

    Returns
    -------
    (PrimFunc, str)
        The new function and the name of the copy block: ``<new buffer>_reindex`` for a
        read (``A_reindex_reindex``), ``<buffer>_reindex`` for a write (``C_reindex``), as
        in TVM.

    Raises
    ------
    ScheduleError
        For the TVM preconditions above, and where the copy would differ from what the block
        computes: a read of a buffer the block also writes (the write would be lost), a copy
        whose indices leave the buffer's shape somewhere in the block's domain (the block
        guards those points), a write that is not one iter var per dimension (two points would
        race for one element), a write the block's loops do not make at every point of its
        domain, or a buffer the block reads before writing it without an init.

    Examples
    --------
    Before / after ``reindex(func, "B", ("read", 0))``::

        for i, j in T.grid(8, 16):                 A_reindex = T.alloc_buffer((8, 16))
            with T.block("B"):                     for ax0, ax1 in T.grid(8, 16):
                vi, vj = T.axis.remap("SS", [i, j])    with T.block("A_reindex_reindex"):
                B[vi, vj] = A[vj, vi] * 2.0                A_reindex[v0, v1] = A[v1, v0]
                                                   for i, j in T.grid(8, 16):
                                                       with T.block("B"):
                                                           B[vi, vj] = A_reindex[vi, vj] * 2.0
    """
    realize, anc = rg.get_block(func, block, _P)
    blk = realize.block
    if not anc:
        raise ScheduleError("the root block has no accesses to reindex", primitive=_P, func=func, node=blk)
    buf, kind = resolve_access(func, blk, buffer, _P)
    indices = _accesses(func, blk, buf)
    if kind == "read" and rg.writes_buffer(blk, buf):
        raise ScheduleError(
            f"block {blk.name!r} also writes {buf.name!r}; a read reindex would lose the write "
            f"(reindex it as ('write', {spec_for(blk, buf, 'write')[1]}))",
            primitive=_P, func=func, node=blk,
        )  # fmt: skip
    top = _nest_top(func, realize, anc)
    ana = rg.make_analyzer()
    for iv in blk.iter_vars:
        ana.bind(iv.var, iv.dom)
    indices = tuple(ana.simplify(e) for e in indices)
    used = {v for e in indices for v in collect_vars(e)}
    covered = [iv for iv in blk.iter_vars if iv.var in used]
    _check_in_bounds(func, blk, buf, indices, ana)
    if kind == "write":
        _check_write(func, realize, anc, buf, indices, covered)
    new_buf = Buffer(
        tree.fresh_name(func, f"{buf.name}_reindex"),
        tuple(tree.simplify(iv.dom.min + iv.dom.extent) for iv in covered),
        buf.dtype,
        buf.scope,
    )
    copy_name = _fresh_block(func, f"{(new_buf if kind == 'read' else buf).name}_reindex")
    nest = _copy_nest(copy_name, buf, new_buf, kind, indices, covered)
    rewritten = _Rewrite(buf, new_buf, [iv.var for iv in covered]).visit(blk)
    new_top = tree.replace_in(top, blk, rewritten)
    scope = tree.enclosing_block(anc)
    assert scope is not None  # anc is not empty: at least the root block
    placed = seq(nest, new_top) if kind == "read" else seq(new_top, nest)
    new_scope = tree.replace_in(scope, top, placed)
    assert isinstance(new_scope, Block)
    new_scope = attrs.evolve(new_scope, alloc_buffers=(*new_scope.alloc_buffers, new_buf))
    logger.debug("reindex %s of %s -> %s", buf.name, block, new_buf.name)
    return _replace_block(func, scope, new_scope), copy_name


def _replace_block(func: PrimFunc, old: Block, new: Block) -> PrimFunc:
    if isinstance(func.body, BlockRealize) and func.body.block is old:
        return func.with_body(attrs.evolve(func.body, block=new))
    return tree.replace(func, old, new)


def _fresh_block(func: PrimFunc, base: str) -> str:
    names = set(tree.block_names(func))
    name, k = base, 1
    while name in names:
        name, k = f"{base}_{k}", k + 1
    return name


def _copy_nest(
    name: str, buf: Buffer, new_buf: Buffer, kind: str, indices: Sequence[PrimExpr],
    covered: Sequence[IterVar],
) -> Stmt:  # fmt: skip
    """``new[v] = buf[indices(v)]`` (read) or ``buf[indices(v)] = new[v]`` (write) over the
    covered iter vars' domains, in loops ``ax0, ax1...``."""
    ivars = [Var(f"v{k}", iv.var.dtype) for k, iv in enumerate(covered)]
    target = tuple(substitute(e, {iv.var: v for iv, v in zip(covered, ivars)}) for e in indices)
    mine = tuple(ivars)
    src, src_idx, dst, dst_idx = (buf, target, new_buf, mine) if kind == "read" else (new_buf, mine, buf, target)
    body = BufferStore(dst, BufferLoad(src, src_idx), dst_idx)
    block = Block(
        name,
        tuple(IterVar(v, iv.dom, IterKind.SPATIAL) for v, iv in zip(ivars, covered)),
        (rg.point_region(src, src_idx),),
        (rg.point_region(dst, dst_idx),),
        body,
    )
    loops = [Var(f"ax{k}", iv.var.dtype) for k, iv in enumerate(covered)]
    out: Stmt = BlockRealize(tuple(loops), IntImm(1, "bool"), block)
    for lv, iv in reversed(list(zip(loops, covered))):
        out = For(lv, iv.dom.min, iv.dom.extent, ForKind.SERIAL, out)
    return out


def _check_in_bounds(
    func: PrimFunc, blk: Block, buf: Buffer, indices: Sequence[PrimExpr], ana: Any
) -> None:
    """The copy touches ``buf[indices]`` at every point of the domain, also where the block
    guards the access (a padding ``Select``): each index must stay inside the shape."""
    for d, (e, extent) in enumerate(zip(indices, buf.shape)):
        if not (ana.can_prove(e >= 0) and ana.can_prove(e < extent)):
            raise ScheduleError(
                f"index {e} of {buf.name!r} (dimension {d}, extent {extent}) is not provably "
                f"inside the buffer over block {blk.name!r}'s domain; the copy would access "
                "it at points the block guards (TVM does not check this)",
                primitive=_P, func=func, node=blk,
            )  # fmt: skip


def _check_write(
    func: PrimFunc, realize: BlockRealize, anc: tuple[Stmt, ...], buf: Buffer,
    indices: Sequence[PrimExpr], covered: Sequence[IterVar],
) -> None:  # fmt: skip
    """The copy back writes every point of the covered domain: the block must write each of
    them (else the copy writes garbage) to a distinct element (else the last write would
    differ from the block's), and must not read the buffer before writing it."""
    blk = realize.block
    cov = {iv.var for iv in covered}
    dims = [e for e in indices if collect_vars(e)]
    mapped = [next(iter(collect_vars(e))) for e in dims if len(set(collect_vars(e))) == 1]
    one_each = len(mapped) == len(dims) == len(set(mapped)) == len(cov) and all(
        _is_shift(e, v) for e, v in zip(dims, mapped)
    )
    if not one_each:
        raise ScheduleError(
            f"block {blk.name!r} writes {buf.name!r}[{', '.join(map(str, indices))}]; a write "
            "reindex needs each dimension to be one iter var (plus a constant), each iter var "
            "in one dimension, so that every point has its own element",
            primitive=_P, func=func, node=blk,
        )  # fmt: skip
    if rg.reads_buffer(blk, buf) and blk.init is None:
        raise ScheduleError(
            f"block {blk.name!r} reads {buf.name!r} before writing it and has no init; the new "
            "buffer would be read before anything is written to it",
            primitive=_P, func=func, node=blk,
        )  # fmt: skip
    _check_unconditional(func, blk, buf)
    _check_covers(func, realize, anc, buf, indices, covered)


def _is_shift(e: PrimExpr, v: Var) -> bool:
    """Whether ``e`` is ``v`` plus a term without variables."""
    rest = tree.simplify(e - v)
    return not collect_vars(rest)


def _check_unconditional(func: PrimFunc, blk: Block, buf: Buffer) -> None:
    """A store of ``buf`` in the body (or init) outside any ``if`` or loop of the block."""

    def top_stores(s: Stmt | None) -> list[BufferStore]:
        if isinstance(s, BufferStore):
            return [s]
        if isinstance(s, SeqStmt):
            return [x for c in s.seq for x in top_stores(c)]
        return []

    stores = top_stores(blk.body) + top_stores(blk.init)
    if not any(st.buffer is buf for st in stores):
        inner = any(isinstance(s, (IfThenElse, For)) for s, _ in tree.walk(blk.body))
        why = "under a condition or a loop" if inner else "nowhere"
        raise ScheduleError(
            f"block {blk.name!r} stores {buf.name!r} {why} in its body; a write reindex copies "
            "every point back, so the block must write each one",
            primitive=_P, func=func, node=blk,
        )  # fmt: skip


def _check_covers(
    func: PrimFunc, realize: BlockRealize, anc: tuple[Stmt, ...], buf: Buffer,
    indices: Sequence[PrimExpr], covered: Sequence[IterVar],
) -> None:  # fmt: skip
    """Every point of the covered domain is written by some iteration of the block's loops
    (a predicate or partial bindings would leave points the copy back reads unwritten)."""
    from loopir.schedule.written import Inexact, written_condition

    scope = next(a for a in reversed(anc) if isinstance(a, Block))
    points = [Var(f"p{k}", iv.var.dtype) for k, iv in enumerate(covered)]
    ana = rg.make_analyzer()
    for p, iv in zip(points, covered):
        ana.bind(p, iv.dom)
    element = [substitute(e, {iv.var: p for iv, p in zip(covered, points)}) for e in indices]
    write = rg.point_region(buf, indices)
    try:
        cond = written_condition(realize, anc, scope, write, element, ana)
    except Inexact as exc:
        raise ScheduleError(
            f"cannot show that block {realize.block.name!r} writes every point of its domain "
            f"({exc}); a write reindex copies every point back",
            primitive=_P, func=func, node=realize.block,
        ) from None
    if not tree.is_true(cond) and not ana.can_prove(cond):
        raise ScheduleError(
            f"block {realize.block.name!r} writes {buf.name!r} only where {cond}; a write "
            "reindex copies every point of its domain back, and the others were never written",
            primitive=_P, func=func, node=realize.block,
        )  # fmt: skip


__all__ = ["AccessSpec", "access_spec", "reindex", "resolve_access", "spec_for"]
