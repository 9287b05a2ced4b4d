"""The barrier after an mbarrier's init that TMA kernels need, placed before ThreadSync.

The race checker's model of TMA copies is [`loopir.passes.race_tma`][loopir.passes.race_tma]
(a copy's write is in flight until the first wait on its barrier element); this module keeps
the one lowering step it relies on, ``sync_after_mbarrier_init``. (Its first, conservative
rule, that the issuing thread waits before any block barrier, forbade pipelines and is gone.)
"""

from __future__ import annotations

import attrs

from loopir.ir import op
from loopir.ir.expr import Call
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import (
    Allocate,
    Evaluate,
    For,
    ForKind,
    SeqStmt,
    Stmt,
    seq,
)

__all__ = ["sync_after_mbarrier_init"]


def _has_init(s: Stmt) -> bool:
    found: list[bool] = []
    post_order_visit(
        s,
        lambda n: (
            found.append(True) if isinstance(n, Call) and n.op == "ptx_mbarrier_init" else None
        ),
    )
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
    if (
        isinstance(kernel, For)
        and kernel.kind is ForKind.THREAD_BINDING
        or isinstance(kernel, Allocate)
    ):
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
