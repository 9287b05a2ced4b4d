"""ThreadSync: insert ``storage_sync("shared")`` barriers (``__syncthreads()``) where needed.

A kernel is an outermost thread-bound loop (as the host/device split sees it). Every ``threadIdx``
loop in it runs on the same hardware threads, so sibling thread loop nests under one block loop are
*not* ordered by the loop structure: only barriers order them. The planner scans the whole kernel in
program order, keeping the shared- and global-memory accesses made since the last barrier (a barrier
orders a block's global accesses too), and inserts a barrier before a statement with an access that
conflicts with one of them: same buffer, at least one a store (read-after-write, write-after-read,
write-after-write), and not proven to be touched by one thread only under the enclosing guards (the
race checker's prover, [`threads_may_share`][loopir.passes.race_check.threads_may_share]: a thread
re-reading its own element needs no barrier).

Within one iteration of a serial loop, after a barrier at the top level of the loop's body (one
every thread passes in every iteration), two threads between the same two barriers run the same
iteration: pairs of accesses made since then are proven with the loop's variable equal on both
sides. So the copy of the next pipeline stage into one buffer version and the reads of another
version in the same iteration need no barrier between them, where without that knowledge the
versions ``(k + 3) % 4`` and ``k % 4`` of two different iterations may coincide.

The barrier goes at the coarsest level: before the whole compound statement that conflicts, not
inside it. A serial loop's body is planned again from what its iteration leaves after its last
barrier until that tail is part of what the plan started from, so that accesses at the end of one
iteration meet those at the start of the next: the cooperative fetch of the next ``k0`` iteration waits until every thread
has finished reading the current tile. Barriers are placed only where every thread of the block
reaches them: never inside a condition or loop bound that depends on ``threadIdx`` (or on a loaded
value), nor inside a ``threadIdx`` loop narrower than the block (it runs under
``if (threadIdx.x < extent)``). If such a region itself needs an internal barrier,
[`PassError`][loopir.errors.PassError] is raised rather than emitting a kernel with a race or a
deadlock. The pass is idempotent: existing barriers reset the scan.
"""

from __future__ import annotations

from typing import Any

import attrs

from loopir.errors import PassError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, IntImm, Not, PrimExpr, Var
from loopir.ir.functor import collect_vars, post_order_stmts, post_order_visit
from loopir.ir.stmt import (
    Allocate,
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
from loopir.passes.race_check import collect_accesses, threads_may_share
from loopir.passes.tma_check import sync_after_mbarrier_init

__all__ = ["ThreadSync", "is_sync"]


def is_sync(s: Stmt) -> bool:
    """Whether ``s`` is a shared-memory barrier statement (a cross-thread reduction over more
    than a warp is one; a warp's shuffles are not)."""
    return isinstance(s, Evaluate) and op.is_block_barrier(s.value)


def _sync() -> Stmt:
    return Evaluate(op.storage_sync("shared"))


@attrs.frozen
class _State:
    """The shared- and global-memory accesses made since the last barrier."""

    accesses: tuple[Any, ...] = ()

    def union(self, o: _State) -> _State:
        if not o.accesses:
            return self
        seen = {id(a) for a in self.accesses}
        return _State(self.accesses + tuple(a for a in o.accesses if id(a) not in seen))


_EMPTY = _State()
#: the most plans of one serial loop's body before the planner settles for a barrier at its top
#: (each plan starts from more accesses, so the plans end; this bounds their count)
_REPLANS = 8


class _Planner:
    def __init__(self, thread_vars: set[Var], launch: dict[str, int | None],
                 written: frozenset[Buffer]) -> None:  # fmt: skip
        self.thread_vars = thread_vars
        self.launch = launch
        self.written = written
        self.inserted = 0
        self.loops: list[For] = []
        self.conds: list[PrimExpr] = []
        # keyed by id()s; the values keep the keyed objects alive, so ids are not reused. A
        # summary depends on the statement and its context (the enclosing loops and
        # conditions: one statement object may sit in two places). Shared with the planners
        # _check_no_internal_sync makes, which revisit the same statements and access pairs.
        self._summaries: dict[tuple[int, ...], tuple[tuple[object, ...], _State]] = {}
        self._pairs: dict[tuple[int, ...], tuple[Any, Any, bool]] = {}
        # the body (a SeqStmt, by id) of each serial loop being planned, and the variables of
        # the loops whose current iteration has passed a barrier at the top level of its body:
        # every access since then is of this iteration, so a pair of them shares the loop's
        # value (module doc)
        self._bodies: dict[int, Var] = {}
        self.same_iteration: list[Var] = []
        # one ``Not(condition)`` per condition (by id; the key object kept alive): an else
        # branch's accesses keep their identity when a loop's body is planned again, so the
        # replanning of _plan_iterations compares like with like
        self._negations: dict[int, tuple[PrimExpr, PrimExpr]] = {}

    def _summary(self, s: Stmt) -> _State:
        context = (s, *self.loops, *self.conds)
        key = (len(self.loops), *map(id, context))
        hit = self._summaries.get(key)
        if hit is None:
            # a barrier also orders the block's global-memory accesses (an intermediate
            # written by one thread loop nest and read by a sibling nest)
            accs = collect_accesses(s, self.loops, self.conds)
            hit = (context, _State(tuple(accs)))
            self._summaries[key] = hit
        return hit[1]

    def _pair_conflicts(self, a: Any, b: Any) -> bool:
        """Whether two threads may touch one element, one through ``a``, one through ``b``."""
        if a.buffer is not b.buffer or not (a.is_store or b.is_store):
            return False
        same: tuple[Var, ...] = ()
        if self.same_iteration:  # the marked loops around both accesses
            around = {f.loop_var for f in a.loops} & {f.loop_var for f in b.loops}
            same = tuple(v for v in self.same_iteration if v in around)
        key = (id(a), id(b), *map(id, same))
        hit = self._pairs.get(key)
        if hit is None:
            hit = (a, b, threads_may_share(self.launch, a, b, self.written, same))
            self._pairs[key] = hit
        return hit[2]

    def _conflict(self, summ: _State, state: _State) -> bool:
        return any(self._pair_conflicts(a, b) for b in summ.accesses for a in state.accesses)

    def _partial_thread_loop(self, s: For) -> bool:
        """A threadIdx loop that not every launched thread enters (``if tid < extent``)."""
        launched = self.launch.get(s.thread_tag or "")
        if launched is None:  # symbolic: the split requires one extent for every loop of a tag
            return False
        return not (isinstance(s.extent, IntImm) and s.extent.value == launched)

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

    def atomic(self, s: Stmt, state: _State) -> tuple[Stmt, _State]:
        summ = self._summary(s)
        if self._conflict(summ, state):
            self.inserted += 1
            return seq(_sync(), s), summ
        return s, state.union(summ)

    def plan(self, s: Stmt, state: _State) -> tuple[Stmt, _State]:
        if is_sync(s):
            return s, _EMPTY
        if isinstance(s, SeqStmt):
            out = []
            owner, marked = self._bodies.get(id(s)), False
            for c in s.seq:
                synced = is_sync(c)
                if not synced and self._conflict(self._summary(c), state):
                    # Barrier at the coarsest level: before the whole compound statement,
                    # not deep inside it (a barrier in an inner loop would run per iteration).
                    self.inserted += 1
                    out.append(_sync())
                    state = _EMPTY
                    synced = True
                if synced and owner is not None and not marked:
                    self.same_iteration.append(owner)
                    marked = True
                c2, state = self.plan(c, state)
                out.append(c2)
            if owner is not None and marked:  # the rest of the iteration meets the next one
                self.same_iteration.remove(owner)
            return seq(*out), state
        if isinstance(s, Allocate):
            body, state = self.plan(s.body, state)
            return attrs.evolve(s, body=body), state
        if isinstance(s, IfThenElse):
            if self._divergent(s.condition):
                self._check_no_internal_sync(s)
                return self.atomic(s, state)
            then, st = self._guarded(s.condition, s.then_case, state)
            if s.else_case is None:
                return attrs.evolve(s, then_case=then), st.union(state)
            other, se = self._guarded(self._negation(s.condition), s.else_case, state)
            return attrs.evolve(s, then_case=then, else_case=other), st.union(se)
        if isinstance(s, For):
            if s.kind is ForKind.THREAD_BINDING and not is_thread_loop(s, ("vthread.",)):
                if is_thread_loop(s, ("threadIdx.",)):
                    self.thread_vars.add(s.loop_var)
                    if self._partial_thread_loop(s):
                        self._check_no_internal_sync(s)
                        return self.atomic(s, state)
                body, state = self._in_loop(s, s.body, state)
                return attrs.evolve(s, body=body), state
            if s.kind is ForKind.VECTORIZED or self._divergent(s.min) or self._divergent(s.extent):
                self._check_no_internal_sync(s)
                return self.atomic(s, state)
            inner = s.body
            while isinstance(inner, Allocate):
                inner = inner.body
            self._bodies[id(inner)] = s.loop_var
            try:
                body, after = self._plan_iterations(s, state)
            finally:
                del self._bodies[id(inner)]
            return attrs.evolve(s, body=body), after.union(state)
        return self.atomic(s, state)

    def _plan_iterations(self, loop: For, state: _State) -> tuple[Stmt, _State]:
        """Plan a serial loop's body so that the accesses one iteration leaves after its last
        barrier meet the next iteration's: replanned from ``state`` plus every tail planned so
        far until the plan's own tail is among them. A plan's barriers depend on what it
        starts from, so a second plan may leave a tail the first did not (and whose conflicts
        with the head nobody checked); the entry grows each round and is finite, so this ends,
        mostly after one or two plans."""
        entry, saved = state, self.inserted
        for _ in range(_REPLANS):
            body, after = self._in_loop(loop, loop.body, entry)
            grown = entry.union(after)
            if len(grown.accesses) == len(entry.accesses):
                return body, after
            self.inserted = saved  # only the final plan's barriers count
            entry = grown
        # not settled: a barrier at the top of the body, which orders every iteration's accesses
        # after the previous iteration's (sound whatever the plans did; one barrier more at most)
        self.inserted = saved + 1
        return self._in_loop(loop, seq(_sync(), loop.body), _EMPTY)

    def _negation(self, cond: PrimExpr) -> PrimExpr:
        hit = self._negations.get(id(cond))
        if hit is None:
            hit = self._negations[id(cond)] = (cond, Not(cond))
        return hit[1]

    def _guarded(self, cond: PrimExpr, body: Stmt, state: _State) -> tuple[Stmt, _State]:
        self.conds.append(cond)
        try:
            return self.plan(body, state)
        finally:
            self.conds.pop()

    def _in_loop(self, loop: For, body: Stmt, state: _State) -> tuple[Stmt, _State]:
        self.loops.append(loop)
        try:
            return self.plan(body, state)
        finally:
            self.loops.pop()

    def _check_no_internal_sync(self, s: For | IfThenElse) -> None:
        inner = _Planner(set(self.thread_vars), self.launch, self.written)
        inner._summaries, inner._pairs, inner._negations = self._summaries, self._pairs, self._negations
        inner.loops = [*self.loops, *([s] if isinstance(s, For) else [])]
        inner.conds = list(self.conds)
        if isinstance(s, IfThenElse):
            inner._guarded(s.condition, s.then_case, _EMPTY)
            if s.else_case is not None:
                inner._guarded(inner._negation(s.condition), s.else_case, _EMPTY)
        else:
            inner.plan(s.body, _EMPTY)
        if inner.inserted:
            raise PassError(
                "pass ThreadSync: a shared-memory barrier is needed inside a region that not "
                "every thread reaches (a thread-dependent condition or loop); refusing to emit "
                f"a race or a deadlock:\n{s}"
            )


def _launch_extents(root: Stmt) -> dict[str, int | None]:
    """Per ``threadIdx`` tag, the extent the kernel under ``root`` is launched with: the
    largest constant extent of the tag's loops (None when one of them is symbolic)."""
    out: dict[str, int | None] = {}

    def f(n: object) -> None:
        if isinstance(n, For) and is_thread_loop(n, ("threadIdx.",)):
            tag = n.thread_tag or ""
            if not isinstance(n.extent, IntImm):
                out[tag] = None
            elif tag not in out or (out[tag] is not None and n.extent.value > out[tag]):  # type: ignore[operator]
                out[tag] = n.extent.value

    post_order_stmts(root, f)
    return out


class _Kernel:
    """Finds the kernels (outermost thread-bound loops, as the host/device split does) and
    plans barriers over each kernel's whole body: every ``threadIdx`` loop in it runs on the
    same hardware threads, so sibling thread loop nests are ordered only by barriers."""

    def visit(self, s: Stmt) -> Stmt:
        if isinstance(s, For) and s.kind is ForKind.THREAD_BINDING:
            s = sync_after_mbarrier_init(s)  # the TMA rule needs the init's barrier first
            written = frozenset(a.buffer for a in collect_accesses(s) if a.is_store)
            planner = _Planner(set(), _launch_extents(s), written)
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
