"""GEMMs on tensor cores from schedule primitives: the schedule behind ``examples.tc_gemm`` and
the default GPU schedule's ``tensor_core`` rule (the TVM way,
``tests/python/tir-schedule/test_tir_schedule_tensorize_ldmatrix_mma.py``).

[`match`][loopir.schedule.tensor_core_gemm.match] recognizes a block that a tensor-core GEMM
can take: ``C[b.., i, j] += acc(A[b.., i, k]) * acc(B[b.., k, j])`` (or ``B[b.., j, k]``) with
``A``, ``B`` of one 16-bit float type, ``acc`` float32 (or float16 for float16 inputs), at most
one batch index, constant sizes. It also finds what can be folded in: an elementwise block
producing ``A`` or ``B`` (a ReLU, a scale) is computed as the operand's tiles are fetched, and
a block ``D = C.astype(out)`` is converted as the fragments are stored.

[`schedule`][loopir.schedule.tensor_core_gemm.schedule] is the schedule:

1. split ``i, j, k`` into 16x16x16 tiles and ``blockize`` the tile (``<C>_o``; the tile's
   block ``C`` is what ``mma`` replaces);
2. ``blockIdx.y`` / ``blockIdx.x`` over the block tile, warps on ``threadIdx.y`` (rows) and
   ``threadIdx.z`` (columns), each warp ``mi x nj`` 16x16 tiles; K in steps of ``kf`` tiles
   (``k0``), each step ``kf`` fragment steps (``k1``);
3. ``cache_read`` of A and B to ``shared`` at ``k0`` (a cooperative fetch over all threads,
   ``vec``-wide vectors; padded copies and elementwise producers inlined into it), then to
   ``warp`` at ``k1``; ``cache_write`` of C to ``warp`` at the warp's loop (or, where ``pad``
   grew C, to a shared tile copied out by all threads with guards);
4. ``transform_layout`` of the warp buffers to the fragment layouts (``MMA_A``, ``MMA_B``,
   ``MMA_C``), ``decompose_reduction`` at ``k0``, ``tensorize`` with the ``mma_*`` intrinsics;
5. the shared tiles XOR-swizzled for ``ldmatrix`` (or rows padded by 8), and ``k0`` a
   ``stages``-deep ``cp.async`` software pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from loopir.errors import ScheduleError
from loopir.ir import dtype as dt
from loopir.ir.expr import Add, BufferLoad, Cast, IntImm, Mul, PrimExpr, Var
from loopir.ir.functor import post_order_visit
from loopir.ir.op import STORE_CASTS
from loopir.ir.stmt import Block, BufferStore, IterKind
from loopir.passes.pipeline_mma import MMA_IN_FLIGHT_KEY
from loopir.passes.pipeline_tma import TMA_KEY
from loopir.passes.pipeline_ws import WS_KEY
from loopir.passes.software_pipeline import DEPTH_KEY, WAIT_FIRST_KEY
from loopir.schedule import gpu_patterns as pat
from loopir.schedule import tree
from loopir.schedule.schedule import Schedule
from loopir.schedule.trace import BlockRV, LoopRV
from loopir.tensor_intrin.cuda import DTYPE_ABBREV, wgmma_intrin
from loopir.tensor_intrin.layouts import MMA_A, MMA_B, MMA_C, WARP_SIZE, FragmentLayout

__all__ = [
    "PERSISTENT_CTAS", "SKINNY_ROWS", "SM90_SMEM", "TILE", "Scheduled", "TensorCoreGemm", "default_params",
    "inlinable_consumer", "ldmatrix_swizzle", "match", "persistent_ctas", "schedule", "schedule_with_pad", "skinny_params",
    "tensorize_tiles", "wgmma_params", "wgmma_stages", "wgmma_ws_params",
]  # fmt: skip

#: The side of one tensorized tile (``mma.sync.m16n8k16``, two per 16x16x16 tile).
TILE = 16
_INPUTS = ("float16", "bfloat16")


@attrs.frozen
class TensorCoreGemm:
    """A block a tensor-core GEMM can take (see [`match`][loopir.schedule.tensor_core_gemm.match]).

    Attributes
    ----------
    block
        The reduction block.
    operands
        The buffers it reads as A and B.
    dtype, acc, out
        The inputs' type, the accumulator's, and the result's (``out != acc``: ``converts``).
    b_trans
        B is indexed ``[.., j, k]``.
    batch
        Batch indices in front of ``i, j`` (0 or 1).
    sizes
        ``(M, K, N)``.
    producers
        The elementwise blocks writing A and B (None: a parameter), inlined into the fetches.
    converts
        The block ``D = C.astype(out)`` folded into the stores (None: C is the result).
    epilogue
        An elementwise block ``D = f(C, parameters)`` (a bias, an activation, a residual)
        computed as C's tile is copied out of shared memory (None: none).
    """

    block: str
    operands: tuple[str, str]
    dtype: str
    acc: str
    out: str
    b_trans: bool
    batch: int
    sizes: tuple[int, int, int]
    producers: tuple[str | None, str | None] = (None, None)
    converts: str | None = None
    epilogue: str | None = None


def _blocks(sch: Schedule) -> dict[str, Block]:
    return {s.name: s for s, _ in tree.walk(sch.func) if isinstance(s, Block)}


def _writers(blocks: dict[str, Block], buf: str) -> list[str]:
    return [n for n, b in blocks.items() if n != "root" and any(w.buffer.name == buf for w in b.writes)]


def _readers(blocks: dict[str, Block], buf: str) -> list[str]:
    return [n for n, b in blocks.items() if n != "root" and any(r.buffer.name == buf for r in b.reads)]


def _strip(e: PrimExpr, acc: str) -> PrimExpr:
    return e.value if isinstance(e, Cast) and e.dtype == acc else e


def _identity(indices: Sequence[PrimExpr], ivs: Sequence[Var]) -> bool:
    return len(indices) == len(ivs) and all(i is v for i, v in zip(indices, ivs))


def _elementwise(blocks: dict[str, Block], name: str, buf: str) -> bool:
    """Whether block ``name`` is a spatial block writing all of ``buf`` elementwise (its
    iter vars index it in order), reading parameters only at the same indices."""
    blk = blocks[name]
    body = blk.body
    ivs = [iv.var for iv in blk.iter_vars]
    if blk.init is not None or any(iv.kind is not IterKind.SPATIAL for iv in blk.iter_vars):
        return False
    if not isinstance(body, BufferStore) or not _identity(body.indices, ivs):
        return False
    loads: list[BufferLoad] = []
    post_order_visit(body.value, lambda n: loads.append(n) if isinstance(n, BufferLoad) else None)
    return all(_identity(ld.indices, ivs) and not _writers(blocks, ld.buffer.name) for ld in loads)


def match(sch: Schedule, name: str) -> TensorCoreGemm | None:
    """The tensor-core GEMM of block ``name`` (module docstring), or None."""
    if not pat.is_gemm(sch, name, min_spatial=1, min_reduce=1):
        return None
    blocks = _blocks(sch)
    blk = blocks[name]
    body = blk.body
    ivs = [iv.var for iv in blk.iter_vars]
    extents = [iv.dom.extent for iv in blk.iter_vars]
    if not isinstance(body, BufferStore) or len(ivs) > 4 or not all(isinstance(e, IntImm) for e in extents):
        return None
    acc = body.buffer.dtype
    *bt, i, j, k = ivs
    value = body.value
    if not (_identity(body.indices, [*bt, i, j]) and isinstance(value, Add)):
        return None
    self_load, prod = value.a, value.b
    if not (isinstance(self_load, BufferLoad) and self_load.buffer is body.buffer and isinstance(prod, Mul)):
        return None
    a, b = _strip(prod.a, acc), _strip(prod.b, acc)
    if not (isinstance(a, BufferLoad) and isinstance(b, BufferLoad)):
        return None
    if not _identity(a.indices, [*bt, i, k]):
        a, b = b, a
    b_trans = _identity(b.indices, [*bt, j, k])
    if not (_identity(a.indices, [*bt, i, k]) and (b_trans or _identity(b.indices, [*bt, k, j]))):
        return None
    dtype = a.buffer.dtype
    if dtype not in _INPUTS or b.buffer.dtype != dtype or acc not in ("float32", dtype) or \
            (acc == dtype and dtype != "float16") or (acc != dtype and not isinstance(prod.a, Cast)):  # fmt: skip
        return None
    params = {p.name for p in sch.func.params}
    producers: list[str | None] = []
    for op in (a, b):
        writers = _writers(blocks, op.buffer.name)
        if not writers:
            producers.append(None)
        elif len(writers) == 1 and _readers(blocks, op.buffer.name) == [name] and \
                _elementwise(blocks, writers[0], op.buffer.name):  # fmt: skip
            producers.append(writers[0])
        else:
            return None
    out, converts, epilogue = acc, None, None
    if body.buffer.name not in params:
        readers = [r for r in _readers(blocks, body.buffer.name) if r != name]
        if len(readers) != 1:
            return None
        d = blocks[readers[0]]
        kind = _consumer_kind(blocks, d, body.buffer.name, params)
        if kind is None:
            return None
        dv = d.body
        assert isinstance(dv, BufferStore)
        if kind == "cast" and (acc, dv.buffer.dtype) in STORE_CASTS:
            converts = d.name
        else:
            epilogue = d.name
        out = dv.buffer.dtype
    M, N, K = (e.value for e in extents[-3:])  # type: ignore[attr-defined]
    return TensorCoreGemm(name, (a.buffer.name, b.buffer.name), dtype, acc, out, b_trans, len(bt),
                          (M, K, N), (producers[0], producers[1]), converts, epilogue)  # fmt: skip


def inlinable_consumer(sch: Schedule, name: str) -> str | None:
    """The one reader of what block ``name`` writes when it is a spatial block writing an
    intermediate (``C -> BiasAdd -> D``): inlining it into its consumers leaves one epilogue
    block that [`match`][loopir.schedule.tensor_core_gemm.match] can fold. None otherwise."""
    blocks = _blocks(sch)
    writes = blocks[name].writes
    params = {p.name for p in sch.func.params}
    if len(writes) != 1 or writes[0].buffer.name in params:
        return None
    readers = [r for r in _readers(blocks, writes[0].buffer.name) if r != name]
    if len(readers) != 1:
        return None
    r = blocks[readers[0]]
    if r.init is not None or any(w.buffer.name in params for w in r.writes):
        return None
    return r.name


def _consumer_kind(blocks: dict[str, Block], d: Block, c: str, params: set[str]) -> str | None:
    """How the GEMM's result ``c`` can be folded into its one reader ``d``: ``"cast"`` (``D =
    C.astype(out)``), ``"epilogue"`` (``D = f(C, parameters)``, C read at D's own indices, say a
    bias add and an activation), or None. ``d`` must write a parameter at its own indices."""
    dv = d.body
    divs = [iv.var for iv in d.iter_vars]
    if d.init is not None or not (isinstance(dv, BufferStore) and dv.buffer.name in params
                                  and _identity(dv.indices, divs)):  # fmt: skip
        return None
    value = dv.value
    if isinstance(value, Cast) and isinstance(value.value, BufferLoad) and value.value.buffer.name == c \
            and _identity(value.value.indices, divs):  # fmt: skip
        return "cast"
    loads: list[BufferLoad] = []
    post_order_visit(value, lambda n: loads.append(n) if isinstance(n, BufferLoad) else None)
    for ld in loads:
        if ld.buffer.name == c:
            if not _identity(ld.indices, divs):
                return None
        elif _writers(blocks, ld.buffer.name):
            return None
    return "epilogue" if any(ld.buffer.name == c for ld in loads) else None


def default_params(m: TensorCoreGemm) -> dict[str, Any]:
    """Tiles for the default GPU schedule: 128 x 128 blocks of 4 warps (64 x 64 each) and K
    steps of 32 in a 4-stage pipeline (the best of the configurations the H200 measured,
    docs/benchmarks.md), halved along a size smaller than the tile; 3 stages for 3 K steps,
    none for fewer."""
    M, K, N = m.sizes

    def side(size: int) -> int:
        return 128 if size >= 128 else 64 if size >= 64 else 32

    bm, bn = side(M), side(N)
    bk = 32 if K >= 32 else 16
    steps = -(-K // bk)
    return {"block": (bm, bn, bk), "warp": (bm // 2, bn // 2), "stages": min(4, steps) if steps >= 3 else 1}


#: The most rows of a decode GEMM (``Y = X W^T``, a few tokens) that
#: [`skinny_params`][loopir.schedule.tensor_core_gemm.skinny_params] gives one 16-row tile.
SKINNY_ROWS = 16


def skinny_params(m: TensorCoreGemm) -> dict[str, Any] | None:
    """Tiles for a decode GEMM of at most ``SKINNY_ROWS`` rows with B ``[N, K]`` (the weight
    read once, at the copy limit; M padded to one 16-row tile): 16 x 32 block tiles of two warps
    (16 x 16 each), K steps of 256 when N is at most 4096 (fewer blocks than SMs: each keeps
    more bytes in flight) else 128, a 4-stage pipeline; None when the GEMM is not that (more
    rows, B ``[K, N]``, a batch, N under 32 or K under 64).

    On the H200 (docs/benchmarks.md, session 14; K 4096, fp16) these read the weight at 0.85-0.95
    of copy bandwidth at M = 8 and 16 (torch/cuBLAS: 0.44-0.83), where the CUDA-core GEMV rule
    reaches 0.36-0.59: with 8-16 rows each weight element costs 8-16 fp32 FMAs, the whole CUDA-core
    rate at copy bandwidth, and nothing on tensor cores.

    >>> from loopir.schedule import Schedule
    >>> from loopir.examples import tc_gemm_func
    >>> skinny_params(match(Schedule(tc_gemm_func(8, 4096, 11008, "float16", b_trans=True)), "C"))
    {'block': (16, 32, 128), 'warp': (16, 16), 'stages': 4}
    """
    M, K, N = m.sizes
    if M > SKINNY_ROWS or not m.b_trans or m.batch or N < 32 or K < 64:
        return None
    bk = 256 if N <= 4096 else 128
    while bk > K:
        bk //= 2
    return {"block": (TILE, 32, bk), "warp": (TILE, TILE), "stages": 4}


#: Shared memory a block may use on sm_90 (the opt-in maximum).
SM90_SMEM = 227 * 1024


def wgmma_params(m: TensorCoreGemm) -> dict[str, Any] | None:
    """Tiles of the ``wgmma`` form (sm_90a) for the default GPU schedule, or None when the GEMM
    does not fit it (B must be ``[N, K]``, a float32 accumulator, M and N at least 64, K at
    least 16): 128 x 256 x 64 block tiles with one warp column (``wn = bn``; the fastest
    measured on the H200, docs/benchmarks.md), halved along a size smaller than the tile, and
    the deepest pipeline (up to 4) whose shared tiles fit in 227 KB with C's float32 tile where
    it goes through shared memory (padding, or an epilogue). When that tile leaves fewer than 3
    stages, N is halved (a 128 x 128 tile: 64 KB of C and 4 stages)."""
    M, K, N = m.sizes
    if not m.b_trans or m.acc != "float32" or min(M, N) < 64 or K < TILE:
        return None
    bm = 128 if M >= 128 else 64
    bn = 256 if N >= 256 else 128 if N >= 128 else 64
    c_shared = m.epilogue is not None
    stages = wgmma_stages(M, N, (bm, bn, 64), c_shared)
    if stages < 3 and bn > 128:
        bn //= 2
        stages = wgmma_stages(M, N, (bm, bn, 64), c_shared)
    return {"block": (bm, bn, 64), "wn": bn, "stages": stages}


#: A persistent kernel's thread blocks: the H200's (and H100 SXM's) 132 SMs.
PERSISTENT_CTAS = 132


def persistent_ctas(M: int, N: int, block: tuple[int, int, int], ctas: int = PERSISTENT_CTAS) -> int:
    """The thread blocks of a persistent grid of ``ctas`` over the block tiles of ``M x N``:
    no more than the tiles (CUTLASS launches ``min(SMs, tiles)`` too; an idle block would
    leave the split's guard on ``blockIdx.x`` alone, with no tile loop to lift it into)."""
    return min(ctas, -(-M // block[0]) * -(-N // block[1]))


def wgmma_ws_params(m: TensorCoreGemm) -> dict[str, Any] | None:
    """The fastest ``wgmma`` form measured on the H200 (docs/benchmarks.md, issue 32: fp16
    4096^3 at 0.92x cuBLAS), for the default GPU schedule: TMA copies, a producer warpgroup
    (warp specialization), a persistent grid of ``PERSISTENT_CTAS`` blocks over the tiles in
    groups of 8 block rows (``raster``: the largest power of two up to 8 dividing the block
    rows), C stored from the fragments (no shared tile of C, so
    ``wgmma_params``' 128 x 256 tile keeps 4 stages where padding or an epilogue would halve
    it). None where it does not fit: ``wgmma_params`` does not, or a batch (TMA copies
    2-d boxes), an elementwise producer of A or B (a computed fetch is no box copy), K not a
    multiple of 16 bytes (TMA's row stride), fewer than 2 stages."""
    base = wgmma_params(m)
    M, K, N = m.sizes
    if base is None or m.batch or any(p is not None for p in m.producers) or K * dt.bits(m.dtype) % 128:
        return None
    bm = base["block"][0]
    bn = 256 if N >= 256 else 128 if N >= 128 else 64
    block = (bm, bn, 64)
    stages = wgmma_stages(M, N, block, direct=True)
    if stages < 2:
        return None
    raster, rows = 8, -(-M // bm)
    while raster > 1 and rows % raster:  # what schedule_with_pad takes of it, for the description
        raster //= 2
    return {"block": block, "wn": bn, "stages": stages, "raster": raster, "ctas": persistent_ctas(M, N, block)}


def wgmma_stages(M: int, N: int, block: tuple[int, int, int], c_shared: bool = False, direct: bool = False) -> int:
    """The deepest ``wgmma`` pipeline (at most 4) whose shared memory fits: ``stages`` copies of
    the A and B tiles, plus C's float32 tile where padding (or, ``c_shared``, an epilogue)
    stores it through shared memory, unless C is stored from the fragments (``direct``,
    ``schedule``)."""
    bm, bn, bk = block
    c_tile = bm * bn * 4 if not direct and (c_shared or M % bm or N % bn) else 0
    return max(1, min(4, (SM90_SMEM - c_tile) // ((bm + bn) * bk * 2)))


def ldmatrix_swizzle(cols: int, batched: bool = False) -> str | None:
    """The XOR swizzle of a shared tile of ``cols`` 16-bit columns (rows of ``cols // 8`` chunks
    of 16 bytes) free of bank conflicts for ``ldmatrix``: the chunk index XOR the row, over the
    chunks of one 128-byte line (None for tiles narrower than 32 columns). ``batched``: the
    tile has a leading batch index, kept."""
    chunks = cols // 8
    b = "b, " if batched else ""
    if chunks >= 8:
        return f"lambda {b}i, j: ({b}i, j // 64 * 64 + (j // 8 % 8 ^ i % 8) * 8 + j % 8)"
    if chunks == 4:  # 64-byte rows: two rows per 128-byte line
        return f"lambda {b}i, j: ({b}i, j // 32 * 32 + (j // 8 % 4 ^ i // 2 % 4) * 8 + j % 8)"
    return None


def _fragment_map(layout: FragmentLayout, transposed: bool = False, batched: bool = False) -> Any:
    """``(i, j) -> (i // 16, j // 16, lane, local)``: a warp buffer in ``layout``'s fragments
    (``transposed``: the buffer is indexed ``(col, row)`` of the layout, as B ``[N, K]``;
    ``batched``: a leading batch index is kept)."""

    def tiles(i: Any, j: Any) -> tuple[Any, ...]:
        row, col = (j, i) if transposed else (i, j)
        return (i // TILE, j // TILE, *layout.to_lane_local(row % TILE, col % TILE))

    if batched:
        return lambda b, i, j: (b, *tiles(i, j))
    return tiles


@attrs.frozen
class Scheduled:
    """Handles into the scheduled GEMM: the 16x16x16 tile block (``<C>_o``) and its K loops."""

    outer: BlockRV
    k0: LoopRV
    k1: LoopRV


def schedule(sch: Schedule, m: TensorCoreGemm, tiles: tuple[Any, Any, Any, Any, Any], stages: Any,
             swizzles: tuple[str | None, str | None], vec: int,
             grown: tuple[bool, bool, bool], raster: int = 1, wgmma: bool = False, tma: bool = False,
             ctas: int | None = None, direct: bool = False) -> Scheduled:  # fmt: skip
    """Schedule block ``m.block`` (module docstring), after ``sch.pad`` grew what ``grown``
    says (A, B, C). ``tiles``: warps ``wy, wz`` per block, 16x16 tiles ``mi, nj`` per warp,
    ``kf`` 16-steps per K step (ints or sampled values); ``stages`` an int or a sampled
    pipeline depth; ``swizzles``: the shared tiles' maps (None: rows padded by 8 instead).
    ``raster`` > 1 (dividing the number of block rows) orders the blocks in groups of that
    many block rows, column after column (``blockIdx.x`` over the fused group, column and row
    within the group, as Triton's grouped ordering): the blocks running at once then share
    their tiles of A and B in the L2 cache. ``wgmma`` (sm_90a; ``mi`` = 1, ``wy`` a multiple of
    4, B ``[N, K]``, K steps of 64 with 128-byte ``swizzles``): each warp's 16 x ``16 nj`` x
    ``16 kf`` step is one ``wgmma`` call (``kf`` instructions, one wait) reading A and B from the
    shared tiles, no fragments loaded. ``ctas`` (persistent): the block tiles (in ``raster``'s
    order) fused and split by ``ctas`` thread blocks, the inner part bound to ``blockIdx.x``, the
    outer reordered below the warps' loops: a serial tile loop around the K loop and the
    epilogue (block ``bx`` runs the tiles ``it * ctas + bx``; an inexact split's predicate is
    lifted by ``InjectSoftwarePipeline``, ``loopir.passes.pipeline_ws_tiles``). ``direct``: where C
    would go through a shared tile (``pad`` grew it, or an epilogue), it is stored from the
    fragments straight to the result instead, each lane its own elements, guarded by the sizes
    (no shared tile of C, no block barrier: what a persistent warp-specialized kernel needs,
    whose producer warps never reach the consumers' barriers)."""
    wy, wz, mi, nj, kf = tiles
    copy_out = _copy_out_block(sch, m) if grown[2] else None
    c = sch.get_block(m.block)
    *bl, i, j, k = sch.get_loops(c)
    # the tensorized tile: 16 x 16 x 16 (mma.sync), or 16 x the warp's columns x the K step
    # (wgmma: kf 16-wide instructions, then one wait)
    wn, wk = (TILE * nj, TILE * kf) if wgmma else (TILE, TILE)
    i, i_tc = sch.split(i, [None, TILE])
    j, j_tc = sch.split(j, [None, wn])
    k, k_tc = sch.split(k, [None, wk])
    sch.reorder(i, j, k, i_tc, j_tc, k_tc)
    outer = sch.blockize(i_tc)  # one 16 x wn x 16 tile; the block inside is what mma replaces
    i0, i1, i2 = sch.split(i, [None, wy, mi])
    j0, j1, j2 = sch.split(j, [None, wz, 1 if wgmma else nj])
    k0, k1 = sch.split(k, [None, 1 if wgmma else kf])
    sch.reorder(*bl, i0, j0, i1, j1, k0, k1, i2, j2)
    if bl:
        sch.bind(bl[0], "blockIdx.z")
    if type(raster) is int and raster == 1 and ctas is None:  # else bound at the end: blockize needs the tiles' bindings affine
        sch.bind(i0, "blockIdx.y")
        sch.bind(j0, "blockIdx.x")
    sch.bind(i1, "threadIdx.y")
    sch.bind(j1, "threadIdx.z")

    shared = [_fetch(sch, m, outer, idx, k0, grown[idx], (wy, wz), vec, tma) for idx in (0, 1)]
    operand_warps = None if wgmma else (sch.cache_read(outer, 0, "warp"), sch.cache_read(outer, 1, "warp"))
    for w in operand_warps or ():
        sch.compute_at(w, k1)
    c_warp, c_shared = _write_back(sch, m, outer, copy_out, (j0, j1), (wy, wz, nj), grown[2], direct)
    init = sch.decompose_reduction(outer, k0)
    tensorize_tiles(sch, m, (outer, init), operand_warps, c_warp, c_shared, (wn, wk))
    for copy, swz in zip(shared, swizzles):
        if swz is not None:
            sch.transform_layout(copy, 0, swz)
        else:
            sch.storage_align(copy, 0, m.batch, 32, 8)
    if type(stages) is int:  # a sampled depth (an ExprRV, an int too) must stay a reference
        if stages > 1:
            sch.annotate(k0, "software_pipeline_stage", [0, 0, stages - 1])
            sch.annotate(k0, "software_pipeline_async_stages", [0])
    else:  # a sampled depth: every statement but the compute in stage 0, async
        sch.annotate(k0, DEPTH_KEY, stages)
    # a sampled raster (an ExprRV: its value may change on replay) always takes the grouped
    # order's instructions, which a group of 1 leaves row after row
    grouped = type(raster) is not int or raster > 1
    if grouped:
        group, row = sch.split(i0, [None, raster])
        sch.reorder(group, j0, row)
        tiles_loop = sch.fuse(group, j0, row)
    elif ctas is not None:
        tiles_loop = sch.fuse(i0, j0)
    if ctas is not None:
        # persistent: a grid of ``ctas`` blocks, each looping over tiles ``it * ctas + bx``
        it, bx = sch.split(tiles_loop, [None, ctas])
        sch.reorder(bx, i1, j1, it)
        sch.bind(bx, "blockIdx.x")
    elif grouped:
        sch.bind(tiles_loop, "blockIdx.x")
    return Scheduled(outer, k0, k1)


def schedule_with_pad(sch: Schedule, m: TensorCoreGemm, block: tuple[int, int, int], warp: tuple[int, int],
                      stages: int, *, swizzle: bool = True, vec: int = 8, pad: bool = True,
                      fragment_stages: int = 1, raster: int = 1, wgmma: bool = False,
                      wait_first: bool = False, async_mma: bool = False, tma: bool = False,
                      warp_specialized: bool | tuple[int, int] = False, ctas: int | None = None,
                      direct: bool = False) -> Scheduled:  # fmt: skip
    """[`schedule`][loopir.schedule.tensor_core_gemm.schedule] with a block tile ``(bm, bn,
    bk)`` and a warp tile ``(wm, wn)`` (multiples of 16): first ``pad`` (``pad_einsum``) of the
    sizes off the block tile when ``pad``; the shared tiles XOR-swizzled when ``swizzle`` (else
    their rows padded); ``fragment_stages=2`` pipelines the K steps of one shared tile, the
    fragments double-buffered in registers; ``raster``: the largest power of two at most it
    that divides the number of block rows groups them (``schedule``); ``wgmma``: the warp tile is
    ``(16, wn)`` and each warp's K step one ``wgmma`` (``schedule``); ``wait_first``: each step
    of the pipelined K loop waits and synchronizes before it issues the next copies
    ([`WAIT_FIRST_KEY`][loopir.passes.software_pipeline.WAIT_FIRST_KEY]: one barrier a step);
    ``async_mma`` (``wgmma``, ``stages >= 3``): each step's ``wgmma`` issued asynchronously and
    retired one step later, the compute one stage after the copies' last but one
    ([`MMA_IN_FLIGHT_KEY`][loopir.passes.pipeline_mma.MMA_IN_FLIGHT_KEY]); ``tma`` (sm_90a,
    ``stages >= 2``, K rows of a multiple of 16 bytes): the shared tiles fetched by TMA copies
    on mbarriers instead of ``cp.async``, zeros past padded sizes from TMA's fill
    ([`TMA_KEY`][loopir.passes.pipeline_tma.TMA_KEY]); ``warp_specialized`` (with ``tma``, one
    warp column ``bn == wn``): a producer warpgroup issues the copies on full/empty mbarriers
    and the warps wait on them themselves, ``(dec, inc)`` with ``setmaxnreg``
    ([`WS_KEY`][loopir.passes.pipeline_ws.WS_KEY]); ``ctas``: a persistent grid of that many
    thread blocks looping over the tiles (``schedule``); ``direct``: C stored from the fragments
    straight to the result with guards, no shared tile (``schedule``)."""
    (bm, bn, bk), (wm, wn) = block, warp
    if warp_specialized is not False and (not tma or bn != wn):
        raise ScheduleError(f"tensor_core_gemm: warp_specialized needs tma and one warp column (bn == wn: the "
                            f"warps along threadIdx.y only), got tma={tma}, bn={bn}, wn={wn}")  # fmt: skip
    M, K, N = m.sizes
    rows = -(-M // bm)
    while raster > 1 and rows % raster:
        raster //= 2
    # which of A, B, C pad_einsum grows
    grown = (bool(M % bm or K % bk), bool(K % bk or N % bn), bool(M % bm or N % bn)) if pad else (False,) * 3
    if tma and (not wgmma or any(p is not None for p in m.producers) or stages < 2 or K * dt.bits(m.dtype) % 128):
        raise ScheduleError(f"tensor_core_gemm: tma needs wgmma, operands without producers, stages >= 2 and K a "
                            f"multiple of 16 bytes of {m.dtype} (TMA's global row stride); got wgmma={wgmma}, producers "
                            f"{tuple(m.producers)}, stages {stages}, K={K}")  # fmt: skip
    if any(grown):
        sch.pad(sch.get_block(m.block), [1] * m.batch + [bm, bn, bk])
    batched = m.batch > 0
    swizzles = (ldmatrix_swizzle(bk, batched), ldmatrix_swizzle(bk if m.b_trans else bn, batched))
    done = schedule(sch, m, (bm // wm, bn // wn, wm // TILE, wn // TILE, bk // TILE), stages,
                    swizzles if swizzle else (None, None), vec, grown, max(raster, 1), wgmma, tma, ctas, direct)  # fmt: skip
    if fragment_stages == 2:
        # k1: the fragment loads of A and B, then the mma
        sch.annotate(done.k1, "software_pipeline_stage", [0, 0, 1])
    if wait_first and stages > 1:
        sch.annotate(done.k0, WAIT_FIRST_KEY, True)
    if async_mma:
        if not wgmma or stages < 3:
            raise ScheduleError(f"tensor_core_gemm: async_mma needs wgmma and stages >= 3 (the version in "
                                f"flight, the one the copies fill and the one read next), got stages {stages}")  # fmt: skip
        sch.annotate(done.k0, "software_pipeline_stage", [0, 0, stages - 2])
        sch.annotate(done.k0, MMA_IN_FLIGHT_KEY, 1)
    if tma:
        sch.annotate(done.k0, TMA_KEY, True)
    if warp_specialized is not False:
        sch.annotate(done.k0, WS_KEY, True if warp_specialized is True else list(warp_specialized))
    return done


def _name(sch: Schedule, rv: BlockRV) -> str:
    block = sch.get(rv)
    assert isinstance(block, Block)
    return block.name


def _copy_out_block(sch: Schedule, m: TensorCoreGemm) -> str:
    """The block ``pad`` made to copy the padded C out (the one reader of what the GEMM writes)."""
    blocks = _blocks(sch)
    written = blocks[m.block].writes[0].buffer.name
    readers = [r for r in _readers(blocks, written) if r != m.block]
    if len(readers) != 1:
        raise ScheduleError(f"tensor-core GEMM: expected one copy-out of the padded {written}, found {readers}",
                            primitive="tensor_core_gemm")  # fmt: skip
    return readers[0]


def _write_back(sch: Schedule, m: TensorCoreGemm, outer: BlockRV, copy_out: str | None, loops: tuple[LoopRV, LoopRV],
                warps: tuple[Any, Any, Any], padded: bool, direct: bool) -> tuple[BlockRV | None, bool]:  # fmt: skip
    """C's write-back from the accumulator fragments (``schedule``): the ``cache_write`` of C
    to ``warp`` at the warp's loop ``j1`` (``loops``: ``j0, j1``), stored with ``mma_store``
    to C, or (``padded``, or an epilogue) to a shared tile of C copied out by every thread at
    ``j0``; ``direct``: no shared tile, each lane stores its fragment elements itself
    (``_bind_lanes``), guarded by the sizes when ``padded``. The block to tensorize as the
    store (None: ``direct``, nothing to tensorize) and whether it stores to shared memory."""
    j0, j1 = loops
    wy, wz, nj = warps
    # without a shared tile (no padding, no epilogue) mma_store is the same stores already
    direct = direct and (padded or m.epilogue is not None)
    if m.epilogue is not None and copy_out is None and not direct:
        # C's tile goes through shared memory, copied out by every thread: the epilogue reads
        # its elements there (the fragments' layout is not C's)
        copy_out = _name(sch, sch.cache_write(outer, 0, "shared"))
    c_warp = sch.cache_write(outer, 0, "warp")
    if m.converts is not None or m.epilogue is not None:
        # D = C.astype(out) folded into C's write-back: the fragments are converted as they are
        # stored (or, padded, as the shared tile is copied out); an epilogue into the copy-out
        sch.reverse_compute_inline(sch.get_block(m.converts or m.epilogue or ""))
    if direct:
        store = c_warp
        if copy_out is not None:  # padded: the copy-out over C's sizes reads the fragments
            sch.compute_inline(c_warp)
            store = sch.get_block(copy_out)
        # at the warp's loop, the copy-out's extents beyond the sizes become its predicate (a
        # loop over fewer rows or columns than the tile's, inside the sizes, stays: it is split
        # as the fragments' layout all the same, an inexact split)
        sch.reverse_compute_at(store, j1, preserve_unit_loops=True)
        _bind_lanes(sch, store)
        return None, False
    if padded:
        # the padded C becomes the block's shared tile of C, copied out by every thread with guards
        sch.set_scope(c_warp, 0, "shared")
    sch.reverse_compute_at(c_warp, j1)
    if copy_out is not None:
        out = sch.get_block(copy_out)
        sch.reverse_compute_at(out, j0, preserve_unit_loops=True)
        # unit loops kept: a 1-row C still has a row loop to spread over the threads
        # an unpadded tile is copied out in 16-byte vectors of the result (no guards)
        lanes = 1 if padded else max(1, 16 // max(1, dt.bits(m.out) // 8))
        while lanes > 1 and isinstance(nj, int) and (nj * TILE * (wz if isinstance(wz, int) else 1)) % lanes:
            lanes //= 2
        _bind_threads(sch, sch.fuse(*sch.get_loops(out)[2 + m.batch:]), (wy, wz), lanes)
    return c_warp, copy_out is not None


def _bind_lanes(sch: Schedule, block: BlockRV) -> None:
    """The two innermost loops of ``block`` (a warp's rows and columns of C, multiples of 16)
    split as the accumulator fragments' layout (``MMA_C``): row ``8 h + g``, column ``8 n + 2
    q + v`` is element ``4 n + 2 h + v`` of lane ``4 g + q``; ``g, q`` fused and bound to
    ``threadIdx.x``, outside the others, so that each lane reads its own registers (what
    ``LowerWarpMemory`` checks); the others unrolled (registers are indexed by constants)."""
    rows, cols = sch.get_loops(block)[-2:]
    r0, h, g = sch.split(rows, [None, 2, 8])
    c0, n, q, v = sch.split(cols, [None, 2, 4, 2])
    sch.reorder(g, q, r0, c0, h, n, v)
    sch.bind(sch.fuse(g, q), "threadIdx.x")
    for loop in (r0, c0, h, n, v):
        sch.unroll(loop)


def _bind_threads(sch: Schedule, loop: LoopRV, warps: tuple[Any, Any], vec: int = 1) -> None:
    """Spread ``loop`` over the block's threads (``threadIdx.z/y/x``), ``vec``-wide vectors."""
    wy, wz = warps
    if vec > 1:
        _, fz, fy, fx, fv = sch.split(loop, [None, wz, wy, WARP_SIZE, vec])
        sch.vectorize(fv)
    else:
        _, fz, fy, fx = sch.split(loop, [None, wz, wy, WARP_SIZE])
    sch.bind(fz, "threadIdx.z")
    sch.bind(fy, "threadIdx.y")
    sch.bind(fx, "threadIdx.x")


def _fetch(sch: Schedule, m: TensorCoreGemm, outer: BlockRV, idx: int, k0: LoopRV, padded: bool,
           warps: tuple[Any, Any], vec: int, tma: bool = False) -> BlockRV:  # fmt: skip
    """The shared tile of operand ``idx`` fetched at ``k0`` by all threads (``tma``: its loops
    left serial, a box copy that the pipeline issues as one TMA copy); its copy block. The
    padded copy of the operand and its elementwise producer are computed in the fetch."""
    copy = sch.cache_read(outer, idx, "shared")
    sch.compute_at(copy, k0)
    if padded:  # pad's zero-filled copy of the operand (the buffer the fetch reads)
        fetch = sch.get(copy)
        assert isinstance(fetch, Block)
        src = next(r.buffer.name for r in fetch.reads)
        sch.compute_inline(sch.get_block(_writers(_blocks(sch), src)[0]))
    producer = m.producers[idx]
    if producer is not None:  # an elementwise producer of the operand, computed as it is fetched
        sch.compute_inline(sch.get_block(producer))
    if not tma:
        _bind_threads(sch, sch.fuse(*sch.get_loops(copy)[-2:]), warps, vec)
    return copy


def tensorize_tiles(sch: Schedule, m: TensorCoreGemm, blocks: tuple[BlockRV, BlockRV],
               operand_warps: tuple[BlockRV, BlockRV] | None, c_warp: BlockRV | None, c_shared: bool,
               tile: tuple[int, int]) -> None:  # fmt: skip
    """Fragment layouts on the warp buffers, then every tile tensorized: 16x16x16 tiles with
    ``ldmatrix`` / ``mma.sync`` from the fragments ``operand_warps`` loads, or (None) each
    warp's 16 x ``wn`` x ``wk`` tile (``tile``) with ``wgmma`` from the shared tiles.

    ``blocks`` are the blockized tile (``<C>_o``) and its init (``decompose_reduction``);
    ``c_warp`` the ``cache_write`` of C to ``warp``, stored to shared memory when ``c_shared``
    (else to C itself, converted to ``m.out``; None: the lanes store their elements themselves,
    ``schedule``'s ``direct``, nothing to tensorize). Used by ``schedule`` and by other schedules
    with GEMM blocks of their own (``loopir.examples.attention``)."""
    wn, wk = tile
    outer, init = blocks
    t, a = DTYPE_ABBREV[m.dtype], DTYPE_ABBREV[m.acc]
    # a converting store, unless the tile goes to shared memory first (the copy-out converts)
    store = a if m.out == m.acc or c_shared else f"{a}_{DTYPE_ABBREV[m.out]}"
    batched = m.batch > 0

    def fragments(block: BlockRV) -> LoopRV:
        """Split the copy's two innermost loops into 16x16 tiles; the tile's first loop."""
        r, c = sch.get_loops(block)[-2:]
        r0, r1 = sch.split(r, [None, TILE])
        c0, c1 = sch.split(c, [None, TILE])
        sch.reorder(r0, c0, r1, c1)
        return r1

    lc = None if c_warp is None else fragments(c_warp)
    sch.transform_layout(outer, 0, _fragment_map(MMA_C, batched=batched))
    if operand_warps is not None:
        a_warp, b_warp = operand_warps
        la, lb = fragments(a_warp), fragments(b_warp)
        sch.transform_layout(a_warp, 0, _fragment_map(MMA_A, batched=batched))
        sch.transform_layout(b_warp, 0, _fragment_map(MMA_B, m.b_trans, batched=batched))
        sch.tensorize(la, f"mma_ldmatrix_{t}_a")
        sch.tensorize(lb, f"mma_ldmatrix_{t}_b" + ("_trans" if m.b_trans else ""))
        sch.tensorize(sch.get_loops(sch.get_block(m.block))[-3], f"mma_{t}{t}{a}")
    else:
        sch.tensorize(sch.get_loops(sch.get_block(m.block))[-3], wgmma_intrin(m.dtype, wn, wk))
    (inner_init,) = sch.get_child_blocks(init)  # the init of one 16 x wn tile
    rows, cols = sch.get_loops(inner_init)[-2:]
    if wn > TILE:
        c0, c1 = sch.split(cols, [None, TILE])
        sch.reorder(c0, rows, c1)
    sch.tensorize(rows, f"mma_fill_{a}")
    if lc is not None:
        sch.tensorize(lc, f"mma_store_{store}_" + ("shared" if c_shared else "global"))
