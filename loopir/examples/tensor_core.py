"""A GEMM on tensor cores from loopir's own schedule primitives, the TVM way
(``tests/python/tir-schedule/test_tir_schedule_tensorize_ldmatrix_mma.py``).

``C[i, j] = sum_k A[i, k] * B[k, j]`` (B ``[K, N]``, or ``[N, K]`` with ``b_trans``), fp16 or
bf16 inputs, fp32 accumulation (fp16 too). The schedule:

1. split ``i, j, k`` into 16x16x16 tiles and ``blockize`` the tile (the block ``C_o``; the
   tile's block ``C`` is what ``mma`` replaces);
2. tile the 16x16 tiles: ``blockIdx.y`` / ``blockIdx.x`` over the block tile, warps on
   ``threadIdx.y`` (rows) and ``threadIdx.z`` (columns), each warp a ``wm x wn`` tile;
   K in steps of ``bk`` (``k0``), each step in ``bk / 16`` fragment steps (``k1``);
3. ``cache_read`` A and B to ``shared`` at ``k0`` (cooperative fetch: the copy's loops fused
   and split over ``threadIdx.z/y/x`` and ``vec``-wide vectors), then to ``warp`` at ``k1``;
   ``cache_write`` C to ``warp`` at the warp's loop;
4. ``transform_layout`` of the warp buffers to the fragment layouts (``MMA_A``, ``MMA_B``,
   ``MMA_C``: ``[tile row, tile col, 32 lanes, 8]``), ``decompose_reduction`` at ``k0``;
5. ``tensorize`` the 16x16 tiles with ``mma_ldmatrix_*``, ``mma_*``, ``mma_fill_*`` and
   ``mma_store_*_global``;
6. the shared tiles swizzled for ``ldmatrix`` (``transform_layout`` with an XOR of the 16-byte
   chunk index and the row, after tensorize: the implementation's row addresses move with
   their 16-byte rows), and ``k0`` a ``stages``-deep ``cp.async`` software pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loopir.errors import ScheduleError
from loopir.ir.expr import convert
from loopir.ir.op import STORE_CASTS
from loopir.ir.stmt import Block, PrimFunc
from loopir.passes.software_pipeline import DEPTH_KEY
from loopir.schedule import Schedule
from loopir.schedule.tree import block_names
from loopir.tensor_intrin.cuda import DTYPE_ABBREV
from loopir.tensor_intrin.layouts import MMA_A, MMA_B, MMA_C, WARP_SIZE, FragmentLayout

__all__ = ["tc_gemm", "tc_gemm_func", "tc_gemm_space"]

_PRIM = "examples.tc_gemm"
_TILE = 16


def tc_gemm_func(M: int, K: int, N: int, dtype: str = "float16", acc: str = "float32",
                 b_trans: bool = False, batch: int | None = None, out_dtype: str | None = None,
                 a_prologue: Callable[[Any], Any] | None = None) -> PrimFunc:  # fmt: skip
    """The unscheduled ``C[M, N] = A[M, K] @ B`` (B ``[K, N]``, or ``[N, K]`` when
    ``b_trans``), the products of ``dtype`` inputs summed in ``acc``; with ``batch``, every
    buffer has a leading batch dimension of that size. With an ``out_dtype`` other than
    ``acc``, ``C`` is an intermediate and the output is ``D = C.astype(out_dtype)`` (block
    ``D``). ``a_prologue`` (a function of one ``dtype`` element, returning one) makes the
    GEMM read ``A_prologue = a_prologue(A)``, an elementwise producer block (say a ReLU or a
    scale): a GEMM that CUTLASS does not take."""
    from loopir import te

    lead: tuple[int, ...] = () if batch is None else (batch,)
    A = te.placeholder((*lead, M, K), dtype, name="A")
    B = te.placeholder((*lead, *((N, K) if b_trans else (K, N))), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    fa = A
    if a_prologue is not None:
        fa = te.compute(A.shape, lambda *idx: convert(a_prologue(A[idx])).astype(dtype), name="A_prologue")

    def body(*idx: Any) -> Any:
        *bt, i, j = idx
        b = B[(*bt, j, k)] if b_trans else B[(*bt, k, j)]
        return te.sum(fa[(*bt, i, k)].astype(acc) * b.astype(acc), axis=k)

    C = te.compute((*lead, M, N), body, name="C")
    if out_dtype is None or out_dtype == acc:
        return te.create_prim_func([A, B, C])
    D = te.compute((*lead, M, N), lambda *idx: C[idx].astype(out_dtype), name="D")
    return te.create_prim_func([A, B, D])


def _fail(msg: str) -> ScheduleError:
    return ScheduleError(msg, primitive=_PRIM)


def _check(M: Any, K: Any, N: Any, dtype: str, acc: str, block: tuple[int, int, int],
           warp: tuple[int, int], stages: int, vec: int, pad: bool,
           out_dtype: str | None = None) -> None:  # fmt: skip
    if dtype not in ("float16", "bfloat16"):
        raise _fail(f"dtype must be 'float16' or 'bfloat16', got {dtype!r}")
    if acc not in ("float32", "float16") or (acc == "float16" and dtype != "float16"):
        raise _fail(f"acc {acc!r} with dtype {dtype!r}: the mma intrinsics accumulate float16 or "
                    "bfloat16 in float32, and float16 in float16")  # fmt: skip
    if out_dtype not in (None, acc) and (acc, out_dtype) not in STORE_CASTS:
        raise _fail(f"out_dtype {out_dtype!r} with acc {acc!r}: the result is stored as the "
                    "accumulator's type, or a float32 accumulator as 'float16' or 'bfloat16'")  # fmt: skip
    for name, v in (("M", M), ("K", K), ("N", N)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            # a Var too: transform_layout of the warp fragments needs constant shapes
            raise _fail(f"{name} must be a positive int, got {v!r}")
    bm, bn, bk = block
    wm, wn = warp
    if any(x % _TILE for x in (bm, bn, bk, wm, wn)) or min(bm, bn, bk, wm, wn) <= 0:
        raise _fail(f"block {block} and warp {warp} tiles must be positive multiples of 16")
    if bm % wm or bn % wn:
        raise _fail(f"the warp tile {warp} must divide the block tile {block[:2]}")
    warps = (bm // wm) * (bn // wn)
    if warps * WARP_SIZE > 1024:
        raise _fail(f"{warps} warps per block ({warps * WARP_SIZE} threads); at most 1024 threads")
    for name, size, tile in (("M", M, bm), ("N", N, bn), ("K", K, bk)):
        if size % tile and not pad:
            raise _fail(
                f"{name} = {size} is not a multiple of the block tile's {tile}: the 16x16x16 tiles "
                "are tensorized whole (an inexact tile carries a predicate that blockize cannot "
                "divide); pass pad=True (the tiles of A and B are fetched with zeros past the "
                "sizes, C is stored through shared memory with guards) or pick a block tile "
                "dividing the sizes"
            )
    if isinstance(stages, bool) or not isinstance(stages, int) or not 1 <= stages <= 4:
        raise _fail(f"stages must be an int in 1..4, got {stages!r}")
    if vec not in (1, 2, 4, 8):
        raise _fail(f"vec must be 1, 2, 4 or 8 elements (at most 16 bytes), got {vec!r}")


def _ints(*sizes: Any) -> bool:
    return all(isinstance(x, int) and not isinstance(x, bool) for x in sizes)


def _fragment_map(layout: FragmentLayout, transposed: bool = False, batched: bool = False) -> Any:
    """``(i, j) -> (i // 16, j // 16, lane, local)``: a warp buffer in ``layout``'s fragments
    (``transposed``: the buffer is indexed ``(col, row)`` of the layout, as B ``[N, K]``;
    ``batched``: a leading batch index is kept)."""

    def tiles(i: Any, j: Any) -> tuple[Any, ...]:
        row, col = (j, i) if transposed else (i, j)
        return (i // _TILE, j // _TILE, *layout.to_lane_local(row % _TILE, col % _TILE))

    if batched:
        return lambda b, i, j: (b, *tiles(i, j))
    return tiles


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


def tc_gemm(M: int, K: int, N: int, dtype: str = "float16", *, acc: str = "float32",
            b_trans: bool = False, block: tuple[int, int, int] = (128, 128, 32),
            warp: tuple[int, int] = (64, 64), stages: int = 3, swizzle: bool = True,
            vec: int = 8, pad: bool | None = None, batch: int | None = None,
            out_dtype: str | None = None, fragment_stages: int = 1,
            a_prologue: Callable[[Any], Any] | None = None) -> Schedule:  # fmt: skip
    """``C = A @ B`` on tensor cores (``mma.sync.m16n8k16``, sm_80+), scheduled with loopir's
    primitives (module docstring).

    Parameters
    ----------
    M, K, N
        Problem sizes: multiples of the block tile (others are refused, naming the size).
    dtype
        ``"float16"`` or ``"bfloat16"`` inputs.
    acc
        Accumulator and output type: ``"float32"``, or ``"float16"`` for float16 inputs.
    b_trans
        B stored ``[N, K]`` (column-major B), loaded with ``ldmatrix`` without ``.trans``.
    block
        The block tile ``(bm, bn, bk)``: ``bm x bn`` of C per thread block, K steps of ``bk``.
    warp
        The warp tile ``(wm, wn)``: ``(bm / wm) * (bn / wn)`` warps per block.
    stages
        Software pipeline depth of the K loop (1: none; 2-4: ``cp.async`` fetches that many
        steps ahead, shared tiles multi-buffered).
    swizzle
        XOR-swizzle the shared tiles for conflict-free ``ldmatrix`` (else pad the rows by 8).
    vec
        Elements per thread and copy of the cooperative fetch (8: 16 bytes, ``cp.async.cg``).
    pad
        Pad the iteration space to multiples of the block tile (``pad_einsum``): the padded
        copies of A and B are inlined into the shared fetches (zeros past the sizes), and C is
        stored from the fragments to a shared tile, then copied out with guards. Default: when
        a size is not a multiple of the block tile; False refuses such sizes.
    batch
        A leading batch dimension of A, B and C of this size (``blockIdx.z``); None: none.
    a_prologue
        An elementwise function applied to A's elements (``tc_gemm_func``): computed as A's
        tiles are fetched to shared memory (the producer inlined into the fetch; synchronous
        loads then, as a computed value is no ``cp.async`` copy).
    fragment_stages
        1: each 16-wide K step loads its fragments (``ldmatrix``), then multiplies; 2: the K
        steps of one shared tile are a software pipeline too, the fragments double-buffered in
        registers (step ``k + 1``'s loaded while step ``k``'s ``mma`` run). ptxas already
        hoists the loads of an unrolled step over the previous step's ``mma`` (SASS in
        docs/benchmarks.md), so 2 measured the same on the H200.
    out_dtype
        The output's type: None or ``acc`` (C itself), or ``"float16"`` / ``"bfloat16"`` for a
        float32 accumulator: the result ``D`` is converted as the fragments are stored (half
        the bytes written; what ``torch.matmul`` of half-precision inputs returns).

    Returns
    -------
    Schedule
        ``sch.func`` is the scheduled function, ``sch.trace`` its trace.
    """
    if pad is None:
        pad = bool(M % block[0] or N % block[1] or K % block[2]) if _ints(M, K, N) else False
    _check(M, K, N, dtype, acc, block, warp, stages, vec, pad, out_dtype)
    if fragment_stages not in (1, 2) or isinstance(fragment_stages, bool):
        raise _fail(f"fragment_stages must be 1 or 2, got {fragment_stages!r}")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0):
        raise _fail(f"batch must be a positive int or None, got {batch!r}")
    bm, bn, bk = block
    wm, wn = warp
    sch = Schedule(tc_gemm_func(M, K, N, dtype, acc, b_trans, batch, out_dtype, a_prologue))
    lead = 0 if batch is None else 1
    # the buffers pad_einsum grows (A_pad, B_pad, C_pad)
    grown = (bool(M % bm or K % bk), bool(K % bk or N % bn), bool(M % bm or N % bn)) if pad else (False,) * 3
    if any(grown):
        sch.pad(sch.get_block("C"), [1] * lead + [bm, bn, bk])
    swizzles = (ldmatrix_swizzle(bk, bool(lead)), ldmatrix_swizzle(bk if b_trans else bn, bool(lead)))
    _schedule(sch, (bm // wm, bn // wn, wm // _TILE, wn // _TILE, bk // _TILE), stages,
              swizzles if swizzle else (None, None), vec, b_trans, grown)  # fmt: skip
    if fragment_stages == 2:
        # k1: the fragment loads of A and B, then the mma (the loop under k0)
        k1 = sch.get_loops(sch.get_block("C_o"))[lead + 5]
        sch.annotate(k1, "software_pipeline_stage", [0, 0, 1])
    return sch


def _schedule(sch: Schedule, tiles: tuple[Any, Any, Any, Any, Any], stages: Any,
              swizzles: tuple[str | None, str | None], vec: int, b_trans: bool,
              grown: tuple[bool, bool, bool]) -> None:  # fmt: skip
    """The schedule of block ``C`` of a (padded) ``tc_gemm_func``. ``tiles``: warps ``wy, wz``
    per block, 16x16 tiles ``mi, nj`` per warp, ``kf`` 16-steps per K step (ints or sampled
    values); ``stages`` an int or a sampled pipeline depth; ``swizzles``: the shared tiles'
    maps (None: rows padded by 8 instead); ``grown``: which of A, B, C ``pad`` grew."""
    wy, wz, mi, nj, kf = tiles
    params = sch.func.params
    dtype, out = params[0].dtype, params[2].dtype
    c = sch.get_block("C")
    block = sch.get(c)
    assert isinstance(block, Block)
    acc = block.writes[0].buffer.dtype  # C's: the output's, or the intermediate's before D
    lead = len(params[2].shape) - 2  # the batch loop above the block's i0 and j0
    *bl, i, j, k = sch.get_loops(c)
    i, i_tc = sch.split(i, [None, _TILE])
    j, j_tc = sch.split(j, [None, _TILE])
    k, k_tc = sch.split(k, [None, _TILE])
    sch.reorder(i, j, k, i_tc, j_tc, k_tc)
    outer = sch.blockize(i_tc)  # "C_o": one 16x16x16 tile; "C" inside is the mma
    i0, i1, i2 = sch.split(i, [None, wy, mi])
    j0, j1, j2 = sch.split(j, [None, wz, nj])
    k0, k1 = sch.split(k, [None, kf])
    sch.reorder(*bl, i0, j0, i1, j1, k0, k1, i2, j2)
    if bl:
        sch.bind(bl[0], "blockIdx.z")
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    sch.bind(i1, "threadIdx.y")
    sch.bind(j1, "threadIdx.z")

    shared = [_fetch(sch, outer, idx, k0, grown[idx], (wy, wz), vec) for idx in (0, 1)]
    a_warp = sch.cache_read(outer, 0, "warp")
    b_warp = sch.cache_read(outer, 1, "warp")
    sch.compute_at(a_warp, k1)
    sch.compute_at(b_warp, k1)
    c_warp = sch.cache_write(outer, 0, "warp")
    if out != acc:
        # D = C.astype(out) folded into C's write-back: the fragments are converted as they are
        # stored (or, padded, as the shared tile is copied out)
        sch.reverse_compute_inline(sch.get_block("D"))
    if grown[2]:
        # C_pad becomes the block's shared tile of C, copied out by every thread with guards
        sch.set_scope(c_warp, 0, "shared")
    sch.reverse_compute_at(c_warp, j1)
    if grown[2]:
        _copy_out(sch, j0, 2 + lead, (wy, wz))
    sch.decompose_reduction(outer, k0)
    _tensorize(sch, outer, (a_warp, b_warp, c_warp), (dtype, acc, out), b_trans, bool(lead), grown[2])
    for copy, swz in zip(shared, swizzles):
        if swz is not None:
            sch.transform_layout(copy, 0, swz)
        else:
            sch.storage_align(copy, 0, lead, 32, 8)
    if isinstance(stages, int):
        if stages > 1:
            sch.annotate(k0, "software_pipeline_stage", [0, 0, stages - 1])
            sch.annotate(k0, "software_pipeline_async_stages", [0])
    else:  # a sampled depth: every statement but the compute in stage 0, async
        sch.annotate(k0, DEPTH_KEY, stages)


def _bind_threads(sch: Schedule, loop: Any, warps: tuple[int, int], vec: int = 1) -> None:
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


def _fetch(sch: Schedule, outer: Any, idx: int, k0: Any, padded: bool, warps: tuple[int, int],
           vec: int) -> Any:  # fmt: skip
    """The shared tile of operand ``idx`` fetched at ``k0`` by all threads; its copy block."""
    copy = sch.cache_read(outer, idx, "shared")
    sch.compute_at(copy, k0)
    operand = ("A_prologue" if idx == 0 and "A_prologue" in block_names(sch.func) else ("A", "B")[idx])
    if padded:  # the zero-padded copy of the operand, read in the fetch
        sch.compute_inline(sch.get_block(operand + "_pad"))
    if operand == "A_prologue":  # an elementwise producer of A, computed as A is fetched
        sch.compute_inline(sch.get_block(operand))
    _bind_threads(sch, sch.fuse(*sch.get_loops(copy)[-2:]), warps, vec)
    return copy


def _copy_out(sch: Schedule, j0: Any, above: int, warps: tuple[int, int]) -> None:
    """The padded C's write-back at the block's loop ``j0`` (``above`` loops down to it), by
    all threads; unit loops kept: a 1-row C still has a row loop to spread over the threads."""
    out = sch.get_block("C_pad")
    sch.reverse_compute_at(out, j0, preserve_unit_loops=True)
    _bind_threads(sch, sch.fuse(*sch.get_loops(out)[above:]), warps)


def _tensorize(sch: Schedule, outer: Any, warp_blocks: tuple[Any, Any, Any], dtypes: tuple[str, str, str],
               b_trans: bool, batched: bool, c_shared: bool) -> None:  # fmt: skip
    """Fragment layouts on the warp buffers, then every 16x16 tile tensorized (``dtypes``: the
    inputs', the accumulator's and the output's)."""
    dtype, acc, out = dtypes
    t, a = DTYPE_ABBREV[dtype], DTYPE_ABBREV[acc]
    # a converting store, unless the tile goes to shared memory first (the copy-out converts)
    store = a if out == acc or c_shared else f"{a}_{DTYPE_ABBREV[out]}"
    a_warp, b_warp, c_warp = warp_blocks

    def fragments(block: Any) -> Any:
        """Split the copy's two innermost loops into 16x16 tiles; the tile's first loop."""
        r, c = sch.get_loops(block)[-2:]
        r0, r1 = sch.split(r, [None, _TILE])
        c0, c1 = sch.split(c, [None, _TILE])
        sch.reorder(r0, c0, r1, c1)
        return r1

    la, lb, lc = fragments(a_warp), fragments(b_warp), fragments(c_warp)
    sch.transform_layout(a_warp, 0, _fragment_map(MMA_A, batched=batched))
    sch.transform_layout(b_warp, 0, _fragment_map(MMA_B, b_trans, batched=batched))
    sch.transform_layout(outer, 0, _fragment_map(MMA_C, batched=batched))
    sch.tensorize(la, f"mma_ldmatrix_{t}_a")
    sch.tensorize(lb, f"mma_ldmatrix_{t}_b" + ("_trans" if b_trans else ""))
    sch.tensorize(sch.get_loops(sch.get_block("C"))[-3], f"mma_{t}{t}{a}")
    sch.tensorize(sch.get_loops(sch.get_block("C_init"))[-2], f"mma_fill_{a}")
    sch.tensorize(lc, f"mma_store_{store}_" + ("shared" if c_shared else "global"))


def tc_gemm_space(sch: Schedule, b_trans: bool = False) -> None:
    """A design space for [`loopir.tune`][loopir.tune.search.tune] around ``tc_gemm``, applied to
    ``Schedule(tc_gemm_func(...))``: warps per block ``wy`` (1, 2, 4) x ``wz`` (1, 2), 16x16 tiles
    per warp ``mi`` (2, 4) x ``nj`` (4, 8), and the ``cp.async`` pipeline depth (2-4) sampled;
    K steps of 32, 16-byte fetches and the swizzles fixed (the swizzle maps depend on the tile
    widths: the B tile is at least 64 columns wide in every candidate). The sizes must be
    multiples of every candidate's block tile (M of 256, N of 256, K of 32; batched or not):
    candidates that do not divide them are refused (tensorize needs whole tiles).
    ``b_trans``: B is stored ``[N, K]`` (bind with `functools.partial`).
    """

    def uniform(candidates: list[int]) -> Any:
        return sch.sample_categorical(candidates, [1.0] * len(candidates))

    batched = len(sch.func.params[2].shape) == 3
    tiles = (uniform([1, 2, 4]), uniform([1, 2]), uniform([2, 4]), uniform([4, 8]), 2)
    swizzles = (ldmatrix_swizzle(32, batched), ldmatrix_swizzle(32 if b_trans else 64, batched))
    _schedule(sch, tiles, uniform([2, 3, 4]), swizzles, 8, b_trans, (False, False, False))
