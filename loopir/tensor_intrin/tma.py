"""The sequential meaning of ``ptx_tma_load`` and what the TMA and mbarrier calls touch.

One place for both, as [`loopir.tensor_intrin.calls`][loopir.tensor_intrin.calls] is for the
tensor-core calls: the CPU executor runs [`tma_stmt`][loopir.tensor_intrin.tma.tma_stmt] and the
analyses (ThreadSync, the race checker) see [`tma_touches`][loopir.tensor_intrin.tma.tma_touches].

===============================  ==========================================================
call                             touches (by the thread that executes it)
===============================  ==========================================================
ptx_tma_load                     reads the box's in-bounds elements of the global tensor;
                                 writes the whole shared tile (the swizzle permutes within
                                 it)
ptx_mbarrier_init                writes the barrier
ptx_mbarrier_arrive_expect_tx    reads the barrier (an atomic update: threads arriving
                                 together do not race)
ptx_mbarrier_wait                reads the barrier
ptx_mbarrier_arrive              reads the barrier (an atomic update, as above)
ptx_setmaxnreg                   nothing
===============================  ==========================================================

The copy is asynchronous on the GPU; the race checker takes the write (and the source read) as
in flight, by no thread, from the issue to the first wait on its barrier element
([`loopir.passes.race_tma`][loopir.passes.race_tma]); these touches are what it puts there.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

from loopir.ir import dtype as dt
from loopir.ir import op
from loopir.ir.expr import BufferLoad, Call, PrimExpr, Var
from loopir.ir.stmt import BufferStore, For, ForKind, IfThenElse, Stmt
from loopir.ir.tma import is_tma_call, tile_box, tma_box, tma_swizzle
from loopir.tensor_intrin.calls import Touch, touches

__all__ = ["call_touches", "tile_element", "tma_stmt", "tma_touches"]


def _parts(call: Call) -> tuple[BufferLoad, BufferLoad, tuple[int, ...], int]:
    dst, src = call.args[0], call.args[1]
    assert isinstance(dst, BufferLoad) and isinstance(src, BufferLoad), call
    box, swizzle = tma_box(call)
    return dst, src, box, swizzle


def _tile(call: Call) -> tuple[int, ...]:
    """The tile's dimensions the box fills (``loopir.ir.tma.tile_box``: the box less leading 1s)."""
    dst, _src, box, _ = _parts(call)
    tile = tile_box(dst.buffer.shape, box)
    assert tile is not None, call
    return tile


def _in_bounds(src: BufferLoad, g: list[PrimExpr]) -> PrimExpr:
    """``0 <= g[i] < shape[i]`` for every dimension (TMA reads zeros elsewhere)."""
    return op.all_(*(op.all_(0 <= x, x < n) for x, n in zip(g, src.buffer.shape, strict=True)))


def _tile_index(dst: BufferLoad, box: tuple[int, ...], flat: PrimExpr) -> tuple[PrimExpr, ...]:
    """The indices of the tile's element at row-major offset ``flat``."""
    out: list[PrimExpr] = []
    for n in reversed(box):
        out.append(flat % n)
        flat = flat // n
    prefix = dst.indices[:len(dst.indices) - len(box)]
    return (*prefix, *reversed(out))


def tile_element(call: Call, b: Sequence[PrimExpr]) -> tuple[PrimExpr, ...]:
    """The indices of the destination buffer where the ``ptx_tma_load`` ``call`` stores the
    box's element ``b`` (outermost first): ``b`` itself in the tile without a swizzle, else the
    swizzled place (``loopir.ir.tma.tma_swizzle``). Readers of a swizzled tile index it so."""
    dst, _src, box, swizzle = _parts(call)
    if len(b) != len(box):
        raise ValueError(f"tile_element: {len(b)} indices for a box of rank {len(box)}")
    tile = _tile(call)
    b = b[len(box) - len(tile):]  # the leading unit dimensions select (their index is 0)
    if not swizzle:
        return (*dst.indices[:len(dst.indices) - len(tile)], *b)
    flat: PrimExpr = reduce(lambda acc, ib: acc * ib[1] + ib[0], zip(b[1:], tile[1:], strict=True), b[0])
    pos = tma_swizzle(flat, dt.bits(dst.dtype) // 8, swizzle)
    assert not isinstance(pos, int)
    return _tile_index(dst, tile, pos)


def tma_stmt(call: Call) -> Stmt:
    """``ptx_tma_load`` as the loop nest it means (see
    [`tma_load`][loopir.ir.tma.tma_load]): serial loops over the box, each element stored at its
    swizzled place in the tile, zero where the box leaves the tensor."""
    dst, src, box, _ = _parts(call)
    iters = [Var(f"tma_b{i}", "int32") for i in range(len(box))]
    g = [o + b for o, b in zip(src.indices, iters, strict=True)]
    idx = tile_element(call, iters)
    body: Stmt = IfThenElse(_in_bounds(src, g), BufferStore(dst.buffer, BufferLoad(src.buffer, tuple(g)), idx),
                            BufferStore(dst.buffer, op.const(0, dst.dtype), idx))  # fmt: skip
    for v, n in reversed(list(zip(iters, box, strict=True))):
        body = For(v, 0, n, ForKind.SERIAL, body)
    return body


def tma_touches(call: Call) -> list[Touch]:
    """What one thread's TMA or mbarrier call reads and writes (module doc)."""
    if call.op == "ptx_setmaxnreg":
        return []
    if call.op != "ptx_tma_load":
        bar = call.args[0]
        assert isinstance(bar, BufferLoad), call
        return [Touch(bar.buffer, bar.indices, call.op == "ptx_mbarrier_init")]
    dst, src, box, _ = _parts(call)
    iters = tuple((Var(f"tma_b{i}", "int32"), n) for i, n in enumerate(box))
    g = [o + v for o, (v, _) in zip(src.indices, iters, strict=True)]
    read = Touch(src.buffer, tuple(g), False, iters, _in_bounds(src, g))
    tile = _tile(call)
    prefix = dst.indices[:len(dst.indices) - len(tile)]
    write = Touch(dst.buffer, (*prefix, *(v for v, _ in iters[len(box) - len(tile):])), True, iters)
    bar = call.args[2]
    assert isinstance(bar, BufferLoad)
    return [read, write, Touch(bar.buffer, bar.indices, False)]


def call_touches(call: Call, lane: PrimExpr | None = None) -> list[Touch]:
    """What a tensor-core, TMA or mbarrier call touches (``touches`` or ``tma_touches``)."""
    return tma_touches(call) if is_tma_call(call) else touches(call, lane)
