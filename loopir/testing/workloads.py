"""Small te workloads for property tests and schedule fuzzing.

Each builder returns a [`Workload`][loopir.testing.workloads.Workload]: the PrimFunc made by
``te.create_prim_func``, the values of its symbolic sizes (for building inputs) and the Python
expression that rebuilds it (printed in fuzzer reproducers, so a finding can be replayed by pasting
it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loopir import te
from loopir.errors import LoopIRError
from loopir.ir.expr import Var
from loopir.ir.stmt import PrimFunc

__all__ = [
    "Workload", "WORKLOADS", "make_workload", "matmul", "batch_matmul", "matmul_bias_relu",
    "conv2d_nhwc", "elementwise_chain", "reduce_max", "reduce_min", "symbolic_matmul",
    "symbolic_elementwise", "shared_transpose", "tiled_gemm",
]  # fmt: skip


@dataclass(frozen=True)
class Workload:
    """A te workload ready to schedule.

    Attributes
    ----------
    name
        The builder's name (a key of [`WORKLOADS`][loopir.testing.workloads.WORKLOADS]).
    func
        The unscheduled PrimFunc.
    sizes
        Values for the symbolic sizes of ``func``'s parameters, by Var name (empty when every
        extent is constant).
    args
        The builder's keyword arguments: ``make_workload(name, **args)`` rebuilds it.
    """

    name: str
    func: PrimFunc
    sizes: Mapping[str, int] = field(default_factory=dict)
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> str:
        """Python that rebuilds this workload (used in reproducers)."""
        kw = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"loopir.testing.workloads.make_workload({self.name!r}, {kw})"


def matmul(M: int = 8, K: int = 6, N: int = 5, dtype: str = "float32") -> Workload:
    """``C[i, j] = sum_k A[i, k] * B[k, j]``."""
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return Workload("matmul", te.create_prim_func([A, B, C]), {}, dict(M=M, K=K, N=N, dtype=dtype))


def batch_matmul(Bt: int = 2, M: int = 4, K: int = 3, N: int = 5, dtype: str = "float32") -> Workload:
    """``C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]``."""
    A = te.placeholder((Bt, M, K), dtype, name="A")
    B = te.placeholder((Bt, K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute(
        (Bt, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C"
    )
    args = dict(Bt=Bt, M=M, K=K, N=N, dtype=dtype)
    return Workload("batch_matmul", te.create_prim_func([A, B, C]), {}, args)


def matmul_bias_relu(M: int = 6, K: int = 4, N: int = 5, dtype: str = "float32") -> Workload:
    """``D = relu(A @ B + bias)`` in three stages (C, BiasAdd, D)."""
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    bias = te.placeholder((N,), dtype, name="bias")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    Bi = te.compute((M, N), lambda i, j: C[i, j] + bias[j], name="BiasAdd")
    D = te.compute((M, N), lambda i, j: te.max(Bi[i, j], te.const(0, dtype)), name="D")
    args = dict(M=M, K=K, N=N, dtype=dtype)
    return Workload("matmul_bias_relu", te.create_prim_func([A, B, bias, D]), {}, args)


def conv2d_nhwc(
    N: int = 1, H: int = 5, W: int = 5, CI: int = 2, CO: int = 3, KH: int = 3, KW: int = 3,
    pad: int = 1, stride: int = 1, dtype: str = "float32",
) -> Workload:  # fmt: skip
    """NHWC conv2d (HWIO weights) with an explicit zero-padding stage ``Xpad``."""
    X = te.placeholder((N, H, W, CI), dtype, name="X")
    Wt = te.placeholder((KH, KW, CI, CO), dtype, name="W")
    HP, WP = H + 2 * pad, W + 2 * pad
    Xp = te.compute(
        (N, HP, WP, CI),
        lambda n, h, w, c: te.if_then_else(
            te.all(h >= pad, h < H + pad, w >= pad, w < W + pad),
            X[n, h - pad, w - pad, c],
            te.const(0, dtype),
        ),
        name="Xpad",
    )
    OH, OW = (HP - KH) // stride + 1, (WP - KW) // stride + 1
    rh = te.reduce_axis(KH, name="rh")
    rw = te.reduce_axis(KW, name="rw")
    rc = te.reduce_axis(CI, name="rc")
    Y = te.compute(
        (N, OH, OW, CO),
        lambda n, h, w, o: te.sum(
            Xp[n, h * stride + rh, w * stride + rw, rc] * Wt[rh, rw, rc, o], axis=[rh, rw, rc]
        ),
        name="Y",
    )
    args = dict(N=N, H=H, W=W, CI=CI, CO=CO, KH=KH, KW=KW, pad=pad, stride=stride, dtype=dtype)
    return Workload("conv2d_nhwc", te.create_prim_func([X, Wt, Y]), {}, args)


def elementwise_chain(M: int = 6, N: int = 4, stages: int = 3, dtype: str = "float32") -> Workload:
    """``stages`` elementwise stages ``T1 = A*B + 1``, ``T2 = T1 * 0.5 - A``, ... (2-D)."""
    if stages < 1:
        raise LoopIRError(f"elementwise_chain: stages must be >= 1, got {stages}")
    A = te.placeholder((M, N), dtype, name="A")
    B = te.placeholder((M, N), dtype, name="B")
    ops: list[Callable[[Any, Any, Any], Any]] = [
        lambda t, a, b: t * b + 1.0,
        lambda t, a, b: t * 0.5 - a,
        lambda t, a, b: te.max(t, b),
        lambda t, a, b: te.exp(t * 0.25),
    ]
    cur = te.compute((M, N), lambda i, j: A[i, j] * B[i, j] + 1.0, name="T1")
    for s in range(1, stages):
        op = ops[s % len(ops)]
        prev = cur
        cur = te.compute(
            (M, N), lambda i, j, p=prev, o=op: o(p[i, j], A[i, j], B[i, j]), name=f"T{s + 1}"
        )
    args = dict(M=M, N=N, stages=stages, dtype=dtype)
    return Workload("elementwise_chain", te.create_prim_func([A, B, cur]), {}, args)


def _reduce(kind: str, M: int, K: int, dtype: str) -> Workload:
    A = te.placeholder((M, K), dtype, name="A")
    k = te.reduce_axis(K, name="k")
    red = te.max if kind == "max" else te.min
    R = te.compute((M,), lambda i: red(A[i, k] * 2.0, axis=k), name="R")
    S = te.compute((M,), lambda i: R[i] + 1.0, name="S")
    return Workload(f"reduce_{kind}", te.create_prim_func([A, S]), {}, dict(M=M, K=K, dtype=dtype))


def reduce_max(M: int = 6, K: int = 5, dtype: str = "float32") -> Workload:
    """``R[i] = max_k 2*A[i, k]``, then ``S = R + 1``."""
    return _reduce("max", M, K, dtype)


def reduce_min(M: int = 6, K: int = 5, dtype: str = "float32") -> Workload:
    """``R[i] = min_k 2*A[i, k]``, then ``S = R + 1``."""
    return _reduce("min", M, K, dtype)


def symbolic_matmul(n: int = 7, K: int = 4, N: int = 3, dtype: str = "float32") -> Workload:
    """Matmul whose row count is the symbolic size ``n`` (bound to ``n`` for the inputs)."""
    m = Var("n")
    A = te.placeholder((m, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((m, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    args = dict(n=n, K=K, N=N, dtype=dtype)
    return Workload("symbolic_matmul", te.create_prim_func([A, B, C]), {"n": n}, args)


def symbolic_elementwise(n: int = 9, N: int = 4, dtype: str = "float32") -> Workload:
    """Two elementwise stages over a ``(n, N)`` array with symbolic ``n``."""
    m = Var("n")
    A = te.placeholder((m, N), dtype, name="A")
    B = te.compute((m, N), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    C = te.compute((m, N), lambda i, j: B[i, j] - A[i, j], name="C")
    args = dict(n=n, N=N, dtype=dtype)
    return Workload("symbolic_elementwise", te.create_prim_func([A, C]), {"n": n}, args)


def shared_transpose(M: int = 100, N: int = 70, shared_tile: bool = True) -> Any:
    """A scheduled transpose ``B[j, i] = A[i, j]`` through a 32x32 shared tile (issue 11 item 1).

    Blocks of 32x32 (``blockIdx.y/x``), 8x32 threads (``threadIdx.y/x``), each thread four
    rows. With ``shared_tile`` A goes through ``A_shared``, filled by a threadIdx loop nest
    that is a *sibling* of the one reading it transposed: only a barrier orders the two. The
    tile is unpadded (``loopir.examples.transpose`` is the same schedule with padded rows).
    Returns the [`loopir.Schedule`][loopir.schedule.schedule.Schedule].
    """
    from loopir.examples.transpose import transpose

    return transpose(M, N, pad=False, shared=shared_tile)


def tiled_gemm(M: int, K: int, N: int, ti: int, tj: int, ii: int, jj: int, bk: int, vec: int,
               unroll: bool = False) -> Any:
    """A scheduled tiled GEMM ``C = A @ B``: ``ti x tj`` threads (``threadIdx.y/x``) of ``ii x jj``
    local accumulators per block, k tiles of ``bk``, cooperative shared fetches of A and B
    vectorized by ``vec``, the reduction decomposed at the k-tile loop (``unroll``: the k-tile's
    inner loop unrolled). Returns the [`loopir.Schedule`][loopir.schedule.schedule.Schedule]."""
    import loopir
    from loopir.examples.dense import dense_func

    sch = loopir.Schedule(dense_func(M, K, N))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1, i2 = sch.split(i, [None, ti, ii])
    j0, j1, j2 = sch.split(j, [None, tj, jj])
    k0, k1 = sch.split(k, [None, bk])
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    sch.bind(sch.fuse(i0, j0), "blockIdx.x")
    sch.bind(i1, "threadIdx.y")
    sch.bind(j1, "threadIdx.x")
    sch.reverse_compute_at(sch.cache_write(c, "C", "local"), j1)
    for name in ("A", "B"):
        shared = sch.cache_read(c, name, "shared")
        sch.compute_at(shared, k0, preserve_unit_loops=True)
        fused = sch.fuse(*sch.get_loops(shared)[4:])
        _, ty, tx, v = sch.split(fused, [None, ti, tj, vec])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
        sch.vectorize(v)
    if unroll:
        sch.unroll(k1)
    sch.decompose_reduction(c, k0)
    return sch


WORKLOADS: dict[str, Callable[..., Workload]] = {
    "matmul": matmul,
    "batch_matmul": batch_matmul,
    "matmul_bias_relu": matmul_bias_relu,
    "conv2d_nhwc": conv2d_nhwc,
    "elementwise_chain": elementwise_chain,
    "reduce_max": reduce_max,
    "reduce_min": reduce_min,
    "symbolic_matmul": symbolic_matmul,
    "symbolic_elementwise": symbolic_elementwise,
}
"""Every builder, by name."""


def make_workload(name: str, **args: Any) -> Workload:
    """Build the workload ``name`` of [`WORKLOADS`][loopir.testing.workloads.WORKLOADS] with
    ``args``.

    Raises
    ------
    LoopIRError
        For an unknown name.
    """
    try:
        builder = WORKLOADS[name]
    except KeyError:
        raise LoopIRError(
            f"make_workload: unknown workload {name!r}; known: {', '.join(WORKLOADS)}"
        ) from None
    return builder(**args)
