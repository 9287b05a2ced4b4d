"""Hand-built IR used by the printer, equality and verifier tests.

Every builder creates fresh Vars and Buffers on each call, so two calls give structurally
equal but distinct functions.
"""

from __future__ import annotations

from loopir.ir import (
    Allocate,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferRegion,
    BufferStore,
    Evaluate,
    FloatImm,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    IterKind,
    IterVar,
    PrimExpr,
    PrimFunc,
    Ramp,
    Range,
    Stmt,
    Var,
    op,
    seq,
)
from loopir.ir.expr import Broadcast, Cast, Select

SERIAL, TB = ForKind.SERIAL, ForKind.THREAD_BINDING


def point(buf: Buffer, *idx: PrimExpr) -> BufferRegion:
    """The one-element region ``buf[idx]``."""
    return BufferRegion(buf, [Range(i, 1) for i in idx])


def loop(
    var: Var,
    extent: int | PrimExpr,
    body: Stmt,
    kind: ForKind = SERIAL,
    tag: str | None = None,
    lo: int = 0,
    **ann: object,
) -> For:
    return For(var, lo, extent, kind, body, tag, ann)


def spatial(v: Var, extent: int | PrimExpr, lo: int = 0) -> IterVar:
    return IterVar(v, Range(lo, extent), IterKind.SPATIAL)


def reduce(v: Var, extent: int | PrimExpr, lo: int = 0) -> IterVar:
    return IterVar(v, Range(lo, extent), IterKind.REDUCE)


def root(body: Stmt, allocs: tuple[Buffer, ...] = ()) -> BlockRealize:
    return BlockRealize((), True, Block("root", (), (), (), body, alloc_buffers=allocs))


def matmul(m: int = 960, k: int = 770, n: int = 2304) -> PrimFunc:
    """The te-style matmul: one block "C" under i, j, k loops, with init."""
    A, B, C = Buffer("A", (m, k)), Buffer("B", (k, n)), Buffer("C", (m, n))
    i, j, kk = Var("i"), Var("j"), Var("k")
    vi, vj, vk = Var("v_i"), Var("v_j"), Var("v_k")
    blk = Block(
        "C",
        [spatial(vi, m), spatial(vj, n), reduce(vk, k)],
        [point(A, vi, vk), point(B, vk, vj)],
        [point(C, vi, vj)],
        BufferStore(C, C[vi, vj] + A[vi, vk] * B[vk, vj], (vi, vj)),
        init=BufferStore(C, FloatImm(0.0), (vi, vj)),
    )
    body = loop(i, m, loop(j, n, loop(kk, k, BlockRealize((i, j, kk), True, blk))))
    return PrimFunc((A, B, C), root(body))


def scheduled() -> PrimFunc:
    """A GPU-scheduled 100x64x64 matmul + relu: thread bindings, a shared cache with
    cooperative fetch, an inexact split (T.where), vectorize, unroll, parallel, a loop with a
    nonzero min, annotations on loops/blocks/function."""
    M, K, N = 100, 64, 64
    A, B = Buffer("A", (M, K)), Buffer("B", (K, N))
    D = Buffer("D", (M, N))
    C = Buffer("C", (M, N))
    A_shared = Buffer("A_shared", (M, K), scope="shared")
    i0, k0, ax0, ax1 = Var("i0"), Var("k0"), Var("ax0"), Var("ax1")
    i1, j, k1 = Var("i1"), Var("j"), Var("k1")
    v0, v1 = Var("v0"), Var("v1")
    fetch = BlockRealize(
        (i0 * 32 + ax0, k0 * 8 + ax1),
        i0 * 32 + ax0 < M,
        Block(
            "A_shared",
            [spatial(v0, M), spatial(v1, K)],
            [point(A, v0, v1)],
            [point(A_shared, v0, v1)],
            BufferStore(A_shared, A[v0, v1], (v0, v1)),
        ),
    )
    vi, vj, vk = Var("v_i"), Var("v_j"), Var("v_k")
    compute = BlockRealize(
        (i0 * 32 + i1, j, k0 * 8 + k1),
        i0 * 32 + i1 < M,
        Block(
            "C",
            [spatial(vi, M), spatial(vj, N), reduce(vk, K)],
            [point(A_shared, vi, vk), point(B, vk, vj)],
            [point(C, vi, vj)],
            BufferStore(C, C[vi, vj] + A_shared[vi, vk] * B[vk, vj], (vi, vj)),
            init=BufferStore(C, FloatImm(0.0), (vi, vj)),
        ),
    )
    gemm = loop(
        i0,
        4,
        loop(
            k0,
            8,
            seq(
                loop(ax0, 32, loop(ax1, 8, fetch, ForKind.VECTORIZED), TB, "threadIdx.x"),
                loop(i1, 32, loop(j, N, loop(k1, 8, compute, ForKind.UNROLLED)), TB, "threadIdx.x"),
            ),
        ),
        TB,
        "blockIdx.x",
    )
    ri, rj = Var("i"), Var("j")
    wi, wj = Var("v_i"), Var("v_j")
    relu = loop(
        ri,
        M,
        loop(
            rj,
            N - 2,
            BlockRealize(
                (ri, rj),
                True,
                Block(
                    "D",
                    [spatial(wi, M), spatial(wj, N - 2, lo=2)],
                    [point(C, wi, wj)],
                    [point(D, wi, wj)],
                    BufferStore(D, op.max_(C[wi, wj], FloatImm(0.0)), (wi, wj)),
                    annotations={"schedule_rule": "relu", "priority": 2},
                ),
            ),
            lo=2,
            pragma_unroll_explicit=1,
        ),
        ForKind.PARALLEL,
    )
    return PrimFunc(
        (A, B, D),
        root(seq(gemm, relu), allocs=(C, A_shared)),
        name="dense_relu",
        attrs={"global_symbol": "dense_relu", "tir.noalias": True},
    )


def lowered() -> PrimFunc:
    """Lowered-form IR over a symbolic size ``n``: Allocate, if/else, a barrier, Select,
    Cast, calls, vectors (Ramp/Broadcast), logic, and two loop vars both named ``tx``."""
    n = Var("n")
    A, B = Buffer("A", (n,)), Buffer("B", (n,))
    X = Buffer("X_shared", (64,), scope="shared")
    V = Buffer("V_local", (4,), scope="local")
    bx, tx, tx2 = Var("bx"), Var("tx"), Var("tx")
    cond = op.all_(
        op.any_(tx2 % 4 == 0, op.not_(tx2 < 2)),
        op.min_(tx2, 3) >= op.max_(0, tx2 // 16),
        Cast("int64", tx2) < IntImm(100, "int64"),
    )
    fetch = loop(
        tx,
        64,
        IfThenElse(
            bx * 64 + tx < n,
            BufferStore(X, A[bx * 64 + tx], (tx,)),
            BufferStore(X, FloatImm(0.0), (tx,)),
        ),
        TB,
        "threadIdx.x",
    )
    x = X[tx2]
    val = Select(
        x > FloatImm(0.0),
        op.exp(x) / (x + FloatImm(1.0)) - (x - FloatImm(float("-inf"))),
        Cast("float32", Cast("float16", x) * FloatImm(0.5, "float16")),
    )
    vec = BufferStore(V, Broadcast(FloatImm(1.5), 4), (Ramp(IntImm(0), IntImm(1), 4),))
    compute = loop(
        tx2,
        64,
        seq(
            vec,
            IfThenElse(
                op.all_(bx * 64 + tx2 < n, cond),
                BufferStore(B, val + BufferLoad(V, (IntImm(0),)), (bx * 64 + tx2,)),
            ),
        ),
        TB,
        "threadIdx.x",
    )
    body = loop(
        bx,
        (n + 63) // 64,
        Allocate(
            X,
            Allocate(
                V, seq(fetch, Evaluate(op.storage_sync("shared")), compute, Evaluate(IntImm(0)))
            ),
        ),
        TB,
        "blockIdx.x",
    )
    return PrimFunc((A, B), body, name="lowered")


def clashing_names() -> PrimFunc:
    """Distinct buffers and vars sharing names (the printer must tell them apart)."""
    A1, A2 = Buffer("A", (8,)), Buffer("A", (8,))
    i1, i2 = Var("i"), Var("i")
    T_ = Var("T")
    body = seq(
        loop(i1, 8, BufferStore(A2, A1[i1] * FloatImm(2.0), (i1,))),
        loop(i2, 8, BufferStore(A2, A2[i2] + FloatImm(1.0), (i2,))),
        loop(T_, 8, BufferStore(A1, FloatImm(0.0), (T_,))),
    )
    return PrimFunc((A1, A2), body)
