"""Attention as a loopir program: FlashAttention's online softmax, written as TensorIR (issue 33).

``O = softmax(Q K^T / sqrt(d)) V`` per batch and head, with Q, K, V and O laid out
``(batch, heads, seq, head_dim)``; K and V may have fewer heads (``kv_heads``, grouped-query
attention: query head ``h`` reads KV head ``h // (heads / kv_heads)``). It is not a stage graph
a schedule could fuse: the online softmax rescales the running output as each KV tile is seen.
So [`attention_func`][loopir.examples.attention.attention_func] writes the fused algorithm
itself, with the script parser, at tile granularity, one ``block_m`` tile of query rows per
iteration of the outer loops:

1. the tile of Q (once) and, per KV tile, the tiles of K and V are staged (blocks ``Q_load``,
   ``K_load``, ``V_load``), rows past ``seq_q`` and keys past ``seq_kv`` read as zeros;
2. ``S = Q_tile K_tile^T`` (block ``S``: a GEMM, on tensor cores when scheduled);
3. the running row maximum ``m`` over the scaled scores of the valid keys (block ``row_max``,
   from ``m_prev``, the maximum before this tile, which block ``save_max`` keeps);
4. ``P = exp(S * scale - m)`` on valid keys, 0 elsewhere, rounded to the input type (block
   ``P``: what FlashAttention feeds its second GEMM); the row sum ``l`` of ``P``, the previous
   sum rescaled by ``exp(m_prev - m)`` (``row_sum``; 1 while the row has seen no valid key,
   the maxima both ``-inf``);
5. ``PV = P V_tile`` (block ``PV``, the second GEMM) and ``acc = acc * exp(m_prev - m) + PV``
   (``acc_update``);
6. ``O = acc / l`` for the real rows (block ``O``); a row with no valid key (causal, ``seq_q >
   seq_kv``) is 0, as in FlashAttention. Optionally ``LSE = m + log(l)`` (the logsumexp of the
   scaled scores, within the input type's rounding of ``P``; ``-inf`` for a row with no valid
   key).

A key ``j`` is valid for query row ``i`` when ``j < seq_kv`` and, with ``causal``, ``j <= i +
seq_kv - seq_q`` (the mask aligned to the bottom right when ``seq_q != seq_kv``, as
FlashAttention 2.1+); with ``causal`` the KV loop of a query tile stops at the tile holding its
last row's diagonal (the tiles after it are all masked: about half the work is skipped). ``seq_q`` and ``seq_kv`` may be ``loopir.Var``: one function serves every
length (the tiles are guarded).

[`attention`][loopir.examples.attention.attention] schedules it for the GPU: a thread block
per query tile, the two GEMMs on tensor cores (``ldmatrix`` + ``mma.sync``), the softmax on
CUDA cores, a warp per row at a time with its lanes along the row (the row maximum and sum are
warp reductions), every intermediate in shared memory with rows padded against bank
conflicts, the K and V tiles fetched one KV tile ahead with 16-byte ``cp.async``, fast-math
exponentials. Keeping S, P and the output in registers and ``wgmma`` on Hopper are the rest of
issue 33.

The decode form (one query per sequence, flash-decoding's split-KV chunks and their combine) is
[`loopir.examples.decode`][loopir.examples.decode].
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from loopir.errors import ScheduleError
from loopir.ir.expr import Var
from loopir.ir.stmt import PrimFunc
from loopir.schedule import Schedule

__all__ = ["attention", "attention_func"]

_PRIM = "examples.attention"

#: The parts of the program that both schedules' templates share (the fragments' program,
#: ``attention_fragments.FRAGMENT_TEMPLATE``, keeps four copies of each row statistic).
_HEAD = '''
def attention(Q: T.Buffer(({B}, {H}, {SQ}, {D}), "{dt}"), K: T.Buffer(({B}, {KH}, {SKV}, {D}), "{dt}"),
              V: T.Buffer(({B}, {KH}, {SKV}, {D}), "{dt}"), O: T.Buffer(({B}, {H}, {SQ}, {D}), "{dt}"){LSE_PARAM}):
    for b, h, i0 in T.grid({B}, {H}, T.ceildiv({SQ}, {BM})):
        with T.block("tile"):
{TILE_AXES}            Q_s = T.alloc_buffer(({BM}, {D}), "{dt}")
            K_s = T.alloc_buffer(({BN}, {D}), "{dt}")
            V_s = T.alloc_buffer(({BN}, {D}), "{dt}")
            S = T.alloc_buffer(({BM}, {BN}), "float32")
            P = T.alloc_buffer(({BM}, {BN}), "{dt}")
'''
_Q_LOAD = '''            for ii, d in T.grid({BM}, {D}):
                with T.block("Q_load"):
                    vii, vd = T.axis.remap("SS", [ii, d])
                    Q_s[vii, vd] = T.if_then_else({IN_Q}, Q[vb, vh, {ROW}, vd], T.{dt}(0))
'''
_KV_TILES_AND_S = '''            for ii, d in T.grid({BM}, {D}):
                with T.block("init_acc"):
                    vii, vd = T.axis.remap("SS", [ii, d])
                    acc[vii, vd] = T.float32(0)
            for j0 in range({KV_TILES}):
                for jj, d in T.grid({BN}, {D}):
                    with T.block("K_load"):
                        vj0, vjj, vd = T.axis.remap("SSS", [j0, jj, d])
                        K_s[vjj, vd] = T.if_then_else({IN_KV}, K[vb, vh // {G}, {COL}, vd], T.{dt}(0))
                for jj, d in T.grid({BN}, {D}):
                    with T.block("V_load"):
                        vj0, vjj, vd = T.axis.remap("SSS", [j0, jj, d])
                        V_s[vjj, vd] = T.if_then_else({IN_KV}, V[vb, vh // {G}, {COL}, vd], T.{dt}(0))
                for ii, jj, d in T.grid({BM}, {BN}, {D}):
                    with T.block("S"):
                        vii, vjj, vd = T.axis.remap("SSR", [ii, jj, d])
                        with T.init():
                            S[vii, vjj] = T.float32(0)
                        S[vii, vjj] = S[vii, vjj] + T.Cast("float32", Q_s[vii, vd]) * T.Cast("float32", K_s[vjj, vd])
'''

_TEMPLATE = _HEAD + '''            PV = T.alloc_buffer(({BM}, {D}), "float32")
            acc = T.alloc_buffer(({BM}, {D}), "float32")
            m = T.alloc_buffer(({BM},), "float32")
            m_prev = T.alloc_buffer(({BM},), "float32")
            l = T.alloc_buffer(({BM},), "float32")
''' + _Q_LOAD + '''            for ii in range({BM}):
                with T.block("init_stats"):
                    vii = T.axis.spatial({BM}, ii)
                    m[vii] = T.min_value("float32")
                    l[vii] = T.float32(0)
''' + _KV_TILES_AND_S + '''                for ii in range({BM}):
                    with T.block("save_max"):
                        vii = T.axis.spatial({BM}, ii)
                        m_prev[vii] = m[vii]
                for ii, jj in T.grid({BM}, {BN}):
                    with T.block("row_max"):
                        vj0, vii, vjj = T.axis.remap("SSR", [j0, ii, jj])
                        with T.init():
                            m[vii] = m_prev[vii]
                        m[vii] = T.max(m[vii], T.if_then_else({VALID}, S[vii, vjj] * T.float32({SCALE}), T.min_value("float32")))
                for ii, jj in T.grid({BM}, {BN}):
                    with T.block("P"):
                        vj0, vii, vjj = T.axis.remap("SSS", [j0, ii, jj])
                        P[vii, vjj] = T.Cast("{dt}", T.if_then_else({VALID}, T.exp(S[vii, vjj] * T.float32({SCALE}) - m[vii]), T.float32(0)))
                for ii, jj in T.grid({BM}, {BN}):
                    with T.block("row_sum"):
                        vii, vjj = T.axis.remap("SR", [ii, jj])
                        with T.init():
                            l[vii] = l[vii] * {RESCALE}
                        l[vii] = l[vii] + T.Cast("float32", P[vii, vjj])
                for ii, d, jj in T.grid({BM}, {D}, {BN}):
                    with T.block("PV"):
                        vii, vd, vjj = T.axis.remap("SSR", [ii, d, jj])
                        with T.init():
                            PV[vii, vd] = T.float32(0)
                        PV[vii, vd] = PV[vii, vd] + T.Cast("float32", P[vii, vjj]) * T.Cast("float32", V_s[vjj, vd])
                for ii, d in T.grid({BM}, {D}):
                    with T.block("acc_update"):
                        vii, vd = T.axis.remap("SS", [ii, d])
                        acc[vii, vd] = acc[vii, vd] * {RESCALE} + PV[vii, vd]
            for ii, d in T.grid({BM}, {D}):
                with T.block("O"):
                    vii, vd = T.axis.remap("SS", [ii, d])
                    if {IN_Q}:
                        O[vb, vh, {ROW}, vd] = T.Cast("{dt}", T.if_then_else(l[vii] > T.float32(0), acc[vii, vd] / l[vii], T.float32(0)))
{LSE_BLOCK}'''

_LSE_BLOCK = '''            for ii in range({BM}):
                with T.block("LSE"):
                    vii = T.axis.spatial({BM}, ii)
                    if {IN_Q}:
                        LSE[vb, vh, {ROW}] = T.if_then_else(l[vii] > T.float32(0), m[vii] + T.log(l[vii]), T.min_value("float32"))
'''


# exp(m_prev - m), and 1 while a row has seen no valid key (both -inf: their difference is NaN)
_RESCALE = "T.if_then_else(m_prev[vii] == m[vii], T.float32(1), T.exp(m_prev[vii] - m[vii]))"


def _fail(msg: str) -> ScheduleError:
    return ScheduleError(msg, primitive=_PRIM)


def _size(name: str, v: int | Var) -> str:
    """The text of a size: an int, or for a Var the name ``size_env`` binds it to in the script
    (the Var's own name could be one of the template's variables: a length named ``b`` would
    be read as the batch loop's)."""
    if isinstance(v, Var):
        if v.dtype != "int32":
            raise _fail(f"{name} must be an int32 Var, got {v.dtype} {v.name}")
        return _SIZE_PREFIX + name
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise _fail(f"{name} must be a positive int or a loopir.Var, got {v!r}")
    return str(v)


#: The script names of symbolic sizes (no template variable starts with it).
_SIZE_PREFIX = "SIZE_"


def size_env(**sizes: object) -> dict[str, Var]:
    """The ``from_source`` environment of the sizes ``_size`` wrote by name: each Var given,
    under its script name; the function's shapes and bounds are then the caller's Vars."""
    return {_SIZE_PREFIX + name: v for name, v in sizes.items() if isinstance(v, Var)}


def _check(batch: int, heads: int, head_dim: int, dtype: str, kv_heads: int, block_m: int, block_n: int) -> None:
    for name, v in (("batch", batch), ("heads", heads), ("head_dim", head_dim), ("kv_heads", kv_heads),
                    ("block_m", block_m), ("block_n", block_n)):  # fmt: skip
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise _fail(f"{name} must be a positive int, got {v!r}")
    if heads % kv_heads:
        raise _fail(f"kv_heads = {kv_heads} must divide heads = {heads} (grouped-query attention)")
    if dtype not in ("float16", "bfloat16", "float32"):
        raise _fail(f"dtype must be 'float16', 'bfloat16' or 'float32', got {dtype!r}")


def attention_func(batch: int, heads: int, seq_q: int | Var, seq_kv: int | Var, head_dim: int,
                   dtype: str = "float16", causal: bool = False, kv_heads: int | None = None, *,
                   lse: bool = False, block_m: int = 64, block_n: int = 64, fragments: bool = False,
                   overlap: bool = False, longest_first: bool = False) -> PrimFunc:  # fmt: skip
    """The fused attention program (module docstring), unscheduled: ``(Q, K, V, O)``, and
    ``LSE`` ``(batch, heads, seq_q)`` in float32 after them when ``lse``.

    Parameters
    ----------
    batch, heads, head_dim
        Sizes (ints).
    seq_q, seq_kv
        Query and key/value lengths: ints, or int32 ``loopir.Var`` (symbolic: the tiles are
        guarded; the function's shapes use the given Vars, whatever their names).
    dtype
        Q, K, V and O's type; scores, statistics and the accumulator are float32.
    causal
        Hide key ``j`` from query ``i`` when ``j > i + seq_kv - seq_q``.
    kv_heads
        Heads of K and V (dividing ``heads``); None: ``heads``.
    lse
        Also write the logsumexp of each row's scaled scores.
    block_m, block_n
        Query rows and keys per tile.
    fragments
        The program whose per-row passes are elementwise blocks and plain row reductions,
        for the schedule with S, P and the output in the ``mma`` fragments
        ([`loopir.examples.attention_fragments`][loopir.examples.attention_fragments]); it
        computes the same.
    overlap
        With ``fragments``: FlashAttention 3's form of that program (``OVERLAP_TEMPLATE``), the
        exponentials written into S's float32 fragments in place, summed in float32, and P
        their conversion to the input type, a block of its own after the row sums: what the
        schedule that overlaps the softmax with the GEMMs needs (``attention(...,
        overlap=True)``). The same result up to the rounding of the row sums.
    longest_first
        Number the query tiles from the last: the tile loop's iteration ``i0`` computes tile
        ``ceil(seq_q / block_m) - 1 - i0`` (the same result; with ``causal`` a GPU then starts
        the tiles with the most keys first, the order that shortens the last wave).
    """
    from loopir.script import from_source

    kv_heads = heads if kv_heads is None else kv_heads
    _check(batch, heads, head_dim, dtype, kv_heads, block_m, block_n)
    if overlap and not fragments:
        raise _fail("overlap=True is a form of the fragments' program: it needs fragments=True")
    sq, skv = _size("seq_q", seq_q), _size("seq_kv", seq_kv)
    row, col = f"vi0 * {block_m} + vii", f"vj0 * {block_n} + vjj"
    in_kv = f"{col} < {skv}"
    valid = f"{in_kv} and {col} <= {row} + ({skv} - {sq})" if causal else in_kv
    kv_tiles = f"T.ceildiv({skv}, {block_n})"
    if causal:  # the tiles past the tile's last query's diagonal are never visited
        kv_tiles = f"T.max(0, T.min({kv_tiles}, T.ceildiv((vi0 + 1) * {block_m} + {skv} - {sq}, {block_n})))"
    tile_axes = '            vb, vh, vi0 = T.axis.remap("SSS", [b, h, i0])\n'
    if longest_first:
        n = f"T.ceildiv({sq}, {block_m})"
        tile_axes = (f'            vb, vh = T.axis.remap("SS", [b, h])\n'
                     f'            vi0 = T.axis.spatial({n}, {n} - 1 - i0)\n')  # fmt: skip
    fields = dict(TILE_AXES=tile_axes, B=batch, H=heads, SQ=sq, SKV=skv, D=head_dim, dt=dtype, KH=kv_heads, G=heads // kv_heads,
                  BM=block_m, BN=block_n, SCALE=repr(1.0 / math.sqrt(head_dim)), ROW=row, COL=col,
                  IN_Q=f"{row} < {sq}", IN_KV=in_kv, VALID=valid, RESCALE=_RESCALE, KV_TILES=kv_tiles,
                  LSE_PARAM=f', LSE: T.Buffer(({batch}, {heads}, {sq}), "float32")' if lse else "")  # fmt: skip
    if fragments:
        from loopir.examples import attention_fragments as af

        fields["QRESCALE"] = af.QRESCALE.format(SCALE=fields["SCALE"])
        fields["LSE_BLOCK"] = af.FRAGMENT_LSE_BLOCK.format(**fields) if lse else ""
        template = af.OVERLAP_TEMPLATE if overlap else af.FRAGMENT_TEMPLATE
        return from_source(template.format(**fields), env=size_env(seq_q=seq_q, seq_kv=seq_kv))
    fields["LSE_BLOCK"] = _LSE_BLOCK.format(**fields) if lse else ""
    return from_source(_TEMPLATE.format(**fields), env=size_env(seq_q=seq_q, seq_kv=seq_kv))


#: Blocks computed per query row, and where their row loop is among the loops below block
#: "tile" (0: outside the KV loop; 1: inside it). A block with a loop along the row (over keys
#: or head_dim) runs a warp per row at a time, the lanes along the row; one with only the row
#: loop (the statistics' init and copy, LSE) runs a thread per row.
_ROW_BLOCKS = {"init_stats": 0, "init_acc": 0, "save_max": 1, "row_max": 1, "P": 1, "row_sum": 1,
               "acc_update": 1, "O": 0, "LSE": 0}  # fmt: skip
#: The tile loads: (block, index of its loop below "tile" where the (row, d) nest starts).
_LOADS = {"Q_load": 0, "K_load": 1, "V_load": 1}
#: The GEMM blocks: (block, its A and B operands' read indices, B stored [N, K]).
_GEMMS = {"S": (True,), "PV": (False,)}
#: The shared buffers (on-chip): each by a block writing it.
_SHARED = (("Q_load", "Q_s"), ("K_load", "K_s"), ("V_load", "V_s"), ("S", "S"), ("P", "P"), ("PV", "PV"),
           ("init_acc", "acc"), ("init_stats", "m"), ("init_stats", "l"), ("save_max", "m_prev"))  # fmt: skip

#: Row padding (``storage_align`` of axis 0: the row stride ``s`` is the least ``s >= width``
#: with ``s % factor == offset``), by a block writing the buffer. Banks are 4-byte words mod 32;
#: the per-row passes put a warp's lanes along one row (contiguous: conflict-free at any stride),
#: so the strides serve the tensor-core accesses. fp16 tiles (Q, K, V, P; ldmatrix needs 16-byte
#: rows): ``s % 16 == 8`` halves, a word stride of 4 mod 8, so the 8 rows of an ldmatrix phase
#: cover all 32 banks, instead of 8-way conflicts at 64 halves. fp32 S and PV: the C-fragment store writes float2 pairs, 4 rows x 4 pairs per
#: half-warp; ``s % 32 == 8`` puts them on 16 distinct bank pairs (4-way at 64). acc is touched
#: by the per-row passes only: unpadded.
_ALIGN = (("Q_load", "Q_s", 16, 8), ("K_load", "K_s", 16, 8), ("V_load", "V_s", 16, 8), ("P", "P", 16, 8),
          ("S_warp_o", "S", 32, 8), ("PV_warp_o", "PV", 32, 8))  # fmt: skip
#: Blocks with exponentials, the logarithm or the division: approximate (``__expf``, ``__logf``,
#: ``__fdividef``; ``loopir.passes.fast_math`` has their error bounds).
_FAST_MATH = ("P", "row_sum", "acc_update", "O", "LSE")
#: Elements per vector of a tile load: 16 bytes of fp16 / bf16 (for head_dim >= 64 a
#: quarter-warp stores 128 contiguous bytes of one row: conflict-free).
_VEC = 8


def attention(batch: int, heads: int, seq_q: int | Var, seq_kv: int | Var, head_dim: int,
              dtype: str = "float16", causal: bool = False, kv_heads: int | None = None, *,
              lse: bool = False, block_m: int | None = None, block_n: int | None = None,
              unroll_rows: bool = True, fragments: bool = True, wgmma: bool | str = "auto",
              overlap: bool | str = "auto", tma: bool | tuple[int, int] | str = "auto",
              longest_first: bool | None = None) -> Schedule:  # fmt: skip
    """[`attention_func`][loopir.examples.attention.attention_func] scheduled for the GPU.

    The ``(batch, heads, query tile)`` loops on ``blockIdx``; ``block_m / 16`` warps of 32
    lanes (256 threads at ``block_m`` 128):

    * the two GEMMs (``S = Q K^T``, ``PV = P V``) on tensor cores (``ldmatrix`` + ``mma.sync``,
      each warp 16 query rows, from the tiles staged in shared memory);
    * the softmax statistics and the rescaling of the running output on CUDA cores, each warp
      its own 16 rows one at a time with the lanes along the row: contiguous, bank-conflict
      free shared accesses, the row maximum and row sum warp reductions (shuffles);
    * every intermediate in shared memory, the rows of Q, K, V, P (``ldmatrix``) and of S, PV
      (the float2 C-fragment stores) padded so that those accesses are conflict-free too;
    * the tile loads in 16-byte vectors, the K and V tiles software pipelined over the KV loop
      (``cp.async`` of tile ``j0 + 1`` while tile ``j0`` computes, two versions of ``K_s`` and
      ``V_s``);
    * fast math (``__expf``, ``__logf``, ``__fdividef``) for the softmax's exponentials, the
      logsumexp and the final division.

    ``fragments`` (default): FlashAttention 2's schedule instead, S, P, the output and the row
    statistics in the ``mma`` fragments' registers
    ([`loopir.examples.attention_fragments`][loopir.examples.attention_fragments]); False: the
    schedule described here, every intermediate in shared memory.

    ``unroll_rows``: unroll each warp's loop over its rows in the per-row passes, so that the
    rows' loads and shuffle reductions overlap instead of running one latency chain per row
    (the shared-memory schedule).

    ``block_m``, ``block_n`` (None: the defaults measured best on the H200, ``docs/benchmarks.md``
    session 15): with ``fragments``, 64 x 64 at ``head_dim`` 64 (127 registers, 46 KiB of shared
    memory: 4 blocks of 4 warps per SM) and 64 x 32 at 128 (128 registers, 52 KiB: 4 blocks;
    64 x 64 when ``causal``: with ``block_n = block_m`` the software pipeline's peeled last
    iteration is the only KV tile that meets the diagonal, and the mask is proven true in the
    others, at 1-4 % of the time of 64 x 32's mask on every tile); larger query tiles idle the
    SMs along a causal diagonal (1.45x slower at 4096, ``head_dim`` 64) and 128-row tiles at
    ``head_dim`` 128 need more than 128 registers. Without
    ``fragments``: ``block_m`` 128 for ``head_dim`` up to 64 (about 177 KiB of shared memory,
    8 warps), else 64 (about 179 KiB, 4 warps): one block per SM; ``block_n`` 64. fp16/bf16
    only (the tensor cores' inputs).

    ``wgmma`` (sm_90a, with ``fragments``; FlashAttention 3's GEMMs): True: both GEMMs on
    Hopper's warpgroup tensor cores, ``S = Q K^T`` by ``wgmma`` from the Q and K tiles in
    shared memory (stored with the 128-byte swizzle) into S's fragments
    ([`wgmma_s`][loopir.examples.attention_fragments.wgmma_s]), ``acc += P V`` by ``wgmma`` with
    P from registers (its fragments as the softmax left them) and V MN-major from shared memory
    ([`wgmma_o`][loopir.examples.attention_fragments.wgmma_o]); ``"qk"``: the first GEMM only
    (``P V`` on ``mma.sync``). The softmax in the fragments as ``fragments``. Needs ``head_dim``
    a multiple of 64 (up to 256 for True), ``block_m`` of 64 (whole warpgroups) and ``block_n``
    a multiple of 16 up to 256 (``wgmma``'s N and K); default tiles 64 x 64 (64 x 96 with ``overlap`` at
    ``head_dim`` 64, not causal, without ``tma``: ``WGMMA_D64_BLOCK_N``, 4-6 % faster, session 20). ``"auto"`` (the
    default): True where the visible GPU is a Hopper (compute capability 9.0, as the default
    GPU schedule's ``cuda.default_schedule.wgmma``) and the sizes allow it, else False (FA2 on
    ``mma.sync``, which sm_80 runs too). On the H200 True runs 1.2-1.5x faster than FA2 and
    1.0-1.4x Triton at every measured shape (``docs/benchmarks.md``, session 16).

    ``overlap`` (with ``wgmma=True``; FlashAttention 3's intra-warpgroup overlap, its paper's
    section 3.2): the program in FlashAttention 3's form (``attention_func(..., overlap=True)``:
    the exponentials in S's float32 fragments, P their conversion at the end) and the KV loop a
    three-stage software pipeline with asynchronous ``wgmma``
    ([`pipeline_overlap`][loopir.examples.attention_fragments.pipeline_overlap]): per step the
    K and V copies, ``S_j = Q K_j^T`` issued, ``acc *= alpha_{j-1}``, ``acc += P_{j-1} V_{j-1}``
    issued, ``wgmma.wait_group 1`` and the softmax of ``S_j`` on the CUDA cores while ``P V``
    runs on the tensor cores, ``wgmma.wait_group 0``, P (the waits placed by
    [`SinkWgmmaWaits`][loopir.passes.wgmma_waits.SinkWgmmaWaits]). Three versions of ``V_s``
    (read two steps after its copy), one barrier a step. ``"auto"`` (the default): on wherever
    ``wgmma`` is True; on the H200 it is 3-20 % faster than the synchronous ``wgmma`` at every
    measured shape, fp16 and bf16 (``docs/benchmarks.md``, session 17). Every tile of ``wgmma=True`` takes it
    (ptxas, fp16 at ``head_dim`` 64 / 128, no spills: 138 / 153 registers at 64 x 64, 156 / 179
    at 64 x 96, 198 / 250 at 64 x 128, the same with ``block_m`` 128).

    ``tma`` (with ``wgmma=True, overlap=True``; FlashAttention 3's warp specialization): the K
    and V tiles of the KV loop by TMA, 4-D boxes ``(1, 1, block_n, 64)`` of the ``(batch,
    kv_heads, seq, head_dim)`` tensors (zeros past ``seq_kv``), issued by one more warpgroup, the
    producer, on full/empty mbarriers (three versions), instead of every thread's ``cp.async``
    and a block barrier per step; the consumer warpgroups keep ``overlap``'s order, each
    waiting on the full barrier itself and releasing a version once its ``P V`` retired (a step
    after its ``S``) (``loopir.passes.pipeline_ws``; ``docs/concepts/attention.md``, step 6).
    ``(dec, inc)``: also ``setmaxnreg`` (the producer's and the consumers' registers; with 128
    query rows, ``(24, 240)``, which is all of an SM's: ``128 dec + 256 inc`` may not exceed the
    block's registers at entry, ``384 x 168`` at one block an SM, or the build refuses it, as
    ``setmaxnreg.inc`` would wait forever: ``(24, 248)`` hung on the H200, session 23).
    ``"auto"`` (the default) takes it where it measured faster on the H200: ``wgmma=True``,
    ``overlap``, not causal, ``head_dim`` 128, ``seq_kv`` a constant of at least
    ``TMA_MIN_SEQ_KV`` (1024), ``block_m`` and ``block_n`` not given or 128: 128 x 128 tiles
    with ``setmaxnreg`` ``(24, 240)`` (``docs/benchmarks.md`` session 20: 1.14x the
    ``cp.async`` overlap at b4h32s1024d128, 0.173 ms, and 1.15x at b1h32s4096d128, 0.469 ms;
    with 64-key tiles and no ``setmaxnreg`` the same form was 1.08x at 4k and slower at 1k, and
    128 x 128 without ``setmaxnreg`` spills); with ``block_n=64`` given, 128 x 64 tiles from
    ``seq_kv`` 4096 on (session 19); at ``head_dim`` 64 the same 128 x 128 tiles from
    ``TMA_MIN_SEQ_KV_D64`` (16384) on (session 22: 1.05x the 64 x 96 ``cp.async`` overlap at
    b1h32s16384d64, 5.08 ms; 0.90x / 0.97x at 1k / 4k); causal at ``head_dim`` 128 the same
    128 x 128 tiles from ``TMA_MIN_SEQ_KV_CAUSAL`` (16384) on (session 23: 1.04-1.05x at
    b1h32s16384d128c, 4.57 ms fp16; 0.89x / 0.97x at 1k / 4k, where the 128-row tiles idle
    along the diagonal for a larger share of the work); else False (causal below 16k or at
    ``head_dim`` 64, and ``head_dim`` 64 below 16k, measured slower). (Session 17's TMA form
    split each consumer step by ``j >= 1``, which put the wait for ``S_j`` before the issue of
    ``P_{j-1} V_{j-1}``: 0.789 ms against 0.623; the first step is peeled since, and
    ``threadIdx.y`` is read warp-uniform.)
    Symbolic lengths work, causal or not (the tensor maps take them at the launch; one build
    serves any tile count); one or two KV tiles of a constant length are refused by the build's
    race check (a degenerate pipeline it does not recognize; causal with two query tiles of
    two KV tiles, 256 x 256, is proven). (Until session 23 it also refused causal 128 x 128
    tiles where a query tile's KV tile count is clamped: the tail's ``P V`` version ``(n - 1)
    % 3`` simplified to ``min(4 - i0, 3) - 1`` or ``2 - i0``, its ``% 3`` dropped from the
    block index's range; race_ws now proves it from that range.) (Until session 21 the race check
    also refused not causal symbolic lengths, and causal constant lengths where a query tile's
    KV tile count is clamped by both ``seq_kv`` and the diagonal: the tail's ``P V`` version
    ``(n - 1) % 3`` of a KV tile count ``n`` of one symbolic size was not proven; it is now,
    the GPU tests run both.) ptxas, fp16, no spills: 128 / 176 registers at 64 x
    64 (head_dim 64 / 128), 139 / 168 at 128 x 64, 168 with ``(24, 240)``, at 128 x 128 with
    ``(24, 240)`` and head_dim 128 too when not causal (causal: 4 bytes spilled). (Timed on the H200
    in session 19: 0.756 ms at b1h32s4096d128 against the default's 0.581; with ``block_m=128``,
    two consumer warpgroups, 0.555, but slower at 1k and causal.)

    ``longest_first`` (``attention_func``'s): the query tiles numbered from the last, so that the
    blocks with the most KV tiles start first (the GPU starts blocks in ``blockIdx`` order, and
    the long tiles of each head otherwise come last: the last wave's stragglers). None (the
    default): ``causal``, where tiles differ in work; on the H200 1.8-1.9 % faster at 4k causal, the
    same at 1k (session 19, ``docs/benchmarks.md``).

    The first tensor-core form: FlashAttention keeps S, P and the output in registers; here they
    go through shared memory (issue 33).
    """
    if dtype not in ("float16", "bfloat16"):
        raise _fail(f"attention on tensor cores takes 'float16' or 'bfloat16', got {dtype!r} "
                    "(attention_func runs any float type on the CPU)")  # fmt: skip
    if not (isinstance(wgmma, bool) or wgmma in ("qk", "auto")):
        raise _fail(f"wgmma must be a bool, 'qk' (the first GEMM only) or 'auto', got {wgmma!r}")
    if wgmma == "auto":
        wgmma = _wgmma_fits(fragments, head_dim, block_m, block_n) and _hopper_visible()
    if not (isinstance(overlap, bool) or overlap == "auto"):
        raise _fail(f"overlap must be a bool or 'auto', got {overlap!r}")
    overlap = wgmma is True if overlap == "auto" else bool(overlap)
    if overlap and wgmma is not True:
        raise _fail(f"overlap=True overlaps the softmax with asynchronous wgmma: it needs wgmma=True (both GEMMs "
                    f"on wgmma), got wgmma={wgmma!r}")  # fmt: skip
    if isinstance(tma, str) and tma == "auto":
        tma, block_m, block_n = _tma_auto(wgmma, overlap, causal, head_dim, seq_kv, block_m, block_n)
    if tma is not False:
        _check_tma(tma, wgmma, overlap)
    assert not isinstance(tma, str)  # "auto" resolved; _check_tma refused any other string
    if wgmma:
        _check_wgmma(fragments, head_dim, block_m, block_n, wgmma is True)
        block_m, block_n = block_m or 64, block_n or _wgmma_block_n(head_dim, causal, overlap, tma)
    if block_m is None:  # measured on the H200 (docs/benchmarks.md, session 15)
        block_m = 64 if fragments or head_dim > 64 else 128
    if block_n is None:  # causal: block_n = block_m keeps the tiles below the diagonal mask-free
        block_n = 32 if fragments and head_dim > 64 and not causal else 64
    if block_m % 32 or block_n % 16 or head_dim % 16:
        raise _fail(f"block_m = {block_m} must be a multiple of 32, block_n = {block_n} and head_dim = "
                    f"{head_dim} multiples of 16 (the tensor cores' 16 x 16 tiles)")  # fmt: skip
    if longest_first is None:
        longest_first = causal
    if not isinstance(longest_first, bool):
        raise _fail(f"longest_first must be a bool or None (causal's), got {longest_first!r}")
    sch = Schedule(attention_func(batch, heads, seq_q, seq_kv, head_dim, dtype, causal, kv_heads, lse=lse,
                                  block_m=block_m, block_n=block_n, fragments=fragments, overlap=overlap,
                                  longest_first=longest_first))  # fmt: skip
    if fragments:
        from loopir.examples.attention_fragments import schedule_fragments

        return schedule_fragments(sch, dtype=dtype, block_m=block_m, block_n=block_n, head_dim=head_dim, lse=lse,
                                  wgmma=bool(wgmma), wgmma_pv=wgmma is True, overlap=overlap, tma=tma)  # fmt: skip
    warps = block_m // 16
    _start_schedule(sch, _SHARED)
    for name, at in _ROW_BLOCKS.items():
        if name == "LSE" and not lse:
            continue
        loops = sch.get_loops(sch.get_block(name))
        if len(loops) == at + 1:  # rows only: a thread per row, the warps past block_m idle
            _, y, x = sch.split(loops[at], [None, warps, 32])
        else:  # a warp per row at a time, the lanes along the row (a reduction: across lanes)
            y, rows = sch.split(loops[at], [warps, None])
            cols, x = sch.split(loops[at + 1], [None, 32])
            sch.reorder(y, rows, cols, x)
            if unroll_rows:  # a warp's rows are independent: their shuffle chains overlap
                sch.unroll(rows)
        sch.bind(y, "threadIdx.y")
        sch.bind(x, "threadIdx.x")
    for name, at in _LOADS.items():
        blk = sch.get_block(name)
        rows, cols = sch.get_loops(blk)[at:at + 2]
        _, y, x, v = sch.split(sch.fuse(rows, cols), [None, warps, 32, _VEC])
        sch.bind(y, "threadIdx.y")
        sch.bind(x, "threadIdx.x")
        sch.vectorize(v)
    for name, (b_trans,) in _GEMMS.items():
        _tensor_core_gemm(sch, name, warps, dtype, b_trans, head_dim, block_n)
    return _finish_schedule(sch, _ALIGN, _FAST_MATH, lse)


#: ``attention``'s default key tile with ``overlap`` at head_dim 64, not causal, on ``cp.async``:
#: 96 keys (64 x 96 tiles) ran 4-6 % faster than 64 on the H200 at 1k and 4k, fp16 and bf16
#: (docs/benchmarks.md, session 20; 80 and 112 between and slower, 128 slower at 1k); causal keeps
#: ``block_n = block_m`` (the tiles below the diagonal mask-free), head_dim 128 keeps 64 (96: 1.3x
#: slower at 1k).
WGMMA_D64_BLOCK_N = 96


def _wgmma_block_n(head_dim: int, causal: bool, overlap: bool, tma: object) -> int:
    """The key tile ``attention`` takes on ``wgmma`` when ``block_n`` is not given."""
    return WGMMA_D64_BLOCK_N if head_dim == 64 and not causal and overlap and tma is False else 64


def _wgmma_fits(fragments: bool, head_dim: int, block_m: int | None, block_n: int | None) -> bool:
    """Whether ``wgmma=True`` takes these sizes (``_check_wgmma`` would not refuse them)."""
    try:
        _check_wgmma(fragments, head_dim, block_m, block_n, True)
    except ScheduleError:
        return False
    return True


def _hopper_visible() -> bool:
    from loopir.codegen_cuda.default_schedule import hopper_visible

    return hopper_visible()


def _check_wgmma(fragments: bool, head_dim: int, block_m: int | None, block_n: int | None, pv: bool) -> None:
    """Refuse what ``attention(..., wgmma=...)`` cannot schedule, naming the parameter (``pv``:
    the second GEMM too)."""
    if fragments is not True:
        raise _fail(f"wgmma=True needs fragments=True (S in the mma fragments' registers), got fragments={fragments!r}")
    if isinstance(head_dim, int) and head_dim % 64:
        raise _fail(f"wgmma=True needs head_dim a multiple of 64 (the Q and K tiles' 128-byte swizzled rows), "
                    f"got head_dim = {head_dim}")  # fmt: skip
    if pv and isinstance(head_dim, int) and head_dim > 256:
        raise _fail(f"wgmma=True needs head_dim at most 256 (the N of the P V wgmma), got head_dim = {head_dim}; "
                    "wgmma='qk' puts the first GEMM only on wgmma")  # fmt: skip
    if block_m is not None and (isinstance(block_m, bool) or not isinstance(block_m, int) or block_m <= 0
                                or block_m % 64):  # fmt: skip
        raise _fail(f"wgmma=True needs block_m a multiple of 64 (whole warpgroups of 4 warps), got block_m = {block_m!r}")
    if block_n is not None and (isinstance(block_n, bool) or not isinstance(block_n, int)
                                or not 16 <= block_n <= 256 or block_n % 16):  # fmt: skip
        raise _fail(f"wgmma=True needs block_n a multiple of 16 from 16 to 256 (wgmma's N), got block_n = {block_n!r}")


#: ``tma="auto"``: the least constant KV length at which the TMA form (two consumer warpgroups,
#: 128 x 128 tiles, ``setmaxnreg`` 24 / 240) measured faster than the ``cp.async`` overlap at
#: head_dim 128 (H200, session 20: 1.14x at 1k, 1.15x at 4k; shorter lengths not measured)
TMA_MIN_SEQ_KV = 1024
#: The same with 64-key tiles (``block_n=64`` given): faster from 4k on (session 19; 1k: no)
TMA_MIN_SEQ_KV_64 = 4096
#: The same at head_dim 64 (128 x 128 tiles, ``setmaxnreg``): 1.05x the 64 x 96 ``cp.async``
#: overlap at 16k, slower at 1k and 4k (H200, session 22)
TMA_MIN_SEQ_KV_D64 = 16384
#: The same causal, at head_dim 128 (128 x 128 tiles, ``setmaxnreg``; 4-12 bytes spilled):
#: 1.04-1.05x the ``cp.async`` overlap at 16k, slower at 1k and 4k (0.89x / 0.97x; H200,
#: session 23); head_dim 64 causal was slower at 4k and 16k (session 22)
TMA_MIN_SEQ_KV_CAUSAL = 16384
#: The TMA form's registers for ``tma="auto"`` (``setmaxnreg``: producer, consumers)
TMA_REGISTERS = (24, 240)


def _tma_auto(wgmma: object, overlap: bool, causal: bool, head_dim: int, seq_kv: int | Var,
              block_m: int | None, block_n: int | None) -> tuple[bool | tuple[int, int], int | None, int | None]:  # fmt: skip
    """``tma="auto"``: the TMA form and its tiles where it measured faster (``attention``'s
    docstring), else ``(False, block_m, block_n)`` unchanged."""
    fits = (wgmma is True and overlap and head_dim in (64, 128) and block_m in (None, 128)
            and isinstance(seq_kv, int) and (not causal or head_dim == 128))  # fmt: skip
    least = TMA_MIN_SEQ_KV_CAUSAL if causal else TMA_MIN_SEQ_KV if head_dim == 128 else TMA_MIN_SEQ_KV_D64
    if fits and block_n in (None, 128) and seq_kv >= least:
        return TMA_REGISTERS, 128, 128
    if fits and not causal and head_dim == 128 and block_n == 64 and seq_kv >= TMA_MIN_SEQ_KV_64:
        return True, 128, 64
    return False, block_m, block_n


def _check_tma(tma: object, wgmma: object, overlap: bool) -> None:
    """Refuse a ``tma`` that ``attention`` cannot schedule, naming it."""
    regs = isinstance(tma, (tuple, list)) and len(tma) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) and 24 <= v <= 256 and v % 8 == 0 for v in tma)
    if not (tma is True or regs):
        raise _fail(f"tma must be False, True, 'auto' or (dec, inc) setmaxnreg register counts (24 to 256, "
                    f"multiples of 8), got {tma!r}")  # fmt: skip
    if wgmma is not True or not overlap:
        raise _fail(f"tma (the K and V tiles by TMA from a producer warpgroup) needs wgmma=True and overlap=True, got "
                    f"wgmma={wgmma!r}, overlap={overlap!r}")  # fmt: skip


def _start_schedule(sch: Schedule, shared: Sequence[tuple[str, str]]) -> None:
    """Both schedules' first steps: a thread block per (batch x head, query tile), the blocks
    ``shared`` (``(writer, buffer)``) writing shared memory."""
    b, h, i0 = sch.get_loops(sch.get_block("tile"))
    sch.bind(sch.fuse(b, h), "blockIdx.y")
    sch.bind(i0, "blockIdx.x")
    for writer, buf in shared:
        sch.set_scope(sch.get_block(writer), buf, "shared")


def _finish_schedule(sch: Schedule, align: Sequence[tuple[str, str, int, int]], fast_math: Sequence[str],
                    lse: bool, overlap: bool = False) -> Schedule:  # fmt: skip
    """Both schedules' last steps: the KV tiles pipelined (``overlap``: FlashAttention 3's
    pipeline, ``attention_fragments.pipeline_overlap``), the shared rows padded (``align``:
    ``(writer, buffer, factor, offset)``), fast math on the blocks ``fast_math`` (the
    logsumexp's only when it is computed)."""
    if overlap:
        from loopir.examples.attention_fragments import pipeline_overlap

        pipeline_overlap(sch)
    else:
        _pipeline_kv_loads(sch)
    for writer, buf, factor, offset in align:
        sch.storage_align(sch.get_block(writer), buf, 0, factor, offset)
    for name in fast_math:
        if name != "LSE" or lse:
            sch.annotate(sch.get_block(name), "loopir.fast_math", True)
    return sch


def _pipeline_kv_loads(sch: Schedule) -> None:
    """The KV loop software pipelined over two stages: the K and V tiles of iteration ``j0 + 1``
    (``cp.async``, into a second version of ``K_s`` / ``V_s``) are fetched while iteration
    ``j0`` computes, so their latency hides behind the tile's two GEMMs and softmax (one thread
    block per SM has no other block to switch to)."""
    from loopir.ir.stmt import For, SeqStmt

    j0 = sch.get_loops(sch.get_block("K_load"))[0]
    loop = sch.get(j0)
    assert isinstance(loop, For)
    body = loop.body
    n = len(body.seq) if isinstance(body, SeqStmt) else 1
    # the loads are the body's first two statements (the template's order), the rest stage 1
    sch.annotate(j0, "software_pipeline_stage", [0, 0] + [1] * (n - 2))
    sch.annotate(j0, "software_pipeline_async_stages", [0])


def _tensor_core_gemm(sch: Schedule, name: str, warps: int, dtype: str, b_trans: bool, head_dim: int,
                      block_n: int) -> None:  # fmt: skip
    """Block ``name`` (``C[i, j] += A[i, k] * B[.., ..]`` over shared tiles, C in shared memory)
    on tensor cores: 16 x 16 x 16 tiles, ``warps`` warps on ``threadIdx.y`` splitting the rows,
    fragments loaded per 16-wide K step, C stored back to its shared buffer."""
    from loopir.schedule import tensor_core_gemm as tcg

    blk = sch.get_block(name)
    i, j, k = sch.get_loops(blk)[-3:]
    i, i_tc = sch.split(i, [None, tcg.TILE])
    j, j_tc = sch.split(j, [None, tcg.TILE])
    k, k_tc = sch.split(k, [None, tcg.TILE])
    sch.reorder(i, j, k, i_tc, j_tc, k_tc)
    outer = sch.blockize(i_tc)
    iw, i2 = sch.split(i, [warps, None])
    sch.reorder(iw, k, i2, j)
    sch.bind(iw, "threadIdx.y")
    # the fragments for this GEMM only (P, say, is also read by the row sums)
    a_warp = sch.cache_read(outer, 0, "warp", consumer_blocks=[outer])
    b_warp = sch.cache_read(outer, 1, "warp", consumer_blocks=[outer])
    sch.compute_at(a_warp, k)
    sch.compute_at(b_warp, k)
    c_warp = sch.cache_write(outer, 0, "warp")
    sch.reverse_compute_at(c_warp, iw)
    init = sch.decompose_reduction(outer, k)
    rows, cols = (block_n, head_dim) if name == "S" else (head_dim, block_n)
    m = tcg.TensorCoreGemm(name, ("", ""), dtype, "float32", "float32", b_trans, 0, (0, rows, cols))
    tcg.tensorize_tiles(sch, m, (outer, init), (a_warp, b_warp), c_warp, True, (tcg.TILE, tcg.TILE))
