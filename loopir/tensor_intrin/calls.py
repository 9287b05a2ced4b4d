"""What one lane's tensor-core call touches, and the per-lane calls as the loops they stand for.

The analyses (ThreadSync, the race checker, compaction) see every buffer element a call reads or
writes through [`touches`][loopir.tensor_intrin.calls.touches]; the CPU executor and
``LowerWarpMemory`` run ``mma_fill`` and ``mma_store`` as the statement
[`per_lane_stmt`][loopir.tensor_intrin.calls.per_lane_stmt] returns, so the three agree by
construction. The conventions (see the builders in [`loopir.ir.op`][loopir.ir.op]):

* a *fragment* operand is ``W[..., lane, v]``, a load of a ``warp`` buffer: lane ``lane``'s
  elements from ``v`` on (after ``LowerWarpMemory``, ``W[..., v]`` of a ``local`` buffer: the
  thread's own registers, the lane then being the hardware lane);
* a *tile* operand is a load of its first element (``mma_store``'s destination, the tile
  extending over the last two dimensions) or of the row a lane supplies (``ptx_ldmatrix``'s
  source: 8 elements along the last dimension).

Per lane, as one lane's call instance (the lane being the fragment's lane index):

===============  ============================================================================
call             touches
===============  ============================================================================
ptx_ldmatrix     reads its row ``S[..., r, c:c + 8]`` (lanes below ``8 * num``); writes its
                 ``2 * num`` fragment elements
ptx_mma          reads the A and B fragments of all 32 lanes (8 and 4 elements each); reads and
                 writes its own 4 C elements
ptx_wgmma        reads the 16 rows of A and the N rows of B from its operands' rows on, the
                 whole 64-element segments of their columns (the 128-byte swizzle permutes
                 within one); an MN-major B (``.trans_b``): the K rows of each of its N / 64
                 blocks; A from registers: its K / 16 tiles of all 32 lanes (as ``ptx_mma``);
                 reads and writes its own N / 2 accumulator elements
ptx_wgmma_async  what ``ptx_wgmma`` touches (the race checker keeps its tile reads in flight
                 until the wait that retires them)
ptx_wgmma_wait   reads the A and B tiles of every group it names, as their issue does: the
                 in-flight reads end here (nothing of the accumulator: the MMA happened at
                 the issue in the sequential meaning)
ptx_shfl_xor     reads the ``src`` element of all 32 lanes; writes its own ``dst`` element
mma_fill         writes its ``count`` fragment elements
mma_store        reads its fragment elements; writes their places in the tile (C layout)
===============  ============================================================================
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Call, IntImm, PrimExpr, Var
from loopir.ir.stmt import BufferStore, For, ForKind, Stmt
from loopir.tensor_intrin.layouts import (
    LDMATRIX_ROW,
    MMA_A,
    MMA_C,
    SW128_ROW,
    WARP_SIZE,
    FragmentLayout,
    accumulator_layout,
    sw128,
)

__all__ = [
    "FOOTPRINT_KEY", "Touch", "fragment_lane", "hardware_lane", "per_lane_stmt", "touches",
    "written_operands",
]  # fmt: skip

#: Annotation of the serial loops ``Touch.loops`` makes: they are not in the IR (an analysis
#: must not place anything inside them).
FOOTPRINT_KEY = "loopir.call_footprint"


@attrs.frozen(eq=False)
class Touch:
    """Elements one lane's call reads or writes: ``buffer[indices]`` for every value of the
    fresh variables ``iters`` (each from 0 to its extent), where ``cond`` holds.

    ``loops()`` gives the variables as serial loops, so that an analysis can treat a touch
    as an access nested in loops it already understands.
    """

    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    is_store: bool
    iters: tuple[tuple[Var, int], ...] = ()
    cond: PrimExpr | None = None

    def loops(self, body: Stmt) -> tuple[For, ...]:
        """The iteration variables as serial loops (outermost first; each around ``body``,
        annotated with ``FOOTPRINT_KEY``)."""
        return tuple(For(v, 0, n, ForKind.SERIAL, body, annotations={FOOTPRINT_KEY: True})
                     for v, n in self.iters)  # fmt: skip


def hardware_lane(loops: Sequence[For]) -> PrimExpr | None:
    """The lane of a thread under ``loops`` (outermost first), from the innermost
    ``threadIdx.x`` loop: its variable, modulo 32 when its extent may exceed 32 (right when the
    block's x extent is a multiple of 32, as ``LowerWarpMemory`` requires); None without one."""
    for f in reversed(loops):
        if f.kind is ForKind.THREAD_BINDING and f.thread_tag == "threadIdx.x":
            small = isinstance(f.extent, IntImm) and isinstance(f.min, IntImm) and \
                f.min.value + f.extent.value <= WARP_SIZE
            return f.loop_var if small else f.loop_var % WARP_SIZE
    return None


def written_operands(call: Call) -> list[BufferLoad]:
    """The operands a tensor-core call writes through (``ptx_mma``'s accumulator it also
    reads: a read-modify-write)."""
    out = {"ptx_ldmatrix": call.args[2:3], "ptx_mma": call.args[3:4], "ptx_wgmma": call.args[3:4],
           "ptx_wgmma_async": call.args[3:4], "mma_fill": call.args[1:2], "mma_store": call.args[2:3]}.get(call.op, ())  # fmt: skip
    return [a for a in out if isinstance(a, BufferLoad)]


def fragment_lane(load: PrimExpr) -> PrimExpr | None:
    """The lane index of a fragment operand ``W[..., lane, v]`` of a warp buffer (None for a
    local fragment, whose lane is the thread's)."""
    if isinstance(load, BufferLoad) and load.buffer.scope == "warp":
        return load.indices[-2]
    return None


def _int(e: PrimExpr) -> int:
    assert isinstance(e, IntImm), e
    return e.value


def _elem(load: BufferLoad, e: PrimExpr, lane: PrimExpr | None = None) -> tuple[PrimExpr, ...]:
    """Indices of element ``v + e`` of a fragment row (of lane ``lane`` when given)."""
    idx = list(load.indices)
    idx[-1] = idx[-1] + e
    if lane is not None:
        idx[-2] = lane
    return tuple(idx)


def _row(load: PrimExpr, n: int, store: bool) -> Touch:
    """The ``n`` fragment elements of the lane, from the operand on."""
    assert isinstance(load, BufferLoad)
    e = Var("e", "int32")
    return Touch(load.buffer, _elem(load, e), store, ((e, n),))


def _all_lanes(load: PrimExpr, n: int) -> Touch:
    """The ``n`` elements of every lane's row (a warp fragment), or the lane's own (local)."""
    assert isinstance(load, BufferLoad)
    if load.buffer.scope != "warp":
        return _row(load, n, False)
    lane, e = Var("lane", "int32"), Var("e", "int32")
    return Touch(load.buffer, _elem(load, e, lane), False, ((lane, WARP_SIZE), (e, n)))


def touches(call: Call, lane: PrimExpr | None = None) -> list[Touch]:
    """The elements one lane's instance of the tensor-core ``call`` touches (module doc).

    ``lane`` is the lane executing it; by default the lane index of its warp fragment operand.
    It is needed only by ``ptx_ldmatrix`` with fewer than 4 matrices (when unknown, every lane
    is taken to read its row: more than the call reads) and by ``mma_store`` (a ValueError
    without one).
    """
    if call.op == "ptx_ldmatrix":
        _, num, dst, src = call.args
        assert isinstance(src, BufferLoad)
        n = _int(num)
        lane = lane if lane is not None else fragment_lane(dst)
        e = Var("e", "int32")
        idx = list(src.indices)
        idx[-1] = idx[-1] + e
        cond = None if n == 4 or lane is None else lane < LDMATRIX_ROW * n
        read = Touch(src.buffer, tuple(idx), False, ((e, LDMATRIX_ROW),), cond)
        return [read, _row(dst, 2 * n, True)]
    if call.op == "ptx_mma":
        _, a, b, c = call.args
        return [_all_lanes(a, 8), _all_lanes(b, 4), _row(c, 4, False), _row(c, 4, True)]
    if call.op == "ptx_shfl_xor":
        dst, src, _ = call.args
        return [_all_lanes(src, 1), _row(dst, 1, True)]
    if call.op in op.WGMMA_ISSUES:
        return _wgmma_touches(call)
    if call.op == "ptx_wgmma_wait":
        return [t for group in op.wgmma_wait_groups(call) for t in _wgmma_tiles(group)]
    if call.op in ("mma_fill", "mma_store"):
        out: list[Touch] = []
        _collect(per_lane_stmt(call, lane), (), out)
        return out
    raise ValueError(f"touches: {call.op} is not a tensor-core call")


# --- ptx_wgmma: shared tiles stored 128-byte swizzled, the accumulator as 16 x 16 tiles --------


def _acc_element(c: BufferLoad, e: PrimExpr, lane: PrimExpr | None) -> tuple[PrimExpr, ...]:
    """Indices of the lane's accumulator element ``e`` (tile ``e // 8``, local ``e % 8``)."""
    idx = list(c.indices)
    if c.buffer.scope == "warp":
        idx[-3] = idx[-3] + e // 8
        idx[-2] = lane if lane is not None else idx[-2]
    else:
        idx[-2] = idx[-2] + e // 8
    idx[-1] = idx[-1] + e % 8
    return tuple(idx)


def _wgmma_operand(load: PrimExpr, i: PrimExpr, k: PrimExpr, blocked: bool = False) -> BufferLoad:
    """Element ``(i, k)`` of the swizzled tile whose first element ``load`` is: row ``r0 + i``,
    the column the swizzle stores logical column ``c + k`` at, ``c`` the first element's logical
    column (the swizzle is its own inverse in a row). ``blocked`` (a K past 64 of a tile of rank
    >= 3): the columns from 64 on are further blocks along the dimension before the rows."""
    assert isinstance(load, BufferLoad)
    *lead, r0, c0 = load.indices
    row, x = r0 + i, sw128(r0, c0) + k
    if blocked and lead:
        *outer, s0 = lead
        return BufferLoad(load.buffer, (*outer, s0 + x // SW128_ROW, row, sw128(row, x % SW128_ROW)))
    return BufferLoad(load.buffer, (*lead, row, sw128(row, x)))


def _wgmma_operand_mn(load: PrimExpr, k: PrimExpr, j: PrimExpr) -> BufferLoad:
    """Element ``(k, j)`` of the MN-major swizzled B whose first element ``load`` is (see
    [`ptx_wgmma`][loopir.ir.op.ptx_wgmma]): row ``r0 + k``; logical column ``x = c + j``
    (``c`` the first element's), its 64-column block ``x // 64`` along the dimension before the
    rows (of a buffer of rank >= 3), the column within the block through the swizzle."""
    assert isinstance(load, BufferLoad)
    *lead, r0, c0 = load.indices
    row, x = r0 + k, sw128(r0, c0) + j
    if not lead:
        return BufferLoad(load.buffer, (row, sw128(row, x)))
    *outer, s0 = lead
    return BufferLoad(load.buffer, (*outer, s0 + x // SW128_ROW, row, sw128(row, x % SW128_ROW)))


def _wgmma_a_fragment(load: PrimExpr, i: PrimExpr, k: PrimExpr) -> BufferLoad:
    """Element ``(i, k)`` of a register A (``P[..., t, lane, v]``: ``k / 16`` tiles in the
    ``MMA_A`` layout): ``P[..., t + k // 16, MMA_A(i, k % 16)]``, another lane's register."""
    assert isinstance(load, BufferLoad)
    *lead, t0, _lane, v0 = load.indices
    lane, local = MMA_A.to_lane_local(i, k % 16)
    return BufferLoad(load.buffer, (*lead, t0 + k // 16, lane, v0 + local))


def _wgmma_stmt(call: Call, lane: PrimExpr | None, kind: ForKind) -> Stmt:
    shape, a, b, c = call.args
    nk = op.wgmma_nk(shape)
    assert isinstance(c, BufferLoad) and nk is not None
    n, depth = nk
    lane = lane if lane is not None else fragment_lane(c)
    if lane is None:
        raise ValueError(f"per_lane_stmt: the lane of {call} is unknown (a local fragment)")
    e, k = Var("e", "int32"), Var("k", "int32")
    row, col16 = MMA_C.to_row_col(lane, e % 8)
    col = e // 8 * 16 + col16
    acc = BufferLoad(c.buffer, _acc_element(c, e, lane))
    blocked = depth > SW128_ROW  # K past one 128-byte row: whole 64-column blocks
    a_elem = _wgmma_a_fragment(a, row, k) if op.wgmma_a_in_registers(call) else _wgmma_operand(a, row, k, blocked)
    b_elem = _wgmma_operand_mn(b, k, col) if op.wgmma_trans_b(shape) else _wgmma_operand(b, col, k, blocked)
    body = BufferStore(c.buffer, acc + op.cast(a_elem, "float32") * op.cast(b_elem, "float32"), acc.indices)
    return For(e, 0, n // 2, kind, For(k, 0, depth, ForKind.SERIAL, body))


def _wgmma_touches(call: Call) -> list[Touch]:
    c = call.args[3]
    nk = op.wgmma_nk(call.args[0])
    assert isinstance(c, BufferLoad) and nk is not None
    n = nk[0]
    t, v = Var("t", "int32"), Var("v", "int32")
    idx_c = _acc_element(c, t * 8 + v, None)
    iters = ((t, n // 16), (v, 8))
    return [*_wgmma_tiles(call.args), Touch(c.buffer, idx_c, False, iters), Touch(c.buffer, idx_c, True, iters)]


def _wgmma_tiles(args: Sequence[PrimExpr]) -> list[Touch]:
    """The reads of the A and B operands of a wgmma's ``(shape, a, b, c)``: the shared tiles'
    whole 64-element row segments (the swizzle permutes within one), a register A's ``k / 16``
    tiles of every lane of the warp (whose registers the warp's instruction reads)."""
    shape, a, b, _ = args
    nk = op.wgmma_nk(shape)
    assert nk is not None and isinstance(a, BufferLoad) and isinstance(b, BufferLoad)
    n, depth = nk
    out = []
    t, lane, e = Var("t", "int32"), Var("lane", "int32"), Var("e", "int32")
    if a.buffer.scope == "warp":
        *lead, t0, _, v0 = a.indices
        iters = ((t, depth // 16), (lane, WARP_SIZE), (e, 8))
        out.append(Touch(a.buffer, (*lead, t0 + t, lane, v0 + e), False, iters))
    elif a.buffer.scope == "local":  # after LowerWarpMemory: the thread's own registers
        *lead, t0, v0 = a.indices
        out.append(Touch(a.buffer, (*lead, t0 + t, v0 + e), False, ((t, depth // 16), (e, 8))))
    else:
        out.append(_segments(a, 16, depth))
    if not op.wgmma_trans_b(shape):
        out.append(_segments(b, n, depth))
    else:  # depth rows of each 64-column block of N
        r, col, s = Var("r", "int32"), Var("col", "int32"), Var("s", "int32")
        *lead, r0, c0 = b.indices
        if lead and n > SW128_ROW:
            *outer, s0 = lead
            idx = (*outer, s0 + s, r0 + r, col)
            out.append(Touch(b.buffer, idx, False, ((s, n // SW128_ROW), (r, depth), (col, SW128_ROW))))
        else:
            idx = (*lead, r0 + r, c0 // SW128_ROW * SW128_ROW + col)
            out.append(Touch(b.buffer, idx, False, ((r, depth), (col, SW128_ROW))))
    return out


def _segments(load: BufferLoad, rows: int, depth: int) -> Touch:
    """``rows`` rows of a K-major swizzled tile from ``load`` on, whole 64-element segments (of
    each 64-column block along the dimension before the rows, for a ``depth`` past 64)."""
    r, col, s = Var("r", "int32"), Var("col", "int32"), Var("s", "int32")
    *lead, r0, c0 = load.indices
    if depth > SW128_ROW and lead:
        *outer, s0 = lead
        idx = (*outer, s0 + s, r0 + r, col)
        return Touch(load.buffer, idx, False, ((s, depth // SW128_ROW), (r, rows), (col, SW128_ROW)))
    idx = (*lead, r0 + r, c0 // SW128_ROW * SW128_ROW + col)
    return Touch(load.buffer, idx, False, ((r, rows), (col, SW128_ROW)))


def _store_at(dst: BufferLoad, src: BufferLoad, lane: PrimExpr, layout: FragmentLayout,
              e: PrimExpr) -> BufferStore:  # fmt: skip
    """``dst``'s tile element of the lane's fragment element ``e`` := that element."""
    row, col = layout.to_row_col(lane, e)
    idx = list(dst.indices)
    idx[-2], idx[-1] = idx[-2] + row, idx[-1] + col
    return BufferStore(dst.buffer, op.cast(BufferLoad(src.buffer, _elem(src, e)), dst.dtype), tuple(idx))


def _collect(s: Stmt, iters: tuple[tuple[Var, int], ...], out: list[Touch]) -> None:
    if isinstance(s, For):
        _collect(s.body, (*iters, (s.loop_var, _int(s.extent))), out)
        return
    assert isinstance(s, BufferStore)
    if isinstance(s.value, BufferLoad):
        out.append(Touch(s.value.buffer, s.value.indices, False, iters))
    out.append(Touch(s.buffer, s.indices, True, iters))


def per_lane_stmt(call: Call, lane: PrimExpr | None = None, kind: ForKind = ForKind.SERIAL) -> Stmt:
    """``mma_fill``, ``mma_store`` or ``ptx_wgmma`` of one lane as the loop it stands for
    (``kind``: the loop's kind; ``ptx_wgmma``: the lane's accumulator elements, each summed over
    ``k`` in order, its operands read through the 128-byte swizzle, see
    [`ptx_wgmma`][loopir.ir.op.ptx_wgmma]).

    ``lane`` (default: the lane index of the fragment operand) places ``mma_store``'s
    elements in the tile.

    Raises
    ------
    ValueError
        For another call, or an ``mma_store`` of a local fragment without ``lane``.
    """
    if call.op in op.WGMMA_ISSUES:
        return _wgmma_stmt(call, lane, kind)
    e = Var("e", "int32")
    if call.op == "mma_fill":
        count, dst, value = call.args
        assert isinstance(dst, BufferLoad)
        return For(e, 0, _int(count), kind, BufferStore(dst.buffer, value, _elem(dst, e)))
    if call.op == "mma_store":
        _rows, cols, dst, src = call.args
        assert isinstance(dst, BufferLoad) and isinstance(src, BufferLoad)
        lane = lane if lane is not None else fragment_lane(src)
        if lane is None:
            raise ValueError(f"per_lane_stmt: the lane of {call} is unknown (a local fragment)")
        layout = accumulator_layout(_int(cols))
        if kind is ForKind.UNROLLED and layout.pairs_adjacent:
            # for the emitted code: neighbouring pairs as one 2-element vector store (a lane's
            # pair shares a sector: half the store instructions, no partly written sectors)
            e0, e1 = Var("e_pair", "int32"), Var("e_lane", "int32")
            inner = For(e1, 0, 2, ForKind.VECTORIZED, _store_at(dst, src, lane, layout, e0 * 2 + e1))
            return For(e0, 0, layout.locals // 2, kind, inner)
        return For(e, 0, layout.locals, kind, _store_at(dst, src, lane, layout, e))
    raise ValueError(f"per_lane_stmt: {call.op} is not a per-lane tensor-core call ({op.TENSOR_CORE_OPS})")
