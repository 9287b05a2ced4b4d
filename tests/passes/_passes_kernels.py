"""Hand-built lowered kernels in the shape a schedule produces (for the local-padding cases).

``row_reduce`` computes ``C[i] = reduce_k f(A[i, k])`` with ``T`` rows per block (one thread per
row), a shared tile ``A_sh[T, KT]`` fetched per ``k0`` step, a local accumulator, and guards
given by the caller; each thread fetches the row it reduces, so the kernel means the same
sequentially (CPU executor) and in parallel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from loopir.ir import (
    Allocate,
    Buffer,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    PrimExpr,
    PrimFunc,
    Var,
    op,
    seq,
)
from loopir.ir import dtype as dt

Guard = Callable[["Ctx"], PrimExpr | None]


@attrs.define
class Ctx:
    """Variables a guard builder may use."""

    row: PrimExpr  # global row index
    k: PrimExpr  # global k index
    tx: Var
    kk: Var
    k0: Var
    M: Any
    K: Any


def _guarded(cond: PrimExpr | list[PrimExpr] | None, s: Any) -> Any:
    if cond is None:
        return s
    if isinstance(cond, list):  # nested ifs, outermost first
        for c in reversed(cond):
            s = IfThenElse(c, s)
        return s
    return IfThenElse(cond, s)


def row_reduce(
    M: Any = 10,
    K: Any = 10,
    T: int = 4,
    KT: int = 4,
    kind: str = "sum",
    fetch_guard: Guard | None = None,
    compute_guard: Guard | None = None,
    init: Callable[[Ctx], PrimExpr] | None = None,
    vectorize: bool = False,
    dtype: str = "float32",
) -> PrimFunc:
    """The kernel; default guards are the exact bound guards ``row < M and k < K``."""
    A = Buffer("A", (M, K), dtype)
    C = Buffer("C", (M,), dtype)
    a_sh = Buffer("A_sh", (T, KT), dtype, scope="shared")
    acc = Buffer("acc", (1,), dtype, scope="local")
    bx, tx, k0, kk, kc = Var("bx"), Var("tx"), Var("k0"), Var("kk"), Var("kc")
    nb = op.ceildiv(M, T) if isinstance(M, Var) else -(-M // T)
    nk = op.ceildiv(K, KT) if isinstance(K, Var) else -(-K // KT)
    row = bx * T + tx
    fctx = Ctx(row, k0 * KT + kk, tx, kk, k0, M, K)
    cctx = Ctx(row, k0 * KT + kc, tx, kc, k0, M, K)
    default = lambda c: op.all_(c.row < c.M, c.k < c.K)  # noqa: E731
    fg = (fetch_guard or default)(fctx)
    cg = (compute_guard or default)(cctx)
    fetch = For(kk, 0, KT, ForKind.VECTORIZED if vectorize else ForKind.SERIAL,
                _guarded(fg, BufferStore(a_sh, A[row, k0 * KT + kk], (tx, kk))))  # fmt: skip
    x = a_sh[tx, kc]
    if kind == "sum":
        upd = acc[0] + x * 2.0 if dt.is_float(dtype) else acc[0] + x * 2
    elif kind == "max":
        upd = op.max_(acc[0], x)
    elif kind == "min":
        upd = op.min_(acc[0], x)
    elif kind == "maxprod":
        upd = op.max_(acc[0], x * x)
    elif kind in ("copy", "sum+max"):
        upd = x * 2.0 if kind == "copy" else acc[0] + x * 2.0
    else:
        raise ValueError(kind)
    ident = {"sum": 0, "max": dt.min_value(dtype), "maxprod": dt.min_value(dtype),
             "min": dt.max_value(dtype), "copy": 0, "sum+max": 0}[kind]  # fmt: skip
    init_val = init(fctx) if init is not None else op.const(ident, dtype)
    update = _guarded(cg, BufferStore(acc, upd, (0,)))
    result: PrimExpr = acc[0]
    # "sum+max": a second accumulator takes the max of the same tile (two reductions read it)
    acc2 = Buffer("acc2", (1,), dtype, scope="local")
    if kind == "sum+max":
        update = seq(update, _guarded(cg, BufferStore(acc2, op.max_(acc2[0], x), (0,))))
        result = acc[0] + acc2[0]
    compute = For(kc, 0, KT, ForKind.SERIAL, update)
    inits = [_guarded(row < M, BufferStore(acc, init_val, (0,)))]
    if kind == "sum+max":
        inits.append(_guarded(row < M, BufferStore(acc2, op.const(dt.min_value(dtype), dtype), (0,))))
    body = seq(
        *inits,
        For(k0, 0, nk, ForKind.SERIAL, seq(fetch, compute)),
        _guarded(row < M, BufferStore(C, result, (row,))),
    )
    thread_body = Allocate(acc, body)
    if kind == "sum+max":
        thread_body = Allocate(acc2, thread_body)
    kernel = For(bx, 0, nb, ForKind.THREAD_BINDING,
                 Allocate(a_sh, For(tx, 0, T, ForKind.THREAD_BINDING, thread_body,
                                    thread_tag="threadIdx.x")),
                 thread_tag="blockIdx.x")  # fmt: skip
    return PrimFunc((A, C), kernel)


def reference(a: Any, kind: str) -> Any:
    import numpy as np

    a64 = a.astype(np.float64) if a.dtype.kind == "f" else a.astype(np.int64)
    if kind == "sum":
        return (a64 * 2).sum(axis=1)
    if kind == "max":
        return a64.max(axis=1)
    if kind == "min":
        return a64.min(axis=1)
    if kind == "copy":
        return a64[:, -1] * 2
    if kind == "sum+max":
        return (a64 * 2).sum(axis=1) + a64.max(axis=1)
    return (a64 * a64).max(axis=1)
