"""Decode GEMVs: ``Y[m, n] = sum_k X[m, k] * W[n, k]`` for a few rows ``m`` (M <= 16).

A GEMM tile of 64-128 rows is mostly idle at M = 1-16, and the time is the read of ``W``. The
schedule of [`gemv`][loopir.schedule.gemv.gemv] gives each output column ``n`` one warp
(``warps`` columns per thread block, on ``threadIdx.y``); the warp's 32 lanes split ``k``, each
reading runs of 16 bytes of ``W``'s row (and of ``X``'s rows, which every warp shares through the
caches), and each lane keeps the M partial sums of its column in registers (``rfactor`` over the
lanes, the partials a ``local`` buffer with one slot per lane, which
[`PrivatizeThreadLocals`][loopir.passes.thread_registers.PrivatizeThreadLocals] makes the lane's
registers). The partials are then summed across the warp with shuffles, one row at a time::

    for n_o in T.thread_binding(N // warps, "blockIdx.x"):
        for n_i in T.thread_binding(warps, "threadIdx.y"):
            for lane in T.thread_binding(32, "threadIdx.x"):     # Y_rf: M partials per lane
                for ko in T.serial(K // 256 // unroll):
                    for ku in T.unroll(unroll):
                        for m in T.unroll(M):
                            for kv in T.unroll(8):               # one 16-byte load of W and of X
                                Y_rf[lane, m, n] += X[m, k] * W[n, k]
            for m in T.unroll(M):
                for lane in T.thread_binding(32, "threadIdx.x"):
                    Y[m, n] = sum over the warp of Y_rf[lane, m, n]
"""

from __future__ import annotations

from loopir.ir import dtype as dt
from loopir.ir.expr import IntImm, Var
from loopir.ir.stmt import IterKind
from loopir.schedule import gpu_patterns as pat
from loopir.schedule.schedule import Schedule

__all__ = ["MAX_GEMV_ROWS", "gemv", "gemv_shape"]

#: The most rows ``M`` the GEMV schedule takes (more: a GEMM tile is used well enough).
MAX_GEMV_ROWS = 16
_LANES = 32


def gemv_shape(sch: Schedule, name: str, warps: int = 4) -> tuple[int, int, int, int] | None:
    """``(M, N, K, vector)`` when block ``name`` is ``Y[m, n] = sum_k f(X[m, k], W[n, k])``
    (alone in its nest of loops ``m, n, k``, constant sizes), with ``M <= MAX_GEMV_ROWS``, ``k``
    the last, contiguous index of every operand, ``N`` a multiple of ``warps`` and ``K`` of
    ``32 * vector`` (``vector``: 16 bytes of the narrowest operand); else None."""
    if not pat.is_gemm(sch, name):
        return None
    br = pat.realize(sch, name)[0]
    blk = br.block
    loops = pat.nest_loops(sch, name)
    if loops is None or len(loops) != 3 or len(blk.iter_vars) != 3:
        return None
    exts = pat.constant_extents(loops)
    if exts is None:
        return None
    m, n, k = exts
    k_var = blk.iter_vars[2].var
    if blk.iter_vars[2].kind is not IterKind.REDUCE:
        return None
    reads = [r for r in blk.reads if r.buffer not in {w.buffer for w in blk.writes}]
    if len(reads) != 2:
        return None
    for r in reads:  # k is the last index of both operands, alone
        last = r.region[-1].min
        if not (isinstance(last, Var) and last is k_var) or any(
            isinstance(x.min, Var) and x.min is k_var for x in r.region[:-1]
        ):
            return None
        if len(r.region) != 2:
            return None
    vector = 128 // min(dt.bits(r.buffer.dtype) for r in reads)
    if m > MAX_GEMV_ROWS or n % warps or k % (_LANES * vector):
        return None
    return m, n, k, vector


def gemv(sch: Schedule, name: str, warps: int = 4, unroll: int | None = None) -> None:
    """Schedule GEMV block ``name`` (see the module docstring); ``unroll`` K steps of 256
    (fp16) per lane are unrolled together, so that that many loads of ``W`` are in flight
    (default: 4 up to 4 rows, 2 up to 8, else 1; ptxas spilled a few bytes at M = 8 with 4 and
    at M = 12 with 2 on sm_90a, nvcc 13.0).

    Raises
    ------
    ScheduleError
        When the block is not a GEMV [`gemv_shape`][loopir.schedule.gemv.gemv_shape] accepts.
    """
    from loopir.errors import ScheduleError

    shape = gemv_shape(sch, name, warps)
    if shape is None:
        raise ScheduleError(f"gemv: block {name!r} is not a GEMV with at most {MAX_GEMV_ROWS} rows, "
                            "k last and contiguous in both operands", primitive="gemv", func=sch.func)  # fmt: skip
    _, _, k, vector = shape
    y = sch.get_block(name)
    _, _, kl = sch.get_loops(y)
    steps = k // (_LANES * vector)
    if unroll is None:
        unroll = 4 if shape[0] <= 4 else 2 if shape[0] <= 8 else 1
    unroll = max(1, min(unroll, steps))
    while steps % unroll:
        unroll -= 1
    ko, ku, lane, kv = sch.split(kl, [None, unroll, _LANES, vector])
    rf = sch.rfactor(lane, 0)
    *i, j, r_lane = sch.get_loops(y)  # an M of 1 may have left no loop for m
    bx, ty = sch.split(j, [None, warps])
    sch.reorder(bx, ty, *i, r_lane)
    sch.bind(bx, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(r_lane, "threadIdx.x")
    for loop in i:  # each row's partial is a register: only ever a constant index
        sch.unroll(loop)
    sch.set_scope(rf, 0, "local")
    sch.compute_at(rf, ty, preserve_unit_loops=True)
    *m, unit, r_ko, r_ku, r_lane_rf, r_kv = sch.get_loops(rf)[2:]
    sch.reorder(r_lane_rf, unit, r_ko, r_ku, *m, r_kv)
    sch.bind(r_lane_rf, "threadIdx.x")
    for loop in (r_ku, *m, r_kv):
        if isinstance(getattr(sch.get(loop), "extent", None), IntImm):
            sch.unroll(loop)
    sch.decompose_reduction(rf, r_ko)
