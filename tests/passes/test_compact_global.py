"""CompactBufferAllocation compacts global-scope intermediates like TVM (issue 20 item 3)."""

from __future__ import annotations

import numpy as np

import loopir
from loopir import te
from loopir.ir.stmt import Allocate, For


def _tiled_matmul(bind: bool = False) -> loopir.PrimFunc:
    A = te.placeholder((64, 32), "float32", name="A")
    B = te.placeholder((32, 48), "float32", name="B")
    k = te.reduce_axis(32, name="k")
    C = te.compute((64, 48), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = loopir.Schedule(te.create_prim_func([A, B, C]))
    blk = sch.get_block("C")
    i, j, _ = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, i1, j1)
    cg = sch.cache_write(blk, "C", "global")
    sch.reverse_compute_at(cg, j0)
    if bind:  # i_0 stays a host loop around the kernel
        sch.bind(j0, "blockIdx.x")
        sch.bind(j1, "threadIdx.x")
    return sch.func


def _allocs(func: loopir.PrimFunc) -> dict[str, tuple[list[int], list[str]]]:
    """Allocated buffer name -> (shape, kinds of the loops around the Allocate)."""
    out: dict[str, tuple[list[int], list[str]]] = {}

    def walk(node: object, loops: list[str]) -> None:
        if isinstance(node, Allocate):
            out[node.buffer.name] = ([int(e.value) for e in node.buffer.shape], list(loops))
            walk(node.body, loops)
        elif isinstance(node, For):
            walk(node.body, [*loops, node.loop_var.name])
        else:
            for child in getattr(node, "seq", ()) or ():
                walk(child, loops)
            for attr in ("then_case", "else_case"):
                if getattr(node, attr, None) is not None:
                    walk(getattr(node, attr), loops)

    walk(func.body, [])
    return out


def _run(func: loopir.PrimFunc) -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 32)).astype("float32")
    b = rng.standard_normal((32, 48)).astype("float32")
    c = np.full((64, 48), np.nan, "float32")
    loopir.build(func, target="cpu")(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_global_intermediate_compacted_to_its_tile() -> None:
    """TVM 0.27: C_global is [8, 16] allocated under the tile loops; loopir had [64, 48]."""
    lowered = loopir.lower(_tiled_matmul())
    shape, around = _allocs(lowered)["C_global"]
    assert shape == [8, 16]
    assert around == ["i_0", "j_0"]
    _run(lowered)


def test_global_intermediate_in_a_kernel_relaxes_threads_and_stays_at_root() -> None:
    """Global memory is shared by the grid: every thread-bound loop is relaxed (blockIdx.x j_0
    too), so the region is per iteration of the host loop i_0: [8, 48], allocated at the root
    (once by the host, not inside the host loop around the launches)."""
    lowered = loopir.lower(_tiled_matmul(bind=True))
    shape, around = _allocs(lowered)["C_global"]
    assert shape == [8, 48] and around == []
    _run(lowered)
