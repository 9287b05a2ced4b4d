"""A GEMM on tensor cores from loopir's own schedule primitives, the TVM way
(``tests/python/tir-schedule/test_tir_schedule_tensorize_ldmatrix_mma.py``).

``C[i, j] = sum_k A[i, k] * B[k, j]`` (B ``[K, N]``, or ``[N, K]`` with ``b_trans``), fp16 or
bf16 inputs, fp32 accumulation (fp16 too), the result in the accumulator's type or converted to
fp16/bf16 as it is stored, an optional elementwise prologue on A. The schedule is
[`loopir.schedule.tensor_core_gemm`][loopir.schedule.tensor_core_gemm] (the default GPU schedule
uses it too, for GEMMs that CUTLASS does not take): 16x16x16 tiles blockized and tensorized with
``ldmatrix`` / ``mma.sync``, warps on ``threadIdx.y/z``, shared tiles fetched with ``cp.async``
in a ``stages``-deep software pipeline and XOR-swizzled for ``ldmatrix``; sizes off the block
tile padded with ``pad_einsum``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loopir.errors import ScheduleError
from loopir.ir.expr import convert
from loopir.ir.op import STORE_CASTS
from loopir.ir.stmt import PrimFunc
from loopir.passes.pipeline_mma import MMA_IN_FLIGHT_KEY
from loopir.passes.pipeline_tma import TMA_KEY
from loopir.passes.pipeline_ws import WS_KEY
from loopir.passes.software_pipeline import WAIT_FIRST_KEY
from loopir.schedule import Schedule
from loopir.schedule import tensor_core_gemm as tcg
from loopir.schedule.tensor_core_gemm import ldmatrix_swizzle
from loopir.tensor_intrin.layouts import WARP_SIZE

__all__ = ["hopper_gemm", "hopper_gemm_space", "tc_gemm", "tc_gemm_func", "tc_gemm_space"]

_PRIM = "examples.tc_gemm"


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


def _fail(msg: str, prim: str = _PRIM) -> ScheduleError:
    return ScheduleError(msg, primitive=prim)


def _check(M: Any, K: Any, N: Any, dtype: str, acc: str, block: tuple[int, int, int],
           warp: tuple[int, int], stages: int, vec: int, pad: bool,
           out_dtype: str | None = None, prim: str = _PRIM) -> None:  # fmt: skip
    """Refuse bad parameters of the example ``prim`` by name."""

    def fail(msg: str) -> ScheduleError:
        return _fail(msg, prim)

    if dtype not in ("float16", "bfloat16"):
        raise fail(f"dtype must be 'float16' or 'bfloat16', got {dtype!r}")
    if acc not in ("float32", "float16") or (acc == "float16" and dtype != "float16"):
        raise fail(f"acc {acc!r} with dtype {dtype!r}: the mma intrinsics accumulate float16 or "
                    "bfloat16 in float32, and float16 in float16")  # fmt: skip
    if out_dtype not in (None, acc) and (acc, out_dtype) not in STORE_CASTS:
        raise fail(f"out_dtype {out_dtype!r} with acc {acc!r}: the result is stored as the "
                    "accumulator's type, or a float32 accumulator as 'float16' or 'bfloat16'")  # fmt: skip
    for name, v in (("M", M), ("K", K), ("N", N)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            # a Var too: transform_layout of the warp fragments needs constant shapes
            raise fail(f"{name} must be a positive int, got {v!r}")
    bm, bn, bk = block
    wm, wn = warp
    if any(x % tcg.TILE for x in (bm, bn, bk, wm, wn)) or min(bm, bn, bk, wm, wn) <= 0:
        raise fail(f"block {block} and warp {warp} tiles must be positive multiples of 16")
    if bm % wm or bn % wn:
        raise fail(f"the warp tile {warp} must divide the block tile {block[:2]}")
    warps = (bm // wm) * (bn // wn)
    if warps * WARP_SIZE > 1024:
        raise fail(f"{warps} warps per block ({warps * WARP_SIZE} threads); at most 1024 threads")
    for name, size, tile in (("M", M, bm), ("N", N, bn), ("K", K, bk)):
        if size % tile and not pad:
            raise fail(
                f"{name} = {size} is not a multiple of the block tile's {tile}: the 16x16x16 tiles "
                "are tensorized whole (an inexact tile carries a predicate that blockize cannot "
                "divide); pass pad=True (the tiles of A and B are fetched with zeros past the "
                "sizes, C is stored through shared memory with guards) or pick a block tile "
                "dividing the sizes"
            )
    if isinstance(stages, bool) or not isinstance(stages, int) or not 1 <= stages <= 4:
        raise fail(f"stages must be an int in 1..4, got {stages!r}")
    if vec not in (1, 2, 4, 8):
        raise fail(f"vec must be 1, 2, 4 or 8 elements (at most 16 bytes), got {vec!r}")


def _ints(*sizes: Any) -> bool:
    return all(isinstance(x, int) and not isinstance(x, bool) for x in sizes)


def tc_gemm(M: int, K: int, N: int, dtype: str = "float16", *, acc: str = "float32",
            b_trans: bool = False, block: tuple[int, int, int] = (128, 128, 32),
            warp: tuple[int, int] = (64, 64), stages: int = 4, swizzle: bool = True,
            vec: int = 8, pad: bool | None = None, batch: int | None = None,
            out_dtype: str | None = None, fragment_stages: int = 1,
            a_prologue: Callable[[Any], Any] | None = None, raster: int = 1,
            wait_first: bool = False) -> Schedule:  # fmt: skip
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
    raster
        Order the thread blocks in groups of this many block rows, column after column (the
        largest power of two at most ``raster`` dividing the block rows; 1: a 2-D grid, row
        after row): blocks running at once then share tiles of A and B in the L2 cache.
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
    wait_first
        Each K step waits for its tiles and synchronizes first, then issues the next copies
        and multiplies: one barrier a step instead of two
        ([`WAIT_FIRST_KEY`][loopir.passes.software_pipeline.WAIT_FIRST_KEY]). Off by default
        until measured on a GPU.

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
    if isinstance(raster, bool) or not isinstance(raster, int) or raster < 1:
        raise _fail(f"raster must be a positive int, got {raster!r}")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0):
        raise _fail(f"batch must be a positive int or None, got {batch!r}")
    bm, bn, bk = block
    wm, wn = warp
    sch = Schedule(tc_gemm_func(M, K, N, dtype, acc, b_trans, batch, out_dtype, a_prologue))
    m = tcg.match(sch, "C")
    assert m is not None
    tcg.schedule_with_pad(sch, m, block, warp, stages, swizzle=swizzle, vec=vec, pad=pad,
                          fragment_stages=fragment_stages, raster=raster,
                          wait_first=_bool("wait_first", wait_first))  # fmt: skip
    return sch


def _bool(name: str, value: Any, prim: str = _PRIM) -> bool:
    if not isinstance(value, bool):
        raise _fail(f"{name} must be a bool, got {value!r}", prim)
    return value


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

    m = tcg.match(sch, "C")
    if m is None:
        raise _fail("tc_gemm_space: block 'C' is not a tensor-core GEMM (apply it to tc_gemm_func)")
    batched = m.batch > 0
    tiles = (uniform([1, 2, 4]), uniform([1, 2]), uniform([2, 4]), uniform([4, 8]), 2)
    swizzles = (ldmatrix_swizzle(32, batched), ldmatrix_swizzle(32 if m.b_trans else 64, batched))
    tcg.schedule(sch, m, tiles, uniform([2, 3, 4]), swizzles, 8, (False, False, False))


_HOPPER = "examples.hopper_gemm"


def hopper_gemm(M: int, K: int, N: int, dtype: str = "float16", *,
                block: tuple[int, int, int] = (128, 256, 64), wn: int = 256, stages: int | None = None,
                vec: int = 8, pad: bool | None = None, batch: int | None = None,
                out_dtype: str | None = None,
                a_prologue: Callable[[Any], Any] | None = None, wait_first: bool = True,
                async_mma: bool | None = None, raster: int | None = None, tma: bool | None = None,
                warp_specialized: bool | tuple[int, int] | None = None,
                persistent: bool | int | None = None) -> Schedule:  # fmt: skip
    """``C = A @ B.T`` (A ``[M, K]``, B ``[N, K]``, the ``nn.Linear`` layout) on Hopper's
    warpgroup tensor cores (``wgmma``, sm_90a), scheduled with loopir's primitives: the
    [`tc_gemm`][loopir.examples.tc_gemm] schedule with ``wgmma=True``
    ([`loopir.schedule.tensor_core_gemm`][loopir.schedule.tensor_core_gemm]).

    Each warp owns 16 rows of the block tile and ``wn`` columns; 4 consecutive warps (a
    warpgroup) issue four ``wgmma.m64n{wn}k16`` per 64-wide K step and wait once, reading A and
    B straight from the shared tiles, which are fetched in a ``stages``-deep pipeline and stored
    with the 128-byte swizzle the matrix descriptors name. fp32 accumulation; the result in
    fp32 or converted (``out_dtype``). With ``async_mma`` each step's ``wgmma`` stays in flight
    while the next step waits for its tiles.

    **The default form** is the fastest measured on the H200 (issue 32; fp16 4096^3 at 0.92x
    cuBLAS and 1.28x Triton, 2-9 % faster than the non-persistent forms at every measured
    shape): ``tma=True, warp_specialized=True, persistent=True, raster=8`` (TMA copies, a
    producer warpgroup, 132 thread blocks looping over the tiles in groups of 8 block rows).
    Each of the four left out (None) takes that value where the other arguments allow it:

    * ``tma``: K a multiple of 8, no ``a_prologue``, no ``batch``, ``stages`` None or at least
      2 (else False: ``cp.async`` copies by every thread);
    * ``warp_specialized``: ``tma`` and one warp column, ``block[1] == wn`` (else False);
    * ``persistent``: ``warp_specialized`` and constant M and N (else False);
    * ``raster``: 8 when ``persistent``, else 1.

    So ``tma=False`` gives the ``cp.async`` form of earlier sessions exactly (``raster=1``, not
    persistent), ``warp_specialized=False`` the TMA form with a block barrier per step, and
    ``persistent=False`` the warp-specialized form with a 2-D grid (``raster=1``).

    Parameters
    ----------
    M, K, N
        Problem sizes (others than multiples of the block tile are padded, as ``tc_gemm``).
    dtype
        ``"float16"`` or ``"bfloat16"`` inputs.
    block
        ``(bm, bn, 64)``: ``bm`` a multiple of 64 (whole warpgroups), ``bn`` a multiple of
        ``wn``, K steps of 64 (one 128-byte swizzle row). The default, 128 x 256 with
        ``wn = 256`` (2 warpgroups, 128 accumulators per thread), measured fastest on the H200
        (docs/benchmarks.md).
    wn
        Columns per warp: the ``N`` of ``wgmma.m64nNk16``, a multiple of 16 up to 256.
    stages
        Software pipeline depth (1-4); default: the deepest, up to 4, whose shared tiles (and
        the padded C tile, when sizes are off the block tile) fit in 227 KB.
    vec, pad, batch, out_dtype, a_prologue, raster
        As for [`tc_gemm`][loopir.examples.tc_gemm] (``raster`` None: the default form's rule,
        above).
    wait_first
        As for ``tc_gemm``, but on by default: 1.09-1.13x the two-barrier order at 4096 x 4096
        x {4096, 11008} on the H200 (docs/benchmarks.md, session 13).
    async_mma
        Issue each K step's ``wgmma`` asynchronously and retire it one step later
        (``wgmma.wait_group 1`` after the next step's issue, ``wait_group 0`` after the last),
        as CUTLASS's sm90 mainloops do: the tensor cores multiply step ``k`` while the warps
        wait for step ``k + 1``'s tiles and synchronize. The tiles read by step ``k`` are then
        still read during step ``k + 1``, so the copies run ``stages - 2`` steps ahead (not
        ``stages - 1``) with the same ``stages`` buffer versions; ``stages`` must be at least 3
        ([`MMA_IN_FLIGHT_KEY`][loopir.passes.pipeline_mma.MMA_IN_FLIGHT_KEY], docs/pipelining.md).
        None (the default): on when ``stages >= 3``. On the H200 it takes ``hopper_gemm`` from
        0.71-0.77x cuBLAS to 0.84-0.90x (docs/benchmarks.md, session 13).
    tma
        Fetch the A and B tiles with TMA copies (``cp.async.bulk.tensor``, 128-byte swizzled
        boxes of 64 columns) completing on one mbarrier per stage, issued by thread 0, instead
        of ``cp.async`` by every thread: every thread waits on the stage's barrier (parity
        ``k // stages % 2``), then the step's one ``__syncthreads`` (``wait_first``) orders the
        reads and the next copies into that stage
        ([`TMA_KEY`][loopir.passes.pipeline_tma.TMA_KEY]). Padded sizes: the boxes that leave
        A or B are filled with zeros by TMA (what ``pad`` fetches). Needs K a multiple of 8
        (16-byte rows), no ``a_prologue``, ``stages >= 2``. None: the default form's rule
        (above).
    warp_specialized
        With ``tma``: producer/consumer warp specialization, as CUTLASS 3's sm90
        "warpspecialized" mainloop: one more warpgroup (128 threads) whose elected thread only
        issues the TMA copies, each stage's after a wait on its *empty* mbarrier; the other
        warps wait on the stage's *full* mbarrier themselves (no ``__syncthreads`` in the K
        loop), run the ``wgmma``, and once it retired release the stage (one arrival per warp
        on *empty*); the epilogue by them. ``(dec, inc)``: also ``setmaxnreg`` (the producer's
        registers per thread down to ``dec``, the consumers' up to ``inc``). Needs one warp
        column (``block[1] == wn``). ``wait_first`` has no meaning then
        ([`WS_KEY`][loopir.passes.pipeline_ws.WS_KEY]). None: the default form's rule (above).
    persistent
        With ``warp_specialized``: a persistent tile scheduler, as CUTLASS's sm90 persistent
        kernels: ``True`` (``PERSISTENT_CTAS`` = 132, the H200's SMs) or a number of thread
        blocks (at most the tiles), each looping over the block tiles ``it * ctas + blockIdx.x`` (the tile loops
        fused, split by ``ctas``, the inner part bound to ``blockIdx.x``, the outer a serial loop
        around the K loop and the epilogue; a count that does not divide the tiles leaves a
        predicate, which the pipeline lifts into the tile loop's extent,
        [`persistent_tiles`][loopir.passes.pipeline_ws_tiles.persistent_tiles]). The producer
        runs on into the next tile's K steps while the consumers store the current tile: the
        stage and the mbarrier parity go on across tiles (global step ``it * k_steps + k``).
        Sizes off the block tile: K is filled with zeros by TMA, and a padded C is stored from
        the accumulator fragments straight to the result, each lane its own elements under a
        guard on the sizes (``tensor_core_gemm.schedule``'s ``direct``), not through a shared
        tile of C between block barriers as the other forms: the producer warpgroup, running
        ahead into the next tile, never reaches the consumers' barriers (a deadlock), and a
        barrier over the consumer warps alone would need a shared tile of C all the same (128 KB
        of float32 at 128 x 256: 2 stages instead of 4), where the stores straight from the
        registers need none (CUTLASS's sm90 default epilogue does the same, with predicates).
        Constant sizes only, as every ``hopper_gemm``. None: the default form's rule (above).
    """
    if pad is None:
        pad = bool(M % block[0] or N % block[1] or K % block[2]) if _ints(M, K, N) else False
    tma, warp_specialized, persistent, raster = _form(M, K, N, block, wn, stages, batch, a_prologue,
                                                      (tma, warp_specialized, persistent, raster))  # fmt: skip
    if _bool("tma", tma, _HOPPER) and (a_prologue is not None or (isinstance(K, int) and K % 8)):
        raise _fail(f"tma=True needs K a multiple of 8 (TMA reads rows of A and B whose stride must be a multiple "
                    f"of 16 bytes) and no a_prologue (the fetch must be a box copy), got K={K}, "
                    f"a_prologue={a_prologue is not None}", _HOPPER)  # fmt: skip
    bm, bn, bk = block
    if warp_specialized is not False and (not (warp_specialized is True or _regs(warp_specialized)) or not tma):
        raise _fail(f"warp_specialized must be False, True or (dec, inc) register counts (24 to 256, multiples "
                    f"of 8), with tma=True; got {warp_specialized!r}, tma={tma!r}", _HOPPER)  # fmt: skip
    ctas = _ctas(persistent, warp_specialized, M, N, block)
    if warp_specialized is not False and bn != wn:
        raise _fail(f"warp_specialized needs one warp column, block[1] == wn (the warps along threadIdx.y "
                    f"only, the producer warpgroup after them), got block {block}, wn {wn}", _HOPPER)  # fmt: skip
    if bk != 64 or bm % 64 or not (isinstance(wn, int) and 16 <= wn <= 256 and wn % 16 == 0) or bn % wn:
        raise _fail(f"block {block} and wn {wn!r}: the block tile must be (64k, a multiple of wn, 64) and wn "
                    "a multiple of 16 from 16 to 256", _HOPPER)  # fmt: skip
    if stages is None:
        stages = tcg.wgmma_stages(M, N, block, direct=ctas is not None) if pad and _ints(M, N) else 4
    _check(M, K, N, dtype, "float32", block, (16, wn), stages, vec, pad, out_dtype, _HOPPER)
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0):
        raise _fail(f"batch must be a positive int or None, got {batch!r}", _HOPPER)
    sch = Schedule(tc_gemm_func(M, K, N, dtype, "float32", True, batch, out_dtype, a_prologue))
    m = tcg.match(sch, "C")
    assert m is not None
    if async_mma is None:
        async_mma = stages >= 3
    elif _bool("async_mma", async_mma, _HOPPER) and stages < 3:
        raise _fail(f"async_mma needs stages >= 3 (the version in flight, the one the copies fill and the "
                    f"one read next), got {stages}", _HOPPER)  # fmt: skip
    if isinstance(raster, bool) or not isinstance(raster, int) or raster < 1:
        raise _fail(f"raster must be a positive int, got {raster!r}", _HOPPER)
    tcg.schedule_with_pad(sch, m, block, (16, wn), stages, vec=vec, pad=pad, wgmma=True, raster=raster,
                          wait_first=_bool("wait_first", wait_first, _HOPPER), async_mma=async_mma, tma=tma,
                          warp_specialized=warp_specialized, ctas=ctas, direct=ctas is not None)  # fmt: skip
    return sch


#: ``hopper_gemm(persistent=True)``'s thread blocks: the H200's (and H100 SXM's) 132 SMs.
PERSISTENT_CTAS = tcg.PERSISTENT_CTAS


def _form(M: Any, K: Any, N: Any, block: tuple[int, int, int], wn: Any, stages: Any, batch: Any, a_prologue: Any,
          given: tuple[Any, Any, Any, Any]) -> tuple[Any, Any, Any, Any]:  # fmt: skip
    """``hopper_gemm``'s ``tma, warp_specialized, persistent, raster``, each None (not given)
    resolved: the fastest form (TMA, a producer warpgroup, persistent, ``raster=8``) where the
    other arguments allow it, else the earlier forms (``hopper_gemm``'s docstring). Given values
    are kept (and checked by the caller)."""
    tma, ws, persistent, raster = given
    if tma is None:
        # TMA's box copies: rows of a multiple of 16 bytes, 2-d (no batch), no computed operand
        tma = _ints(M, K, N) and K % 8 == 0 and a_prologue is None and batch is None and \
            (stages is None or (isinstance(stages, int) and stages >= 2))  # fmt: skip
    if ws is None:
        ws = tma is True and block[1] == wn  # one warp column: the producer warps after the consumers
    if persistent is None:
        persistent = ws is not False and _ints(M, N)  # the tiles' count fixes the grid
    if raster is None:
        raster = 8 if persistent is not False else 1
    return tma, ws, persistent, raster


def _ctas(persistent: object, warp_specialized: object, M: Any, N: Any, block: tuple[int, int, int]) -> int | None:
    """The thread blocks of ``hopper_gemm``'s ``persistent`` (None: not persistent), checked."""
    if persistent is False:
        return None
    ctas = PERSISTENT_CTAS if persistent is True else persistent
    if isinstance(ctas, bool) or not isinstance(ctas, int) or ctas < 1 or warp_specialized is False:
        raise _fail(f"persistent must be False, True or a positive number of thread blocks, with warp_specialized; "
                    f"got {persistent!r}, warp_specialized={warp_specialized!r}", _HOPPER)  # fmt: skip
    if not _ints(M, N):
        raise _fail(f"persistent={persistent!r} needs constant sizes M and N (the number of tiles fixes the grid; "
                    f"the fragments' layouts need constant shapes, as for every hopper_gemm), got M={M}, N={N}",
                    _HOPPER)  # fmt: skip
    return tcg.persistent_ctas(M, N, block, ctas)


def _regs(value: object) -> bool:
    """Whether ``value`` is a ``(dec, inc)`` pair of ``setmaxnreg`` register counts."""
    return isinstance(value, tuple) and len(value) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) and 24 <= v <= 256 and v % 8 == 0 for v in value
    )


def hopper_gemm_space(sch: Schedule, warp_specialized: bool | None = None) -> None:
    """A design space for [`loopir.tune`][loopir.tune.search.tune] around ``hopper_gemm``,
    applied to ``Schedule(tc_gemm_func(..., b_trans=True))`` (B ``[N, K]``, a float32
    accumulator). The sizes must be multiples of every candidate's block tile (M of 128, N of
    256, K of 64). Two forms, as ``hopper_gemm``'s default and its ``cp.async`` fallback:

    * ``warp_specialized`` (None: where it fits, K a multiple of 8 and no batch; True refuses
      what does not fit): ``hopper_gemm``'s default form, TMA copies and a producer warpgroup
      on ``wgmma.m64n256k16``, one warp column, with sampled: the block rows ``wy`` (4 or 8
      consumer warps: 64 x 256 or 128 x 256 tiles), the pipeline depth (2-4), the ``raster``
      group (those of 1, 8 and 16 that divide the block rows of both tiles) and the persistent
      grid: ``PERSISTENT_CTAS`` blocks (on) or one block per 128 x 256 tile (off; the 64 x 256
      tiles then go two to a block). Every candidate fits the 227 KB of shared memory (at
      most 4 x 48 KB, C stored from the fragments).
    * False: the ``cp.async`` form of earlier sessions: warps along M ``wy`` (4 or 8) x along N
      ``wz`` (1 or 2, 128 columns each: one ``wgmma.m64n128k16`` per warp and 16-wide K step)
      and the pipeline depth (2-4) sampled; K steps of 64 and the 128-byte swizzle fixed.

    In both each step waits first and, from depth 3, its ``wgmma`` is retired a step later, as
    ``hopper_gemm``'s defaults. Which form, and the warp tile's columns (the ``wgmma``
    instruction), are not sampled: another value would need other instructions in the trace
    than the one recorded, and a replayed trace runs the recorded instructions with the new
    decisions (``loopir.tune.spaces``: a sampled value never goes into a Python branch). Bind
    ``warp_specialized`` with ``functools.partial`` to tune the other form.
    """
    m = tcg.match(sch, "C")
    if m is None or not m.b_trans or m.acc != "float32":
        raise _fail("hopper_gemm_space: block 'C' is not a GEMM with B [N, K] and a float32 accumulator "
                    "(apply it to tc_gemm_func(..., b_trans=True))", _HOPPER)  # fmt: skip
    M, K, N = m.sizes
    fits = K % 8 == 0 and m.batch == 0 and all(p is None for p in m.producers)
    if warp_specialized is None:
        warp_specialized = fits
    elif _bool("warp_specialized", warp_specialized, _HOPPER) and not fits:
        raise _fail(f"hopper_gemm_space: warp_specialized=True needs K a multiple of 8, no batch and no producer "
                    f"of A or B (TMA box copies), got K={K}, batch {bool(m.batch)}", _HOPPER)  # fmt: skip
    (_ws_space if warp_specialized else _cp_async_space)(sch, m)


def _uniform(sch: Schedule, candidates: list[int]) -> Any:
    return sch.sample_categorical(candidates, [1.0] * len(candidates))


def _cp_async_space(sch: Schedule, m: tcg.TensorCoreGemm) -> None:
    """``hopper_gemm_space``'s ``cp.async`` form."""
    swizzle = ldmatrix_swizzle(64, m.batch > 0)
    tiles = (_uniform(sch, [4, 8]), _uniform(sch, [1, 2]), 1, 8, 4)
    done = tcg.schedule(sch, m, tiles, _uniform(sch, [2, 3, 4]), (swizzle, swizzle), 8, (False, False, False),
                        wgmma=True)  # fmt: skip
    # hopper_gemm's defaults: one barrier a step, and from 3 stages the wgmma retired a step later
    sch.annotate(done.k0, WAIT_FIRST_KEY, True)
    sch.annotate(done.k0, MMA_IN_FLIGHT_KEY, 1)


def _ws_space(sch: Schedule, m: tcg.TensorCoreGemm) -> None:
    """``hopper_gemm_space``'s warp-specialized persistent form (``hopper_gemm``'s default)."""
    M, _, N = m.sizes
    rows = [-(-M // bm) for bm in (64, 128)]
    rasters = [r for r in (1, 8, 16) if all(n % r == 0 for n in rows)]
    # the fewest tiles (128 x 256) bound the blocks: no candidate has an idle one
    tiles = tcg.persistent_ctas(M, N, (128, 256, 64), 1 << 30)
    ctas = sorted({min(PERSISTENT_CTAS, tiles), tiles})
    swizzle = ldmatrix_swizzle(64)
    done = tcg.schedule(sch, m, (_uniform(sch, [4, 8]), 1, 1, 16, 4), _uniform(sch, [2, 3, 4]), (swizzle, swizzle), 8,
                        (False, False, False), raster=_uniform(sch, rasters), wgmma=True, tma=True,
                        ctas=_uniform(sch, ctas))  # fmt: skip
    sch.annotate(done.k0, WAIT_FIRST_KEY, True)
    sch.annotate(done.k0, MMA_IN_FLIGHT_KEY, 1)
    sch.annotate(done.k0, TMA_KEY, True)
    sch.annotate(done.k0, WS_KEY, True)
