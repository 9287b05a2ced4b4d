"""Decode GEMVs: ``Y[m, n] = sum_k X[m, k] * W[n, k]`` for a few rows ``m`` (M <= 16).

A GEMM tile of 64-128 rows is mostly idle at M = 1-16, and the time is the read of ``W``. The
schedule of [`gemv`][loopir.schedule.gemv.gemv] gives each warp ``C`` output columns ``n``
(``warps`` warps per thread block, on ``threadIdx.y``); the warp's 32 lanes split ``k``, each
reading runs of 16 bytes of the ``C`` rows of ``W`` and of ``X``'s rows (which every warp shares
through the caches). Each lane keeps the ``M * C`` partial sums of its columns in registers
(``rfactor`` over the lanes, the partials a ``local`` buffer with one slot per lane, which
[`PrivatizeThreadLocals`][loopir.passes.thread_registers.PrivatizeThreadLocals] makes the lane's
registers). The partials are then summed across the warp with shuffles, one at a time
(``lanes`` > 32: ``k`` split over several warps per group of columns, summed through shared
memory).

With one column per warp a lane loads and converts, per 16-byte run of ``W``, ``M`` runs of
``X``: ``M + 1`` loads per run of ``W``, ``M`` conversions per element of ``W``. With ``C``
columns ([`gemv_columns`][loopir.schedule.gemv.gemv_columns], 4 from M = 2 on) a lane loads
per ``k`` step the ``C`` runs of ``W`` into registers, then per row one run of ``X`` into
registers, which all ``C`` columns' sums read: ``(M + C) / C`` loads per run of ``W`` and
``M / C`` conversions of ``X`` per element of ``W``. M = 1 keeps one column per warp and no
register copies (its form is measured at 0.85-0.88 of the copy bandwidth on the H200)::

    for n_o in T.thread_binding(N // (warps * C), "blockIdx.x"):
        for n_i in T.thread_binding(warps, "threadIdx.y"):
            for lane in T.thread_binding(32, "threadIdx.x"):       # Y_rf: M * C partials per lane
                for ko in T.serial(K // 256 // unroll):
                    for ku in T.unroll(unroll):
                        W_local[c, kv] = W[n + c, k]               # C 16-byte loads (C > 1)
                        for m in T.unroll(M):
                            X_local[kv] = X[m, k]                  # one 16-byte load (C > 1)
                            for c in T.unroll(C):
                                for kv in T.unroll(8):
                                    Y_rf[lane, m, n + c] += X_local[kv] * W_local[c, kv]
            for c in T.unroll(C):
                for m in T.unroll(M):
                    for lane in T.thread_binding(32, "threadIdx.x"):
                        Y[m, n + c] = sum over the warp of Y_rf[lane, m, n + c]

(``n = (n_o * warps + n_i) * C``, ``k = (ko * unroll + ku) * 256 + lane * 8 + kv`` for fp16;
with ``C = 1`` the sum reads ``X`` and ``W`` itself, one 16-byte load each, and the loops inside
``ku`` are ``m`` and ``kv``.) Even with every run of ``X`` reused, each element of ``W`` costs
``M`` fp32 FMAs: at M = 16 that is all of the H200's fp32 FMA rate at the copy bandwidth, so
the form cannot reach it there (cuBLAS uses tensor cores).
"""

from __future__ import annotations

from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import IntImm, Var
from loopir.ir.stmt import IterKind
from loopir.schedule import gpu_patterns as pat
from loopir.schedule.schedule import BlockRV, LoopRV, Schedule

__all__ = ["MAX_GEMV_ROWS", "gemv", "gemv_columns", "gemv_shape"]

#: The most rows ``M`` the GEMV schedule takes (more: a GEMM tile is used well enough).
MAX_GEMV_ROWS = 16
_LANES = 32
#: Output columns per warp from two rows on. Measured on the H200 (K = 4096, N = 4096 / 11008,
#: fp16, one K step per loop iteration; fraction of the copy bandwidth): 4 columns 0.93 / 0.84 at
#: M = 2, 0.70 / 0.78 at M = 4, 0.46 / 0.46 at M = 8, 0.30 / 0.30 at M = 16; 8 columns 0.55 /
#: 0.61 at M = 2, 0.39 / 0.53 at M = 8 (half as many warps, 104-240 registers per thread: too
#: few loads in flight at N = 4096); 2 columns 0.27 / 0.30 at M = 16.
_COLUMNS = 4


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


def gemv_columns(rows: int, n: int, warps: int = 4) -> int:
    """The output columns per warp [`gemv`][loopir.schedule.gemv.gemv] takes by default for
    ``rows`` rows and ``n`` columns: 1 for one row (the measured M = 1 form), else 4, halved
    until it divides ``n / warps`` (an ``n`` of ``warps`` times an odd number gets 1)."""
    columns = 1 if rows <= 1 else _COLUMNS
    while (n // warps) % columns:
        columns //= 2
    return columns


def _default_unroll(rows: int, columns: int) -> int:
    """K steps per lane unrolled together. One column: 4 up to 4 rows, 2 up to 8, else 1 (ptxas
    spilled a few bytes at M = 8 with 4 and at M = 12 with 2 on sm_90a, nvcc 13.0). More
    columns: 1, the ``columns`` loads of ``W`` of a step being in flight together (more steps per
    iteration are not measured in this form)."""
    if columns == 1:
        return 4 if rows <= 4 else 2 if rows <= 8 else 1
    return 1


def gemv(sch: Schedule, name: str, warps: int = 4, unroll: int | None = None,
         columns: int | None = None, lanes: int = _LANES) -> None:  # fmt: skip
    """Schedule GEMV block ``name`` (see the module docstring).

    Parameters
    ----------
    sch, name
        The schedule and the GEMV block.
    warps
        Groups of columns per thread block (``threadIdx.y``): warps, with 32 ``lanes``.
    unroll
        K steps of 32 16-byte runs unrolled together per lane, so that that many loads of each
        of ``W``'s rows are in flight (default: from M and ``columns``, see ``_default_unroll``);
        lowered to a divisor of the number of steps.
    columns
        Output columns per warp (default: [`gemv_columns`][loopir.schedule.gemv.gemv_columns]);
        must divide ``N / warps``.
    lanes
        Threads splitting ``k`` for each group of columns (``threadIdx.x``): 32, one warp, by
        default; a multiple of 32 splits ``K`` over that many warps, whose partials are then
        combined through shared memory.

    Raises
    ------
    ScheduleError
        When the block is not a GEMV [`gemv_shape`][loopir.schedule.gemv.gemv_shape] accepts,
        ``columns`` does not divide ``N / warps``, or ``lanes`` is not whole warps that split
        ``K`` into whole runs.
    """
    from loopir.errors import ScheduleError

    shape = gemv_shape(sch, name, warps)
    if shape is None:
        raise ScheduleError(f"gemv: block {name!r} is not a GEMV with at most {MAX_GEMV_ROWS} rows, "
                            "k last and contiguous in both operands", primitive="gemv", func=sch.func)  # fmt: skip
    rows, n, k, vector = shape
    if columns is None:
        columns = gemv_columns(rows, n, warps)
    if columns < 1 or (n // warps) % columns:
        raise ScheduleError(f"gemv: {columns} columns per warp do not divide N / warps = {n} / {warps}",
                            primitive="gemv", func=sch.func)  # fmt: skip
    if lanes % _LANES or k % (lanes * vector) or lanes * warps > 1024:
        raise ScheduleError(f"gemv: {lanes} lanes per column group must be whole warps, at most 1024 "
                            f"threads with {warps} groups, and split K = {k} into {vector}-element runs",
                            primitive="gemv", func=sch.func)  # fmt: skip
    steps = k // (lanes * vector)
    if unroll is None:
        unroll = _default_unroll(rows, columns)
    unroll = max(1, min(unroll, steps))
    while steps % unroll:
        unroll -= 1
    x_buf, w_buf = _operands(sch, name)
    y = sch.get_block(name)
    _, _, kl = sch.get_loops(y)
    sch.split(kl, [None, unroll, lanes, vector])
    rf = sch.rfactor(sch.get_loops(y)[-2], 0)  # the lanes' loop
    *i, j, r_lane = sch.get_loops(y)  # an M of 1 may have left no loop for m
    bx, ty, *c = sch.split(j, [None, warps, columns] if columns > 1 else [None, warps])
    sch.reorder(bx, ty, *c, *i, r_lane)
    sch.bind(bx, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(r_lane, "threadIdx.x")
    for loop in (*c, *i):  # each partial is a register: only ever a constant index
        sch.unroll(loop)
    sch.set_scope(rf, 0, "local")
    sch.compute_at(rf, ty, preserve_unit_loops=True)
    # Under the warp: m and the column (both kept, of extent 1 too), the K steps' loops that
    # are longer than 1 (ko: steps // unroll, ku: unroll), the lanes, the 16-byte run.
    m, col, *k_outer, r_lane_rf, r_kv = sch.get_loops(rf)[2:]
    r_ko = k_outer[0] if steps > unroll else None
    r_ku = k_outer[-1] if unroll > 1 else None
    ks = [x for x in (r_ko, r_ku) if x is not None]
    if columns == 1:  # the M = 1 form, as measured
        sch.reorder(r_lane_rf, col, *ks, m, r_kv)
    else:  # each run of X is used for every column before the next is loaded
        sch.reorder(r_lane_rf, *ks, m, col, r_kv)
    sch.bind(r_lane_rf, "threadIdx.x")
    for loop in [x for x in (r_ku, m, col if columns > 1 else None, r_kv) if x is not None]:
        if isinstance(getattr(sch.get(loop), "extent", None), IntImm):
            sch.unroll(loop)
    if columns > 1:
        # Per K step the C runs of W first (their loads in flight together), then per row one
        # run of X in registers, read by all C columns: X is loaded and converted once per C
        # columns instead of once per column.
        _copy_to_registers(sch, sch.cache_read(rf, w_buf, "local"), rf, ks[-1] if ks else r_lane_rf)
        _copy_to_registers(sch, sch.cache_read(rf, x_buf, "local"), rf, m)
    sch.decompose_reduction(rf, (ks or [m if columns > 1 else col])[0])


def _operands(sch: Schedule, name: str) -> tuple[Buffer, Buffer]:
    """``(X, W)`` of GEMV block ``name``: ``X`` the operand indexed by the row ``m``."""
    blk = pat.realize(sch, name)[0].block
    m_var = blk.iter_vars[0].var
    reads = [r for r in blk.reads if r.buffer not in {w.buffer for w in blk.writes}]
    x, w = sorted(
        reads, key=lambda r: not (isinstance(r.region[0].min, Var) and r.region[0].min is m_var)
    )
    return x.buffer, w.buffer


def _copy_to_registers(sch: Schedule, block: BlockRV, consumer: BlockRV, loop: LoopRV) -> None:
    """Move the ``local`` copy ``block`` under ``loop`` (one of ``consumer``'s), its own loops
    unrolled: constant indices, so registers; the innermost 16 bytes become one vector load."""
    depth = [sch.get(x) for x in sch.get_loops(consumer)].index(sch.get(loop)) + 1
    sch.compute_at(block, loop)
    for x in sch.get_loops(block)[depth:]:
        sch.unroll(x)
