"""Race checker for lowered GPU kernels: prove that no two threads race, or refuse.

The IR's meaning is sequential; a CUDA kernel computes it only if the iterations of its
thread-bound loops are independent except through shared memory ordered by barriers. This
module checks that property on lowered IR, the form the CUDA emitter prints. For every kernel
(an outermost thread-bound loop, as the host/device split sees it) and every pair of accesses
to one ``shared`` or ``global`` buffer, at least one of them a store, it asks whether two
*different* threads can touch the same element while nothing orders them:

* two threads of one block are ordered only by a barrier between the two accesses: the
  accesses are concurrent when both run after the same number of barriers (the barrier count
  of an access is an exact expression of its enclosing loops, since every thread of a block
  passes the same barriers);
* threads of different blocks are never ordered within a kernel, which matters for global
  buffers (shared memory belongs to one block).

Each pair is decided symbolically ([`loopir.passes.race_prove`][loopir.passes.race_prove]: the
element and the barrier count an access has determine its thread, or the two accesses never meet),
at a cost that does not grow with the loops' extents. When the proof fails, a bounded search for a
witness enumerates at most ``WITNESS_POINTS`` instances of each access (all of them when there are
few, else the first and last iterations of the large loops): a witness under exact guards is a real
race. A search that finds none proves nothing.

Asynchronous writers and readers are accesses over ranges of barrier counts: a ``wgmma``'s
tile reads until its retiring wait ([`loopir.passes.race_inflight`][loopir.passes.race_inflight]),
a TMA copy's tile write until the first wait on its mbarrier element, by no thread
([`loopir.passes.race_tma`][loopir.passes.race_tma]; the waits' parities are proven by
[`loopir.passes.race_phase`][loopir.passes.race_phase]).

A proven race raises [`CodegenError`][loopir.errors.CodegenError] showing the function with both
accesses marked. A pair that is neither proven nor refuted gives a
[`RaceCheckWarning`][loopir.passes.race_check.RaceCheckWarning] with the reason. ``cuda.race_check``
(default True) turns the check off.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import numpy as np

from loopir import arith
from loopir.arith.vectorized import NotEnumerable
from loopir.arith.vectorized import evaluate as _eval
from loopir.errors import CodegenError, LoopIRWarning
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import (
    Add,
    BufferLoad,
    Call,
    IntImm,
    Mul,
    Not,
    PrimExpr,
    Select,
    Sub,
    Var,
)
from loopir.ir.functor import Visitor, collect_vars, substitute
from loopir.ir.printer import script
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
)
from loopir.ir.tma import is_tma_call
from loopir.passes.context import PassContext, register_config
from loopir.passes.race_inflight import (
    IN_FLIGHT_KEY,
    EnclosingPath,
    in_flight,
    in_flight_count,
    phases,
)
from loopir.passes.race_phase import check_phases
from loopir.passes.race_problem import const_int as _const
from loopir.passes.race_prove import BLOCK_TAGS, GRID_TAGS, prove_exclusive
from loopir.passes.race_tma import CopyCollector, TmaWindowError, copy_pair_skipped
from loopir.passes.race_witness import _conflict, _linear, _Points, _Witness
from loopir.passes.race_ws import prove_ws
from loopir.tensor_intrin.calls import hardware_lane
from loopir.tensor_intrin.tma import call_touches

__all__ = [
    "RaceCheckWarning", "RaceReport", "check_races", "collect_accesses", "find_races",
    "threads_may_share",
]  # fmt: skip

register_config(
    "cuda.race_check",
    bool,
    True,
    "prove that no two threads of a lowered kernel race on a shared or global element "
    "(CodegenError on a proven race, RaceCheckWarning where neither proven nor refuted)",
)


#: Largest number of points of one access the search for a race witness looks at (a fixed
#: budget: the search refutes, it never proves).
WITNESS_POINTS = 1 << 16
#: Values kept per large loop in the sampled search for a witness.
_SAMPLE = 2


class RaceCheckWarning(LoopIRWarning):
    """The race checker could neither prove nor refute that two accesses are race-free."""


def _is_sync(s: Stmt) -> bool:
    return isinstance(s, Evaluate) and op.is_block_barrier(s.value)


def _is_hw_loop(s: For) -> bool:
    return s.kind is ForKind.THREAD_BINDING and s.thread_tag in (*GRID_TAGS, *BLOCK_TAGS)


def _barriers(s: Stmt) -> PrimExpr | None:
    """How many barriers one execution of ``s`` passes (None: none)."""
    if _is_sync(s):
        return IntImm(1, "int32")
    if isinstance(s, SeqStmt):
        parts = [b for b in (_barriers(c) for c in s.seq) if b is not None]
        if not parts:
            return None
        total = parts[0]
        for p in parts[1:]:
            total = Add(total, p)
        return total
    if isinstance(s, For):
        inner = _barriers(s.body)
        if inner is None or _is_hw_loop(s):
            return inner  # every thread runs its own iteration of a thread-bound loop
        return Mul(s.extent, inner)
    if isinstance(s, Allocate):
        return _barriers(s.body)
    if isinstance(s, IfThenElse):
        a = _barriers(s.then_case)
        b = _barriers(s.else_case) if s.else_case is not None else None
        if a is None and b is None:
            return None
        zero = IntImm(0, "int32")
        return Select(s.condition, a if a is not None else zero, b if b is not None else zero)
    return None


def _at_least_one(count: PrimExpr, loops: Sequence[For]) -> bool:
    """Whether ``count`` (barriers per iteration) is at least 1 over the loops' ranges."""
    ranges = {}
    for f in loops:
        lo, ext = _const(f.min), _const(f.extent)
        if lo is not None and ext is not None and ext > 0:
            ranges[f.loop_var] = (lo, lo + ext)
    return arith.Analyzer(ranges).const_int_bound(count).min_value >= 1


@attrs.frozen(eq=False)
class _Access:
    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    is_store: bool
    loops: tuple[For, ...]
    conds: tuple[PrimExpr, ...]
    count: PrimExpr
    label: int
    stmt: Stmt
    # the enclosing serial loops that pass barriers, outermost first, each with whether every
    # iteration passes at least one and where in the iteration the access is: "head" (before
    # the body's first barrier), "tail" (after its last), "inner" (between two), "?" (not a
    # constant count). Equal barrier counts mean the same iteration unless one access is in
    # the head and the other in the tail (a tail runs on into the next iteration's head).
    barrier_loops: tuple[tuple[For, bool, str], ...] = ()


class _Labels:
    """Union-find over barrier intervals: two accesses in different classes can never run
    after the same number of barriers."""

    def __init__(self) -> None:
        self.parent: list[int] = []

    def new(self) -> int:
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> int:
        ra, rb = self.find(a), self.find(b)
        self.parent[max(ra, rb)] = min(ra, rb)
        return min(ra, rb)


class _Collector(EnclosingPath, CopyCollector, Visitor):
    """Every shared/global access of a kernel with its loops, guards and barrier count."""

    def __init__(self) -> None:
        self.loops: list[For] = []
        self.conds: list[PrimExpr] = []
        self.count: PrimExpr = IntImm(0, "int32")
        self.labels = _Labels()
        self.label = self.labels.new()
        self.stmt: Stmt | None = None
        self.accesses: list[_Access] = []
        # per barrier loop: the loop, whether every iteration passes a barrier, the count at
        # the start of the current iteration's body, the barriers per iteration
        self.barrier_loops: list[tuple[For, bool, PrimExpr, PrimExpr]] = []
        self.path: list[tuple[Stmt, int]] = []
        self.spans = False  # whole kernels only: the in-flight reads need the code after them
        self.twins: dict[int, object] = {}  # CopyCollector's
        self.deferred: dict[int, list[Any]] = {}
        self.ws_copies: frozenset[int] = frozenset()  # race_ws: copies and tiles it proved
        self.ws_tiles: frozenset[Buffer] = frozenset()

    def _phase(self, start: PrimExpr, per_iter: PrimExpr) -> str:
        """Where the current point is in its iteration of a barrier loop (``_Access``)."""
        before, total = _const(arith.simplify(Sub(self.count, start))), _const(arith.simplify(per_iter))
        if before is None or total is None:
            return "?"
        return "head" if before == 0 else "tail" if before == total else "inner"

    def _add(self, buf: Buffer, idx: tuple[PrimExpr, ...], store: bool) -> None:
        if buf.scope not in ("shared", "global") or buf in self.ws_tiles:
            return
        assert self.stmt is not None
        # an in-flight read (race_inflight) over a range of barrier counts: no label; in an
        # iteration, the phases race_inflight.phases gives
        fl = self.loops[-1] if self.loops and IN_FLIGHT_KEY in self.loops[-1].annotations else None
        loops = tuple((f, always, self._phase(start, per)) for f, always, start, per in self.barrier_loops)
        count = self.count if fl is None else in_flight_count(self.count, fl)
        self.accesses.append(
            _Access(buf, idx, store, tuple(self.loops), tuple(self.conds), count,
                    self.label if fl is None else -1, self.stmt, loops if fl is None else phases(fl, loops))  # fmt: skip
        )

    def visit_Evaluate(self, node: Evaluate) -> None:
        if _is_sync(node):
            self.count = Add(self.count, IntImm(1, "int32"))
            self.label = self.labels.new()
            return
        prev, self.stmt = self.stmt, node
        if op.is_tensor_core_call(node.value) or is_tma_call(node.value):
            self._tensor_core(node)
        else:
            self.generic_visit(node)
        self.stmt = prev

    def _tensor_core(self, node: Evaluate) -> None:
        """The elements a lane's tensor-core call touches, each as an access nested in loops
        over the call's footprint (``loopir.tensor_intrin.calls.touches``)."""
        assert isinstance(node.value, Call)
        if self.spans and node.value.op == "ptx_tma_load":
            if id(node) not in self.ws_copies:
                self.tma_copy(node)
            return
        span = in_flight(self.path, node.value) if self.spans else None
        for t in call_touches(node.value, hardware_lane(self.loops)):
            loops = t.loops(node)
            if span is not None and not t.is_store and t.buffer.scope == "shared":
                loops = (*loops, span)
            self.loops.extend(loops)
            if t.cond is not None:
                self.conds.append(t.cond)
            self._add(t.buffer, t.indices, t.is_store)
            if t.cond is not None:
                self.conds.pop()
            del self.loops[len(self.loops) - len(loops):]

    def new_access(self, buffer: Buffer, indices: tuple[PrimExpr, ...], is_store: bool, loops: tuple[For, ...],
                   conds: tuple[PrimExpr, ...], count: PrimExpr, stmt: Stmt,
                   places: tuple[tuple[For, bool, str], ...]) -> _Access:  # fmt: skip
        """An access over a range of barrier counts (no label): a TMA copy's piece."""
        self.accesses.append(_Access(buffer, indices, is_store, loops, conds, count, -1, stmt, places))
        return self.accesses[-1]

    def visit_BufferStore(self, node: BufferStore) -> None:
        prev, self.stmt = self.stmt, node
        self.visit(node.value)
        for i in node.indices:
            self.visit(i)
        self._add(node.buffer, node.indices, True)
        self.stmt = prev

    def visit_BufferLoad(self, node: BufferLoad) -> None:
        for i in node.indices:
            self.visit(i)
        self._add(node.buffer, node.indices, False)

    def visit_Select(self, node: Select) -> None:
        # the emitter prints a Select as ``c ? a : b``: only the taken branch is loaded
        self.visit(node.condition)
        self._under(node.condition, node.true_value)
        self._under(Not(node.condition), node.false_value)

    def _under(self, cond: PrimExpr, node: object) -> None:
        self.conds.append(cond)
        self.visit(node)
        self.conds.pop()

    def _header(self, node: For | IfThenElse, *exprs: PrimExpr) -> None:
        prev, self.stmt = self.stmt, node
        for e in exprs:
            self.visit(e)
        self.stmt = prev

    def visit_IfThenElse(self, node: IfThenElse) -> None:
        self._header(node, node.condition)
        if _barriers(node) is None:
            self._under(node.condition, node.then_case)
            if node.else_case is not None:
                self._under(Not(node.condition), node.else_case)
            return
        label, count = self.label, self.count
        self._under(node.condition, node.then_case)
        then_label = self.label
        self.label, self.count = label, count
        if node.else_case is not None:
            self._under(Not(node.condition), node.else_case)
        self.label = self.labels.union(then_label, self.label)
        self.count = Add(count, _barriers(node))  # type: ignore[arg-type]

    def visit_For(self, node: For) -> None:
        self._header(node, node.min, node.extent)
        per_iter = _barriers(node.body)
        if per_iter is None or _is_hw_loop(node):
            self.loops.append(node)
            self.visit(node.body)
            self.loops.pop()
            return
        start, base = self.label, self.count
        self.count = Add(base, Mul(Sub(node.loop_var, node.min), per_iter))
        self.loops.append(node)
        self.barrier_loops.append((node, _at_least_one(per_iter, self.loops), self.count, per_iter))
        self.loops.pop()
        self.tma_deferred(node)
        self.loops.append(node)
        self.visit(node.body)
        self.barrier_loops.pop()
        self.loops.pop()
        # the interval after the last barrier of one iteration runs on into the next one
        self.label = self.labels.union(start, self.label)
        self.count = Add(base, Mul(node.extent, per_iter))


# --------------------------------------------------------------------------------------------
# Enumeration
# --------------------------------------------------------------------------------------------


class _Kernel:
    def __init__(self, root: For | None, func: PrimFunc | None) -> None:
        self.func = func
        c = _Collector()
        c.spans = True
        if root is not None:
            # warp-specialized pipelines: their copies and tiles are race_ws's proof
            try:
                proof = prove_ws(root)
            except CodegenError as e:
                raise CodegenError(f"race check ({func.name if func else '?'}): {e}") from None
            c.ws_copies, c.ws_tiles = proof.copies, proof.tiles
            c.visit(root)
        self.accesses = c.accesses
        self.twins = c.twins  # ids of the twin pieces of TMA copies (race_tma)
        self.written = frozenset(a.buffer for a in self.accesses if a.is_store)
        self.labels = c.labels
        self.launch: dict[str, int | None] = {}
        self._pure_value: dict[int, tuple[_Access, bool]] = {}
        for acc in self.accesses:
            for f in acc.loops:
                if f.kind is ForKind.THREAD_BINDING and f.thread_tag in (*GRID_TAGS, *BLOCK_TAGS):
                    ext = _const(f.extent)
                    old = self.launch.get(f.thread_tag, 0)
                    self.launch[f.thread_tag] = (
                        None if ext is None or old is None else max(ext, old)
                    )

    def extent(self, tag: str) -> int | None:
        return self.launch.get(tag, 1)

    def points(self, acc: _Access, sample: bool) -> _Points:
        """Enumerate ``acc``'s instances (``sample``: large loops cut to their first and last
        iterations)."""
        ranges: list[tuple[Var, int, int]] = []
        env_loops: dict[str, Var] = {}
        within: list[PrimExpr] = []  # a loop's range over enclosing loops: its exact bounds
        for f in acc.loops:
            if f.kind is ForKind.THREAD_BINDING and f.thread_tag in (*GRID_TAGS, *BLOCK_TAGS):
                env_loops[f.thread_tag] = f.loop_var
            lo, ext = _const(f.min), _const(f.extent)
            if lo is None or ext is None:
                lo, ext = _enclosing_range(f, ranges)
                within += [f.loop_var >= f.min, f.loop_var < f.min + f.extent]
            ranges.append((f.loop_var, lo, ext))
        free: dict[str, Var] = {}
        for tag in (*GRID_TAGS, *BLOCK_TAGS):
            if tag not in env_loops:
                ext = self.extent(tag)
                if ext is None:
                    raise NotEnumerable(f"{tag} has a symbolic extent")
                v = Var(f"<any {tag}>", "int32")
                free[tag] = v
                ranges.append((v, 0, ext))
        keep = set(free.values()) | {
            f.loop_var for f in acc.loops if f.thread_tag in BLOCK_TAGS
        }
        env, size = _grid(ranges, sample, keep)
        mask = np.ones(size, dtype=bool)
        for cond in within:
            mask &= _eval(cond, env, size) != 0
        approx = False
        for cond in acc.conds:
            try:
                mask &= _eval(cond, env, size) != 0
            except NotEnumerable:
                approx = True  # a data-dependent guard: taken as true
        env = {v: a[mask] for v, a in env.items()}
        n = int(mask.sum())
        coord = {}
        for tag in (*GRID_TAGS, *BLOCK_TAGS):
            if tag in free:
                coord[tag] = env[free[tag]]
            else:
                f = next(x for x in acc.loops if x.thread_tag == tag)
                coord[tag] = env[f.loop_var] - (_const(f.min) or 0)
        exts = [self.extent(t) or 1 for t in (*GRID_TAGS, *BLOCK_TAGS)]
        block = _linear([coord[t] for t in GRID_TAGS], exts[:3], n)
        thread = _linear([coord[t] for t in BLOCK_TAGS], exts[3:], n)
        count = _eval(arith.simplify(acc.count), env, n) if n else np.zeros(0, np.int64)
        elem = tuple(_eval(i, env, n) if n else np.zeros(0, np.int64) for i in acc.indices)
        return _Points(elem, block, thread, count, env, approx, self._value_codes(acc, env, n))

    def _value_codes(self, acc: _Access, env: dict[Var, np.ndarray], n: int) -> np.ndarray | None:
        """For a store whose value is a function of its loop variables alone (it loads only
        buffers this kernel never writes, no per-thread registers): a code per instance, equal
        where the variables the value uses are equal."""
        if not acc.is_store or not isinstance(acc.stmt, BufferStore):
            return None
        if self._pure_value.get(id(acc)) is None:
            self._pure_value[id(acc)] = (acc, self._is_pure(acc.stmt.value))
        if not self._pure_value[id(acc)][1]:
            return None
        used = list(dict.fromkeys(collect_vars(acc.stmt.value)))
        if any(v not in env for v in used):
            return None
        if not used or not n:
            return np.zeros(n, dtype=np.int64)
        cols = np.stack([env[v] for v in used], axis=1)
        return np.unique(cols, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)

    def same_value(self, w: _Access, x: _Access) -> bool:
        """Whether ``w`` is a store paired with itself whose value is pure (see
        [`prove_exclusive`][loopir.passes.race_prove.prove_exclusive])."""
        return w is x and isinstance(w.stmt, BufferStore) and w.is_store and \
            self._is_pure(w.stmt.value)

    def _is_pure(self, value: PrimExpr) -> bool:
        written = self.written
        ok = True

        class V(Visitor):
            def visit_BufferLoad(self, node: BufferLoad) -> None:
                nonlocal ok
                if node.buffer.scope not in ("global", "shared") or node.buffer in written:
                    ok = False
                self.generic_visit(node)

            def visit_Call(self, node: Call) -> None:
                nonlocal ok
                if not node.pure:
                    ok = False
                self.generic_visit(node)

        V().visit(value)
        return ok


def _enclosing_range(f: For, ranges: list[tuple[Var, int, int]]) -> tuple[int, int]:
    """The box ``(lo, extent)`` around the range of loop ``f``, whose start or extent names
    the enclosing loops of ``ranges`` (a persistent kernel's tile loop, its extent a function
    of ``blockIdx.x``): its iterations are then cut to the exact range by a guard."""
    names = {v for v, _, _ in ranges}
    if not set(collect_vars(f.min)) | set(collect_vars(f.extent)) <= names:
        raise NotEnumerable(f"loop {f.loop_var.name} has a symbolic range")
    ana = arith.Analyzer({v: (lo, lo + ext) for v, lo, ext in ranges})
    lo, end = ana.const_int_bound(f.min), ana.const_int_bound(f.min + f.extent)
    if lo.min_value == arith.NEG_INF or end.max_value == arith.POS_INF:
        raise NotEnumerable(f"loop {f.loop_var.name} has an unbounded range")
    return int(lo.min_value), max(0, int(end.max_value - lo.min_value))


def _grid(
    ranges: list[tuple[Var, int, int]], sample: bool, keep: set[Var]
) -> tuple[dict[Var, np.ndarray], int]:
    """All points of the box ``ranges``; ``sample`` keeps only the first and last iterations
    of the large ranges whose variables are not in ``keep`` (the thread coordinates)."""
    axes = []
    for v, lo, ext in ranges:
        if sample and ext > 2 * _SAMPLE and v not in keep:
            vals = [*range(lo, lo + _SAMPLE), *range(lo + ext - _SAMPLE, lo + ext)]
            axes.append(np.array(vals, dtype=np.int64))
        else:
            axes.append(np.arange(lo, lo + max(ext, 0), dtype=np.int64))
    total = 1
    for a in axes:
        total *= len(a)
    if total > WITNESS_POINTS:
        raise NotEnumerable(f"{total} instances are too many to enumerate")
    if not axes:
        return {}, 1
    grids = np.meshgrid(*axes, indexing="ij")
    return {v: g.reshape(-1) for (v, _, _), g in zip(ranges, grids)}, total


def collect_accesses(
    s: Stmt, loops: Sequence[For] = (), conds: Sequence[PrimExpr] = ()
) -> list[_Access]:
    """The shared and global accesses of ``s``, under the enclosing ``loops`` and guards."""
    c = _Collector()
    c.loops = list(loops)
    c.conds = list(conds)
    c.stmt = s if isinstance(s, (BufferStore, Evaluate)) else None
    c.visit(s)
    return c.accesses


def threads_may_share(launch: dict[str, int | None], a: _Access, b: _Access,
                      written: frozenset[Buffer] = frozenset(),
                      same_iteration: Sequence[Var] = ()) -> bool:  # fmt: skip
    """Whether two different threads of a block launched with ``launch`` (extent per
    ``threadIdx`` tag) may touch one element, one through ``a`` and the other through ``b``,
    whatever the barriers between them (False only when proven symbolically: the cost does not
    grow with the loops' extents). ``written``: the buffers the kernel stores to (a store
    whose value loads none of them stores equal values where its variables are equal).
    ``same_iteration``: variables of loops around both accesses in whose one iteration the two
    threads are (the caller's knowledge: ThreadSync's, after a barrier every iteration runs)."""
    k = _Kernel(None, None)
    k.launch = dict(launch)
    k.written = written
    return not prove_exclusive(k.extent, a, b, BLOCK_TAGS, GRID_TAGS,
                               same_value=k.same_value(a, b), same_iteration=same_iteration)  # fmt: skip


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


@attrs.frozen
class RaceReport:
    """What [`find_races`][loopir.passes.race_check.find_races] found: proven races and unproven
    pairs (with reasons)."""

    races: tuple[str, ...]
    unproven: tuple[str, ...]
    pairs_checked: int


def _kernels(s: Stmt) -> Iterator[For]:
    if isinstance(s, For) and s.kind is ForKind.THREAD_BINDING:
        yield s
        return
    if isinstance(s, SeqStmt):
        for c in s.seq:
            yield from _kernels(c)
    elif isinstance(s, (For, Allocate)):
        yield from _kernels(s.body)
    elif isinstance(s, IfThenElse):
        yield from _kernels(s.then_case)
        if s.else_case is not None:
            yield from _kernels(s.else_case)


def _pairs(k: _Kernel) -> Iterator[tuple[_Access, _Access]]:
    by_buf: dict[Buffer, list[_Access]] = {}
    for a in k.accesses:
        by_buf.setdefault(a.buffer, []).append(a)
    for buf, accs in by_buf.items():
        shared = buf.scope == "shared"
        for i, w in enumerate(accs):
            if not w.is_store:
                continue
            for j, x in enumerate(accs):
                if x.is_store and j < i:
                    continue  # that pair of stores was checked the other way round
                if shared and min(w.label, x.label) >= 0 and k.labels.find(w.label) != k.labels.find(x.label):
                    continue
                if copy_pair_skipped(k.twins, w, x):
                    continue  # race_tma: one copy's pieces, or a piece another covers
                yield w, x


def _what(acc: _Access) -> str:
    return "writes" if acc.is_store else "reads"


def _proven(k: _Kernel, w: _Access, x: _Access) -> bool:
    """The symbolic proof: two threads of one block never touch one element after the same
    number of barriers, and (global memory) two blocks never touch one element."""
    same = k.same_value(w, x)
    if not prove_exclusive(k.extent, w, x, BLOCK_TAGS, GRID_TAGS, counts=True, same_value=same):
        return False
    return w.buffer.scope == "shared" or prove_exclusive(k.extent, w, x, GRID_TAGS,
                                                         same_value=same)  # fmt: skip


def _check_pair(k: _Kernel, w: _Access, x: _Access) -> tuple[str, str | None]:
    """("race", message) / ("ok", None) / ("unknown", reason).

    Only the symbolic proof says "ok". When it fails, a bounded search for a witness looks at
    the accesses' instances (all of them when there are few, else the first and last
    iterations of the large loops), never more than ``WITNESS_POINTS`` per access: a
    witness found with exact guards is a real race; none found leaves the pair unproven.
    """
    shared = w.buffer.scope == "shared"
    if _proven(k, w, x):
        return "ok", None
    reason = "the element does not determine the thread"
    for sample in (False, True):
        try:
            pw = k.points(w, sample)
            px = pw if x is w else k.points(x, sample)
        except NotEnumerable:
            continue
        found = _conflict(pw, px, shared)
        if found is not None and not (pw.approx or px.approx):
            return "race", _race_message(k, w, x, found, shared)
        if found is not None:
            reason = "a guard that depends on loaded data was taken as always true"
        break
    return "unknown", (
        f"{w.buffer.name}: cannot prove that the store\n    {_line(w.stmt)}\n  and the "
        f"{'store' if x.is_store else 'load'} in\n    {_line(x.stmt)}\n  never touch one "
        f"element from two threads without a barrier between them ({reason})"
    )


def _line(s: Stmt) -> str:
    return script(s).splitlines()[0]


def _race_message(k: _Kernel, w: _Access, x: _Access, found: _Witness, shared: bool) -> str:
    elem = ", ".join(str(i) for i in found.index)
    def who(d: dict[str, int]) -> str:
        return ", ".join(f"{n}={v}" for n, v in d.items() if not n.startswith("<any"))
    where = "shared" if shared else "global"
    order = "with no barrier between them" if shared else (
        "with nothing ordering them (different blocks are never ordered; threads of one "
        "block only by a barrier)"
    )
    return (
        f"data race on {where} buffer {w.buffer.name}[{elem}]: one thread {_what(w)} it at "
        f"({who(found.first)}) and another thread {_what(x)} it at ({who(found.second)}) "
        f"{order}\n{script(k.func, mark=(w.stmt, x.stmt))}"
    )


def find_races(func: PrimFunc) -> RaceReport:
    """Check every kernel of the lowered ``func`` (see the module doc).

    Parameters
    ----------
    func
        A lowered PrimFunc (no blocks), as ``loopir.lower`` returns it.

    Returns
    -------
    RaceReport
        The proven races (each message shows the function with both accesses marked), the
        pairs it could neither prove nor refute, and how many pairs it looked at.
    """
    races: list[str] = []
    unproven: list[str] = []
    n = 0
    for root in _kernels(func.body):
        k = _Kernel(root, func)
        for w, x in _pairs(k):
            n += 1
            verdict, msg = _check_pair(k, w, x)
            if verdict == "unknown":
                verdict, msg = _witness_at_sizes(func, root, k, w, x) or (verdict, msg)
            if verdict == "race":
                races.append(msg)  # type: ignore[arg-type]
            elif verdict == "unknown":
                unproven.append(msg)  # type: ignore[arg-type]
    return RaceReport(tuple(races), tuple(unproven), n)


#: Values tried for a kernel's symbolic sizes when searching for a witness (a race at any
#: size is a race of the kernel).
WITNESS_SIZES = (1, 2, 3, 7, 33, 64)


def _witness_at_sizes(func: PrimFunc, root: For, k: _Kernel, w: _Access, x: _Access
                      ) -> tuple[str, str] | None:  # fmt: skip
    """A race found by the bounded witness search after fixing every symbolic size of the
    kernel to one of :data:`WITNESS_SIZES` (a symbolic extent cannot be enumerated)."""
    bound = {f.loop_var for a in k.accesses for f in a.loops}
    sizes = sorted({v for v in collect_vars(root) if v not in bound}, key=lambda v: v.name)
    if not sizes:
        return None
    i, j = k.accesses.index(w), k.accesses.index(x)
    for value in WITNESS_SIZES:
        fixed = substitute(root, {v: IntImm(value, v.dtype) for v in sizes})
        k2 = _Kernel(fixed, func)
        w2, x2 = k2.accesses[i], k2.accesses[j]
        verdict, msg = _check_pair(k2, w2, x2)
        if verdict == "race":
            names = ", ".join(f"{v.name} = {value}" for v in sizes)
            return "race", f"(with {names}) {msg}"
    return None


def check_races(func: PrimFunc, ctx: PassContext | None = None) -> None:
    """Refuse a lowered function with a proven data race (``cuda.race_check``).

    Raises
    ------
    CodegenError
        For the first proven race; the message names the buffer, the element and both
        threads, and shows the function with both accesses marked.

    Warns
    -----
    RaceCheckWarning
        For each pair of accesses that could be neither proven race-free nor refuted.
    """
    ctx = ctx or PassContext.current()
    if not ctx.get("cuda.race_check"):
        return
    try:
        report = find_races(func)
    except TmaWindowError as e:
        raise CodegenError(f"race check ({func.name}): {e}") from None
    if report.races:
        raise CodegenError(f"race check ({func.name}): {report.races[0]}")
    check_phases(func)  # the waits that order the copies poll their phases (race_phase)
    for msg in report.unproven:
        warnings.warn(f"race check ({func.name}): {msg}", RaceCheckWarning, stacklevel=2)

