"""Design spaces for [`loopir.tune.tune`][loopir.tune.search.tune]: schedule functions with sampling
instructions.

A design space is a plain Python function of ``sch`` that calls ``sch.sample_categorical`` /
``sample_perfect_tile`` and passes the sampled values to primitives; the tuner mutates the recorded
decisions and replays the trace. Every sampled value flows into a primitive's arguments (never into
a Python branch), so that a replayed trace with other decisions is the same space. The spaces here
schedule the block they are about and hand every other unscheduled block to
[`default_gpu_schedule`][loopir.schedule.default_gpu.default_gpu_schedule], so that a candidate
always builds.

- [`elementwise_space`][loopir.tune.spaces.elementwise_space]: fused spatial loops over ``threads``
  x ``lanes`` (the lanes one vector);
- [`reduction_space`][loopir.tune.spaces.reduction_space]: the default schedule's row rule (softmax,
  layernorm, RMSNorm) or cross-thread reduction, with the threads per row and the vector width
  sampled;
- [`gemm_space`][loopir.tune.spaces.gemm_space]: GEMM-like blocks (two spatial loops, optionally
  batched, and one reduction loop): block tiles, virtual threads, a 2-D thread block, register
  tiles, a K step and the width of the cooperative shared-memory fetch all sampled (the DietCode
  structure; with ``tir.enable_local_pad`` the tiles need not divide the shape).
- [`sgemm_space`][loopir.tune.spaces.sgemm_space]: the same structure around cuBLAS-class register
  tiles (up to 8 x 8 outputs per thread, the K step unrolled, 16-byte fetches, 2-3 stage
  ``cp.async`` pipelines, A's shared rows padded against bank conflicts).
- [`gpu_space`][loopir.tune.spaces.gpu_space]: picks one of the three by the function's blocks.

>>> import loopir
>>> from loopir.testing.workloads import matmul
>>> sch = loopir.Schedule(matmul(64, 32, 64).func, seed=0)
>>> gemm_space(sch)
>>> sorted({i.kind for i in sch.trace.instructions if i.kind.startswith("sample")})
['sample_categorical']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loopir.errors import ScheduleError
from loopir.schedule import Schedule
from loopir.schedule import default_gpu as dg
from loopir.schedule import gpu_patterns as pat

__all__ = ["elementwise_space", "gemm_space", "gpu_space", "reduction_space", "sgemm_space"]

THREADS = [64, 128, 256, 512, 1024]
ROW_THREADS = [32, 64, 128, 256, 512, 1024]


def _uniform(sch: Schedule, candidates: list[int]) -> Any:
    return sch.sample_categorical(candidates, [1.0] * len(candidates))


def elementwise_space(sch: Schedule) -> None:
    """Every unscheduled spatial block: its loops fused, split into blocks x ``threads`` x
    ``lanes``, the lanes vectorized (``lanes`` from the widths whose vectors the shape
    allows, as in the default schedule)."""
    dg.inline_all(sch)
    for name in reversed(pat.unscheduled_blocks(sch)):
        lanes = pat.vector_lanes(sch, name)
        if lanes is None:
            continue  # not a perfect spatial nest: left to the default schedule
        blk = sch.get_block(name)
        fused = dg.fuse_all(sch, sch.get_loops(blk))
        widths = [w for w in (1, 2, 4, 8, 16) if w <= lanes]
        _, tx, v = sch.split(fused, [None, _uniform(sch, THREADS), _uniform(sch, widths)])
        sch.bind(sch.get_loops(blk)[0], "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
        sch.vectorize(v)
    dg.default_gpu_schedule(sch)


def reduction_space(sch: Schedule) -> None:
    """Row patterns and long reductions as in the default schedule, with the threads per row
    (or per output) and the vector width of the row's output sampled."""
    dg.inline_all(sch)
    pending = pat.unscheduled_blocks(sch)
    while pending:
        name = pending.pop()
        row = pat.row_pattern(sch, name, pending)
        if row is not None:
            widths = [w for w in (1, 2, 4, 8) if w <= dg.default_vector(row.cols, row.dtype, 1)
                      and row.cols is not None and row.cols % w == 0] or [1]  # fmt: skip
            dg.per_row(sch, name, row.stats, _uniform(sch, ROW_THREADS), _uniform(sch, widths),
                       row_loops=row.depth)  # fmt: skip
            for s in row.stats:
                pending.remove(s)
        elif pat.reduction_pattern(sch, name) is not None:
            dg.reduction(sch, name, _uniform(sch, ROW_THREADS))
    dg.default_gpu_schedule(sch)


def _gemm_block(sch: Schedule) -> str | None:
    return next((n for n in pat.unscheduled_blocks(sch) if pat.is_gemm(sch, n)), None)


def _inlined_gemm(sch: Schedule, space: str) -> str:
    """Inline the elementwise blocks; the one unscheduled GEMM-like block left (or refuse)."""
    dg.inline_all(sch)
    name = _gemm_block(sch)
    if name is None:
        raise ScheduleError(f"{space}: no unscheduled GEMM-like block (two spatial loops, "
                            "optionally batched, then one reduction loop)", primitive=space)  # fmt: skip
    return name


def gemm_space(sch: Schedule) -> None:
    """[`tile_gemm`][loopir.schedule.default_gpu.tile_gemm] with every tile size sampled: threads
    ``ti`` x ``tj`` (4-32 x 8-32), virtual threads 1-2 each way, register tiles ``ri`` (1-8) x
    ``rj`` (1-4), the K step (4-32), the fetch vector width (1, 2, 4) and the software
    pipeline depth of the K loop (1-3, ``cp.async`` fetches).

    Raises
    ------
    ScheduleError
        When the function has no unscheduled GEMM-like block.
    """
    name = _inlined_gemm(sch, "gemm_space")
    dg.tile_gemm(
        sch, name, ti=_uniform(sch, [4, 8, 16, 32]), tj=_uniform(sch, [8, 16, 32]), vi=_uniform(sch, [1, 2]),
        ri=_uniform(sch, [1, 2, 4, 8]), vj=_uniform(sch, [1, 2]), rj=_uniform(sch, [1, 2, 4]),
        ki=_uniform(sch, [4, 8, 16, 32]), vec=_uniform(sch, [1, 2, 4]), stages=_uniform(sch, [1, 2, 3]),
    )  # fmt: skip
    dg.default_gpu_schedule(sch)


def sgemm_space(sch: Schedule, stages: Sequence[int] = (2, 3), transpose_a: bool = False) -> None:
    """[`tile_gemm`][loopir.schedule.default_gpu.tile_gemm] around cuBLAS-class register tiles:
    threads ``ti`` x ``tj`` (4-16 x 8-32), virtual threads 1-2 each way, register tiles ``ri``
    (2-8) x ``rj`` (2 or 4), K steps of 8-32 unrolled (``unroll_k``), 16-byte fetches, a 2- or
    3-stage ``cp.async`` pipeline and A's shared rows padded by 0 or 4 elements (``pad_a``).
    The 128 x 128 tile with 16 x 16 threads and 2 x 2 virtual threads of 4 x 4 (8 x 8 outputs
    per thread, as cuBLAS's SGEMM) is one point. Candidates whose shared tiles exceed 48 KB
    fail to build and are dropped. ``stages`` are the depths sampled; ``transpose_a`` (not
    sampled: a plain bool) stores A's tile transposed (see ``tile_gemm``); bind either with
    `functools.partial` to search a narrower space.

    Raises
    ------
    ScheduleError
        When the function has no unscheduled GEMM-like block.
    """
    name = _inlined_gemm(sch, "gemm_space")
    dg.tile_gemm(
        sch, name, ti=_uniform(sch, [4, 8, 16]), tj=_uniform(sch, [8, 16, 32]), vi=_uniform(sch, [1, 2]),
        ri=_uniform(sch, [2, 4, 8]), vj=_uniform(sch, [1, 2]), rj=_uniform(sch, [2, 4]),
        ki=_uniform(sch, [8, 16, 32]), vec=4, stages=_uniform(sch, list(stages)), unroll_k=True,
        pad_a=_uniform(sch, [0, 4]), transpose_a=transpose_a,
    )  # fmt: skip
    dg.default_gpu_schedule(sch)


def gpu_space(sch: Schedule) -> None:
    """[`gemm_space`][loopir.tune.spaces.gemm_space] when the function has a GEMM-like block, else
    [`reduction_space`][loopir.tune.spaces.reduction_space] when it has a reduction, else
    [`elementwise_space`][loopir.tune.spaces.elementwise_space]."""
    if _gemm_block(sch) is not None:
        gemm_space(sch)
    elif any(pat.realize(sch, n)[0].block.init is not None for n in pat.unscheduled_blocks(sch)):
        reduction_space(sch)
    else:
        elementwise_space(sch)
