"""A hand-built lowered kernel for the InjectSharedPrefetch tests, with knobs to break it.

``tile_sum`` (one block of ``T`` threads, ``n`` elements, ``n`` may be a Var)::

    for k in serial(ceildiv(n, T)):
        sync
        if k * T + tx < n: S[tx] = A[k * T + tx]
        sync
        if k * T + (tx + 1) % T < n: acc[0] = acc[0] + S[(tx + 1) % T] * w
    Out[tx] = acc[0]

Each thread sums the elements its right neighbour fetched, so a missing barrier or a stale
register shows up in the result. The knobs produce the variants the pass must refuse.
"""

from __future__ import annotations

from typing import Any

from loopir.ir import (
    Allocate,
    Buffer,
    BufferLoad,
    BufferStore,
    Cast,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    PrimFunc,
    Var,
    op,
    seq,
)

PREFETCH = "loopir.prefetch_shared"


def tile_sum(
    n: Any = 37,
    T: int = 8,
    *,
    annotate: Any = True,
    loop_kind: ForKind = ForKind.SERIAL,
    write_source: bool = False,
    index_from_load: bool = False,
    guard_from_load: bool = False,
    second_sync: bool = True,
    fetch_from_shared: bool = False,
    else_branch: bool = False,
    divisor_guard: bool = False,
) -> PrimFunc:
    """The kernel described in the module doc, optionally broken (see the keywords)."""
    A = Buffer("A", (n,), "float32", "global")
    Idx = Buffer("Idx", (T,), "int32", "global")
    Out = Buffer("Out", (T,), "float32", "global")
    S = Buffer("S", (T,), "float32", "shared")
    S2 = Buffer("S2", (T,), "float32", "shared")
    acc = Buffer("acc", (1,), "float32", "local")
    bx, tx, k = Var("bx"), Var("tx"), Var("k")
    zero = IntImm(0, "int32")
    sync = Evaluate(op.storage_sync("shared"))

    src = BufferLoad(S2 if fetch_from_shared else A, (tx,) if fetch_from_shared else (k * T + tx,))
    index = Cast("int32", BufferLoad(Idx, (tx,))) if index_from_load else tx
    store = BufferStore(S, src, (index,))
    cond = k * T + tx < n
    if guard_from_load:
        cond = op.all_(cond, BufferLoad(Idx, (tx,)) > 0)
    if divisor_guard:  # a run-time divisor (n when it is a Var)
        cond = op.all_(cond, op.floordiv(k * T + tx, n) < 1)
    fetch = IfThenElse(cond, store, BufferStore(S, op.const(0.0, "float32"), (tx,)) if else_branch else None)
    nb = op.floormod(tx + 1, T)
    compute = IfThenElse(
        k * T + nb < n,
        BufferStore(acc, BufferLoad(acc, (zero,)) + BufferLoad(S, (nb,)) * op.const(0.5, "float32"), (zero,)),
    )
    body = seq(sync, fetch, *([sync] if second_sync else []), compute)
    anns = {} if annotate is None else {PREFETCH: annotate}
    loop = For(k, zero, op.ceildiv(n, T) if isinstance(n, Var) else IntImm(-(-n // T), "int32"),
               loop_kind, body, None, anns)
    thread = seq(
        BufferStore(acc, op.const(0.0, "float32"), (zero,)),
        loop,
        BufferStore(Out, BufferLoad(acc, (zero,)), (tx,)),
        *([BufferStore(A, op.const(1.0, "float32"), (tx,))] if write_source else []),
    )
    kernel = For(bx, zero, IntImm(1, "int32"), ForKind.THREAD_BINDING,
                 Allocate(S, Allocate(S2, For(tx, zero, IntImm(T, "int32"), ForKind.THREAD_BINDING,
                                              Allocate(acc, thread), "threadIdx.x"))),
                 "blockIdx.x")  # fmt: skip
    return PrimFunc((A, Idx, Out), kernel, name="tile_sum")
