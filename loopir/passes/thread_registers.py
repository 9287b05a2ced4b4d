"""PrivatizeThreadLocals: a ``local`` buffer with one slot per thread becomes each thread's own
registers (CUDA; the register form of a row kept across a thread block's passes).

A ``local`` buffer allocated above the thread loops of a kernel, whose every access indexes
one axis by the variable of the enclosing ``threadIdx.x`` loop (starting at 0, of the axis's
extent), holds in slot ``t`` what thread ``t`` wrote: in the sequential meaning of the IR,
sibling ``threadIdx.x`` loops (a row read in one, reduced in the next, normalized in a third)
each see their own thread's slot. On the GPU each thread has its own copy of a local buffer, so
the axis is dropped: ``X_local[0, jo, tx, v]`` becomes ``X_local[0, jo, v]`` in every thread
loop, and the buffer is recorded in the function attribute ``loopir.thread_registers`` so that
the kernel splitter accepts it under several thread loops (it refuses any other local buffer
shared by them). The same holds axis by axis for ``threadIdx.y`` and ``.z``: a buffer every
access of which lies under loops of the same thread tags, each tag's loop variable indexing one
axis (a warp per row, the rows on ``threadIdx.y``: ``X_local[ty, jo, tx, v]``), loses all those
axes. A buffer with an access whose index on such an axis is anything else, that is accessed
outside the thread loops, or under a virtual thread, is left as it is.

Before / after::

    X_local = T.allocate((1, 2, 128, 8), "float16", "local")      X_local = T.allocate((1, 2, 8), ...)
    for tx in T.thread_binding(128, "threadIdx.x"):                for tx in T.thread_binding(128, ...):
        X_local[0, jo, tx, v] = X[i, jo * 1024 + tx * 8 + v]           X_local[0, jo, v] = X[...]
    for tx_1 in T.thread_binding(128, "threadIdx.x"):              for tx_1 in T.thread_binding(128, ...):
        ... X_local[0, jo, tx_1, v] ...                                ... X_local[0, jo, v] ...

Run late for the CUDA target (after the race-relevant passes, which see the slots), like
[`LowerWarpMemory`][loopir.passes.lower_warp_memory.LowerWarpMemory]; the CPU executor runs the
IR before it.
"""

from __future__ import annotations

import attrs

from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, IntImm, PrimExpr, Var
from loopir.ir.functor import Mutator
from loopir.ir.stmt import Allocate, BufferStore, For, PrimFunc, Stmt
from loopir.passes._walk import collect_accesses, is_thread_loop
from loopir.passes.base import Pass, require_lowered
from loopir.passes.context import PassContext

__all__ = ["THREAD_REGISTERS_ATTR", "PrivatizeThreadLocals", "thread_axes"]

#: Function attribute: the names of the local buffers whose per-thread axis this pass dropped.
THREAD_REGISTERS_ATTR = "loopir.thread_registers"


def _accesses(body: Stmt) -> dict[Buffer, list[tuple[tuple[PrimExpr, ...], dict[str, For] | None]]]:
    """Every access's indices to each local buffer, with its ``threadIdx`` loops between the
    buffer's allocation and the access by tag (None, which disqualifies the buffer, when a
    virtual thread lies there or two loops share a tag: threads of such a loop would share the
    slot in the IR but not on the GPU)."""
    accesses, allocs = collect_accesses(body)
    above = {a.buffer: set(map(id, loops)) for a, loops in allocs}
    seen: dict[Buffer, list[tuple[tuple[PrimExpr, ...], dict[str, For] | None]]] = {}
    for acc in accesses:
        if acc.buffer.scope != "local":
            continue
        outer = above.get(acc.buffer, set())
        inner = [f for f in acc.loops if id(f) not in outer and is_thread_loop(f, ("threadIdx.", "vthread."))]
        tags = {f.thread_tag: f for f in inner if f.thread_tag is not None and f.thread_tag.startswith("threadIdx.")}
        ok = bool(inner) and len(tags) == len(inner)
        seen.setdefault(acc.buffer, []).append((acc.indices, tags if ok else None))
    return seen


def thread_axes(buf: Buffer, accesses: list[tuple[tuple[PrimExpr, ...], dict[str, For] | None]]) -> tuple[int, ...] | None:
    """The axes of ``buf``, one per ``threadIdx`` tag, that every access indexes by its enclosing
    loop of that tag's variable (each loop starting at 0 with the axis's constant extent, every
    access under loops of the same tags), in increasing order, or None."""
    if buf.strides is not None or len(accesses) < 2 or any(loops is None for _, loops in accesses):
        return None
    tags = {frozenset(loops or ()) for _, loops in accesses}
    if len(tags) != 1:
        return None
    axes = []
    for tag in sorted(tags.pop()):
        d = next((d for d, extent in enumerate(buf.shape) if d not in axes and isinstance(extent, IntImm) and all(
            _indexed_by(idx[d], (loops or {})[tag], extent.value) for idx, loops in accesses)), None)  # fmt: skip
        if d is None:
            return None
        axes.append(d)
    return tuple(sorted(axes))


def _indexed_by(index: PrimExpr, loop: For, extent: int) -> bool:
    return (isinstance(index, Var) and index is loop.loop_var and isinstance(loop.min, IntImm)
            and loop.min.value == 0 and isinstance(loop.extent, IntImm) and loop.extent.value == extent)  # fmt: skip


class _Drop(Mutator):
    def __init__(self, axes: dict[Buffer, tuple[tuple[int, ...], Buffer]]) -> None:
        self.axes = axes

    def _indices(self, buf: Buffer, indices: tuple[PrimExpr, ...]) -> tuple[Buffer, tuple[PrimExpr, ...]]:
        drop, new = self.axes[buf]
        return new, tuple(self.visit(i) for k, i in enumerate(indices) if k not in drop)

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        if node.buffer not in self.axes:
            out: PrimExpr = self.generic_visit(node)
            return out
        return BufferLoad(*self._indices(node.buffer, node.indices))

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        if node.buffer not in self.axes:
            out: Stmt = self.generic_visit(node)
            return out
        buf, idx = self._indices(node.buffer, node.indices)
        return BufferStore(buf, self.visit(node.value), idx)

    def visit_Allocate(self, node: Allocate) -> Stmt:
        body = self.visit(node.body)
        buf = self.axes[node.buffer][1] if node.buffer in self.axes else node.buffer
        if buf is node.buffer and body is node.body:
            return node
        return Allocate(buf, body)


def privatize_thread_locals(func: PrimFunc) -> PrimFunc:
    """``func`` with the per-thread axis of every qualifying local buffer dropped (see the
    module docstring); ``func`` itself when none qualifies."""
    axes: dict[Buffer, tuple[tuple[int, ...], Buffer]] = {}
    for buf, accesses in _accesses(func.body).items():
        drop = thread_axes(buf, accesses)
        if drop is not None:
            shape = tuple(e for k, e in enumerate(buf.shape) if k not in drop)
            axes[buf] = (drop, attrs.evolve(buf, shape=shape))
    if not axes:
        return func
    out = func.with_body(_Drop(axes).visit(func.body))
    names = tuple(sorted({*func.attrs.get(THREAD_REGISTERS_ATTR, ()), *(b.name for b in axes)}))
    return attrs.evolve(out, attrs=out.attrs.set(THREAD_REGISTERS_ATTR, names))


class PrivatizeThreadLocals(Pass):
    """Per-thread slots of local buffers -> each thread's registers (see the module docstring)."""

    name = "PrivatizeThreadLocals"

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        require_lowered(func, self.name)
        return privatize_thread_locals(func)
