"""The DietCode dense (GEMM) schedule: ``C[i, j] = sum_k A[i, k] * B[k, j]``.

Tiles: i split ``[None, 1, 8, 8, 2]``, j ``[None, 2, 32, 1, 2]``, k ``[None, 1, 4]``; loops
ordered ``i0 j0 i1 j1 i2 j2 k0 k1 i3 j3 k2 i4 j4``; ``(i0, j0)`` fused to ``blockIdx.x``,
``(i1, j1)`` to ``vthread.x`` and ``(i2, j2)`` to ``threadIdx.x`` (256 threads). C is
accumulated in a local cache written back under the thread loop; A and B tiles are fetched
into shared memory at ``k0`` cooperatively by the 256 threads with ``vec``-wide vectors; the
reduction's init is decomposed at ``k0``. With ``stages`` 2 or 3 the ``k0`` loop is a software
pipeline: the tiles of the next iterations are fetched with ``cp.async`` while this one is
computed (``loopir.passes.software_pipeline``).
"""

from __future__ import annotations

from typing import Any

from loopir.errors import ScheduleError
from loopir.ir.stmt import PrimFunc
from loopir.schedule import Schedule

THREADS = 256
"""Threads per block of the default tiles: the product of the i2 and j2 tiles (8 * 32)."""


def dense_func(M: Any, K: Any, N: Any, dtype: str = "float32") -> PrimFunc:
    """The unscheduled dense function ``C[M, N] = A[M, K] @ B[K, N]`` (sizes: ints or Vars)."""
    from loopir import te

    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def dense(M: Any, K: Any, N: Any, vec: int = 4, dtype: str = "float32", stages: int = 1, *,
          i_tiles: tuple[int, int, int, int] = (1, 8, 8, 2), j_tiles: tuple[int, int, int, int] = (2, 32, 1, 2),
          k_tiles: tuple[int, int] = (1, 4), unroll: bool = False, pad_a: int = 0) -> Schedule:  # fmt: skip
    """The DietCode dense schedule for any ``M, K, N`` (ints, or Vars for symbolic sizes).

    Parameters
    ----------
    M, K, N
        Problem sizes. Non-multiples of the tiles (128 x 128 x 4) are handled with predicates.
    vec
        Vector width of the cooperative shared-memory fetch.
    dtype
        Element type of A, B and C.
    stages
        Software pipeline depth of the ``k0`` loop: 1 (none), or 2-3: the shared tiles are
        multi-buffered and fetched with ``cp.async`` that many iterations ahead
        ([`pipeline`][loopir.examples.dense.pipeline]).
    i_tiles, j_tiles, k_tiles
        The inner split factors of ``i`` (``i1 i2 i3 i4``), ``j`` (``j1 j2 j3 j4``) and ``k``
        (``k1 k2``); the defaults are DietCode's sample tiles. ``i2 * j2`` threads per block
        (at most 1024), ``i1 * j1`` virtual threads, a register tile of ``i3 * i4`` x ``j3 * j4``
        per virtual thread.
    unroll
        Unroll ``k1`` and ``k2`` (the K step): nvcc then reads a thread's A rows four K steps
        at a time and its B columns ``j4`` at a time as 16-byte shared loads (``LDS.128``) when
        ``k2`` and ``j4`` are 4.
    pad_a
        Pad the rows of A's shared tile from ``k1 * k2`` to ``k1 * k2 + pad_a`` elements
        (``storage_align``; ``0 <= pad_a < k1 * k2``, a multiple of 4 keeps 16-byte rows), so
        that two thread rows' A loads fall in other banks.

    Returns
    -------
    Schedule
        The schedule; ``sch.func`` is the scheduled function and ``sch.trace`` its trace.
    """
    if isinstance(vec, bool) or not isinstance(vec, int) or vec <= 0:
        raise ScheduleError(f"vec must be a positive int, got {vec!r}", primitive="examples.dense")
    if isinstance(stages, bool) or not isinstance(stages, int) or not 1 <= stages <= 4:
        raise ScheduleError(f"stages must be an int in 1..4, got {stages!r}", primitive="examples.dense")
    threads = i_tiles[1] * j_tiles[1]
    if threads > 1024:
        raise ScheduleError(f"i2 * j2 = {threads} threads per block; at most 1024", primitive="examples.dense")
    sch = Schedule(dense_func(M, K, N, dtype))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1, i2, i3, i4 = sch.split(i, [None, *i_tiles])
    j0, j1, j2, j3, j4 = sch.split(j, [None, *j_tiles])
    k0, k1, k2 = sch.split(k, [None, *k_tiles])
    sch.reorder(i0, j0, i1, j1, i2, j2, k0, k1, i3, j3, k2, i4, j4)
    if unroll:
        sch.unroll(k1)
        sch.unroll(k2)
    bx = sch.fuse(i0, j0)
    sch.bind(bx, "blockIdx.x")
    vx = sch.fuse(i1, j1)
    sch.bind(vx, "vthread.x")
    tx = sch.fuse(i2, j2)
    sch.bind(tx, "threadIdx.x")
    c_local = sch.cache_write(c, "C", "local")
    sch.reverse_compute_at(c_local, tx)
    for name in ("A", "B"):
        shared = sch.cache_read(c, name, "shared")
        sch.compute_at(shared, k0, preserve_unit_loops=True)
        # The copy loops are the ones compute_at created below k0 (bx, vx, tx, k0 above).
        copy_loops = sch.get_loops(shared)[4:]
        fused = sch.fuse(*copy_loops)
        _, t, v = sch.split(fused, [None, threads, vec])
        sch.bind(t, "threadIdx.x")
        sch.vectorize(v)
        if name == "A" and pad_a:
            sch.storage_align(shared, 0, 0, k_tiles[0] * k_tiles[1], pad_a)
    sch.decompose_reduction(c, k0)
    pipeline(sch, k0, stages)
    return sch


def pipeline(sch: Schedule, loop: Any, stages: int, copies: int = 2) -> None:
    """Annotate ``loop`` (whose body is ``copies`` shared-tile fetches, then the compute) as a
    ``stages``-deep software pipeline with asynchronous fetches (nothing for ``stages`` 1)."""
    if stages > 1:
        sch.annotate(loop, "software_pipeline_stage", [0] * copies + [stages - 1])
        sch.annotate(loop, "software_pipeline_async_stages", [0])


def pipelined_gemm(M: Any, K: Any, N: Any, stages: int = 2, *, ti: int = 4, tj: int = 32, vi: int = 2,
                   vj: int = 2, ri: int = 4, rj: int = 2, ki: int = 32, vec: int = 4, unroll_k: bool = True,
                   pad_a: int = 4, transpose_a: bool = False, dtype: str = "float32") -> Schedule:  # fmt: skip
    """A pipelined GEMM: ``tile_gemm``'s structure with ``cp.async`` fetches ``stages`` deep.

    The defaults are the fastest configuration measured on the H200 that keeps its speed at every
    shape (docs/benchmarks.md, session 6: 30.4 TFLOP/s fp32 at 960x770x2304, 34.4 at 1024^3, 39.7 at
    4096^3, two stages): ``ti x tj`` = 4 x 32 threads, 2 x 2 virtual threads, a 4 x 2 register tile
    per virtual thread (a 32 x 128 block tile), K steps of 32, unrolled, 4-wide (16-byte) fetches,
    which become ``cp.async.cg``, and A's shared rows padded by 4; ptxas vectorizes the shared loads
    (``LDS.128``). ``transpose_a=True`` (A's tile stored ``[k, i]``) measured 32.5 / 35.9 / 40.9
    TFLOP/s, but where the block's rows do not divide ``M`` its compute keeps scalar guarded loads
    (see [`tile_gemm`][loopir.schedule.default_gpu.tile_gemm]). Every size is a parameter, so the
    schedule is tunable (the GEMM design spaces ``loopir.tune.spaces.gemm_space`` and
    ``sgemm_space`` sample the same ones).
    """
    from loopir.schedule.default_gpu import tile_gemm

    sch = Schedule(dense_func(M, K, N, dtype))
    tile_gemm(sch, "C", ti=ti, tj=tj, vi=vi, vj=vj, ri=ri, rj=rj, ki=ki, vec=vec, stages=stages,
              unroll_k=unroll_k, pad_a=pad_a, transpose_a=transpose_a)  # fmt: skip
    return sch
