"""The prefill attention with S, P and the output in the ``mma`` fragments' registers
(FlashAttention 2's schedule; issue 33).

[`attention_func`][loopir.examples.attention.attention_func]``(..., fragments=True)`` writes the
program of [`loopir.examples.attention`][loopir.examples.attention] with its per-row passes
split so that each is an elementwise block or a plain row reduction (which the fragments'
tensor intrinsics take), and with four copies of each row statistic (``m[i, q]``, ``q < 4``,
all equal: every block computes every copy; a block at column ``j`` reads copy ``j % 8 // 2``,
the one the lane holding ``(i, j)`` will hold), per KV tile:

1. ``S = Q_tile K_tile^T`` (block ``S``); ``m_prev = m`` (``save_max``);
2. ``S`` kept on valid keys, ``-inf`` elsewhere (``S_mask``, in place);
3. ``m = max(m, S[i, j])`` over the tile (``row_max``, no init: ``m`` is the running maximum
   of the unscaled scores);
4. ``P = exp(S * scale - m * scale)`` on valid keys, 0 elsewhere, rounded to the input type
   (``P``);
5. ``alpha = exp(m_prev * scale - m * scale)`` (1 while both are ``-inf``) and
   ``l = l * alpha`` (``rescale``); ``l = l + P[i, j]`` over the tile (``row_sum``, no init);
6. ``acc = acc * alpha`` (``acc_rescale``), then ``acc += P V_tile`` (``PV``: the second GEMM
   accumulating into the output directly, no init).

It computes what the default program does up to rounding: the maximum is taken over the
unscaled scores (the scale is positive, so the maximum is the same key's) and the scale is
applied inside the exponentials, where fast math folds it with ``log2(e)`` and the maximum
into one FFMA per score, ``loopir_ex2(fmaf(S, scale * log2(e), -m * scale * log2(e)))`` (``ex2.approx.ftz``), as
FlashAttention 2 does (``softmax_scale_log2``): no multiplication by the scale per score.

[`schedule_fragments`][loopir.examples.attention_fragments.schedule_fragments] schedules it
with everything but the Q, K and V tiles in registers, a warp per 16 query rows:

* ``S`` (float32), ``P`` (the input type) and ``acc`` (float32) are ``warp`` buffers in the
  accumulator layout ``(i // 16, j // 16, MMA_C(i % 16, j % 16))``; the statistics ``m``,
  ``m_prev``, ``l``, ``alpha`` are ``warp`` buffers in the ``ROW_STATS`` layout: lane ``l`` holds
  its copies of rows ``l // 4`` and ``l // 4 + 8``, the rows of its accumulator elements;
* ``S = Q K^T`` on ``mma.sync`` into ``S``'s fragments (Q and K by ``ldmatrix``), no store;
* the elementwise blocks iterate ``(warp, tile, lane, local)`` (``S_mask``, ``P``,
  ``acc_rescale``, ``init_acc``, ``O``) or ``(warp, lane, local)`` (the statistics' blocks)
  through ``transform_block_layout``: each lane its own registers;
* ``row_max`` and ``row_sum`` tensorized with ``frag_row_max_f32_n{n}_quad`` /
  ``frag_row_sum_{t}_n{n}_quad`` (``loopir.tensor_intrin.fragment``): register reductions and
  two quad shuffles per pair of rows, every lane keeping its copies: no shared memory, no
  barrier;
* ``P`` feeds the second GEMM as it is: the 16 x 16 C-fragment layout is the A-operand layout
  of ``mma.m16n8k16`` lane for lane (``MMA_C`` and ``MMA_A`` are one map), so ``P V`` needs
  no ``ldmatrix`` and no shared memory for ``P`` (V by ``ldmatrix.trans``);
* the K and V tiles as before: 16-byte ``cp.async`` one KV tile ahead, rows padded.

FlashAttention 3's overlap (``attention(..., wgmma=True, overlap=True)``) takes the program in
its form (``OVERLAP_TEMPLATE``: block
``S_exp`` writes the exponentials into S in place, ``row_sum`` adds them in float32 with
``frag_row_sum_f32``, block ``P`` converts them last) and pipelines the KV loop over three
stages, the output's GEMM a step behind the scores' and its softmax
([`pipeline_overlap`][loopir.examples.attention_fragments.pipeline_overlap]).
"""

from __future__ import annotations

from typing import Any

from loopir.examples.attention import (
    _HEAD,
    _KV_TILES_AND_S,
    _Q_LOAD,
    _finish_schedule,
    _start_schedule,
)
from loopir.ir.functor import post_order_stmts
from loopir.ir.op import WGMMA_K_MAJOR_DEPTHS
from loopir.schedule import Schedule
from loopir.schedule.trace import BlockRV, LoopRV
from loopir.tensor_intrin.cuda import DTYPE_ABBREV, wgmma_intrin, wgmma_rs_intrin
from loopir.tensor_intrin.fragment import row_reduce_intrin
from loopir.tensor_intrin.layouts import MMA_C, ROW_STATS, SW128_ROW, sw128

__all__ = ["FRAGMENT_LSE_BLOCK", "FRAGMENT_TEMPLATE", "OVERLAP_TEMPLATE", "QRESCALE", "pipeline_overlap", "schedule_fragments", "wgmma_o", "wgmma_s"]

_FRAGMENT_HEAD = _HEAD + '''            acc = T.alloc_buffer(({BM}, {D}), "float32")
            m = T.alloc_buffer(({BM}, 4), "float32")
            m_prev = T.alloc_buffer(({BM}, 4), "float32")
            l = T.alloc_buffer(({BM}, 4), "float32")
            alpha = T.alloc_buffer(({BM}, 4), "float32")
''' + _Q_LOAD + '''            for ii, q in T.grid({BM}, 4):
                with T.block("init_stats"):
                    vii, vq = T.axis.remap("SS", [ii, q])
                    m[vii, vq] = T.min_value("float32")
                    l[vii, vq] = T.float32(0)
''' + _KV_TILES_AND_S + '''                for ii, q in T.grid({BM}, 4):
                    with T.block("save_max"):
                        vii, vq = T.axis.remap("SS", [ii, q])
                        m_prev[vii, vq] = m[vii, vq]
                for ii, jj in T.grid({BM}, {BN}):
                    with T.block("S_mask"):
                        vj0, vii, vjj = T.axis.remap("SSS", [j0, ii, jj])
                        S[vii, vjj] = T.if_then_else({VALID}, S[vii, vjj], T.min_value("float32"))
                for ii, q, jj in T.grid({BM}, 4, {BN}):
                    with T.block("row_max"):
                        vii, vq, vjj = T.axis.remap("SSR", [ii, q, jj])
                        m[vii, vq] = T.max(m[vii, vq], S[vii, vjj])
'''
#: The statistics rescaled by ``alpha`` (the running sum ``l`` here, the output in block
#: ``acc_rescale``).
_RESCALE = '''                for ii, q in T.grid({BM}, 4):
                    with T.block("rescale"):
                        vii, vq = T.axis.remap("SS", [ii, q])
                        alpha[vii, vq] = {QRESCALE}
                        l[vii, vq] = l[vii, vq] * {QRESCALE}
'''
#: The exponentials rounded to the input type as P, the statistics rescaled, the row sums of P.
_SOFTMAX_P = '''                for ii, jj in T.grid({BM}, {BN}):
                    with T.block("P"):
                        vj0, vii, vjj = T.axis.remap("SSS", [j0, ii, jj])
                        P[vii, vjj] = T.Cast("{dt}", T.if_then_else({VALID}, T.exp(S[vii, vjj] * T.float32({SCALE}) - m[vii, vjj % 8 // 2] * T.float32({SCALE})), T.float32(0)))
''' + _RESCALE + '''                for ii, q, jj in T.grid({BM}, 4, {BN}):
                    with T.block("row_sum"):
                        vii, vq, vjj = T.axis.remap("SSR", [ii, q, jj])
                        l[vii, vq] = l[vii, vq] + T.Cast("float32", P[vii, vjj])
'''
#: FlashAttention 3's softmax (``overlap``): the exponentials into S's float32 fragments in
#: place (``S_exp``), the statistics rescaled, the row sums of the float32 exponentials, and P,
#: the exponentials rounded to the input type, a conversion of its own at the end (block ``P``:
#: P is the register A of ``P V``, which may not be written while the previous ``P V`` runs).
_SOFTMAX_IN_PLACE = '''                for ii, jj in T.grid({BM}, {BN}):
                    with T.block("S_exp"):
                        vj0, vii, vjj = T.axis.remap("SSS", [j0, ii, jj])
                        S[vii, vjj] = T.if_then_else({VALID}, T.exp(S[vii, vjj] * T.float32({SCALE}) - m[vii, vjj % 8 // 2] * T.float32({SCALE})), T.float32(0))
''' + _RESCALE + '''                for ii, q, jj in T.grid({BM}, 4, {BN}):
                    with T.block("row_sum"):
                        vii, vq, vjj = T.axis.remap("SSR", [ii, q, jj])
                        l[vii, vq] = l[vii, vq] + S[vii, vjj]
                for ii, jj in T.grid({BM}, {BN}):
                    with T.block("P"):
                        vii, vjj = T.axis.remap("SS", [ii, jj])
                        P[vii, vjj] = T.Cast("{dt}", S[vii, vjj])
'''
_FRAGMENT_TAIL = '''                for ii, d in T.grid({BM}, {D}):
                    with T.block("acc_rescale"):
                        vii, vd = T.axis.remap("SS", [ii, d])
                        acc[vii, vd] = acc[vii, vd] * alpha[vii, vd % 8 // 2]
                for ii, d, jj in T.grid({BM}, {D}, {BN}):
                    with T.block("PV"):
                        vii, vd, vjj = T.axis.remap("SSR", [ii, d, jj])
                        acc[vii, vd] = acc[vii, vd] + T.Cast("float32", P[vii, vjj]) * T.Cast("float32", V_s[vjj, vd])
            for ii, d in T.grid({BM}, {D}):
                with T.block("O"):
                    vii, vd = T.axis.remap("SS", [ii, d])
                    if {IN_Q}:
                        O[vb, vh, {ROW}, vd] = T.Cast("{dt}", T.if_then_else(l[vii, vd % 8 // 2] > T.float32(0), acc[vii, vd] / l[vii, vd % 8 // 2], T.float32(0)))
{LSE_BLOCK}'''

#: The program (fields as ``loopir.examples.attention``'s template).
FRAGMENT_TEMPLATE = _FRAGMENT_HEAD + _SOFTMAX_P + _FRAGMENT_TAIL
#: The program in FlashAttention 3's form (``overlap``; the same fields): the same result up to
#: the rounding of the row sums (of the float32 exponentials, not of P).
OVERLAP_TEMPLATE = _FRAGMENT_HEAD + _SOFTMAX_IN_PLACE + _FRAGMENT_TAIL

#: The logsumexp: the first copy of each row's statistics.
FRAGMENT_LSE_BLOCK = '''            for ii, q in T.grid({BM}, 4):
                with T.block("LSE"):
                    vii, vq = T.axis.remap("SS", [ii, q])
                    if {IN_Q} and vq == 0:
                        LSE[vb, vh, {ROW}] = T.if_then_else(l[vii, vq] > T.float32(0), m[vii, vq] * T.float32({SCALE}) + T.log(l[vii, vq]), T.min_value("float32"))
'''
#: ``exp((m_prev - m) * scale)`` of copy ``vq`` (the maxima are unscaled), and 1 while the row
#: has seen no valid key.
QRESCALE = ("T.if_then_else(m_prev[vii, vq] == m[vii, vq], T.float32(1), "
            "T.exp(m_prev[vii, vq] * T.float32({SCALE}) - m[vii, vq] * T.float32({SCALE})))")

#: Elementwise blocks over the quad-replicated statistics.
_STATS_BLOCKS = ("init_stats", "save_max", "rescale", "LSE")
#: Elementwise blocks over fragments.
_ELEMENTWISE = ("init_acc", "S_mask", "P", "acc_rescale", "O")
_SHARED = (("Q_load", "Q_s"), ("K_load", "K_s"), ("V_load", "V_s"))
_FRAGMENTS = (("S", "S"), ("P", "P"), ("init_acc", "acc"))
#: The statistics, each ``(rows, 4)``: one copy per lane of a quad.
_STATS = (("init_stats", "m"), ("init_stats", "l"), ("save_max", "m_prev"), ("rescale", "alpha"))
_ALIGN = (("Q_load", "Q_s", 16, 8), ("K_load", "K_s", 16, 8), ("V_load", "V_s", 16, 8))
_FAST_MATH = ("P", "rescale", "O", "LSE")
_VEC = 8
_TILE = 16


def _fragment_map(i: Any, j: Any) -> tuple[Any, ...]:
    """``(i, j) -> (i // 16, j // 16, lane, local)``: the accumulator layout of 16 x 16 tiles
    (also the A-operand layout of ``mma.m16n8k16``: ``MMA_A`` is the same map)."""
    return (i // _TILE, j // _TILE, *MMA_C.to_lane_local(i % _TILE, j % _TILE))


def _stats_map(i: Any, q: Any) -> tuple[Any, ...]:
    """``(i, q) -> (i // 16, lane, local)``: copy ``q`` of row ``i``'s statistic in the
    registers of the lanes holding the row's accumulator elements (``ROW_STATS``)."""
    return (i // _TILE, *ROW_STATS.to_lane_local(i % _TILE, q))


def schedule_fragments(sch: Schedule, *, dtype: str, block_m: int, block_n: int, head_dim: int,
                       lse: bool, wgmma: bool = False, wgmma_pv: bool = False,
                       overlap: bool = False, tma: bool | tuple[int, int] = False) -> Schedule:  # fmt: skip
    """The schedule of the module doc on ``sch`` (of ``attention_func(..., fragments=True)``);
    ``wgmma``: ``S = Q K^T`` on Hopper's ``wgmma`` from 128-byte-swizzled Q and K tiles
    ([`wgmma_s`][loopir.examples.attention_fragments.wgmma_s]) instead of ``mma.sync``;
    ``wgmma_pv``: ``acc += P V`` on ``wgmma`` too, P from registers
    ([`wgmma_o`][loopir.examples.attention_fragments.wgmma_o]); ``overlap`` (with both, on the
    program of ``attention_func(..., overlap=True)``): the softmax overlapped with the GEMMs
    ([`pipeline_overlap`][loopir.examples.attention_fragments.pipeline_overlap])."""
    warps = block_m // _TILE
    _start_schedule(sch, _SHARED)
    for writer, buf in _FRAGMENTS:
        blk = sch.get_block(writer)
        sch.set_scope(blk, buf, "warp")
        sch.transform_layout(blk, buf, _fragment_map)
    for writer, buf in _STATS:
        blk = sch.get_block(writer)
        sch.set_scope(blk, buf, "warp")
        sch.transform_layout(blk, buf, _stats_map)
    for name in _ELEMENTWISE + (("S_exp",) if overlap else ()):
        w, tc, lane, v = sch.transform_block_layout(sch.get_block(name), _fragment_map)
        sch.bind(w, "threadIdx.y")
        sch.bind(lane, "threadIdx.x")
        sch.unroll(tc)
        sch.unroll(v)
    for name in _STATS_BLOCKS:
        if name == "LSE" and not lse:
            continue
        w, lane, v = sch.transform_block_layout(sch.get_block(name), _stats_map)
        sch.bind(w, "threadIdx.y")
        sch.bind(lane, "threadIdx.x")
        sch.unroll(v)
    t = DTYPE_ABBREV[dtype]
    for name, intrin in (("row_max", row_reduce_intrin("max", "float32", block_n, quad=True)),
                         ("row_sum", row_reduce_intrin("sum", "float32" if overlap else dtype, block_n, quad=True))):  # fmt: skip
        rows = sch.get_loops(sch.get_block(name))[-3]
        wi, ii = sch.split(rows, [warps, _TILE])
        outer = sch.blockize(ii)
        sch.bind(wi, "threadIdx.y")
        sch.tensorize(outer, intrin)
    loads = (("Q_load", 0),) if tma is not False else (("Q_load", 0), ("K_load", 1), ("V_load", 1))
    for name, at in loads:
        blk = sch.get_block(name)
        rows, cols = sch.get_loops(blk)[at:at + 2]
        _, y, x, v = sch.split(sch.fuse(rows, cols), [None, warps, 32, _VEC])
        sch.bind(y, "threadIdx.y")
        sch.bind(x, "threadIdx.x")
        sch.vectorize(v)
    if wgmma:
        wgmma_s(sch, dtype, warps, block_n, head_dim)
    else:
        _fragment_gemm(sch, "S", ("Q_s", "K_s"), warps, t, a_in_registers=False, b_trans=True, init=True)
    if wgmma_pv:
        wgmma_o(sch, dtype, warps, block_n, head_dim)
    else:
        _fragment_gemm(sch, "PV", ("P", "V_s"), warps, t, a_in_registers=True, b_trans=False, init=False)
    # the swizzled tiles are compact (the swizzle, not padding, spreads the rows over the banks)
    swizzled = (("Q_s", "K_s") if wgmma else ()) + (("V_s",) if wgmma_pv else ())
    fast_math = ("S_exp", *(n for n in _FAST_MATH if n != "P")) if overlap else _FAST_MATH  # P only converts
    if tma is not False:
        _tma_tiles(sch, head_dim)
    _finish_schedule(sch, tuple(a for a in _ALIGN if a[1] not in swizzled), fast_math, lse, overlap)
    if tma is not False:
        from loopir.passes.pipeline_tma import TMA_KEY
        from loopir.passes.pipeline_ws import WS_KEY

        j0 = sch.get_loops(sch.get_block("K_load"))[0]
        sch.annotate(j0, TMA_KEY, True)
        sch.annotate(j0, WS_KEY, True if tma is True else list(tma))
    return sch


def _tma_tiles(sch: Schedule, head_dim: int) -> None:
    """The K and V tiles as TMA box copies (``tma``): their loops left serial, one
    ``(1, 1, block_n, 64)`` box of the 4-D tensor per 64 columns of ``head_dim`` (the 128-byte
    swizzled blocks of the tiles' layout; the box's rows past ``seq_kv`` TMA reads as zeros,
    the template's guard)."""
    for name in _LOADS:
        if head_dim == SW128_ROW:
            continue
        jj, d = sch.get_loops(sch.get_block(name))[1:3]
        d0, _ = sch.split(d, [None, SW128_ROW])
        sch.reorder(d0, jj)


#: FlashAttention 3's pipeline of the KV loop (``pipeline_overlap``): the stage of each block's
#: statement (the K and V loads 0, the others 1) and those of stage 2, the output's.
_LOADS = ("K_load", "V_load")
_OUTPUT_STAGE = ("acc_rescale", "PV")


def _block_names(stmt: Any) -> list[str]:
    """The blocks of a statement of the KV loop, by their program names ("PV_o_1", blockize's
    outer block, is "PV")."""
    from loopir.ir.stmt import BlockRealize

    found: list[str] = []
    post_order_stmts(stmt, lambda n: found.append(n.block.name) if isinstance(n, BlockRealize) else None)
    return [f.split("_o")[0] for f in found]


def pipeline_overlap(sch: Schedule) -> None:
    """FlashAttention 3's intra-warpgroup overlap (its paper's section 3.2) as a software
    pipeline of the KV loop and asynchronous ``wgmma``: per step ``t`` of the loop

    1. the K and V tiles of iteration ``t`` (16-byte ``cp.async``, stage 0);
    2. ``S_{t-1} = Q K_{t-1}^T`` issued (stage 1);
    3. ``acc *= alpha_{t-2}`` and ``acc += P_{t-2} V_{t-2}`` issued (stage 2, placed right after
       the S issue by ``software_pipeline_order``);
    4. the softmax of ``S_{t-1}`` (row maximum, exponentials in place, ``alpha``, row sums) on
       the CUDA cores while ``P V`` runs on the tensor cores: ``wgmma.wait_group 1`` before it
       (``S`` retired, ``P V`` in flight);
    5. ``wgmma.wait_group 0``, then ``P_{t-1}``, the exponentials in the input type.

    The waits are [`SinkWgmmaWaits`][loopir.passes.wgmma_waits.SinkWgmmaWaits]'s (the kernel's
    loop annotated ``loopir.wgmma_async``: every ``wgmma`` issued asynchronously, its wait
    before the first statement touching its accumulator or register A). InjectSoftwarePipeline
    versions what passes between stages: ``alpha`` and ``P`` (registers) are read in stage 2
    before stage 1 rewrites them in the same step, so they need one version; ``K_s`` two and
    ``V_s`` three (read two steps after their copy). Each step starts with one
    ``cp.async.wait_group 0`` and one barrier (``loopir.pipeline_wait_first``): the tiles of
    the previous step are then in place for S and ``P V``, and the copies of this step come
    after every thread's ``wait_group 0`` retired the ``P V`` that read the ``V_s`` version they
    overwrite. The prologue is the first tiles and ``S_0``'s softmax, the epilogue the last two
    ``P V``."""
    from loopir.ir.stmt import For, SeqStmt
    from loopir.passes.software_pipeline import WAIT_FIRST_KEY
    from loopir.passes.wgmma_waits import WGMMA_ASYNC_KEY

    j0 = sch.get_loops(sch.get_block("K_load"))[0]
    loop = sch.get(j0)
    assert isinstance(loop, For) and isinstance(loop.body, SeqStmt)
    names = [_block_names(stmt) for stmt in loop.body.seq]
    stages = [0 if set(n) & set(_LOADS) else 2 if set(n) & set(_OUTPUT_STAGE) else 1 for n in names]
    first = [i for i, n in enumerate(names) if "S" in n]
    order = [i for i, st in enumerate(stages) if st == 0] + first + [i for i, st in enumerate(stages) if st == 2]
    order += [i for i, st in enumerate(stages) if st == 1 and i not in first]
    sch.annotate(j0, "software_pipeline_stage", stages)
    sch.annotate(j0, "software_pipeline_order", order)
    sch.annotate(j0, "software_pipeline_async_stages", [0])
    sch.annotate(j0, WAIT_FIRST_KEY, 1)
    sch.annotate(sch.get_loops(sch.get_block("tile"))[-1], WGMMA_ASYNC_KEY, 1)


def wgmma_s(sch: Schedule, dtype: str, warps: int, block_n: int, head_dim: int) -> None:
    """``S = Q K^T`` on ``wgmma`` (sm_90a): each warp's 16 x ``block_n`` rows of S in one
    ``wgmma_m64n{block_n}k{head_dim}`` call (``head_dim / 16`` instructions, one wait; 64
    columns at a time past 256) reading the Q and K tiles from shared memory, where they are
    stored K-major with the 128-byte swizzle (``Q_s[d // 64, i, sw128(i, d % 64)]``: 64-element
    rows, one 8-row atom per 1024 bytes, a block per 64 columns of ``head_dim``;
    [`sw128`][loopir.tensor_intrin.layouts.sw128]). The accumulator is S's
    fragment buffer as it is: a warp's rows of the ``wgmma`` accumulator are 16 x 16 tiles
    in the ``MMA_C`` layout, the layout ``_fragment_map`` gives S, so the softmax blocks and
    the ``P V`` ``mma.sync`` are unchanged. Needs 4 warps per warpgroup (``warps`` a multiple
    of 4) and ``head_dim`` a multiple of 64."""
    # the whole head_dim in one call (one wait), its 64-column blocks one after the other
    depth = head_dim if head_dim in WGMMA_K_MAJOR_DEPTHS else SW128_ROW
    outer, k = _warp_tiles(sch, "S", warps, block_n, depth)
    init = sch.decompose_reduction(outer, k)
    sch.tensorize(sch.get_loops(sch.get_block("S"))[-3], wgmma_intrin(dtype, block_n, depth))
    (inner,) = sch.get_child_blocks(init)  # the init of one warp's 16 x block_n tile
    rows, cols = sch.get_loops(inner)[-2:]
    c0, c1 = sch.split(cols, [None, _TILE])
    sch.reorder(c0, rows, c1)
    sch.tensorize(rows, "mma_fill_f32")
    for writer, buf in (("Q_load", "Q_s"), ("K_load", "K_s")):
        sch.transform_layout(sch.get_block(writer), buf, _sw128_map(head_dim))


def wgmma_o(sch: Schedule, dtype: str, warps: int, block_n: int, head_dim: int) -> None:
    """``acc += P V`` on ``wgmma`` (sm_90a), FlashAttention 3's second GEMM: each warp's 16 x
    ``head_dim`` rows of the output, the whole KV tile in one ``wgmma_rs_m64n{head_dim}k{block_n}``
    call (``block_n / 16`` instructions, one wait), A from registers: P's fragments as they are
    (the accumulator layout that produced them is the A layout ``wgmma`` reads from registers,
    ``MMA_A``), B the V tile read MN-major from shared memory (``imm-trans-b``: V is ``[keys,
    head_dim]``, the contraction over the keys), stored in the MN-major 128-byte swizzle: rows of
    64 elements of ``head_dim`` down the keys, ``V_s[d // 64, j, sw128(j, d % 64)]`` (the same
    map as the K-major tiles', with the keys as the rows: what CUTLASS's
    ``Layout_MN_SW128_Atom`` is). Needs ``head_dim`` a multiple of 64 up to 256."""
    _warp_tiles(sch, "PV", warps, head_dim, block_n)
    sch.tensorize(sch.get_loops(sch.get_block("PV"))[-3], wgmma_rs_intrin(dtype, head_dim, block_n))
    sch.transform_layout(sch.get_block("V_load"), "V_s", _sw128_map(head_dim))


def _sw128_map(head_dim: int) -> Any:
    """A K-major ``wgmma`` operand tile ``[rows, head_dim]`` stored as ``head_dim / 64`` tiles
    of 64-element rows in the 128-byte swizzle (one tile when ``head_dim`` is 64)."""
    if head_dim == SW128_ROW:
        return lambda i, d: (i, sw128(i, d))
    return lambda i, d: (d // SW128_ROW, i, sw128(i, d % SW128_ROW))


def _fragment_gemm(sch: Schedule, name: str, operands: tuple[str, str], warps: int, t: str, *,
                   a_in_registers: bool, b_trans: bool, init: bool) -> None:  # fmt: skip
    """GEMM block ``name`` (``C[i, j] += A[i, k] * B[.., ..]``, C a fragment ``warp`` buffer)
    on ``mma.sync``: 16 x 16 x 16 tiles, warp ``w`` (``threadIdx.y``) its 16 rows; B's
    fragments by ``ldmatrix`` from shared memory per 16-wide K step, A's too unless
    ``a_in_registers`` (A already a fragment in the A layout: ``P``); C accumulated in place
    (``init``: its init block decomposed and tensorized as ``mma_fill``)."""
    outer, k = _warp_tiles(sch, name, warps, _TILE, _TILE)
    fetches = [(operands[1], "b" + ("_trans" if b_trans else ""))]
    if not a_in_registers:
        fetches.insert(0, (operands[0], "a"))
    for buf, kind in fetches:
        copy = sch.cache_read(outer, buf, "warp", consumer_blocks=[outer])
        sch.compute_at(copy, k)
        r, c = sch.get_loops(copy)[-2:]
        r0, r1 = sch.split(r, [None, _TILE])
        c0, c1 = sch.split(c, [None, _TILE])
        sch.reorder(r0, c0, r1, c1)
        if kind == "a":
            sch.transform_layout(copy, 0, _fragment_map)
        else:
            sch.transform_layout(copy, 0, _b_map(b_trans))
        sch.tensorize(r1, f"mma_ldmatrix_{t}_{kind}")
    init_block = sch.decompose_reduction(outer, k) if init else None
    sch.tensorize(sch.get_loops(sch.get_block(name))[-3], f"mma_{t}{t}f32")
    if init_block is not None:
        (inner,) = sch.get_child_blocks(init_block)
        rows = sch.get_loops(inner)[-2]
        sch.tensorize(rows, "mma_fill_f32")


def _warp_tiles(sch: Schedule, name: str, warps: int, cols: int, depth: int) -> tuple[BlockRV, LoopRV]:
    """GEMM block ``name`` (``C[i, j] += A[i, k] * B[.., ..]``) as tiles of 16 rows x ``cols``
    x ``depth`` blockized (the tensor intrinsic's extent), warp ``w`` (``threadIdx.y``) its 16
    rows, the K loop outside a warp's tiles: the tile block and that K loop."""
    i, j, k = sch.get_loops(sch.get_block(name))[-3:]
    i, i_tc = sch.split(i, [None, _TILE])
    j, j_tc = sch.split(j, [None, cols])
    k, k_tc = sch.split(k, [None, depth])
    sch.reorder(i, j, k, i_tc, j_tc, k_tc)
    outer = sch.blockize(i_tc)
    iw, i2 = sch.split(i, [warps, None])
    sch.reorder(iw, k, i2, j)
    sch.bind(iw, "threadIdx.y")
    return outer, k


def _b_map(transposed: bool) -> Any:
    """The B fragments' layout: ``(k, n)`` tiles in ``MMA_B`` (``transposed``: stored ``[n,
    k]``, as K)."""
    from loopir.tensor_intrin.layouts import MMA_B

    def tiles(i: Any, j: Any) -> tuple[Any, ...]:
        kk, n = (j, i) if transposed else (i, j)
        return (i // _TILE, j // _TILE, *MMA_B.to_lane_local(kk % _TILE, n % _TILE))

    return tiles
