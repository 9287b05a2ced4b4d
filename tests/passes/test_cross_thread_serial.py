"""LowerCrossThreadReduction with serial reduction loops outside the thread loop (issue 29
item 1): ``k0, k1 = split(k, [None, 64]); bind(k1, "threadIdx.x")`` becomes an in-thread
reduction over ``k0``, a cross-thread combine over ``k1`` and a write-back by thread 0."""

from __future__ import annotations

import pytest

import loopir
from loopir import te
from loopir.errors import PassError
from loopir.testing import check_equivalent


def _row_sum(rows: int, n: int):
    A = te.placeholder((rows, n), "float32", name="A")
    k = te.reduce_axis(n, name="k")
    S = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="S")
    return te.create_prim_func([A, S])


def test_a_serial_reduction_loop_outside_the_kernel_is_refused() -> None:
    """The kernel would be launched once per k_0 and each launch overwrote S (it wrote the
    last part's sum, silently): the reduction's loops must all lie inside the kernel."""
    sch = loopir.Schedule(_row_sum(4, 64))
    i, kk = sch.get_loops(sch.get_block("S"))
    ko, tx = sch.split(kk, [None, 16])
    sch.reorder(ko, i)
    sch.bind(i, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    with pytest.raises(PassError, match=r"loop i \(blockIdx.x\) lies between"):
        loopir.lower(sch.func)


def _reduction(op: str, rows: int, n: int, dtype: str = "float32"):
    A = te.placeholder((rows, n), dtype, name="A")
    k = te.reduce_axis(n, name="k")
    red = {"sum": te.sum, "max": te.max, "min": te.min}[op]
    S = te.compute((rows,), lambda i: red(A[i, k], axis=k), name="S")
    return te.create_prim_func([A, S])


def dlight_schedule(base, threads: int = 64, tag: str = "threadIdx.x") -> loopir.Schedule:
    """``k0, k1 = split(k, [None, threads])``, ``k1`` bound, ``k0`` left outside it."""
    sch = loopir.Schedule(base)
    i, kk = sch.get_loops(sch.get_block("S"))
    _, k1 = sch.split(kk, [None, threads])
    sch.bind(i, "blockIdx.x")
    sch.bind(k1, tag)
    return sch


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("n", [1, 31, 33, 1000])
def test_serial_loop_outside_the_thread_loop(op, n, pad) -> None:
    base = _reduction(op, 3, n)
    sch = dlight_schedule(base)
    with loopir.PassContext(config={"tir.enable_local_pad": pad}):
        low = loopir.lower(sch.func)
    text = loopir.script(low)
    # the thread loop moved outside k_0: the part, the combine, the write-back by thread 0
    if n > 64:  # (k_0 has one iteration otherwise, and is simplified away)
        assert text.index("threadIdx.x") < text.index("for k_0") < text.index("thread_allreduce")
    assert 'thread_allreduce("' + op + '", S_acc[0], 64)' in text and "if k_1 == 0:" in text
    check_equivalent(base, low, thread_order="random")
    check_equivalent(base, sch.func)  # the scheduled function, run sequentially


# (split factors, which of the loops is bound to threadIdx.x, order of the loops)
SPLITS = [
    ([None, 32, 4], 1, None),  # serial outside and inside
    ([None, 4, 32], 2, None),  # two serial loops outside
    ([None, 8, 4, 4], 1, None),  # one outside, two inside
    ([None, 16, 3], 1, [2, 0, 1]),  # inexact: the inner serial loop moved outermost
    ([7, None], 0, [1, 0]),  # inexact, the thread loop innermost
]


@pytest.mark.parametrize("factors,bound,order", SPLITS)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_serial_loops_inside_and_outside(factors, bound, order, op) -> None:
    base = _reduction(op, 2, 250)
    sch = loopir.Schedule(base)
    i, kk = sch.get_loops(sch.get_block("S"))
    loops = sch.split(kk, factors)
    if order is not None:
        sch.reorder(*[loops[j] for j in order])
    sch.bind(i, "blockIdx.x")
    sch.bind(loops[bound], "threadIdx.x")
    low = loopir.lower(sch.func)
    assert loopir.script(low).count("thread_allreduce") == 1
    check_equivalent(base, low, thread_order="random")


def test_unrolled_serial_reduction_loop_keeps_its_kind() -> None:
    base = _reduction("sum", 2, 100)
    sch = loopir.Schedule(base)
    i, kk = sch.get_loops(sch.get_block("S"))
    k0, k1, k2 = sch.split(kk, [None, 16, 2])
    sch.unroll(k2)
    sch.bind(k1, "threadIdx.x")
    text = loopir.script(loopir.lower(sch.func))
    assert "for k_2 in T.unroll(2)" in text
    check_equivalent(base, loopir.lower(sch.func), thread_order="random")


def test_spatial_serial_loop_among_the_reduction_loops_is_refused() -> None:
    sch = loopir.Schedule(_reduction("sum", 4, 64))
    i, kk = sch.get_loops(sch.get_block("S"))
    k0, k1 = sch.split(kk, [None, 16])
    sch.reorder(k0, i)
    sch.bind(k1, "threadIdx.x")
    with pytest.raises(PassError, match=r"loop i lies between the reduction loop k_0 and block 'S'"):
        loopir.lower(sch.func)


def test_statements_beside_the_block_inside_a_serial_reduction_loop_are_refused() -> None:
    """An rfactor-like producer computed at the thread loop, under the serial k_0: moving
    the thread loop out of k_0 would change how often it runs."""
    A = te.placeholder((64,), "float32", name="A")
    B = te.compute((64,), lambda j: A[j] * 2.0, name="B")
    k = te.reduce_axis(64, name="k")
    S = te.compute((1,), lambda _: te.sum(B[k], axis=k), name="S")
    sch = loopir.Schedule(te.create_prim_func([A, S]))
    _, kk = sch.get_loops(sch.get_block("S"))
    k0, k1 = sch.split(kk, [None, 16])
    sch.bind(k1, "threadIdx.x")
    sch.compute_at(sch.get_block("B"), k1)
    with pytest.raises(PassError, match="inside its serial reduction loop k_0"):
        loopir.lower(sch.func)


@pytest.mark.nvcc
def test_generated_cuda_compiles() -> None:
    from loopir.codegen_cuda import emit_cuda
    from loopir.codegen_cuda.compile import compile_cuda

    for op, dtype, n in (("sum", "float32", 100003), ("max", "float16", 33), ("min", "float32", 1)):
        src = emit_cuda(loopir.lower(dlight_schedule(_reduction(op, 5, n, dtype)).func, target="cuda")).source
        assert "loopir_allreduce<64>" in src
        compile_cuda(src, arch="sm_90a", output="cubin")


def test_unit_loops_of_any_kind_among_the_reduction_loops() -> None:
    """Fuzzer seed 50275: a unit loop bound to vthread.y among the reduction loops (split
    [None, 3] of an extent-3 loop) was refused; one iteration goes anywhere."""
    base = _reduction("sum", 4, 48)
    sch = loopir.Schedule(base)
    i, kk = sch.get_loops(sch.get_block("S"))
    k0, k1, k2 = sch.split(kk, [None, 16, 3])
    k20, k21 = sch.split(k2, [None, 3])
    sch.bind(i, "blockIdx.x")
    sch.bind(k20, "vthread.y")
    sch.bind(k1, "threadIdx.x")
    check_equivalent(base, loopir.lower(sch.func), thread_order="random")
