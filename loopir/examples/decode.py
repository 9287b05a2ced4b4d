"""Decode attention (one query per sequence) as loopir programs: flash-decoding (issue 33).

[`decode_attention_func`][loopir.examples.decode.decode_attention_func] splits the
keys into chunks, each chunk's partial softmax in its own thread block, then combines the
chunks; [`decode_attention`][loopir.examples.decode.decode_attention] is its GPU
schedule. The prefill form, and the conventions shared with it (the layouts, grouped-query
heads, symbolic lengths), are [`loopir.examples.attention`][loopir.examples.attention].
"""

from __future__ import annotations

import math

from loopir.examples.attention import _RESCALE, _check, _fail, _size, size_env
from loopir.ir.expr import Var
from loopir.ir.stmt import PrimFunc
from loopir.schedule import Schedule

__all__ = ["MAX_SPLITS", "decode_attention", "decode_attention_func", "default_splits"]

_DECODE = '''
def decode_attention(Q: T.Buffer(({B}, {H}, {SQ}, {D}), "{dt}"), {KV_PARAMS}, O: T.Buffer(({B}, {H}, {SQ}, {D}), "{dt}")):
    O_part = T.alloc_buffer(({B}, {H}, {SQ}, {SPLITS}, {D}), "float32")
    M_part = T.alloc_buffer(({B}, {H}, {SQ}, {SPLITS}), "float32")
    L_part = T.alloc_buffer(({B}, {H}, {SQ}, {SPLITS}), "float32")
    for b, kh, sp in T.grid({B}, {KH}, {SPLITS}):
        with T.block("split"):
            vb, vkh, vsp = T.axis.remap("SSS", [b, kh, sp])
            S = T.alloc_buffer(({R}, {BN}), "float32")
            m = T.alloc_buffer(({R},), "float32")
            m_prev = T.alloc_buffer(({R},), "float32")
            l = T.alloc_buffer(({R},), "float32")
            tmax = T.alloc_buffer(({R},), "float32")
            tsum = T.alloc_buffer(({R},), "float32")
            acc = T.alloc_buffer(({R}, {D}), "float32")
{KV_TILES}            for r in range({R}):
                with T.block("init_stats"):
                    vr = T.axis.spatial({R}, r)
                    m[vr] = T.min_value("float32")
                    l[vr] = T.float32(0)
            for r, d in T.grid({R}, {D}):
                with T.block("init_acc"):
                    vr, vd = T.axis.remap("SS", [r, d])
                    acc[vr, vd] = T.float32(0)
            for j0 in range({TILES}):
{KV_LOADS}                for r, jj, d in T.grid({R}, {BN}, {D}):
                    with T.block("S"):
                        vj0, vr, vjj, vd = T.axis.remap("SSSR", [j0, r, jj, d])
                        with T.init():
                            S[vr, vjj] = T.float32(0)
                        S[vr, vjj] = S[vr, vjj] + T.Cast("float32", Q[vb, {HEAD}, {QPOS}, vd]) * T.Cast("float32", {K_READ})
                for r in range({R}):
                    with T.block("save_max"):
                        vr = T.axis.spatial({R}, r)
                        m_prev[vr] = m[vr]
                for r, jj in T.grid({R}, {BN}):
                    with T.block("row_max"):
                        vj0, vr, vjj = T.axis.remap("SSR", [j0, r, jj])
                        with T.init():
                            tmax[vr] = T.min_value("float32")
                        tmax[vr] = T.max(tmax[vr], T.if_then_else({VALID}, S[vr, vjj] * T.float32({SCALE}), T.min_value("float32")))
                for r in range({R}):
                    with T.block("new_max"):
                        vr = T.axis.spatial({R}, r)
                        m[vr] = T.max(m_prev[vr], tmax[vr])
                for r, jj in T.grid({R}, {BN}):
                    with T.block("P"):
                        vj0, vr, vjj = T.axis.remap("SSS", [j0, r, jj])
                        S[vr, vjj] = T.if_then_else({VALID}, T.exp(S[vr, vjj] * T.float32({SCALE}) - m[vr]), T.float32(0))
                for r, jj in T.grid({R}, {BN}):
                    with T.block("row_sum"):
                        vr, vjj = T.axis.remap("SR", [r, jj])
                        with T.init():
                            tsum[vr] = T.float32(0)
                        tsum[vr] = tsum[vr] + S[vr, vjj]
                for r in range({R}):
                    with T.block("new_sum"):
                        vr = T.axis.spatial({R}, r)
                        l[vr] = l[vr] * {RESCALE} + tsum[vr]
                for r, d in T.grid({R}, {D}):
                    with T.block("rescale"):
                        vr, vd = T.axis.remap("SS", [r, d])
                        acc[vr, vd] = acc[vr, vd] * {RESCALE}
                for r, d, jj in T.grid({R}, {D}, {BN}):
                    with T.block("PV"):
                        vj0, vr, vd, vjj = T.axis.remap("SSSR", [j0, r, d, jj])
                        acc[vr, vd] = acc[vr, vd] + S[vr, vjj] * T.Cast("float32", {V_READ})
            for r, d in T.grid({R}, {D}):
                with T.block("write_part"):
                    vr, vd = T.axis.remap("SS", [r, d])
                    O_part[vb, {HEAD}, {QPOS}, vsp, vd] = acc[vr, vd]
                    if vd == 0:
                        M_part[vb, {HEAD}, {QPOS}, vsp] = m[vr]
                        L_part[vb, {HEAD}, {QPOS}, vsp] = l[vr]
    for b, h, i in T.grid({B}, {H}, {SQ}):
        with T.block("combine"):
            vb, vh, vi = T.axis.remap("SSS", [b, h, i])
            top = T.alloc_buffer(({D},), "float32")
            total = T.alloc_buffer(({D},), "float32")
            out = T.alloc_buffer(({D},), "float32")
            for d, sp in T.grid({D}, {SPLITS}):
                with T.block("top"):
                    vd, vsp = T.axis.remap("SR", [d, sp])
                    with T.init():
                        top[vd] = T.min_value("float32")
                    top[vd] = T.max(top[vd], M_part[vb, vh, vi, vsp])
            for d, sp in T.grid({D}, {SPLITS}):
                with T.block("total"):
                    vd, vsp = T.axis.remap("SR", [d, sp])
                    with T.init():
                        total[vd] = T.float32(0)
                    total[vd] = total[vd] + {WEIGHT} * L_part[vb, vh, vi, vsp]
            for d, sp in T.grid({D}, {SPLITS}):
                with T.block("merge"):
                    vd, vsp = T.axis.remap("SR", [d, sp])
                    with T.init():
                        out[vd] = T.float32(0)
                    out[vd] = out[vd] + {WEIGHT} * O_part[vb, vh, vi, vsp, vd]
            for d in range({D}):
                with T.block("O"):
                    vd = T.axis.spatial({D}, d)
                    O[vb, vh, vi, vd] = T.Cast("{dt}", T.if_then_else(total[vd] > T.float32(0), out[vd] / total[vd], T.float32(0)))
'''

# exp(M_s - top), 0 for a split that saw no key (M_s = -inf; also when every split is empty)
_WEIGHT = ("T.if_then_else(M_part[vb, vh, vi, vsp] == T.min_value(\"float32\"), T.float32(0), "
           "T.exp(M_part[vb, vh, vi, vsp] - top[vd]))")

# a staged tile (decode_attention_func(staged=...)): the chunk block's buffer of the tile's rows
# and the block that copies them, first in the tile (the copies decode_attention(prefetch=...)
# pipelines); the dot products / P V then read the copy
_TILE_BUF = '            {X}_s = T.alloc_buffer(({BN}, {D}), "{dt}")\n'
_TILE_LOAD = '''                for jj, d in T.grid({BN}, {D}):
                    with T.block("{X}_load"):
                        vj0, vjj, vd = T.axis.remap("SSS", [j0, jj, d])
                        {X}_s[vjj, vd] = {X}[{KV_AT}, vd]
'''
#: the values of ``staged`` (decode_attention_func) and ``prefetch`` (decode_attention)
_STAGED = ("k", "v", "kv")


def _check_staged(name: str, value: object, what: str = "") -> None:
    """Refuse a ``staged`` / ``prefetch`` value (``decode_attention_func``'s and
    ``decode_attention``'s names for the tiles read a tile ahead), naming the parameter."""
    if value is not None and value not in _STAGED:
        raise _fail(f"{name} must be None or one of {', '.join(map(repr, _STAGED))}{what}, got {value!r}")


def decode_attention_func(batch: int, heads: int, seq_kv: int | Var, head_dim: int, dtype: str = "float16",
                          kv_heads: int | None = None, *, splits: int = 8, block_n: int = 64, seq_q: int = 1,
                          causal: bool = False, page_size: int | None = None,
                          num_pages: int | Var | None = None, staged: str | None = None) -> PrimFunc:  # fmt: skip
    """Decode attention (one query per sequence) as flash-decoding: the keys split into
    ``splits`` chunks, each chunk's partial softmax (running maximum, sum and output, blocks
    under ``split``, one per batch, KV head and chunk: the query heads of a KV head's group
    read its keys and values together) and then a ``combine`` per batch and head, each chunk
    weighted by ``w_s = exp(M_s - max_s M_s)``: ``O = sum_s w_s acc_s / sum_s w_s l_s`` (each
    output column computes the weights itself: a few chunks).

    ``Q`` and ``O`` are ``(batch, heads, 1, head_dim)``; ``K`` and ``V`` ``(batch, kv_heads,
    seq_kv, head_dim)``; ``seq_kv`` may be a ``loopir.Var``. Chunks are ``ceil(seq_kv / splits)``
    keys rounded up to ``block_n``; a chunk past the keys contributes nothing (columns past the
    keys read the last key's rows, so that the loads need no select, and weigh 0).

    ``seq_q`` (an int, a few: speculative decoding's draft tokens) queries per sequence, ``Q`` and
    ``O`` then ``(batch, heads, seq_q, head_dim)``: each chunk's rows are the ``heads / kv_heads``
    query heads of the KV head times the ``seq_q`` positions (row ``r``: head ``r // seq_q``,
    position ``r % seq_q``), all reading the chunk's keys once. With ``causal`` the mask is
    aligned to the bottom right, as ``attention``'s: position ``i`` sees the keys ``j <= i +
    seq_kv - seq_q`` (a position that sees none is 0).

    ``page_size`` (a paged KV cache, as vLLM's and FlashInfer's "HND" layout): ``K`` and ``V`` are
    a pool of ``(num_pages, kv_heads, page_size, head_dim)`` pages, two more parameters follow
    them, the page table ``PT`` (``(batch, seq_kv)`` int32: ``seq_kv`` is then the table's width,
    the most pages of a sequence) and the lengths ``L`` (``(batch,)`` int32: sequence ``b`` has
    ``L[b]`` keys, key ``j`` at row ``j % page_size`` of page ``PT[b, j // page_size]``); the
    parameters are ``Q, K, V, PT, L, O``. ``num_pages`` and ``seq_kv`` may be ``loopir.Var``.
    Every entry of ``PT`` a sequence reads (its first page even with no key) must be a page of
    the pool; the rest of the table is not read. Indices are 32-bit: a pool of at most 2^31
    elements.

    ``staged`` (``None``, ``"k"``, ``"v"`` or ``"kv"``): the named tiles are first copied, at the
    start of each KV tile, into a ``(block_n, head_dim)`` buffer of the chunk block (``K_s`` /
    ``V_s``, by the blocks ``K_load`` / ``V_load``, K's first) that the dot products / ``P V``
    then read: the same values, in a form whose copies a schedule can stage through shared
    memory and pipeline (``decode_attention(prefetch=...)``). ``None``: no copy.
    """
    from loopir.script import from_source

    kv_heads = heads if kv_heads is None else kv_heads
    _check(batch, heads, head_dim, dtype, kv_heads, 1, block_n)
    if isinstance(splits, bool) or not isinstance(splits, int) or splits <= 0:
        raise _fail(f"splits must be a positive int, got {splits!r}")
    if isinstance(seq_q, bool) or not isinstance(seq_q, int) or seq_q <= 0:
        raise _fail(f"seq_q must be a positive int (the queries of a decode step), got {seq_q!r}")
    if not isinstance(causal, bool):
        raise _fail(f"causal must be a bool, got {causal!r}")
    _check_staged("staged", staged)
    skv = _size("seq_kv", seq_kv)
    # a chunk of whole tiles: ceil(ceil(seq_kv / splits) / block_n) tiles
    tiles = f"T.ceildiv(T.ceildiv({skv}, {splits}), {block_n})"
    col = f"vsp * {tiles} * {block_n} + vj0 * {block_n} + vjj"
    # K and V rows clamped to the last key (a column past the keys reads a real row, whose score
    # VALID masks and whose P is 0; V is finite): plain loads, which vectorize, not a select
    row = f"T.min({col}, {skv} - 1)"
    group = heads // kv_heads
    # one query: row r is head r of the group (the template as before seq_q existed)
    head, qpos = (f"vkh * {group} + vr", "0") if seq_q == 1 else (f"vkh * {group} + vr // {seq_q}", f"vr % {seq_q}")
    valid = f"{col} <= {qpos} + ({skv} - {seq_q})" if causal and seq_q > 1 else f"{col} < {skv}"
    kv = f'T.Buffer(({batch}, {kv_heads}, {skv}, {head_dim}), "{dtype}")'
    fields = dict(B=batch, H=heads, SKV=skv, D=head_dim, dt=dtype, KH=kv_heads, R=group * seq_q, SQ=seq_q,
                  HEAD=head, QPOS=qpos, BN=block_n, SPLITS=splits, TILES=tiles, COL=col, VALID=valid,
                  KV_PARAMS=f"K: {kv}, V: {kv}", KV_AT=f"vb, vkh, {row}",
                  SCALE=repr(1.0 / math.sqrt(head_dim)), RESCALE=_RESCALE.replace("vii", "vr"), WEIGHT=_WEIGHT)  # fmt: skip
    if page_size is not None:
        fields.update(_paged_fields(batch, kv_heads, head_dim, dtype, splits, block_n, seq_q, causal, seq_kv,
                                    page_size, num_pages, qpos))  # fmt: skip
    tiles_of = [x for x in "KV" if staged is not None and x.lower() in staged]
    fields.update(
        KV_TILES="".join(_TILE_BUF.format(X=x, BN=block_n, D=head_dim, dt=dtype) for x in tiles_of),
        KV_LOADS="".join(_TILE_LOAD.format(X=x, BN=block_n, D=head_dim, KV_AT=fields["KV_AT"]) for x in tiles_of),
        **{f"{x}_READ": f"{x}_s[vjj, vd]" if x in tiles_of else f"{x}[{fields['KV_AT']}, vd]" for x in "KV"},
    )
    return from_source(_DECODE.format(**fields), env=size_env(seq_kv=seq_kv, max_pages=seq_kv, num_pages=num_pages))


def _paged_fields(batch: int, kv_heads: int, head_dim: int, dtype: str, splits: int, block_n: int, seq_q: int,
                  causal: bool, max_pages: int | Var, page_size: int, num_pages: int | Var | None,
                  qpos: str) -> dict[str, str]:  # fmt: skip
    """The template's fields for a paged KV cache: keys ``K[PT[b, j // P], kv_head, j % P, :]``
    of a sequence of ``L[b]`` keys (``j < L[b]``), at most ``max_pages * P`` keys a sequence."""
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size <= 0:
        raise _fail(f"page_size must be a positive int, got {page_size!r}")
    pages = _size("max_pages", max_pages)
    if num_pages is None:
        raise _fail("a paged KV cache needs num_pages (the pool's pages: an int or a loopir.Var)")
    pool = _size("num_pages", num_pages)
    # a chunk of whole tiles over the table's capacity; columns past L[b] are masked, their rows
    # clamped into the sequence (its first page when it has no key: the table's entries must
    # be pages of the pool)
    tiles = f"T.ceildiv(T.ceildiv({pages} * {page_size}, {splits}), {block_n})"
    col = f"vsp * {tiles} * {block_n} + vj0 * {block_n} + vjj"
    row = f"T.max(T.min({col}, L[vb] - 1), 0)"
    valid = f"{col} <= {qpos} + (L[vb] - {seq_q})" if causal and seq_q > 1 else f"{col} < L[vb]"
    kv = f'T.Buffer(({pool}, {kv_heads}, {page_size}, {head_dim}), "{dtype}")'
    return dict(TILES=tiles, COL=col, VALID=valid, KV_AT=f"PT[vb, {row} // {page_size}], vkh, {row} % {page_size}",
                KV_PARAMS=f'K: {kv}, V: {kv}, PT: T.Buffer(({batch}, {pages}), "int32"), L: T.Buffer(({batch},), "int32")')  # fmt: skip


def decode_attention(batch: int, heads: int, seq_kv: int | Var, head_dim: int, dtype: str = "float16",
                     kv_heads: int | None = None, *, splits: int | None = None, seq_q: int = 1,
                     causal: bool = False, page_size: int | None = None,
                     num_pages: int | Var | None = None, prefetch: str | None = None, vec: int | None = None,
                     block_n: int | None = None, stages: int = 2) -> Schedule:  # fmt: skip
    """[`decode_attention_func`][loopir.examples.decode.decode_attention_func] scheduled for
    the GPU: a thread block of ``lanes = head_dim / vec`` threads (``vec``: the elements of a
    16-byte load, fewer where they do not divide ``head_dim``; 16 lanes, half a warp, at
    ``head_dim`` 128 in 16 bits) per batch, KV head and chunk, KV tiles of ``2 * lanes`` keys.
    At ``head_dim`` 128 in 16 bits with one row a block (no grouped heads, one query), no
    ``prefetch`` and no page table the default is a whole warp instead: ``vec`` 4 (8-byte
    loads, 32 lanes) and tiles of 96 keys (``WHOLE_WARP``; 1.07-1.12x on the H200).

    Lane ``t`` owns the columns ``[t * vec, (t + 1) * vec)`` of every row. Per tile it loads
    those columns of each of the tile's keys (a 16-byte load a key, consecutive lanes reading
    consecutive 16 bytes of a row, all the tile's loads issued before any is used) and keeps
    the partial dot products with ``q`` in registers (``rfactor``); the partials go through
    shared memory once (a padded row per lane: no bank conflicts) and lane ``j`` sums those
    of keys ``j`` and ``j + lanes``. The tile's maximum and sum are shuffles across the lanes,
    the running statistics a few words of shared memory, and ``P V`` reads ``V`` like ``K``,
    each lane accumulating its columns of the output in registers. The exponentials use the fast ``ex2.approx`` form
    (``loopir.fast_math``). The combine is a thread block per batch and head, a thread per
    column.

    ``splits`` (the chunk count) defaults to
    [`default_splits`][loopir.examples.decode.default_splits]``(batch, kv_heads)``; the
    other parameters are ``decode_attention_func``'s. With ``seq_q`` queries a block's rows are
    its group's heads times the positions: each lane keeps ``vec`` accumulators and a tile's
    partial dot products per row: 4 rows compile without spills at head_dim 128 in 16 bits
    (tests/examples/test_decode_attention.py); past 4 a tile has half the keys, and 8 rows still
    spill about 128 bytes (correct, slower). ``page_size`` and ``num_pages``: a paged KV cache
    (``decode_attention_func``), the same schedule, each key's row found through the page table.

    ``prefetch`` (default ``None``: the schedule above) keeps more of the KV read in flight:
    the named tiles (``"v"``, ``"k"`` or ``"kv"``) are fetched one KV tile ahead into shared
    memory by ``cp.async`` (``decode_attention_func(staged=...)``: blocks ``K_load`` /
    ``V_load``, a two-stage software pipeline of the KV loop, each tile double-buffered), lane
    ``t`` copying the 16 bytes of each row it reads later (a 16-byte shared load a key). With
    ``"v"`` the next tile's ``V`` is in flight while this tile's K loads, dot products and
    softmax run, instead of ``V`` being loaded only after the softmax; ``"kv"`` fetches both
    (16 KB of shared memory a tile pair at head_dim 128 in 16 bits: 32 KB a block, fewer
    resident blocks, no K registers in flight); ``"k"`` only K. The prologue fetches the first
    tile, the last tile's compute is an epilogue (any tile count: symbolic lengths, chunks past
    the keys), paged caches included. Registers at head_dim 128, sm_90a, nvcc 13.0 (one query,
    fp16 / bf16; GQA 4:1, or 4 rows a block): ``None`` 151 / 147, 210; ``"v"`` 150 / 142, 190;
    ``"kv"`` 118 / 111, 254; ``"k"`` 146 / 140, 255; no spills. On the H200 (batch 8, 32 heads, fp16,
    ``docs/benchmarks.md`` session 18) none is faster everywhere: ``"k"`` is 4.5 % faster at a
    KV length of 32k and 1 % slower at 4k, ``"v"`` and ``"kv"`` equal or slower; so the default
    stays ``None``.

    ``stages`` (default 2: one tile ahead) is the ``prefetch`` pipeline's depth: the copies of
    tile ``j0 + stages - 1`` are in flight while tile ``j0`` computes, ``stages`` versions of
    each staged tile. Deeper measured slower on the H200 (session 23, batch 8, 32 heads, fp16,
    whole warps of 8-byte copies, 32-key tiles: 0.155 / 0.181 / 0.203 ms at 4k for 2 / 3 / 4
    stages against the default's 0.142): each version's shared memory costs resident blocks.

    ``vec`` (the elements of a key's row a lane loads at once; default the 16 bytes above) and
    ``block_n`` (a KV tile's keys, a multiple of the ``head_dim / vec`` lanes; default two a lane,
    one past 4 rows) change the block's shape: ``vec=4`` at ``head_dim`` 128 in 16 bits is a
    whole warp of 32 lanes loading 8 bytes a key.

    Raises
    ------
    ScheduleError
        A bad argument (named; see ``decode_attention_func``), a ``prefetch`` other than
        ``None``, ``"k"``, ``"v"`` and ``"kv"``, a ``vec`` that is not a power of two dividing
        ``head_dim`` of at most 16 bytes, or a ``block_n`` that is not a positive multiple of the
        lanes, or ``stages`` not an int of at least 2 (or other than 2 without ``prefetch``).
    """
    kv_heads = heads if kv_heads is None else kv_heads
    _check(batch, heads, head_dim, dtype, kv_heads, 1, 1)
    _check_staged("prefetch", prefetch, " (the tiles fetched a tile ahead)")
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 2 or (stages != 2 and prefetch is None):
        raise _fail(f"stages (the prefetch pipeline's depth) must be an int of at least 2, with a prefetch for more "
                    f"than 2, got stages={stages!r}, prefetch={prefetch!r}")  # fmt: skip
    group = heads // kv_heads
    rows = group * seq_q
    resident = _RESIDENT
    if (vec, block_n, prefetch, rows, head_dim, page_size) == (None, None, None, 1, 128, None) and dtype != "float32":
        vec, block_n = WHOLE_WARP  # one query head a block: whole warps of 8-byte loads (see above)
        resident = _RESIDENT_WHOLE_WARP
    vec = _lane_vector(head_dim, dtype, vec)
    lanes = head_dim // vec
    if splits is None:
        splits = default_splits(batch, kv_heads, resident)
    if block_n is None:
        # a lane's partial dot products are rows x keys registers: fewer keys a tile past 4 rows
        rounds = _TILE_ROUNDS if rows <= _ROWS_AT_FULL_ROUNDS else 1
    elif isinstance(block_n, bool) or not isinstance(block_n, int) or block_n <= 0 or block_n % lanes:
        raise _fail(f"block_n (a KV tile's keys) must be a positive multiple of the {lanes} lanes "
                    f"(head_dim {head_dim} / vec {vec}), got {block_n!r}")  # fmt: skip
    else:
        rounds = block_n // lanes
    keys = lanes * rounds  # a tile's keys
    sch = Schedule(decode_attention_func(batch, heads, seq_kv, head_dim, dtype, kv_heads, splits=splits,
                                         block_n=keys, seq_q=seq_q, causal=causal, page_size=page_size,
                                         num_pages=num_pages, staged=prefetch))  # fmt: skip
    split = sch.get_block("split")
    b, kh, sp = sch.get_loops(split)
    sch.bind(sch.fuse(b, kh), "blockIdx.y")
    sch.bind(sp, "blockIdx.x")
    # the tile's scores and the statistics (a word per row of the group) in shared memory: every
    # lane reads them
    for writer, buf in (("S", "S"), ("init_stats", "m"), ("init_stats", "l"),
                        ("save_max", "m_prev"), ("row_max", "tmax"), ("row_sum", "tsum")):  # fmt: skip
        sch.set_scope(sch.get_block(writer), buf, "shared")
    # the output rows in registers: lane t's columns get an axis of their own, which
    # PrivatizeThreadLocals drops (each lane's vec x group accumulators, constant indices)
    init_acc = sch.get_block("init_acc")
    sch.set_scope(init_acc, "acc", "local")
    sch.transform_layout(init_acc, "acc", f"lambda r, d: (r, d // {vec}, d % {vec})")

    # scores: lane t's partial dot products over its vec columns, all the tile's keys first (their
    # loads in flight together) in registers (S_rf_local), then through shared memory (S_rf, rows
    # padded to group * keys + 1 words: the lanes' stores and the keys' loads hit distinct banks)
    # to lane j, which sums the partials of keys j and j + lanes: one round trip instead of a
    # shuffle reduction (and its barrier) per key
    s_blk = sch.get_block("S")
    dx, dv = sch.split(sch.get_loops(s_blk)[-1], [lanes, vec])
    rf = sch.rfactor(dx, 0)
    sch.set_scope(rf, 0, "shared")
    sch.storage_align(rf, 0, 0, rows * keys, 1)
    loc = sch.cache_write(rf, 0, "local")
    rj0, rr, rjj, rdx, rdv = sch.get_loops(rf)[-5:]
    sch.reorder(rdx, rjj, rr, rdv)
    sch.bind(rdx, "threadIdx.x")
    for lp in (rjj, rr, rdv):
        sch.unroll(lp)
    sch.reverse_compute_at(loc, rdx)
    for lp in sch.get_loops(loc)[2:]:  # below j0 and the lane (the loops within "split")
        sch.unroll(lp)
    sch.decompose_reduction(rf, rdv)
    *s_rows, sjj, sdx = sch.get_loops(s_blk)[1:]  # below j0 (the loops within "split")
    sjo, sjx = sch.split(sjj, [rounds, lanes])
    sch.reorder(sjx, *s_rows, sjo, sdx)
    sch.bind(sjx, "threadIdx.x")
    for lp in (*s_rows, sjo, sdx):
        sch.unroll(lp)
    for name in ("row_max", "P", "row_sum"):  # lane t: keys t, t + lanes, ...
        _, jx = sch.split(sch.get_loops(sch.get_block(name))[-1], [rounds, lanes])
        sch.bind(jx, "threadIdx.x")
    for name in ("init_stats", "save_max", "new_max", "new_sum"):
        _, inner = sch.split(sch.get_loops(sch.get_block(name))[-1], [None, lanes])
        sch.bind(inner, "threadIdx.x")
    for name in ("init_acc", "rescale", "write_part"):
        *_, r_, d_ = sch.get_loops(sch.get_block(name))
        dx, dv = sch.split(d_, [lanes, vec])
        sch.reorder(dx, r_)
        sch.bind(dx, "threadIdx.x")
        sch.unroll(r_)
        sch.unroll(dv)
    # P V: lane t's columns of the tile's V rows (a 16-byte load a key, all in flight together)
    # into its accumulators
    pv = sch.get_block("PV")
    *_, r_, d_, jj_ = sch.get_loops(pv)
    dx, dv = sch.split(d_, [lanes, vec])
    sch.reorder(dx, jj_, r_, dv)
    sch.bind(dx, "threadIdx.x")
    for lp in (jj_, r_, dv):
        sch.unroll(lp)
    # the softmax's exponentials as ex2.approx (their error is far below fp16's)
    for name in ("P", "new_sum", "rescale", "combine"):
        sch.annotate(sch.get_block(name), "loopir.fast_math", True)
    if prefetch is not None:
        _pipeline_tiles(sch, prefetch, lanes, vec, stages)
    combine = sch.get_block("combine")
    sch.bind(sch.fuse(*sch.get_loops(combine)), "blockIdx.x")
    # each column's thread computes the chunks' weights itself (a few chunks): registers
    for writer, buf in (("top", "top"), ("total", "total"), ("merge", "out")):
        sch.set_scope(sch.get_block(writer), buf, "local")
    column = sch.get_loops(sch.get_block("top"))[0]
    sch.bind(column, "threadIdx.x")
    for name in ("total", "merge", "O"):  # under the same column loop: its registers
        sch.reverse_compute_at(sch.get_block(name), column)
    return sch


def _pipeline_tiles(sch: Schedule, prefetch: str, lanes: int, vec: int, stages: int = 2) -> None:
    """``decode_attention(prefetch=...)``: the staged tiles (``K_load`` / ``V_load``, first in
    the KV loop's body) copied into shared memory by ``cp.async``, lane ``t`` copying the
    columns it reads later (16 bytes a key), ``stages - 1`` KV tiles ahead: a pipeline of the
    ``j0`` loop whose copies of tile ``j0 + stages - 1`` are in flight while tile ``j0``
    computes."""
    from loopir.codegen_cuda.vector_compute import VECTOR_SHARED_KEY
    from loopir.ir.stmt import For, SeqStmt

    copies = [f"{x}_load" for x in "KV" if x.lower() in prefetch]
    for name in copies:
        load = sch.get_block(name)
        sch.set_scope(load, f"{name[0]}_s", "shared")
        jj_, d_ = sch.get_loops(load)[-2:]
        dx, dv = sch.split(d_, [lanes, vec])
        sch.reorder(dx, jj_, dv)
        sch.bind(dx, "threadIdx.x")
        sch.unroll(jj_)
        sch.vectorize(dv)
    # the dot products / P V read their lane's 16 bytes of a staged row as one vector
    for x, reader in (("k", "S_rf"), ("v", "PV")):
        if x in prefetch:
            sch.annotate(sch.get_loops(sch.get_block(reader))[-1], VECTOR_SHARED_KEY, True)
    j0 = sch.get_loops(sch.get_block(copies[0]))[0]
    loop = sch.get(j0)
    assert isinstance(loop, For)
    n = len(loop.body.seq) if isinstance(loop.body, SeqStmt) else 1
    sch.annotate(j0, "software_pipeline_stage", [0] * len(copies) + [stages - 1] * (n - len(copies)))
    sch.annotate(j0, "software_pipeline_async_stages", [0])


def _vector(head_dim: int, dtype: str) -> int:
    """Elements per 16-byte load (fewer when they do not divide ``head_dim``)."""
    vec = 16 // (4 if dtype == "float32" else 2)
    while head_dim % vec:
        vec //= 2
    return vec


def _lane_vector(head_dim: int, dtype: str, vec: int | None) -> int:
    """``decode_attention``'s ``vec``: checked, or the 16-byte default."""
    if vec is None:
        return _vector(head_dim, dtype)
    most = 16 // (4 if dtype == "float32" else 2)
    if isinstance(vec, bool) or not isinstance(vec, int) or vec <= 0 or vec & (vec - 1) or vec > most or head_dim % vec:
        raise _fail(f"vec (the elements a lane loads of a key) must be a power of two dividing head_dim {head_dim} "
                    f"of at most 16 bytes ({most} {dtype}), got {vec!r}")  # fmt: skip
    return vec


#: a KV tile is this many keys per lane: each lane's loads of K (and then of V) in flight
#: together. H200, batch 8, 32 heads, head_dim 128, fp16: 1 key a lane read 2.8 TB/s at KV 4096
#: and 3.0-3.3 at 32768, 2 keys 3.5 and 3.9; 3 spilled (sm_90a, nvcc 13.0), 4 spills with GQA
_TILE_ROUNDS = 2
#: up to this many rows a block (query heads of a KV head x queries) a tile has _TILE_ROUNDS
#: keys a lane, past it one (8 rows x 2 keys spilled 1.1 KB, x 1 key 128 bytes; sm_90a, head_dim
#: 128, bf16)
_ROWS_AT_FULL_ROUNDS = 4
#: H200's multiprocessors, and the split kernel's thread blocks resident on one: 12 at up to
#: 168 registers a thread (151 at one query head a KV head; 210, 9 blocks, at 4; a block of one
#: 16-lane half warp is allocated a whole warp's registers)
_SMS = 132
_RESIDENT = 12
#: decode_attention's (vec, block_n) at head_dim 128 in 16 bits with one query head a KV head
#: and one query, and no ``prefetch`` or page table: a whole warp of 32 lanes, each loading 8
#: bytes of a key, 96 keys a tile (3 a lane). H200, batch 8, 32 heads, fp16 (session 21): 0.140 /
#: 0.974-0.996 ms at KV 4096 / 32768 against the half warp of 16-byte loads' 0.150-0.152 /
#: 1.089 (1.07-1.12x); 254 registers, no spills (sm_90a, nvcc 13.0); 64 or 32 keys a tile and
#: 128 (spilling) slower. Several rows a block keep the half warp: a lane's partial dot products
#: are rows x keys registers.
WHOLE_WARP = (4, 96)
#: the whole-warp form's blocks resident on an SM (254 registers a thread)
_RESIDENT_WHOLE_WARP = 8
#: the most chunks (the combine reads every chunk's row of each head)
MAX_SPLITS = 128


def default_splits(batch: int, kv_heads: int, resident: int = _RESIDENT) -> int:
    """The chunk count of [`decode_attention`][loopir.examples.decode.decode_attention] when
    none is given: the power of two that gives ``batch * kv_heads * splits`` at least two waves
    of resident thread blocks on an H200 (132 SMs x ``resident``, the chunk kernel's blocks
    an SM holds: 12 for the half-warp form, 8 for the whole-warp one), at most ``MAX_SPLITS``.
    The KV length plays no part (it may be symbolic): a chunk past the keys reads only the
    last key (its rows are clamped, an L2 hit) and weighs nothing.

    Raises
    ------
    ScheduleError
        ``batch``, ``kv_heads`` or ``resident`` not a positive int.
    """
    for name, v in (("batch", batch), ("kv_heads", kv_heads), ("resident", resident)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise _fail(f"{name} must be a positive int, got {v!r}")
    target = -(-2 * _SMS * resident // (batch * kv_heads))
    splits = 1
    while splits < min(target, MAX_SPLITS):
        splits *= 2
    return splits
