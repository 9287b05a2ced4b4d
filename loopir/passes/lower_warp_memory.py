"""LowerWarpMemory: warp buffers become each thread's registers (CUDA; TVM's pass of the name).

A ``warp`` buffer ``W[..., 32, L]`` is one array per warp whose lane dimension is indexed by the
lane (see [`loopir.tensor_intrin.calls`][loopir.tensor_intrin.calls]): lane ``l``'s row
``W[..., l, :]`` is what lane ``l`` holds in registers. This pass makes that explicit for the CUDA backend:

* every access ``W[..., lane, v]`` -- loads, stores and the fragment operands of tensor-core
  calls -- becomes ``W_local[..., v]`` of a ``local`` buffer ``[..., L]``, after checking that
  ``lane`` *is* the hardware lane of the thread making the access: the variable of an enclosing
  ``threadIdx.x`` loop starting at 0 (of extent at most 32), or that variable ``% 32``, in a
  kernel whose ``threadIdx.x`` extent is a constant multiple of 32 (so that CUDA's warps,
  consecutive runs of 32 linear thread indices, are rows of ``threadIdx.x``), or an expression
  equal to that variable wherever the access runs (checked at every lane and every iteration of
  the constant loops inside the ``threadIdx.x`` loop, under the guards on them: a fragment
  element stored under a guard that pins part of the lane, as ``schedule``'s ``direct`` store
  of a C of one column, whose block variable became 0). Anything else --
  a lane index that moves data between lanes (TVM turns some of those into shuffles), a
  block of 48 threads -- is refused with [`PassError`][loopir.errors.PassError];
* a warp buffer holding the fragments of every warp of the block, indexed on one axis by the
  warp's ``threadIdx.y`` in every access ([`warp_axes`][loopir.passes.lower_warp_memory.warp_axes]),
  keeps only the thread's own warp's slot: ``W[w, .., lane, v]`` becomes ``W_local[.., v]``;
* ``mma_fill`` and ``mma_store``, which act on one lane's row, become the unrolled loops they
  stand for ([`per_lane_stmt`][loopir.tensor_intrin.calls.per_lane_stmt]), their lane
  explicit;
* the warp-collective ``ptx_ldmatrix`` and ``ptx_mma`` stay calls, on the registers; they must
  be reached by whole warps: not under a ``threadIdx.x`` loop whose extent is not a multiple
  of 32, nor under a condition on ``threadIdx.x``;
* a warp buffer allocated outside the kernels (the root allocation of a function lowered
  without compaction) is allocated at the top of the one kernel that uses it: registers do
  not outlive a kernel, so a warp buffer used by two kernels is refused.

Run last for the CUDA target (``loopir.lower(func, target="cuda")``, and the CUDA backend on
hand-written lowered IR), after ThreadSync and the race-relevant passes, which see the warp
buffers: the CPU executor runs IR before this pass (a warp buffer is an ordinary array there).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from loopir import arith
from loopir.arith.vectorized import NotEnumerable, evaluate
from loopir.errors import PassError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import LT, BufferLoad, Call, FloorMod, IntImm, PrimExpr, Var
from loopir.ir.functor import Mutator, collect_vars, post_order_visit
from loopir.ir.stmt import Allocate, BufferStore, Evaluate, For, ForKind, IfThenElse, PrimFunc, Stmt
from loopir.passes._walk import conjuncts
from loopir.passes.base import Pass, require_lowered
from loopir.passes.context import PassContext
from loopir.passes.simplify import simplify_stmt
from loopir.tensor_intrin.calls import per_lane_stmt
from loopir.tensor_intrin.layouts import WARP_SIZE

__all__ = ["LowerWarpMemory", "WARP_REGISTERS_ATTR", "warp_axes"]

#: Function attribute: the names of the ``local`` buffers this pass made of warp buffers (each
#: thread's registers hold its lane's row, whichever sibling threadIdx loop accesses them).
WARP_REGISTERS_ATTR = "loopir.warp_registers"


def _fail(msg: str) -> PassError:
    return PassError(f"pass LowerWarpMemory: {msg}")


def _is_kernel_root(s: Stmt) -> bool:
    return isinstance(s, For) and s.kind is ForKind.THREAD_BINDING


def _uses(s: Stmt, buf: Buffer) -> bool:
    found = False

    def f(n: object) -> None:
        nonlocal found
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer is buf:
            found = True

    post_order_visit(s, f)
    return found


def _x_extent(kernel: For) -> int | None:
    """The kernel's ``threadIdx.x`` extent (the largest of its loops; None if symbolic)."""
    out = 1
    ok = True

    def f(n: object) -> None:
        nonlocal out, ok
        if isinstance(n, For) and n.kind is ForKind.THREAD_BINDING and n.thread_tag == "threadIdx.x":
            if isinstance(n.extent, IntImm):
                out = max(out, n.extent.value)
            else:
                ok = False

    post_order_visit(kernel, f)
    return out if ok else None


def _local_of(buf: Buffer, warp_axis: int | None = None) -> Buffer:
    shape = buf.shape
    lanes = shape[-2] if len(shape) >= 2 else None
    if not (isinstance(lanes, IntImm) and lanes.value == WARP_SIZE) or buf.strides is not None:
        raise _fail(
            f"warp buffer {buf.name} must be compact with the lane (extent {WARP_SIZE}) as its "
            f"second-to-last dimension, got shape ({', '.join(str(x) for x in shape)})"
        )
    outer = tuple(e for k, e in enumerate(shape[:-2]) if k != warp_axis)
    return Buffer(buf.name, (*outer, shape[-1]), buf.dtype, scope="local")


def warp_axes(body: Stmt) -> dict[Buffer, int]:
    """For each warp buffer that every access indexes, on one axis before the lane's, by the
    variable of its enclosing ``threadIdx.y`` loop (starting at 0, of that axis's extent): the
    axis. The warp of ``threadIdx.y = w`` then touches only slot ``w``, so each thread keeps
    just its own warp's slot: the axis is dropped with the lane's (a buffer of the fragments of
    every warp, as a block over the fragments of all warps makes, stays in registers instead of
    an array indexed by ``threadIdx.y``)."""
    from loopir.passes._walk import collect_accesses

    accesses, _ = collect_accesses(body)
    by_buf: dict[Buffer, list[tuple[tuple[PrimExpr, ...], tuple[For, ...], tuple[PrimExpr, ...]]]] = {}
    for a in accesses:
        if a.buffer.scope == "warp":
            by_buf.setdefault(a.buffer, []).append((tuple(a.indices), tuple(a.loops), tuple(a.conds)))
    out: dict[Buffer, int] = {}
    for buf, accs in by_buf.items():
        for d in range(len(buf.shape) - 2):
            ext = buf.shape[d]
            if isinstance(ext, IntImm) and all(_is_warp_index(idx[d], loops, ext.value, conds) for idx, loops, conds in accs):
                out[buf] = d
                break
    return out


def _is_warp_index(index: PrimExpr, loops: Sequence[For], extent: int, conds: Sequence[PrimExpr] = ()) -> bool:
    """Whether ``index`` is the variable of an enclosing ``threadIdx.y`` loop from 0 over
    ``extent`` warps, or over more with the access guarded ``index < extent`` (the consumer
    warps of a warp-specialized kernel, the producer warpgroup's after them)."""
    loop = next((f for f in loops if isinstance(index, Var) and f.loop_var is index), None)
    if loop is None or loop.thread_tag != "threadIdx.y" or not (isinstance(loop.min, IntImm) and loop.min.value == 0) \
            or not isinstance(loop.extent, IntImm):  # fmt: skip
        return False
    if loop.extent.value == extent:
        return True
    return loop.extent.value > extent and any(
        isinstance(c, LT) and c.a is index and isinstance(c.b, IntImm) and c.b.value <= extent for c in conds)


class _Rewrite(Mutator):
    """Inside one kernel: warp accesses -> local ones, per-lane calls -> loops."""

    def __init__(self, kernel: For, locals_: dict[Buffer, Buffer], axes: dict[Buffer, int]) -> None:
        self.kernel = kernel
        self.locals = locals_
        self.axes = axes
        self.loops: list[For] = []
        self.conds: list[PrimExpr] = []  # enclosing if conditions (both branches)
        self.facts: list[PrimExpr] = []  # what holds where a statement runs (each branch's)
        self.x_extent = _x_extent(kernel)

    def visit_For(self, node: For) -> Stmt:
        self.loops.append(node)
        try:
            out: Stmt = self.generic_visit(node)
        finally:
            self.loops.pop()
        return out

    def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
        self.conds.append(node.condition)
        held = len(self.facts)
        try:
            self.facts += conjuncts(node.condition)
            then = self._stmt(node.then_case)
            del self.facts[held:]
            self.facts.append(op.not_(node.condition))
            other = None if node.else_case is None else self._stmt(node.else_case)
        finally:
            del self.facts[held:]
            self.conds.pop()
        if then is node.then_case and other is node.else_case:
            return node
        return IfThenElse(node.condition, then, other)

    def _stmt(self, s: Stmt) -> Stmt:
        out: Stmt = self.visit(s)
        return out

    def visit_Allocate(self, node: Allocate) -> Stmt:
        if node.buffer.scope == "warp" and node.buffer not in self.locals:
            self.locals[node.buffer] = _local_of(node.buffer, self.axes.get(node.buffer))
        new = self.locals.get(node.buffer)
        body = self.visit(node.body)
        if new is None and body is node.body:
            return node
        return Allocate(new or node.buffer, body)

    def visit_Evaluate(self, node: Evaluate) -> Stmt:
        call = node.value
        if isinstance(call, Call) and op.is_tensor_core_call(call):
            problem = op.tensor_core_problem(call)
            if problem is not None:
                raise _fail(problem)
            if call.op in ("mma_fill", "mma_store"):
                # simplified: the pipeline's Simplify ran before (the race prover and the
                # emitter's alignment proofs read these indices)
                loop = simplify_stmt(per_lane_stmt(call, kind=ForKind.UNROLLED))
                out: Stmt = self.visit(loop)
                return out
            self._check_whole_warps(call)
        out = self.generic_visit(node)
        return out

    def _check_whole_warps(self, call: Call) -> None:
        lanes = {f.loop_var for f in self.loops if f.thread_tag == "threadIdx.x"}
        split = next((c for c in self.conds if lanes & set(collect_vars(c))), None)
        if split is not None:
            raise _fail(
                f"{call.op} is warp-collective, but it is under the condition {split}, which "
                f"depends on threadIdx.x: the lanes of a warp could disagree:\n  {call}"
            )
        x = next((f for f in reversed(self.loops) if f.thread_tag == "threadIdx.x"), None)
        if x is None or not (isinstance(x.extent, IntImm) and x.extent.value % WARP_SIZE == 0):
            where = "outside any threadIdx.x loop" if x is None else (
                f"under loop {x.loop_var.name} bound to threadIdx.x with extent {x.extent}")
            raise _fail(
                f"{call.op} is warp-collective: all 32 lanes of a warp must execute it, but it is "
                f"{where} (a multiple of 32 is needed):\n  {call}"
            )

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        node = self.generic_visit(node)
        if node.buffer.scope != "warp":
            return node
        return BufferLoad(self._buffer(node.buffer), self._indices(node.buffer, node.indices))

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        node = self.generic_visit(node)
        if node.buffer.scope != "warp":
            return node
        return BufferStore(self._buffer(node.buffer), node.value, self._indices(node.buffer, node.indices))

    def _buffer(self, buf: Buffer) -> Buffer:
        new = self.locals.get(buf)
        if new is None:
            raise _fail(f"warp buffer {buf.name} is used where it is not allocated (a parameter?)")
        return new

    def _indices(self, buf: Buffer, idx: Sequence[PrimExpr]) -> tuple[PrimExpr, ...]:
        lane = idx[-2]
        why = self._not_the_lane(lane)
        if why is not None:
            raise _fail(
                f"the lane index {lane} of warp buffer {buf.name}[{', '.join(map(str, idx))}] "
                f"{why}; a warp buffer is indexed by the hardware lane of the accessing thread "
                "(threadIdx.x, or threadIdx.x % 32), so that each lane's row is its registers"
            )
        axis = self.axes.get(buf)
        return (*(i for k, i in enumerate(idx[:-2]) if k != axis), idx[-1])

    def _not_the_lane(self, lane: PrimExpr) -> str | None:
        lane = arith.simplify(lane)  # a bound operand's ``0 + tx``
        var, mod = lane, False
        if isinstance(lane, FloorMod) and isinstance(lane.b, IntImm) and lane.b.value == WARP_SIZE:
            var, mod = lane.a, True
        loop = next((f for f in self.loops if isinstance(var, Var) and f.loop_var is var), None)
        if loop is None or loop.thread_tag != "threadIdx.x":
            loop = self._lane_where_run(lane)
            if loop is None:
                return "is not the variable of an enclosing threadIdx.x loop"
        if not (isinstance(loop.min, IntImm) and loop.min.value == 0):
            return f"belongs to a threadIdx.x loop starting at {loop.min}, not 0"
        small = isinstance(loop.extent, IntImm) and loop.extent.value <= WARP_SIZE
        if not (mod or small):
            return f"ranges over {loop.extent} threads: take it modulo 32"
        if self.x_extent is None or self.x_extent % WARP_SIZE:
            return (
                f"cannot be the lane: the kernel's threadIdx.x extent "
                f"{'is symbolic' if self.x_extent is None else self.x_extent} is not a constant "
                "multiple of 32, so its warps span several threadIdx.x rows"
            )
        return None

    def _lane_where_run(self, lane: PrimExpr) -> For | None:
        """The innermost ``threadIdx.x`` loop (from 0, at most 32 lanes) when ``lane`` equals
        its variable wherever the access runs: at each lane and iteration of the constant loops
        inside it (at most ``_LANE_POINTS`` points) where the enclosing guards that name only
        those hold (the others left out: more points checked, not fewer); else None."""
        at = next((i for i in range(len(self.loops) - 1, -1, -1) if self.loops[i].thread_tag == "threadIdx.x"), None)
        if at is None:
            return None
        inner = self.loops[at:]
        bounds = [(_int_or_none(f.min), _int_or_none(f.extent)) for f in inner]
        if any(lo is None or n is None for lo, n in bounds) or bounds[0] != (0, bounds[0][1]) or \
                (bounds[0][1] or 0) > WARP_SIZE:  # fmt: skip
            return None
        size = 1
        for _, n in bounds:
            size *= n or 0
        known = {f.loop_var for f in inner}
        if not 0 < size <= _LANE_POINTS or not set(collect_vars(lane)) <= known:
            return None
        grids = np.meshgrid(*(np.arange(lo or 0, (lo or 0) + (n or 0), dtype=np.int64) for lo, n in bounds),
                            indexing="ij")  # fmt: skip
        env = {f.loop_var: g.ravel() for f, g in zip(inner, grids)}
        try:
            runs = np.ones(size, dtype=bool)
            for fact in self.facts:
                used = set(collect_vars(fact))
                if used and used <= known:
                    runs &= np.asarray(evaluate(fact, env, size)).astype(bool)
            same = np.asarray(evaluate(lane, env, size)) == env[inner[0].loop_var]
        except NotEnumerable:
            return None
        return inner[0] if bool(same[runs].all()) else None


#: The most points (lanes x iterations) at which ``_lane_where_run`` compares a lane index.
_LANE_POINTS = 1 << 14


def _int_or_none(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) else None


class _Kernels(Mutator):
    """Finds the kernels; moves warp allocations made outside them into their one kernel."""

    def __init__(self, axes: dict[Buffer, int]) -> None:
        self.axes = axes
        self.outside: list[Buffer] = []  # warp buffers allocated above the current statement
        self.lowered: set[str] = set()  # names of the local buffers made

    def visit_Allocate(self, node: Allocate) -> Stmt:
        if node.buffer.scope != "warp":
            out: Stmt = self.generic_visit(node)
            return out
        users = _kernels_using(node.body, node.buffer)
        if len(users) > 1:
            raise _fail(
                f"warp buffer {node.buffer.name} is used by {len(users)} kernels (loops "
                f"{', '.join(k.loop_var.name for k in users)}); its contents are registers, "
                "which do not outlive a kernel"
            )
        self.outside.append(node.buffer)
        try:
            out = self.visit(node.body)
        finally:
            self.outside.pop()
        return out

    def visit_For(self, node: For) -> Stmt:
        if not _is_kernel_root(node):
            out: Stmt = self.generic_visit(node)
            return out
        body: Stmt = node.body
        locals_: dict[Buffer, Buffer] = {}
        hoisted = [b for b in self.outside if _uses(node, b)]
        for b in hoisted:
            locals_[b] = _local_of(b, self.axes.get(b))
        new = _Rewrite(node, locals_, self.axes).visit(attrs.evolve(node, body=body))
        assert isinstance(new, For)
        self.lowered.update(b.name for b in locals_.values())
        for b in reversed(hoisted):
            new = attrs.evolve(new, body=Allocate(locals_[b], new.body))
        return new


def _kernels_using(s: Stmt, buf: Buffer) -> list[For]:
    out: list[For] = []

    def walk(n: Stmt) -> None:
        if _is_kernel_root(n):
            if _uses(n, buf):
                out.append(n)  # type: ignore[arg-type]
            return
        for child in _children(n):
            walk(child)

    walk(s)
    return out


def _children(s: Stmt) -> list[Stmt]:
    from loopir.ir.stmt import IfThenElse, SeqStmt

    if isinstance(s, SeqStmt):
        return list(s.seq)
    if isinstance(s, (For, Allocate)):
        return [s.body]
    if isinstance(s, IfThenElse):
        return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
    return []


class LowerWarpMemory(Pass):
    """Warp buffers -> per-thread registers for CUDA (see module doc)."""

    name = "LowerWarpMemory"

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        require_lowered(func, self.name)
        for b in func.params:
            if b.scope == "warp":
                raise _fail(f"parameter {b.name} is a warp buffer; a kernel argument lives in "
                            "global memory")  # fmt: skip
        if not _has_warp(func.body):
            return func
        kernels = _Kernels(warp_axes(func.body))
        out = func.with_body(kernels.visit(func.body))
        names = tuple(sorted({*func.attrs.get(WARP_REGISTERS_ATTR, ()), *kernels.lowered}))
        return attrs.evolve(out, attrs=out.attrs.set(WARP_REGISTERS_ATTR, names))


def _has_warp(s: Stmt) -> bool:
    found = False

    def f(n: object) -> None:
        nonlocal found
        if isinstance(n, (Allocate, BufferLoad, BufferStore)) and n.buffer.scope == "warp":
            found = True

    post_order_visit(s, f)
    return found
