"""LowerBlocks: replace TensorIR blocks by plain statements.

For every ``BlockRealize``:

- iter vars are substituted by their bindings (``iter_values``);
- the block ``init`` (if any) becomes ``if <every reduce iter var's binding == its min>: init``
  placed before the body (a reduction with no reduce iter var always runs its init);
  decompose_reduction has already hoisted inits into separate blocks, which need nothing here;
- a predicate other than literal true becomes an ``IfThenElse`` guard around the block's
  statements;
- ``alloc_buffers`` become ``Allocate`` nodes at the block's position (later passes move and
  compact them).

Example::

    for i in range(100):                         for i in range(100):
      block C(vi = i, vk = k) where i < 97:  ->     if i < 97:
        init: C[vi] = 0                               if k == 0: C[i] = 0
        C[vi] = C[vi] + A[vi, vk]                     C[i] = C[i] + A[i, k]
"""

from __future__ import annotations

from loopir.ir import op
from loopir.ir.expr import IntImm, PrimExpr, Var
from loopir.ir.functor import Mutator, substitute
from loopir.ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    IfThenElse,
    IterKind,
    PrimFunc,
    Stmt,
    seq,
)
from loopir.passes import storage_align
from loopir.passes.base import Pass
from loopir.passes.context import PassContext

__all__ = ["LowerBlocks", "is_const_true"]


def is_const_true(e: PrimExpr) -> bool:
    """Whether ``e`` is the literal constant true (or a non-zero integer constant)."""
    return isinstance(e, IntImm) and e.value != 0


class _Lower(Mutator):
    def __init__(self) -> None:
        super().__init__()
        self.aligns: dict[str, storage_align.Aligns] = {}

    def visit_BlockRealize(self, node: BlockRealize) -> Stmt:
        block = node.block
        storage_align.collect(block, self.aligns)
        body = self.visit(block.body)
        init = self.visit(block.init) if block.init is not None else None
        vmap: dict[Var, PrimExpr] = {
            iv.var: val for iv, val in zip(block.iter_vars, node.iter_values)
        }
        stmt: Stmt = body
        if init is not None:
            conds = [
                val == iv.dom.min
                for iv, val in zip(block.iter_vars, node.iter_values)
                if iv.kind is IterKind.REDUCE
            ]
            init_stmt = IfThenElse(op.all_(*conds), init) if conds else init
            stmt = seq(init_stmt, body)
        stmt = substitute(stmt, vmap)
        if not is_const_true(node.predicate):
            stmt = IfThenElse(substitute(node.predicate, vmap), stmt)
        for buf in reversed(block.alloc_buffers):
            stmt = Allocate(buf, stmt)
        return stmt

    def visit_Block(self, node: Block) -> Stmt:  # a Block outside a BlockRealize: malformed
        from loopir.errors import PassError

        raise PassError(f"pass LowerBlocks: block {node.name!r} is not under a BlockRealize")


class LowerBlocks(Pass):
    """Lower every Block/BlockRealize to loops, guards and allocations (see module doc)."""

    name = "LowerBlocks"

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        low = _Lower()
        out = func.with_body(low.visit(func.body))
        # storage_align requirements outlive the blocks: CompactBufferAllocation applies them
        return storage_align.with_aligns(out, low.aligns)
