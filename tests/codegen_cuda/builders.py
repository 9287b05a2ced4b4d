"""Hand-built lowered IR for the CUDA codegen tests (the lowered form of the contract), and a
te function with a device temporary."""

from __future__ import annotations

from loopir import te
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import PrimExpr, Var
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Stmt,
    seq,
)


def loop(var: Var, extent: int | PrimExpr, body: Stmt, kind: str = "serial",
         tag: str | None = None, lo: int | PrimExpr = 0) -> For:
    k = ForKind(kind)
    return For(var, lo, extent, k, body, thread_tag=tag)


def bind(var: Var, extent: int | PrimExpr, tag: str, body: Stmt) -> For:
    return For(var, 0, extent, ForKind.THREAD_BINDING, body, thread_tag=tag)


def sync() -> Evaluate:
    return Evaluate(op.storage_sync("shared"))


def vector_add(n: int | PrimExpr = 1000, block: int = 128, dtype: str = "float32") -> PrimFunc:
    """C[i] = A[i] + B[i] with a guard for the ragged last block."""
    A = Buffer("A", (n,), dtype)
    B = Buffer("B", (n,), dtype)
    C = Buffer("C", (n,), dtype)
    bx, tx = Var("bx"), Var("tx")
    i = bx * block + tx
    body = IfThenElse(i < n, BufferStore(C, A[i] + B[i], (i,)))
    nblocks = op.ceildiv(n, block) if isinstance(n, PrimExpr) else (n + block - 1) // block
    return PrimFunc((A, B, C), bind(bx, nblocks, "blockIdx.x", bind(tx, block, "threadIdx.x", body)),
                    name="vector_add")


def tiled_matmul(M: int, K: int, N: int, tile: int = 32, tk: int = 8, vec: int = 4,
                 reg: int = 4, vectorize: bool = True) -> PrimFunc:
    """C = A @ B: shared tiles of A (tile x tk) and B (tk x tile), per-thread reg x reg
    accumulators, cooperative (optionally vectorized) fetch, barriers, guards on every edge."""
    A = Buffer("A", (M, K), "float32")
    B = Buffer("B", (K, N), "float32")
    C = Buffer("C", (M, N), "float32")
    As = Buffer("A_shared", (tile, tk), "float32", scope="shared")
    Bs = Buffer("B_shared", (tk, tile), "float32", scope="shared")
    Cl = Buffer("C_local", (reg, reg), "float32", scope="local")
    by, bx, ty, tx = Var("by"), Var("bx"), Var("ty"), Var("tx")
    nt = tile // reg  # threads per axis
    threads = nt * nt
    k0, k1, ii, jj, f, v = Var("k0"), Var("k1"), Var("ii"), Var("jj"), Var("f"), Var("v")
    # init
    init = loop(ii, reg, loop(jj, reg, BufferStore(Cl, 0.0, (ii, jj)), "unrolled"), "unrolled")
    # A fetch: tile*tk elements; thread t loads vec consecutive k's
    tid = ty * nt + tx
    a_elems = tile * tk
    a_iters = a_elems // (threads * vec)
    flat = (f * threads + tid) * vec + v
    ar, ac = flat // tk, flat % tk
    a_cond = op.all_(by * tile + ar < M, k0 * tk + ac < K)
    a_store = BufferStore(As, op.if_then_else(a_cond, A[by * tile + ar, k0 * tk + ac], 0.0), (ar, ac))
    a_fetch = loop(f, a_iters, loop(v, vec, a_store, "vectorized" if vectorize else "serial"))
    b_iters = a_elems // (threads * vec)
    br, bc = flat // tile, flat % tile
    b_cond = op.all_(k0 * tk + br < K, bx * tile + bc < N)
    # out-of-range elements are zero-filled: the compute below is unguarded in k
    b_store = BufferStore(Bs, op.if_then_else(b_cond, B[k0 * tk + br, bx * tile + bc], 0.0),
                          (br, bc))
    b_fetch = loop(f, b_iters, loop(v, vec, b_store, "vectorized" if vectorize else "serial"))
    compute = loop(k1, tk, loop(ii, reg, loop(jj, reg, BufferStore(
        Cl, Cl[ii, jj] + As[ty * reg + ii, k1] * Bs[k1, tx * reg + jj], (ii, jj)),
        "unrolled"), "unrolled"), "unrolled")
    kloop = loop(k0, (K + tk - 1) // tk, seq(a_fetch, b_fetch, sync(), compute, sync()))
    row, col = by * tile + ty * reg + ii, bx * tile + tx * reg + jj
    write = loop(ii, reg, loop(jj, reg, IfThenElse(op.all_(row < M, col < N),
                                                   BufferStore(C, Cl[ii, jj], (row, col))),
                               "unrolled"), "unrolled")
    body = Allocate(As, Allocate(Bs, Allocate(Cl, seq(init, kloop, write))))
    kernel = bind(by, (M + tile - 1) // tile, "blockIdx.y",
                  bind(bx, (N + tile - 1) // tile, "blockIdx.x",
                       bind(ty, nt, "threadIdx.y", bind(tx, nt, "threadIdx.x", body))))
    return PrimFunc((A, B, C), kernel, name="matmul")


def vthread_gemm(M: int, K: int, N: int) -> PrimFunc:
    """A DietCode-like lowered GEMM: 128x128 block tile, k-tile 4, 256 threads, 2 vthreads
    along j, 32 accumulators per virtual thread (C_local allocated inside the vthread loop),
    shared A/B tiles filled by a cooperative fetch, guards on i/k edges."""
    A = Buffer("A", (M, K), "float32")
    B = Buffer("B", (K, N), "float32")
    C = Buffer("C", (M, N), "float32")
    As = Buffer("A_shared", (128, 4), "float32", scope="shared")
    Bs = Buffer("B_shared", (4, 128), "float32", scope="shared")
    Cl = Buffer("C_local", (16, 2), "float32", scope="local")
    bx, vx, tx = Var("bx"), Var("vx"), Var("tx")
    k0, k2, i3, j4, f = Var("k0"), Var("k2"), Var("i3"), Var("j4"), Var("ax0_ax1_fused_0")
    nbj = N // 128
    bi, bj = bx // nbj, bx % nbj
    ti, tj = tx // 32, tx % 32
    # per virtual thread: rows ti*16 + i3, cols vx*64 + tj*2 + j4
    row = bi * 128 + ti * 16 + i3
    col = bj * 128 + vx * 64 + tj * 2 + j4
    init = loop(i3, 16, loop(j4, 2, IfThenElse(row < M, BufferStore(Cl, 0.0, (i3, j4)))))
    # A fetch: 512 elements, 256 threads x 2 (scalar, guarded on rows and k)
    fa = f * 256 + tx
    ar, ac = fa // 4, fa % 4
    a_fetch = loop(f, 2, IfThenElse(op.all_(bi * 128 + ar < M, k0 * 4 + ac < K), BufferStore(
        As, A[bi * 128 + ar, k0 * 4 + ac], (ar, ac))))
    fb = tx * 2
    v = Var("v")
    b_fetch = IfThenElse(k0 * 4 + fb // 128 < K, loop(v, 2, BufferStore(
        Bs, B[k0 * 4 + fb // 128, bj * 128 + fb % 128 + v], (fb // 128, fb % 128 + v)),
        "vectorized"))
    compute = loop(k2, 4, loop(i3, 16, loop(j4, 2, IfThenElse(
        op.all_(row < M, k0 * 4 + k2 < K),
        BufferStore(Cl, Cl[i3, j4] + As[ti * 16 + i3, k2] * Bs[k2, vx * 64 + tj * 2 + j4],
                    (i3, j4))))), "unrolled")
    kloop = loop(k0, (K + 3) // 4, seq(a_fetch, b_fetch, sync(), compute, sync()))
    write = loop(i3, 16, loop(j4, 2, IfThenElse(row < M, BufferStore(C, Cl[i3, j4], (row, col)))))
    body = bind(vx, 2, "vthread.x", bind(tx, 256, "threadIdx.x",
                                         Allocate(Cl, seq(init, kloop, write))))
    kernel = bind(bx, ((M + 127) // 128) * nbj, "blockIdx.x", Allocate(As, Allocate(Bs, body)))
    return PrimFunc((A, B, C), kernel, name="vt_gemm")


def row_sum_difference(n: int | PrimExpr, width: int = 64) -> PrimFunc:
    """A te function with a device temporary: ``R[i] = sum_k A[i, k]`` then
    ``O[i] = R[i] - R[n - 1 - i]``. O reads R across rows, so the default GPU schedule cannot
    fuse the two stages: R stays a global intermediate (n floats, in the workspace) between
    two kernels."""
    A = te.placeholder((n, width), "float32", name="A")
    k = te.reduce_axis(width, name="k")
    R = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="R")
    O = te.compute((n,), lambda i: R[i] - R[n - 1 - i], name="O")
    return te.create_prim_func([A, O], name="rowdiff")
