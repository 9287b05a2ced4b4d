"""Hand-written loopir GEMM schedules for benchmarks/dense.py case (e).

``tiled_gemm`` is the classic SIMT register-blocked GEMM written with loopir's schedule
primitives: a ``bm x bn`` block tile, a ``bk`` k-tile staged in shared memory by a cooperative
``vec``-wide fetch of all ``tm x tn`` threads (bound to ``threadIdx.y/x``), and per thread a
``(vm x vn)`` grid of ``(bm/vm/tm) x (bn/vn/tn)`` sub-tiles, the ``vm x vn`` factor expressed as
virtual threads (``vthread.y/x``). Strided sub-tiles keep a warp's shared-memory reads spread
over banks and contiguous per thread; codegen folds the virtual threads into each thread so a
thread holds ``bm*bn/(tm*tn)`` accumulators in registers. The k-tile loop is unrolled.
With ``prefetch=True`` the k0 loop is annotated for register prefetching of the next tile.
"""

from __future__ import annotations

from typing import Any

from loopir.examples.dense import dense_func
from loopir.schedule import Schedule


def tiled_gemm(
    M: Any,
    K: Any,
    N: Any,
    bm: int = 128,
    bn: int = 128,
    bk: int = 16,
    vm: int = 2,
    vn: int = 2,
    tm: int = 16,
    tn: int = 16,
    vec: int = 4,
    prefetch: bool = False,
) -> Schedule:
    """A register-blocked GEMM schedule of ``C[M, N] = A[M, K] @ B[K, N]`` (fp32).

    ``prefetch=True`` annotates the k-tile loop ``"loopir.prefetch_shared"``: lowering then
    loads the next A/B tiles into registers while the current one is computed (register
    double buffering, docs/prefetch.md).
    """
    im, jn = bm // (vm * tm), bn // (vn * tn)
    if im * vm * tm != bm or jn * vn * tn != bn:
        raise ValueError(f"tile {bm}x{bn} is not divisible by vthreads {vm}x{vn} x threads {tm}x{tn}")
    sch = Schedule(dense_func(M, K, N))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1, i2, i3 = sch.split(i, [None, vm, tm, im])
    j0, j1, j2, j3 = sch.split(j, [None, vn, tn, jn])
    k0, k1 = sch.split(k, [None, bk])
    sch.reorder(i0, j0, i1, j1, i2, j2, k0, k1, i3, j3)
    bx = sch.fuse(i0, j0)
    sch.bind(bx, "blockIdx.x")
    sch.bind(i1, "vthread.y")
    sch.bind(j1, "vthread.x")
    sch.bind(i2, "threadIdx.y")
    sch.bind(j2, "threadIdx.x")
    c_local = sch.cache_write(c, "C", "local")
    sch.reverse_compute_at(c_local, j2)
    for name in ("A", "B"):
        shared = sch.cache_read(c, name, "shared")
        sch.compute_at(shared, k0)
        copy_loops = sch.get_loops(shared)[6:]  # below bx, vthread.y/x, threadIdx.y/x, k0
        fused = sch.fuse(*copy_loops)
        _, ty, tx, v = sch.split(fused, [None, tm, tn, vec])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
        sch.vectorize(v)
    sch.unroll(k1)
    sch.decompose_reduction(c, k0)
    if prefetch:
        sch.annotate(k0, "loopir.prefetch_shared", True)
    return sch
