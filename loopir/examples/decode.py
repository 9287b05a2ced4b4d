"""Decode attention (one query per sequence) as loopir programs: flash-decoding (issue 33).

[`decode_attention_func`][loopir.examples.decode.decode_attention_func] splits the
keys into chunks, each chunk's partial softmax in its own thread block, then combines the
chunks; [`decode_attention`][loopir.examples.decode.decode_attention] is its GPU
schedule. The prefill form, and the conventions shared with it (the layouts, grouped-query
heads, symbolic lengths), are [`loopir.examples.attention`][loopir.examples.attention].
"""

from __future__ import annotations

import math

from loopir.examples.attention import _RESCALE, _check, _fail, _size
from loopir.ir.expr import Var
from loopir.ir.stmt import PrimFunc
from loopir.schedule import Schedule

__all__ = ["decode_attention", "decode_attention_func"]

_DECODE = '''
def decode_attention(Q: T.Buffer(({B}, {H}, 1, {D}), "{dt}"), K: T.Buffer(({B}, {KH}, {SKV}, {D}), "{dt}"),
                     V: T.Buffer(({B}, {KH}, {SKV}, {D}), "{dt}"), O: T.Buffer(({B}, {H}, 1, {D}), "{dt}")):
    O_part = T.alloc_buffer(({B}, {H}, {SPLITS}, {D}), "float32")
    M_part = T.alloc_buffer(({B}, {H}, {SPLITS}), "float32")
    L_part = T.alloc_buffer(({B}, {H}, {SPLITS}), "float32")
    for b, kh, sp in T.grid({B}, {KH}, {SPLITS}):
        with T.block("split"):
            vb, vkh, vsp = T.axis.remap("SSS", [b, kh, sp])
            S = T.alloc_buffer(({G}, {BN}), "float32")
            m = T.alloc_buffer(({G},), "float32")
            m_prev = T.alloc_buffer(({G},), "float32")
            l = T.alloc_buffer(({G},), "float32")
            tmax = T.alloc_buffer(({G},), "float32")
            tsum = T.alloc_buffer(({G},), "float32")
            acc = T.alloc_buffer(({G}, {D}), "float32")
            for r in range({G}):
                with T.block("init_stats"):
                    vr = T.axis.spatial({G}, r)
                    m[vr] = T.min_value("float32")
                    l[vr] = T.float32(0)
            for r, d in T.grid({G}, {D}):
                with T.block("init_acc"):
                    vr, vd = T.axis.remap("SS", [r, d])
                    acc[vr, vd] = T.float32(0)
            for j0 in range({TILES}):
                for r, jj, d in T.grid({G}, {BN}, {D}):
                    with T.block("S"):
                        vj0, vr, vjj, vd = T.axis.remap("SSSR", [j0, r, jj, d])
                        with T.init():
                            S[vr, vjj] = T.float32(0)
                        S[vr, vjj] = S[vr, vjj] + T.Cast("float32", Q[vb, vkh * {G} + vr, 0, vd]) * T.Cast("float32", T.if_then_else({VALID}, K[vb, vkh, {COL}, vd], T.{dt}(0)))
                for r in range({G}):
                    with T.block("save_max"):
                        vr = T.axis.spatial({G}, r)
                        m_prev[vr] = m[vr]
                for r, jj in T.grid({G}, {BN}):
                    with T.block("row_max"):
                        vj0, vr, vjj = T.axis.remap("SSR", [j0, r, jj])
                        with T.init():
                            tmax[vr] = T.min_value("float32")
                        tmax[vr] = T.max(tmax[vr], T.if_then_else({VALID}, S[vr, vjj] * T.float32({SCALE}), T.min_value("float32")))
                for r in range({G}):
                    with T.block("new_max"):
                        vr = T.axis.spatial({G}, r)
                        m[vr] = T.max(m_prev[vr], tmax[vr])
                for r, jj in T.grid({G}, {BN}):
                    with T.block("P"):
                        vj0, vr, vjj = T.axis.remap("SSS", [j0, r, jj])
                        S[vr, vjj] = T.if_then_else({VALID}, T.exp(S[vr, vjj] * T.float32({SCALE}) - m[vr]), T.float32(0))
                for r, jj in T.grid({G}, {BN}):
                    with T.block("row_sum"):
                        vr, vjj = T.axis.remap("SR", [r, jj])
                        with T.init():
                            tsum[vr] = T.float32(0)
                        tsum[vr] = tsum[vr] + S[vr, vjj]
                for r in range({G}):
                    with T.block("new_sum"):
                        vr = T.axis.spatial({G}, r)
                        l[vr] = l[vr] * {RESCALE} + tsum[vr]
                for r, d in T.grid({G}, {D}):
                    with T.block("rescale"):
                        vr, vd = T.axis.remap("SS", [r, d])
                        acc[vr, vd] = acc[vr, vd] * {RESCALE}
                for r, d, jj in T.grid({G}, {D}, {BN}):
                    with T.block("PV"):
                        vj0, vr, vd, vjj = T.axis.remap("SSSR", [j0, r, d, jj])
                        acc[vr, vd] = acc[vr, vd] + S[vr, vjj] * T.Cast("float32", T.if_then_else({VALID}, V[vb, vkh, {COL}, vd], T.{dt}(0)))
            for r, d in T.grid({G}, {D}):
                with T.block("write_part"):
                    vr, vd = T.axis.remap("SS", [r, d])
                    O_part[vb, vkh * {G} + vr, vsp, vd] = acc[vr, vd]
                    if vd == 0:
                        M_part[vb, vkh * {G} + vr, vsp] = m[vr]
                        L_part[vb, vkh * {G} + vr, vsp] = l[vr]
    for b, h in T.grid({B}, {H}):
        with T.block("combine"):
            vb, vh = T.axis.remap("SS", [b, h])
            top = T.alloc_buffer(({D},), "float32")
            total = T.alloc_buffer(({D},), "float32")
            out = T.alloc_buffer(({D},), "float32")
            for d, sp in T.grid({D}, {SPLITS}):
                with T.block("top"):
                    vd, vsp = T.axis.remap("SR", [d, sp])
                    with T.init():
                        top[vd] = T.min_value("float32")
                    top[vd] = T.max(top[vd], M_part[vb, vh, vsp])
            for d, sp in T.grid({D}, {SPLITS}):
                with T.block("total"):
                    vd, vsp = T.axis.remap("SR", [d, sp])
                    with T.init():
                        total[vd] = T.float32(0)
                    total[vd] = total[vd] + {WEIGHT} * L_part[vb, vh, vsp]
            for d, sp in T.grid({D}, {SPLITS}):
                with T.block("merge"):
                    vd, vsp = T.axis.remap("SR", [d, sp])
                    with T.init():
                        out[vd] = T.float32(0)
                    out[vd] = out[vd] + {WEIGHT} * O_part[vb, vh, vsp, vd]
            for d in range({D}):
                with T.block("O"):
                    vd = T.axis.spatial({D}, d)
                    O[vb, vh, 0, vd] = T.Cast("{dt}", T.if_then_else(total[vd] > T.float32(0), out[vd] / total[vd], T.float32(0)))
'''

# exp(M_s - top), 0 for a split that saw no key (M_s = -inf; also when every split is empty)
_WEIGHT = ("T.if_then_else(M_part[vb, vh, vsp] == T.min_value(\"float32\"), T.float32(0), "
           "T.exp(M_part[vb, vh, vsp] - top[vd]))")


def decode_attention_func(batch: int, heads: int, seq_kv: int | Var, head_dim: int, dtype: str = "float16",
                          kv_heads: int | None = None, *, splits: int = 8, block_n: int = 64) -> PrimFunc:  # fmt: skip
    """Decode attention (one query per sequence) as flash-decoding: the keys split into
    ``splits`` chunks, each chunk's partial softmax (running maximum, sum and output, blocks
    under ``split``, one per batch, KV head and chunk: the query heads of a KV head's group
    read its keys and values together) and then a ``combine`` per batch and head, each chunk
    weighted by ``w_s = exp(M_s - max_s M_s)``: ``O = sum_s w_s acc_s / sum_s w_s l_s`` (each
    output column computes the weights itself: a few chunks).

    ``Q`` and ``O`` are ``(batch, heads, 1, head_dim)``; ``K`` and ``V`` ``(batch, kv_heads,
    seq_kv, head_dim)``; ``seq_kv`` may be a ``loopir.Var``. Chunks are ``ceil(seq_kv / splits)``
    keys rounded up to ``block_n``; a chunk past the keys contributes nothing.
    """
    from loopir.script import from_source

    kv_heads = heads if kv_heads is None else kv_heads
    _check(batch, heads, head_dim, dtype, kv_heads, 1, block_n)
    if isinstance(splits, bool) or not isinstance(splits, int) or splits <= 0:
        raise _fail(f"splits must be a positive int, got {splits!r}")
    skv = _size("seq_kv", seq_kv)
    # a chunk of whole tiles: ceil(ceil(seq_kv / splits) / block_n) tiles
    tiles = f"T.ceildiv(T.ceildiv({skv}, {splits}), {block_n})"
    col = f"vsp * {tiles} * {block_n} + vj0 * {block_n} + vjj"
    fields = dict(B=batch, H=heads, SKV=skv, D=head_dim, dt=dtype, KH=kv_heads, G=heads // kv_heads,
                  BN=block_n, SPLITS=splits, TILES=tiles, COL=col, VALID=f"{col} < {skv}",
                  SCALE=repr(1.0 / math.sqrt(head_dim)), RESCALE=_RESCALE.replace("vii", "vr"), WEIGHT=_WEIGHT)  # fmt: skip
    return from_source(_DECODE.format(**fields))


#: decode's blocks under "split" spread over the threads: the loop bound to threadIdx.x (its
#: index among the block's loops below "split"), over keys or over head_dim (both ``head_dim``
#: wide).
_DECODE_THREADS = {"init_acc": 1, "S": 2, "row_max": 2, "P": 2, "row_sum": 2, "rescale": 2, "PV": 2,
                   "write_part": 1}  # fmt: skip
#: ... and the blocks per row of the group (their row loop's index).
_DECODE_ROWS = {"init_stats": 0, "save_max": 1, "new_max": 1, "new_sum": 1}


def decode_attention(batch: int, heads: int, seq_kv: int | Var, head_dim: int, dtype: str = "float16",
                     kv_heads: int | None = None, *, splits: int = 8) -> Schedule:  # fmt: skip
    """[`decode_attention_func`][loopir.examples.decode.decode_attention_func] scheduled for
    the GPU (KV tiles of ``head_dim`` keys): a thread block per batch, KV head and chunk with
    ``head_dim`` threads, each thread one key of a tile for the scores (the row maximum and sum
    combined across the threads) and one column of the output for ``P V``; the combine a
    thread block per batch and head, a thread per column. The first GPU form; vectorized KV
    reads and a chunk count picked by the number of SMs are next (issue 33)."""
    sch = Schedule(decode_attention_func(batch, heads, seq_kv, head_dim, dtype, kv_heads, splits=splits,
                                         block_n=head_dim))  # fmt: skip
    split = sch.get_block("split")
    b, kh, sp = sch.get_loops(split)
    sch.bind(sch.fuse(b, kh), "blockIdx.y")
    sch.bind(sp, "blockIdx.x")
    for writer, buf in (("S", "S"), ("init_acc", "acc"), ("init_stats", "m"), ("init_stats", "l"),
                        ("save_max", "m_prev"), ("row_max", "tmax"), ("row_sum", "tsum")):  # fmt: skip
        sch.set_scope(sch.get_block(writer), buf, "shared")
    for name, at in _DECODE_THREADS.items():
        sch.bind(sch.get_loops(sch.get_block(name))[at], "threadIdx.x")
    # a row's statistics: the first `group` threads, one row each (the split by head_dim, more
    # than the rows, keeps every thread loop of the kernel head_dim wide; a predicate guards it)
    for name, at in _DECODE_ROWS.items():
        _, inner = sch.split(sch.get_loops(sch.get_block(name))[at], [None, head_dim])
        sch.bind(inner, "threadIdx.x")
    combine = sch.get_block("combine")
    b2, h2 = sch.get_loops(combine)
    sch.bind(sch.fuse(b2, h2), "blockIdx.x")
    # each column's thread computes the chunks' weights itself (a few chunks): registers
    for writer, buf in (("top", "top"), ("total", "total"), ("merge", "out")):
        sch.set_scope(sch.get_block(writer), buf, "local")
    column = sch.get_loops(sch.get_block("top"))[0]
    sch.bind(column, "threadIdx.x")
    for name in ("total", "merge", "O"):  # under the same column loop: its registers
        sch.reverse_compute_at(sch.get_block(name), column)
    return sch
