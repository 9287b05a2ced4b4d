"""Virtual-thread injection: fold ``vthread.*`` loops into each real thread.

A ``for vx in vthread(n): body`` loop has no CUDA index. Run as a plain loop it would be
correct (its meaning is sequential) but it would repeat everything under it, including the
cooperative shared-memory fetches and their barriers, once per virtual thread. As TVM's
``InjectVirtualThread`` does, the loop is instead pushed down the statement tree:

* statements that do not depend on ``vx`` (the shared fetches, barriers) run once;
* loops whose bounds do not depend on ``vx`` are kept and ``vx`` is pushed into their body;
* a statement that depends on ``vx`` and cannot be split further (a store, a loop or guard
  whose bounds or condition use ``vx``) is wrapped in ``#pragma unroll`` ``for vx < n``;
* buffers allocated inside the virtual-thread loop and written by ``vx``-dependent code get a
  leading dimension of ``n`` (each virtual thread keeps its own copy: this is how the dense
  schedule's two 32-element ``C_local`` tiles become 64 accumulators of one CUDA thread).

This relies on the virtual threads being independent (the contract of thread bindings): the
loop is distributed over the statements of its body.
"""

from __future__ import annotations

import attrs

from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, IntImm, PrimExpr, Var
from loopir.ir.functor import Mutator, Visitor, substitute
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    SeqStmt,
    Stmt,
    seq,
)


def _is_vthread(s: Stmt) -> bool:
    return (
        isinstance(s, For)
        and s.kind is ForKind.THREAD_BINDING
        and s.thread_tag is not None
        and s.thread_tag.startswith("vthread")
    )


class _Touches(Visitor):
    """Whether a node uses ``var`` or accesses one of ``buffers``."""

    def __init__(self, var: Var, buffers: set[Buffer]) -> None:
        self.var = var
        self.buffers = buffers
        self.found = False

    def visit_Var(self, node: Var) -> None:
        if node is self.var:
            self.found = True

    def visit_BufferLoad(self, node: BufferLoad) -> None:
        if node.buffer in self.buffers:
            self.found = True
        self.generic_visit(node)

    def visit_BufferStore(self, node: BufferStore) -> None:
        if node.buffer in self.buffers:
            self.found = True
        self.generic_visit(node)


def _touches(node: object, var: Var, buffers: set[Buffer]) -> bool:
    t = _Touches(var, buffers)
    t.visit(node)
    return t.found


class _ExpandCandidates(Visitor):
    """Buffers allocated inside the loop body that vx-dependent code writes."""

    def __init__(self, var: Var, expanded: set[Buffer]) -> None:
        self.var = var
        self.expanded = expanded
        self.allocated: set[Buffer] = set()
        self.written: set[Buffer] = set()
        self.context = 0  # > 0 inside a loop/guard whose bounds/condition depend on vx

    def visit_Allocate(self, node: Allocate) -> None:
        self.allocated.add(node.buffer)
        self.generic_visit(node)

    def visit_For(self, node: For) -> None:
        dep = _touches(node.min, self.var, self.expanded) or _touches(
            node.extent, self.var, self.expanded
        )
        self.context += dep
        self.visit(node.body)
        self.context -= dep

    def visit_IfThenElse(self, node: IfThenElse) -> None:
        dep = _touches(node.condition, self.var, self.expanded)
        self.context += dep
        self.visit(node.then_case)
        if node.else_case is not None:
            self.visit(node.else_case)
        self.context -= dep

    def visit_BufferStore(self, node: BufferStore) -> None:
        if self.context or _touches(node, self.var, self.expanded):
            self.written.add(node.buffer)


class _Expand(Mutator):
    """Give expanded buffers a leading virtual-thread dimension indexed by ``var``."""

    def __init__(self, var: Var, mapping: dict[Buffer, Buffer]) -> None:
        self.var = var
        self.mapping = mapping

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        node = self.generic_visit(node)
        new = self.mapping.get(node.buffer)
        if new is None:
            return node
        return BufferLoad(new, (self.var, *node.indices))

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        node = self.generic_visit(node)
        new = self.mapping.get(node.buffer)
        if new is None:
            return node
        return BufferStore(new, node.value, (self.var, *node.indices))

    def visit_Allocate(self, node: Allocate) -> Stmt:
        body = self.visit(node.body)
        return Allocate(self.mapping.get(node.buffer, node.buffer), body)


def inject_vthread(loop: For) -> Stmt:
    """Push the virtual-thread loop ``loop`` into its body (see the module docstring)."""
    var, n = loop.loop_var, loop.extent
    if isinstance(n, IntImm) and n.value == 1:
        return substitute(loop.body, {var: loop.min})
    expanded: set[Buffer] = set()
    while True:  # fixpoint: reading an expanded buffer makes a statement vx-dependent
        c = _ExpandCandidates(var, expanded)
        c.visit(loop.body)
        new = (c.written & c.allocated) | expanded
        if new == expanded:
            break
        expanded = new
    mapping = {
        b: attrs.evolve(b, shape=(n, *b.shape), strides=None if b.strides is None else (
            b.strides[0] * b.shape[0], *b.strides))
        for b in expanded
    }
    body = _Expand(var, mapping).visit(loop.body) if mapping else loop.body
    dep_buffers = set(mapping.values())

    def wrap(s: Stmt) -> Stmt:
        return For(var, loop.min, n, ForKind.UNROLLED, s)

    def push(s: Stmt) -> Stmt:
        if not _touches(s, var, dep_buffers):
            return s
        if isinstance(s, SeqStmt):
            return seq(*(push(x) for x in s.seq))
        if isinstance(s, Allocate):
            return Allocate(s.buffer, push(s.body))
        if isinstance(s, For) and not (
            _touches(s.min, var, dep_buffers) or _touches(s.extent, var, dep_buffers)
        ):
            return attrs.evolve(s, body=push(s.body))
        if isinstance(s, IfThenElse) and not _touches(s.condition, var, dep_buffers):
            return IfThenElse(
                s.condition,
                push(s.then_case),
                None if s.else_case is None else push(s.else_case),
            )
        return wrap(s)

    return push(body)


class VThreadInjector(Mutator):
    """Injects every virtual-thread loop of a kernel body, innermost first."""

    def visit_For(self, node: For) -> Stmt:
        node = self.generic_visit(node)
        if isinstance(node, For) and _is_vthread(node):
            return inject_vthread(node)
        return node


def inject_virtual_threads(stmt: Stmt) -> Stmt:
    """``stmt`` with every ``vthread.*`` loop folded into the real threads."""
    return VThreadInjector().visit(stmt)


__all__ = ["inject_virtual_threads", "inject_vthread"]
