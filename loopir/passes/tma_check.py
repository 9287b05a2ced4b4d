"""The first, conservative ordering rule for TMA copies, which the race checker relies on.

A ``ptx_tma_load`` writes its shared tile asynchronously: the bytes land some time after the
issue, and only a thread that has waited on the copy's mbarrier phase is guaranteed to see them.
The race checker ([`loopir.passes.race_check`][loopir.passes.race_check]) takes the write as an
ordinary write by the issuing thread *at the issue*. That is sound under this rule, checked
here before the race check:

    after each ``tma_load``, the issuing thread waits on the copy's barrier
    (``mbarrier_wait(bar, ...)`` with the same barrier element, unconditionally, in the same
    loop iteration, of a serial loop or a virtual thread) before it reaches any block barrier,
    and in between touches nothing of the destination buffer and writes nothing of the source.

Why it suffices: every access by another thread that the race checker accepts is separated
from the issue by a block barrier. One before the issue orders the access before the copy. One
after the issue comes after the issuing thread's wait, hence after the copy completed, and the
barrier carries the copy's bytes to every thread of the block (the wait made them visible to the
issuing thread; ``bar.sync`` is cumulative). The issuing thread's own accesses before its wait
are refused here; after it, the data is there. So a kernel that waits only in some threads (and
reads the tile elsewhere without a block barrier after the wait) is refused by the race
checker, even where the other threads waited too: mbarrier-only ordering (every reader waits,
no ``__syncthreads``) is for a later, more precise model.

Before / after (the rule refuses, names the copy; a correct kernel passes unchanged)::

    if tx == 0:                                    if tx == 0:
        mbarrier_arrive_expect_tx(bar[0], 4096)        mbarrier_arrive_expect_tx(bar[0], 4096)
        tma_load(S[0, 0], A[i, j], bar[0], ...)        tma_load(S[0, 0], A[i, j], bar[0], ...)
    storage_sync()   # refused: no wait            mbarrier_wait(bar[0], 0)
    B[...] = S[...]                                storage_sync()
                                                   B[...] = S[...]

Not checked: that the ``phase`` argument names the copy's phase (the wait on a phase already
complete returns at once), nor that the bytes announced by ``expect_tx`` are the copies' (a
wrong count hangs or returns early); both are the kernel author's, as in CUDA.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from loopir.errors import CodegenError
from loopir.ir import op
from loopir.ir.equality import structural_equal
from loopir.ir.expr import BufferLoad, Call
from loopir.ir.functor import post_order_visit
from loopir.ir.printer import script
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    PrimFunc,
    SeqStmt,
    Stmt,
    seq,
)

__all__ = ["check_tma_waits", "sync_after_mbarrier_init", "tma_wait_problem"]


def _waits_on(s: Stmt, bar: BufferLoad) -> bool:
    v = s.value if isinstance(s, Evaluate) else None
    return isinstance(v, Call) and v.op == "ptx_mbarrier_wait" and structural_equal(v.args[0], bar, map_free_vars=False)


def _scan(s: Stmt, bar: BufferLoad, call: Call) -> str | None:
    """``"waited"``, a problem, or None (keep looking) for the statement ``s`` after the copy."""
    if _waits_on(s, bar):
        return "waited"
    dst, src = call.args[0], call.args[1]
    assert isinstance(dst, BufferLoad) and isinstance(src, BufferLoad)
    found: list[str] = []

    def visit(n: object) -> None:
        if op.is_block_barrier(n):
            found.append("reaches a block barrier before it waits on its mbarrier")
        elif isinstance(n, BufferLoad) and n.buffer is dst.buffer:
            found.append(f"touches {dst.buffer.name} before it waits on its mbarrier")
        elif isinstance(n, BufferStore) and n.buffer in (dst.buffer, src.buffer):
            # the copy reads its source until it completes: a write would be read or not
            found.append(f"writes {n.buffer.name} before it waits on its mbarrier")

    post_order_visit(s, visit)
    return found[0] if found else None


def tma_wait_problem(path: Sequence[Stmt], call: Call) -> str | None:
    """Why the copy ``call`` (an ``Evaluate`` at ``path[-1]``, its ancestors before it) breaks
    the rule of the module doc; None when it keeps it."""
    bar = call.args[2]
    assert isinstance(bar, BufferLoad)
    child = path[-1]
    for parent in reversed(path[:-1]):
        if isinstance(parent, For) and (parent.kind is not ForKind.THREAD_BINDING
                                        or str(parent.thread_tag).startswith("vthread")):  # fmt: skip
            # a virtual thread is an iteration of the real thread's loop, as a serial one
            return f"the issuing thread leaves an iteration of loop {parent.loop_var.name} before it waits on {bar}"
        if isinstance(parent, SeqStmt):
            after = next(i for i, c in enumerate(parent.seq) if c is child) + 1
            for s in parent.seq[after:]:
                verdict = _scan(s, bar, call)
                if verdict == "waited":
                    return None
                if verdict is not None:
                    return f"the issuing thread {verdict} ({bar})"
        child = parent
    return f"the issuing thread never waits on {bar} after it"


def _walk(s: Stmt, path: list[Stmt], out: list[str]) -> None:
    path.append(s)
    if isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.op == "ptx_tma_load":
        if (prob := tma_wait_problem(path, s.value)) is not None:
            out.append(f"{prob}:\n  {script(s).strip()}")
    else:
        for c in _children(s):
            _walk(c, path, out)
    path.pop()


def _children(s: Stmt) -> list[Stmt]:
    if isinstance(s, SeqStmt):
        return list(s.seq)
    kids = [getattr(s, f, None) for f in ("body", "then_case", "else_case", "block")]
    return [k for k in kids if isinstance(k, Stmt)]


def check_tma_waits(func: PrimFunc) -> None:
    """Refuse a lowered function whose TMA copies break the rule of the module doc.

    Raises
    ------
    CodegenError
        Naming the function, the copy and what the issuing thread does before its wait.
    """
    out: list[str] = []
    _walk(func.body, [], out)
    if out:
        raise CodegenError(f"TMA check ({func.name}): {out[0]}")


def _has_init(s: Stmt) -> bool:
    found: list[bool] = []
    post_order_visit(s, lambda n: found.append(True) if isinstance(n, Call) and n.op == "ptx_mbarrier_init" else None)
    return bool(found)


def _is_barrier_stmt(s: Stmt) -> bool:
    return isinstance(s, Evaluate) and op.is_block_barrier(s.value)


def sync_after_mbarrier_init(kernel: Stmt) -> Stmt:
    """A block barrier after each top-level statement of a kernel's thread body that
    initializes an mbarrier (unless one follows already): what every TMA kernel does (init,
    fence, ``__syncthreads``), placed before ThreadSync plans the rest.

    Why here: ThreadSync puts a barrier just before the first conflicting statement. For the
    init (one thread) and the other threads' ``mbarrier_wait`` that is just before the wait,
    between the copy's issue and the issuing thread's wait, which the rule of the module doc
    refuses; with this barrier first, the tile's barrier lands after the wait.

    Before / after::

        for tx in threadIdx.x:                 for tx in threadIdx.x:
            if tx == 0: mbarrier_init(b, 1)        if tx == 0: mbarrier_init(b, 1)
            if tx == 0: ...tma_load...             storage_sync()
            mbarrier_wait(b, 0)                    if tx == 0: ...tma_load...
            ... reads ...                          mbarrier_wait(b, 0)
                                                   ... reads ...   (ThreadSync: a barrier first)

    Only the top level of the thread body (under threadIdx loops and allocations), where every
    thread of the block passes; an init deeper down is left to ThreadSync (and the checks).
    """
    if isinstance(kernel, For) and kernel.kind is ForKind.THREAD_BINDING or isinstance(kernel, Allocate):
        body = sync_after_mbarrier_init(kernel.body)
        return kernel if body is kernel.body else attrs.evolve(kernel, body=body)
    items = list(kernel.seq) if isinstance(kernel, SeqStmt) else [kernel]
    if not any(_has_init(c) for c in items):
        return kernel
    out: list[Stmt] = []
    for i, c in enumerate(items):
        out.append(c)
        if _has_init(c) and not (i + 1 < len(items) and _is_barrier_stmt(items[i + 1])):
            out.append(Evaluate(op.storage_sync()))
    return seq(*out)
