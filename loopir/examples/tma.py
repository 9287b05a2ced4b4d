"""A tiled copy through TMA and an mbarrier: the first Hopper (sm_90a) kernel built on
[`loopir.ir.tma`][loopir.ir.tma].

Each block copies one ``bm`` x ``bn`` tile of ``A`` into shared memory with one ``tma_load``
(issued by thread 0, the bytes counted on an mbarrier, optionally 128/64/32-byte swizzled), and
its threads then copy the tile to ``B``. Tiles that leave ``A`` are filled with zeros by TMA and
not stored. In lowered IR (there is no schedule primitive that makes TMA copies yet)::

    for by in blockIdx.y, bx in blockIdx.x:
        A_s = allocate((bm, bn), shared); bar = allocate((1,), uint64, shared)
        for tx in threadIdx.x(threads):
            if tx == 0: mbarrier_init(bar[0], 1)
            storage_sync()                       # the barrier is initialized for everyone
            if tx == 0:
                mbarrier_arrive_expect_tx(bar[0], bm * bn * element size)
                tma_load(A_s[0, 0], A[by * bm, bx * bn], bar[0], (bm, bn), swizzle)
            mbarrier_wait(bar[0], 0)             # phase 0: the tile has landed
            storage_sync()                       # the race checker's first, conservative form
            for i in serial(bm * bn / threads):  # B = A_s at the swizzled places, in bounds
                ...

With ``tiles > 1`` the part from the copy on is a serial loop ``k`` over a column of tiles,
with a barrier first (the previous tile's readers are done before the copy overwrites it) and
the wait on parity ``k % 2`` (one barrier, one phase per copy).
"""

from __future__ import annotations

from loopir.ir import dtype as dt
from loopir.ir import op
from loopir.ir import tma as T
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, PrimExpr, Var
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Stmt,
    seq,
)
from loopir.tensor_intrin.tma import tile_element

__all__ = ["tma_copy"]


def _bind(v: Var, n: int | PrimExpr, tag: str, body: Stmt) -> For:
    return For(v, 0, n, ForKind.THREAD_BINDING, body, thread_tag=tag)


def _reads(load: Call, M: int | Var, N: int | Var, row0: PrimExpr, col0: PrimExpr, tx: Var,
           threads: int) -> For:  # fmt: skip
    """Every thread stores its share of the tile the copy ``load`` filled into ``B``, in bounds.

    Rows and columns as the prover can tell apart (no division of a sum): thread ``tx`` holds
    column ``tx % bn`` of rows ``tx // bn``, or a share of a row when the row is longer."""
    dst, src = load.args[0], load.args[1]
    assert isinstance(dst, BufferLoad) and isinstance(src, BufferLoad)
    bm, bn = (int(n) for n in dst.buffer.shape)  # type: ignore[call-overload]
    i = Var("i")
    if threads % bn == 0:
        r, c = i * (threads // bn) + tx // bn, tx % bn
    else:
        per_row = bn // threads
        r, c = i // per_row, i % per_row * threads + tx
    B = Buffer("B", src.buffer.shape, src.buffer.dtype)
    store = BufferStore(B, dst.buffer[tile_element(load, (r, c))], (row0 + r, col0 + c))
    return For(i, 0, bm * bn // threads, ForKind.SERIAL, IfThenElse(op.all_(row0 + r < M, col0 + c < N), store))


def tma_copy(M: int | Var, N: int | Var, block: tuple[int, int] = (64, 64), dtype: str = "float16",
             swizzle: int = 128, threads: int = 128, tiles: int = 1) -> PrimFunc:  # fmt: skip
    """``B = A`` (``M`` x ``N``), ``tiles`` tiles of ``block`` per thread block, each through one
    ``tma_load``.

    Parameters
    ----------
    M, N
        The matrix (ints, or ``loopir.Var`` for symbolic sizes).
    block
        The tile, ``(rows, cols)``: the TMA box; ``cols`` times the element size must be a
        multiple of 16 bytes, and exactly ``swizzle`` bytes when swizzled.
    dtype
        The element type.
    swizzle
        0 (none), 32, 64 or 128: the shared tile's swizzle (the readers index it through
        [`tile_element`][loopir.tensor_intrin.tma.tile_element]).
    threads
        Threads per block; must divide ``rows * cols``, and divide ``cols`` or be a multiple of it.
    tiles
        Tiles (one below the other) per block, copied in a serial loop ``k`` that reuses one
        mbarrier: copy ``k`` completes its phase ``k``, waited on with parity ``k % 2``.

    Raises
    ------
    TypeError
        For a box TMA cannot copy (``loopir.ir.tma.tma_load``), naming the buffer.
    ValueError
        When ``threads`` does not divide the tile, or ``tiles`` is not positive.
    """
    bm, bn = block
    if (bm * bn) % threads or (threads % bn and bn % threads) or tiles < 1:
        raise ValueError(f"tma_copy: threads={threads} must divide the {bm} x {bn} tile, and divide "
                         f"or be a multiple of its row; tiles={tiles} must be positive")
    A = Buffer("A", (M, N), dtype)
    A_s = Buffer("A_s", (bm, bn), dtype, scope="shared")
    bar = Buffer("bar", (1,), "uint64", scope="shared")
    by, bx, tx, k = Var("by"), Var("bx"), Var("tx"), Var("k")
    row0 = (by * tiles + k) * bm if tiles > 1 else by * bm
    load = T.tma_load(A_s[0, 0], A[row0, bx * bn], bar[0], (bm, bn), swizzle)
    reads = _reads(load, M, N, row0, bx * bn, tx, threads)
    step = seq(
        Evaluate(op.storage_sync()) if tiles > 1 else None,  # the last tile's readers are done
        IfThenElse(tx == 0, seq(Evaluate(T.mbarrier_arrive_expect_tx(bar[0], bm * bn * dt.bits(dtype) // 8)),
                                Evaluate(load))),  # fmt: skip
        Evaluate(T.mbarrier_wait(bar[0], k % 2 if tiles > 1 else 0)),
        Evaluate(op.storage_sync()),
        reads,
    )
    body = seq(
        IfThenElse(tx == 0, Evaluate(T.mbarrier_init(bar[0], 1))),
        Evaluate(op.storage_sync()),
        For(k, 0, tiles, ForKind.SERIAL, step) if tiles > 1 else step,
    )
    kernel = Allocate(A_s, Allocate(bar, _bind(tx, threads, "threadIdx.x", body)))
    grid = _bind(by, op.ceildiv(M, bm * tiles), "blockIdx.y", _bind(bx, op.ceildiv(N, bn), "blockIdx.x", kernel))
    B = reads.body.then_case.buffer  # type: ignore[attr-defined]
    return PrimFunc((A, B), grid, name="tma_copy")
