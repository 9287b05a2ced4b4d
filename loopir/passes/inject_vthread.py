"""InjectVirtualThread: fold ``vthread`` loops into each real thread (as TVM does).

A ``vthread.*`` loop runs its iterations as virtual threads of one real thread. Leaving it as
a serial loop around the thread loop would repeat everything under it per virtual thread --
in the dense schedule the cooperative shared fetches, and their barriers, twice per ``k0``.
This pass instead pushes the virtual-thread loop inward, as far as the statements that need it:

- the ``vthread`` loop moves inside the ``threadIdx`` loops directly under it (they are
  parallel, so the order of the two is free);
- loops, ifs and allocations whose bounds/conditions do not use the vthread variable are
  kept, and the loop is pushed into their bodies;
- a statement that neither uses the variable nor touches an expanded buffer and only copies
  (no read-modify-write of what it stores) runs once: every virtual thread would store the
  same values (the cooperative fetch, barriers);
- ``local`` (and ``warp``) buffers allocated under the vthread loop and written by statements
  that depend on it (a tensor-core call writes through its fragment operand) are expanded with a leading dimension of the vthread extent (``C_local[16, 2]`` becomes
  ``C_local[2, 16, 2]`` indexed by the virtual thread: 64 accumulators per real thread);
- every remaining statement gets its own small ``unroll`` loop over the virtual threads, unless
  two of them in one sequence share a buffer that is not private to a virtual thread and one
  writes it: then the whole sequence stays in one loop (splitting it would reorder them).

A vthread loop with a non-constant extent is left as a serial loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, IntImm, PrimExpr, Var
from loopir.ir.functor import Mutator, collect_vars, post_order_stmts, post_order_visit
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
    seq,
)
from loopir.passes import storage_align
from loopir.passes._walk import int_of, is_thread_loop
from loopir.passes.base import Pass, require_lowered
from loopir.passes.context import PassContext
from loopir.tensor_intrin.calls import written_operands

__all__ = ["InjectVirtualThread"]


def _uses(node: object, v: Var) -> bool:
    return any(x is v for x in collect_vars(node))


def _written(s: Stmt) -> set[Buffer]:
    """Buffers ``s`` stores to: by BufferStores, and through the operands of tensor-core calls
    (an ldmatrix writes its fragment, an mma its accumulator)."""
    out: set[Buffer] = set()

    def f(n: Stmt) -> None:
        if isinstance(n, BufferStore):
            out.add(n.buffer)
        elif isinstance(n, Evaluate) and isinstance(n.value, Call) and op.is_tensor_core_call(n.value):
            out.update(a.buffer for a in written_operands(n.value))

    post_order_stmts(s, f)
    return out


def _loads(s: object) -> list[BufferLoad]:
    out: list[BufferLoad] = []
    post_order_visit(s, lambda n: out.append(n) if isinstance(n, BufferLoad) else None)
    return out


def _read_modify_write(leaf: Stmt) -> bool:
    """A store reading the buffer it stores to, or an mma (its accumulator)."""
    if isinstance(leaf, BufferStore):
        return any(ld.buffer is leaf.buffer for ld in _loads(leaf.value))
    return isinstance(leaf, Evaluate) and isinstance(leaf.value, Call) and leaf.value.op == "ptx_mma"


_T = TypeVar("_T")


class _Injector:
    def __init__(self, v: Var, extent: int, local_allocs: set[Buffer]) -> None:
        self.v = v
        self.extent = extent
        self.local_allocs = local_allocs
        self.expanded: set[Buffer] = set()
        self.dep_leaves: set[int] = set()
        self.dep_written: set[Buffer] = set()
        # Per statement (by id; the value keeps it alive, so the id is not reused): what it
        # writes, touches and whether it uses v. Each depends on the statement alone, never
        # on where it sits, and the fixpoint and the conflict checks ask again and again.
        self._memos: dict[str, dict[int, tuple[Stmt, Any]]] = {}

    def _memo(self, what: str, fn: Callable[[Stmt], _T], s: Stmt) -> _T:
        table = self._memos.setdefault(what, {})
        hit = table.get(id(s))
        if hit is None:
            hit = table[id(s)] = (s, fn(s))
        out: _T = hit[1]
        return out

    def _uses_v(self, s: Stmt) -> bool:
        return self._memo("uses", lambda x: _uses(x, self.v), s)

    def _written(self, s: Stmt) -> set[Buffer]:
        return self._memo("written", _written, s)

    def _touched(self, s: Stmt) -> set[Buffer]:
        return self._memo("touched", lambda x: self._written(x) | {ld.buffer for ld in _loads(x)}, s)

    # --- which statements depend on the virtual thread -------------------------------------
    def _leaf_depends(self, leaf: Stmt) -> bool:
        if self._uses_v(leaf) or self._touched(leaf) & (self.expanded | self.dep_written):
            return True
        # a read-modify-write must run once per virtual thread
        return _read_modify_write(leaf)

    def plan(self, body: Stmt) -> None:
        """Fixpoint over the leaves: which depend on v, which local buffers to expand.

        A leaf depends on v when it uses v, touches an expanded buffer or a buffer written by a
        dependent leaf (running it once would reorder it against those writes), or is a
        read-modify-write. A local buffer allocated under the vthread loop is expanded when a
        dependent leaf stores to it."""
        leaves: list[Stmt] = []
        post_order_stmts(
            body, lambda n: leaves.append(n) if isinstance(n, (BufferStore, Evaluate)) else None
        )
        self._memos.pop("depends", None)  # it reads dep_leaves, which this recomputes
        changed = True
        while changed:
            changed = False
            for leaf in leaves:
                if id(leaf) in self.dep_leaves or not self._leaf_depends(leaf):
                    continue
                self.dep_leaves.add(id(leaf))
                changed = True
                for b in self._written(leaf):
                    self.dep_written.add(b)
                    if b in self.local_allocs:
                        self.expanded.add(b)

    def _expr_depends(self, e: PrimExpr) -> bool:
        return _uses(e, self.v) or any(
            ld.buffer in self.expanded or ld.buffer in self.dep_written for ld in _loads(e)
        )

    def depends(self, s: Stmt) -> bool:
        return self._memo("depends", self._depends, s)

    def _depends(self, s: Stmt) -> bool:
        found = self._uses_v(s)
        if not found:
            def f(n: object) -> None:
                nonlocal found
                if id(n) in self.dep_leaves:
                    found = True

            post_order_visit(s, f)
        return found

    def _conflict(self, a: Stmt, b: Stmt) -> bool:
        """Whether ``a`` and ``b`` share a buffer that is not private to a virtual thread and
        that one of them writes."""
        wa = self._written(a) - self.expanded
        wb = self._written(b) - self.expanded
        return bool(wa & self._touched(b) or wb & self._touched(a))

    # --- rewriting ---------------------------------------------------------------------------
    def wrap(self, s: Stmt) -> Stmt:
        from loopir.ir.functor import substitute

        if self.extent == 1:
            out: Stmt = substitute(s, {self.v: IntImm(0, self.v.dtype)})
            return out
        v2 = Var(self.v.name, self.v.dtype)
        return For(v2, 0, self.extent, ForKind.UNROLLED, substitute(s, {self.v: v2}))

    def inject(self, s: Stmt) -> Stmt:
        if not self.depends(s):
            return s
        if isinstance(s, SeqStmt):
            dep = [c for c in s.seq if self.depends(c)]
            if any(self._conflict(a, b) for i, a in enumerate(dep) for b in dep[i + 1:]):
                # Splitting the virtual-thread loop over these statements would reorder
                # accesses to a buffer they share: keep them in one loop.
                return self.wrap(s)
            return seq(*[self.inject(c) for c in s.seq])
        if isinstance(s, For) and not self._expr_depends(s.min) and not self._expr_depends(s.extent):
            return attrs.evolve(s, body=self.inject(s.body))
        if isinstance(s, IfThenElse) and not self._expr_depends(s.condition):
            other = self.inject(s.else_case) if s.else_case is not None else None
            return attrs.evolve(s, then_case=self.inject(s.then_case), else_case=other)
        if isinstance(s, Allocate):
            return attrs.evolve(s, body=self.inject(s.body))
        return self.wrap(s)


def _expanded(b: Buffer, extent: int) -> Buffer:
    """``b`` with a leading dimension of ``extent``; padded (storage_align) strides are kept,
    the new dimension striding over one whole copy."""
    shape = (IntImm(extent, "int32"), *b.shape)
    if b.strides is None:
        return attrs.evolve(b, shape=shape)
    span = storage_align.allocation_size(
        [int_of(e) for e in b.shape], [int_of(s) for s in b.strides]
    )
    return attrs.evolve(b, shape=shape, strides=(IntImm(span, "int32"), *b.strides))


class _Expand(Mutator):
    """Give expanded buffers a leading vthread dimension indexed by the vthread var."""

    def __init__(self, bufs: set[Buffer], v: Var, extent: int) -> None:
        self.new = {b: _expanded(b, extent) for b in bufs}
        self.v = v

    def visit_Allocate(self, node: Allocate) -> Stmt:
        body = self.visit(node.body)
        buf = self.new.get(node.buffer, node.buffer)
        return node if body is node.body and buf is node.buffer else Allocate(buf, body)

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        node = self.generic_visit(node)
        b = self.new.get(node.buffer)
        return node if b is None else BufferLoad(b, (self.v, *node.indices))

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        node = self.generic_visit(node)
        b = self.new.get(node.buffer)
        return node if b is None else BufferStore(b, node.value, (self.v, *node.indices))


def _local_allocs(s: Stmt) -> set[Buffer]:
    """The per-thread buffers allocated in ``s``: local ones, and warp fragments (each
    lane's row is its registers)."""
    out: set[Buffer] = set()
    post_order_stmts(
        s, lambda n: out.add(n.buffer) if isinstance(n, Allocate) and n.buffer.scope in ("local", "warp") else None
    )
    return out


class _Inject(Mutator):
    def visit_For(self, node: For) -> Stmt:
        node = self.generic_visit(node)
        if not is_thread_loop(node, ("vthread.",)) or not isinstance(node.extent, IntImm):
            return node
        if not (isinstance(node.min, IntImm) and node.min.value == 0):
            return node
        v, extent = node.loop_var, node.extent.value
        # move the real thread loops directly below outside the virtual-thread loop
        threads: list[For] = []
        body = node.body
        while (
            isinstance(body, For)
            and is_thread_loop(body, ("threadIdx.",))
            and not _uses(body.min, v)
            and not _uses(body.extent, v)
        ):
            threads.append(body)
            body = body.body
        inj = _Injector(v, extent, _local_allocs(body))
        inj.plan(body)
        expand = _Expand(inj.expanded, v, extent)
        body = expand.visit(body)
        # the expanded buffers are new objects: translate the dependency sets to them
        inj.expanded = set(expand.new.values())
        inj.dep_written = {expand.new.get(b, b) for b in inj.dep_written}
        inj.dep_leaves = set()
        inj.plan(body)
        body = inj.inject(body)
        if _uses(body, v):  # pragma: no cover - every use is re-bound by a wrap loop
            return node
        for t in reversed(threads):
            body = attrs.evolve(t, body=body)
        return body


class InjectVirtualThread(Pass):
    """Fold vthread loops into each real thread (see module doc)."""

    name = "InjectVirtualThread"

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        require_lowered(func, self.name)
        return func.with_body(_Inject().visit(func.body))
