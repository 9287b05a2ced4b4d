"""The combine step of a cross-thread reduction (see ``loopir.passes.cross_thread``).

Two forms. When the reduction runs over ``threadIdx.x`` alone, ``thread_allreduce`` combines
each row of ``threadIdx.x`` threads (warp shuffles on CUDA). Otherwise (over ``threadIdx.y`` or
``threadIdx.z``, several axes at once, or ``threadIdx.x`` rows that would share warps) the
threads combine through shared memory, in IR every backend runs: each thread stores its part
at its element of a buffer indexed by its thread indices (threadIdx.x's last, so that a
warp's threads touch consecutive words), then a tree halves the live parts per step, one
reduced axis after the other (threadIdx.x first; an axis reduced earlier keeps its parts at
index 0). Over 12 threads of threadIdx.y (``ty``), each threadIdx.x (``tx``) a column::

    S_red[ty, tx] = S_acc[0]
    if ty < 4: S_red[ty, tx] = S_red[ty, tx] + S_red[ty + 8, tx]   # 12 parts: ty + 8 < 12
    if ty < 4: S_red[ty, tx] = S_red[ty, tx] + S_red[ty + 4, tx]
    if ty < 2: S_red[ty, tx] = S_red[ty, tx] + S_red[ty + 2, tx]
    if ty < 1: S_red[ty, tx] = S_red[ty, tx] + S_red[ty + 1, tx]
    # the total is S_red[0, tx]

ThreadSync puts a barrier between the steps that need one (a step reads what another thread
wrote in the step before); within a step a thread writes only its own element and reads one
that no thread writes in that step. Each step's guard bounds one thread index (and fixes
those of the axes reduced before), which keeps the race checker's proof symbolic.
"""

from __future__ import annotations

from loopir.ir.buffer import Buffer
from loopir.ir.expr import EQ, LT, BufferLoad, IntImm, PrimExpr
from loopir.ir.op import all_
from loopir.ir.reducer import combine
from loopir.ir.stmt import BufferStore, For, IfThenElse, Stmt

__all__ = ["rows_fit_warps", "tree_combine"]

# the order of a group's axes in the shared buffer (vthreads, the outermost, keep theirs)
_TAG_ORDER = {"threadIdx.z": 0, "threadIdx.y": 1, "threadIdx.x": 2}


def rows_fit_warps(nt: int) -> bool:
    """Whether rows of ``nt`` threadIdx.x threads never share a 32-thread warp (a power of two
    below 32, or a multiple of 32): ``thread_allreduce``'s warp shuffles combine rows, so with
    threadIdx.y/z bound the rows must not share warps (the CUDA backend refuses them)."""
    return nt % 32 == 0 or (nt < 32 and nt & (nt - 1) == 0)


def _extent(lp: For) -> int:
    assert isinstance(lp.extent, IntImm)  # thread loops have constant extents (bind checks)
    return lp.extent.value


def _order(loops: list[For]) -> list[For]:
    """``loops`` with threadIdx.x last, then y, then z (vthreads first, in their order)."""
    return sorted(loops, key=lambda lp: _TAG_ORDER.get(str(lp.thread_tag), -1))


def tree_combine(op: str, part: PrimExpr, group: list[For], reduce: list[For], name: str) -> tuple[
    Buffer, list[Stmt], BufferLoad
]:
    """The shared-memory combine of ``part`` (a thread's partial result) over the threads of
    the ``reduce`` loops, separately for each thread of the ``group`` loops: (the shared
    buffer, the statements, the load of the total). Every thread of the block runs the
    statements (the steps are guarded by the thread's index, so barriers between them are
    reached by all)."""
    zero = IntImm(0, "int32")
    group, reduce = _order(group), _order(reduce)
    # threadIdx.x's index innermost, so that the threads of a warp touch consecutive words
    x_reduced = reduce[-1].thread_tag == "threadIdx.x"
    dims = [*group, *reduce] if x_reduced else [*reduce, *group]
    buf = Buffer(name, tuple(lp.extent for lp in dims), part.dtype, scope="shared")

    def at(sub: dict[For, PrimExpr]) -> BufferLoad:
        return BufferLoad(buf, tuple(sub.get(lp, lp.loop_var) for lp in dims))

    mine = at({})
    stmts: list[Stmt] = [BufferStore(buf, part, mine.indices)]
    done: list[PrimExpr] = []  # the axes reduced so far: only their index 0 holds parts
    for lp in reversed(reduce):  # threadIdx.x first
        n, v = _extent(lp), lp.loop_var
        s = 1
        while s * 2 < n:
            s *= 2
        while s >= 1 and n > 1:
            live = min(s, n - s)  # v < live implies v + s < n
            step = BufferStore(buf, combine(op, mine, at({lp: v + s})), mine.indices)
            stmts.append(IfThenElse(all_(*done, LT(v, IntImm(live, "int32"))), step))
            s //= 2
        done.append(EQ(v, zero))
    return buf, stmts, at({lp: zero for lp in reduce})
