"""How long an asynchronous ``wgmma`` reads its shared tiles, in barriers: the race checker's
in-flight reads.

``ptx_wgmma_async`` reads its A and B tiles from the issue until a ``ptx_wgmma_wait`` retires
its group (``wgmma.wait_group n`` retires every group but the ``n`` newest), and no barrier in
between orders that read: the tensor cores read through the async proxy while the issuing
threads run on. A write of those tiles by another thread races with the read unless a barrier
comes between the write and the issue (the write first), or between the retiring wait and the
write (the write last). So the read happens at every barrier count from the issue's ``c_i`` to
the retiring wait's ``c_w``.

The race checker gives the read those counts in two parts, each an access over a range of
counts (a variable ``d`` of a loop the IR does not have,
[`in_flight`][loopir.passes.race_inflight.in_flight]), so that each part stays inside one iteration of the loops
around it and the prover keeps its same-iteration reasoning (a pipeline's versions ``(k + 2) %
3`` and ``k % 3`` of one iteration differ):

* the issue's reads at ``c_i + d``, ``d`` from 0 to ``forward_span``: the barriers up to the first
  *boundary* after it (the end of an iteration of a loop with barriers, or the start of such a
  loop), when the retiring wait comes before any further boundary (it then covers the rest);
  else up to the retiring wait (every path: the next iteration or the exit of a loop, the most
  barriers of either);
* the wait's reads (``ptx_wgmma_wait`` reads what it retires) at ``c_w - d``, ``d`` from 0 to
  ``backward_span``: back to just after the last boundary before it.

Together they cover ``c_i .. c_w``: the wait is reached from the issue across at most one
boundary ``B``, the first part ends at ``B``'s count, the second starts one barrier after it.
A part that spans no barrier (the wait reached from the issue with no barrier and no boundary
between: every wait ``passes.wgmma_waits`` sinks within a step of FlashAttention 3's pipeline;
the wait's part back to its issue or boundary with none) is the statement's own read at its own
count, as a synchronous call's: every access of another thread between the same two barriers is
concurrent with it either way. A
walk that cannot be bounded (a loop of unknown or large extent before the retiring wait, no
retiring wait) gives ``UNBOUNDED``: the read is then concurrent with every later access, which
refuses rather than misses a race.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from loopir.ir import op
from loopir.ir.expr import Add, Call, IntImm, PrimExpr, Sub, Var
from loopir.ir.functor import Visitor, post_order_visit
from loopir.ir.stmt import Allocate, Evaluate, For, ForKind, IfThenElse, SeqStmt, Stmt
from loopir.tensor_intrin.calls import FOOTPRINT_KEY

__all__ = ["EnclosingPath", "IN_FLIGHT_KEY", "UNBOUNDED", "backward_span", "forward_span", "in_flight", "in_flight_count", "phases"]

#: Annotation of the loop ``in_flight_loop`` makes (with ``FOOTPRINT_KEY``: not in the IR).
IN_FLIGHT_KEY = "loopir.in_flight"
#: The span of a read whose retiring wait is not found: later than any barrier count.
UNBOUNDED = 1 << 24
#: Iterations of one loop the walk follows before giving up.
_MAX_ITERATIONS = 8


@attrs.frozen
class _State:
    """A forward walk: issues after ours, barriers passed, boundaries crossed, barriers at the
    first boundary."""

    issues: int = 0
    barriers: int = 0
    crossed: int = 0
    first: int = 0

    def cross(self) -> _State:
        return attrs.evolve(self, crossed=self.crossed + 1, first=self.first if self.crossed else self.barriers)


class _Unbounded(Exception):
    """The walk cannot bound the span."""


def _has(s: Stmt, barriers_only: bool = False) -> bool:
    """Whether ``s`` contains a barrier (or, unless ``barriers_only``, a wgmma issue or wait)."""
    found: list[bool] = []

    def visit(n: object) -> None:
        if isinstance(n, Call) and (op.is_block_barrier(n) or (
                not barriers_only and n.op in (*op.WGMMA_ISSUES, "ptx_wgmma_wait"))):  # fmt: skip
            found.append(True)

    post_order_visit(s, visit)
    return bool(found)


def _barrier_loop(s: Stmt) -> bool:
    return isinstance(s, For) and s.kind is not ForKind.THREAD_BINDING and _has(s.body, True)


def _leaf(s: Evaluate, st: _State) -> tuple[bool, _State]:
    v = s.value
    if op.is_block_barrier(v):
        return False, attrs.evolve(st, barriers=st.barriers + 1)
    if isinstance(v, Call) and v.op == "ptx_wgmma_async":
        return False, attrs.evolve(st, issues=st.issues + 1)
    if isinstance(v, Call) and v.op == "ptx_wgmma":
        return True, st  # it ends with wait_group 0
    if isinstance(v, Call) and v.op == "ptx_wgmma_wait":
        pending = v.args[0]
        return isinstance(pending, IntImm) and st.issues >= pending.value, st
    return False, st


def _walk(s: Stmt, st: _State) -> tuple[bool, _State]:
    """Run ``s`` from ``st``: retired inside it, and the state then or after it."""
    if isinstance(s, Evaluate):
        return _leaf(s, st)
    if isinstance(s, SeqStmt):
        for c in s.seq:
            done, st = _walk(c, st)
            if done:
                return True, st
        return False, st
    if not _has(s):
        return False, st
    if isinstance(s, Allocate):
        return _walk(s.body, st)
    if isinstance(s, IfThenElse):
        outs = [_walk(s.then_case, st), _walk(s.else_case, st) if s.else_case is not None else (False, st)]
        # a branch that retires nothing keeps the read in flight: the later end is the bound
        worst = attrs.evolve(st, issues=min(o.issues for _, o in outs), barriers=max(o.barriers for _, o in outs),
                             crossed=max(o.crossed for _, o in outs), first=max(o.first for _, o in outs))  # fmt: skip
        return all(done for done, _ in outs), worst
    assert isinstance(s, For), s
    if s.kind is ForKind.THREAD_BINDING:
        return _walk(s.body, st)  # a thread runs its own iteration
    if _barrier_loop(s):
        st = st.cross()  # entering a loop with barriers
    if not isinstance(s.extent, IntImm):
        raise _Unbounded
    for i in range(min(s.extent.value, _MAX_ITERATIONS)):
        if i and _barrier_loop(s):
            st = st.cross()
        done, st = _walk(s.body, st)
        if done:
            return True, st
    if s.extent.value > _MAX_ITERATIONS:
        raise _Unbounded
    return False, st.cross() if _barrier_loop(s) else st


def _after(path: Sequence[tuple[Stmt, int]], level: int, st: _State, wraps: int) -> list[_State]:
    """The states at the retiring wait over the ways the code goes on after child
    ``path[level][1]`` of ``path[level][0]``."""
    if level < 0:
        raise _Unbounded  # the kernel ends with the group in flight
    node, child = path[level]
    if isinstance(node, SeqStmt):
        for c in node.seq[child + 1:]:
            done, st = _walk(c, st)
            if done:
                return [st]
        return _after(path, level - 1, st, wraps)
    if isinstance(node, For) and node.kind is not ForKind.THREAD_BINDING:
        if _barrier_loop(node):
            st = st.cross()  # the end of an iteration
        out = _after(path, level - 1, st, wraps)  # the last iteration
        if not (isinstance(node.extent, IntImm) and node.extent.value <= 1):
            if wraps >= _MAX_ITERATIONS:
                raise _Unbounded
            done, nxt = _walk(node.body, st)  # the next iteration
            out += [nxt] if done else _after([*path[:level], (node, 0)], level, nxt, wraps + 1)
        return out
    return _after(path, level - 1, st, wraps)


def _ends(path: Sequence[tuple[Stmt, int]]) -> list[_State] | None:
    """The forward walk's states at the retiring wait, over every way there (None: unbounded)."""
    try:
        return _after(path, len(path) - 1, _State(), 0)
    except _Unbounded:
        return None


def forward_span(path: Sequence[tuple[Stmt, int]]) -> tuple[int, bool]:
    """The barriers the issue's own part of an in-flight read spans (module doc), and whether
    it ends at a boundary (else it reaches the retiring wait, or is unbounded).

    ``path`` holds the issue's enclosing statements, outermost first, each with the index of
    the child on the way to the issue (for a ``SeqStmt``; 0 for the others): the issue is the
    last one's child.
    """
    ends = _ends(path)
    if ends is None:
        return UNBOUNDED, False
    if all(e.crossed <= 1 for e in ends) and any(e.crossed for e in ends):
        return max(e.first if e.crossed else e.barriers for e in ends), True
    return max(e.barriers for e in ends), False


def _back(s: Stmt) -> tuple[int, int, bool]:
    """Barriers and asynchronous ``wgmma`` issues of ``s`` (run backwards), and whether it is a
    boundary (a loop with barriers)."""
    if _barrier_loop(s):
        return 0, 0, True
    # a compound statement's barriers, all of them: a longer span is sound
    barriers, issues = [0], [0]

    def count(x: object) -> None:
        if isinstance(x, Call):
            barriers[0] += op.is_block_barrier(x)
            issues[0] += x.op == "ptx_wgmma_async"

    post_order_visit(s, count)
    return barriers[0], issues[0], False


def backward_span(path: Sequence[tuple[Stmt, int]], pending: int = 0) -> int:
    """The barriers the wait's part of an in-flight read spans back (module doc): to one barrier
    after the last boundary before the wait (the start of its iteration of a loop with
    barriers, the end of such a loop before it), to the issue of the oldest group it retires
    (the ``pending + 1``-th issue back, when a statement without barriers holds it: a pipeline
    unrolled into its prologue and epilogue, fewer steps than stages, has no boundary), or the
    kernel's start."""
    barriers = issues = 0
    for node, child in reversed(path):
        if isinstance(node, SeqStmt):
            for c in reversed(node.seq[:child]):
                n, k, boundary = _back(c)
                if boundary:
                    return max(barriers - 1, 0)
                if k and n == 0 and issues + k > pending:
                    return barriers  # the read starts at that issue's count
                issues += k
                barriers += n
        elif _barrier_loop(node):
            return max(barriers - 1, 0)
    return barriers


def in_flight(path: Sequence[tuple[Stmt, int]], call: Call) -> For | None:
    """The loop over the barrier counts beyond its own that a tensor-core ``call``'s shared
    reads see (module doc), or None for a call whose reads are not in flight, or are but span
    no barrier (its own count, as a plain read): ``0 .. span``,
    annotated ``IN_FLIGHT_KEY`` with ``"forward"`` (the issue's part: added to the count, and
    whether it ends at a boundary) or ``"backward"`` (the wait's: subtracted)."""
    if call.op == "ptx_wgmma_async":
        ends = _ends(path)
        if ends is not None and all(e.barriers == 0 and e.crossed == 0 for e in ends):
            return None  # retired before any barrier or boundary: the issue's own interval
        span, bounded = forward_span(path)
        how = "forward" if bounded else "forward-all"
    elif call.op == "ptx_wgmma_wait":
        pending = call.args[0]
        span = backward_span(path, pending.value if isinstance(pending, IntImm) else 0)
        if span == 0:
            return None  # no barrier back to the issue or the boundary: the wait's own interval
        how = "backward"
    else:
        return None
    v = Var("in_flight", "int32")
    return For(v, 0, span + 1, ForKind.SERIAL, Evaluate(call), annotations={FOOTPRINT_KEY: True, IN_FLIGHT_KEY: how})


def in_flight_count(count: PrimExpr, loop: For) -> PrimExpr:
    """The barrier count of an in-flight read part at ``count`` (``in_flight``'s loop)."""
    if loop.annotations[IN_FLIGHT_KEY] == "backward":
        return Sub(count, loop.loop_var)
    return Add(count, loop.loop_var)


def phases(loop: For, own: tuple[tuple[For, bool, str], ...]) -> tuple[tuple[For, bool, str], ...]:
    """The places in their iterations of the barrier loops around an in-flight read part
    (``race_check._Access.barrier_loops``) from its statement's own.

    It keeps them when it spans no barrier. The wait's part spans back within the innermost
    iteration, never to its head: its counts are those of the wait's place or earlier ones
    after the head, so it keeps them too. The issue's part, when it ends at a boundary, spans
    to at most the end of the innermost iteration, inside one iteration of each loop: after its
    head (``"tail"``, which admits a next iteration's head at an equal count, as a tail does),
    or from it (``"?"``); else it may span anything (``"?"``)."""
    how, span = loop.annotations[IN_FLIGHT_KEY], loop.extent
    if how == "backward" or (isinstance(span, IntImm) and span.value == 1):
        return own
    if how == "forward-all":
        return tuple((f, always, "?") for f, always, _ in own)
    return tuple((f, always, "?" if place in ("head", "?") else "tail") for f, always, place in own)


class EnclosingPath(Visitor):
    """A visitor that keeps, while ``spans`` is set, the statements enclosing the node it
    visits (``path``: outermost first, with the child's index in a ``SeqStmt``, 0 for the
    others): what ``in_flight`` walks on from."""

    path: list[tuple[Stmt, int]]
    spans: bool

    def visit(self, node: object) -> None:
        if self.spans and isinstance(node, (For, IfThenElse, Allocate)):
            self.path.append((node, 0))
            super().visit(node)
            self.path.pop()
        else:
            super().visit(node)

    def visit_SeqStmt(self, node: SeqStmt) -> None:
        for i, c in enumerate(node.seq):
            self.path.append((node, i))
            self.visit(c)
            self.path.pop()
