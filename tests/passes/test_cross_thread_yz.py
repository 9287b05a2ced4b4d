"""Cross-thread reductions over threadIdx.y/z or several thread axes (issue 29 item 2): bound
as in TVM, combined through shared memory by a tree (loopir.passes.cross_thread_tree)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import loopir
from loopir import te
from loopir.errors import PassError
from loopir.testing import check_equivalent

REFS = {"sum": np.sum, "max": np.max, "min": np.min}


def _base(op: str = "sum", rows: int = 8, n: int = 100, dtype: str = "float32", acc: str | None = None):
    A = te.placeholder((rows, n), dtype, name="A")
    k = te.reduce_axis(n, name="k")
    red = {"sum": te.sum, "max": te.max, "min": te.min}[op]
    S = te.compute((rows,), lambda i: red(A[i, k].astype(acc) if acc else A[i, k], axis=k), name="S")
    return te.create_prim_func([A, S])


def y_columns(base, threads: int = 16, tag: str = "threadIdx.y", row_tag: str = "threadIdx.x",
              row_inside: bool = False) -> loopir.Schedule:  # fmt: skip
    """Each row on its own ``row_tag`` thread, its reduction split over ``threads`` threads of
    ``tag`` (the serial part outside or inside), combined over ``tag``."""
    sch = loopir.Schedule(base)
    i, kk = sch.get_loops(sch.get_block("S"))
    k0, k1 = sch.split(kk, [None, threads])
    sch.reorder(k1, i, k0) if row_inside else sch.reorder(i, k1, k0)
    sch.bind(i, row_tag)
    sch.bind(k1, tag)
    return sch


def xy_block(base, ty: int = 4, tx: int = 8) -> loopir.Schedule:
    """One block per row, its reduction over ``ty * tx`` threads of both axes."""
    sch = loopir.Schedule(base)
    i, kk = sch.get_loops(sch.get_block("S"))
    _, k1, k2 = sch.split(kk, [None, ty, tx])
    sch.bind(i, "blockIdx.x")
    sch.bind(k1, "threadIdx.y")
    sch.bind(k2, "threadIdx.x")
    return sch


def vthread_y(base) -> loopir.Schedule:
    sch = loopir.Schedule(base)
    i, kk = sch.get_loops(sch.get_block("S"))
    bx, vt = sch.split(i, [None, 2])
    ko, ty = sch.split(kk, [None, 16])
    sch.reorder(ty, ko)
    sch.bind(bx, "blockIdx.x")
    sch.bind(vt, "vthread.x")
    sch.bind(ty, "threadIdx.y")
    return sch


def _schedules(base):
    return {
        "y": y_columns(base),
        "y_row_inside": y_columns(base, 12, row_inside=True),
        "z": y_columns(base, 8, "threadIdx.z"),
        "z_rows_on_y": y_columns(base, 8, "threadIdx.z", row_tag="threadIdx.y"),
        "xy": xy_block(base),
        "xy_odd": xy_block(base, 3, 5),
        "vthread": vthread_y(base),
    }


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_reductions_over_y_and_z_equal_the_unscheduled_function(op, pad) -> None:
    base = _base(op)
    for name, sch in _schedules(base).items():
        with loopir.PassContext(config={"tir.enable_local_pad": pad}):
            low = loopir.lower(sch.func)
        text = loopir.script(low)
        assert "thread_allreduce" not in text and "S_red" in text, name
        check_equivalent(base, low, thread_order="random")


def test_the_tree_halves_the_parts_per_step(golden) -> None:
    sch = y_columns(_base(), 12)
    golden("passes/cross_thread_y12_lowered", loopir.script(loopir.lower(sch.func)))


@pytest.mark.parametrize("threads", [1, 2, 3, 7, 16, 33, 64])
def test_any_number_of_y_threads(threads) -> None:
    base = _base("sum", 4, 300, "int32")
    check_equivalent(base, loopir.lower(y_columns(base, threads).func), thread_order="random")


def test_the_lowered_kernels_are_race_check_clean() -> None:
    """No RaceCheckWarning or refusal: the tree's steps are proven apart by the barriers
    ThreadSync puts between them."""
    from loopir.codegen_cuda import prepare_function

    base = _base()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for sch in _schedules(base).values():
            prepare_function(sch.func, None)


@pytest.mark.nvcc
def test_generated_cuda_compiles() -> None:
    from loopir.codegen_cuda import emit_cuda
    from loopir.codegen_cuda.compile import compile_cuda

    for dtype, acc in (("float32", None), ("float16", None), ("float16", "float32")):
        for name, sch in _schedules(_base("max" if acc is None else "sum", dtype=dtype, acc=acc)).items():
            src = emit_cuda(loopir.lower(sch.func, target="cuda")).source
            assert "__shared__" in src and "__syncthreads()" in src, name
            compile_cuda(src, arch="sm_90a", output="cubin")


def test_a_kernel_thread_axis_that_does_not_enclose_the_reduction_is_refused() -> None:
    """threadIdx.x is bound only in a cooperative fetch beside the reduction over threadIdx.y:
    its threads would store the same parts into the shared tree."""
    A = te.placeholder((4, 64), "float32", name="A")
    B = te.compute((4, 64), lambda i, j: A[i, j] * 2.0, name="B")
    k = te.reduce_axis(64, name="k")
    S = te.compute((4,), lambda i: te.sum(B[i, k], axis=k), name="S")
    sch = loopir.Schedule(te.create_prim_func([A, S]))
    i, kk = sch.get_loops(sch.get_block("S"))
    ko, ty = sch.split(kk, [None, 16])
    sch.reorder(ty, ko)
    sch.bind(i, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.set_scope(sch.get_block("B"), 0, "shared")
    sch.compute_at(sch.get_block("B"), i)
    sch.bind(sch.get_loops(sch.get_block("B"))[-1], "threadIdx.x")
    with pytest.raises(PassError, match="the kernel's threadIdx.x loops do not enclose it"):
        loopir.lower(sch.func)


def test_x_rows_that_share_warps_without_their_row_loop_keep_thread_allreduce() -> None:
    """The x reduction's rows (threadIdx.y) are not in scope: thread_allreduce, as before,
    which the CPU executor runs (CUDA refuses rows sharing warps)."""
    A = te.placeholder((4, 24), "float32", name="A")
    B = te.compute((4, 24), lambda i, j: A[i, j] * 2.0, name="B")
    k = te.reduce_axis(24, name="k")
    S = te.compute((4,), lambda i: te.sum(B[i, k], axis=k), name="S")
    base = te.create_prim_func([A, S])
    sch = loopir.Schedule(base)
    i, kk = sch.get_loops(sch.get_block("S"))
    sch.bind(i, "blockIdx.x")
    sch.bind(kk, "threadIdx.x")
    sch.set_scope(sch.get_block("B"), 0, "shared")
    sch.compute_at(sch.get_block("B"), i)
    jo, ji = sch.split(sch.get_loops(sch.get_block("B"))[-1], [2, None])
    sch.bind(jo, "threadIdx.y")
    low = loopir.lower(sch.func)
    assert "thread_allreduce" in loopir.script(low)
    a = np.random.default_rng(3).random((4, 24)).astype("float32")
    out = np.full(4, np.nan, "float32")
    loopir.build(low, target="cpu", thread_order="random", seed=3)(a, out)
    np.testing.assert_allclose(out, 2 * a.astype("float64").sum(1), rtol=1e-5)
