"""Attention as a loopir program: FlashAttention's online softmax, written as TensorIR (issue 33).

``O = softmax(Q K^T / sqrt(d)) V`` per batch and head, with Q, K, V and O laid out
``(batch, heads, seq, head_dim)``; K and V may have fewer heads (``kv_heads``, grouped-query
attention: query head ``h`` reads KV head ``h // (heads / kv_heads)``). It is not a stage graph
a schedule could fuse: the online softmax rescales the running output as each KV tile is seen.
So [`attention_func`][loopir.examples.attention.attention_func] writes the fused algorithm
itself, with the script parser, at tile granularity, one ``block_m`` tile of query rows per
iteration of the outer loops:

1. ``S = Q_tile K_tile^T`` (block ``S``, a GEMM: what tensorize will put on tensor cores),
   rows past ``seq_q`` and keys past ``seq_kv`` read as zeros;
2. the running row maximum ``m`` over the scaled scores of the valid keys (block ``row_max``);
3. ``P = exp(S * scale - m)`` on valid keys, 0 elsewhere (block ``P``, in place in ``S``);
4. the running output and row sum rescaled by ``exp(m_prev - m)`` (``rescale``, ``row_sum``; 1
   while the row has seen no valid key, the maxima both ``-inf``);
5. ``acc += P V_tile`` (block ``PV``, the second GEMM);
6. ``O = acc / l`` for the real rows (block ``O``); a row with no valid key (causal, ``seq_q >
   seq_kv``) is 0, as in FlashAttention. Optionally ``LSE = m + log(l)`` (the logsumexp of the
   scaled scores, ``-inf`` for a row with no valid key).

A key ``j`` is valid for query row ``i`` when ``j < seq_kv`` and, with ``causal``, ``j <= i +
seq_kv - seq_q`` (the mask aligned to the bottom right when ``seq_q != seq_kv``, as
FlashAttention 2.1+). ``seq_q`` and ``seq_kv`` may be ``loopir.Var``: one function serves every
length (the tiles are guarded).

[`attention`][loopir.examples.attention.attention] schedules it for the GPU on CUDA cores (a
thread block per query tile, a thread per row; the intermediates in shared memory): correct,
not yet fast. Tensor cores for the two GEMMs, the pipelined KV loop and decode are the rest of
issue 33.
"""

from __future__ import annotations

import math

from loopir.errors import ScheduleError
from loopir.ir.expr import Var
from loopir.ir.stmt import PrimFunc
from loopir.schedule import Schedule

__all__ = ["attention", "attention_func"]

_PRIM = "examples.attention"

_TEMPLATE = '''
def attention(Q: T.Buffer(({B}, {H}, {SQ}, {D}), "{dt}"), K: T.Buffer(({B}, {KH}, {SKV}, {D}), "{dt}"),
              V: T.Buffer(({B}, {KH}, {SKV}, {D}), "{dt}"), O: T.Buffer(({B}, {H}, {SQ}, {D}), "{dt}"){LSE_PARAM}):
    for b, h, i0 in T.grid({B}, {H}, T.ceildiv({SQ}, {BM})):
        with T.block("tile"):
            vb, vh, vi0 = T.axis.remap("SSS", [b, h, i0])
            m = T.alloc_buffer(({BM},), "float32")
            m_prev = T.alloc_buffer(({BM},), "float32")
            l = T.alloc_buffer(({BM},), "float32")
            acc = T.alloc_buffer(({BM}, {D}), "float32")
            S = T.alloc_buffer(({BM}, {BN}), "float32")
            for ii in range({BM}):
                with T.block("init_stats"):
                    vii = T.axis.spatial({BM}, ii)
                    m[vii] = T.min_value("float32")
                    l[vii] = T.float32(0)
            for ii, d in T.grid({BM}, {D}):
                with T.block("init_acc"):
                    vii, vd = T.axis.remap("SS", [ii, d])
                    acc[vii, vd] = T.float32(0)
            for j0 in range(T.ceildiv({SKV}, {BN})):
                for ii, jj, d in T.grid({BM}, {BN}, {D}):
                    with T.block("S"):
                        vii, vjj, vd = T.axis.remap("SSR", [ii, jj, d])
                        with T.init():
                            S[vii, vjj] = T.float32(0)
                        S[vii, vjj] = S[vii, vjj] + T.Cast("float32", T.if_then_else({IN_Q}, Q[vb, vh, {ROW}, vd], T.{dt}(0))) * T.Cast("float32", T.if_then_else({IN_KV}, K[vb, vh // {G}, {COL}, vd], T.{dt}(0)))
                for ii in range({BM}):
                    with T.block("save_max"):
                        vii = T.axis.spatial({BM}, ii)
                        m_prev[vii] = m[vii]
                for ii, jj in T.grid({BM}, {BN}):
                    with T.block("row_max"):
                        vii, vjj = T.axis.remap("SR", [ii, jj])
                        m[vii] = T.max(m[vii], T.if_then_else({VALID}, S[vii, vjj] * T.float32({SCALE}), T.min_value("float32")))
                for ii, jj in T.grid({BM}, {BN}):
                    with T.block("P"):
                        vii, vjj = T.axis.remap("SS", [ii, jj])
                        S[vii, vjj] = T.if_then_else({VALID}, T.exp(S[vii, vjj] * T.float32({SCALE}) - m[vii]), T.float32(0))
                for ii, d in T.grid({BM}, {D}):
                    with T.block("rescale"):
                        vii, vd = T.axis.remap("SS", [ii, d])
                        acc[vii, vd] = acc[vii, vd] * {RESCALE}
                for ii, jj in T.grid({BM}, {BN}):
                    with T.block("row_sum"):
                        vii, vjj = T.axis.remap("SR", [ii, jj])
                        with T.init():
                            l[vii] = l[vii] * {RESCALE}
                        l[vii] = l[vii] + S[vii, vjj]
                for ii, d, jj in T.grid({BM}, {D}, {BN}):
                    with T.block("PV"):
                        vii, vd, vjj = T.axis.remap("SSR", [ii, d, jj])
                        acc[vii, vd] = acc[vii, vd] + S[vii, vjj] * T.Cast("float32", T.if_then_else({IN_KV}, V[vb, vh // {G}, {COL}, vd], T.{dt}(0)))
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
    """The text of a size: an int, or a Var's name (the parser declares it)."""
    if isinstance(v, Var):
        if v.dtype != "int32":
            raise _fail(f"{name} must be an int32 Var, got {v.dtype} {v.name}")
        return v.name
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise _fail(f"{name} must be a positive int or a loopir.Var, got {v!r}")
    return str(v)


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
                   lse: bool = False, block_m: int = 64, block_n: int = 64) -> PrimFunc:  # fmt: skip
    """The fused attention program (module docstring), unscheduled: ``(Q, K, V, O)``, and
    ``LSE`` ``(batch, heads, seq_q)`` in float32 after them when ``lse``.

    Parameters
    ----------
    batch, heads, head_dim
        Sizes (ints).
    seq_q, seq_kv
        Query and key/value lengths: ints, or int32 ``loopir.Var`` (symbolic: the tiles are
        guarded; a Var is named by its name in the function).
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
    """
    from loopir.script import from_source

    kv_heads = heads if kv_heads is None else kv_heads
    _check(batch, heads, head_dim, dtype, kv_heads, block_m, block_n)
    sq, skv = _size("seq_q", seq_q), _size("seq_kv", seq_kv)
    row, col = f"vi0 * {block_m} + vii", f"j0 * {block_n} + vjj"
    in_kv = f"{col} < {skv}"
    valid = f"{in_kv} and {col} <= {row} + ({skv} - {sq})" if causal else in_kv
    fields = dict(B=batch, H=heads, SQ=sq, SKV=skv, D=head_dim, dt=dtype, KH=kv_heads, G=heads // kv_heads,
                  BM=block_m, BN=block_n, SCALE=repr(1.0 / math.sqrt(head_dim)), ROW=row, COL=col,
                  IN_Q=f"{row} < {sq}", IN_KV=in_kv, VALID=valid, RESCALE=_RESCALE,
                  LSE_PARAM=f', LSE: T.Buffer(({batch}, {heads}, {sq}), "float32")' if lse else "")  # fmt: skip
    fields["LSE_BLOCK"] = _LSE_BLOCK.format(**fields) if lse else ""
    func = from_source(_TEMPLATE.format(**fields))
    return func


def attention(batch: int, heads: int, seq_q: int | Var, seq_kv: int | Var, head_dim: int,
              dtype: str = "float16", causal: bool = False, kv_heads: int | None = None, *,
              lse: bool = False, block_m: int = 64, block_n: int = 64) -> Schedule:  # fmt: skip
    """[`attention_func`][loopir.examples.attention.attention_func] scheduled for the GPU on
    CUDA cores: the ``(batch, heads, query tile)`` loops on ``blockIdx``, one thread per query
    row of the tile (``block_m`` threads) in every stage, the statistics, scores and
    accumulator in shared memory (each thread reads and writes its own row of them, which the
    barrier planner proves). The first, correct schedule; tensor cores come next (issue 33).
    """
    sch = Schedule(attention_func(batch, heads, seq_q, seq_kv, head_dim, dtype, causal, kv_heads, lse=lse,
                                  block_m=block_m, block_n=block_n))  # fmt: skip
    tile = sch.get_block("tile")
    b, h, i0 = sch.get_loops(tile)
    sch.bind(sch.fuse(b, h), "blockIdx.y")
    sch.bind(i0, "blockIdx.x")
    for writer, buf in (("init_stats", "m"), ("save_max", "m_prev"), ("init_stats", "l"), ("init_acc", "acc"),
                        ("S", "S")):  # fmt: skip
        sch.set_scope(sch.get_block(writer), buf, "shared")
    for name in ("init_stats", "init_acc", "S", "save_max", "row_max", "P", "rescale", "row_sum", "PV", "O",
                 *(("LSE",) if lse else ())):  # fmt: skip
        blk = sch.get_block(name)
        loops = sch.get_loops(blk)
        # the loops below block "tile": (j0,) then the row loop
        first = loops[0] if name in ("init_stats", "init_acc", "O", "LSE") else loops[1]
        sch.bind(first, "threadIdx.x")
    return sch
