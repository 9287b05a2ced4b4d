"""Row reductions with one thread block per row: softmax, layernorm, RMSNorm, a large sum.

Each reduction's loop is split into ``threads`` threads that each reduce a strided part of
the row (coalesced reads), bound to ``threadIdx.x``; the parts are combined across the block
by LowerCrossThreadReduction (warp shuffles, then shared memory across warps). The row
statistics (max, sum, mean, variance) are written to ``shared`` memory by thread 0 and read
by every thread of the row after a barrier. With ``cache_row`` the row itself is read from
global memory once, in 16-byte vectors when the row length allows, into shared memory, from
which every pass reads. Statistics accumulate in float32 for float16 inputs. Any row length: the last part is
predicated.
"""

from __future__ import annotations

from typing import Any

from loopir import te
from loopir.schedule import Schedule
from loopir.schedule.default_gpu import cross_thread, default_threads, default_vector, per_row

__all__ = ["cross_entropy_func", "default_threads", "default_vector", "rmsnorm", "rmsnorm_func", "layernorm", "layernorm_func", "row_sum", "row_sum_func", "softmax", "softmax_func"]


def _f32(x: Any) -> Any:
    return x if x.dtype == "float32" else x.astype("float32")


def softmax_func(rows: Any, cols: Any, dtype: str = "float32") -> Any:
    """The unscheduled row softmax ``Y[i, j] = exp(X[i, j] - max_j X[i]) / sum_j exp(...)``."""
    X = te.placeholder((rows, cols), dtype, name="X")
    k = te.reduce_axis(cols, name="k")
    M = te.compute((rows,), lambda i: te.max(_f32(X[i, k]), axis=k), name="M")
    k2 = te.reduce_axis(cols, name="k2")
    S = te.compute((rows,), lambda i: te.sum(te.exp(_f32(X[i, k2]) - M[i]), axis=k2), name="S")
    Y = te.compute((rows, cols), lambda i, j: (te.exp(_f32(X[i, j]) - M[i]) / S[i]).astype(dtype), name="Y")
    return te.create_prim_func([X, Y])


def layernorm_func(rows: Any, cols: Any, dtype: str = "float32", eps: float = 1e-5) -> Any:
    """The unscheduled layernorm over the last axis, with weight and bias."""
    X = te.placeholder((rows, cols), dtype, name="X")
    W = te.placeholder((cols,), dtype, name="W")
    B = te.placeholder((cols,), dtype, name="B")
    k = te.reduce_axis(cols, name="k")
    S1 = te.compute((rows,), lambda i: te.sum(_f32(X[i, k]), axis=k), name="S1")
    k2 = te.reduce_axis(cols, name="k2")
    S2 = te.compute((rows,), lambda i: te.sum(_f32(X[i, k2]) * _f32(X[i, k2]), axis=k2), name="S2")
    n = float(cols) if isinstance(cols, int) else te.cast(cols, "float32")

    def norm(i: Any, j: Any) -> Any:
        mean = S1[i] / n
        var = S2[i] / n - mean * mean
        y = (_f32(X[i, j]) - mean) * te.rsqrt(var + eps) * _f32(W[j]) + _f32(B[j])
        return y.astype(dtype)

    Y = te.compute((rows, cols), norm, name="Y")
    return te.create_prim_func([X, W, B, Y])


def rmsnorm_func(rows: Any, cols: Any, dtype: str = "float16", eps: float = 1e-6) -> Any:
    """The unscheduled RMSNorm ``Y = X * rsqrt(mean(X^2) + eps) * W`` (LLaMA's)."""
    X = te.placeholder((rows, cols), dtype, name="X")
    W = te.placeholder((cols,), dtype, name="W")
    k = te.reduce_axis(cols, name="k")
    S = te.compute((rows,), lambda i: te.sum(_f32(X[i, k]) * _f32(X[i, k]), axis=k), name="S")
    n = float(cols) if isinstance(cols, int) else te.cast(cols, "float32")
    Y = te.compute((rows, cols), lambda i, j: (_f32(X[i, j]) * te.rsqrt(S[i] / n + eps) * _f32(W[j])).astype(dtype),
                   name="Y")  # fmt: skip
    return te.create_prim_func([X, W, Y])


def row_sum_func(rows: Any, cols: Any, dtype: str = "float32") -> Any:
    """The unscheduled ``S[i] = sum_j X[i, j]`` (float32 accumulation)."""
    X = te.placeholder((rows, cols), dtype, name="X")
    k = te.reduce_axis(cols, name="k")
    S = te.compute((rows,), lambda i: te.sum(_f32(X[i, k]), axis=k), name="S")
    return te.create_prim_func([X, S])


def softmax(rows: Any, cols: Any, dtype: str = "float32", threads: int | None = None, vector: int | None = None,
            cache_row: bool = False, registers: bool = False, rows_per_block: int = 1) -> Schedule:  # fmt: skip
    """Row softmax, one block of ``threads`` threads per row (default
    [`default_threads`][loopir.schedule.default_gpu.default_threads]): the row max and the sum of
    exponentials are cross-thread reductions kept in shared memory. ``vector`` output elements per
    thread are computed as one vector (vector loads of the row, one vector store; default: 8 halves
    for float16 when the row allows, else 1, as measured on the H200). ``cache_row`` stages the row
    through shared memory (read once, in 16-byte vectors); measured on the H200 it gains nothing
    here (docs/benchmarks.md), so it is off by default. ``registers`` keeps each thread's part
    of the row in its registers instead (``cols`` a multiple of ``threads * vector``);
    ``rows_per_block`` rows share a block, one per ``threadIdx.y`` (with ``threads=32``: a warp
    per row, [`per_row`][loopir.schedule.default_gpu.per_row])."""
    sch = Schedule(softmax_func(rows, cols, dtype))
    threads = threads or default_threads(cols)
    if vector is None:  # measured: 8 halves help fp16 a little, 4 floats cost fp32 a little
        vector = default_vector(cols, dtype, threads) if dtype == "float16" else 1
    _per_row(sch, ["M", "S"], threads, vector, cache_row, registers, rows_per_block)
    return sch


def _per_row(sch: Schedule, stats: list[str], threads: int, vector: int, cache_row: bool, registers: bool,
             rows_per_block: int) -> None:  # fmt: skip
    if cache_row and registers:
        raise ValueError("examples.reductions: cache_row (shared memory) and registers exclude each other")
    per_row(sch, "Y", stats, threads, vector, "X" if cache_row or registers else None,
            cache_scope="local" if registers else "shared", rows_per_block=rows_per_block)  # fmt: skip


def layernorm(rows: Any, cols: Any, dtype: str = "float32", threads: int | None = None, vector: int | None = None,
              cache_row: bool = False, registers: bool = False, rows_per_block: int = 1) -> Schedule:  # fmt: skip
    """Layernorm, one block per row: the sums of x and x^2 are cross-thread reductions (``vector``:
    default [`default_vector`][loopir.schedule.default_gpu.default_vector]; ``cache_row``,
    ``registers`` and ``rows_per_block`` as for [`softmax`][loopir.examples.reductions.softmax])."""
    sch = Schedule(layernorm_func(rows, cols, dtype))
    threads = threads or default_threads(cols)
    vector = default_vector(cols, dtype, threads) if vector is None else vector
    _per_row(sch, ["S1", "S2"], threads, vector, cache_row, registers, rows_per_block)
    return sch


def rmsnorm(rows: Any, cols: Any, dtype: str = "float16", threads: int | None = None,
            cache_row: bool | None = None, registers: bool = False, rows_per_block: int = 1,
            vector: int = 1) -> Schedule:  # fmt: skip
    """RMSNorm, one block per row: the sum of squares is a cross-thread reduction; the row is
    staged through shared memory (``cache_row``, the configuration measured in the LLaMA
    layer module, docs/benchmarks.md; by default where ``cols`` is a constant, since a shared
    tile needs a constant size; not with ``registers``); ``registers``, ``rows_per_block`` and
    ``vector`` as for [`softmax`][loopir.examples.reductions.softmax]."""
    sch = Schedule(rmsnorm_func(rows, cols, dtype))
    if cache_row is None:
        cache_row = isinstance(cols, int) and not registers
    _per_row(sch, ["S"], threads or default_threads(cols), vector, cache_row, registers, rows_per_block)
    return sch


def row_sum(rows: Any, cols: Any, dtype: str = "float32", threads: int = 512) -> Schedule:
    """A sum over a large axis: one block of ``threads`` threads per row, each thread summing
    a strided part (coalesced), the parts combined across the block."""
    sch = Schedule(row_sum_func(rows, cols, dtype))
    (i, _) = sch.get_loops(sch.get_block("S"))
    sch.bind(i, "blockIdx.x")
    cross_thread(sch, sch.get_block("S"), threads)
    return sch


#: The vocabulary chunk of [`cross_entropy_func`][loopir.examples.reductions.cross_entropy_func].
CROSS_ENTROPY_CHUNK = 16384


def cross_entropy_func(rows: Any, vocab: int, dtype: str = "float16", chunk: int = CROSS_ENTROPY_CHUNK) -> Any:
    """The cross-entropy forward ``L[i] = logsumexp_k X[i, k] - X[i, T[i]]`` over a large
    vocabulary, in a form that reads the logits from HBM once: the vocabulary in chunks of
    ``chunk``, each chunk's max ``Mc`` and its sum of exponentials relative to that max ``Sc``
    (both written to the output ``P[i, c, 0:2]``; a chunk's second pass re-reads it from the
    L1/L2 caches), then per row ``M = max_c Mc``, ``S = sum_c Sc * exp(Mc - M)`` and ``L =
    log(S) + M - X[i, T[i]]`` (float32 statistics; ``ceil(vocab / chunk)`` chunks, the last one
    guarded where ``vocab`` is no multiple of ``chunk``). The
    parameters are ``X, T, L, P``: ``P`` is an output, so that the default schedule keeps it a
    stage of its own rather than inlining it.

    The default GPU schedule takes it as it is: its row rule makes ``P`` one thread block per
    (row, chunk) with ``Mc`` and ``Sc`` cross-thread reductions over 16-byte vectors, and the
    per-row combination small kernels. Chunks of 16384 by default: on the H200 over 2048 x
    131072 logits they read at 0.95 (fp16) and 0.81 (bf16) of copy bandwidth, against 0.83 and
    0.80 with 8192 in the same run (session 15), 0.61-0.62 with 4096, 0.65-0.68 with 1024 (a
    warp a chunk) and 0.44-0.45 with 2048 (docs/benchmarks.md, session 14)."""
    if not isinstance(vocab, int) or vocab < 1 or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"cross_entropy_func: vocab and chunk must be positive ints, got vocab={vocab!r}, "
                         f"chunk={chunk!r}")  # fmt: skip
    chunk = min(chunk, vocab)
    X = te.placeholder((rows, vocab), dtype, name="X")
    T = te.placeholder((rows,), "int32", name="T")
    nc = -(-vocab // chunk)

    def logit(i: Any, col: Any, pad: Any) -> Any:
        # a vocabulary that is no multiple of the chunk (LLaMA 3's 128256, GPT-2's 50257): the last
        # chunk's columns past it count as ``pad``; exact multiples keep the unguarded form. The
        # guard is written per 8 columns where the vocabulary allows it, so that it is the same
        # for the 8 lanes of a 16-byte load and the loads stay vectors
        if vocab % chunk == 0:
            return _f32(X[i, col])
        valid = te.floordiv(col, 8) < vocab // 8 if vocab % 8 == 0 else col < vocab
        return te.if_then_else(valid, _f32(X[i, col]), pad)

    k = te.reduce_axis(chunk, name="k")
    Mc = te.compute((rows, nc), lambda i, c: te.max(logit(i, c * chunk + k, te.min_value("float32")), axis=k),
                    name="Mc")  # fmt: skip
    k2 = te.reduce_axis(chunk, name="k2")
    Sc = te.compute((rows, nc), lambda i, c: te.sum(
        te.exp(logit(i, c * chunk + k2, te.min_value("float32")) - Mc[i, c]), axis=k2), name="Sc")  # fmt: skip
    P = te.compute((rows, nc, 2), lambda i, c, t: te.if_then_else(t == 0, Mc[i, c], Sc[i, c]), name="P")
    c1 = te.reduce_axis(nc, name="c1")
    M = te.compute((rows,), lambda i: te.max(P[i, c1, 0], axis=c1), name="M")
    c2 = te.reduce_axis(nc, name="c2")
    S = te.compute((rows,), lambda i: te.sum(P[i, c2, 1] * te.exp(P[i, c2, 0] - M[i]), axis=c2), name="S")
    L = te.compute((rows,), lambda i: te.log(S[i]) + M[i] - _f32(X[i, T[i]]), name="L")
    return te.create_prim_func([X, T, L, P])
