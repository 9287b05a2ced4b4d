"""Simplify: arithmetic simplification of every expression, under the enclosing loop ranges.

Uses [`loopir.arith.Analyzer`][loopir.arith.analyzer.Analyzer]: loop variables are bound to their
ranges on the way down, so guards such as ``i0 * 32 + i1 < 100`` that always hold inside their loops
simplify to true. ``if`` statements with a provably constant condition are replaced by the branch
that runs; loops of extent 0 disappear, and loops of extent 1 (other than thread bindings) are
replaced by their body at the loop's minimum. Nothing else changes: statements are neither reordered
nor merged.
"""

from __future__ import annotations

import attrs

from loopir.ir.expr import IntImm, Max, PrimExpr
from loopir.ir.functor import Mutator, Node, substitute
from loopir.ir.stmt import Evaluate, For, ForKind, IfThenElse, PrimFunc, SeqStmt, Stmt, seq
from loopir.passes._walk import loop_range
from loopir.passes.base import Pass
from loopir.passes.context import PassContext

__all__ = ["Simplify", "simplify_stmt"]


def _nop() -> Stmt:
    return Evaluate(IntImm(0, "int32"))


def _is_nop(s: Stmt) -> bool:
    return isinstance(s, Evaluate) and isinstance(s.value, IntImm)



def _runs_below(extent: PrimExpr) -> PrimExpr:
    """``e`` for an extent ``max(e, 0)`` (or ``max(0, e)``), else the extent: the bound the body
    sees when it runs."""
    if isinstance(extent, Max):
        for e, z in ((extent.a, extent.b), (extent.b, extent.a)):
            if isinstance(z, IntImm) and z.value == 0:
                return e
    return extent

class _Simplify(Mutator):
    def __init__(self) -> None:
        from loopir.arith import Analyzer

        self.ana = Analyzer()

    # Expressions: simplify whole trees at their roots (statements call visit on each field).
    def visit(self, node: Node) -> Node:
        if isinstance(node, PrimExpr):
            return self._expr(node)
        return super().visit(node)

    def _expr(self, e: PrimExpr) -> PrimExpr:
        out = self.ana.simplify(e)
        return out

    def _stmt(self, s: Stmt) -> Stmt:
        out: Stmt = self.visit(s)  # the mutator maps a statement to a statement
        return out

    def visit_For(self, node: For) -> Stmt:
        extent = self._expr(node.extent)
        mn = self._expr(node.min)
        if isinstance(extent, IntImm) and extent.value <= 0:
            return _nop()
        if (
            isinstance(extent, IntImm)
            and extent.value == 1
            and node.kind is not ForKind.THREAD_BINDING
            and not node.annotations
        ):
            # a unit loop is its body at loop_var = min (thread loops keep their binding)
            return self._stmt(substitute(node.body, {node.loop_var: mn}))
        # a loop of extent max(e, 0) runs its body only while loop_var < min + e (a pipeline's
        # steady state, ``max(n - stages + 1, 0)`` steps: its tiles are then known to be
        # before the last ones, where a causal mask is proven true)
        self.ana.bind(node.loop_var, loop_range(attrs.evolve(node, min=mn, extent=_runs_below(extent))))
        body = self._stmt(node.body)
        if _is_nop(body):
            return _nop()
        if body is node.body and extent is node.extent and mn is node.min:
            return node
        return attrs.evolve(node, min=mn, extent=extent, body=body)

    def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
        cond = self._expr(node.condition)
        if isinstance(cond, IntImm):
            if cond.value:
                return self._stmt(node.then_case)
            return self._stmt(node.else_case) if node.else_case is not None else _nop()
        then = self._stmt(node.then_case)
        other = self._stmt(node.else_case) if node.else_case is not None else None
        if other is not None and _is_nop(other):
            other = None
        if _is_nop(then) and other is None:
            return _nop()
        if cond is node.condition and then is node.then_case and other is node.else_case:
            return node
        return IfThenElse(cond, then, other)

    def visit_SeqStmt(self, node: SeqStmt) -> Stmt:
        items = [self._stmt(s) for s in node.seq]
        if all(a is b for a, b in zip(items, node.seq)):
            return node
        kept = [s for s in items if not _is_nop(s)]
        return seq(*kept) if kept else _nop()


def simplify_stmt(s: Stmt) -> Stmt:
    """Simplify a statement (see module doc)."""
    return _Simplify()._stmt(s)


class Simplify(Pass):
    """Arithmetic simplification under loop ranges (see module doc)."""

    name = "Simplify"
    opt_level = 1
    required = False

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        return func.with_body(simplify_stmt(func.body))
