"""How long a TMA copy writes its shared tile, in barriers: the race checker's in-flight copies.

A ``ptx_tma_load`` (``cp.async.bulk.tensor``) writes its tile through the async proxy some time
after the issue; the bytes are there for a thread once a wait on the copy's mbarrier phase has
returned. The race checker ([`loopir.passes.race_check`][loopir.passes.race_check]) orders two
accesses of different threads only by block barriers (equal barrier counts: concurrent), so
the copy becomes a write that is *in flight* at every barrier count from its issue ``c_i`` to
the count ``c_w`` of the wait that completes it (the **matching wait**: the first
``mbarrier_wait`` on the copy's barrier element after the issue, in program order):

* an access of the tile at a count in ``c_i .. c_w`` is concurrent with the copy: before the
  issue in its interval (the copy overwrites what a reader may still read: WAR), or after it
  (it may read the old bytes: RAW). This holds for *every* thread, the issuing one too: the
  write is made by no thread (the async proxy), so it is an access with no thread coordinates
  (the prover then cannot force the threads equal);
* an access at a count after ``c_w`` comes after a block barrier that every thread passes
  after the wait returned in the waiting threads. Why that is enough: the wait made the
  bytes visible to the waiting thread (``mbarrier.try_wait`` acquires the completed
  transactions), and ``bar.sync`` orders everything before it in any thread before everything
  after it in every thread (it is cumulative). One waiting thread suffices; every thread of
  ``hopper_gemm(tma=True)`` waits.

Ordering by a thread's *own* wait with no block barrier after it (every consumer waits, as in
warp-specialized kernels) is not modelled: such a reader is in ``c_i .. c_w`` and refused. Sound,
and one ``__syncthreads`` a K step is what the pipelines here have anyway.

The matching wait is found by walking the code forward from the issue (``tma_window``), the
way [`loopir.passes.race_inflight`][loopir.passes.race_inflight] walks to a ``wgmma``'s
retiring wait: through the rest of the issue's iteration of the innermost loop with barriers
``L``, then the next iterations of ``L`` (the issue's loop variable ``k`` shifted to ``k - j``
in the copy's barrier element, compared symbolically with each wait's: ``(k - 1 + 2) % 3`` is
``(k + 1) % 3``), and after ``L`` (the issue in one of its last iterations, ``k`` pinned to
``L``'s end). The window is then a list of **pieces**, each an access of the copy's tile (and
of its global source, read until the copy completes) anchored at the issue, in one barrier
interval: ``count + delta`` and, for a piece ``j`` iterations of ``L`` after the issue, the
copy's indices with ``k - j`` for ``k`` and the guard ``k - j >= L.min`` (the piece is in
iteration ``k``, the copy was issued in ``k - j``). Each piece keeps its place in its iteration
(head, inner, tail), so the prover still compares a pipeline's buffer versions within one
iteration; no piece spans more than one barrier interval. The cost depends on the stages and
the barriers per step, never on the sizes or the number of K steps.

Refused, naming the copy (a [`CodegenError`][loopir.errors.CodegenError]):

* no matching wait on some path (the kernel, or ``_MAX_ITERATIONS`` iterations, ends first);
* another ``mbarrier_arrive_expect_tx`` or ``mbarrier_init`` on the copy's barrier element
  (or one the walk cannot tell apart from it) before the matching wait: that starts the next
  phase, so the wait may be for it; the same copy statement issued again before it;
* structures the walk does not follow (a loop with barriers of unknown extent before the
  wait, a branch on a condition it cannot decide that holds barriers, the copy's coordinates
  depending on the issuing thread).

Example (``tests/passes/test_tma_check.py`` builds it: accepted; with the reads of version
``(k + 1) % 2``, the one in flight, refused as a race on ``S``)::

    if tx == 0: mbarrier_init(bar[0], 1); mbarrier_init(bar[1], 1)
    storage_sync()
    if tx == 0: mbarrier_arrive_expect_tx(bar[0], 2048); tma_load(S[0, 0, 0], G[0, 0], bar[0], (16, 64))
    for k in serial(3):                      # the copy issued at k is in flight until the
        mbarrier_wait(bar[k % 2], k // 2 % 2)  # wait of iteration k + 1 (or after the loop)
        storage_sync()
        if tx == 0 and k < 2:
            mbarrier_arrive_expect_tx(bar[(k + 1) % 2], 2048)
            tma_load(S[(k + 1) % 2, 0, 0], G[(k + 1) * 16, 0], bar[(k + 1) % 2], (16, 64))
        OUT[k * 16 + r, c] = S[k % 2, r, c]    # another version than the one in flight

That the matching wait polls the parity of the copy's phase (a wait on a phase already
complete returns at once) is proven by [`loopir.passes.race_phase`][loopir.passes.race_phase],
which the race check runs after this model, with its premise that each ``expect_tx`` announces
exactly its phase's copies' bytes (a wrong count hangs or completes the phase early).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from loopir import arith
from loopir.errors import CodegenError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, FloorMod, IntImm, PrimExpr, Var
from loopir.ir.functor import collect_vars, post_order_visit, substitute
from loopir.ir.printer import script
from loopir.ir.stmt import Allocate, Evaluate, For, ForKind, IfThenElse, SeqStmt, Stmt
from loopir.tensor_intrin.tma import call_touches

__all__ = [
    "CopyCollector",
    "Piece",
    "TmaWindowError",
    "copy_pair_skipped",
    "thread_free",
    "tma_window",
    "twin_covers",
]

#: Iterations of a loop the walk follows before it gives up (a copy is waited on within a
#: pipeline's depth).
_MAX_ITERATIONS = 8
_BLOCK_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


class TmaWindowError(CodegenError):
    """A TMA copy whose in-flight window the walk refuses (module doc)."""


@attrs.frozen
class Piece:
    """One barrier interval of a copy's in-flight write, anchored at the issue: the count is
    the issue's plus ``delta``; ``shift`` maps the issue's loop variables to what they were when
    the copy was issued (seen from the piece's iteration); ``conds`` restrict the piece's
    instances; ``place``: its place in its iteration of the innermost loop with barriers
    (``"head"``, ``"inner"``, ``"tail"``, ``"?"``; None: the issue's own)."""

    delta: int
    shift: tuple[tuple[Var, PrimExpr], ...] = ()
    conds: tuple[PrimExpr, ...] = ()
    place: str | None = None
    #: an interval between two iterations, given twice: as the tail of one and the head of the
    #: next (``twin_covers``)
    twin: bool = False
    #: a loop whose accesses this piece does not meet: they meet other pieces of the same
    #: intervals, in the loop's iterations (a piece after the loop, or before it: ``outside``)
    outside: For | None = None
    #: a piece in a loop with barriers the walk entered after the issue (its ``Window.inside``
    #: entry), not anchored at the issue
    inside: For | None = None

    def apply(self, e: PrimExpr) -> PrimExpr:
        return substitute(e, dict(self.shift)) if self.shift else e


class _Found(Exception):
    """The matching wait, this many barriers after the walk's start (with its call and the
    iterations of the loops the walk entered, for ``race_phase``)."""

    def __init__(
        self, barriers: int, call: Call | None = None, env: dict[Var, PrimExpr] | None = None
    ) -> None:
        self.barriers, self.call, self.env = barriers, call, dict(env or {})


def _is(s: Stmt, *ops: str) -> Call | None:
    v = s.value if isinstance(s, Evaluate) else None
    return v if isinstance(v, Call) and v.op in ops else None


def _relevant(s: Stmt, bar: BufferLoad) -> bool:
    """Whether ``s`` holds a block barrier or an mbarrier call or copy on ``bar``'s buffer."""
    found: list[bool] = []

    def visit(n: object) -> None:
        if isinstance(n, Call) and (op.is_block_barrier(n) or (
                n.op in ("ptx_mbarrier_wait", "ptx_mbarrier_arrive_expect_tx", "ptx_mbarrier_init", "ptx_tma_load")
                and _barrier(n).buffer is bar.buffer)):  # fmt: skip
            found.append(True)

    post_order_visit(s, visit)
    return bool(found)


def _barrier(call: Call) -> BufferLoad:
    b = call.args[2] if call.op == "ptx_tma_load" else call.args[0]
    assert isinstance(b, BufferLoad), call
    return b


def _ranges(path: Sequence[tuple[Stmt, int]]) -> dict[Var, tuple[int, int]]:
    """The constant ranges of the serial loops around a statement (``path``)."""
    out = {}
    for node, _ in path:
        if isinstance(node, For) and node.kind is not ForKind.THREAD_BINDING and isinstance(node.min, IntImm) \
                and isinstance(node.extent, IntImm):  # fmt: skip
            out[node.loop_var] = (node.min.value, node.min.value + node.extent.value)
    return out


def _same(
    a: PrimExpr, b: PrimExpr, ranges: dict[Var, tuple[int, int]] | None = None
) -> bool | None:
    """Whether two barrier indices are equal (True), differ (False) or cannot be told apart.
    ``ranges`` bound the loop variables: ``k`` over ``[0, 2)`` is ``k % 2`` (the simplifier
    drops a ``% m`` that changes nothing)."""
    ana = arith.Analyzer(ranges or {})
    d = ana.simplify(a - b)
    if isinstance(d, IntImm):
        return d.value == 0
    if not isinstance(a, FloorMod):
        a, b = b, a
    if isinstance(a, FloorMod) and not isinstance(b, FloorMod):
        m = arith.simplify(a.b)
        if isinstance(m, IntImm) and ana.can_prove(b >= 0) and ana.can_prove(b < m):
            b = FloorMod(b, m)
    if isinstance(a, FloorMod) and isinstance(b, FloorMod):
        m, n = arith.simplify(a.b), arith.simplify(b.b)
        diff = ana.simplify(a.a - b.a)
        if (
            isinstance(m, IntImm)
            and isinstance(n, IntImm)
            and m.value == n.value
            and isinstance(diff, IntImm)
        ):
            return diff.value % m.value == 0
    return None


def _same_element(a: Sequence[PrimExpr], b: Sequence[PrimExpr],
                  ranges: dict[Var, tuple[int, int]] | None = None) -> bool | None:  # fmt: skip
    verdicts = [_same(x, y, ranges) for x, y in zip(a, b, strict=True)]
    if any(v is False for v in verdicts):
        return False
    return True if all(verdicts) else None


class _Walk:
    """A forward walk from one copy (module doc): counts barriers until the matching wait."""

    def __init__(self, issue: Evaluate, call: Call, sub: dict[Var, PrimExpr],
                 ranges: dict[Var, tuple[int, int]] | None = None) -> None:  # fmt: skip
        self.issue, self.call, self.bar = issue, call, _barrier(call)
        self.ranges = ranges
        self.target = [arith.simplify(substitute(i, sub)) for i in self.bar.indices]
        self.env: dict[Var, PrimExpr] = {}
        #: the iterations of loops with barriers the walk entered: (loop, iteration, barriers before it)
        self.entered: list[tuple[For, int, int]] = []
        self.exited: dict[int, int] = {}  # the loops it walked to their end: barriers then

    def fail(self, why: str) -> TmaWindowError:
        return TmaWindowError(f"the TMA copy {why}:\n  {script(self.issue).strip()}")

    def element(self, call: Call) -> bool | None:
        idx = [arith.simplify(substitute(i, self.env)) for i in _barrier(call).indices]
        return _same_element(idx, self.target, self.ranges)

    def stmt(self, s: Stmt, n: int) -> int:
        """Walk ``s`` after ``n`` barriers; the barriers after it (``_Found`` at the wait)."""
        if isinstance(s, Evaluate):
            if op.is_block_barrier(s.value):
                return n + 1
            call = _is(
                s,
                "ptx_mbarrier_wait",
                "ptx_mbarrier_arrive_expect_tx",
                "ptx_mbarrier_init",
                "ptx_tma_load",
            )
            if call is None or _barrier(call).buffer is not self.bar.buffer:
                return n
            same = self.element(call)
            if call.op == "ptx_mbarrier_wait":
                if same:
                    raise _Found(n, call, self.env)
                return n
            if s is self.issue and same is not False:
                raise self.fail(f"is issued again on {self.bar} before a wait on it")
            if call.op != "ptx_tma_load" and same is not False:
                raise self.fail(f"is not waited on before {call.op.removeprefix('ptx_')}({_barrier(call)}) "
                                "starts another phase of its barrier")  # fmt: skip
            return n
        if isinstance(s, SeqStmt):
            for c in s.seq:
                n = self.stmt(c, n)
            return n
        if not _relevant(s, self.bar):
            return n
        if isinstance(s, Allocate):
            return self.stmt(s.body, n)
        if isinstance(s, IfThenElse):
            cond = arith.simplify(substitute(s.condition, self.env))
            if isinstance(cond, IntImm):
                branch = s.then_case if cond.value else s.else_case
                return n if branch is None else self.stmt(branch, n)
            if self._has_barrier(s):
                raise self.fail(f"is followed by a branch with barriers on a condition the race check cannot "
                                f"decide ({s.condition}) before its wait")  # fmt: skip
            # a wait that may not run is none; a copy or arrive that may run is checked
            for branch in (s.then_case, s.else_case):
                if branch is not None:
                    try:
                        self.stmt(branch, n)
                    except _Found:
                        pass
            return n
        assert isinstance(s, For), s
        if s.kind is ForKind.THREAD_BINDING:
            return self.stmt(s.body, n)  # a thread runs its own iteration
        lo, ext = (
            arith.simplify(substitute(s.min, self.env)),
            arith.simplify(substitute(s.extent, self.env)),
        )
        if not (isinstance(lo, IntImm) and isinstance(ext, IntImm)):
            raise self.fail(
                f"is followed by loop {s.loop_var.name} of unknown extent before its wait"
            )
        for i in range(min(ext.value, _MAX_ITERATIONS)):
            if self._has_barrier(s.body):
                self.entered.append((s, i, n))
            self.env[s.loop_var] = IntImm(lo.value + i, s.loop_var.dtype)
            try:
                n = self.stmt(s.body, n)
            finally:
                del self.env[s.loop_var]
        if ext.value > _MAX_ITERATIONS:
            raise self.fail(
                f"is not waited on within {_MAX_ITERATIONS} iterations of loop {s.loop_var.name}"
            )
        self.exited[id(s)] = n
        return n

    @staticmethod
    def _has_barrier(s: Stmt) -> bool:
        found: list[bool] = []
        post_order_visit(s, lambda x: found.append(True) if op.is_block_barrier(x) else None)
        return bool(found)

    def after(self, path: Sequence[tuple[Stmt, int]], level: int, n: int, stop: int = -1) -> int:
        """Walk the code after child ``path[level][1]`` of ``path[level][0]`` up to (not into
        the end of) level ``stop``; the barriers then."""
        while level > stop:
            node, child = path[level]
            if isinstance(node, SeqStmt):
                for c in node.seq[child + 1 :]:
                    n = self.stmt(c, n)
            elif isinstance(node, For) and node.kind is not ForKind.THREAD_BINDING and not (
                    isinstance(node.extent, IntImm) and node.extent.value == 1):  # fmt: skip
                raise self.fail(
                    f"is in loop {node.loop_var.name} and not waited on in its iteration"
                )
            level -= 1
        return n


def _barrier_loop(s: Stmt) -> bool:
    return (
        isinstance(s, For) and s.kind is not ForKind.THREAD_BINDING and _Walk._has_barrier(s.body)
    )


def _false(cond: PrimExpr) -> bool:
    c = arith.simplify(cond)
    return isinstance(c, IntImm) and not c.value


def _place(o: int, per: int) -> str:
    return "head" if o == 0 else "tail" if o == per else "inner"


def _straight(w: _Walk, last: int) -> list[Piece]:
    """The pieces of a copy issued outside loops with barriers, waited on ``last`` barriers
    later: one a barrier interval at the issue; where the walk entered one loop with barriers,
    also one in each of its iterations it walked (``Piece.inside``, pinned to the iteration by
    a guard), which the accesses in the loop meet instead (``Piece.outside``: the pieces at the
    loop's counts, and after it, where no access in the loop is)."""
    loops = {id(f): f for f, _, _ in w.entered}
    if len(loops) != 1:
        return [Piece(d) for d in range(last + 1)]
    (loop,) = loops.values()
    per = _barriers_per_iteration(loop.body)
    # the last entered iteration ends at the wait, or at the loop's end when the walk left it
    starts = [(i, n) for _, i, n in w.entered] + [(None, w.exited.get(id(loop), last))]
    pieces = [Piece(d, outside=loop if starts[0][1] <= d else None) for d in range(last + 1)]
    for (i, n0), (_, n1) in zip(starts, starts[1:]):  # iteration i: barriers n0 .. n1
        assert i is not None
        cond = (loop.loop_var == arith.simplify(loop.min + i),)
        pieces += [Piece(o, (), cond, "?" if per is None else _place(o, per), per is not None and o in (0, per),
                         inside=loop) for o in range(n1 - n0 + 1)]  # fmt: skip
    return pieces


def _barriers_per_iteration(s: Stmt) -> int | None:
    """The block barriers one run of ``s`` passes, when a constant (no branch holds any)."""
    if isinstance(s, Evaluate):
        return int(op.is_block_barrier(s.value))
    if isinstance(s, SeqStmt):
        parts = [_barriers_per_iteration(c) for c in s.seq]
        return None if None in parts else sum(p for p in parts if p is not None)
    if isinstance(s, Allocate):
        return _barriers_per_iteration(s.body)
    if not _Walk._has_barrier(s):
        return 0
    if isinstance(s, For):
        inner = _barriers_per_iteration(s.body)
        if s.kind is ForKind.THREAD_BINDING or inner is None:
            return inner
        return inner * s.extent.value if isinstance(s.extent, IntImm) else None
    return None


def tma_window(
    path: Sequence[tuple[Stmt, int]],
    issue: Evaluate,
    offset: int | None,
    per: int | None,
    guards: Sequence[PrimExpr] = (),
) -> list[Piece]:  # fmt: skip
    """The pieces of the in-flight write of the copy ``issue`` (module doc).

    ``path``: the issue's enclosing statements, outermost first, each with the index of the
    child on the way (``race_inflight.EnclosingPath``); ``offset``: the barriers from the start
    of the issue's iteration of its innermost loop with barriers to the issue, ``per``: that
    loop's barriers per iteration (None: not constants, or no such loop); ``guards``: the
    conditions the issue runs under (an issue they rule out in the loop's last iterations has
    no path after the loop).

    Raises
    ------
    TmaWindowError
        When the walk finds no matching wait on some path, or another phase starts first
        (module doc), naming the copy.
    """
    call = issue.value
    assert isinstance(call, Call) and call.op == "ptx_tma_load", issue
    ranges = _ranges(path)
    at = max((i for i, (node, _) in enumerate(path) if _barrier_loop(node)), default=None)
    if at is None:  # straight-line code (with loops entered on the way): one interval a barrier
        w = _Walk(issue, call, {}, ranges)
        try:
            w.after(path, len(path) - 1, 0)
        except _Found as f:
            return _straight(w, f.barriers)
        raise w.fail(f"is never waited on ({w.bar})")
    loop = path[at][0]
    assert isinstance(loop, For)
    if offset is None or per is None or per < 1:
        raise TmaWindowError(f"the TMA copy is in loop {loop.loop_var.name}, whose barriers per iteration are "
                             f"not a constant:\n  {script(issue).strip()}")  # fmt: skip
    k = loop.loop_var
    w = _Walk(issue, call, {}, ranges)
    try:  # the rest of the issue's iteration
        w.after(path, len(path) - 1, 0, at)
    except _Found as f:
        return [Piece(d, place=_place(offset + d, per)) for d in range(f.barriers + 1)]
    # the tail of one iteration and the head of the next are one interval, given in both forms
    pieces = [
        Piece(o - offset, place=_place(o, per), twin=o == per) for o in range(offset, per + 1)
    ]
    waited_in = None
    for j in range(1, _MAX_ITERATIONS + 1):  # the next iterations: k is the issue's k + j
        shift = ((k, k - j),)
        w = _Walk(issue, call, dict(shift), ranges)
        cond = (k - j >= arith.simplify(loop.min),)
        # no iteration is j after another when the loop is not longer than j: no pieces there
        exists = not (isinstance(loop.extent, IntImm) and loop.extent.value <= j)
        try:
            w.stmt(loop.body, 0)
        except _Found as f:
            pieces += [
                Piece(o - offset, shift, cond, _place(o, per), o == 0)
                for o in range(f.barriers + 1)
                if exists
            ]
            waited_in = j
            break
        pieces += [
            Piece(o - offset, shift, cond, _place(o, per), o in (0, per))
            for o in range(per + 1)
            if exists
        ]
    if waited_in is None:
        raise w.fail(
            f"is not waited on within {_MAX_ITERATIONS} iterations of loop {k.name} ({w.bar})"
        )
    for n in range(waited_in):  # the issue in the n-th last iteration: the wait after the loop
        last = arith.simplify(loop.min + loop.extent - 1 - n)
        if (
            isinstance(last, IntImm)
            and isinstance(loop.min, IntImm)
            and last.value < loop.min.value
        ):
            continue
        if any(_false(substitute(g, {k: last})) for g in guards):
            continue  # not issued in that iteration
        w = _Walk(issue, call, {k: last}, ranges)
        try:
            w.after(path, at - 1, 0)
        except _Found as f:
            start = (n + 1) * per - offset  # the loop's end, from the issue's count
            pieces += [
                Piece(start + d, (), (k == last,), "?", outside=loop) for d in range(f.barriers + 1)
            ]
            continue
        raise w.fail(f"is not waited on after the last iterations of loop {k.name} ({w.bar})")
    return pieces


def twin_covers(piece_place: str, twin: bool, other_place: str | None) -> bool:
    """Whether a piece need not be paired with an access at ``other_place`` in the same loop:
    a twin piece in the tail of iteration ``k`` against an access in a head (of ``k + 1``, at
    that count) is covered by its twin in the head of ``k + 1``, which the prover compares in
    one iteration, and the other way round. Every instance of the one has the other (the
    same copy, the same count, both iterations exist when the access's does)."""
    return twin and {piece_place, other_place} == {"head", "tail"}


def thread_free(loops: Sequence[For], conds: Sequence[PrimExpr], exprs: Sequence[PrimExpr],
                issue: Stmt) -> tuple[tuple[For, ...], tuple[PrimExpr, ...]]:  # fmt: skip
    """The issue's loops without its ``threadIdx`` loops and its guards without those that name
    them: the async proxy's write is no thread's. The copy's coordinates must not name them."""
    threads = {
        f.loop_var
        for f in loops
        if f.kind is ForKind.THREAD_BINDING and f.thread_tag in _BLOCK_TAGS
    }
    used = {v for e in exprs for v in collect_vars(e)}
    if used & threads:
        names = ", ".join(sorted(v.name for v in used & threads))
        raise TmaWindowError(f"the TMA copy's coordinates depend on the issuing thread ({names}); the race "
                             f"check models a copy whose tile is the same for every thread:\n  {script(issue).strip()}")  # fmt: skip
    keep = tuple(f for f in loops if f.loop_var not in threads)
    parts = [p for c in conds for p in _conjuncts(c)]  # ``tx == 0 and k < 2``: keep ``k < 2``
    return keep, tuple(c for c in parts if not (set(collect_vars(c)) & threads))


def _conjuncts(c: PrimExpr) -> list[PrimExpr]:
    from loopir.ir.expr import And

    return [*_conjuncts(c.a), *_conjuncts(c.b)] if isinstance(c, And) else [c]


def _is_copy(acc: Any) -> bool:
    """Whether the race checker's access ``acc`` is a piece of a TMA copy."""
    v = acc.stmt.value if isinstance(acc.stmt, Evaluate) else None
    return bool(acc.label == -1 and isinstance(v, Call) and v.op == "ptx_tma_load")


def _covered(twins: dict[int, object], piece: Any, other: Any) -> bool:
    """Whether ``piece`` meets ``other`` only where another piece does: its twin
    (``twin_covers``), or, for a piece marked with a loop (``Piece.outside``), the pieces in the
    loop's iterations (``other`` in the loop)."""
    kind = twins.get(id(piece))
    if kind is None or not other.barrier_loops:
        return False
    if kind != "twin":  # a loop: accesses in it meet the pieces in its iterations
        return any(f is kind for f, _, _ in other.barrier_loops)
    loop, _, place = piece.barrier_loops[-1]
    theirs = next((p for f, _, p in other.barrier_loops if f is loop), None)
    return twin_covers(place, True, theirs)


def copy_pair_skipped(twins: dict[int, object], w: Any, x: Any) -> bool:
    """Whether the race checker need not ask about the pair ``(w, x)``: two pieces of one copy
    (one writer; a copy issued again before its wait is refused by the walk), or a piece that
    another piece covers for ``x`` (``_covered``)."""
    if w.stmt is x.stmt and _is_copy(w) and _is_copy(x):
        return True
    return _covered(twins, w, x) or _covered(twins, x, w)


class CopyCollector:
    """The race checker's collector's part for TMA copies (a mixin of
    ``race_check._Collector``, which provides the state below): each copy's barrier read at the
    issue, its tile write and source read as the pieces of its window, by no thread."""

    barrier_loops: list[tuple[For, bool, PrimExpr, PrimExpr]]
    count: PrimExpr
    loops: list[For]
    conds: list[PrimExpr]
    path: list[tuple[Stmt, int]]
    #: id of a piece's access -> "twin" or the loop (``Piece.outside``) whose accesses skip it
    twins: dict[int, object]
    #: id of a loop -> the pieces of copies issued before it that are in flight in it
    deferred: dict[int, list[Any]]

    def _phase(self, start: PrimExpr, per_iter: PrimExpr) -> str:
        raise NotImplementedError

    def _add(self, buf: Buffer, idx: tuple[PrimExpr, ...], store: bool) -> None:
        raise NotImplementedError

    def new_access(self, buffer: Buffer, indices: tuple[PrimExpr, ...], is_store: bool, loops: tuple[For, ...],
                   conds: tuple[PrimExpr, ...], count: PrimExpr, stmt: Stmt,
                   places: tuple[tuple[For, bool, str], ...]) -> Any:  # fmt: skip
        raise NotImplementedError

    def _mark(self, acc: Any, pc: Piece) -> None:
        if pc.twin or pc.outside is not None:
            self.twins[id(acc)] = pc.outside if pc.outside is not None else "twin"

    def tma_copy(self, node: Evaluate) -> None:
        """The accesses of the copy ``node`` (module doc)."""
        assert isinstance(node.value, Call)
        offset = per = None
        if self.barrier_loops:
            _, _, start, per_iter = self.barrier_loops[-1]
            offset, per = (
                _const(arith.simplify(self.count - start)),
                _const(arith.simplify(per_iter)),
            )
        pieces = tma_window(self.path, node, offset, per, self.conds)
        own = tuple(
            (f, always, self._phase(start, p)) for f, always, start, p in self.barrier_loops
        )
        touches = call_touches(node.value)
        loops, conds = thread_free(
            self.loops, self.conds, [i for t in touches for i in t.indices], node
        )
        for t in touches:
            if not t.is_store and t.buffer.scope == "shared":  # the barrier: read at the issue
                self._add(t.buffer, t.indices, False)
                continue
            for pc in pieces:
                if pc.inside is not None:  # met when the collector enters that loop
                    self.deferred.setdefault(id(pc.inside), []).append((node, t, pc, loops, conds))
                    continue
                places = (
                    own if pc.place is None else (*own[:-1], (own[-1][0], own[-1][1], pc.place))
                )
                cond = () if t.cond is None else (pc.apply(t.cond),)
                count = self.count + pc.delta if pc.delta else self.count
                acc = self.new_access(t.buffer, tuple(pc.apply(i) for i in t.indices), t.is_store,
                                      (*loops, *t.loops(node)), (*(pc.apply(c) for c in conds), *pc.conds, *cond),
                                      count, node, places)  # fmt: skip
                self._mark(acc, pc)

    def tma_deferred(self, loop: For) -> None:
        """The pieces of copies issued before ``loop`` that are in flight in its first
        iterations (``Piece.inside``), as accesses in the loop (its iteration's count and place
        just entered)."""
        for node, t, pc, loops, conds in self.deferred.pop(id(loop), []):
            own = tuple(
                (f, always, self._phase(start, p)) for f, always, start, p in self.barrier_loops
            )
            places = (*own[:-1], (own[-1][0], own[-1][1], pc.place or "?"))
            cond = () if t.cond is None else (t.cond,)
            count = self.count + pc.delta if pc.delta else self.count
            acc = self.new_access(t.buffer, t.indices, t.is_store, (*loops, loop, *t.loops(node)),
                                  (*conds, *pc.conds, *cond), count, node, places)  # fmt: skip
            self._mark(acc, pc)


def _const(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) else None
