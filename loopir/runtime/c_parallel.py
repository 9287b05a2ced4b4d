"""Which ``parallel`` and ``vectorized`` loops the CPU executor runs concurrently (OpenMP).

The IR means its sequential execution (docs/semantics): a loop kind is a promise that running
the iterations at once gives the same result, and the ``parallel`` and ``vectorize``
primitives refuse a loop that feeds a reduction iter var, as TVM does. Later primitives can
still break the promise (``compute_at`` of a reduction under a parallel loop recomputes
overlapping elements in neighbouring iterations; a block under the loop may not depend on it
at all), and the executor is the reference, so it runs a loop's iterations concurrently only
when it can prove that this cannot change the result:

* nothing under the loop is thread-bound and it is not inside a thread region: fibers,
  barriers and ``thread_allreduce`` keep their state in static variables and schedule the
  threads themselves (``thread_order="random"`` keeps its meaning);
* every element that one iteration stores to, in a buffer allocated outside the loop, is
  loaded or stored by no other iteration. Buffers allocated under the loop are private to an
  iteration. For each pair (store, access) of one buffer, each side's loop variables inside the
  loop become variables of its own (the other iteration), block iter vars are replaced by their
  bindings, vector lanes by a lane variable and anything opaque in an index (a load, a call)
  by an unknown value. The loop variable ``v`` is written with digits when it is used as
  ``v // c`` and ``v % c`` (a fused loop). A digit is forced equal on both sides when, in one
  dimension (or in the flattened offset), both indices are ``c * d + r`` with the same
  constant-sign coefficient ``c`` and ``|r' - r| < |c|`` is provable, or ``r' - r`` is a
  multiple of ``m`` and the digit's range is no longer than ``m / gcd(c, m)``; digits forced
  already cancel out. The pair is separated when every digit is forced: equal elements then
  mean equal iterations. Guards are ignored (a store under ``if v == 0`` is not proven:
  conservative).

A vectorized loop is also emitted as ``#pragma omp simd`` only without bounds checks (the
checks keep the loop scalar anyway, and a check records its error in iteration order) and when
its body can record no error at all: no allocation, no integer division by a non-constant.

A loop that cannot be proven runs serially; the C source says why in a comment.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import attrs

from loopir import arith
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer, Range
from loopir.ir.expr import (
    Broadcast,
    BufferLoad,
    Call,
    Div,
    FloorDiv,
    FloorMod,
    IntImm,
    PrimExpr,
    Ramp,
    Var,
)
from loopir.ir.functor import Mutator, collect_vars, post_order_visit, substitute
from loopir.ir.op import TENSOR_CORE_OPS, floordiv
from loopir.ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    SeqStmt,
    Stmt,
)
from loopir.ir.tma import TMA_OPS

__all__ = ["concurrency_problem", "OMP_PRELUDE", "SIMD_PRELUDE", "SIMD_ENTRY", "THREADS_ENTRY"]

# Exported by libraries with parallel loops: sets the team size (0: OpenMP's default).
THREADS_ENTRY = "loopir_set_num_threads"
# Exported by libraries with simd loops: 0 runs them one iteration at a time (the proof of
# independence assumed distinct buffers; overlapping arguments turn it off for a call).
SIMD_ENTRY = "loopir_set_simd"

# More store/access pairs than this in one loop are not worth proving at build time.
_MAX_PAIRS = 4096

OMP_PRELUDE = r"""
/* ---- parallel loops (see loopir/runtime/c_parallel.py) ---- */
#ifdef _OPENMP
#include <omp.h>
#endif
static int lir_num_threads = 0;  /* 0: OpenMP's default (OMP_NUM_THREADS, else the cores) */
void @ENTRY@(int n) { lir_num_threads = n; }
/* Threads for a loop of ext iterations: never more than there are iterations. */
static inline int lir_team(int64_t ext) {
#ifdef _OPENMP
  int64_t n = lir_num_threads > 0 ? lir_num_threads : omp_get_max_threads();
  return (int)(ext < n ? (ext < 1 ? 1 : ext) : n);
#else
  (void)ext;
  return 1;
#endif
}
""".replace("@ENTRY@", THREADS_ENTRY)

SIMD_PRELUDE = f"""
/* ---- simd loops (see loopir/runtime/c_parallel.py) ---- */
static int lir_simd = 1;
void {SIMD_ENTRY}(int on) {{ lir_simd = on; }}
"""


class _Refused(Exception):
    """The loop cannot be proven safe to run concurrently (the message says why)."""


@attrs.frozen
class _Access:
    """One load or store: its indices over the loop variable, its own inner variables (with
    their ranges, outermost first) and variables shared by every iteration."""

    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    ranges: tuple[tuple[Var, Range], ...]
    store: bool
    opaque: tuple[Var, ...] = ()


class _Scalarize(Mutator):
    """An index as a scalar: a Ramp lane is a lane variable, anything opaque an unknown."""

    def __init__(self) -> None:
        self.extra: list[tuple[Var, Range]] = []
        self.opaque: list[Var] = []

    def visit_Ramp(self, e: Ramp) -> PrimExpr:
        lane = Var("lane", dt.element(e.base.dtype))
        self.extra.append((lane, Range(0, e.lanes)))
        base, stride = self.visit(e.base), self.visit(e.stride)
        assert isinstance(base, PrimExpr) and isinstance(stride, PrimExpr)
        return base + stride * lane

    def visit_Broadcast(self, e: Broadcast) -> PrimExpr:
        value = self.visit(e.value)
        assert isinstance(value, PrimExpr)
        return value

    def _opaque(self, e: PrimExpr) -> PrimExpr:
        # any value at all: a fresh variable without a range, different on each side
        v = Var("opaque", dt.element(e.dtype))
        self.opaque.append(v)
        return v

    visit_BufferLoad = visit_Call = _opaque


class _Collector:
    """Every access of a loop body to buffers allocated outside it."""

    def __init__(self, simd: bool) -> None:
        self.simd = simd
        self.subst: dict[Var, PrimExpr] = {}
        self.ranges: list[tuple[Var, Range]] = []
        self.private: set[Buffer] = set()
        self.accesses: list[_Access] = []

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, SeqStmt):
            for x in s.seq:
                self.stmt(x)
        elif isinstance(s, For):
            self._for(s)
        elif isinstance(s, BufferStore):
            self.expr(s.value)
            for i in s.indices:
                self.expr(i)
            self.access(s.buffer, s.indices, store=True)
        elif isinstance(s, IfThenElse):
            self.expr(s.condition)
            self.stmt(s.then_case)
            if s.else_case is not None:
                self.stmt(s.else_case)
        elif isinstance(s, Allocate):
            self._no_simd(f"it allocates buffer {s.buffer.name}")
            self.private.add(s.buffer)
            self.stmt(s.body)
        elif isinstance(s, BlockRealize):
            self._realize(s)
        elif isinstance(s, Block):
            self._block(s)
        elif isinstance(s, Evaluate):
            self._evaluate(s)
        else:
            raise _Refused(f"it contains a {type(s).__name__}")

    def _no_simd(self, why: str) -> None:
        if self.simd:
            raise _Refused(why)

    def _for(self, s: For) -> None:
        if s.kind is ForKind.THREAD_BINDING:
            raise _Refused(f"loop {s.loop_var.name} inside it is bound to {s.thread_tag}")
        self.expr(s.min)
        self.expr(s.extent)
        rng = Range(self.sub(s.min), self.sub(s.extent))
        self.ranges.append((s.loop_var, rng))
        self.stmt(s.body)
        self.ranges.pop()

    def _realize(self, s: BlockRealize) -> None:
        for v in s.iter_values:
            self.expr(v)
        self.expr(s.predicate)
        values = [self.sub(v) for v in s.iter_values]
        for iv, value in zip(s.block.iter_vars, values):
            self.subst[iv.var] = value
        self._block(s.block)

    def _block(self, b: Block) -> None:
        if b.alloc_buffers:
            self._no_simd(f"block {b.name} allocates {b.alloc_buffers[0].name}")
        self.private.update(b.alloc_buffers)
        if b.init is not None:
            self.stmt(b.init)
        self.stmt(b.body)

    def _evaluate(self, s: Evaluate) -> None:
        v = s.value
        if isinstance(v, Call) and (v.op in ("tvm_storage_sync", "loopir.thread_allreduce")
                                    or v.op in TENSOR_CORE_OPS or v.op in TMA_OPS):  # fmt: skip
            # tensor-core calls: their stores are not BufferStores, and the collective ones
            # keep their rendezvous in static variables
            raise _Refused(f"it contains {v.op}")
        if isinstance(v, Call) and v.op in ("loopir.cp_async_commit", "loopir.cp_async_wait"):
            return  # no-ops on the CPU
        self.expr(v)

    def sub(self, e: PrimExpr) -> PrimExpr:
        out = substitute(e, self.subst)
        assert isinstance(out, PrimExpr)
        return out

    def expr(self, e: PrimExpr) -> None:
        """Record the loads in ``e``; with ``simd`` refuse what can record an error."""

        def visit(n: object) -> None:
            if isinstance(n, BufferLoad):
                self.access(n.buffer, n.indices, store=False)
            elif self.simd and isinstance(n, (FloorDiv, FloorMod, Div)) and dt.is_int(n.dtype):
                if not (isinstance(n.b, IntImm) and n.b.value != 0):
                    raise _Refused(f"integer division by {n.b} may fail")

        post_order_visit(e, visit)

    def access(self, buffer: Buffer, indices: Iterable[PrimExpr], store: bool) -> None:
        if buffer in self.private:
            return
        scal = _Scalarize()
        idx = []
        for i in indices:
            out = scal.visit(self.sub(i))
            assert isinstance(out, PrimExpr)
            idx.append(out)
        self.accesses.append(
            _Access(buffer, tuple(idx), tuple(self.ranges + scal.extra), store, tuple(scal.opaque))
        )


def _flat(buffer: Buffer, indices: tuple[PrimExpr, ...]) -> PrimExpr | None:
    """The element offset of ``indices`` (row-major, or the buffer's strides), in the
    indices' own type where it holds every offset (a cast would hide the linear form)."""
    if not indices:
        return None
    dtype = indices[0].dtype
    strides: list[PrimExpr]
    consts = [s.value for s in buffer.shape if isinstance(s, IntImm)]
    if buffer.strides is not None:
        strides = list(buffer.strides)
    elif len(consts) == len(indices) and any(i.dtype != dtype for i in indices):
        return None
    elif len(consts) == len(indices):
        total = 1
        for c in consts:
            total *= max(c, 1)
        if total >= dt.max_value(dtype):
            dtype = "int64"
        place = [1] * len(consts)
        for d in range(len(consts) - 2, -1, -1):
            place[d] = place[d + 1] * consts[d + 1]
        strides = [IntImm(p, dtype) for p in place]
    else:
        strides = [IntImm(1, "int64")] * len(indices)
        for d in range(len(indices) - 2, -1, -1):
            strides[d] = strides[d + 1] * buffer.shape[d + 1]
    out: PrimExpr = indices[0] * strides[0]
    for i, st in zip(indices[1:], strides[1:]):
        out = out + i * st
    return out


def _apart(ana: arith.Analyzer, a: PrimExpr, b: PrimExpr, v: Var, v2: Var, inner: set[Var]) -> bool:
    """Whether ``a`` at iteration ``v`` and ``b`` at ``v2`` can be equal only when v == v2."""
    la, lb = ana.detect_linear(a, [v]), ana.detect_linear(b, [v2])
    if la is None or lb is None:
        return False
    (ca, ra), (cb, rb) = la, lb
    if any(x in inner for x in collect_vars(ca)) or not ana.can_prove_equal(ca, cb):
        return False  # the coefficient must be one value for every instance of both
    if ana.can_prove(ca > 0):
        c = ca
    elif ana.can_prove(ca < 0):
        c = -ca
    else:
        return False
    if ana.can_prove(rb - ra < c) and ana.can_prove(ra - rb < c):
        return True
    # c * (v - v2) = rb - ra, a multiple of m: v - v2 is one of m / gcd(c, m), which a range
    # no longer than that leaves only 0 (an inner split loop reordered outside)
    c_val, m = arith.const_int_bound(c), ana.modular_set(rb - ra)
    if c_val.min_value != c_val.max_value or m.base != 0 or m.coeff <= 1:
        return False
    period = m.coeff // math.gcd(int(c_val.min_value), m.coeff)
    span = ana.const_int_bound(v)
    return span.max_value - span.min_value < period


def _divisors(v: Var, exprs: Iterable[PrimExpr]) -> set[int]:
    """The constants ``c > 1`` of ``v // c`` and ``v % c`` in ``exprs``."""
    found: set[int] = set()

    def visit(n: object) -> None:
        if isinstance(n, (FloorDiv, FloorMod)) and n.a is v and isinstance(n.b, IntImm) and n.b.value > 1:
            found.add(n.b.value)

    for e in exprs:
        post_order_visit(e, visit)
    return found


class _Digits(Mutator):
    """``v``, ``v // c`` and ``v % c`` written with digits: ``v = sum(d_j * places[j])`` where
    each place divides the next (a fused loop's ``f // n`` and ``f % n`` become two digits)."""

    def __init__(self, v: Var, places: list[int], digits: list[Var]) -> None:
        self.v, self.places, self.digits = v, places, digits

    def _sum(self, js: range, div: int) -> PrimExpr:
        out: PrimExpr = IntImm(0, self.v.dtype)
        for j in js:
            out = out + self.digits[j] * (self.places[j] // div)
        return out

    def visit_Var(self, e: Var) -> PrimExpr:
        return self._sum(range(len(self.digits)), 1) if e is self.v else e

    def _place(self, e: FloorDiv | FloorMod) -> int | None:
        if e.a is self.v and isinstance(e.b, IntImm) and e.b.value in self.places[1:]:
            return self.places.index(e.b.value)
        return None

    def visit_FloorDiv(self, e: FloorDiv) -> PrimExpr:
        i = self._place(e)
        if i is None:
            out = self.generic_visit(e)
            assert isinstance(out, PrimExpr)
            return out
        return self._sum(range(i, len(self.digits)), self.places[i])

    def visit_FloorMod(self, e: FloorMod) -> PrimExpr:
        i = self._place(e)
        if i is None:
            out = self.generic_visit(e)
            assert isinstance(out, PrimExpr)
            return out
        return self._sum(range(i), 1)

    def range(self, r: Range) -> Range:
        return Range(self.expr(r.min), self.expr(r.extent))

    def expr(self, e: PrimExpr) -> PrimExpr:
        out = self.visit(e)
        assert isinstance(out, PrimExpr)
        return out


def _digit_ranges(loop: For, places: list[int], suffix: str) -> list[tuple[Var, Range]]:
    """One variable per place; the last spans the loop's range divided by its place."""
    v = loop.loop_var
    out = []
    for j, p in enumerate(places):
        d = Var(f"{v.name}_d{j}{suffix}", v.dtype)
        if j + 1 < len(places):
            out.append((d, Range(0, places[j + 1] // p)))
        elif p == 1:
            out.append((d, Range(loop.min, loop.extent)))
        else:
            lo = arith.simplify(floordiv(loop.min, p))
            hi = arith.simplify(floordiv(loop.min + loop.extent - 1, p))
            out.append((d, Range(lo, arith.simplify(hi - lo + 1))))
    return out


def _separated(w: _Access, x: _Access, loop: For, outer: Mapping[Var, Range]) -> bool:
    """Whether no two different iterations of ``loop`` run ``w`` and ``x`` on one element.

    The loop variable is written with digits (one when it is used only linearly); each
    dimension, and the flattened offset, may force a digit to be equal on both sides (see
    ``_apart``; digits forced already cancel out). Proven when every digit is forced.
    """
    v = loop.loop_var
    v2 = Var(v.name + "_other", v.dtype)
    own = [var for var, _ in x.ranges] + list(x.opaque)
    ren: dict[Var, Var] = {var: Var(var.name + "_other", var.dtype) for var in own}
    ren[v] = v2
    xi = [substitute(e, ren) for e in x.indices]
    x_ranges = [(ren[var], Range(substitute(r.min, ren), substitute(r.extent, ren))) for var, r in x.ranges]
    divs = _divisors(v, [*w.indices, *(e for _, r in w.ranges for e in (r.min, r.extent))])
    divs |= _divisors(v2, [*xi, *(e for _, r in x_ranges for e in (r.min, r.extent))])
    places = [1, *sorted(divs)]
    if any(b % a for a, b in zip(places, places[1:])):
        return False  # not digits of one another: no decomposition
    d0, d1 = _digit_ranges(loop, places, ""), _digit_ranges(loop, places, "_other")
    m0 = _Digits(v, places, [d for d, _ in d0])
    m1 = _Digits(v2, places, [d for d, _ in d1])
    ranges = {**outer, **dict(d0), **dict(d1)}
    ranges.update((var, m0.range(r)) for var, r in w.ranges)
    ranges.update((var, m1.range(r)) for var, r in x_ranges)
    wi = [m0.expr(e) for e in w.indices]
    xi = [m1.expr(e) for e in xi]
    inner = {var for var, _ in (*w.ranges, *x_ranges, *d0, *d1)} | set(w.opaque) | set(ren.values())
    pairs: list[tuple[PrimExpr | None, PrimExpr | None]] = []
    if w.buffer.strides is None:  # in-bounds indices: equal elements have equal indices
        pairs += list(zip(wi, xi))
    pairs.append((_flat(w.buffer, tuple(wi)), _flat(w.buffer, tuple(xi))))
    ana = arith.Analyzer(ranges)
    pending = list(range(len(places)))[::-1]  # the most significant digit first
    unify: dict[Var, PrimExpr] = {}
    progress = True
    while pending and progress:
        progress = False
        for j in list(pending):
            a0, a1 = d0[j][0], d1[j][0]
            if any(a is not None and b is not None and _apart(ana, a, substitute(b, unify), a0, a1, inner)
                   for a, b in pairs):  # fmt: skip
                unify[a1] = a0
                pending.remove(j)
                progress = True
    return not pending


def _key(a: _Access) -> tuple[object, ...]:
    """Identical accesses (same indices over the same variables) are proven once."""
    rng = tuple((id(v), arith.structural_key(r.min), arith.structural_key(r.extent)) for v, r in a.ranges)
    return (a.store, tuple(arith.structural_key(i) for i in a.indices), rng, a.opaque)


def _check_pairs(accesses: list[_Access], loop: For, outer: Mapping[Var, Range]) -> None:
    by_buffer: dict[Buffer, dict[tuple[object, ...], _Access]] = {}
    for a in accesses:
        by_buffer.setdefault(a.buffer, {}).setdefault(_key(a), a)  # one of identical accesses
    pairs = sum(sum(a.store for a in accs.values()) * len(accs) for accs in by_buffer.values())
    if pairs > _MAX_PAIRS:
        raise _Refused(f"{pairs} store/access pairs are too many to prove")
    for buf, accs in by_buffer.items():
        for w in (a for a in accs.values() if a.store):
            for x in accs.values():
                if not _separated(w, x, loop, outer):
                    what = "stores" if x.store else "loads"
                    raise _Refused(
                        f"two iterations may touch one element of {buf.name}: one stores "
                        f"{buf.name}[{', '.join(map(str, w.indices))}], another {what} "
                        f"{buf.name}[{', '.join(map(str, x.indices))}]"
                    )


def concurrency_problem(loop: For, outer: Mapping[Var, Range], simd: bool = False) -> str | None:
    """Why ``loop``'s iterations may not run concurrently, or None when they may.

    Parameters
    ----------
    loop
        A loop the executor would run with ``#pragma omp parallel for`` (or ``simd``).
    outer
        Ranges of the variables bound around it (enclosing loops, block iter vars).
    simd
        Also refuse bodies that could record an error (see the module docstring).
    """
    if isinstance(loop.extent, IntImm) and loop.extent.value <= 1:
        return "it has a single iteration"
    col = _Collector(simd)
    try:
        col.stmt(loop.body)
        _check_pairs(col.accesses, loop, outer)
    except _Refused as exc:
        return str(exc)
    return None
