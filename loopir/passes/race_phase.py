"""Whether each mbarrier wait polls the parity of the phase it waits for: the race check's
phase proof for TMA kernels.

[`loopir.passes.race_tma`][loopir.passes.race_tma] orders a copy's readers after the *matching
wait* (the first ``mbarrier_wait`` on the copy's barrier element after the issue). That wait
orders anything only if its ``phase`` argument is the parity of the phase the copy completes:
``mbarrier.try_wait.parity`` on the other parity returns at once (the previous phase, or before
the first one, counts as complete). With one arrival a phase (``mbarrier_init(bar, 1)``, the
issuing thread's ``mbarrier_arrive_expect_tx``), the copies announced by the ``n``-th arrival on
an element since its init complete phase ``n``. This module proves, by induction over the
arrivals on each element in program order, that the first wait after each arrival ``A`` polls
``phase(A) % 2``:

* the base: the arrival's previous event on its element (walking backward) is the init: the
  wait's parity must be 0;
* the step: it is an earlier arrival ``A'``: the wait after ``A`` must poll the other parity
  than the wait after ``A'`` (which the step for ``A'`` proved right).

Each arrival is a statement in a loop; the walks shift the loop's variable (``A'`` in iteration
``k - j``, the wait in ``k + j``) and split the first and last iterations into cases where
``A'`` is before the loop or the wait after it, where the variable is pinned and the parities
are constants. Two parities ``X % 2`` and ``Y % 2`` differ when ``X - Y`` is an odd constant,
or ``X = x // V``, ``Y = y // V`` with ``x - y`` an odd multiple of ``V`` (the pipelines'
``(k + c) // V % 2``); the cost depends on the stages, not on the sizes or the K steps.
Checked with it, the premises: every init of a barrier counts one arrival, every arrival and
every copy is made by one thread (a guard pins each ``threadIdx`` of the launch), a copy
follows its own arrival in its block (its bytes are its phase's) under no condition the arrival
is not under, and each arrival's ``expect_tx`` count equals its phase's copies' bytes (each
``prod(box) * element size``), proven over the loops around it: fewer bytes complete the phase
while copies still land, more never complete it. Anything else is refused (a
[`CodegenError`][loopir.errors.CodegenError] naming the arrival or the copy): a wait whose
parity cannot be proven is one the race model cannot rely on.

Example: the pipelines of ``hopper_gemm(tma=True)`` arrive on ``bar[j % V]`` for iterations
``j = 0, 1, ...`` and wait with ``j // V % 2``: the wait after the arrival of ``j`` and the one
after the arrival of ``j - V`` (the previous on that element) poll ``j // V`` and
``(j - V) // V``, which differ by one. A wait with ``j // V % 2`` replaced by ``0`` is refused
(``tests/passes/test_tma_check.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from loopir import arith
from loopir.errors import CodegenError
from loopir.ir.equality import structural_equal
from loopir.ir.expr import BufferLoad, Call, FloorDiv, FloorMod, IntImm, PrimExpr, Var
from loopir.ir.functor import substitute
from loopir.ir.printer import script
from loopir.ir.stmt import Allocate, Evaluate, For, ForKind, IfThenElse, PrimFunc, SeqStmt, Stmt
from loopir.ir.tma import tma_bytes
from loopir.passes.race_tma import (
    _MAX_ITERATIONS,
    _barrier,
    _barrier_loop,
    _false,
    _Found,
    _ranges,
    _same_element,
    _Walk,
)
from loopir.passes.race_ws import ws_barriers

__all__ = ["check_phases"]

_ARRIVE, _INIT, _WAIT = "ptx_mbarrier_arrive_expect_tx", "ptx_mbarrier_init", "ptx_mbarrier_wait"
#: a case: conditions on the arrival's loop variables, and a value under them
_Case = tuple[tuple[PrimExpr, ...], PrimExpr]


class _Problem(Exception):
    pass


def _call(s: Stmt, *ops: str) -> Call | None:
    v = s.value if isinstance(s, Evaluate) else None
    return v if isinstance(v, Call) and v.op in ops else None


def _paths(
    s: Stmt, path: list[tuple[Stmt, int]], out: list[tuple[list[tuple[Stmt, int]], Evaluate]]
) -> None:
    """Every arrival and copy with its enclosing statements (``race_inflight.EnclosingPath``'s
    form, an IfThenElse's child 0 or 1: its then or else branch)."""
    if isinstance(s, Evaluate):
        if _call(s, _ARRIVE, "ptx_tma_load") is not None:
            out.append((list(path), s))
        return
    if isinstance(s, SeqStmt):
        for i, c in enumerate(s.seq):
            path.append((s, i))
            _paths(c, path, out)
            path.pop()
        return
    kids = [k for k in (getattr(s, "body", None), getattr(s, "then_case", None), getattr(s, "else_case", None))
            if isinstance(k, Stmt)]  # fmt: skip
    for i, k in enumerate(kids):  # an IfThenElse's then (0) or else (1) branch
        path.append((s, i))
        _paths(k, path, out)
        path.pop()


def _parity(f: _Found) -> PrimExpr:
    assert f.call is not None
    parity: PrimExpr = f.call.args[1]
    out: PrimExpr = substitute(parity, f.env)
    return out


def _forward(path: Sequence[tuple[Stmt, int]], node: Evaluate) -> list[_Case]:
    """The parity of the first wait after the arrival ``node``, in its frame, by cases."""
    call = node.value
    assert isinstance(call, Call)
    at = max((i for i, (n, _) in enumerate(path) if _barrier_loop(n)), default=None)
    w = _Walk(node, call, {}, _ranges(path))
    try:
        w.after(path, len(path) - 1, 0, -1 if at is None else at)
    except _Found as f:
        return [((), _parity(f))]
    if at is None:
        raise _Problem("is never waited on")
    loop = path[at][0]
    assert isinstance(loop, For)
    k, last = loop.loop_var, arith.simplify(loop.min + loop.extent - 1)
    cases: list[_Case] = []
    for j in range(1, _MAX_ITERATIONS + 1):
        try:
            _Walk(node, call, {k: k - j}, _ranges(path)).stmt(loop.body, 0)
        except _Found as f:
            cases.append(((k + j <= last,), substitute(_parity(f), {k: k + j})))
            break
    else:
        raise _Problem(f"is not waited on within {_MAX_ITERATIONS} iterations of loop {k.name}")
    guards = [
        g for g, i in ((n.condition, i) for n, i in path if isinstance(n, IfThenElse)) if i == 0
    ]
    for n in range(j):  # the arrival in the n-th last iteration: the wait after the loop
        pinned = arith.simplify(last - n)
        if any(_false(substitute(g, {k: pinned})) for g in guards):
            continue  # not made in that iteration
        try:
            _Walk(node, call, {k: pinned}, _ranges(path)).after(path, at - 1, 0)
        except _Found as f:
            cases.append(((k == pinned,), _parity(f)))
            continue
        raise _Problem(f"is not waited on after the last iterations of loop {k.name}")
    return cases


class _Back:
    """A backward walk from an arrival to the previous event on its barrier element."""

    def __init__(self, bar: BufferLoad, env: dict[Var, PrimExpr], guards: Sequence[PrimExpr],
                 ranges: dict[Var, tuple[int, int]]) -> None:  # fmt: skip
        self.bar, self.env, self.ranges = (
            bar,
            env,
            ranges,
        )  # the arrival's element; its loops' values
        self.guards = guards  # the conditions the arrival runs under (its thread's)

    def target(self) -> list[PrimExpr]:
        return [arith.simplify(substitute(i, self.env)) for i in self.bar.indices]

    def stmt(
        self, s: Stmt, walk_env: dict[Var, PrimExpr]
    ) -> tuple[Evaluate, dict[Var, PrimExpr]] | str | None:
        """``s`` run backwards: the previous arrival (and the values of its loops), ``"init"``,
        or None (none in ``s``)."""
        if isinstance(s, Evaluate):
            call = _call(s, _ARRIVE, _INIT)
            if call is None or _barrier(call).buffer is not self.bar.buffer:
                return None
            here = [arith.simplify(substitute(i, walk_env)) for i in _barrier(call).indices]
            same = _same_element(here, self.target(), self.ranges)
            if same is None:
                raise _Problem(
                    f"cannot tell {call.op.removeprefix('ptx_')}({_barrier(call)}) from its element"
                )
            if not same:
                return None
            if call.op == _INIT:
                if not (isinstance(call.args[1], IntImm) and call.args[1].value == 1):
                    raise _Problem(
                        f"follows {script(s).strip()}: the phase proof counts one arrival a phase (count 1)"
                    )
                return "init"
            return (s, dict(walk_env))
        if isinstance(s, SeqStmt):
            for c in reversed(s.seq):
                if (r := self.stmt(c, walk_env)) is not None:
                    return r
            return None
        if isinstance(s, Allocate):
            return self.stmt(s.body, walk_env)
        if isinstance(s, IfThenElse):
            cond = arith.simplify(substitute(s.condition, {**walk_env, **self.env}))
            if isinstance(cond, IntImm):
                branch = s.then_case if cond.value else s.else_case
                return None if branch is None else self.stmt(branch, walk_env)
            then = self.stmt(s.then_case, walk_env)
            other = None if s.else_case is None else self.stmt(s.else_case, walk_env)
            if then is None and other is None:
                return None
            if other is None and any(
                structural_equal(s.condition, g, map_free_vars=True) for g in self.guards
            ):
                return then  # under the arrival's own guard: its thread's
            raise _Problem(
                f"follows an arrival or init under a condition the phase proof cannot decide ({s.condition})"
            )
        if not isinstance(s, For):
            return None  # a store: no barrier events
        if s.kind is ForKind.THREAD_BINDING:
            return self.stmt(s.body, walk_env)
        lo, ext = (
            arith.simplify(substitute(s.min, walk_env)),
            arith.simplify(substitute(s.extent, walk_env)),
        )
        if not (isinstance(lo, IntImm) and isinstance(ext, IntImm)) or ext.value > _MAX_ITERATIONS:
            if self._relevant(s):
                raise _Problem(
                    f"an arrival or init in loop {s.loop_var.name} of unknown or large extent"
                )
            return None
        for i in reversed(range(ext.value)):
            r = self.stmt(s.body, {**walk_env, s.loop_var: IntImm(lo.value + i, s.loop_var.dtype)})
            if r is not None:
                return r
        return None

    def _relevant(self, s: Stmt) -> bool:
        from loopir.ir.functor import post_order_visit

        found: list[bool] = []
        post_order_visit(s, lambda n: found.append(True) if isinstance(n, Call) and n.op in (_ARRIVE, _INIT)
                         and _barrier(n).buffer is self.bar.buffer else None)  # fmt: skip
        return bool(found)

    def before(
        self, path: Sequence[tuple[Stmt, int]], level: int
    ) -> tuple[Evaluate, dict[Var, PrimExpr]] | str:
        """Run the code before child ``path[level][1]`` of ``path[level][0]`` backwards, up to
        the kernel's start (the arrival's loops pinned by ``env`` where it leaves them)."""
        while level >= 0:
            node, child = path[level]
            if isinstance(node, SeqStmt):
                for c in reversed(node.seq[:child]):
                    if (r := self.stmt(c, {})) is not None:
                        return r
            elif (
                isinstance(node, For)
                and node.kind is not ForKind.THREAD_BINDING
                and node.loop_var not in self.env
            ):
                raise _Problem(
                    f"is in loop {node.loop_var.name}, whose earlier iterations the phase proof does not follow"
                )
            level -= 1
        raise _Problem("has no mbarrier_init of its element before it")


def _previous(
    path: Sequence[tuple[Stmt, int]], node: Evaluate
) -> list[tuple[tuple[PrimExpr, ...], object, dict[Var, PrimExpr]]]:
    """The previous event on the arrival's element, by cases: (conditions, the arrival found or
    ``"init"``, the values of the found arrival's loop variables in the arrival's frame)."""
    call = node.value
    assert isinstance(call, Call)
    bar = _barrier(call)
    guards = [n.condition for n, i in path if isinstance(n, IfThenElse) and i == 0]
    at = max((i for i, (n, _) in enumerate(path) if _barrier_loop(n)), default=None)
    back = _Back(bar, {}, guards, _ranges(path))
    # the statements before it in its iteration (or, straight-line code, before it at all)
    for level in range(len(path) - 1, -1 if at is None else at, -1):
        n, child = path[level]
        if isinstance(n, SeqStmt):
            for c in reversed(n.seq[:child]):
                if (r := back.stmt(c, {})) is not None:
                    return [_entry((), r)]
        elif isinstance(n, For) and n.kind is not ForKind.THREAD_BINDING and not (
                isinstance(n.extent, IntImm) and n.extent.value == 1):  # fmt: skip
            raise _Problem(
                f"is in loop {n.loop_var.name}, whose earlier iterations the phase proof does not follow"
            )
    if at is None:
        raise _Problem("has no mbarrier_init of its element before it")
    loop = path[at][0]
    assert isinstance(loop, For)
    k = loop.loop_var
    out: list[tuple[tuple[PrimExpr, ...], object, dict[Var, PrimExpr]]] = []
    for j in range(1, _MAX_ITERATIONS + 1):
        r = _Back(bar, {}, guards, _ranges(path)).stmt(loop.body, {k: k - j})
        if r is not None:
            found = j
            out.append(_entry((k - j >= loop.min,), r))
            break
    else:
        raise _Problem(
            f"has no earlier arrival or init of its element within {_MAX_ITERATIONS} iterations"
        )
    for t in range(found):  # the arrival in iteration min + t: the previous event before the loop
        pinned = arith.simplify(loop.min + t)
        r2 = _Back(bar, {k: pinned}, guards, _ranges(path)).before(path, at - 1)
        out.append(_entry((k == pinned,), r2))
    return out


def _entry(conds: tuple[PrimExpr, ...], r: tuple[Evaluate, dict[Var, PrimExpr]] | str
           ) -> tuple[tuple[PrimExpr, ...], object, dict[Var, PrimExpr]]:  # fmt: skip
    return (conds, r, {}) if isinstance(r, str) else (conds, r[0], r[1])


def _half(p: PrimExpr) -> PrimExpr:
    p = arith.simplify(p)
    if isinstance(p, FloorMod) and isinstance(p.b, IntImm) and p.b.value == 2:
        return p.a
    return p


def _flips(p: PrimExpr, q: PrimExpr) -> bool:
    """Whether ``p % 2 != q % 2`` for every value of the variables (module doc)."""
    x, y = _half(p), _half(q)
    d = arith.simplify(x - y)
    if isinstance(d, IntImm):
        return d.value % 2 == 1
    if isinstance(x, FloorDiv) and isinstance(y, FloorDiv) and isinstance(x.b, IntImm) and isinstance(y.b, IntImm) \
            and x.b.value == y.b.value > 0:  # fmt: skip
        d = arith.simplify(x.a - y.a)
        return (
            isinstance(d, IntImm) and d.value % x.b.value == 0 and (d.value // x.b.value) % 2 == 1
        )
    return False


def _linear(e: PrimExpr) -> tuple[Var, int, int] | None:
    """``e`` as ``slope * v + offset`` of its one variable, when it is that."""
    from loopir.ir.functor import collect_vars

    vs = list(dict.fromkeys(collect_vars(e)))
    if len(vs) != 1:
        return None
    v = vs[0]
    at = [arith.simplify(substitute(e, {v: IntImm(x, v.dtype)})) for x in (0, 1, 2)]
    if not all(isinstance(a, IntImm) for a in at):
        return None
    e0, e1, e2 = (a.value for a in at)  # type: ignore[attr-defined]
    return (v, e1 - e0, e0) if e2 - e1 == e1 - e0 else None


def _bounds(
    conds: Sequence[PrimExpr], ranges: dict[Var, tuple[int, int]]
) -> dict[Var, tuple[int, int]] | None:
    """Inclusive bounds of the variables under ``conds`` (linear comparisons of one variable)
    and ``ranges``; None when they contradict."""
    from loopir.ir.expr import EQ, GE, GT, LE, LT

    out = {v: (lo, hi - 1) for v, (lo, hi) in ranges.items()}
    for c in conds:
        c = arith.simplify(c)
        if isinstance(c, IntImm):
            if not c.value:
                return None
            continue
        if (
            not isinstance(c, (EQ, GE, GT, LE, LT))
            or (lin := _linear(arith.simplify(c.a - c.b))) is None
        ):
            continue
        v, slope, off = lin  # the condition on slope * v + off against 0
        if slope == 0:
            continue
        lo, hi = out.get(v, (-(1 << 40), 1 << 40))
        if isinstance(c, (GT, LT)):
            off += -1 if isinstance(c, GT) else 1  # x > 0 is x - 1 >= 0; x < 0 is x + 1 <= 0
        sign = 0 if isinstance(c, EQ) else 1 if isinstance(c, (GE, GT)) else -1
        if sign == 0:
            if off % slope:
                return None
            lo, hi = max(lo, -off // slope), min(hi, -off // slope)
        elif (sign > 0) == (slope > 0):  # v >= ceil(-off / slope)
            lo = max(lo, -(off // slope) if slope > 0 else -((-off) // (-slope)))
        else:  # v <= floor(-off / slope)
            hi = min(hi, (-off) // slope)
        if lo > hi:
            return None
        out[v] = (lo, hi)
    return out


def _check(
    path: Sequence[tuple[Stmt, int]], node: Evaluate, forward: dict[int, list[_Case]]
) -> None:
    ranges = _ranges(path)
    for conds, p in forward[id(node)]:
        for pconds, prev, mapping in _previous(path, node):
            base = (*conds, *pconds)
            if prev == "init":
                cases: list[_Case] = [(base, IntImm(1, "int32"))]  # "the wait before": parity 1
            else:
                assert isinstance(prev, Evaluate)
                if id(prev) not in forward:
                    raise _Problem("follows an arrival the phase proof did not walk")
                cases = [((*base, *(substitute(c, mapping) for c in qc)), substitute(q, mapping))
                         for qc, q in forward[id(prev)]]  # fmt: skip
            for cs, q in cases:
                b = _bounds(cs, ranges)
                if b is None:
                    continue  # an impossible combination
                pin: dict[Var, PrimExpr] = {
                    v: IntImm(lo, v.dtype) for v, (lo, hi) in b.items() if lo == hi
                }
                pp, qq = substitute(p, pin), substitute(q, pin)
                if not _flips(pp, qq):
                    raise _Problem(f"is waited on with parity {arith.simplify(pp)}, not proven to be the other than "
                                   f"{arith.simplify(qq)}, the previous phase's ({' and '.join(map(str, cs)) or 'always'})")  # fmt: skip


def _launch(body: Stmt) -> dict[str, int | None]:
    """The extent of each ``threadIdx`` tag (None: not a constant)."""
    from loopir.ir.functor import post_order_stmts

    out: dict[str, int | None] = {}

    def visit(n: object) -> None:
        if (
            isinstance(n, For)
            and n.kind is ForKind.THREAD_BINDING
            and str(n.thread_tag).startswith("threadIdx")
        ):
            ext = n.extent.value if isinstance(n.extent, IntImm) else None
            old = out.get(str(n.thread_tag), 0)
            out[str(n.thread_tag)] = None if ext is None or old is None else max(ext, old)

    post_order_stmts(body, visit)
    return out


def _one_thread(path: Sequence[tuple[Stmt, int]], launch: dict[str, int | None]) -> None:
    """An arrival made by one thread: each ``threadIdx`` tag of the launch with more than one
    thread is bound by a loop around it whose variable a guard pins (``tx == 0``); the phase
    proof counts one arrival per statement instance."""
    from loopir.ir.expr import EQ, And

    pinned: set[Var] = set()
    todo = [n.condition for n, i in path if isinstance(n, IfThenElse) and i == 0]
    while todo:
        c = todo.pop()
        if isinstance(c, And):
            todo += [c.a, c.b]
        elif isinstance(c, EQ) and isinstance(c.a, Var) and isinstance(arith.simplify(c.b), IntImm):
            pinned.add(c.a)
    loops = {
        str(n.thread_tag): n
        for n, _ in path
        if isinstance(n, For) and n.kind is ForKind.THREAD_BINDING
    }
    for tag, ext in launch.items():
        if ext == 1:
            continue
        f = loops.get(tag)
        if f is None or f.loop_var not in pinned:
            raise _Problem(f"is made by every thread of {tag} (one thread arrives and copies a phase's bytes: "
                           f"guard it to one thread)")  # fmt: skip


class _CopyProblem(Exception):
    pass


def _own_arrival(path: Sequence[tuple[Stmt, int]], node: Evaluate) -> Evaluate:
    """A copy's phase is the one its own arrival opened: the last event on its barrier element
    before it, in its own block (no loop in between), is an ``mbarrier_arrive_expect_tx`` (a
    wait or init there, or none, would leave the copy's phase unproven). Returns the arrival;
    a copy under a condition that its arrival is not under is refused (its bytes may never
    come, and the phase never completes)."""
    call = node.value
    assert isinstance(call, Call)
    bar = _barrier(call)
    for level in range(len(path) - 1, -1, -1):
        n, child = path[level]
        if isinstance(n, SeqStmt):
            for c in reversed(n.seq[:child]):
                other = _call(c, _ARRIVE, _INIT, _WAIT, "ptx_tma_load")
                if other is None or _barrier(other).buffer is not bar.buffer:
                    if isinstance(c, Evaluate) or not _Back(bar, {}, (), {})._relevant(c):
                        continue
                    break
                same = _same_element(_barrier(other).indices, bar.indices, _ranges(path))
                if same is False or (same and other.op == "ptx_tma_load"):
                    continue  # another element, or another copy of the same phase
                if same and other.op == _ARRIVE:
                    if any(isinstance(p, IfThenElse) for p, _ in path[level + 1:]):
                        raise _CopyProblem(f"is under a condition that its arrival {script(c).strip()} is not "
                                           f"under: the bytes announced may never come:\n  {script(node).strip()}")  # fmt: skip
                    assert isinstance(c, Evaluate)
                    return c
                break
            else:
                continue
            break
        elif not isinstance(n, (IfThenElse, Allocate)) and not (
                isinstance(n, For) and n.kind is ForKind.THREAD_BINDING):  # fmt: skip
            break
    raise _CopyProblem(f"does not follow its own mbarrier_arrive_expect_tx({bar}) in its block:\n  "
                       f"{script(node).strip()}")  # fmt: skip


def _announced_bytes(path: Sequence[tuple[Stmt, int]], node: Evaluate, copies: Sequence[Evaluate]) -> None:
    """The bytes an arrival announces (``expect_tx``) are its phase's copies' bytes (each
    ``prod(box) * element size``; TMA counts a whole box, the zeros read out of bounds too):
    fewer complete the phase while copies are still landing (the waits then order nothing),
    more never complete it (the waits hang). Proven symbolically over the arrival's loops."""
    call = node.value
    assert isinstance(call, Call)
    brings = [tma_bytes(c.value) for c in copies]  # type: ignore[arg-type]
    total = sum(brings)
    if not arith.can_prove_equal(call.args[1], total, _ranges(path)):
        brought = " + ".join(str(n) for n in brings) or "no copy"
        raise _Problem(f"announces {call.args[1]} bytes, but its phase's copies bring {brought} "
                       f"(= {total} bytes)")  # fmt: skip


def check_phases(func: PrimFunc) -> None:
    """Refuse a function whose mbarrier waits are not proven to poll their phase's parity.

    Raises
    ------
    CodegenError
        Naming the function, the arrival and the parities.
    """
    found: list[tuple[list[tuple[Stmt, int]], Evaluate]] = []
    _paths(func.body, [], found)
    try:  # warp-specialized pipelines: their full/empty protocol is race_ws's proof
        ws = ws_barriers(func.body)
    except CodegenError as e:
        raise CodegenError(f"race check ({func.name}): {e}") from None
    found = [(p, n) for p, n in found if _barrier(n.value).buffer not in ws]  # type: ignore[arg-type]
    arrivals = [(p, n) for p, n in found if _call(n, _ARRIVE) is not None]
    forward: dict[int, list[_Case]] = {}
    launch = _launch(func.body)
    copies: dict[int, list[Evaluate]] = {}
    try:
        for path, node in arrivals:
            cur = node
            _one_thread(path, launch)
        for path, node in found:
            if _call(node, "ptx_tma_load") is not None:
                try:
                    _one_thread(path, launch)
                except _Problem as e:
                    raise _CopyProblem(f"{e}:\n  {script(node).strip()}") from None
                copies.setdefault(id(_own_arrival(path, node)), []).append(node)
        for path, node in arrivals:
            cur = node
            _announced_bytes(path, node, copies.get(id(node), []))
            forward[id(node)] = _forward(path, node)
        for path, node in arrivals:
            cur = node
            _check(path, node, forward)
    except _CopyProblem as e:
        raise CodegenError(f"race check ({func.name}): the TMA copy {e}") from None
    except _Problem as e:
        raise CodegenError(
            f"race check ({func.name}): the mbarrier arrival {e}:\n  {script(cur).strip()}"
        ) from None
