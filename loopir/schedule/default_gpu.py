"""A default GPU schedule for blocks nobody scheduled (TVM's DefaultGPUSchedule and dlight).

[`default_gpu_schedule`][loopir.schedule.default_gpu.default_gpu_schedule] gives every root-level
block whose loops are unbound a schedule that runs on the GPU, so that
``loopir.build(f, target="cuda")`` works on an unscheduled te function. It uses ordinary primitives
on the caller's [`Schedule`][loopir.schedule.schedule.Schedule], so what it did is in the trace. The
rules, tried in this order (a rule whose primitives refuse the block is dropped and the next one
tried on an unchanged schedule):

``tensor_core`` (first, and only with ``tensor_cores``)
    a GEMM on float16 / bfloat16 inputs with a float32 (or float16) accumulator that CUTLASS did
    not take (``[batch,] i, j, k``, constant sizes, i and j at least 16): the tensor-core schedule
    of [`loopir.schedule.tensor_core_gemm`][loopir.schedule.tensor_core_gemm] (``ldmatrix`` and
    ``mma.sync``, sm_80+), tiles from
    [`default_params`][loopir.schedule.tensor_core_gemm.default_params], padded where the sizes
    are off the tiles; an elementwise producer of an operand is computed in its shared fetch, a
    conversion of the result in its stores, and elementwise consumers (a bias, an activation,
    inlined into one) as C's tile is copied out of shared memory. With ``wgmma`` (the CUDA
    target on a Hopper GPU), a GEMM whose B is ``[N, K]`` with a float32 accumulator and M, N
    of at least 64 goes on ``wgmma`` instead (sm_90a), in ``hopper_gemm``'s default form where
    it fits (TMA copies, a producer warpgroup, a persistent grid in groups of 8 block rows, C
    stored from the fragments with guards, a bias or an activation applied there too;
    [`wgmma_ws_params`][loopir.schedule.tensor_core_gemm.wgmma_ws_params]: K a multiple of 8, no
    batch, no elementwise producer of an operand), else with a ``cp.async`` pipeline (tiles from
    [`wgmma_params`][loopir.schedule.tensor_core_gemm.wgmma_params]). A decode GEMM of more
    than ``gemv_rows`` and at most ``decode_rows`` rows (B ``[N, K]``) is one 16-row tile of
    ``mma.sync`` ([`skinny_params`][loopir.schedule.tensor_core_gemm.skinny_params]).
``inline``
    a spatial block that writes an intermediate buffer is inlined into its consumers
    (``compute_inline``), so that an elementwise chain is one kernel.
``rows``
    a spatial block ``Y`` over ``(rows..., cols...)`` and the reduction blocks whose results
    ``Y`` reads per row (softmax, layernorm, RMSNorm): one thread block per row; each
    reduction is computed by the row's threads and combined across them into shared
    memory (a cross-thread reduction); ``Y``'s columns are strided over the threads, as 16-byte
    vectors when the row allows ([`per_row`][loopir.schedule.default_gpu.per_row]).
``gemv``
    a GEMM with at most ``gemv_rows`` rows whose reduced index is the last, contiguous one of
    both operands (``Y = X W^T`` in decode): a warp per output column (4 columns from M = 2 on,
    [`gemv_columns`][loopir.schedule.gemv.gemv_columns]), the lanes splitting K in 16-byte runs,
    the rows' partial sums in registers ([`gemv`][loopir.schedule.gemv.gemv]);
    tried before ``tensor_core`` too.
``gemm``
    a GEMM-like block (two spatial loops of at least 64, optionally batched, then one reduction loop
    of at least 16) that CUTLASS did not take: DietCode's sample tiling
    ([`tile_gemm`][loopir.schedule.default_gpu.tile_gemm], 128 x 128 tiles through shared memory,
    256 threads, 64 accumulators per thread).
``reduction``
    a reduction with at most 16384 outputs, a long reduction (at least 128 elements) and a
    contiguous reduced index (row sums, GEMV): one thread block per output, the reduction
    spread over the threads and combined across them.
``transpose``
    a 2-D spatial block reading a buffer with its two indices swapped: a padded 32 x 32 shared
    tile, coalesced on both sides ([`tile_transpose`][loopir.schedule.default_gpu.tile_transpose]).
``spatial``
    everything else, reductions included: the spatial loops fused and split over blocks of
    256 threads (one 16-byte vector per thread when every access is contiguous and the sizes
    divide); each thread runs its reduction loops itself.

>>> import loopir
>>> from loopir.testing.workloads import elementwise_chain
>>> sch = loopir.Schedule(elementwise_chain(64, 32).func)
>>> default_gpu_schedule(sch)
['inline T1', 'inline T2', 'spatial T3 (256 threads x 4 lanes)']
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import Any

from loopir.errors import ScheduleError
from loopir.ir import dtype as dt
from loopir.ir.expr import IntImm
from loopir.ir.stmt import Block, IterKind
from loopir.schedule import gpu_patterns as pat
from loopir.schedule import tensor_core_gemm as tcg
from loopir.schedule.gemv import MAX_GEMV_ROWS, gemv, gemv_columns, gemv_shape
from loopir.schedule.gpu_patterns import unscheduled_blocks
from loopir.schedule.schedule import Schedule
from loopir.schedule.trace import BlockRV, LoopRV

__all__ = [
    "GEMM_TILES", "MAX_ROW_REGISTERS", "cross_thread", "default_gpu_schedule", "default_threads", "default_vector",
    "fuse_all", "inline_all", "per_row", "reduction", "stage_row", "stage_row_registers", "tile_gemm",
    "tile_transpose", "try_inline",
    "unscheduled_blocks",
]  # fmt: skip

logger = logging.getLogger(__name__)

THREADS = 256


# --- building blocks (also used by loopir.examples) -------------------------------------------


def default_threads(cols: Any) -> int:
    """Threads per row: 128 up to 1024 columns, else 256 (measured on the H200 for softmax and
    layernorm over 1024 and 4096 columns, docs/benchmarks.md)."""
    return 128 if isinstance(cols, int) and cols <= 1024 else 256


#: Rows a block of the ``rows`` rule's warp-per-row form.
WARP_ROWS_PER_BLOCK = 4
_WARP = 32


def row_form(cols: Any, dtype: str, depth: int = 1) -> tuple[int, int]:
    """Threads per row and rows per block of the ``rows`` rule. 16-bit rows of at most 1024
    columns in whole 16-byte vectors per lane take a warp each, 4 rows a block (the row's
    statistics are warp shuffles, no shared-memory round; measured on the H200 for softmax,
    layernorm and RMSNorm over 32768 x 1024: 0.87-0.89 of copy against 0.73-0.88 with 128
    threads a row), 16-bit rows of up to 4096 columns 128 threads (0.80 against 0.72 for softmax
    over 4096 columns, the others alike; docs/benchmarks.md, session 14); others
    [`default_threads`][loopir.schedule.default_gpu.default_threads], one row a block."""
    if isinstance(cols, int) and dt.bits(dtype) == 16:
        if depth == 1 and cols <= 1024 and cols % (_WARP * pat.vector_width(dtype)) == 0:
            return _WARP, WARP_ROWS_PER_BLOCK
        if 1024 < cols <= 4096:
            return 128, 1
    return default_threads(cols), 1


def default_vector(cols: Any, dtype: str, threads: int) -> int:
    """Output elements per thread computed as one 16-byte vector (4 floats, 8 halves) when
    every thread's share of a row is whole vectors, else 1."""
    width = pat.vector_width(dtype)
    return width if isinstance(cols, int) and cols % (threads * width) == 0 else 1


def fuse_all(sch: Schedule, loops: list[LoopRV]) -> LoopRV:
    """``loops`` fused into one; a single loop is returned as it is (no instruction)."""
    return sch.fuse(*loops) if len(loops) > 1 else loops[0]


def cross_thread(sch: Schedule, block: BlockRV, threads: int, reduce_loops: int = 1, vector: int = 1) -> None:
    """Fuse ``block``'s last ``reduce_loops`` loops and split them into ``threads`` strided
    parts on threadIdx.x (a cross-thread reduction). With ``vector`` > 1 each thread reduces
    runs of ``vector`` consecutive elements (an unrolled innermost loop, which the CUDA emitter
    feeds from one 16-byte load when the run is contiguous and aligned)."""
    loops = sch.get_loops(block)
    _thread_strided(sch, fuse_all(sch, loops[-reduce_loops:]), threads, vector, sch.unroll)


def _thread_strided(sch: Schedule, loop: LoopRV, threads: int, vector: int, mark: Callable[[LoopRV], None]) -> None:
    """Split ``loop`` into ``[outer, threads, vector]`` (``[outer, threads]`` for a vector of
    1), the thread part outermost and bound to threadIdx.x, the vector part marked by ``mark``
    (``sch.unroll``, ``sch.vectorize``): each thread takes runs of ``vector`` consecutive
    iterations, ``threads * vector`` apart."""
    if vector > 1:
        outer, tx, v = sch.split(loop, [None, threads, vector])
        sch.reorder(tx, outer, v)
        mark(v)
    else:
        outer, tx = sch.split(loop, [None, threads])
        sch.reorder(tx, outer)
    sch.bind(tx, "threadIdx.x")


def per_row(sch: Schedule, out: str, stats: list[str], threads: int, vector: int = 1,
            cache_row: str | None = None, row_loops: int = 1, cache_scope: str = "shared",
            stat_vector: int | None = None, rows_per_block: int = 1) -> None:  # fmt: skip
    """One thread block per row of ``out``; its statistics reduced across the row's threads.

    ``out``'s first ``row_loops`` loops (fused) are bound to blockIdx.x, the rest (fused) are
    strided over ``threads`` threads (``vector`` elements each, as one vector). Each block of
    ``stats`` is computed in the row's block, reduced across the threads into ``shared``
    memory. ``cache_row`` names an input read once per row into shared memory, from which
    every pass over the row reads ([`stage_row`][loopir.schedule.default_gpu.stage_row]);
    ``cache_scope="local"`` keeps each thread's part of the row in its registers instead
    ([`stage_row_registers`][loopir.schedule.default_gpu.stage_row_registers]).
    ``stat_vector`` (default ``vector``) is the run length of the statistics' reductions.
    ``rows_per_block`` > 1 gives each block that many rows, one per ``threadIdx.y`` (with 32
    ``threads``, a warp per row: its reductions are shuffles, no shared-memory round).
    """
    y = sch.get_block(out)
    loops = sch.get_loops(y)
    i = fuse_all(sch, loops[:row_loops])
    ty: LoopRV | None = None
    extent = _extent(sch, i)
    if extent is not None:  # no more rows a block than there are
        rows_per_block = min(rows_per_block, extent)
    if rows_per_block > 1:
        i, ty = sch.split(i, [None, rows_per_block])
        sch.bind(ty, "threadIdx.y")
    sch.bind(i, "blockIdx.x")
    _thread_strided(sch, fuse_all(sch, loops[row_loops:]), threads, vector, sch.vectorize)
    for name in reversed(stats):  # consumers first: each lands before what reads it
        blk = sch.get_block(name)
        # shared before compute_at: the scope at compute_at picks the region (semantics.md)
        sch.set_scope(blk, 0, "shared")
        sch.compute_at(blk, i, preserve_unit_loops=True)
        if ty is not None:  # the block's rows (fused), one per threadIdx.y as in the output's nest
            sch.bind(fuse_all(sch, sch.get_loops(blk)[1:1 + row_loops]), "threadIdx.y")
        cross_thread(sch, blk, threads, _reduce_iter_count(sch, blk), vector if stat_vector is None else stat_vector)
    if cache_row is not None and cache_scope == "local":
        stage_row_registers(sch, [*stats, out], cache_row, i, threads, vector, ty is not None)
    elif cache_row is not None:
        stage_row(sch, [*stats, out], cache_row, i, threads)


#: The most row elements a thread keeps in registers (the row rule's register staging).
MAX_ROW_REGISTERS = 32


def stage_row_registers(sch: Schedule, readers: list[str], buffer: str, row: LoopRV, threads: int,
                        vector: int, row_threads: bool = False) -> None:  # fmt: skip
    """Read each thread's part of the block's row of 2-D ``buffer`` from global memory once, in
    ``vector``-wide loads, into a ``local`` cache from which every block of ``readers`` reads.

    The cache is laid out ``[row, jo, tx, v]`` for column ``jo * threads * vector + tx * vector
    + v``, the layout of every pass over the row (``per_row`` with the same ``threads`` and
    ``vector``), so that each thread reads only its own slot ``tx``; lowering for CUDA
    ([`PrivatizeThreadLocals`][loopir.passes.thread_registers.PrivatizeThreadLocals]) makes the
    slot the thread's registers. The row length must be a multiple of ``threads * vector``.
    ``row_threads``: ``row`` holds several rows, one per ``threadIdx.y`` (``per_row``'s
    ``rows_per_block``); the cache's row loop is bound alike, its slot per row made private too.
    """
    blocks = [sch.get_block(n) for n in readers]
    tile = sch.cache_read(blocks[0], buffer, "local", consumer_blocks=blocks)
    sch.compute_at(tile, row, preserve_unit_loops=True)
    if row_threads:
        sch.bind(sch.get_loops(tile)[1], "threadIdx.y")
    span = threads * vector
    sch.transform_layout(tile, 0, f"lambda a0, a1: (a0, a1 // {span}, a1 % {span} // {vector}, a1 % {vector})")
    _thread_strided(sch, sch.get_loops(tile)[-1], threads, vector, sch.vectorize)


def stage_row(sch: Schedule, readers: list[str], buffer: str, row: LoopRV, threads: int) -> None:
    """Read the block's row of ``buffer`` from global memory once, in 16-byte vectors, into
    shared memory, from which every block of ``readers`` reads."""
    blocks = [sch.get_block(n) for n in readers]
    tile = sch.cache_read(blocks[0], buffer, "shared", consumer_blocks=blocks)
    sch.compute_at(tile, row, preserve_unit_loops=True)
    col = sch.get_loops(tile)[-1]
    width = pat.vector_width(_block(sch, tile).writes[0].buffer.dtype)
    extent = _extent(sch, col)
    if extent is None or extent % (threads * width) != 0:
        width = 1  # a ragged row: scalar copies (the vector path needs whole vectors)
    parts = sch.split(col, [None, threads, width] if width > 1 else [None, threads])
    sch.bind(parts[1], "threadIdx.x")
    if width > 1:
        sch.vectorize(parts[2])


def tile_transpose(sch: Schedule, block: BlockRV, buffer: str | None, pad: bool = True) -> None:
    """``B[j, i] = f(A[i, j])`` through a 32 x 32 shared tile of ``buffer`` (None: no tile,
    strided reads): coalesced reads and writes, 32 x 8 threads, four rows each. ``pad`` pads
    the tile's rows to 33 elements, so that a warp reading a column hits 32 banks."""
    j, i = sch.get_loops(block)
    j0, j1 = sch.split(j, [None, 32])
    i0, i1 = sch.split(i, [None, 32])
    j10, j11 = sch.split(j1, [None, 8])
    sch.reorder(j0, i0, j11, i1, j10)
    sch.bind(j0, "blockIdx.y")
    sch.bind(i0, "blockIdx.x")
    sch.bind(j11, "threadIdx.y")
    sch.bind(i1, "threadIdx.x")
    if buffer is None:
        return
    tile = sch.cache_read(block, buffer, "shared")
    sch.compute_at(tile, i0)
    ax0, ax1 = sch.get_loops(tile)[2:]
    a0, a1 = sch.split(ax0, [None, 8])
    sch.reorder(a1, ax1, a0)
    sch.bind(a1, "threadIdx.y")
    sch.bind(ax1, "threadIdx.x")
    if pad:
        sch.storage_align(tile, 0, 0, 32, 1)


def tile_gemm(sch: Schedule, name: str, ti: Any, tj: Any, vi: Any = 1, vj: Any = 1, ri: Any = 1, rj: Any = 1,
              ki: Any = 4, vec: Any = 1, stages: Any = 1, unroll_k: bool = False, pad_a: Any = 0,
              transpose_a: bool = False) -> None:  # fmt: skip
    """The DietCode GEMM structure for GEMM-like block ``name`` (``[batch..,] i, j, k``).

    ``i -> [bi, vi, ti, ri]``, ``j -> [bj, vj, tj, rj]``, ``k -> [ko, ki]``; loops
    ``b.. bi bj vi vj ti tj ko ki ri rj``; ``(bi, bj)`` fused to blockIdx.x (the batch loops to
    blockIdx.y), ``(vi, vj)`` to vthread.x, ``ti``/``tj`` to threadIdx.y/x; the output
    accumulated in a local cache; each operand's tile fetched into shared memory at ``ko`` by
    the ``ti x tj`` threads, ``vec`` elements each as one vector; the init decomposed at
    ``ko``. The sizes are ints or sampled values (``sch.sample_categorical``). ``stages`` > 1
    makes ``ko`` a software pipeline of that depth with ``cp.async`` fetches.

    ``unroll_k`` (a plain bool, never sampled) unrolls ``ki``: with the whole K step unrolled,
    nvcc reads a thread's rows of A four K steps at a time and its columns of B four at a time
    (``ld.shared.v4`` / ``LDS.128`` both), which is what makes 8 x 8 outputs per thread
    (``vi = vj = 2``, ``ri = rj = 4``) pay. ``pad_a`` (``0 <= pad_a < ki``; a multiple of 4 keeps
    the rows 16-byte aligned) pads the rows of A's shared tile from ``ki`` to ``ki + pad_a``
    elements (``storage_align`` with factor ``ki``, offset ``pad_a``), so that the rows the two
    thread rows of a warp read at once fall in other banks. ``transpose_a`` (a plain bool) stores
    A's tile transposed, ``[k, i]`` (``transform_layout``): a thread's four consecutive rows of
    one K step are then one ``LDS.128`` (fewer registers live than four K steps of a row), A is
    fetched one element per copy (4-byte ``cp.async``), and ``pad_a`` pads the transposed rows
    to a stride of ``32 k + pad_a`` elements (``storage_align``, so that the fetch's stores fall
    in other banks). Local padding cannot relate a transposed tile's elements to its guards, so
    where the block tile does not divide M the compute keeps its guards (scalar loads): use it
    where it divides. The defaults (False, 0, False) leave the schedule as it was.
    """
    c = sch.get_block(name)
    node = _block(sch, c)
    operands = pat.operand_names(node)
    *batch, i, j, k = sch.get_loops(c)
    bi, vi_, ti_, ri_ = sch.split(i, [None, vi, ti, ri])
    bj, vj_, tj_, rj_ = sch.split(j, [None, vj, tj, rj])
    ko, ki_ = sch.split(k, [None, ki])
    sch.reorder(*batch, bi, bj, vi_, vj_, ti_, tj_, ko, ki_, ri_, rj_)
    sch.bind(sch.fuse(bi, bj), "blockIdx.x")
    if batch:
        sch.bind(fuse_all(sch, batch), "blockIdx.y")
    sch.bind(sch.fuse(vi_, vj_), "vthread.x")
    sch.bind(ti_, "threadIdx.y")
    sch.bind(tj_, "threadIdx.x")
    if unroll_k:
        sch.unroll(ki_)
    local = sch.cache_write(c, node.writes[0].buffer.name, "local")
    sch.reverse_compute_at(local, tj_)
    for n, operand in enumerate(operands):
        shared = sch.cache_read(c, operand, "shared")
        sch.compute_at(shared, ko, preserve_unit_loops=True)
        copy_loops = sch.get_loops(shared)[len(batch) + 5 :]
        transposed = n == 0 and transpose_a
        _, cy, cx, v = sch.split(sch.fuse(*copy_loops), [None, ti, tj, 1 if transposed else vec])
        sch.bind(cy, "threadIdx.y")
        sch.bind(cx, "threadIdx.x")
        sch.vectorize(v)
        padded = n == 0 and not (type(pad_a) is int and pad_a == 0)  # a sampled pad is recorded even when 0
        if transposed:
            names = [f"a{d}" for d in range(len(batch) + 2)]
            image = [*names[:-2], names[-1], names[-2]]
            sch.transform_layout(shared, 0, f"lambda {', '.join(names)}: ({', '.join(image)})")
            if padded:
                sch.storage_align(shared, 0, len(batch), 32, pad_a)
        elif padded:
            sch.storage_align(shared, 0, len(batch), ki, pad_a)
    sch.decompose_reduction(c, ko)
    if not (type(stages) is int and stages == 1):  # a sampled depth (an ExprRV) is recorded even when 1
        sch.annotate(ko, "loopir.software_pipeline_depth", stages)


# --- rules --------------------------------------------------------------------------------------


def _block(sch: Schedule, rv: BlockRV) -> Block:
    node = sch.get(rv)
    assert isinstance(node, Block)
    return node


def _reduce_iter_count(sch: Schedule, block: BlockRV) -> int:
    return sum(iv.kind is IterKind.REDUCE for iv in _block(sch, block).iter_vars)


def _extent(sch: Schedule, loop: LoopRV) -> int | None:
    ext = getattr(sch.get(loop), "extent", None)
    return ext.value if isinstance(ext, IntImm) else None


def inline_all(sch: Schedule) -> list[str]:
    """Inline every unscheduled block [`try_inline`][loopir.schedule.default_gpu.try_inline]
    accepts; the blocks inlined."""
    return [name for name in pat.unscheduled_blocks(sch) if try_inline(sch, name)]


def try_inline(sch: Schedule, name: str) -> bool:
    """Inline spatial block ``name`` into its consumers when it writes an intermediate buffer
    and ``compute_inline`` accepts it (the schedule is unchanged otherwise)."""
    return _attempt(sch, functools.partial(_inline, name=name)) is not None


def _inline(sch: Schedule, name: str) -> str | None:
    blk = pat.realize(sch, name)[0].block
    if blk.init is not None or any(iv.kind is IterKind.REDUCE for iv in blk.iter_vars):
        return None
    if any(w.buffer in set(sch.func.params) for w in blk.writes):
        return None
    sch.compute_inline(sch.get_block(name))
    return f"inline {name}"


def _rows(sch: Schedule, name: str, pending: list[str], registers: bool = False) -> str | None:
    row = pat.row_pattern(sch, name, pending)
    if row is None:
        return None
    length = _stat_length(sch, row.stats)
    threads, rows_per_block = row_form(row.cols, row.dtype, row.depth)
    if rows_per_block > 1 and length != row.cols:
        threads, rows_per_block = default_threads(row.cols), 1  # statistics over other lengths
    vector = default_vector(row.cols, row.dtype, threads)
    staged = (_register_row(sch, name, row.stats, row.depth, row.cols, threads, vector)
              if registers or rows_per_block > 1 else None)  # fmt: skip
    stat_vector = None
    if row.cols is not None and length is not None and length > row.cols:
        # short output rows over long reductions (a chunk's statistics): size for the reductions,
        # a warp per row where its reductions' reads are 16-bit runs of up to 1024
        bits = min(dt.bits(r.buffer.dtype) for n in row.stats for r in pat.realize(sch, n)[0].block.reads)
        threads, rows_per_block = default_threads(length), 1
        inner = _extent(sch, sch.get_loops(sch.get_block(name))[row.depth - 1])
        # (several row loops: a block's rows must be a box, within one value of the outer ones)
        if bits == 16 and length <= 1024 and length % (_WARP * 8) == 0 and (
                row.depth == 1 or (inner is not None and inner % WARP_ROWS_PER_BLOCK == 0)):  # fmt: skip
            threads, rows_per_block = _WARP, WARP_ROWS_PER_BLOCK
        vector = default_vector(row.cols, row.dtype, threads)
        stat_vector = 128 // bits if length % (threads * (128 // bits)) == 0 else 1
    per_row(sch, name, row.stats, threads, vector, staged, row.depth, "local", stat_vector, rows_per_block)
    for s in row.stats:
        pending.remove(s)
    lanes = f" x {vector} lanes" if vector > 1 else ""
    if rows_per_block > 1:
        lanes += f", {rows_per_block} rows a block"
    if stat_vector is not None and stat_vector > 1:
        lanes += f", statistics x {stat_vector} lanes"
    regs = f", {staged} in registers" if staged else ""
    return f"rows {name} <- {', '.join(row.stats)} ({threads} threads{lanes}{regs})"


def _stat_length(sch: Schedule, stats: list[str]) -> int | None:
    """The constant length every block of ``stats`` reduces over, or None."""
    lengths = set()
    for n in stats:
        exts = [iv.dom.extent for iv in pat.realize(sch, n)[0].block.iter_vars if iv.kind is IterKind.REDUCE]
        if not all(isinstance(e, IntImm) for e in exts):
            return None
        lengths.add(math.prod(e.value for e in exts if isinstance(e, IntImm)))
    return lengths.pop() if len(lengths) == 1 else None


def _register_row(sch: Schedule, name: str, stats: list[str], depth: int, cols: int | None, threads: int,
                  vector: int) -> str | None:  # fmt: skip
    """The 2-D input that ``name`` and every block of ``stats`` read, to be kept in registers
    (read from HBM once, [`stage_row_registers`][loopir.schedule.default_gpu.stage_row_registers]):
    when the row is one loop of constant length of 16-bit elements, whole 16-byte vectors per
    thread, and at most ``MAX_ROW_REGISTERS`` elements per thread; else None."""
    if depth != 1 or cols is None or vector < 2 or cols % (threads * vector) or cols // threads > MAX_ROW_REGISTERS:
        return None
    if dt.bits(pat.realize(sch, name)[0].block.writes[0].buffer.dtype) != 16:
        return None  # measured for float16 / bfloat16 only (docs/benchmarks.md, issue 35)
    out = pat.realize(sch, name)[0].block
    shape = pat.constant_shape(out.writes[0].buffer)
    if shape is None:  # the cache's layout change needs a constant shape
        return None
    common: set[str] | None = None
    for n in [name, *stats]:
        reads = {r.buffer.name for r in pat.realize(sch, n)[0].block.reads
                 if r.buffer in set(sch.func.params) and pat.constant_shape(r.buffer) == shape}  # fmt: skip
        common = reads if common is None else common & reads
    return sorted(common)[0] if common and len(common) == 1 else None


def reduction(sch: Schedule, name: str, threads: int, vector: int = 1) -> None:
    """One thread block per output of reduction block ``name`` (its spatial loops fused), the
    reduction split over ``threads`` threads (``vector`` consecutive elements at a time, see
    [`cross_thread`][loopir.schedule.default_gpu.cross_thread]) and combined across them."""
    br = pat.realize(sch, name)[0]
    loops = pat.nest_loops(sch, name) or []
    n_red = pat.reduce_loop_count(br, loops) or 0
    blk = sch.get_block(name)
    rvs = sch.get_loops(blk)
    spatial = rvs[: len(rvs) - n_red]
    sch.bind(fuse_all(sch, spatial), "blockIdx.x")
    cross_thread(sch, blk, threads, n_red, vector)


def _reduction(sch: Schedule, name: str) -> str | None:
    found = pat.reduction_pattern(sch, name)
    if found is None:
        return None
    length = found[1]
    threads = 128 if length <= 1024 else 256 if length <= 4096 else 512
    # runs of 16 bytes of the narrowest input (the row; a per-row statistic read along is not
    # loaded per lane) when the threads' share is whole runs
    bits = min((dt.bits(r.buffer.dtype) for r in pat.realize(sch, name)[0].block.reads), default=32)
    vector = 128 // bits if length % (threads * (128 // bits)) == 0 else 1
    reduction(sch, name, threads, vector)
    lanes = f" x {vector} lanes" if vector > 1 else ""
    return f"reduction {name} ({threads} threads{lanes})"


#: The default GEMM tiles: DietCode's sample schedule (128 x 128 per block, 256 threads, 64
#: accumulators per thread, K steps of 4, 4-wide fetches).
GEMM_TILES: dict[str, Any] = {"ti": 8, "tj": 32, "vi": 1, "vj": 2, "ri": 16, "rj": 2, "ki": 4, "vec": 4}


def _gemv(sch: Schedule, name: str, max_rows: int) -> str | None:
    shape = gemv_shape(sch, name)
    if shape is None or shape[0] > max_rows:
        return None
    columns = gemv_columns(shape[0], shape[1])
    gemv(sch, name, columns=columns)
    return f"gemv {name} (M = {shape[0]}: {columns} output column{'s' if columns > 1 else ''} per warp, 4 warps per block)"


def _gemm(sch: Schedule, name: str) -> str | None:
    if not pat.is_gemm(sch, name, min_spatial=64, min_reduce=16):
        return None
    tile_gemm(sch, name, **GEMM_TILES)
    return f"gemm {name} (128 x 128 tiles, 256 threads)"


def _tensor_core(sch: Schedule, name: str, gemv_rows: int = MAX_GEMV_ROWS, wgmma: bool = False,
                 decode_rows: int = 0) -> str | None:  # fmt: skip
    m = tcg.match(sch, name)
    for _ in range(16):  # a chain of elementwise consumers (bias add, activation) becomes one
        inline = None if m is not None else tcg.inlinable_consumer(sch, name)
        if inline is None:
            break
        sch.compute_inline(sch.get_block(inline))
        m = tcg.match(sch, name)
    M, K, N = m.sizes if m is not None else (0, 0, 0)
    if m is None or (M <= gemv_rows and gemv_shape(sch, name) is not None):
        return None
    skinny = tcg.skinny_params(m) if M <= decode_rows else None
    if skinny is not None:
        tcg.schedule_with_pad(sch, m, skinny["block"], skinny["warp"], skinny["stages"])
        bm, bn, bk = skinny["block"]
        return (f"tensor_core {name} (M = {M}: one {bm} x {bn} x {bk} tile of rows on mma.sync, "
                f"{skinny['stages']}-stage cp.async pipeline)")  # fmt: skip
    if min(M, N, K) < tcg.TILE:
        return None
    fastest = tcg.wgmma_ws_params(m) if wgmma else None
    if fastest is not None:
        return _tensor_core_ws(sch, m, fastest)
    hopper = tcg.wgmma_params(m) if wgmma else None
    if hopper is not None:
        bm, bn, bk = hopper["block"]
        # one barrier per K step, wgmma retired a step later: 1.09-1.13x, then 1.1-1.2x more, on
        # the H200 (docs/benchmarks.md, session 13)
        in_flight = hopper["stages"] >= 3
        tcg.schedule_with_pad(sch, m, hopper["block"], (TILE_ROWS_WGMMA, hopper["wn"]), hopper["stages"],
                              wgmma=True, wait_first=True, async_mma=in_flight)  # fmt: skip
        return (f"tensor_core {name} ({bm} x {bn} x {bk} tiles on wgmma, {hopper['stages']}-stage cp.async "
                f"pipeline, waits first{', async wgmma' if in_flight else ''})")
    params = tcg.default_params(m)
    tcg.schedule_with_pad(sch, m, params["block"], params["warp"], params["stages"])
    bm, bn, bk = params["block"]
    pipe = f", {params['stages']}-stage cp.async pipeline" if params["stages"] > 1 else ""
    return f"tensor_core {name} ({bm} x {bn} x {bk} tiles on mma.sync{pipe})"


def _tensor_core_ws(sch: Schedule, m: tcg.TensorCoreGemm, p: dict[str, Any]) -> str:
    """GEMM ``m`` in ``hopper_gemm``'s default form (``tcg.wgmma_ws_params``), described."""
    bm, bn, bk = p["block"]
    stages = p["stages"]
    in_flight = stages >= 3  # wgmma retired a step later, as hopper_gemm's default
    M, _, N = m.sizes
    padded = bool(M % bm or N % bn)
    tcg.schedule_with_pad(sch, m, p["block"], (TILE_ROWS_WGMMA, p["wn"]), stages, pad=padded, wgmma=True,
                          wait_first=True, async_mma=in_flight, raster=p["raster"], tma=True,
                          warp_specialized=True, ctas=p["ctas"], direct=True)  # fmt: skip
    store = "guarded stores from the fragments" if padded or m.epilogue is not None else "fragment stores"
    return (f"tensor_core {m.block} ({bm} x {bn} x {bk} tiles on wgmma, {stages}-stage TMA pipeline, "
            f"warp-specialized (a producer warpgroup), persistent over {p['ctas']} blocks in groups of "
            f"{p['raster']} block rows{', async wgmma' if in_flight else ''}, {store})")


def _transpose(sch: Schedule, name: str) -> str | None:
    operand = pat.transpose_operand(sch, name)
    if operand is None:
        return None
    tile_transpose(sch, sch.get_block(name), operand)
    return f"transpose {name} (32 x 32 shared tile of {operand})"


def _refuse(sch: Schedule, name: str, why: str) -> ScheduleError:
    return ScheduleError(f"default GPU schedule: {why}", primitive="default_gpu_schedule",
                         func=sch.func, node=pat.realize(sch, name)[0].block)  # fmt: skip


def _spatial(sch: Schedule, name: str) -> str:
    br = pat.realize(sch, name)[0]
    loops = pat.nest_loops(sch, name)
    if loops is None:
        raise _refuse(sch, name, f"the loops above block {name!r} hold other statements too; bind "
                      "them (sch.bind) or give each block its own loop nest")  # fmt: skip
    n_red = pat.reduce_loop_count(br, loops)
    if n_red is None:
        raise _refuse(sch, name, f"block {name!r} has its reduction loops between its spatial "
                      "ones; reorder them (sch.reorder) so that the reduction loops are innermost")  # fmt: skip
    n_spatial = len(loops) - n_red
    blk = sch.get_block(name)
    if not n_spatial:  # one output: one block whose threads share the reduction
        if not n_red:
            raise _refuse(sch, name, f"block {name!r} has no loop to spread over threads")
        cross_thread(sch, blk, THREADS, n_red)
        return f"reduction {name} ({THREADS} threads, one block)"
    exts = pat.constant_extents(loops[:n_spatial])
    threads = THREADS if exts is None else max(1, min(THREADS, math.prod(exts)))
    lanes = (pat.vector_lanes(sch, name, threads) or 1) if n_red == 0 else 1
    rvs = sch.get_loops(blk)[:n_spatial]
    fused = fuse_all(sch, rvs)
    parts = sch.split(fused, [None, threads, lanes] if lanes > 1 else [None, threads])
    sch.bind(parts[0], "blockIdx.x")
    sch.bind(parts[1], "threadIdx.x")
    if lanes > 1:
        sch.vectorize(parts[2])
    return f"spatial {name} ({threads} threads" + (f" x {lanes} lanes)" if lanes > 1 else ")")


def _attempt(sch: Schedule, rule: Callable[[Schedule], str | None]) -> str | None:
    """Apply ``rule`` to a fork of ``sch``; adopt the fork when the rule applied, so that a
    rule refused halfway leaves nothing behind."""
    trial = sch.copy()
    try:
        done = rule(trial)
    except ScheduleError as exc:
        logger.debug("default GPU schedule: a rule refused: %s", exc)
        return None
    if done is not None:
        # a fork shares nothing mutable with the original: taking its state is adopting it
        sch.__dict__.update(trial.__dict__)
    return done


#: Rows per warp of the ``wgmma`` form (a warpgroup's 64 rows, 16 per warp).
TILE_ROWS_WGMMA = 16


def default_gpu_schedule(sch: Schedule, tensor_cores: bool = True, gemv_rows: int = 2,
                         wgmma: bool = False, row_registers: bool = False,
                         decode_rows: int = tcg.SKINNY_ROWS) -> list[str]:  # fmt: skip
    """Schedule every unscheduled root-level block of ``sch`` for the GPU (rules above).

    Parameters
    ----------
    sch
        The schedule to extend; blocks under a thread-bound loop are left as they are.
    tensor_cores
        Try the ``tensor_core`` rule first (its kernels need sm_80 or newer).
    gemv_rows
        GEMMs of at most this many rows go to the ``gemv`` rule (0: none; at most
        ``MAX_GEMV_ROWS``). 2 by default, as ``cuda.gemv_max_rows``: on the H200 the rule is
        ahead of cuBLAS and of the tensor-core rule at M = 1 and 2, behind both from M = 4
        (docs/benchmarks.md).
    wgmma
        The ``tensor_core`` rule puts GEMMs that fit it on Hopper's ``wgmma`` (sm_90a;
        [`wgmma_params`][loopir.schedule.tensor_core_gemm.wgmma_params]) instead of
        ``mma.sync``.
    decode_rows
        GEMMs of more than ``gemv_rows`` and at most this many rows (up to 16) with B ``[N, K]``
        go to the ``tensor_core`` rule as one 16-row tile
        ([`skinny_params`][loopir.schedule.tensor_core_gemm.skinny_params]; 0: none), as
        ``cuda.decode_gemm_max_rows``: on the H200 they read the weight at 0.83-0.95 of copy
        bandwidth at M = 4-16, 1.0-2.3x cuBLAS (docs/benchmarks.md).
    row_registers
        The ``rows`` rule keeps a 16-bit row in registers where it fits
        ([`stage_row_registers`][loopir.schedule.default_gpu.stage_row_registers]). Off by
        default: on the H200 it measured the same as the plain rule (softmax, layernorm and
        RMSNorm in fp16, docs/benchmarks.md).

    Returns
    -------
    list of str
        One line per rule applied, in the order applied (consumers before their
        producers); ``[]`` when every block was already scheduled.

    Raises
    ------
    ScheduleError
        When a block cannot be scheduled by any rule (its loops hold other statements, or its
        reduction loops are not innermost), naming the block.
    """
    done: list[str] = []
    if tensor_cores:
        # before inlining: an elementwise producer of an operand goes into the GEMM's fetch
        for name in pat.unscheduled_blocks(sch):
            if name not in pat.unscheduled_blocks(sch):  # folded into a GEMM scheduled before
                continue
            line = _attempt(sch, functools.partial(_tensor_core, name=name, gemv_rows=gemv_rows, wgmma=wgmma,
                                                      decode_rows=decode_rows))
            if line:
                done.append(line)
    done += [f"inline {name}" for name in inline_all(sch)]
    pending = pat.unscheduled_blocks(sch)
    while pending:
        name = pending.pop()  # consumers first: a row's statistics go with their reader
        rules = (functools.partial(_rows, name=name, pending=pending, registers=row_registers),
                 functools.partial(_gemv, name=name, max_rows=gemv_rows),
                 functools.partial(_gemm, name=name),
                 functools.partial(_reduction, name=name), functools.partial(_transpose, name=name))  # fmt: skip
        line = next((ln for ln in map(functools.partial(_attempt, sch), rules) if ln), None)
        done.append(line or _spatial(sch, name))
    return done
