"""CompactBufferAllocation: shrink allocated buffers to the region used, and move them.

For every ``Allocate`` of a ``shared``, ``local``, ``warp`` or ``global`` buffer (the cache
buffers and intermediates of a schedule, allocated at the root with the full tensor shape;
parameters are never touched), as TVM's CompactBufferAllocation does:

1. The lowest common ancestor (LCA) loop of all its accesses is found.
2. The accessed region is computed per dimension, relaxing (following docs/semantics "Regions
   under compute_at depend on the storage scope") the loops inside the LCA, and for ``shared``
   buffers also every ``threadIdx.*``/``vthread.*`` loop, since all threads of a block share the
   buffer; a ``global`` buffer every thread-bound loop (its LCA is cut above the kernel: the
   whole grid shares it); a ``warp`` buffer its ``threadIdx.x`` loops (its LCA is cut above
   them: the lanes of a warp share it); a ``local`` buffer relaxes nothing else: it is per
   (virtual) thread. The region is derived exactly by enumeration when the relaxed loops are small and constant (enclosing
   guards that only involve those loops narrow it, so a cooperative fetch whose fused loop
   overshoots the tile does not inflate the buffer), else by the arith analyzer's ``int_set``
   (guards ignored: an over-approximation, which is always safe).
3. The buffer gets the region's extents as its shape (a constant upper bound when the extent is
   symbolic), indices are rewritten relative to the region's minimum, and the ``Allocate`` moves
   to the LCA -- for ``shared`` buffers above the outermost enclosing thread loop, where CUDA
   shared memory lives; a ``global`` buffer of a function with kernels stays at the root (the
   host allocates device memory once). A tiled CPU matmul's ``C_global`` written back under
   its tile loop thus becomes one ``[8, 16]`` tile instead of ``[64, 48]``, as in TVM.

Narrowing to one iteration of a loop (allocating inside it, or a region that moves with it)
is only right when no value of the buffer flows from one iteration to a later one: a running
sum, or a value kept for the next iteration, would be lost. The LCA is therefore cut above the
outermost such loop, searched among the loops the allocation goes inside or its region's
minimum uses (thread-bound loops excepted: their iterations are independent by contract);
:mod:`loopir.passes.compact_carry` proves, conservatively, that a loop carries nothing (a
reduction's accumulator under ``if k == 0`` still goes inside the spatial loops, not inside
``k``).

A dimension whose region is not smaller than the buffer keeps its original extent and indices.
A buffer that is never accessed loses its allocation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import attrs

from loopir.arith import vectorized as _enum
from loopir.errors import PassError
from loopir.ir import dtype as dt
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, IntImm, PrimExpr, Ramp
from loopir.ir.functor import Mutator, collect_vars, substitute
from loopir.ir.stmt import Allocate, BufferStore, For, ForKind, PrimFunc, Stmt
from loopir.passes import storage_align
from loopir.passes._walk import (
    Access,
    collect_accesses,
    index_bounds_exprs,
    int_of,
    is_thread_loop,
    loop_range,
    outside_footprints,
)
from loopir.passes.base import Pass, require_lowered
from loopir.passes.compact_carry import CarryProver, PathAccess, collect_paths
from loopir.passes.context import PassContext, register_config

if TYPE_CHECKING:
    from loopir.arith import Analyzer

__all__ = ["CompactBufferAllocation"]

logger = logging.getLogger(__name__)


#: The most a block can opt in to on any device (sm_90, H100/H200): 227 KB.
SM90_MAX_SHARED = 227 * 1024
#: The default limit: what some device allows. Lowering does not know the target; the CUDA
#: build checks each kernel against its architecture's own limit (163 KB on sm_80, ...) and
#: the launch against the device's (``loopir.codegen_cuda.shared_memory``). Beyond 48 KB the
#: emitter puts buffers in dynamic shared memory.
DEFAULT_MAX_SHARED = SM90_MAX_SHARED

register_config(
    "cuda.max_shared_memory_per_block",
    int,
    DEFAULT_MAX_SHARED,
    "bytes of shared memory one kernel's block may allocate, checked by "
    "CompactBufferAllocation after compaction (default and maximum 227 KB, the sm_90 opt-in; "
    "the CUDA build also checks the target architecture's own limit)",
)

#: Largest constant extent used for a compacted dimension of symbolic size; larger bounds of a
#: symbolic extent are artifacts of the index dtype (no shared/local tile is this big).
_MAX_SYMBOLIC_TILE = 1 << 16


def _analyzer(loops: Sequence[For]) -> Analyzer:
    from loopir.arith import Analyzer

    ana = Analyzer()
    for f in loops:
        ana.bind(f.loop_var, loop_range(f))
    return ana


def _const(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) else None


def _enum_interval(
    e: PrimExpr, relax: Sequence[For], conds: Sequence[PrimExpr], ana: Analyzer
) -> tuple[PrimExpr, int, int] | None | Literal[False]:
    """``(h, lo, hi)`` with ``e`` in ``[h + lo, h + hi]``; None: never executed; False: failed."""
    rvars = {f.loop_var for f in relax}
    ranges = []
    for f in relax:
        lo, ext = _const(f.min), _const(f.extent)
        if lo is None or ext is None:
            return False
        ranges.append((f.loop_var, lo, ext))
    h = ana.simplify(substitute(e, {f.loop_var: f.min for f in relax}))
    g = ana.simplify(e - h)
    if not set(collect_vars(g)) <= rvars:
        return False
    usable = [c for c in conds if set(collect_vars(c)) <= rvars]
    try:
        got = _enum.hull(g, ranges, usable)
    except _enum.NotEnumerable:
        return False
    if got is None:
        return None
    return h, got[0], got[1]


# An index's hull (lo, hi), then (h, lo - h, hi - h) when _enum_interval found them (else Nones)
_Interval = tuple[PrimExpr, PrimExpr, PrimExpr | None, int | None, int | None]


@attrs.define
class _Plan:
    old: Allocate
    new_buffer: Buffer
    mins: tuple[PrimExpr | None, ...]  # None: dimension kept as is
    wrap_body_of: For | None  # allocate around this loop's body ...
    wrap_loop: For | None  # ... or around this loop itself (shared over thread loops)
    used: bool = True


def _plan(alloc: Allocate, accesses: list[Access], paths: Mapping[Buffer, Sequence[PathAccess]],
          keep_global_at_root: bool = False) -> _Plan | None:  # fmt: skip
    buf = alloc.buffer
    mine = [a for a in accesses if a.buffer is buf]
    if not mine:
        return _Plan(alloc, buf, (), None, None, used=False)
    # LCA: the longest common prefix of the enclosing loop chains.
    prefix: list[For] = list(mine[0].loops)
    for a in mine[1:]:
        n = 0
        while n < len(prefix) and n < len(a.loops) and prefix[n] is a.loops[n]:
            n += 1
        del prefix[n:]
    prefix = outside_footprints(prefix)
    glob = buf.scope == "global"
    if glob:
        # Global memory is shared by the whole grid: every thread-bound loop is relaxed, so
        # the region is taken per iteration of the host loops above the kernel only.
        cut = next((n for n, f in enumerate(prefix) if f.kind is ForKind.THREAD_BINDING), len(prefix))
        del prefix[cut:]
    if buf.scope == "warp":
        # A warp's lanes share the buffer: the threadIdx.x loops are relaxed (the region is
        # per warp, its lane dimension whole) and the allocation goes above them.
        cut = next((n for n, f in enumerate(prefix) if is_thread_loop(f, ("threadIdx.x",))), len(prefix))
        del prefix[cut:]
    shared = buf.scope == "shared"
    at_root = glob and keep_global_at_root
    prover = CarryProver(paths.get(buf, ()), buf.scope)
    while True:
        # The buffer is narrowed to one iteration of the loops it is allocated in and of those
        # its region moves with: none of them may carry its value to a later iteration.
        mins, shape = _region(buf, mine, prefix, shared)
        moving = {v for m in mins if m is not None for v in collect_vars(m)}
        inside = _placed_inside(prefix, shared, at_root)
        narrowed = [q for q, f in enumerate(prefix) if q < inside or f.loop_var in moving]
        p = _outermost_carrying(prefix, narrowed, prover)
        if p == len(prefix):
            break
        del prefix[p:]
    new_buf = attrs.evolve(buf, shape=tuple(shape), strides=None)
    if all(m is None for m in mins) and buf.strides is None:
        new_buf = buf
    wrap_loop = None
    if shared:
        for f in prefix:
            if is_thread_loop(f):
                wrap_loop = f
                break
    wrap_body = None if wrap_loop is not None else (prefix[-1] if prefix else None)
    if at_root:
        # A device buffer is allocated once by the host, not inside a host loop around kernel
        # launches; the smaller shape alone is still right, each host iteration reusing it.
        wrap_body = None
    return _Plan(alloc, new_buf, tuple(mins), wrap_body, wrap_loop)


def _region(buf: Buffer, mine: Sequence[Access], prefix: Sequence[For],
            shared: bool) -> tuple[list[PrimExpr | None], list[PrimExpr]]:  # fmt: skip
    """Per dimension, the minimum of the region accessed in one iteration of ``prefix`` (None:
    the dimension is kept whole) and the compacted extent."""
    ana = _analyzer(prefix)
    mins: list[PrimExpr | None] = []
    shape: list[PrimExpr] = []
    for d, full in enumerate(buf.shape):
        intervals: list[_Interval] = []
        for a in mine:
            relax = [f for i, f in enumerate(a.loops) if i >= len(prefix) or (shared and is_thread_loop(f))]
            inner_ana = _analyzer(a.loops)
            for e in index_bounds_exprs(a.indices[d]):
                got = _enum_interval(e, relax, a.conds, inner_ana)
                if got is None:
                    continue
                if got is False:
                    s = inner_ana.int_set(e, {f.loop_var: loop_range(f) for f in relax})
                    intervals.append((s.min, s.max, None, None, None))
                else:
                    h, lo, hi = got
                    intervals.append((h + lo, h + hi, h, lo, hi))
        if not intervals:
            mins.append(None)
            shape.append(full)
            continue
        lo_e, hi_e = _union(intervals, ana)
        extent = ana.simplify(hi_e - lo_e + 1)
        ext_c = _const(extent)
        if ext_c is None:
            bound = ana.const_int_bound(extent).max_value
            from loopir.arith.bound import POS_INF

            ext_c = None if bound >= POS_INF else int(bound)
        full_c = _const(full)
        if full_c is None and ext_c is not None and ext_c > _MAX_SYMBOLIC_TILE:
            # A symbolic dimension whose region's only constant bound is huge: the bound comes
            # from the index dtype's range (e.g. ``n - 3 <= 2**31 - 4``), not from the loop
            # structure, so the region is (nearly) the whole dimension, not a tile.
            ext_c = None
        if ext_c is None or (full_c is not None and ext_c >= full_c) or ext_c <= 0:
            mins.append(None)
            shape.append(full)
            continue
        mins.append(lo_e)
        shape.append(IntImm(ext_c, full.dtype))
    return mins, shape


def _placed_inside(prefix: Sequence[For], shared: bool, at_root: bool) -> int:
    """How many loops of ``prefix`` the allocation goes inside: a shared buffer's goes around
    the outermost thread loop, a device buffer's stays at the root."""
    if at_root:
        return 0
    if shared:
        return next((n for n, f in enumerate(prefix) if is_thread_loop(f)), len(prefix))
    return len(prefix)


def _outermost_carrying(prefix: Sequence[For], narrowed: Sequence[int], prover: CarryProver) -> int:
    """Index in ``prefix`` of the outermost loop of ``narrowed`` that may carry the buffer's
    value across its iterations (:mod:`loopir.passes.compact_carry`), or its length.

    Searched from the inside out: a loop whose iterations each write what they read contains
    every iteration of the loops inside it, so once one is proven none outside it carries.
    Thread-bound loops are not asked (their iterations are independent by the IR's contract).
    """
    out = len(prefix)
    for q in sorted(narrowed, reverse=True):
        f = prefix[q]
        if f.kind is ForKind.THREAD_BINDING:
            continue
        if not prover.carries(f):
            break
        out = q
    return out


def _aligned(plan: _Plan, aligns: storage_align.Aligns) -> _Plan:
    """The plan with the buffer's strides padded as its storage_align requirement says."""
    strides = storage_align.aligned_strides(plan.new_buffer.shape, aligns)
    return attrs.evolve(plan, new_buffer=attrs.evolve(plan.new_buffer, strides=strides))


def _union(intervals: Sequence[_Interval], ana: Analyzer) -> tuple[PrimExpr, PrimExpr]:
    """Hull of intervals; exact integer hull when all share one symbolic base."""
    h0 = intervals[0][2]
    if h0 is not None:
        los: list[int] = []
        his: list[int] = []
        for _lo_e, _hi_e, h, lo, hi in intervals:
            if h is None or lo is None or hi is None:  # (all None or none: see _plan)
                break
            off = _const(ana.simplify(h - h0))
            if off is None:
                break
            los.append(off + lo)
            his.append(off + hi)
        else:
            return ana.simplify(h0 + min(los)), ana.simplify(h0 + max(his))
    lo_e = intervals[0][0]
    hi_e = intervals[0][1]
    for lo_i, hi_i, *_ in intervals[1:]:
        lo_e = op.min_(lo_e, lo_i)
        hi_e = op.max_(hi_e, hi_i)
    return ana.simplify(lo_e), ana.simplify(hi_e)


class _Rewrite(Mutator):
    def __init__(self, plans: list[_Plan]) -> None:
        from loopir.arith import Analyzer

        self.ana = Analyzer()
        self.by_old = {p.old.buffer: p for p in plans}
        self.drop = {p.old for p in plans}
        self.body_of: dict[For, list[_Plan]] = {}
        self.around: dict[For, list[_Plan]] = {}
        self.root: list[_Plan] = []
        for p in plans:
            if p.wrap_loop is not None:
                self.around.setdefault(p.wrap_loop, []).append(p)
            elif p.wrap_body_of is not None:
                self.body_of.setdefault(p.wrap_body_of, []).append(p)
            else:
                self.root.append(p)

    def _indices(self, buf: Buffer, idx: tuple[PrimExpr, ...]) -> tuple[Buffer, tuple[PrimExpr, ...]]:
        p = self.by_old.get(buf)
        if p is None:
            return buf, idx
        out = []
        for i, m in zip(idx, p.mins):
            if m is None:
                out.append(i)
            elif isinstance(i, Ramp):
                out.append(Ramp(self.ana.simplify(i.base - m), i.stride, i.lanes))
            else:
                out.append(self.ana.simplify(i - m))
        return p.new_buffer, tuple(out)

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        node = self.generic_visit(node)
        buf, idx = self._indices(node.buffer, node.indices)
        return node if buf is node.buffer and idx is node.indices else BufferLoad(buf, idx)

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        node = self.generic_visit(node)
        buf, idx = self._indices(node.buffer, node.indices)
        if buf is node.buffer and idx is node.indices:
            return node
        return BufferStore(buf, node.value, idx)

    def visit_Allocate(self, node: Allocate) -> Stmt:
        body: Stmt = self.visit(node.body)
        if node in self.drop:
            return body
        return body if body is node.body else attrs.evolve(node, body=body)

    def visit_For(self, node: For) -> Stmt:
        loop: For = self.generic_visit(node)  # rebuilt (when changed) as a For
        inner = self.body_of.get(node)
        if inner:
            body = loop.body
            for p in reversed(inner):
                body = Allocate(p.new_buffer, body)
            loop = attrs.evolve(loop, body=body)
        out: Stmt = loop
        for p in reversed(self.around.get(node, [])):
            out = Allocate(p.new_buffer, out)
        return out

    def wrap_root(self, body: Stmt) -> Stmt:
        for p in reversed(self.root):
            if _used(p):
                body = Allocate(p.new_buffer, body)
        return body


def _used(p: _Plan) -> bool:
    return p.used


class CompactBufferAllocation(Pass):
    """Compact shared/local allocations to their used region and move them (see module doc)."""

    name = "CompactBufferAllocation"

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        require_lowered(func, self.name)
        accesses, allocs = collect_accesses(func.body)
        paths = collect_paths(func.body)
        has_kernel = any(f.kind is ForKind.THREAD_BINDING for a in accesses for f in a.loops)
        plans = []
        aligns = storage_align.aligns_of(func)
        for alloc, _loops in allocs:
            if alloc.buffer.scope not in ("shared", "local", "global", "warp"):
                continue
            if alloc.buffer.scope == "global" and not any(a.buffer is alloc.buffer for a in accesses):
                continue  # an unused device buffer keeps its allocation (as before; harmless)
            plan = _plan(alloc, accesses, paths, keep_global_at_root=has_kernel)
            if plan is not None and alloc.buffer.name in aligns:
                plan = _aligned(plan, aligns[alloc.buffer.name])
            if plan is not None:
                plans.append(plan)
                logger.debug(
                    "CompactBufferAllocation: %s %s -> %s", alloc.buffer.name,
                    tuple(str(s) for s in alloc.buffer.shape),
                    tuple(str(s) for s in plan.new_buffer.shape),
                )
        if not plans:
            return func
        _check_shared_memory(plans, accesses, ctx)
        rw = _Rewrite(plans)
        body = rw.visit(func.body)
        return func.with_body(rw.wrap_root(body))


def _check_shared_memory(plans: Sequence[_Plan], accesses: Sequence[Access], ctx: PassContext) -> None:
    """Refuse a kernel whose compacted shared buffers exceed the configured per-block limit.

    A kernel is the subtree of an outermost thread-bound loop; a shared buffer counts for every
    kernel that accesses it. Buffers with a symbolic compacted size are left out (the bound is
    unknown here, nvcc sees the constant one). Checked here because only after compaction is the
    real footprint known: the schedule allocates cache buffers with the full tensor shape.
    """
    key = "cuda.max_shared_memory_per_block"
    limit = ctx.get(key)
    if limit <= 0 or limit > SM90_MAX_SHARED:
        raise PassError(
            f"CompactBufferAllocation: {key} is {limit}; it must be between 1 and "
            f"{SM90_MAX_SHARED} (227 KB, the sm_90 opt-in maximum)"
        )
    sizes: dict[Buffer, int] = {}
    for p in plans:
        b = p.new_buffer
        if p.used and b.scope == "shared" and all(isinstance(e, IntImm) for e in b.shape):
            strides = None if b.strides is None else [int_of(st) for st in b.strides]
            elems = storage_align.allocation_size([int_of(e) for e in b.shape], strides)
            sizes[p.old.buffer] = elems * dt.lanes(b.dtype) * dt.bits(b.dtype) // 8
    per_kernel: dict[int, tuple[For, dict[str, int]]] = {}
    for a in accesses:
        if a.buffer not in sizes:
            continue
        kernel = next((f for f in a.loops if f.kind is ForKind.THREAD_BINDING), None)
        if kernel is not None:
            used = per_kernel.setdefault(id(kernel), (kernel, {}))[1]
            used[a.buffer.name] = sizes[a.buffer]
    for kernel, used in per_kernel.values():
        total = sum(used.values())
        if total > limit:
            listing = ", ".join(f"{n} ({b} B)" for n, b in sorted(used.items()))
            raise PassError(
                f"CompactBufferAllocation: the kernel under loop {kernel.loop_var.name} "
                f"({kernel.thread_tag}) needs {total} bytes of shared memory per block after "
                f"compaction ({listing}), over the {limit}-byte limit {key}={limit} (CUDA: "
                f"at most {SM90_MAX_SHARED} bytes on sm_90, 163 KB on sm_80; more than 48 KB "
                "is dynamic shared memory); use smaller tiles or fewer shared caches"
            )
