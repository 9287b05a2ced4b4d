"""UnifyThreadLoops: merge a thread-bound loop into an enclosing loop bound to the same tag.

A cooperative fetch (``compute_at`` of a shared copy under a ``threadIdx.x`` loop, whose copy
loops are then split and bound to ``threadIdx.x`` again) leaves two loops with the same tag on
one path::

    for tx in thread_binding(256, "threadIdx.x"):
      for k0 in range(193):
        for tx_1 in thread_binding(256, "threadIdx.x"):   # the copy, spread over threads
          A_shared[tx_1 * 2 ...] = A[...]

Both are the same hardware index on the GPU, so the inner loop is removed and its variable
replaced by the outer one's: each thread copies its own share. This changes the *sequential*
meaning of the program (see docs/semantics: sequentially each outer iteration redid the whole
copy), which is correct for the SIMT execution that ``storage_sync`` barriers (inserted later by
ThreadSync) make well defined. Nested loops with the same tag but a different extent cannot be
unified and raise [`PassError`][loopir.errors.PassError].
"""

from __future__ import annotations

from loopir.errors import PassError
from loopir.ir.expr import IntImm, Var
from loopir.ir.functor import Mutator, substitute
from loopir.ir.stmt import For, ForKind, PrimFunc, Stmt
from loopir.passes.base import Pass, require_lowered
from loopir.passes.context import PassContext

__all__ = ["UnifyThreadLoops"]


def _same_extent(a: For, b: For) -> bool:
    if isinstance(a.extent, IntImm) and isinstance(b.extent, IntImm):
        return a.extent.value == b.extent.value and _zero_min(a) and _zero_min(b)
    from loopir.arith import Analyzer

    ana = Analyzer()
    return bool(
        ana.can_prove_equal(a.extent, b.extent) and ana.can_prove_equal(a.min, b.min)
    )


def _zero_min(f: For) -> bool:
    return isinstance(f.min, IntImm) and f.min.value == 0


class _Unify(Mutator):
    def __init__(self) -> None:
        self.outer: dict[str, For] = {}
        self.count = 0

    def visit_For(self, node: For) -> Stmt:
        if node.kind is not ForKind.THREAD_BINDING:
            out: Stmt = self.generic_visit(node)  # a statement mutates to a statement
            return out
        tag = node.thread_tag
        assert tag is not None  # guaranteed by For's validator for THREAD_BINDING loops
        outer = self.outer.get(tag)
        if outer is None:
            self.outer[tag] = node
            try:
                out = self.generic_visit(node)
                return out
            finally:
                del self.outer[tag]
        if not _same_extent(outer, node):
            raise PassError(
                f"pass UnifyThreadLoops: loop {node.loop_var.name} bound to {tag} with range "
                f"[{node.min}, {node.min} + {node.extent}) is nested in loop "
                f"{outer.loop_var.name} bound to the same tag with range "
                f"[{outer.min}, {outer.min} + {outer.extent}); nested loops on one thread tag "
                "need the same range"
            )
        self.count += 1
        outer_var: Var = outer.loop_var
        body = substitute(node.body, {node.loop_var: outer_var})
        out = self.visit(body)
        return out


class UnifyThreadLoops(Pass):
    """Replace nested same-tag thread loops by the outer loop's variable (see module doc)."""

    name = "UnifyThreadLoops"

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        require_lowered(func, self.name)
        return func.with_body(_Unify().visit(func.body))
