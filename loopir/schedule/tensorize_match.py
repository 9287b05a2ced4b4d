"""The structural match of a block against a tensor intrinsic's description (TVM's
``TensorizeComparator``).

The block (the *pattern*, left) and the description's root block (right) are compared
node by node:

- at the top, the block's writes and reads against the root block's, in order: each pair
  binds a description parameter to a real buffer (same dtype and scope, at least its rank)
  and fixes the *base* of the parameter: the start of the real region. Leading dimensions
  beyond the parameter's rank must have extent 1; the other extents must be equal. The
  block's own iter vars and init are not compared (they stay);
- below, loops (extent, min, kind, thread tag, annotations), block realizes (bindings,
  predicate), blocks (iter var kinds and extents, regions), stores and expressions must
  have the same structure; variables correspond one to one (a loop or iter var of the block
  to the description's in the same position); constants are equal; dtypes are equal (index
  expressions may differ in integer width);
- an access ``A[i...]`` matches the description's ``P[j...]`` when ``A`` is bound to ``P`` and
  ``i - base == j`` (proven after renaming the block's vars to the description's), the
  leading indices being the base itself.

The first difference raises [`Mismatch`][loopir.schedule.tensorize_match.Mismatch] naming what
differs (dtype, scope, extent, index pattern, ...) with both nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loopir.arith import Analyzer
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import (
    BinaryOp,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Not,
    PrimExpr,
    Ramp,
    Select,
    StringImm,
    Var,
)
from loopir.ir.functor import substitute
from loopir.ir.stmt import (
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    IterVar,
    SeqStmt,
    Stmt,
)

__all__ = ["Matcher", "Mismatch"]


class Mismatch(Exception):
    """The block differs from the description: ``what`` says how; ``lhs`` is the block's
    node, ``rhs`` the description's."""

    def __init__(self, what: str, lhs: Any, rhs: Any) -> None:
        super().__init__(what)
        self.what = what
        self.lhs = lhs
        self.rhs = rhs


def _region(r: BufferRegion) -> str:
    """``B[i, k:k + 4]`` (points as indices), for messages."""
    ana = Analyzer()
    parts = []
    for rg in r.region:
        if isinstance(rg.extent, IntImm) and rg.extent.value == 1:
            parts.append(str(rg.min))
        else:
            parts.append(f"{rg.min}:{ana.simplify(rg.min + rg.extent)}")
    return f"{r.buffer.name}[{', '.join(parts)}]"


def _kind(loop: For) -> str:
    return loop.kind.value + (f" {loop.thread_tag}" if loop.thread_tag else "")


def _is_index(e: PrimExpr) -> bool:
    return dt.is_int(e.dtype) and dt.lanes(e.dtype) == 1


class Matcher:
    """Matches a block against a description; afterwards ``buffers`` maps each description
    buffer to the block's, and ``base`` each description buffer to its region start."""

    def __init__(self) -> None:
        self.vars: dict[Var, Var] = {}  # block var -> description var
        self.buffers: dict[Buffer, Buffer] = {}  # description buffer -> block buffer
        self.base: dict[Buffer, tuple[PrimExpr, ...]] = {}  # description buffer -> start
        self.ana = Analyzer()
        # the statements being compared (marked when a variable differs)
        self.stmt_lhs: Any = None
        self.stmt_rhs: Any = None

    # --- entry -------------------------------------------------------------------------------
    def match(self, lhs: BlockRealize, rhs: BlockRealize) -> None:
        """Match block ``lhs`` against the description's root ``rhs``."""
        lb, rb = lhs.block, rhs.block
        self._regions(lb.writes, rb.writes, "writes", lb, rb, scope=True)
        self._regions(lb.reads, rb.reads, "reads", lb, rb, scope=True)
        self.stmt(lb.body, rb.body)

    # --- buffers and regions -----------------------------------------------------------------
    def buffer(self, lhs: Buffer, rhs: Buffer, node: Any, rnode: Any) -> None:
        bound = self.buffers.get(rhs)
        if bound is not None:
            if bound is not lhs:
                raise Mismatch(
                    f"buffer differs: the description's {rhs.name} stands for {bound.name} "
                    f"here, but {lhs.name} is accessed",
                    node, rnode,
                )  # fmt: skip
            return
        if lhs.dtype != rhs.dtype:
            raise Mismatch(
                f"dtype differs: {lhs.name} is {lhs.dtype}, the description's {rhs.name} is "
                f"{rhs.dtype}",
                node, rnode,
            )  # fmt: skip
        if lhs.scope != rhs.scope:
            raise Mismatch(
                f"scope differs: {lhs.name} is in {lhs.scope!r} memory, the description's "
                f"{rhs.name} in {rhs.scope!r}",
                node, rnode,
            )  # fmt: skip
        if len(lhs.shape) < len(rhs.shape):
            raise Mismatch(
                f"rank differs: {lhs.name} has {len(lhs.shape)} dimensions, the description's "
                f"{rhs.name} {len(rhs.shape)}",
                node, rnode,
            )  # fmt: skip
        self.buffers[rhs] = lhs

    def _regions(
        self, lhs: Sequence[BufferRegion], rhs: Sequence[BufferRegion], what: str,
        lnode: Any, rnode: Any, scope: bool = False,
    ) -> None:  # fmt: skip
        if len(lhs) != len(rhs):
            hint = ""
            if scope and what == "reads":
                written = {r.buffer for r in rhs} & {r.buffer for r in self._root_writes(rnode)}
                if written and len(lhs) < len(rhs):
                    hint = (
                        " (the description reads what it accumulates into: decompose the "
                        "reduction first, so that the update block lists its output among its "
                        "reads, as in TVM)"
                    )
            raise Mismatch(
                f"{what} differ: {len(lhs)} regions ({', '.join(map(_region, lhs))}) against the "
                f"description's {len(rhs)} ({', '.join(map(_region, rhs))}){hint}",
                lnode, rnode,
            )  # fmt: skip
        for a, b in zip(lhs, rhs):
            self.region(a, b, lnode, rnode, scope)

    @staticmethod
    def _root_writes(rnode: Any) -> Sequence[BufferRegion]:
        return rnode.writes if isinstance(rnode, Block) else ()

    def region(self, lhs: BufferRegion, rhs: BufferRegion, lnode: Any, rnode: Any, scope: bool) -> None:
        self.buffer(lhs.buffer, rhs.buffer, lnode, rnode)
        lead = len(lhs.region) - len(rhs.region)
        for k, r in enumerate(lhs.region[:lead]):
            if not self.ana.can_prove_equal(r.extent, 1):
                raise Mismatch(
                    f"extent differs: dimension {k} of {_region(lhs)} has extent {r.extent}; the "
                    f"description's {rhs.buffer.name} has {len(rhs.region)} dimensions, so the "
                    "leading ones must have extent 1",
                    lnode, rnode,
                )  # fmt: skip
        if scope and rhs.buffer not in self.base:
            self.base[rhs.buffer] = tuple(r.min for r in lhs.region)
        base = self._base(rhs.buffer, lhs.buffer, lnode, rnode)
        for k, r in enumerate(lhs.region[:lead]):
            if not scope and not self.ana.can_prove_equal(r.min, base[k]):
                raise Mismatch(f"index pattern differs: {_region(lhs)} leaves the tile at dimension {k}", lnode, rnode)
        for k, (a, b) in enumerate(zip(lhs.region[lead:], rhs.region)):
            if not self._equal(self._rename(a.extent), b.extent):
                raise Mismatch(
                    f"extent differs: {_region(lhs)} against the description's {_region(rhs)} "
                    f"(dimension {k + lead}: {a.extent} vs {b.extent})",
                    lnode, rnode,
                )  # fmt: skip
        rel = [self._relative(a.min, b) for a, b in zip(lhs.region[lead:], base[lead:])]
        if not all(self._equal(a, b.min) for a, b in zip(rel, rhs.region)):
            shown = BufferRegion(rhs.buffer, tuple(Range(m, r.extent) for m, r in zip(rel, rhs.region)))
            raise Mismatch(
                f"index pattern differs: the block accesses {_region(shown)} relative to its "
                f"tile ({_region(lhs)}), the description {_region(rhs)}",
                lnode, rnode,
            )  # fmt: skip

    def _base(self, rhs: Buffer, lhs: Buffer, lnode: Any, rnode: Any) -> tuple[PrimExpr, ...]:
        base = self.base.get(rhs)
        if base is None:
            # a buffer the description allocates itself: its tile starts at 0
            base = tuple(IntImm(0, s.dtype) for s in lhs.shape)
            self.base[rhs] = base
        return base

    def _rename(self, e: PrimExpr) -> PrimExpr:
        return substitute(e, self.vars) if self.vars else e

    def _relative(self, index: PrimExpr, base: PrimExpr) -> PrimExpr:
        """``index - base`` in the description's variables, simplified."""
        return self.ana.simplify(self._rename(index) - self._rename(base))

    def _equal(self, a: PrimExpr, b: PrimExpr) -> bool:
        if a.dtype != b.dtype and _is_index(a) and _is_index(b):
            b = b.astype(a.dtype)
        try:
            return bool(self.ana.can_prove_equal(a, b))
        except Exception:  # noqa: BLE001 - an index the analyzer refuses is not provably equal
            return False

    def access(self, lhs: BufferLoad | BufferStore, rhs: BufferLoad | BufferStore) -> None:
        node = self.stmt_lhs if isinstance(lhs, BufferLoad) else lhs
        self.buffer(lhs.buffer, rhs.buffer, lhs, rhs)
        base = self._base(rhs.buffer, lhs.buffer, lhs, rhs)
        lead = len(lhs.indices) - len(rhs.indices)
        for k in range(lead):
            if not self.ana.can_prove_equal(lhs.indices[k], base[k]):
                raise Mismatch(
                    f"index pattern differs: {lhs.buffer.name}'s index {k}, {lhs.indices[k]}, "
                    f"leaves the tile that starts at {base[k]}",
                    node, rhs,
                )  # fmt: skip
        rel = [self._relative(i, b) for i, b in zip(lhs.indices[lead:], base[lead:])]
        for i, b in zip(rel, rhs.indices):
            if not self._equal(i, b):
                shown = ", ".join(map(str, rel))
                raise Mismatch(
                    f"index pattern differs: the block accesses {lhs.buffer.name}[{shown}] "
                    f"relative to its tile (at {', '.join(map(str, base))}), the description "
                    f"{rhs.buffer.name}[{', '.join(map(str, rhs.indices))}]",
                    lhs, rhs,
                )  # fmt: skip

    # --- variables ---------------------------------------------------------------------------
    def define(self, lhs: Var, rhs: Var, node: Any, rnode: Any, dom: Range | None = None) -> None:
        prev = self.vars.get(lhs)
        if prev is not None and prev is not rhs:
            raise Mismatch(f"variable {lhs.name} stands for two description variables", node, rnode)
        self.vars[lhs] = rhs
        if dom is not None:
            self.ana.bind(rhs, dom)

    # --- statements --------------------------------------------------------------------------
    def stmt(self, lhs: Stmt, rhs: Stmt) -> None:
        if type(lhs) is not type(rhs):
            raise Mismatch(
                f"statement differs: a {type(lhs).__name__} where the description has a "
                f"{type(rhs).__name__}",
                lhs, rhs,
            )  # fmt: skip
        saved = self.stmt_lhs, self.stmt_rhs
        self.stmt_lhs, self.stmt_rhs = lhs, rhs
        try:
            getattr(self, "stmt_" + type(lhs).__name__, self._stmt_unknown)(lhs, rhs)
        finally:
            self.stmt_lhs, self.stmt_rhs = saved

    def _stmt_unknown(self, lhs: Stmt, rhs: Stmt) -> None:
        raise Mismatch(f"statement differs: tensorize does not match {type(lhs).__name__} nodes", lhs, rhs)

    def stmt_For(self, lhs: For, rhs: For) -> None:
        self.expr(lhs.min, rhs.min)
        if not self._equal(self._rename(lhs.extent), rhs.extent):
            raise Mismatch(
                f"extent differs: loop {lhs.loop_var.name} has extent {lhs.extent}, the "
                f"description's {rhs.loop_var.name} {rhs.extent}",
                lhs, rhs,
            )  # fmt: skip
        if lhs.kind is not rhs.kind or lhs.thread_tag != rhs.thread_tag:
            raise Mismatch(
                f"loop kind differs: loop {lhs.loop_var.name} is {_kind(lhs)}, the description's "
                f"{rhs.loop_var.name} {_kind(rhs)}",
                lhs, rhs,
            )  # fmt: skip
        if dict(lhs.annotations) != dict(rhs.annotations):
            raise Mismatch(
                f"loop annotations differ: {dict(lhs.annotations)} vs {dict(rhs.annotations)}",
                lhs, rhs,
            )  # fmt: skip
        self.define(lhs.loop_var, rhs.loop_var, lhs, rhs, Range(rhs.min, rhs.extent))
        self.stmt(lhs.body, rhs.body)

    def stmt_SeqStmt(self, lhs: SeqStmt, rhs: SeqStmt) -> None:
        if len(lhs.seq) != len(rhs.seq):
            raise Mismatch(
                f"statement differs: {len(lhs.seq)} statements in sequence, the description "
                f"has {len(rhs.seq)}",
                lhs, rhs,
            )  # fmt: skip
        for a, b in zip(lhs.seq, rhs.seq):
            self.stmt(a, b)

    def stmt_BlockRealize(self, lhs: BlockRealize, rhs: BlockRealize) -> None:
        if len(lhs.iter_values) != len(rhs.iter_values):
            raise Mismatch(
                f"iter vars differ: block {lhs.block.name!r} has {len(lhs.iter_values)}, the "
                f"description's {rhs.block.name!r} {len(rhs.iter_values)}",
                lhs, rhs,
            )  # fmt: skip
        for a, b in zip(lhs.iter_values, rhs.iter_values):
            self.expr(a, b)
        self.expr(lhs.predicate, rhs.predicate)
        self.stmt(lhs.block, rhs.block)

    def stmt_Block(self, lhs: Block, rhs: Block) -> None:
        for a, b in zip(lhs.iter_vars, rhs.iter_vars):
            self._iter_var(a, b, lhs, rhs)
        if len(lhs.alloc_buffers) != len(rhs.alloc_buffers):
            raise Mismatch(f"allocations differ in block {lhs.name!r}", lhs, rhs)
        for x, y in zip(lhs.alloc_buffers, rhs.alloc_buffers):
            self.buffer(x, y, lhs, rhs)
        self._regions(lhs.writes, rhs.writes, "writes", lhs, rhs)
        self._regions(lhs.reads, rhs.reads, "reads", lhs, rhs)
        self.stmt(lhs.body, rhs.body)

    def _iter_var(self, a: IterVar, b: IterVar, lhs: Block, rhs: Block) -> None:
        if a.kind is not b.kind:
            raise Mismatch(
                f"iter var kind differs: {a.var.name} of block {lhs.name!r} is {a.kind.value}, "
                f"the description's {b.var.name} {b.kind.value}",
                lhs, rhs,
            )  # fmt: skip
        if not self._equal(self._rename(a.dom.extent), b.dom.extent):
            raise Mismatch(
                f"extent differs: iter var {a.var.name} of block {lhs.name!r} has extent "
                f"{a.dom.extent}, the description's {b.var.name} {b.dom.extent}",
                lhs, rhs,
            )  # fmt: skip
        self.define(a.var, b.var, lhs, rhs, b.dom)

    def stmt_BufferStore(self, lhs: BufferStore, rhs: BufferStore) -> None:
        self.access(lhs, rhs)
        self.expr(lhs.value, rhs.value)

    def stmt_Evaluate(self, lhs: Evaluate, rhs: Evaluate) -> None:
        self.expr(lhs.value, rhs.value)

    def stmt_IfThenElse(self, lhs: IfThenElse, rhs: IfThenElse) -> None:
        self.expr(lhs.condition, rhs.condition)
        self.stmt(lhs.then_case, rhs.then_case)
        if (lhs.else_case is None) != (rhs.else_case is None):
            raise Mismatch("statement differs: an else branch on one side only", lhs, rhs)
        if lhs.else_case is not None and rhs.else_case is not None:
            self.stmt(lhs.else_case, rhs.else_case)

    # --- expressions -------------------------------------------------------------------------
    def expr(self, lhs: PrimExpr, rhs: PrimExpr) -> None:
        if type(lhs) is not type(rhs):
            raise Mismatch(f"expression differs: {lhs} where the description has {rhs}", lhs, rhs)
        if lhs.dtype != rhs.dtype and not (_is_index(lhs) and _is_index(rhs)):
            raise Mismatch(
                f"dtype differs: {lhs} is {lhs.dtype}, the description's {rhs} is {rhs.dtype}",
                lhs, rhs,
            )  # fmt: skip
        if isinstance(lhs, Var):
            if lhs is not rhs and self.vars.get(lhs) is not rhs:
                meant = self.vars.get(lhs)
                what = f" (standing for the description's {meant.name})" if meant is not None else ""
                # a var marks its definition: mark the statements compared instead
                raise Mismatch(
                    f"expression differs: {lhs.name}{what} where the description has {rhs}",
                    self.stmt_lhs, self.stmt_rhs,
                )  # fmt: skip
        elif isinstance(lhs, (IntImm, FloatImm, StringImm)):
            assert isinstance(rhs, (IntImm, FloatImm, StringImm))
            if lhs.value != rhs.value:
                raise Mismatch(f"constant differs: {lhs} vs the description's {rhs}", lhs, rhs)
        elif isinstance(lhs, BufferLoad):
            assert isinstance(rhs, BufferLoad)
            self.access(lhs, rhs)
        elif isinstance(lhs, Call):
            assert isinstance(rhs, Call)
            if lhs.op != rhs.op or len(lhs.args) != len(rhs.args):
                raise Mismatch(f"call differs: {lhs} vs the description's {rhs}", lhs, rhs)
            self._exprs(lhs.args, rhs.args)
        else:
            self._children(lhs, rhs)

    def _exprs(self, lhs: Sequence[PrimExpr], rhs: Sequence[PrimExpr]) -> None:
        for a, b in zip(lhs, rhs):
            self.expr(a, b)

    def _children(self, lhs: PrimExpr, rhs: PrimExpr) -> None:
        if isinstance(lhs, BinaryOp) or type(lhs).__name__ in ("And", "Or"):
            self._exprs((lhs.a, lhs.b), (rhs.a, rhs.b))  # type: ignore[attr-defined]
        elif isinstance(lhs, Not):
            self.expr(lhs.a, rhs.a)  # type: ignore[attr-defined]
        elif isinstance(lhs, Cast):
            self.expr(lhs.value, rhs.value)  # type: ignore[attr-defined]
        elif isinstance(lhs, Select):
            assert isinstance(rhs, Select)
            self._exprs((lhs.condition, lhs.true_value, lhs.false_value),
                        (rhs.condition, rhs.true_value, rhs.false_value))  # fmt: skip
        elif isinstance(lhs, Ramp):
            assert isinstance(rhs, Ramp)
            if lhs.lanes != rhs.lanes:
                raise Mismatch(f"lanes differ: {lhs} vs the description's {rhs}", lhs, rhs)
            self._exprs((lhs.base, lhs.stride), (rhs.base, rhs.stride))
        elif isinstance(lhs, Broadcast):
            assert isinstance(rhs, Broadcast)
            if lhs.lanes != rhs.lanes:
                raise Mismatch(f"lanes differ: {lhs} vs the description's {rhs}", lhs, rhs)
            self.expr(lhs.value, rhs.value)
        else:
            raise Mismatch(f"expression differs: tensorize does not match {type(lhs).__name__}", lhs, rhs)
