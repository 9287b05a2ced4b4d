"""``compute_inline`` and ``reverse_compute_inline``: fuse elementwise blocks into neighbours."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from loopir.errors import ScheduleError
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.equality import structural_equal
from loopir.ir.expr import BufferLoad, IntImm, PrimExpr, Select, Var
from loopir.ir.functor import Mutator, collect_vars, post_order_visit, substitute
from loopir.ir.stmt import Block, BufferStore, IfThenElse, IterKind, PrimFunc, Stmt
from loopir.schedule import region as rg
from loopir.schedule import tree

if TYPE_CHECKING:  # pragma: no cover
    from loopir.arith import Analyzer

logger = logging.getLogger(__name__)


def _as_select_store(stmt: Stmt) -> Stmt:
    """``if c: X[idx] = a else: X[idx] = b`` as the one store ``X[idx] = Select(c, a, b)``.

    This is the body of a pad block (``pad``'s input copies, a te pad written with a guarded
    store); TVM inlines it as ``if_then_else``. Select is lazy in the executors (C ``?:``), so
    the out-of-bounds load in the unselected branch is never performed. Nested ifs are
    folded; anything else (an ``if`` without ``else``, two buffers or two index lists) is
    returned unchanged and refused by the caller.
    """
    if not isinstance(stmt, IfThenElse) or stmt.else_case is None:
        return stmt
    a, b = _as_select_store(stmt.then_case), _as_select_store(stmt.else_case)
    if not (isinstance(a, BufferStore) and isinstance(b, BufferStore)) or a.buffer is not b.buffer:
        return stmt
    if len(a.indices) != len(b.indices) or not all(
        structural_equal(x, y, map_free_vars=False) for x, y in zip(a.indices, b.indices)
    ):
        return stmt
    return BufferStore(a.buffer, Select(stmt.condition, a.value, b.value), a.indices)


def _check_simple(func: PrimFunc, blk: Block, prim: str, what: str) -> BufferStore:
    """The single BufferStore body of an elementwise (spatial, init-free) block."""
    if blk.init is not None or any(iv.kind is not IterKind.SPATIAL for iv in blk.iter_vars):
        raise ScheduleError(
            f"{what} block {blk.name!r} is a reduction block; only spatial blocks without "
            "init can be inlined",
            primitive=prim,
            func=func,
            node=blk,
        )
    if not isinstance(blk.body, BufferStore):
        raise ScheduleError(
            f"{what} block {blk.name!r} must have a single BufferStore as its body, got "
            f"{type(blk.body).__name__}",
            primitive=prim,
            func=func,
            node=blk,
        )
    if blk.alloc_buffers:
        raise ScheduleError(
            f"{what} block {blk.name!r} allocates buffers; it cannot be inlined",
            primitive=prim,
            func=func,
            node=blk,
        )
    if len(blk.writes) != 1:
        raise ScheduleError(
            f"{what} block {blk.name!r} writes {len(blk.writes)} buffers; exactly one is needed",
            primitive=prim,
            func=func,
            node=blk,
        )
    return blk.body


class _InlineLoads(Mutator):
    """Replace loads of ``buffer`` by ``value`` with the index vars substituted."""

    def __init__(self, buffer: Buffer, index_vars: list[Var], value: PrimExpr) -> None:
        self.buffer = buffer
        self.index_vars = index_vars
        self.value = value

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        node = self.generic_visit(node)
        if node.buffer is not self.buffer:
            return node
        inlined: PrimExpr = substitute(self.value, dict(zip(self.index_vars, node.indices)))
        return inlined


class _InlineInto(_InlineLoads):
    """Inline the loads of every block, and recompute the reads of each block that read the
    buffer (by its regions or its loads)."""

    def __init__(
        self, buffer: Buffer, index_vars: list[Var], value: PrimExpr, producer: Block, ana: Analyzer
    ) -> None:
        super().__init__(buffer, index_vars, value)
        self.producer = producer
        self.ana = ana

    def visit_Block(self, node: Block) -> Block:
        out: Block = self.generic_visit(node)
        if out is node and not rg.reads_buffer(node, self.buffer):
            return node
        reads = _reads_after_inline(node, self.buffer, self.producer, self.index_vars, self.ana)
        return attrs.evolve(out, reads=reads)


def _reads_after_inline(
    consumer: Block, buf: Buffer, producer: Block, index_vars: list[Var], ana: Analyzer
) -> tuple[BufferRegion, ...]:
    """Consumer reads with ``buf`` replaced by the producer's reads at the consumed points."""
    out: list[BufferRegion] = []
    for reg in consumer.reads:
        if reg.buffer is not buf:
            out.append(reg)
            continue
        # the producer's iter vars range over the consumed region
        pmap: dict[Var, PrimExpr] = {}
        relax: dict[Var, Range] = {}
        for v, rng in zip(index_vars, reg.region):
            if isinstance(rng.extent, IntImm) and rng.extent.value == 1:
                pmap[v] = rng.min
            else:
                relax[v] = rng
        for preg in producer.reads:
            ivs = rg.relax_region(preg, pmap, relax, ana)
            out.append(rg.intervals_to_region(preg.buffer, ivs, ana))
    return tuple(rg.merge_regions(out, ana))


def compute_inline(func: PrimFunc, block: str) -> PrimFunc:
    """Inline elementwise producer ``block`` into every block that reads its output.

    Preconditions (as in TVM): the block is spatial without init, its body is one store
    ``X[v0, v1, ...] = f(...)`` (or a pad's ``if c: X[v] = a else: X[v] = b``, inlined as
    ``Select(c, a, b)``) whose indices are distinct iter vars, its value uses no other
    iter var, it is the only writer of ``X``, and ``X`` is not a function parameter.

    Parameters
    ----------
    func
        The function.
    block
        Name of the producer block to inline.

    Returns
    -------
    PrimFunc
        The function without the block (and without its buffer); each load ``X[e0, e1]``
        became ``f`` with ``v0 := e0, v1 := e1``.

    Raises
    ------
    ScheduleError
        When a precondition fails.

    Examples
    --------
    Before::

        for i, j in grid(64, 64):
            with block("B"): B[vi, vj] = A[vi, vj] * 2.0
        for i, j in grid(64, 64):
            with block("C"): C[vi, vj] = B[vi, vj] + 1.0

    After ``compute_inline(func, "B")``::

        for i, j in grid(64, 64):
            with block("C"): C[vi, vj] = A[vi, vj] * 2.0 + 1.0
    """
    prim = "compute_inline"
    realize, anc = rg.get_block(func, block, prim)
    blk = realize.block
    if not anc:
        raise ScheduleError("cannot inline the root block", primitive=prim, func=func, node=blk)
    folded = _as_select_store(blk.body)
    if folded is not blk.body:
        blk = attrs.evolve(blk, body=folded)
    store = _check_simple(func, blk, prim, "producer")
    buf = store.buffer
    if rg.is_param(func, buf):
        raise ScheduleError(
            f"block {block!r} writes the function output {buf.name!r}; an output block "
            "cannot be inlined",
            primitive=prim,
            func=func,
            node=blk,
        )
    iter_set = {iv.var for iv in blk.iter_vars}
    idx_vars: list[Var] = []
    for d, e in enumerate(store.indices):
        if not isinstance(e, Var) or e not in iter_set or e in idx_vars:
            raise ScheduleError(
                f"the store index {e} (dimension {d}) of block {block!r} is not a distinct "
                "block iter var; only such stores can be inlined",
                primitive=prim,
                func=func,
                node=blk,
            )
        idx_vars.append(e)
    loose = [v for v in collect_vars(store.value) if v in iter_set and v not in idx_vars]
    if loose:
        raise ScheduleError(
            f"the value stored by block {block!r} uses iter var {loose[0].name!r}, which is "
            "not a store index",
            primitive=prim,
            func=func,
            node=blk,
        )
    if any(isinstance(n, BufferLoad) and n.buffer is buf for n in _loads(store.value)):
        raise ScheduleError(
            f"block {block!r} reads the buffer {buf.name!r} it writes",
            primitive=prim,
            func=func,
            node=blk,
        )
    realizes = rg.leaf_blocks(func)
    writers = [r.block.name for r in realizes if rg.writes_buffer(r.block, buf)]
    if writers != [block]:
        raise ScheduleError(
            f"buffer {buf.name!r} is written by {', '.join(writers)}; compute_inline needs "
            f"{block!r} to be its only writer",
            primitive=prim,
            func=func,
            node=blk,
        )
    out = rg.remove_block(func, realize, anc, prim)
    # One pass, inner blocks first: a consumer nested in another block (blockize) is rewritten
    # with the block around it, which lists the buffer among its reads too.
    inliner = _InlineInto(buf, idx_vars, store.value, blk, rg.make_analyzer())
    out = out.with_body(inliner.visit(out.body))
    out = rg.without_root_alloc(out, buf)
    logger.debug("compute_inline %s", block)
    return out


def reverse_compute_inline(func: PrimFunc, block: str) -> PrimFunc:
    """Inline elementwise consumer ``block`` into the producer of the buffer it reads.

    Preconditions (as in TVM): the consumer is spatial without init with a single store;
    it reads exactly one buffer ``X`` produced by another block, and every load of ``X`` uses
    the same indices, which are exactly the consumer's iter vars (distinct, each over the
    whole extent of its dimension), so the consumer's point is a function of the producer's;
    the producer is the only writer of ``X``, is spatial without init, has a single store and
    the consumer is the only reader of ``X``, which is not a function parameter.

    Parameters
    ----------
    func
        The function.
    block
        Name of the consumer block.

    Returns
    -------
    PrimFunc
        The function where the producer stores the consumer's value directly.

    Raises
    ------
    ScheduleError
        When a precondition fails.

    Examples
    --------
    Before::

        for i, j in grid(64, 64):
            with block("B"): B[vi, vj] = A[vi, vj] * 2.0
        for i, j in grid(64, 64):
            with block("C"): C[vi, vj] = max(B[vi, vj], 0.0)

    After ``reverse_compute_inline(func, "C")``::

        for i, j in grid(64, 64):
            with block("B"): C[vi, vj] = max(A[vi, vj] * 2.0, 0.0)
    """
    prim = "reverse_compute_inline"
    realize, anc = rg.get_block(func, block, prim)
    blk = realize.block
    if not anc:
        raise ScheduleError("cannot inline the root block", primitive=prim, func=func, node=blk)
    store = _check_simple(func, blk, prim, "consumer")
    realizes = rg.leaf_blocks(func)
    produced = [
        reg.buffer for reg in blk.reads
        if any(rg.writes_buffer(r.block, reg.buffer) for r in realizes if r.block.name != block)
    ]
    if len(produced) != 1:
        raise ScheduleError(
            f"consumer block {block!r} must read exactly one buffer produced by another "
            f"block, it reads {len(produced)} ({', '.join(b.name for b in produced) or 'none'})",
            primitive=prim,
            func=func,
            node=blk,
        )
    buf = produced[0]
    if rg.is_param(func, buf):
        raise ScheduleError(
            f"buffer {buf.name!r} is a function parameter; its producer must keep writing it",
            primitive=prim,
            func=func,
            node=blk,
        )
    writers = [r for r in realizes if rg.writes_buffer(r.block, buf)]
    readers = [r.block.name for r in realizes if rg.reads_buffer(r.block, buf)]
    if len(writers) != 1 or readers != [block]:
        raise ScheduleError(
            f"buffer {buf.name!r} must have one writer and {block!r} as its only reader "
            f"(writers: {', '.join(r.block.name for r in writers)}; readers: "
            f"{', '.join(readers)})",
            primitive=prim,
            func=func,
            node=blk,
        )
    prod_realize = writers[0]
    prod = prod_realize.block
    pstore = _check_simple(func, prod, prim, "producer")
    if pstore.buffer is not buf:
        raise ScheduleError(
            f"producer block {prod.name!r} does not store to {buf.name!r}",
            primitive=prim, func=func, node=prod,
        )
    loads = [n for n in _loads(store.value) if n.buffer is buf]
    iter_vars = [iv.var for iv in blk.iter_vars]
    if not loads:
        raise ScheduleError(
            f"consumer block {block!r} does not load {buf.name!r} in its body",
            primitive=prim, func=func, node=blk,
        )
    first = loads[0].indices
    ana = rg.make_analyzer()
    ok = (
        len(first) == len(iter_vars)
        and all(isinstance(e, Var) for e in first)
        and len({id(e) for e in first}) == len(first)
        and set(first) == set(iter_vars)
        and all(len(ld.indices) == len(first) and all(a is b for a, b in zip(ld.indices, first))
                for ld in loads)
    )
    if not ok:
        raise ScheduleError(
            f"consumer block {block!r} must load {buf.name!r} at exactly its iter vars (the "
            f"same indices everywhere); got {', '.join(str(list(ld.indices)) for ld in loads)}",
            primitive=prim, func=func, node=blk,
        )
    ivmap = {iv.var: iv for iv in blk.iter_vars}
    for d, v in enumerate(first):
        dom = ivmap[v].dom  # type: ignore[index]
        if not (ana.can_prove_equal(dom.min, 0) and ana.can_prove_equal(dom.extent, buf.shape[d])):
            raise ScheduleError(
                f"iter var {v} of {block!r} does not cover dimension {d} of {buf.name!r} "
                f"(domain {dom}, extent {buf.shape[d]}); the consumer must read the whole buffer",
                primitive=prim, func=func, node=blk,
            )
    # consumer var v_d := producer store index d
    vmap: dict[Var, PrimExpr] = {v: pi for v, pi in zip(first, pstore.indices)}  # type: ignore[misc]

    class _Swap(Mutator):
        def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
            node = self.generic_visit(node)
            return pstore.value if node.buffer is buf else node

    new_value = substitute(_Swap().visit(store.value), vmap)
    new_indices = tuple(substitute(e, vmap) for e in store.indices)
    new_store = BufferStore(store.buffer, new_value, new_indices)
    new_writes = tuple(substitute(w, vmap) for w in blk.writes)
    extra = [substitute(r, vmap) for r in blk.reads if r.buffer is not buf]
    new_prod = attrs.evolve(
        prod,
        body=new_store,
        writes=new_writes,
        reads=tuple(rg.merge_regions(list(prod.reads) + extra, ana)),
    )
    # the producer must still be able to see the consumer's other inputs: they are produced
    # before the consumer; check they are produced before the producer too
    out = rg.remove_block(func, realize, anc, prim)
    out = tree.replace(out, prod, new_prod)
    out = rg.without_root_alloc(out, buf)
    rg.check_order(out, prod.name, prim, node=blk, shown=func)
    logger.debug("reverse_compute_inline %s into %s", block, prod.name)
    return out


def _loads(node: object) -> list[BufferLoad]:
    found: list[BufferLoad] = []
    post_order_visit(node, lambda n: found.append(n) if isinstance(n, BufferLoad) else None)
    return found


