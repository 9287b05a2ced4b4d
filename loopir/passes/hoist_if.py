"""HoistIfThenElse: a guard that does not depend on its loop moves above the loop (TVM's
``tir.transform.HoistIfThenElse``, its simplest case).

A block predicate becomes an ``if`` around the block's body inside all of its loops
(``LowerBlocks``); when it tests only outer indices (a row past a symbolic row count, the last
block of rows partly empty), it sits inside the serial, unrolled and vectorized loops that run a
thread's part of the row, where the CUDA emitter cannot see a run of consecutive elements and
falls back to scalar loads. Moving it above those loops gives the same program a 16-byte load per
run:

    for ax1_0 in T.unroll(4):                      if i0 * 4 + ty < n:
        for ax1_2 in T.unroll(8):                      for ax1_0 in T.unroll(4):
            if i0 * 4 + ty < n:                            for ax1_2 in T.unroll(8):
                acc[0] = max(acc[0], X[...])                   acc[0] = max(acc[0], X[...])

The rule: ``for v: if c: body`` (the ``if`` the loop's whole body, without an ``else``) becomes
``if c: for v: body`` when ``c`` does not use ``v`` and the loop is serial, unrolled or
vectorized; applied from the innermost loop out. The loop runs its body zero or more times, each
time only when ``c`` holds, and ``c`` has the same value in every iteration (nothing in the body
can change it: it reads no buffer, only index variables bound outside), so the statement does
the same with the test made once. Thread-bound loops are left as they are (the ``if`` stays
per thread; barriers are not moved). Run late for CUDA, after the passes that place barriers.
"""

from __future__ import annotations

import attrs

from loopir.ir.expr import BufferLoad, Call, PrimExpr, Var
from loopir.ir.functor import Mutator, post_order_visit
from loopir.ir.stmt import For, ForKind, IfThenElse, PrimFunc, Stmt
from loopir.passes.base import Pass
from loopir.passes.context import PassContext

__all__ = ["HoistIfThenElse", "hoist_if_then_else"]

_HOISTABLE = (ForKind.SERIAL, ForKind.UNROLLED, ForKind.VECTORIZED)


def _invariant(cond: PrimExpr, var: Var) -> bool:
    """``cond`` reads neither ``var`` nor memory, and calls nothing (its value is the same in
    every iteration of ``var``'s loop)."""
    found: list[bool] = []

    def visit(n: object) -> None:
        if n is var or isinstance(n, (BufferLoad, Call)):
            found.append(True)

    post_order_visit(cond, visit)
    return not found


class _Hoist(Mutator):
    def visit_For(self, node: For) -> Stmt:
        body = self.visit(node.body)
        if (isinstance(body, IfThenElse) and body.else_case is None and node.kind in _HOISTABLE
                and _invariant(body.condition, node.loop_var)):  # fmt: skip
            return IfThenElse(body.condition, attrs.evolve(node, body=body.then_case), None)
        return node if body is node.body else attrs.evolve(node, body=body)


def hoist_if_then_else(func: PrimFunc) -> PrimFunc:
    """``func`` with each loop-invariant guard above its loops (see the module docstring);
    ``func`` itself when nothing moved."""
    body = _Hoist().visit(func.body)
    return func if body is func.body else func.with_body(body)


class HoistIfThenElse(Pass):
    """Loop-invariant guards above their serial, unrolled and vectorized loops (module docstring)."""

    name = "HoistIfThenElse"
    required = False

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        return hoist_if_then_else(func)
