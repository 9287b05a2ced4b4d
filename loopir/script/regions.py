"""``T.reads`` / ``T.writes`` of a block written without them, inferred as TVM does.

TVM's ``GetBlockReadWriteRegion``: every load in the block (its init and body, through nested
blocks' own regions) is a read, every store a write; loop variables of loops inside the block
range over their loops (the region is their hull), the block's iter vars stay symbolic. Buffers
allocated inside the block are left out, and a block with an init (a reduction) does not list
what it writes among its reads. One region per buffer, in order of first access; accesses that
differ by a constant give the exact hull, others the whole dimension (always sound).
"""

from __future__ import annotations

import logging
from typing import Any

from loopir.arith import Analyzer, structural_key
from loopir.errors import ArithError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import BufferLoad, IntImm, PrimExpr, Var, make_const
from loopir.ir.functor import collect_vars, post_order_visit, substitute
from loopir.ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    SeqStmt,
    Stmt,
)

logger = logging.getLogger(__name__)

__all__ = ["infer_regions"]

_Interval = tuple[PrimExpr, PrimExpr]  # inclusive [lo, hi]


class _Collector:
    """Walks a block's body in TVM's order (a store's target before its value)."""

    def __init__(self, exclude: set[int]) -> None:
        self.exclude = exclude
        self.loops: dict[Var, Range] = {}
        self.reads: dict[int, tuple[Buffer, list[list[_Interval]]]] = {}
        self.writes: dict[int, tuple[Buffer, list[list[_Interval]]]] = {}
        self.ana = Analyzer()

    def add(self, table: dict[int, tuple[Buffer, list[list[_Interval]]]], buf: Buffer,
            dims: list[_Interval]) -> None:  # fmt: skip
        if id(buf) in self.exclude:
            return
        table.setdefault(id(buf), (buf, []))[1].append(dims)

    def relax(self, lo: PrimExpr, hi: PrimExpr) -> _Interval:
        used = {*collect_vars(lo), *collect_vars(hi)}
        ranges = {v: r for v, r in self.loops.items() if v in used}
        if not ranges:
            return lo, hi
        try:
            a = self.ana.int_set(lo, ranges).min
            b = self.ana.int_set(hi, ranges).max
        except ArithError as e:  # not analyzable: the caller widens to the whole dimension
            logger.debug("region inference gave up on [%s, %s]: %s", lo, hi, e)
            return _WHOLE, _WHOLE
        return a, b

    def point(self, indices: tuple[PrimExpr, ...]) -> list[_Interval]:
        return [self.relax(i, i) for i in indices]

    def expr(self, e: PrimExpr) -> None:
        def visit(n: Any) -> None:
            if isinstance(n, BufferLoad):
                self.add(self.reads, n.buffer, self.point(n.indices))

        post_order_visit(e, visit)

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, BufferStore):
            self.add(self.writes, s.buffer, self.point(s.indices))
            for i in s.indices:
                self.expr(i)
            self.expr(s.value)
        elif isinstance(s, For):
            self.expr(s.min)
            self.expr(s.extent)
            self.loops[s.loop_var] = Range(s.min, s.extent)
            self.stmt(s.body)
            del self.loops[s.loop_var]
        elif isinstance(s, IfThenElse):
            self.expr(s.condition)
            self.stmt(s.then_case)
            if s.else_case is not None:
                self.stmt(s.else_case)
        elif isinstance(s, Allocate):
            self.exclude.add(id(s.buffer))
            self.stmt(s.body)
        elif isinstance(s, BlockRealize):
            self.nested(s)
        elif isinstance(s, SeqStmt):
            for child in s.seq:
                self.stmt(child)
        elif isinstance(s, Evaluate):
            self.expr(s.value)

    def nested(self, s: BlockRealize) -> None:
        for v in s.iter_values:
            self.expr(v)
        self.expr(s.predicate)
        blk = s.block
        for b in blk.alloc_buffers:
            self.exclude.add(id(b))
        bind = {iv.var: v for iv, v in zip(blk.iter_vars, s.iter_values)}
        for table, regions in ((self.reads, blk.reads), (self.writes, blk.writes)):
            for r in regions:
                dims = []
                for rg in r.region:
                    lo = substitute(rg.min, bind)
                    hi = substitute(rg.min + rg.extent - 1, bind)
                    dims.append(self.relax(lo, self.ana.simplify(hi)))
                self.add(table, r.buffer, dims)


_WHOLE = Var("<whole>")  # marks a dimension that could not be bounded


def _dim(buf: Buffer, d: int, ivs: list[_Interval], ana: Analyzer) -> Range:
    """One dimension of the hull of ``ivs``."""
    whole = Range(make_const(0, buf.shape[d].dtype), buf.shape[d])
    if any(lo is _WHOLE or hi is _WHOLE for lo, hi in ivs):
        return whole
    lo0, hi0 = ivs[0]
    key = structural_key
    if all(key(lo) == key(lo0) and key(hi) == key(hi0) for lo, hi in ivs):
        lo, hi = lo0, hi0
    else:
        los, his = _extreme([i[0] for i in ivs], ana, low=True), _extreme([i[1] for i in ivs], ana, low=False)
        if los is None or his is None:
            return whole
        lo, hi = los, his
    if key(lo) == key(hi):
        return Range(lo, make_const(1, lo.dtype))
    if not (dt.is_int(lo.dtype) and dt.is_int(hi.dtype)):
        return whole
    return Range(lo, ana.simplify(hi - lo + 1))


def _extreme(values: list[PrimExpr], ana: Analyzer, low: bool) -> PrimExpr | None:
    """The least (``low``) or greatest of ``values`` when they differ by constants, else None."""
    best = values[0]
    for v in values[1:]:
        try:
            d = ana.simplify(v - best)
        except (ArithError, TypeError):
            return None
        if not isinstance(d, IntImm):
            return None
        if (d.value < 0) if low else (d.value > 0):
            best = v
    return best


def infer_regions(block: Block) -> tuple[list[BufferRegion], list[BufferRegion]]:
    """The read and write regions of ``block`` (whose own ``reads``/``writes`` are ignored).

    Parameters
    ----------
    block
        The block, with its body, init and ``alloc_buffers``; nested blocks must already have
        their regions.

    Returns
    -------
    tuple
        (reads, writes), each a list of one BufferRegion per buffer, in order of first access.
    """
    col = _Collector({id(b) for b in block.alloc_buffers})
    if block.init is not None:
        col.stmt(block.init)
    col.stmt(block.body)
    if block.init is not None:
        for key in col.writes:
            col.reads.pop(key, None)
    out = []
    for table in (col.reads, col.writes):
        regions = []
        for buf, accesses in table.values():
            dims = [_dim(buf, d, [a[d] for a in accesses], col.ana) for d in range(buf.ndim)]
            regions.append(BufferRegion(buf, tuple(dims)))
        out.append(regions)
    return out[0], out[1]
