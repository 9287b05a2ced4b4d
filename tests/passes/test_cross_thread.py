"""LowerCrossThreadReduction: reductions bound to threadIdx.x, on the CPU executor and nvcc."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir import te
from loopir.errors import CodegenError, ScheduleError
from loopir.examples import layernorm, rmsnorm, row_sum, softmax
from loopir.testing import check_equivalent

REFS = {"sum": np.sum, "max": np.max, "min": np.min}


def _reduction(op: str, rows: int, n: int, threads: int, dtype: str = "float32", acc: str | None = None):
    A = te.placeholder((rows, n), dtype, name="A")
    k = te.reduce_axis(n, name="k")
    red = {"sum": te.sum, "max": te.max, "min": te.min}[op]
    S = te.compute((rows,), lambda i: red(A[i, k].astype(acc) if acc else A[i, k], axis=k), name="S")
    sch = loopir.Schedule(te.create_prim_func([A, S]))
    i, kk = sch.get_loops(sch.get_block("S"))
    ko, tx = sch.split(kk, [None, threads])
    sch.reorder(tx, ko)
    sch.bind(i, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch


def _run_all(func, args, out_shape, out_dtype):
    """The result on the unlowered IR (sequential), and on the lowered IR with thread regions
    run in thread order and in a random order."""
    outs = []
    low = loopir.lower(func)
    for fn, opts in ((func, {}), (low, {}), (low, {"thread_order": "random", "seed": 7})):
        y = np.full(out_shape, np.nan if np.dtype(out_dtype).kind == "f" else -1, out_dtype)
        loopir.build(fn, target="cpu", **opts)(*args, y)
        outs.append(y)
    return outs


def test_golden_lowering(golden) -> None:
    sch = _reduction("sum", 4, 1000, 128)
    golden("passes/cross_thread_before", loopir.script(sch.func))
    golden("passes/cross_thread_lowered", loopir.script(loopir.lower(sch.func)))


@settings(max_examples=25, deadline=None)
@given(
    op=st.sampled_from(["sum", "max", "min"]),
    dtype=st.sampled_from(["float32", "float16", "int32"]),
    rows=st.integers(1, 3),
    n=st.integers(1, 300),
    threads=st.sampled_from([1, 2, 7, 16, 31, 32, 33, 64, 100, 256]),
)
def test_cross_thread_reduction_equals_numpy(op, dtype, rows, n, threads) -> None:
    acc = "float32" if dtype == "float16" and op == "sum" else None
    sch = _reduction(op, rows, n, threads, dtype, acc)
    rng = np.random.default_rng(n * 31 + threads)
    a = (rng.integers(-50, 50, (rows, n)) if dtype == "int32" else rng.random((rows, n)) - 0.5).astype(dtype)
    ref = REFS[op](a.astype("float64"), axis=1)
    tol = 1e-4 * n if dtype != "int32" else 0
    for got in _run_all(sch.func, (a,), (rows,), acc or dtype):
        np.testing.assert_allclose(got.astype("float64"), ref, atol=tol + 1e-6)


def test_non_identity_init_is_combined() -> None:
    A = te.placeholder((2, 40), "float32", name="A")
    k = te.reduce_axis(40, name="k")
    S = te.compute((2,), lambda i: te.sum(A[i, k], axis=k), name="S")
    func = te.create_prim_func([A, S])
    import attrs

    from loopir.ir.expr import FloatImm
    from loopir.ir.stmt import Block

    blk = next(b for b in _blocks(func) if b.name == "S")
    new_init = attrs.evolve(blk.init, value=FloatImm(10.0, "float32"))
    sch = loopir.Schedule(_replace(func, blk, attrs.evolve(blk, init=new_init)))
    i, kk = sch.get_loops(sch.get_block("S"))
    ko, tx = sch.split(kk, [None, 16])
    sch.reorder(tx, ko)
    sch.bind(tx, "threadIdx.x")
    a = np.random.default_rng(0).random((2, 40)).astype("float32")
    for got in _run_all(sch.func, (a,), (2,), "float32"):
        np.testing.assert_allclose(got, a.sum(1) + 10.0, rtol=1e-5)
    assert isinstance(blk, Block)


def _blocks(func):
    from loopir.ir.functor import post_order_visit
    from loopir.ir.stmt import Block

    out = []
    post_order_visit(func.body, lambda n: out.append(n) if isinstance(n, Block) else None)
    return out


def _replace(func, old, new):
    from loopir.ir.functor import Mutator

    class R(Mutator):
        def visit_Block(self, node):
            return new if node is old else self.generic_visit(node)

    return func.with_body(R().visit(func.body))


@pytest.mark.parametrize("name", ["softmax", "layernorm", "rmsnorm", "row_sum"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape,threads", [((3, 100), 32), ((2, 1000), 256), ((2, 33), 64), ((1, 1), 32),
                                           ((2, 1024), 128), ((2, 4096), 256)])  # fmt: skip
def test_examples_equal_their_reference(name, dtype, shape, threads) -> None:
    r, c = shape
    rng = np.random.default_rng(r * c)
    x = ((rng.random((r, c)) - 0.5) * 4).astype(dtype)
    w, b = (rng.random(c) + 0.5).astype(dtype), (rng.random(c) - 0.5).astype(dtype)
    xd = x.astype("float64")
    if name == "softmax":
        e = np.exp(xd - xd.max(1, keepdims=True))
        sch, args, ref = softmax(r, c, dtype, threads=threads), (x,), e / e.sum(1, keepdims=True)
    elif name == "rmsnorm":
        ref = xd / np.sqrt((xd * xd).mean(1, keepdims=True) + 1e-6) * w.astype("float64")
        sch, args = rmsnorm(r, c, dtype, threads=threads), (x, w)
    elif name == "layernorm":
        m, v = xd.mean(1, keepdims=True), xd.var(1, keepdims=True)
        ref = (xd - m) / np.sqrt(v + 1e-5) * w.astype("float64") + b.astype("float64")
        sch, args = layernorm(r, c, dtype, threads=threads, cache_row=c % 2 == 0), (x, w, b)
    else:
        sch, args, ref = row_sum(r, c, dtype, threads=threads), (x,), xd.sum(1)
    out_dtype = "float32" if name == "row_sum" else dtype
    tol = 1e-4 if dtype == "float32" else 2e-2
    for got in _run_all(sch.func, args, ref.shape, out_dtype):
        np.testing.assert_allclose(got.astype("float64"), ref, atol=tol * max(1.0, np.abs(ref).max()))


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_generated_cuda_compiles(arch) -> None:
    from loopir.codegen_cuda import emit_cuda
    from loopir.codegen_cuda.compile import compile_cuda

    funcs = [softmax(64, 1000, "float16").func, layernorm(8, 4096).func, row_sum(4, 1 << 16).func,
             rmsnorm(16, 4096).func, softmax(8, 1024, "float16").func,
             _reduction("max", 4, 31, 31).func, _reduction("sum", 4, 100, 16, "float16").func,
             _vthread_reduction(64)[1].func]  # fmt: skip
    for f in funcs:
        src = emit_cuda(loopir.lower(f, target="cuda")).source
        assert "loopir_allreduce<" in src and "__shfl_down_sync" in src
        compile_cuda(src, arch=arch, output="cubin")


def test_bind_refuses_what_cannot_be_reduced_across_threads() -> None:
    A = te.placeholder((4, 64), "float32", name="A")
    k = te.reduce_axis(64, name="k")
    S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="S")
    sch = loopir.Schedule(te.create_prim_func([A, S]))
    i, kk = sch.get_loops(sch.get_block("S"))
    fused = sch.fuse(i, kk)
    with pytest.raises(ScheduleError, match="spatial iter var .* and reduce iter var"):
        sch.bind(fused, "threadIdx.x")
    sch = loopir.Schedule(te.create_prim_func([A, S]))
    i, kk = sch.get_loops(sch.get_block("S"))
    for tag in ("blockIdx.x", "vthread.y"):  # only threads of one block combine their parts
        with pytest.raises(ScheduleError, match="reduction cannot run in parallel"):
            sch.bind(kk, tag)
    # a product "reduction" is no sum/max/min
    from loopir.ir.stmt import BufferStore

    base = te.create_prim_func([A, S])
    blk = next(b for b in _blocks(base) if b.name == "S")
    body = blk.body
    assert isinstance(body, BufferStore)
    from loopir.ir.expr import Mul

    prod = BufferStore(body.buffer, Mul(body.value.a, body.value.b), body.indices)
    import attrs

    sch = loopir.Schedule(_replace(base, blk, attrs.evolve(blk, body=prod)))
    _, kk = sch.get_loops(sch.get_block("S"))
    with pytest.raises(ScheduleError, match="not a sum, max or min"):
        sch.bind(kk, "threadIdx.x")


def test_rows_that_would_share_warps_combine_through_shared_memory() -> None:
    """Rows of 24 threadIdx.x threads under threadIdx.y would share warps, which the warp
    shuffles of thread_allreduce cannot separate (CUDA codegen refuses such a call): the pass
    combines them with the shared-memory tree instead."""
    from loopir.codegen_cuda import emit_cuda

    A = te.placeholder((6, 24), "float32", name="A")
    k = te.reduce_axis(24, name="k")
    S = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="S")
    sch = loopir.Schedule(te.create_prim_func([A, S]))
    i, kk = sch.get_loops(sch.get_block("S"))
    sch.bind(i, "threadIdx.y")
    sch.bind(kk, "threadIdx.x")
    low = loopir.lower(sch.func, target="cuda")
    text = loopir.script(low)
    assert "thread_allreduce" not in text and 'S_red = T.allocate((6, 24), "float32", "shared")' in text
    assert "loopir_allreduce" not in emit_cuda(low).source
    a = np.random.default_rng(1).random((6, 24)).astype("float32")
    for got in _run_all(sch.func, (a,), (6,), "float32"):
        np.testing.assert_allclose(got, a.sum(1), rtol=1e-5)


def test_cuda_refuses_a_thread_allreduce_over_rows_that_share_warps() -> None:
    """IR written by hand (the pass uses the shared tree there): the emitter still refuses."""
    from loopir.codegen_cuda import emit_cuda
    from loopir.ir.buffer import Buffer
    from loopir.ir.expr import Var
    from loopir.ir.op import thread_allreduce
    from loopir.ir.stmt import (
        Allocate,
        BufferStore,
        Evaluate,
        For,
        ForKind,
        IfThenElse,
        PrimFunc,
        seq,
    )

    A, S, acc = Buffer("A", (6, 24)), Buffer("S", (6,)), Buffer("acc", (1,), scope="local")
    ty, tx = Var("ty", "int32"), Var("tx", "int32")
    body = Allocate(acc, seq(BufferStore(acc, A[ty, tx], (0,)), Evaluate(thread_allreduce("sum", acc[0], 24)),
                             IfThenElse(tx == 0, BufferStore(S, acc[0], (ty,)))))  # fmt: skip
    row = For(tx, 0, 24, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")
    func = PrimFunc((A, S), For(ty, 0, 6, ForKind.THREAD_BINDING, row, thread_tag="threadIdx.y"))
    with pytest.raises(CodegenError, match="share warps"):
        emit_cuda(func)


def test_write_back_by_thread_zero_is_proven_race_free_without_enumeration() -> None:
    """32768 blocks are too many to enumerate: the proof uses the ``tx == 0`` guard."""
    import warnings

    from loopir.codegen_cuda import prepare_function

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prepare_function(softmax(32768, 1024).func, None)
        prepare_function(layernorm(32768, 1024, "float16").func, None)


@pytest.mark.nvcc
def test_examples_read_each_row_once_in_16_byte_vectors() -> None:
    from loopir.codegen_cuda import emit_cuda

    for sch, vec in ((softmax(8, 1024, "float16", cache_row=True), "uint4"),
                     (layernorm(8, 4096, cache_row=True), "float4"), (rmsnorm(8, 4096), "uint4")):
        (text,) = emit_cuda(loopir.lower(sch.func, target="cuda")).kernel_texts
        loads = [ln for ln in text.splitlines() if "X[" in ln or re.search(r"\(X(_base\w*)? \+ ", ln)]
        assert len(loads) == 1 and re.search(rf"\*\(const {vec}\*\)\(X(_base\w*)? \+ ", loads[0]), loads


@pytest.mark.parametrize("pad", [False, True])
def test_lowering_with_local_padding_on_and_off(pad) -> None:
    for sch in (softmax(3, 100, threads=32), layernorm(2, 77, threads=16), _reduction("max", 3, 45, 16)):
        with loopir.PassContext(config={"tir.enable_local_pad": pad}):
            low = loopir.lower(sch.func)
        check_equivalent(sch.func, low, thread_order="random")



def _vthread_reduction(threads: int):
    """Row sums with the rows split over blockIdx.x and two virtual threads and the columns
    over threadIdx.x: (the unscheduled function, the schedule)."""
    A = te.placeholder((4, 200), "float32", name="A")
    k = te.reduce_axis(200, name="k")
    S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="S")
    base = te.create_prim_func([A, S])
    sch = loopir.Schedule(base)
    i, kk = sch.get_loops(sch.get_block("S"))
    bx, vt = sch.split(i, [None, 2])
    ko, tx = sch.split(kk, [None, threads])
    sch.reorder(tx, ko)
    sch.bind(bx, "blockIdx.x")
    sch.bind(vt, "vthread.x")
    sch.bind(tx, "threadIdx.x")
    return base, sch


@pytest.mark.parametrize("threads", [16, 64])
def test_cross_thread_reduction_under_a_vthread_loop(threads) -> None:
    """Issue 28: under a vthread loop InjectVirtualThread gives the accumulator one element per
    virtual thread (``S_acc[vt, 0]``); each combine must land in its own element."""
    base, sch = _vthread_reduction(threads)
    low = loopir.lower(sch.func)
    assert "thread_allreduce" in loopir.script(low) and "vthread" not in loopir.script(low)
    check_equivalent(base, low, thread_order="sequential")
    check_equivalent(base, low)  # lowered: threads in random orders too


def test_cuda_combines_each_virtual_threads_accumulator_in_place() -> None:
    """The CUDA emitter reads and writes the same accumulator element (the one the call names)."""
    from loopir.codegen_cuda import emit_cuda

    (text,) = emit_cuda(loopir.lower(_vthread_reduction(64)[1].func, target="cuda")).kernel_texts
    calls = [ln for ln in text.splitlines() if "loopir_allreduce<" in ln]
    assert len(calls) == 1, text
    m = re.search(r"(S_acc\[\w+\]) = loopir_allreduce<64>\((S_acc\[\w+\]),", calls[0])
    assert m is not None and m.group(1) == m.group(2) and m.group(1) != "S_acc[0]", calls[0]
