"""ThreadSync: insert ``storage_sync("shared")`` barriers (``__syncthreads()``) where needed.

Inside a kernel (under its outermost ``threadIdx``/``vthread`` loop) statements are scanned in
program order, tracking the shared buffers read and written since the last barrier. A barrier
is inserted before a statement that

- reads a shared buffer written since the last barrier (another thread may have written the
  element: read-after-write), or
- writes a shared buffer read since the last barrier (another thread may still need the old
  value: write-after-read).

Serial loops are scanned twice so that accesses at the end of one iteration meet those at the
start of the next: the cooperative fetch of the next ``k0`` iteration waits until every thread
has finished reading the current tile. Barriers are placed only where every thread of the block
reaches them: never inside a condition or loop bound that depends on ``threadIdx`` (or on a
loaded value). If such a region itself needs an internal barrier, :class:`PassError` is raised
rather than emitting a kernel with a race.
"""

from __future__ import annotations

import attrs

from loopir.errors import PassError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, PrimExpr, Var
from loopir.ir.functor import collect_vars, post_order_visit
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
from loopir.passes._walk import is_thread_loop
from loopir.passes.base import Pass, require_lowered
from loopir.passes.context import PassContext

__all__ = ["ThreadSync", "is_sync"]


def is_sync(s: Stmt) -> bool:
    """Whether ``s`` is a shared-memory barrier statement."""
    return (
        isinstance(s, Evaluate)
        and isinstance(s.value, Call)
        and s.value.op == "tvm_storage_sync"
    )


def _sync() -> Stmt:
    return Evaluate(op.storage_sync("shared"))


@attrs.frozen
class _State:
    reads: frozenset[Buffer] = frozenset()
    writes: frozenset[Buffer] = frozenset()

    def union(self, o: _State) -> _State:
        return _State(self.reads | o.reads, self.writes | o.writes)


_EMPTY = _State()


def _summary(s: Stmt) -> _State:
    reads: set[Buffer] = set()
    writes: set[Buffer] = set()

    def f(n: object) -> None:
        if isinstance(n, BufferLoad) and n.buffer.scope == "shared":
            reads.add(n.buffer)
        elif isinstance(n, BufferStore) and n.buffer.scope == "shared":
            writes.add(n.buffer)

    post_order_visit(s, f)
    return _State(frozenset(reads), frozenset(writes))


class _Planner:
    def __init__(self, thread_vars: set[Var]) -> None:
        self.thread_vars = thread_vars
        self.inserted = 0

    def _divergent(self, e: PrimExpr) -> bool:
        if any(v in self.thread_vars for v in collect_vars(e)):
            return True
        found = False

        def f(n: object) -> None:
            nonlocal found
            if isinstance(n, BufferLoad):
                found = True

        post_order_visit(e, f)
        return found

    @staticmethod
    def _conflict(summ: _State, state: _State) -> bool:
        return bool(summ.reads & state.writes or summ.writes & state.reads)

    def atomic(self, s: Stmt, state: _State) -> tuple[Stmt, _State]:
        summ = _summary(s)
        if self._conflict(summ, state):
            self.inserted += 1
            return seq(_sync(), s), summ
        return s, state.union(summ)

    def plan(self, s: Stmt, state: _State) -> tuple[Stmt, _State]:
        if is_sync(s):
            return s, _EMPTY
        if isinstance(s, SeqStmt):
            out = []
            for c in s.seq:
                if not is_sync(c) and self._conflict(_summary(c), state):
                    # Barrier at the coarsest level: before the whole compound statement,
                    # not deep inside it (a barrier in an inner loop would run per iteration).
                    self.inserted += 1
                    out.append(_sync())
                    state = _EMPTY
                c2, state = self.plan(c, state)
                out.append(c2)
            return seq(*out), state
        if isinstance(s, Allocate):
            body, state = self.plan(s.body, state)
            return attrs.evolve(s, body=body), state
        if isinstance(s, IfThenElse):
            if self._divergent(s.condition):
                self._check_no_internal_sync(s)
                return self.atomic(s, state)
            then, st = self.plan(s.then_case, state)
            if s.else_case is None:
                return attrs.evolve(s, then_case=then), st.union(state)
            other, se = self.plan(s.else_case, state)
            return attrs.evolve(s, then_case=then, else_case=other), st.union(se)
        if isinstance(s, For):
            if s.kind is ForKind.THREAD_BINDING:
                if is_thread_loop(s, ("threadIdx.",)):
                    self.thread_vars.add(s.loop_var)
                body, state = self.plan(s.body, state)
                return attrs.evolve(s, body=body), state
            if s.kind is ForKind.VECTORIZED or self._divergent(s.min) or self._divergent(s.extent):
                self._check_no_internal_sync(s)
                return self.atomic(s, state)
            # Two passes: the second starts from what the first iteration leaves behind.
            saved = self.inserted
            _, after_one = self.plan(s.body, state)
            self.inserted = saved
            body, after = self.plan(s.body, state.union(after_one))
            return attrs.evolve(s, body=body), after.union(state)
        return self.atomic(s, state)

    def _check_no_internal_sync(self, s: Stmt) -> None:
        inner = _Planner(set(self.thread_vars))
        body = s.then_case if isinstance(s, IfThenElse) else s.body  # type: ignore[union-attr]
        inner.plan(body, _EMPTY)
        if isinstance(s, IfThenElse) and s.else_case is not None:
            inner.plan(s.else_case, _EMPTY)
        if inner.inserted:
            raise PassError(
                "pass ThreadSync: a shared-memory barrier is needed inside a region that not "
                "every thread reaches (a thread-dependent condition or loop); refusing to emit "
                f"a race or a deadlock:\n{s}"
            )


class _Kernel:
    """Finds the outermost thread loops and plans barriers below each."""

    def visit(self, s: Stmt) -> Stmt:
        if isinstance(s, For) and is_thread_loop(s):
            planner = _Planner(set())
            out, _ = planner.plan(s, _EMPTY)
            return out
        if isinstance(s, SeqStmt):
            new = [self.visit(c) for c in s.seq]
            return s if all(a is b for a, b in zip(new, s.seq)) else SeqStmt(tuple(new))
        if isinstance(s, (For, Allocate)):
            body = self.visit(s.body)
            return s if body is s.body else attrs.evolve(s, body=body)
        if isinstance(s, IfThenElse):
            then = self.visit(s.then_case)
            other = self.visit(s.else_case) if s.else_case is not None else None
            if then is s.then_case and other is s.else_case:
                return s
            return attrs.evolve(s, then_case=then, else_case=other)
        return s


class ThreadSync(Pass):
    """Insert shared-memory barriers (see module doc)."""

    name = "ThreadSync"

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        require_lowered(func, self.name)
        return func.with_body(_Kernel().visit(func.body))
