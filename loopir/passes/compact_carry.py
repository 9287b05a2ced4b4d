"""Which loops may carry a buffer's value across their iterations (for CompactBufferAllocation).

CompactBufferAllocation narrows an allocation to one iteration of the loops around all its
accesses: it allocates the buffer inside them and compacts it to the region of one iteration.
That keeps the program's meaning only for a loop across whose iterations no value flows
through the buffer, that is when every element read in an iteration was written earlier in
the same iteration. :class:`CarryProver` proves that, conservatively ("carries" means "could not
prove it does not"), for the reads of one buffer:

- *same iteration*: a store textually before the read, executed whenever the read is, wrote
  the read element in this iteration: both element sets are enumerated over the loops not
  common to the two (exactly; constant ranges only) and compared at the same values of the
  common ones. Two stores in the two branches of an ``if`` the read is not under count as one;
- *in order*: every loop inside the iteration is enumerated (constant ranges), and each read
  point must find its element written at an earlier point (``L[i - 1]`` read in iteration
  ``i``, a sum reset under ``if i < 1``);
- *carried inside the iteration*: a read in a nest of consecutive loops (the reduce loops of a
  lowered reduction, of any extent) is covered in every iteration of the nest but the first
  by a store that writes the same elements in every one of them (``C[i] = C[i] + ...``), and
  in the first one (all those loops at their minimum) by a store before it (the init under
  ``if k == 0``).

A store's guard must hold whenever the read runs: it is evaluated over the store's enumerated
loops, proven, shared with the read (a branch both take, or a condition the read is under too,
at the same values), or a bound on the element stored (``k0 * 4 + ax < K`` for a store to
``S[..., k0 * 4 + ax]``) that the read element meets: within the buffer's shape (reads are in
bounds) or by the read's own guards. Guards that read memory are never taken as shared: the
memory may change between the two points. Anything else makes the store not count.

A ``shared`` buffer is read and written by all the threads of a block: its ``threadIdx`` and
``vthread`` loops are relaxed (the stores of every thread count, ThreadSync orders them), as
in its region. ``local`` and ``global`` buffers are taken as the sequential program says.
Loops bound to threads are never asked about: their iterations are independent by the IR's
contract (docs/semantics), a ``local`` buffer is per thread and a ``shared`` one per block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs
import numpy as np

from loopir.arith import Analyzer, StructuralKey, structural_key
from loopir.arith import vectorized as _enum
from loopir.ir import op
from loopir.ir.buffer import Buffer, Range
from loopir.ir.expr import GE, Broadcast, BufferLoad, Call, IntImm, Not, PrimExpr, Ramp, Var
from loopir.ir.functor import Mutator, Node, Visitor, collect_vars, post_order_visit, substitute
from loopir.ir.stmt import BufferStore, Evaluate, For, ForKind, IfThenElse, Stmt
from loopir.passes._walk import conjuncts, is_thread_loop, loop_range
from loopir.tensor_intrin.calls import hardware_lane, touches

__all__ = ["Guard", "PathAccess", "CarryProver", "collect_paths"]


@attrs.frozen(eq=False)
class Guard:
    """One branch of an ``if`` on the way to an access (one object per node and branch)."""

    node: IfThenElse
    then: bool

    @property
    def conds(self) -> list[PrimExpr]:
        """The conjuncts that hold in this branch."""
        c = self.node.condition
        return conjuncts(c) if self.then else [Not(c)]


Entry = For | Guard


@attrs.frozen(eq=False)
class PathAccess:
    """A load or store with the loops and branches around it (outermost first) and its place
    in program order (a store comes after the loads of its value and indices)."""

    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    is_store: bool
    path: tuple[Entry, ...]
    order: int


class _Paths(Visitor):
    def __init__(self) -> None:
        self.path: list[Entry] = []
        self.out: dict[Buffer, list[PathAccess]] = {}
        self.count = 0

    def _add(self, buf: Buffer, idx: tuple[PrimExpr, ...], store: bool) -> None:
        self.out.setdefault(buf, []).append(PathAccess(buf, idx, store, tuple(self.path), self.count))
        self.count += 1

    def visit_For(self, node: For) -> None:
        self.visit(node.min)
        self.visit(node.extent)
        self.path.append(node)
        self.visit(node.body)
        self.path.pop()

    def visit_IfThenElse(self, node: IfThenElse) -> None:
        self.visit(node.condition)
        for then, branch in ((True, node.then_case), (False, node.else_case)):
            if branch is not None:
                self.path.append(Guard(node, then))
                self.visit(branch)
                self.path.pop()

    def visit_BufferStore(self, node: BufferStore) -> None:
        self.visit(node.value)
        for i in node.indices:
            self.visit(i)
        self._add(node.buffer, node.indices, True)

    def visit_BufferLoad(self, node: BufferLoad) -> None:
        for i in node.indices:
            self.visit(i)
        self._add(node.buffer, node.indices, False)

    def visit_Evaluate(self, node: Evaluate) -> None:
        if not (isinstance(node.value, Call) and op.is_tensor_core_call(node.value)):
            self.generic_visit(node)
            return
        # what a lane's tensor-core call touches, inside loops over its footprint (the
        # loads before the stores, as for a BufferStore)
        touched = touches(node.value, hardware_lane([e for e in self.path if isinstance(e, For)]))
        for t in sorted(touched, key=lambda t: t.is_store):
            loops = t.loops(node)
            self.path.extend(loops)
            self._add(t.buffer, t.indices, t.is_store)
            del self.path[len(self.path) - len(loops):]


def collect_paths(body: Stmt) -> dict[Buffer, list[PathAccess]]:
    """Every buffer's accesses in ``body`` with their paths, in program order."""
    p = _Paths()
    p.visit(body)
    return p.out


def _vars(e: PrimExpr | Iterable[PrimExpr]) -> set[Var]:
    if isinstance(e, PrimExpr):
        return set(collect_vars(e))
    return {v for x in e for v in collect_vars(x)}


@attrs.define
class _Points:
    """The elements one access touches: a symbolic base per dimension (its enumerated loops at
    their minimum), every point's constant offsets, and each point's time (a mixed-radix key of
    the values of the ``stamp`` loops, outermost most significant; zeros without a stamp)."""

    bases: list[PrimExpr]
    offsets: np.ndarray  # points x dimensions
    times: np.ndarray


@attrs.define
class _Side:
    """One access as a coverage check sees it: the loops enumerated and the guards kept."""

    acc: PathAccess
    loops: list[For]
    masks: list[PrimExpr] = attrs.field(factory=list)


class CarryProver:
    """Proves, for the accesses of one buffer, that a loop around all of them carries no value
    of it across its iterations (see the module doc)."""

    def __init__(self, accesses: Sequence[PathAccess], scope: str) -> None:
        self.loads = [a for a in accesses if not a.is_store]
        self.stores = [a for a in accesses if a.is_store]
        self.shared = scope == "shared"
        self.local = scope == "local"
        self.warp = scope == "warp"
        self.ana = Analyzer()
        bound: set[Var] = set()
        for a in accesses:
            for e in a.path:
                if isinstance(e, For) and e.loop_var not in bound:
                    bound.add(e.loop_var)
                    self.ana.bind(e.loop_var, loop_range(e))
        self._cache: dict[int, bool] = {}

    def carries(self, f: For) -> bool:
        """Whether a value of the buffer may flow from one iteration of ``f`` to a later one
        (``f`` encloses every access)."""
        key = id(f)
        if key not in self._cache:
            self._cache[key] = not all(self._covered(r, f) for r in self.loads)
        return self._cache[key]

    # --- the three proofs ---------------------------------------------------------------------
    def _covered(self, r: PathAccess, f: For) -> bool:
        earlier = [w for w in self.stores if w.order < r.order]
        if any(self._same_iteration(w, r, f, {}) for w in earlier):
            return True
        if any(self._either_branch(w, v, r, f) for w in earlier for v in earlier):
            return True
        if self._in_order(r, f):
            return True
        return any(self._carried(w, r, f, run, earlier) for w in self.stores for run in self._runs(w, r, f))

    def _relaxed(self, e: Entry) -> bool:
        """A loop whose every iteration's stores count (threads sharing the buffer): the
        thread loops of a shared buffer, the lanes (threadIdx.x) of a warp buffer."""
        if not isinstance(e, For):
            return False
        return (self.shared and is_thread_loop(e)) or (self.warp and is_thread_loop(e, ("threadIdx.x",)))

    def _loops(self, a: PathAccess, start: int, pick: Callable[[int, For], bool]) -> list[For]:
        """The loops of ``a`` to enumerate: those from ``start`` on that ``pick`` takes, and
        the relaxed ones above (every thread's stores count, not only this thread's)."""
        return [e for n, e in enumerate(a.path) if isinstance(e, For)
                and (self._relaxed(e) or (n >= start and pick(n, e)))]  # fmt: skip

    def _either_branch(self, w: PathAccess, v: PathAccess, r: PathAccess, f: For) -> bool:
        """Whether ``w`` and ``v`` are in the two branches of an ``if`` that ``r`` is not in,
        each writing ``r``'s element (``if i < 1: P[i] = B[i] else: P[i] = 0``)."""
        for e in w.path:
            if isinstance(e, Guard) and e.then and e not in r.path:
                if any(isinstance(x, Guard) and x.node is e.node and not x.then for x in v.path):
                    return self._same_iteration(w, r, f, {}, e.node) and self._same_iteration(v, r, f, {}, e.node)
        return False

    def _same_iteration(self, w: PathAccess, r: PathAccess, f: For, sigma: Mapping[Var, PrimExpr],
                        either: IfThenElse | None = None) -> bool:  # fmt: skip
        """Whether ``w`` (before ``r``) wrote ``r``'s element in the same iteration of every
        loop common to both, with ``sigma``'s loops at the values it gives (``either``: an
        ``if`` whose condition is left out; it must not change between the points compared)."""
        top = _index(w.path, f) + 1
        k = _common(w.path, r.path)

        def pick(n: int, e: For) -> bool:
            return (n >= k or self._relaxed(e)) and e.loop_var not in sigma

        ws, rs = _Side(w, self._loops(w, top, pick)), _Side(r, self._loops(r, top, pick))
        if not self._guards(ws, rs, k, sigma, set(), either):
            return False
        wp, rp = self._points(ws, sigma, []), self._points(rs, sigma, [])
        return wp is not None and rp is not None and self._subset(rp, wp)

    def _in_order(self, r: PathAccess, f: For) -> bool:
        """Whether every element ``r`` reads in an iteration of ``f`` was written before in it,
        found by enumerating every loop inside ``f`` and ordering the points by time."""
        top = _index(r.path, f) + 1
        rs = _Side(r, self._loops(r, top, lambda n, e: True))
        self._read_masks(rs, {})
        r_stamp = [e for e in rs.loops if not self._relaxed(e)]  # its loops inside f, in order
        rp = self._points(rs, {}, r_stamp)
        if rp is None:
            return False
        covered = np.zeros(rp.times.size, bool)
        for w in self.stores:
            k = _common(w.path, r.path)
            stamp = [e for e in r_stamp if _index(r.path, e) < k]  # the loops common to both
            ws = _Side(w, self._loops(w, top, lambda n, e: True))
            if not self._guards(ws, rs, k, {}, set()):
                continue
            wp = self._points(ws, {}, stamp)
            if wp is None:
                continue
            inner = self._extents(r_stamp[len(stamp):])
            if inner is None:
                continue
            got = self._written_before(rp, rp.times // max(inner, 1), wp, w.order < r.order)
            if got is not None:
                covered |= got
        return bool(covered.all())

    def _extents(self, loops: Sequence[For]) -> int | None:
        out = 1
        for lp in loops:
            if not isinstance(lp.extent, IntImm):
                return None
            out *= max(lp.extent.value, 0)
        return out

    def _runs(self, w: PathAccess, r: PathAccess, f: For) -> Iterable[tuple[int, int]]:
        """Consecutive loops common to ``w`` and ``r`` inside ``f`` (path positions a..b)."""
        top = _index(w.path, f) + 1
        k = _common(w.path, r.path)
        loops = [n for n in range(top, k) if isinstance(w.path[n], For) and not self._relaxed(w.path[n])]
        for i, a in enumerate(loops):
            for j, b in enumerate(loops[i:]):
                if b - a != j:
                    break  # a branch or a relaxed loop between them
                yield a, b

    def _carried(self, w: PathAccess, r: PathAccess, f: For, run: tuple[int, int],
                 earlier: Sequence[PathAccess]) -> bool:  # fmt: skip
        """Whether ``w`` writes ``r``'s element in every iteration of the loops ``run`` (which
        then carry it to the next), and a store before ``r`` wrote it in their first one."""
        a, b = run
        top = _index(w.path, f) + 1
        loops = [e for e in w.path[a:b + 1] if isinstance(e, For)]
        run_vars = {lp.loop_var for lp in loops}
        if any(_vars((lp.min, lp.extent)) & run_vars for lp in loops):
            return False  # the first iteration must be all at the minimum
        ws = _Side(w, self._loops(w, top, lambda n, e: n > b or self._relaxed(e)))
        rs = _Side(r, self._loops(r, top, lambda n, e: n >= a or self._relaxed(e)))
        if _vars(w.indices) & run_vars or any(_vars((lp.min, lp.extent)) & run_vars for lp in ws.loops):
            return False  # what w writes must be the same in every iteration
        if not self._guards(ws, rs, _common(w.path, r.path), {}, run_vars):
            return False
        wp, rp = self._points(ws, {}, []), self._points(rs, {}, [])
        if wp is None or rp is None or not self._subset(rp, wp):
            return False
        sigma = {lp.loop_var: lp.min for lp in loops}
        return any(self._same_iteration(w0, r, f, sigma) for w0 in earlier)

    # --- guards -------------------------------------------------------------------------------
    def _read_masks(self, rs: _Side, sigma: Mapping[Var, PrimExpr]) -> list[PrimExpr]:
        """Set ``rs``'s masks (the guards that can be evaluated over its loops; leaving the
        others out only adds reads); return all its guards' conjuncts."""
        r_vars = {e.loop_var for e in rs.loops}
        r_conds = [_sub(c, sigma) for e in rs.acc.path if isinstance(e, Guard) for c in e.conds]
        rs.masks = [c for c in r_conds if _vars(c) <= r_vars and not _has_load(c)]
        return r_conds

    def _guards(self, ws: _Side, rs: _Side, k: int, sigma: Mapping[Var, PrimExpr], fixed_not: set[Var],
                either: IfThenElse | None = None) -> bool:  # fmt: skip
        """Keep ``ws``'s guards as masks over its loops, or prove them true whenever ``rs``
        reads (and set ``rs``'s masks); False when one can be neither. ``k``: the length of
        the paths' common part; ``fixed_not``: loops common to both at different values."""
        if self.local and any(e.kind is ForKind.THREAD_BINDING for e in ws.loops + rs.loops):
            return False  # a local buffer is per thread: no thread reads another one's stores
        w_vars = {e.loop_var for e in ws.loops}
        varying = w_vars | {e.loop_var for e in rs.loops} | fixed_not
        for lp in ws.loops:
            if not self.ana.can_prove(GE(_sub(lp.extent, sigma), IntImm(1, lp.extent.dtype))):
                return False  # the store might not run
        r_conds = self._read_masks(rs, sigma)
        for n, e in enumerate(ws.acc.path):
            if not isinstance(e, Guard):
                continue
            if e.node is either:
                cond = _sub(e.node.condition, sigma)
                if _vars(cond) & varying or _has_load(cond):
                    return False  # the branch taken could differ between the points
                continue
            for c in (_sub(x, sigma) for x in e.conds):
                cv = _vars(c)
                if not cv & varying and not _has_load(c):  # the same value at both points
                    if n < k or any(self.ana.can_prove_equal(c, rc) for rc in r_conds):
                        continue  # a branch both take, or a condition the read is under too
                if cv <= w_vars:
                    ws.masks.append(c)
                elif not (self.ana.can_prove(c) or self._bounds_element(c, ws, rs, sigma, r_conds, varying)):
                    return False
        return True

    def _bounds_element(self, c: PrimExpr, ws: _Side, rs: _Side, sigma: Mapping[Var, PrimExpr],
                        r_conds: Sequence[PrimExpr], varying: set[Var]) -> bool:  # fmt: skip
        """Whether ``c`` is a condition on the element ``ws`` stores (``k0 * 4 + ax < 50`` for
        a store to ``S[..., k0 * 4 + ax]``) that every element ``rs`` reads meets: one within
        the buffer's shape (a read is in bounds), or one its own guards state. Then the store
        of a read element passes it."""
        buf = ws.acc.buffer
        holes = [Var(f"_e{d}", i.dtype) for d, i in enumerate(ws.acc.indices)]
        keys = {structural_key(_sub(i, sigma)): h for i, h in zip(ws.acc.indices, holes)}
        q = _Holes(keys).visit(c)
        assert isinstance(q, PrimExpr)
        if q is c or _vars(q) & varying or _has_load(q):
            return False
        if Analyzer({h: Range(IntImm(0, h.dtype), n) for h, n in zip(holes, buf.shape)}).can_prove(q):
            return True
        at_read = substitute(q, dict(zip(holes, (_sub(i, sigma) for i in rs.acc.indices))))
        return any(self.ana.can_prove_equal(at_read, rc) for rc in r_conds)

    # --- element sets -------------------------------------------------------------------------
    def _points(self, side: _Side, sigma: Mapping[Var, PrimExpr], stamp: Sequence[For]) -> _Points | None:
        """Enumerate what ``side`` accesses (None: not enumerable)."""
        idx: list[PrimExpr] = []
        ranges: list[tuple[Var, int, int]] = []
        for i in side.acc.indices:
            i = _sub(i, sigma)
            if isinstance(i, Broadcast):
                i = i.value
            elif isinstance(i, Ramp):
                if not ranges:
                    ranges.append((Var("_lane", i.base.dtype), 0, i.lanes))
                i = i.base + i.stride * ranges[0][0]
            idx.append(i)
        used = _vars(idx) | _vars(side.masks) | {lp.loop_var for lp in stamp}
        for lp in side.loops:
            if lp.loop_var in used:
                lo, ext = (self.ana.simplify(_sub(x, sigma)) for x in (lp.min, lp.extent))
                if not (isinstance(lo, IntImm) and isinstance(ext, IntImm)):
                    return None
                ranges.append((lp.loop_var, lo.value, ext.value))
        enum_vars = {v: (lo, ext) for v, lo, ext in ranges}
        at_min = {v: IntImm(lo, v.dtype) for v, lo, _ in ranges}
        bases = [self.ana.simplify(substitute(i, at_min)) for i in idx]
        offsets = [self.ana.simplify(i - h) for i, h in zip(idx, bases)]
        if any(not _vars(o) <= enum_vars.keys() for o in offsets):
            return None
        try:
            env = _enum.domain(ranges)
            size = next(iter(env.values())).size if env else 1
            keep = np.ones(size, bool)
            for m in side.masks:
                keep &= np.broadcast_to(_enum.evaluate(m, env, size) != 0, (size,))
            cols = [np.broadcast_to(_enum.evaluate(o, env, size), (size,))[keep] for o in offsets]
        except _enum.NotEnumerable:
            return None
        times = np.zeros(int(keep.sum()), np.int64)
        for lp in stamp:
            first, count = enum_vars[lp.loop_var]
            times = times * count + (env[lp.loop_var][keep] - first)
        pts = np.stack(cols, axis=1) if cols else np.zeros((times.size, 0), np.int64)
        return _Points(bases, pts, times)

    def _codes(self, r: _Points, w: _Points) -> tuple[np.ndarray, np.ndarray] | None:
        """Both point sets' elements as integers of one numbering (None: the bases do not
        differ by constants, or the numbering would overflow)."""
        deltas = [self.ana.simplify(a - b) for a, b in zip(r.bases, w.bases)]
        if not all(isinstance(d, IntImm) for d in deltas):
            return None
        rp = r.offsets + np.array([d.value for d in deltas if isinstance(d, IntImm)], np.int64)
        wp = w.offsets
        if rp.shape[0] == 0 or wp.shape[0] == 0 or rp.shape[1] == 0:  # (no dimensions: one element)
            return np.zeros(rp.shape[0], np.int64), np.full(wp.shape[0], -1 if rp.shape[1] else 0, np.int64)
        lo = np.minimum(rp.min(0), wp.min(0))
        span = np.maximum(rp.max(0), wp.max(0)) - lo + 1
        if float(np.prod(span.astype(np.float64))) >= 2.0**62:
            return None
        scale = np.concatenate([np.cumprod(span[::-1])[::-1][1:], [1]]).astype(np.int64)
        return (rp - lo) @ scale, (wp - lo) @ scale

    def _subset(self, r: _Points, w: _Points) -> bool:
        codes = self._codes(r, w)
        return codes is not None and bool(np.isin(*codes).all())

    def _written_before(self, r: _Points, r_times: np.ndarray, w: _Points, ties: bool) -> np.ndarray | None:
        """Per point of ``r`` (at ``r_times`` on ``w``'s clock), whether ``w`` wrote its element
        at an earlier time (or at the same time when ``ties``: ``w`` comes first)."""
        codes = self._codes(r, w)
        if codes is None:
            return None
        rc, wc = codes
        if wc.size == 0:
            return np.zeros(rc.size, bool)
        order = np.lexsort((w.times, wc))  # by element, then time: the first write of each
        wc, wt = wc[order], w.times[order]
        first = np.concatenate([[True], wc[1:] != wc[:-1]])
        elems, t0 = wc[first], wt[first]
        pos = np.clip(np.searchsorted(elems, rc), 0, elems.size - 1)
        hit = elems[pos] == rc
        before = t0[pos] < r_times if not ties else t0[pos] <= r_times
        out: np.ndarray = hit & before
        return out


class _Holes(Mutator):
    """Replaces the subexpressions equal to an index of a store by that dimension's hole."""

    def __init__(self, keys: Mapping[StructuralKey, Var]) -> None:
        self.keys = keys

    def visit(self, node: Node) -> Node:
        if isinstance(node, PrimExpr):
            hole = self.keys.get(structural_key(node))
            if hole is not None:
                return hole
        return super().visit(node)


def _sub(e: PrimExpr, sigma: Mapping[Var, PrimExpr]) -> PrimExpr:
    out = substitute(e, sigma) if sigma else e
    assert isinstance(out, PrimExpr)
    return out


def _index(path: Sequence[Entry], f: For) -> int:
    return next(n for n, e in enumerate(path) if e is f)


def _common(a: Sequence[Entry], b: Sequence[Entry]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] is b[n]:
        n += 1
    return n


def _has_load(e: PrimExpr) -> bool:
    found: list[bool] = []
    post_order_visit(e, lambda n: found.append(True) if isinstance(n, BufferLoad) else None)
    return bool(found)
