"""The race checker's model of warp-specialized TMA pipelines: full/empty mbarrier protocols.

A warp-specialized kernel ([`loopir.passes.pipeline_ws`][loopir.passes.pipeline_ws]) has no
block barrier in its K loop: a producer thread issues TMA copies, the consumers wait on the
copies' *full* barrier themselves, and release each buffer version on its *empty* barrier.
[`loopir.passes.race_tma`][loopir.passes.race_tma] orders a copy's readers only by a block
barrier after the matching wait, so it refuses such a kernel; this module proves the protocol
instead, symbolically (the cost depends on the versions and the statements of one iteration,
never on the sizes or the number of K steps), and tells the race checker which copies and
which tile accesses it covers (it then leaves them out of its barrier-count model).

Recognized: an ``if``/``else`` (the roles) with the copies in one branch, in one serial loop
``Lp`` (variable ``j``), and waits on their barriers in the other, in one serial loop ``Lc``
(variable ``k``) over the same range; ``V`` versions (the barrier buffers' length). Proven,
else a [`CodegenError`][loopir.errors.CodegenError] naming the copy or the access:

* **roles**: no block barrier in either branch (the other role never reaches it); every
  producer event (its waits, ``arrive_expect_tx``, copies) is one thread's (a guard pins
  every ``threadIdx``), and its guards inside ``Lp`` name only ``j``;
* **RAW, the reader's own wait**: each consumer iteration ``k`` first waits on
  ``full[k % V]`` with parity ``k // V % 2`` in every thread that then reads a tile, and
  reads only version ``(k - d) % V`` for a constant lag ``0 <= d``, under a guard equivalent
  to ``k >= d`` (a lag ``d > 0``: the wait of iteration ``k - d``, earlier in the same
  thread); after the loop (its tail) version ``(n - d) % V``, ``d >= 1``. Phase ``p`` of
  ``full[v]`` is completed by exactly the copies of iteration ``v + pV``: one arrival a phase
  (init count 1, one ``arrive_expect_tx`` of the producer's thread per iteration, on
  ``full[j % V]``), the copies after it in the iteration, into version ``j % V`` on
  ``full[j % V]``, their bytes the announced count;
* **WAR, the empty barrier**: each copy of iteration ``j`` is preceded, in its iteration and
  for ``j >= V`` exactly, by a wait on ``empty[j % V]`` with parity ``(j // V + 1) % 2``
  (phase ``j // V - 1``: the release of iteration ``j - V``); the consumers release iteration
  ``k - r`` in iteration ``k`` (guard ``k >= r``, ``0 <= r < V``) by
  ``mbarrier_arrive(empty[(k - r) % V], c)``, and the init count of ``empty`` is the arrivals
  a phase (threads x ``c``). Every read of a version comes before its release: a lag
  ``d <= r`` (before the arrival in program order when ``d = r``), an asynchronous ``wgmma``
  retired by a ``wgmma_wait`` whose pending count its later groups exhaust, before the
  arrival; each reader's warp arrives (``wgmma`` reads are its warpgroup's; any other read
  needs its own thread's arrival). A consumer arriving before its ``wgmma`` retired, or a
  producer skipping the empty wait, is refused;
* **deadlock freedom** (structurally): the producer's iteration ``j`` waits only for the
  release of ``j - V``, made in consumer iteration ``j - V + r < j``, which waits only for the
  copies of the producer's earlier iterations: every wait has its arrivals on every path (no
  guard but the ``k >= r`` / ``j >= V`` ones, ``r < V``, both loops over the same range with
  extents free of the threads);
* **persistent** (the consumers' loop in one serial tile loop ``t`` of their role, both from 0,
  the producer's loop over ``T * n`` steps for the tile loop's ``T`` and the K loop's ``n``):
  every index above is checked against the global step ``t * n + k`` instead of ``k``
  (``race_ws_steps.Steps``: at ``v`` residues of ``t`` and of ``k``, so the cost stays ``v``
  squared); the tail after the K loop releases each of ``n - 1 .. n - r`` (the producer waits for
  them in the next tile), after the tail's reads of that version and, with asynchronous
  ``wgmma``, after a ``wgmma_wait`` of 0 pending groups; nothing of the tiles or barriers outside
  the tile loop;
* **nothing else** touches the tiles, the barriers (but their inits, by one thread, before a
  block barrier that precedes the roles) or writes the copies' sources in the kernel.

Example: the kernel of ``hopper_gemm(tma=True, warp_specialized=True)`` is proven;
``tests/passes/test_race_ws.py`` refuses it mutated (the release moved before the retiring
``wgmma_wait``, the empty wait dropped, a wrong parity, a wrong init count, a read of the
version in flight).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from loopir import arith
from loopir.arith.vectorized import NotEnumerable
from loopir.arith.vectorized import evaluate as _eval
from loopir.errors import CodegenError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.equality import structural_equal
from loopir.ir.expr import BufferLoad, Call, FloorMod, IntImm, PrimExpr, Var
from loopir.ir.functor import Mutator, collect_vars, post_order_visit, substitute
from loopir.ir.printer import script
from loopir.ir.stmt import Allocate, BufferStore, Evaluate, For, ForKind, IfThenElse, SeqStmt, Stmt
from loopir.ir.tma import tile_box, tma_box, tma_bytes
from loopir.passes.race_problem import const_int as _const
from loopir.passes.race_ws_peel import peeled_range
from loopir.passes.race_ws_steps import Steps as _Steps
from loopir.passes.race_ws_steps import guard_is_from as _guard_is_from
from loopir.passes.race_ws_steps import most as _most
from loopir.passes.race_ws_steps import parity_is as _parity_is
from loopir.passes.race_ws_steps import small as _small
from loopir.tensor_intrin.tma import call_touches

__all__ = ["WsProof", "prove_ws", "ws_barriers"]

_THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
_MB = ("ptx_mbarrier_init", "ptx_mbarrier_arrive_expect_tx", "ptx_mbarrier_wait", "ptx_mbarrier_arrive")
_WGMMA = ("ptx_wgmma", "ptx_wgmma_async", "ptx_wgmma_wait")


@attrs.frozen
class WsProof:
    """What the proven protocols cover: the copies (ids of their statements), the tiles they
    fill (every access of which the proof covered) and the barriers (full and empty)."""

    copies: frozenset[int] = frozenset()
    tiles: frozenset[Buffer] = frozenset()
    bars: frozenset[Buffer] = frozenset()


class _Refused(Exception):
    pass


@attrs.frozen(eq=False)
class _Leaf:
    """A statement with what encloses it: ``path`` of ``("for", For)`` and ``("if", cond,
    taken)`` items, outermost first."""

    node: Stmt
    path: tuple[tuple[object, ...], ...]

    def loops(self) -> list[For]:
        return [p[1] for p in self.path if p[0] == "for"]  # type: ignore[misc]

    def inside(self, loop: For) -> tuple[tuple[object, ...], ...]:
        i = next(i for i, p in enumerate(self.path) if p[0] == "for" and p[1] is loop)
        return self.path[i + 1 :]

    def under(self, node: IfThenElse, taken: bool) -> bool:
        return any(p[0] == "if" and p[3] is node and p[2] == taken for p in self.path)


def _leaves(s: Stmt, path: list[tuple[object, ...]], out: list[_Leaf]) -> None:
    if isinstance(s, SeqStmt):
        for c in s.seq:
            _leaves(c, path, out)
    elif isinstance(s, Allocate):
        _leaves(s.body, path, out)
    elif isinstance(s, For):
        path.append(("for", s))
        _leaves(s.body, path, out)
        path.pop()
    elif isinstance(s, IfThenElse):
        for taken, branch in ((True, s.then_case), (False, s.else_case)):
            if branch is not None:
                path.append(("if", s.condition, taken, s))
                _leaves(branch, path, out)
                path.pop()
    else:
        out.append(_Leaf(s, tuple(path)))


def _serial_inside(leaf: _Leaf, loop: For) -> bool:
    """Whether a serial loop encloses ``leaf`` inside ``loop``."""
    return any(isinstance(f, For) and f.kind is ForKind.SERIAL for p in leaf.inside(loop) if p[0] == "for"
               for f in [p[1]])  # fmt: skip


def _call(s: Stmt, *ops: str) -> Call | None:
    v = s.value if isinstance(s, Evaluate) else None
    return v if isinstance(v, Call) and (not ops or v.op in ops) else None


def _bar(c: Call) -> BufferLoad:
    b = c.args[2] if c.op == "ptx_tma_load" else c.args[0]
    assert isinstance(b, BufferLoad)
    return b


def _what(leaf: _Leaf) -> str:
    return script(leaf.node).strip()


class _Threads:
    """The block's threads as arrays (one point per thread: linear id, warp) and which of them
    run a statement (the thread loops and the guards that name only threads on its path)."""

    def __init__(self, kernel: Stmt) -> None:
        ext: dict[str, int] = {}

        def visit(n: object) -> None:
            if isinstance(n, For) and n.kind is ForKind.THREAD_BINDING and n.thread_tag in _THREAD_TAGS:
                e = _const(n.extent)
                if e is None:
                    raise _Refused(f"thread loop {n.loop_var.name} has no constant extent")
                ext[str(n.thread_tag)] = max(ext.get(str(n.thread_tag), 1), e)

        post_order_visit(kernel, visit)
        x, y, z = (ext.get(t, 1) for t in _THREAD_TAGS)
        self.n = x * y * z
        tid = np.arange(self.n, dtype=np.int64)
        self.coord = {"threadIdx.x": tid % x, "threadIdx.y": tid // x % y, "threadIdx.z": tid // (x * y)}
        self.warp = tid // 32

    def mask(self, leaf: _Leaf, stop: For | None = None) -> np.ndarray:
        """The threads that run ``leaf`` (the guards up to ``stop``, a serial loop, or all that
        name only threads)."""
        env: dict[Var, np.ndarray] = {}
        m = np.ones(self.n, dtype=bool)
        for p in leaf.path:
            if p[0] == "for":
                f = p[1]
                assert isinstance(f, For)
                if f is stop:
                    break
                if f.kind is ForKind.THREAD_BINDING and f.thread_tag in _THREAD_TAGS:
                    c = self.coord[str(f.thread_tag)]
                    env[f.loop_var] = c
                    m &= c < _const(f.extent)  # type: ignore[operator]
                continue
            cond = p[1]
            assert isinstance(cond, PrimExpr)
            used = set(collect_vars(cond))
            if used & set(env) and not used <= set(env):
                raise _Refused(f"the guard {cond} names both threads and other variables")
            if not used or not used <= set(env):
                continue  # a guard over iterations (checked where it matters) or sizes
            try:
                v = np.asarray(_eval(cond, env, self.n)).astype(bool)
            except NotEnumerable:
                raise _Refused(f"the guard {cond} cannot be evaluated over the threads") from None
            m &= v if p[2] else ~v
        return m


def _modelled(leaf: _Leaf, loop: For | None, reads_only: bool = False) -> None:
    """Every guard on ``leaf``'s path names only threads (``_Threads.mask``) or only ``loop``'s
    variable (``_guards``), or is constant: any other (a block's, a size's) could let a thread
    skip its wait but not its reads, which the proof does not follow. ``reads_only`` (a read
    after the consumers' loop, waited for in it): a guard naming no thread only skips reads,
    which is safe (the tail of a loop of symbolic length, ``n - 1 >= 0``)."""
    for p in leaf.path:
        if p[0] != "if":
            continue
        cond = p[1]
        assert isinstance(cond, PrimExpr)
        used = {v for v in collect_vars(cond) if isinstance(v, Var)}
        if not used or all(_is_thread(leaf, v) for v in used) or (loop is not None and loop.loop_var in used):
            continue
        if reads_only and not any(_is_thread(leaf, v) for v in used):
            continue
        raise _Refused(f"the guard {cond} names neither only the threads nor only the pipeline's loop:\n  {_what(leaf)}")


def _guards(leaf: _Leaf, loop: For) -> list[tuple[PrimExpr, bool]]:
    """The guards of ``leaf`` inside ``loop`` that name the loop's variable (each must name no
    thread: a mixed guard is refused)."""
    _modelled(leaf, loop)
    out = []
    for p in leaf.inside(loop):
        if p[0] != "if":
            continue
        cond = p[1]
        assert isinstance(cond, PrimExpr)
        used = set(collect_vars(cond))
        if loop.loop_var in used:
            if any(isinstance(v, Var) and v not in (loop.loop_var,) and _is_thread(leaf, v) for v in used):
                raise _Refused(f"the guard {cond} names both the threads and loop {loop.loop_var.name}")
            out.append((cond, bool(p[2])))
    return out


def _release_counts(inside: list[tuple[_Leaf, str, object, np.ndarray]]) -> np.ndarray:
    """Each thread's arrivals on the empty barrier in one consumer iteration (its release
    events' thread masks, summed)."""
    counts: np.ndarray = np.sum([e[3] for e in inside if e[1] == "release"], axis=0).astype(np.int64)
    return counts


def _loop_bounds(leaf: _Leaf) -> dict[Var, tuple[int, int]]:
    """The ranges ``[lo, hi)`` of the loops of constant bounds around ``leaf`` (a block loop's
    variable in the consumers' extents: ``attention(longest_first=True)``'s ``n - 1 - i0``
    tiles)."""
    out = {}
    for f in leaf.loops():
        lo, ext = _const(f.min), _const(f.extent)
        if lo is not None and ext is not None and ext >= 1:
            out[f.loop_var] = (lo, lo + ext)
    return out


def _is_thread(leaf: _Leaf, v: Var) -> bool:
    """Whether ``v`` is a ``threadIdx`` loop's variable on ``leaf``'s path."""
    return any(isinstance(f, For) and f.kind is ForKind.THREAD_BINDING and f.thread_tag in _THREAD_TAGS
               and f.loop_var is v for f in leaf.loops())  # fmt: skip


class _Replace(Mutator):
    """Each subexpression structurally equal to ``old`` replaced by ``new``."""

    def __init__(self, old: PrimExpr, new: PrimExpr) -> None:
        super().__init__()
        self.old, self.new = old, new

    def visit(self, node: Any) -> Any:
        if isinstance(node, PrimExpr) and structural_equal(node, self.old):
            return self.new
        return super().visit(node)


def _lag(idx: PrimExpr, var: PrimExpr, v: int, extent: int | None = None, start: int = 0,
         bounds: dict[Var, tuple[int, int]] | None = None) -> int | None:
    """The least ``d`` (``0 <= d < v``) with ``idx == (var - d) % v`` wherever ``var >= d``:
    at every ``var = v * q + s`` (``q`` free), or, for a small constant ``extent`` of
    ``var``'s loop, at each of its iterations; or, for an expression ``var`` whose values over
    ``bounds`` (the constant ranges of the loops around, block indices included) lie in one
    window ``[d + k v, d + k v + v)``, where ``idx`` is ``var - d - k v`` (``_window_lag``)."""
    if not isinstance(var, Var) and collect_vars(var):
        if bounds and (d := _window_lag(idx, var, v, start, bounds)) is not None:
            return d
        # a symbolic extent (the tail's n: ceildiv(seq_kv, 128), or of several sizes): opaque,
        # as one variable (whose every value the check below covers)
        n = Var("ws_n", "int32")
        opaque = _Replace(arith.simplify(var), n).visit(idx)
        if n in collect_vars(opaque) and not set(collect_vars(opaque)) & set(collect_vars(var)):
            return _lag(opaque, n, v)
    q = Var("ws_q", "int32")
    for d in range(v):
        want = FloorMod(var - d + v, IntImm(v, "int32"))
        if isinstance(var, Var) and _small(extent, v):
            assert extent is not None
            pts: list[dict[Var, PrimExpr]] = [{var: IntImm(c, var.dtype)} for c in range(max(d, start), extent)]
        else:
            pts = [{x: v * q + s for x in collect_vars(var) if isinstance(x, Var)} for s in range(v)]
        if all(_const(substitute(idx, sub) - substitute(want, sub)) == 0 for sub in pts):
            return d
    return None


def _window_lag(idx: PrimExpr, var: PrimExpr, v: int, start: int, bounds: dict[Var, tuple[int, int]]) -> int | None:
    """``_lag`` of an expression ``var`` of a few values: where the simplifier, knowing the
    block indices' ranges, dropped the ``% v`` of ``(var - d) % v`` (a causal query tile's KV
    tile count ``min(4 - i0, 3)``, whose last version ``(n - 1) % 3`` is ``min(4 - i0, 3) - 1``).
    ``var``'s bound over ``bounds`` (sound: every value lies in it) from ``max(start, d)`` up
    must fit one window ``[d + k v, d + k v + v)``, where ``(var - d) % v = var - d - k v``;
    then ``idx`` equals it everywhere if their difference simplifies to 0. Symbolic: ``v``
    simplifications, whatever the ranges."""
    used = collect_vars(var)
    if not all(isinstance(u, Var) and u in bounds for u in used):
        return None
    ana = arith.Analyzer({u: bounds[u] for u in used})
    b = ana.const_int_bound(var)
    if b.max_value == arith.POS_INF or b.min_value == arith.NEG_INF:
        return None
    for d in range(v):
        lo, hi = max(int(b.min_value), start, d), int(b.max_value)
        if lo > hi:
            continue
        k = (lo - d) // v
        if hi - d - k * v >= v:
            continue
        if _const(ana.simplify(idx - (var - d - k * v))) == 0:
            return d
    return None


def _range_equal(a: For, b: For) -> bool:
    return _const(a.min - b.min) == 0 and _const(a.extent - b.extent) == 0


class _Region:
    """One if/else of roles (module doc), proven by ``prove``."""

    def __init__(self, node: IfThenElse, produce: bool, leaves: list[_Leaf], th: _Threads) -> None:
        self.node, self.produce, self.th = node, produce, th
        self.produce = produce
        self.prod = self._once([x for x in leaves if x.under(node, produce)], produce)
        self.cons = self._once([x for x in leaves if x.under(node, not produce)], not produce)
        self.inits: dict[tuple[Buffer, int], int] = {}
        self.srcs: set[Buffer] = set()

    def _once(self, leaves: list[_Leaf], taken: bool) -> list[_Leaf]:
        """A role without serial loops (the loops of one iteration, simplified away) as one
        iteration of a loop: each leaf's path gets it after the role's branch."""
        taken_is_producer = taken == self.produce

        def role_at(x: _Leaf) -> int:
            return next(i for i, p in enumerate(x.path) if p[0] == "if" and p[3] is self.node and p[2] == taken)

        anchors = [x for x in leaves if (c := _call(x.node, "ptx_tma_load", "ptx_mbarrier_wait")) is not None
                   and (c.op == "ptx_tma_load") == taken_is_producer]  # the copies, or the consumers' waits
        if any(isinstance(f, For) and f.kind is ForKind.SERIAL for x in anchors for p in x.path[role_at(x) + 1 :]
               for f in [p[1]] if p[0] == "for"):  # fmt: skip
            return leaves
        once = For(Var("ws_once", "int32"), 0, 1, ForKind.SERIAL, Evaluate(IntImm(0, "int32")))
        return [_Leaf(x.node, (*x.path[: role_at(x) + 1], ("for", once), *x.path[role_at(x) + 1 :])) for x in leaves]

    def fail(self, why: str, leaf: _Leaf | None = None) -> _Refused:
        return _Refused(why + ("" if leaf is None else f":\n  {_what(leaf)}"))

    def _one_loop(self, leaves: list[_Leaf], what: str) -> For:
        inner = [next((f for f in reversed(x.loops()) if f.kind is ForKind.SERIAL), None) for x in leaves]
        if any(f is None or f is not inner[0] for f in inner):
            raise self.fail(f"the warp-specialized {what} are not all in one serial loop", leaves[0])
        assert inner[0] is not None
        return inner[0]

    def prove(self) -> WsProof:
        for x in [*self.prod, *self.cons]:
            if isinstance(x.node, Evaluate) and op.is_block_barrier(x.node.value):
                raise self.fail("a block barrier in a warp-specialized role: the other role never reaches it", x)
        copies = [x for x in self.prod if _call(x.node, "ptx_tma_load") is not None]
        lp = self._one_loop(copies, "TMA copies")
        j = lp.loop_var
        full = _bar(_call(copies[0].node)).buffer  # type: ignore[arg-type]
        v = _const(full.shape[0]) if len(full.shape) == 1 else None
        if v is None:
            raise self.fail(f"the full barriers {full.name} are not a 1-d buffer of constant length", copies[0])
        n = _most(lp.extent)
        if _const(lp.min) != 0:
            raise self.fail(f"the producer's loop {j.name} does not start at 0", copies[0])
        # the producer's iteration, in program order
        p_events = [x for x in self.prod if lp in x.loops()]
        if any(f.kind is ForKind.SERIAL for f in copies[0].loops()[: copies[0].loops().index(lp)]):
            raise self.fail(f"the producer's loop {j.name} is inside another serial loop (its barriers' phases would "
                            "go on across that loop's iterations, which the proof does not count)", copies[0])  # fmt: skip
        if any(_call(x.node, *_MB, "ptx_tma_load") is not None for x in self.prod if x not in p_events):
            raise self.fail("an mbarrier call or copy of the producer outside its loop", next(
                x for x in self.prod if x not in p_events and _call(x.node, *_MB, "ptx_tma_load") is not None))  # fmt: skip
        for x in p_events:
            c = _call(x.node)
            if c is not None and c.op in (*_MB, "ptx_tma_load"):
                if self.th.mask(x).sum() != 1:
                    raise self.fail(f"the producer's {c.op.removeprefix('ptx_')} is not one thread's "
                                    f"({int(self.th.mask(x).sum())} threads)", x)  # fmt: skip
                if _serial_inside(x, lp):
                    raise self.fail("an mbarrier call or copy in a loop inside the producer's loop", x)
        empty: Buffer | None = None
        waited = False
        expect: tuple[_Leaf, int] | None = None
        announced = 0
        tiles: set[Buffer] = set()
        srcs: set[Buffer] = set()
        for x in p_events:
            c = _call(x.node)
            if c is None or c.op not in (*_MB, "ptx_tma_load"):
                continue
            g = _guards(x, lp)
            b = _bar(c)
            if c.op == "ptx_mbarrier_wait":
                if b.buffer is full:
                    raise self.fail("the producer waits on the full barrier", x)
                if empty is not None and b.buffer is not empty:
                    raise self.fail("the producer waits on two empty barriers", x)
                empty = b.buffer
                if _lag(b.indices[0], j, v, n) != 0 or not _guard_is_from(g, j, v, n):
                    raise self.fail(f"the producer's wait is not on {b.buffer.name}[{j.name} % {v}] exactly when "
                                    f"{j.name} >= {v}", x)  # fmt: skip
                if not _parity_is(c.args[1], j, v, 1, n, v):
                    raise self.fail(f"the producer's wait polls parity {c.args[1]}, not that of the release of "
                                    f"iteration {j.name} - {v} (({j.name} // {v} + 1) % 2)", x)  # fmt: skip
                waited = True
            elif c.op == "ptx_mbarrier_arrive_expect_tx":
                if b.buffer is not full or _lag(b.indices[0], j, v, n) != 0 or g or expect is not None:
                    raise self.fail(f"the producer's arrive_expect_tx is not one unguarded arrival a step on "
                                    f"{full.name}[{j.name} % {v}]", x)  # fmt: skip
                nb = _const(c.args[1])
                if nb is None:
                    raise self.fail("the producer's arrive_expect_tx announces no constant byte count", x)
                expect = (x, nb)
            elif c.op == "ptx_tma_load":
                dst, src = c.args[0], c.args[1]
                assert isinstance(dst, BufferLoad) and isinstance(src, BufferLoad)
                box, _ = tma_box(c)
                if not waited and not (n is not None and n <= v):  # else no iteration j >= V
                    raise self.fail(f"the TMA copy into {dst.buffer.name} is issued without waiting on the empty "
                                    "barrier of its version (the consumers may still read it)", x)  # fmt: skip
                if expect is None or g or b.buffer is not full or _lag(b.indices[0], j, v, n) != 0:
                    raise self.fail(f"the TMA copy into {dst.buffer.name} does not follow its step's arrive_expect_tx "
                                    f"unguarded, on {full.name}[{j.name} % {v}]", x)  # fmt: skip
                tile = tile_box(dst.buffer.shape, box) or box
                # version, then constants (a part of the tile: a 64-column block of a head_dim 128 tile), then the box
                if len(dst.indices) < len(tile) + 1 or _lag(dst.indices[0], j, v, n) != 0 or \
                        any(_const(i) is None for i in dst.indices[1:]) or _const(dst.buffer.shape[0]) != v:  # fmt: skip
                    raise self.fail(f"the TMA copy's tile {dst} is not version {j.name} % {v} of a buffer of {v}", x)
                if any(_is_thread(x, u) for i in src.indices for u in collect_vars(i) if isinstance(u, Var)):
                    raise self.fail("the TMA copy's coordinates depend on the thread", x)
                announced += tma_bytes(c)
                tiles.add(dst.buffer)
                srcs.add(src.buffer)
            else:
                raise self.fail(f"the producer's {c.op} on {b.buffer.name}", x)
        if expect is None:
            raise self.fail("the producer's copies follow no arrive_expect_tx", copies[0])
        for x in self.prod:  # the copies are the producer's only accesses of the tiles
            if _touched(x.node, tiles) and _call(x.node, "ptx_tma_load") is None:
                raise self.fail("the producer accesses a tile other than by its copies", x)
        if empty is None:  # a loop of at most V iterations (no wait needed): the consumers' releases name it
            rel = [_bar(c).buffer for x in self.cons if (c := _call(x.node, "ptx_mbarrier_arrive")) is not None]
            if not rel:
                raise self.fail("the producer waits on no empty barrier and the consumers release none", copies[0])
            empty = rel[0]
        if expect[1] != announced:
            raise self.fail(f"the arrive_expect_tx announces {expect[1]} bytes, its step's copies bring {announced}",
                            expect[0])  # fmt: skip
        arrivals = self._consumers(lp, full, empty, v, tiles)
        self.inits = {**{(full, e): 1 for e in range(v)}, **{(empty, e): arrivals for e in range(v)}}
        self.srcs = srcs
        return WsProof(frozenset(id(x.node) for x in copies), frozenset(tiles), frozenset((full, empty)))

    def _consumers(self, lp: For, full: Buffer, empty: Buffer, v: int, tiles: set[Buffer]) -> int:
        """The consumer role's proof (module doc); the arrivals per phase of ``empty``."""
        waits = [x for x in self.cons if (c := _call(x.node, "ptx_mbarrier_wait")) is not None and _bar(c).buffer is full]
        if not waits:
            raise self.fail(f"no consumer waits on {full.name}")
        looped = [x for x in waits if any(p[0] == "for" and p[1].kind is ForKind.SERIAL  # type: ignore[attr-defined]
                                          for p in x.path[self._role_at(x) + 1 :])]  # fmt: skip
        peel = [x for x in waits if x not in looped]  # a peeled first step's (race_ws_peel)
        lc = self._one_loop(looped or waits, "full waits")
        lt = self._tile_loop((looped or waits)[0], lc, lp)
        steps = None if lt is None else _Steps(lt, lc, v)
        k = lc.loop_var
        total = lp.extent if peel else lc.min + lc.extent  # the iterations 0 .. total - 1
        start = 1 if peel else 0
        n = _most(lp.extent if peel else lc.extent)
        pguards = self._peel_guards(peel[0]) if peel else []
        if peel and (why := peeled_range(lc, lp.extent, pguards, _loop_bounds(peel[0]))
                     if lt is None else "in a tile loop"):
            raise self.fail(f"the consumers' peeled first step: {why}", peel[0])
        if lt is None and not peel and not _range_equal(lp, lc):
            raise self.fail(f"the producer's loop {lp.loop_var.name} and the consumers' {k.name} differ in range")
        if any(u in collect_vars(f.extent) for f in (lc, lt) if f is not None for x in waits
               for u in collect_vars(f.extent) if _is_thread(x, u)):  # fmt: skip
            raise self.fail(f"the consumers' loop {k.name} (or their tile loop) has an extent that depends on the thread")
        events: list[tuple[_Leaf, str, object, np.ndarray]] = []  # (leaf, kind, lag, threads)
        tail_releases: list[int] = []
        tail: list[tuple[str, int | None]] = []  # a persistent pipeline's tail, in order

        def lag(idx: PrimExpr, var: PrimExpr, extent: int | None, inside: bool,
                bounds: dict[Var, tuple[int, int]] | None = None) -> int | None:
            return _lag(idx, var, v, extent, start, bounds) if steps is None else steps.lag(idx, not inside)

        first: list[tuple[_Leaf, str, object, np.ndarray]] = []  # the peeled step's events (iteration 0)

        for x in self.cons:
            inside = lc in x.loops()
            touched = _touched(x.node, tiles)
            c = _call(x.node)
            mb = c is not None and c.op in _MB and _bar(c).buffer in (full, empty)
            if not (touched or mb or (c is not None and c.op in _WGMMA)):
                continue
            if peel and not inside and not events:
                first.append(self._peeled(x, c, mb, touched, full, empty, v, pguards, first))
                continue
            if not inside and (not events or (lt is not None and lt not in x.loops())):
                raise self.fail("a consumer access of the tiles or their barriers before its loop (or outside its "
                                "tile loop)", x)  # fmt: skip
            if mb and inside and _serial_inside(x, lc):
                raise self.fail("an mbarrier call in a loop inside the consumers' loop", x)
            if not inside:
                _modelled(x, None, reads_only=not mb)
            m = self.th.mask(x)
            var: PrimExpr = k if inside else total if steps is None else steps.at(lc.extent)

            g = _guards(x, lc) if inside else []
            if mb:
                assert c is not None
                b = _bar(c)
                d = lag(b.indices[0], var, n, inside, None if inside else _loop_bounds(x))
                if c.op == "ptx_mbarrier_wait" and b.buffer is full and inside:
                    parity = _parity_is(c.args[1], k, v, 0, n, start) if steps is None else steps.parity_is(c.args[1])
                    if d != 0 or g or not parity:
                        raise self.fail(f"the consumers' wait is not an unguarded one on {full.name}[{k.name} % {v}] "
                                        f"with parity {k.name} // {v} % 2", x)  # fmt: skip
                    events.append((x, "wait", 0, m))
                elif c.op == "ptx_mbarrier_arrive" and b.buffer is empty:
                    cnt = _const(c.args[1])
                    if d is None or cnt is None or (inside and not _guard_is_from(g, k, d, n, start)):
                        raise self.fail(f"the consumers' release is not on {empty.name}[({k.name} - r) % {v}] exactly "
                                        f"when {k.name} >= r, with a constant count", x)  # fmt: skip
                    if inside:
                        events.append((x, "release", d, m.astype(np.int64) * cnt))
                    else:
                        tail_releases.append(d)
                        tail.append(("release", d))
                else:
                    raise self.fail(f"the consumers' {c.op.removeprefix('ptx_')} on {b.buffer.name}", x)
                continue
            # (after the loop, every version's last reader is the loop's or a wait_group 0)
            if c is not None and c.op == "ptx_wgmma_wait" and inside:
                events.append((x, "retire", _const(c.args[0]), m))
            if c is not None and c.op == "ptx_wgmma_wait" and not inside:
                tail.append(("retire", _const(c.args[0])))
            if c is not None and c.op == "ptx_wgmma_async" and inside:
                events.append((x, "issue", None, m))  # one commit group, before its own reads
            lags = set()
            for idx in touched:
                d = lag(idx, var, n if inside else None, inside, None if inside else _loop_bounds(x))
                if d is None or (not inside and d == 0):
                    raise self.fail(f"the consumers read a tile version {idx} that is not ({k.name} - d) % {v} for a "
                                    "constant d (a version whose copy they did not wait for)", x)  # fmt: skip
                lags.add(d)
            if (m & ~self._waiters(events)).any():
                raise self.fail("a consumer thread reads a tile without waiting on its full barrier itself", x)
            kind = "async" if c is not None and c.op == "ptx_wgmma_async" else \
                "wread" if c is not None and c.op in _WGMMA else "read"  # fmt: skip
            for d in sorted(lags):
                if inside and not _guard_is_from(g, k, d, n, start):
                    raise self.fail(f"the consumers read version ({k.name} - {d}) % {v} without the guard "
                                    f"{k.name} >= {d} (a version whose copy they did not wait for)", x)  # fmt: skip
                events.append((x, kind if inside else "tail", d, m))
                if not inside:
                    tail.append(("read", d))
        r = self._release_lag(events, empty, v)
        if sorted(tail_releases) != sorted(set(tail_releases)) or any(not 1 <= d <= r for d in tail_releases):
            raise self.fail(f"the releases after the consumers' loop are not of distinct iterations n - 1 .. n - {r}")
        if lt is not None:
            self._tile_tail(tail, r, any(e[1] == "async" for e in events), lt)
        for x, kind, lag_, _ in events:
            if kind == "tail" and isinstance(lag_, int) and lag_ > r:
                raise self.fail(f"the consumers read version (n - {lag_}) % {v} after the loop, released in the loop", x)
        if peel:
            self._peeled_releases(first, events, r, empty)
        return self._releases(events, r)

    def _tile_loop(self, wait: _Leaf, lc: For, lp: For) -> For | None:
        """The consumers' tile loop around their K loop ``lc`` (a persistent pipeline), or None;
        the producer's loop ``lp`` runs its tiles' steps, ``tiles * n`` from 0."""
        loops = wait.loops()
        outer = [f for f in loops[: loops.index(lc)] if f.kind is ForKind.SERIAL]
        if not outer:
            return None
        lt = outer[-1]
        if len(outer) > 1 or not any(p[0] == "for" and p[1] is lt for p in wait.path[self._role_at(wait) + 1 :]):
            raise self.fail(f"the consumers' loop {lc.loop_var.name} is inside another serial loop than one tile "
                            "loop of their role", wait)  # fmt: skip
        if _const(lt.min) != 0 or _const(lc.min) != 0 or lt.loop_var in collect_vars(lc.extent):
            raise self.fail(f"the consumers' tile loop {lt.loop_var.name} and K loop {lc.loop_var.name} must start at "
                            "0, the K loop's extent free of the tile", wait)  # fmt: skip
        if _const(lp.extent - lt.extent * lc.extent) != 0:
            raise self.fail(f"the producer's loop {lp.loop_var.name} runs {lp.extent} steps, not the consumers' "
                            f"{lt.extent} tiles of {lc.extent}", wait)  # fmt: skip
        return lt

    def _role_at(self, x: _Leaf) -> int:
        return next(i for i, p in enumerate(x.path) if p[0] == "if" and p[3] is self.node)

    def _peel_guards(self, x: _Leaf) -> list[tuple[PrimExpr, bool]]:
        """The conditions on ``x``'s path in its role that name no thread (the peeled step's)."""
        return [(p[1], bool(p[2])) for p in x.path[self._role_at(x) + 1 :] if p[0] == "if"  # type: ignore[misc]
                and not all(isinstance(u, Var) and _is_thread(x, u) for u in collect_vars(p[1]))]  # fmt: skip

    def _peeled(self, x: _Leaf, c: Call | None, mb: bool, touched: list[PrimExpr], full: Buffer, empty: Buffer,
                v: int, guards: list[tuple[PrimExpr, bool]], first: list[tuple[_Leaf, str, object, np.ndarray]],
                ) -> tuple[_Leaf, str, object, np.ndarray]:  # fmt: skip
        """An event of the peeled first step (iteration 0, before the loop): its guards those of
        the step's wait (``race_ws_peel``); a wait on ``full[0]`` with parity 0, reads of version
        0 only by threads that waited, no release (the loop's ``k - r``, ``r >= 1``, releases it)."""
        mine = self._peel_guards(x)
        if len(mine) != len(guards) or any(not structural_equal(a, b) or t != u for (a, t), (b, u) in zip(mine, guards)):
            raise self.fail("a consumer access of the tiles or their barriers before its loop, outside its peeled "
                            "first step (or under other guards than its wait)", x)  # fmt: skip
        _modelled(x, None, reads_only=True)  # the guards naming threads only
        m = self.th.mask(x)
        if mb:
            assert c is not None
            b = _bar(c)
            if c.op == "ptx_mbarrier_wait" and b.buffer is full:
                if _const(b.indices[0]) != 0 or (p := _const(c.args[1])) is None or p % 2 != 0:
                    raise self.fail(f"the consumers' peeled first step does not wait on {full.name}[0] with parity 0",
                                    x)  # fmt: skip
                return (x, "wait", 0, m)
            raise self.fail(f"the consumers' {c.op.removeprefix('ptx_')} on {b.buffer.name} in their peeled first "
                            f"step (its version {empty.name}[0] is released in the loop)", x)  # fmt: skip
        if c is not None and c.op == "ptx_wgmma_wait":
            first.append((x, "retire", _const(c.args[0]), m))
        if c is not None and c.op == "ptx_wgmma_async":
            first.append((x, "issue", None, m))  # one commit group, before its own reads
        if any(_const(i) != 0 for i in touched):
            raise self.fail(f"the consumers' peeled first step reads a tile version {touched} other than 0 (a version "
                            "whose copy they did not wait for)", x)  # fmt: skip
        if (m & ~self._waiters(first)).any():
            raise self.fail("a consumer thread reads a tile in the peeled first step without waiting on its full "
                            "barrier itself", x)  # fmt: skip
        kind = "async" if c is not None and c.op == "ptx_wgmma_async" else \
            "wread" if c is not None and c.op in _WGMMA else "read"  # fmt: skip
        return (x, kind if touched else "none", 0, m)

    def _peeled_releases(self, first: list[tuple[_Leaf, str, object, np.ndarray]],
                         events: list[tuple[_Leaf, str, object, np.ndarray]], r: int, empty: Buffer) -> None:
        """The peeled step's threads wait as the loop's; its reads come before the release of
        version 0 in loop iteration ``r`` (``r >= 1``, the loop's release lag), retired
        (``_releases``)."""
        if not np.array_equal(self._waiters(first), self._waiters(events)):
            raise self.fail("the consumers' peeled first step and their loop wait in different threads")
        if r < 1:
            raise self.fail(f"the consumers release iteration k in their loop after a peeled first step: iteration 0 "
                            f"is never released on {empty.name} (a deadlock)")  # fmt: skip
        inside = [e for e in events if e[1] != "tail"]
        seq_ = [(0, e) for e in first] + [(i, e) for i in range(1, r + 1) for e in inside]
        release_at = len(first) + (r - 1) * len(inside) + next(i for i, e in enumerate(inside) if e[1] == "release")
        self._reads_released(seq_, release_at, _release_counts(inside), lambda i, d: i == 0)

    def _tile_tail(self, tail: list[tuple[str, int | None]], r: int, mma_async: bool, lt: For) -> None:
        """A persistent pipeline's tail (after the K loop, in the tile loop): the producer
        waits for its releases in the next tile, so each of the iterations ``n - 1 .. n - r``
        is released there, after the tail's reads of its version and, with asynchronous
        ``wgmma``, after a ``wgmma_wait`` of 0 pending groups (every group retired)."""
        rel = [i for i, (kind, _) in enumerate(tail) if kind == "release"]
        if sorted(d for kind, d in tail if kind == "release") != list(range(1, r + 1)):  # type: ignore[type-var]
            raise self.fail(f"the consumers do not release iterations n - 1 .. n - {r} after their K loop, in tile loop "
                            f"{lt.loop_var.name}: the producer waits for them in the next tile (a deadlock)")  # fmt: skip
        for i in rel:
            d = tail[i][1]
            if any(kind == "read" and dd == d for kind, dd in tail[i + 1 :]):
                raise self.fail(f"the consumers release iteration n - {d} after their K loop before the tail's read of "
                                "its version (the producer refills it for the next tile)")  # fmt: skip
            if mma_async and not any(kind == "retire" and p == 0 for kind, p in tail[:i]):
                raise self.fail(f"the consumers release iteration n - {d} after their K loop with wgmma groups in flight "
                                "(no wgmma_wait of 0 before it): the producer refills its version for the next tile")  # fmt: skip

    @staticmethod
    def _waiters(events: list[tuple[_Leaf, str, object, np.ndarray]]) -> np.ndarray:
        ws = [m for _, kind, _, m in events if kind == "wait"]
        if not ws:
            return np.zeros(0, dtype=bool)
        out: np.ndarray = np.logical_or.reduce(ws)
        return out

    def _release_lag(self, events: list[tuple[_Leaf, str, object, np.ndarray]], empty: Buffer, v: int) -> int:
        rel = [e for e in events if e[1] == "release"]
        if not rel:
            raise self.fail(f"the consumers never release {empty.name}")
        lags = {int(e[2]) for e in rel}  # type: ignore[call-overload]
        if len(lags) != 1:
            raise self.fail(f"the consumers release {empty.name} at several lags {sorted(lags)}")
        r: int = lags.pop()
        if r >= v:
            raise self.fail(f"the consumers release iteration k - {r}, {v} or more behind: the producer waits for it "
                            "before the copies they wait for (a deadlock)", rel[0][0])  # fmt: skip
        return r

    def _releases(self, events: list[tuple[_Leaf, str, object, np.ndarray]], r: int) -> int:
        """Every read comes before its release (iteration ``k - r``), retired (module doc); the
        arrivals a phase."""
        inside = [e for e in events if e[1] != "tail"]
        counts = _release_counts(inside)
        # the events of r + 1 iterations one after another: the reads of iteration i at lag d
        # are in copy d, its release in copy r
        seq_ = [(n, e) for n in range(r + 1) for e in inside]
        release_at = r * len(inside) + next(i for i, e in enumerate(inside) if e[1] == "release")
        self._reads_released(seq_, release_at, counts, lambda i, d: d == i)
        return int(counts.sum())

    def _reads_released(self, seq_: Sequence[tuple[int, tuple[_Leaf, str, object, np.ndarray]]], release_at: int,
                        counts: np.ndarray, mine: Any) -> None:  # fmt: skip
        """Each read of ``seq_`` (iteration, event) of the released version (``mine(iteration,
        lag)``) before ``release_at``, by a released thread (``counts``: each thread's arrivals
        a phase) or warp, retired."""
        r = max(n for n, _ in seq_)
        armed = np.unique(self.th.warp[counts > 0])
        for at, (n, (x, kind, d, m)) in enumerate(seq_):
            if kind not in ("read", "wread", "async") or not mine(n, d):
                continue
            if not isinstance(d, int) or d > r or at > release_at:
                raise self.fail(f"the consumers release the version read here (iteration k - {d}) before the read, "
                                f"in iteration k - {r}", x)  # fmt: skip
            own = not (m & (counts == 0)).any() if kind == "read" else \
                bool(np.isin(np.unique(self.th.warp[m]), armed).all())  # fmt: skip
            if not own:
                raise self.fail("a consumer reads a tile that no arrival of its own (its thread, or its warp for "
                                "wgmma) releases", x)  # fmt: skip
            if kind == "async":
                self._retired(seq_, at, release_at, x)

    def _retired(self, seq_: Sequence[tuple[int, tuple[_Leaf, str, object, np.ndarray]]], at: int, release_at: int,
                 x: _Leaf) -> None:  # fmt: skip
        """The ``wgmma`` issued at ``at`` retires (a ``wgmma_wait`` whose pending count the
        groups issued after it exhaust) before the release at ``release_at``."""
        later = 0
        for i in range(at + 1, release_at):
            _, (_, kind, pend, _) = seq_[i]
            if kind == "issue":
                later += 1
            elif kind == "retire" and isinstance(pend, int) and later >= pend:
                return
        raise self.fail("the consumers release the version this wgmma reads before a wgmma_wait retires it", x)


def _touched(s: Stmt, tiles: set[Buffer]) -> list[PrimExpr]:
    """The version indices (first index) of the accesses of ``tiles`` in ``s``."""
    out: list[PrimExpr] = []
    c = _call(s)
    if c is not None and (op.is_tensor_core_call(c) or c.op == "ptx_tma_load"):
        for t in call_touches(c):
            if t.buffer in tiles:
                out.append(t.indices[0])
        return out

    def visit(n: object) -> None:
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer in tiles:
            out.append(n.indices[0])

    post_order_visit(s, visit)
    return out


def prove_ws(kernel: Stmt) -> WsProof:
    """The warp-specialized protocols of ``kernel`` (a kernel's outermost thread loop),
    proven; an empty proof when it has none.

    Raises
    ------
    CodegenError
        Naming the copy, the access or the mbarrier call that breaks the protocol (module doc).
    """
    leaves: list[_Leaf] = []
    _leaves(kernel, [], leaves)
    roles: list[tuple[IfThenElse, bool]] = []
    for x in leaves:
        c = _call(x.node, "ptx_tma_load")
        if c is None:
            continue
        b = _bar(c).buffer
        for p in x.path:
            if p[0] != "if" or (p[3], p[2]) in roles:
                continue
            node = p[3]
            assert isinstance(node, IfThenElse)
            other = [y for y in leaves if y.under(node, not p[2]) and (w := _call(y.node, "ptx_mbarrier_wait")) is not None
                     and _bar(w).buffer is b]  # fmt: skip
            if other and node.else_case is not None:
                roles.append((node, bool(p[2])))
    if not roles:
        return WsProof()
    try:
        th = _Threads(kernel)
        regions = [_Region(node, produce, leaves, th) for node, produce in roles]
        proofs = [r.prove() for r in regions]
        out = WsProof(frozenset().union(*(p.copies for p in proofs)), frozenset().union(*(p.tiles for p in proofs)),
                      frozenset().union(*(p.bars for p in proofs)))  # fmt: skip
        inits = {key: n for r in regions for key, n in r.inits.items()}
        srcs = {b for r in regions for b in r.srcs}
        _rest(leaves, out, [n for n, _ in roles], th, inits, srcs)
    except _Refused as e:
        raise CodegenError(f"warp-specialized pipeline: {e}") from None
    return out


def _rest(leaves: list[_Leaf], proof: WsProof, nodes: list[IfThenElse], th: _Threads,
          inits: dict[tuple[Buffer, int], int], srcs: set[Buffer]) -> None:  # fmt: skip
    """Outside the roles: no access of the tiles, and the barriers only initialized, each
    element once with its count (``inits``), by one thread, before a block barrier that
    precedes the roles; nowhere a write of the copies' sources (``srcs``)."""
    seen: dict[tuple[Buffer, int], int] = {}
    in_role = [any(x.under(n, t) for n in nodes for t in (True, False)) for x in leaves]
    first_role = in_role.index(True)
    last_init = -1
    for i, x in enumerate(leaves):
        c = _call(x.node)
        writes = [t.buffer for t in call_touches(c) if t.is_store] if c is not None and (
            op.is_tensor_core_call(c) or c.op == "ptx_tma_load") else []  # fmt: skip
        if (isinstance(x.node, BufferStore) and x.node.buffer in srcs) or set(writes) & srcs:
            raise _Refused(f"the kernel writes a buffer that TMA copies read asynchronously:\n  {_what(x)}")
        if c is not None and c.op in _MB and _bar(c).buffer in proof.bars and c.op == "ptx_mbarrier_init":
            b = _bar(c)
            e = _const(b.indices[0])
            if in_role[i] or e is None or (b.buffer, e) in seen or i > first_role or th.mask(x).sum() != 1:
                raise _Refused(f"the barrier {b.buffer.name} is not initialized once per element by one thread "
                               f"before the roles:\n  {_what(x)}")  # fmt: skip
            seen[(b.buffer, e)] = _const(c.args[1]) or 0
            last_init = i
        if in_role[i]:
            continue
        if _touched(x.node, set(proof.tiles)):
            raise _Refused(f"a tile a warp-specialized pipeline fills is accessed outside its roles:\n  {_what(x)}")
        if c is not None and c.op in _MB and _bar(c).buffer in proof.bars and c.op != "ptx_mbarrier_init":
            raise _Refused(f"the barrier {_bar(c).buffer.name} is used outside the roles:\n  {_what(x)}")
    for key, n in inits.items():
        if seen.get(key) != n:
            raise _Refused(f"{key[0].name}[{key[1]}] is initialized with count {seen.get(key)}, its phases take {n} "
                           "arrivals (one arrive_expect_tx a phase on a full barrier; the consumers' releases on an "
                           "empty one)")  # fmt: skip
    if not any(isinstance(x.node, Evaluate) and op.is_block_barrier(x.node.value)
               for x in leaves[last_init + 1 : first_role]):  # fmt: skip
        raise _Refused("no block barrier between the barriers' inits and the roles")


def ws_barriers(body: Stmt) -> frozenset[Buffer]:
    """The barriers of the proven warp-specialized pipelines of every kernel in ``body`` (the
    phase proof of ``race_phase`` leaves them to ``prove_ws``)."""
    out: set[Buffer] = set()

    def walk(s: Stmt) -> None:
        if isinstance(s, For) and s.kind is ForKind.THREAD_BINDING:
            out.update(prove_ws(s).bars)
        elif isinstance(s, SeqStmt):
            for c in s.seq:
                walk(c)
        elif isinstance(s, (For, Allocate)):
            walk(s.body)
        elif isinstance(s, IfThenElse):
            walk(s.then_case)
            if s.else_case is not None:
                walk(s.else_case)

    walk(body)
    return frozenset(out)
