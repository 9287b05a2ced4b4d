"""Row reductions over ``mma`` accumulator fragments (``loopir.tensor_intrin.fragment``) and
the warp shuffle they use (``ptx_shfl_xor``).

* ``ptx_shfl_xor``'s meaning on the CPU executor: lane ``l`` gets lane ``l ^ mask``'s value,
  every lane's value read before any is written (``dst`` may be ``src``), for every mask;
  malformed calls are refused; it is neither a barrier nor a block barrier.
* Property: a program with a fragment (a ``warp`` buffer in the ``MMA_C`` layout, written by a
  ``transform_block_layout``-ed block) and its row maximum / row sum tensorized with
  ``frag_row_{max,sum}_{t}_n{n}`` computes what the unscheduled program does on the CPU
  executor (``max`` exactly, ``sum`` up to the order of the additions), sequentially and
  lowered in random thread order, over drawn tile shapes, dtypes and reducers.
* The CUDA lowering: fragments and the reduction's scratch in registers, two
  ``__shfl_xor_sync`` steps per row pair, no barrier among them, no RaceCheckWarning; nvcc
  compiles it for sm_80 and sm_90a without spills.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir import tensor_intrin
from loopir.errors import ScheduleError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Var
from loopir.ir.stmt import Allocate, Evaluate, For, ForKind, PrimFunc, seq
from loopir.ir.stmt import BufferStore as Store
from loopir.script import from_source
from loopir.tensor_intrin.fragment import FRAGMENT_INTRIN_NAMES, row_reduce_intrin
from loopir.tensor_intrin.layouts import MMA_C, ROW_STATS

from .kernels import from_storage, to_storage


def _shuffle_kernel(mask: int, in_place: bool) -> PrimFunc:
    """Lowered IR: ``Y[l] = X[l ^ mask]`` through a warp buffer (one warp)."""
    x, y = Buffer("X", (32,), "float32"), Buffer("Y", (32,), "float32")
    w = Buffer("W", (32, 1), "float32", scope="warp")
    o = w if in_place else Buffer("O", (32, 1), "float32", scope="warp")
    tx, bx = Var("tx", "int32"), Var("bx", "int32")
    body = seq(
        Store(w, x[tx], (tx, 0)),
        Evaluate(op.ptx_shfl_xor(o[tx, 0], w[tx, 0], mask)),
        Store(y, o[tx, 0], (tx,)),
    )
    stmt = For(tx, 0, 32, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")
    stmt = Allocate(w, stmt) if in_place else Allocate(w, Allocate(o, stmt))
    return PrimFunc((x, y), For(bx, 0, 1, ForKind.THREAD_BINDING, stmt, thread_tag="blockIdx.x"), name="shfl")


@pytest.mark.parametrize("mask", [1, 2, 5, 16, 31])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("order", ["sequential", "random"])
def test_shfl_xor_reads_the_partner_lane(mask: int, in_place: bool, order: str) -> None:
    x = np.arange(32, dtype=np.float32) * 1.5 - 7
    y = np.full(32, np.nan, np.float32)
    loopir.build(_shuffle_kernel(mask, in_place), target="cpu", thread_order=order, seed=mask)(x, y)
    assert np.array_equal(y, x[np.arange(32) ^ mask])


def test_shfl_xor_is_no_barrier_and_malformed_calls_are_refused() -> None:
    w = Buffer("W", (32, 2), "float32", scope="warp")
    h = Buffer("H", (32, 2), "float16", scope="warp")
    s = Buffer("S", (32, 2), "float32", scope="shared")
    tx = Var("tx", "int32")
    call = op.ptx_shfl_xor(w[tx, 0], w[tx, 1], 3)
    assert op.is_warp_collective(call) and not op.is_barrier(call) and not op.is_block_barrier(call)
    for bad, what in (
        (lambda: op.ptx_shfl_xor(w[tx, 0], w[tx, 1], 0), "lane_mask must be a constant from 1 to 31"),
        (lambda: op.ptx_shfl_xor(w[tx, 0], w[tx, 1], 32), "lane_mask must be a constant from 1 to 31"),
        (lambda: op.ptx_shfl_xor(h[tx, 0], h[tx, 1], 1), "dst and src must have one of"),
        (lambda: op.ptx_shfl_xor(w[tx, 0], s[tx, 1], 1), "src must be a load of a warp"),
    ):
        with pytest.raises(TypeError, match=what):
            bad()


def test_every_size_and_type_is_registered_and_reads_back() -> None:
    assert len(FRAGMENT_INTRIN_NAMES) == 2 * 3 * 16 * 2  # reducers, types, widths, shared / quad
    intrin = tensor_intrin.get(row_reduce_intrin("sum", "bfloat16", 64))
    for f in (intrin.desc, intrin.impl):  # the shuffle prints as T.ptx_shfl_xor and parses back
        loopir.assert_structural_equal(from_source(f.script()), f)
    assert [(b.name, tuple(map(int, b.shape)), b.dtype, b.scope) for b in intrin.desc.params] == [
        ("X", (4, 32, 8), "bfloat16", "warp"), ("m", (16,), "float32", "shared")]  # fmt: skip


_PROGRAM = '''
def frag(A: T.Buffer((3, {R}, {C}), "float32"), M: T.Buffer((3, {R}), "float32")):
    for b in range(3):
        with T.block("tile"):
            vb = T.axis.spatial(3, b)
            W = T.alloc_buffer(({R}, {C}), "{dt}")
            m = T.alloc_buffer(({R},), "float32")
            for i, j in T.grid({R}, {C}):
                with T.block("W"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    W[vi, vj] = T.Cast("{dt}", A[vb, vi, vj])
            for i in range({R}):
                with T.block("m_init"):
                    vi = T.axis.spatial({R}, i)
                    m[vi] = M[vb, vi]
            for i, j in T.grid({R}, {C}):
                with T.block("reduce"):
                    vi, vj = T.axis.remap("SR", [i, j])
                    m[vi] = {COMBINE}
            for i in range({R}):
                with T.block("out"):
                    vi = T.axis.spatial({R}, i)
                    M[vb, vi] = m[vi]
'''


def _program(rows: int, cols: int, reducer: str, dtype: str) -> tuple[PrimFunc, loopir.Schedule]:
    elem = "W[vi, vj]" if dtype == "float32" else 'T.Cast("float32", W[vi, vj])'
    combine = f"T.max(m[vi], {elem})" if reducer == "max" else f"m[vi] + {elem}"
    func = from_source(_PROGRAM.format(R=rows, C=cols, dt=dtype, COMBINE=combine))
    fmap = lambda i, j: (i // 16, j // 16, *MMA_C.to_lane_local(i % 16, j % 16))  # noqa: E731
    warps = rows // 16
    sch = loopir.Schedule(func)
    sch.bind(sch.get_loops(sch.get_block("tile"))[0], "blockIdx.x")
    w = sch.get_block("W")
    sch.set_scope(w, "W", "warp")
    sch.transform_layout(w, "W", fmap)
    sch.set_scope(sch.get_block("m_init"), "m", "shared")
    t, c, lane, v = sch.transform_block_layout(w, fmap)
    sch.bind(t, "threadIdx.y")
    sch.bind(lane, "threadIdx.x")
    sch.unroll(c)
    sch.unroll(v)
    for name in ("m_init", "out"):
        (i,) = sch.get_loops(sch.get_block(name))
        _, y, x = sch.split(i, [None, warps, 32])
        sch.bind(y, "threadIdx.y")
        sch.bind(x, "threadIdx.x")
    i, _ = sch.get_loops(sch.get_block("reduce"))
    wi, ii = sch.split(i, [warps, 16])
    outer = sch.blockize(ii)
    sch.bind(wi, "threadIdx.y")
    sch.tensorize(outer, row_reduce_intrin(reducer, dtype, cols))
    return func, sch


_QUAD_PROGRAM = '''
def frag(A: T.Buffer((3, {R}, {C}), "float32"), M: T.Buffer((3, {R}, 4), "float32")):
    for b in range(3):
        with T.block("tile"):
            vb = T.axis.spatial(3, b)
            W = T.alloc_buffer(({R}, {C}), "{dt}")
            m = T.alloc_buffer(({R}, 4), "float32")
            for i, j in T.grid({R}, {C}):
                with T.block("W"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    W[vi, vj] = T.Cast("{dt}", A[vb, vi, vj])
            for i, q in T.grid({R}, 4):
                with T.block("m_init"):
                    vi, vq = T.axis.remap("SS", [i, q])
                    m[vi, vq] = M[vb, vi, vq]
            for i, q, j in T.grid({R}, 4, {C}):
                with T.block("reduce"):
                    vi, vq, vj = T.axis.remap("SSR", [i, q, j])
                    m[vi, vq] = {COMBINE}
            for i, q in T.grid({R}, 4):
                with T.block("out"):
                    vi, vq = T.axis.remap("SS", [i, q])
                    M[vb, vi, vq] = m[vi, vq]
'''


def _quad_program(rows: int, cols: int, reducer: str, dtype: str) -> tuple[PrimFunc, loopir.Schedule]:
    """W reduced along its rows into 4 copies per row, ``m[i, q]``, kept in registers by
    ``ROW_STATS``: the lanes holding row i's elements hold its copies."""
    elem = "W[vi, vj]" if dtype == "float32" else 'T.Cast("float32", W[vi, vj])'
    combine = f"T.max(m[vi, vq], {elem})" if reducer == "max" else f"m[vi, vq] + {elem}"
    func = from_source(_QUAD_PROGRAM.format(R=rows, C=cols, dt=dtype, COMBINE=combine))
    fmap = lambda i, j: (i // 16, j // 16, *MMA_C.to_lane_local(i % 16, j % 16))  # noqa: E731
    smap = lambda i, q: (i // 16, *ROW_STATS.to_lane_local(i % 16, q))  # noqa: E731
    sch = loopir.Schedule(func)
    sch.bind(sch.get_loops(sch.get_block("tile"))[0], "blockIdx.x")
    for name, buf, index_map in (("W", "W", fmap), ("m_init", "m", smap)):
        sch.set_scope(sch.get_block(name), buf, "warp")
        sch.transform_layout(sch.get_block(name), buf, index_map)
    for name, index_map in (("W", fmap), ("m_init", smap), ("out", smap)):
        w, *rest, lane, v = sch.transform_block_layout(sch.get_block(name), index_map)
        sch.bind(w, "threadIdx.y")
        sch.bind(lane, "threadIdx.x")
        for loop in (*rest, v):
            sch.unroll(loop)
    i = sch.get_loops(sch.get_block("reduce"))[0]
    wi, ii = sch.split(i, [rows // 16, 16])
    outer = sch.blockize(ii)
    sch.bind(wi, "threadIdx.y")
    sch.tensorize(outer, row_reduce_intrin(reducer, dtype, cols, quad=True))
    return func, sch


@settings(max_examples=8, deadline=None)
@given(warps=st.integers(1, 3), tiles=st.integers(1, 8), reducer=st.sampled_from(["max", "sum"]),
       dtype=st.sampled_from(["float32", "float16", "bfloat16"]), seed=st.integers(0, 2**16))  # fmt: skip
def test_quad_replicated_reductions_compute_the_program(warps: int, tiles: int, reducer: str, dtype: str,
                                                        seed: int) -> None:  # fmt: skip
    """Every copy of every row (the 4 lanes of its quad) gets the row's reduction."""
    rows, cols = 16 * warps, 16 * tiles
    func, sch = _quad_program(rows, cols, reducer, dtype)
    rng = np.random.default_rng(seed)
    a = from_storage(to_storage(rng.standard_normal((3, rows, cols)), dtype), dtype).astype(np.float32)
    m = np.repeat(rng.standard_normal((3, rows, 1)).astype(np.float32), 4, axis=2)
    want = _run(func, a, m)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lowered = loopir.lower(sch.func)
    for got in (_run(sch.func, a, m), _run(lowered, a, m, thread_order="random", seed=seed)):
        assert (got == got[..., :1]).all()  # the copies agree
        if reducer == "max":
            assert np.array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_quad_reduction_is_registers_and_shuffles_only() -> None:
    _, sch = _quad_program(32, 64, "sum", "float16")
    kernel = _source(sch).split("frag_kernel0")[1]
    assert "__shared__" not in kernel and "__syncthreads" not in kernel
    assert "float m[2];" in kernel and kernel.count("__shfl_xor_sync(0xffffffffu") == 2


def _run(func: PrimFunc, a: np.ndarray, m: np.ndarray, **options: object) -> np.ndarray:
    out = m.copy()
    loopir.build(func, target="cpu", **options)(a, out)
    return out


@settings(max_examples=8, deadline=None)
@given(warps=st.integers(1, 3), tiles=st.integers(1, 8), reducer=st.sampled_from(["max", "sum"]),
       dtype=st.sampled_from(["float32", "float16", "bfloat16"]), seed=st.integers(0, 2**16))  # fmt: skip
def test_tensorized_row_reductions_compute_the_program(warps: int, tiles: int, reducer: str, dtype: str,
                                                       seed: int) -> None:  # fmt: skip
    rows, cols = 16 * warps, 16 * tiles
    func, sch = _program(rows, cols, reducer, dtype)
    assert f'"loopir.tensorized": "{row_reduce_intrin(reducer, dtype, cols)}"' in sch.func.script()
    rng = np.random.default_rng(seed)
    a = from_storage(to_storage(rng.standard_normal((3, rows, cols)), dtype), dtype).astype(np.float32)
    m = rng.standard_normal((3, rows)).astype(np.float32)
    if reducer == "max":
        m[0, 0] = -np.inf  # a row starting from the identity
    want = _run(func, a, m)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RaceCheckWarning
        lowered = loopir.lower(sch.func)
    for got in (_run(sch.func, a, m), _run(lowered, a, m, thread_order="random", seed=seed)):
        if reducer == "max":
            assert np.array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_fragment_in_another_layout_does_not_match() -> None:
    """The description reads the MMA_C layout: a tile stored transposed is refused."""
    func = from_source(_PROGRAM.format(R=16, C=16, dt="float32", COMBINE="T.max(m[vi], W[vi, vj])"))
    sch = loopir.Schedule(func)
    w = sch.get_block("W")
    sch.set_scope(w, "W", "warp")
    sch.transform_layout(w, "W", lambda i, j: (j // 16, i // 16, *MMA_C.to_lane_local(j % 16, i % 16)))
    sch.set_scope(sch.get_block("m_init"), "m", "shared")
    i, _ = sch.get_loops(sch.get_block("reduce"))
    _, ii = sch.split(i, [1, 16])
    with pytest.raises(ScheduleError, match="index pattern differs"):
        sch.tensorize(sch.blockize(ii), row_reduce_intrin("max", "float32", 16))


def _source(sch: loopir.Schedule) -> str:
    from loopir.codegen_cuda import prepare_function

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return prepare_function(sch.func).emitted.source


def test_cuda_keeps_the_reduction_in_registers() -> None:
    _, sch = _program(32, 64, "max", "float32")
    src = _source(sch)
    kernel = src.split("frag_kernel0")[1]
    assert "float W[32];" in kernel and "float red[2];" in kernel.replace("red_1", "red")
    assert kernel.count("__shfl_xor_sync(0xffffffffu") == 2
    between = kernel.split("__shfl_xor_sync")[1]
    assert "__syncthreads" not in between  # the shuffles are no barrier


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("reducer, dtype", [("max", "float32"), ("sum", "bfloat16")])
def test_compiles_with_nvcc(arch: str, reducer: str, dtype: str, tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    _, sch = _program(48, 128, reducer, dtype)
    binary = compile_cuda(_source(sch), arch=arch, cache_dir=tmp_path)
    for res in binary.resources.values():
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, binary.log


@pytest.mark.gpu
@pytest.mark.parametrize("reducer, dtype, quad", [("max", "float32", False), ("sum", "bfloat16", False),
                                                  ("max", "float16", True), ("sum", "float32", True)])  # fmt: skip
def test_gpu_equals_the_cpu_executor(reducer: str, dtype: str, quad: bool) -> None:
    """The shuffles on the hardware: the CUDA build computes what the CPU executor does."""
    rows, cols = 48, 128
    _, sch = _quad_program(rows, cols, reducer, dtype) if quad else _program(rows, cols, reducer, dtype)
    rng = np.random.default_rng(1)
    a = from_storage(to_storage(rng.standard_normal((3, rows, cols)), dtype), dtype).astype(np.float32)
    m = rng.standard_normal((3, rows, 4) if quad else (3, rows)).astype(np.float32)
    if quad:
        m = np.repeat(m[..., :1], 4, axis=2)
    want = _run(sch.func, a, m)
    got = m.copy()
    loopir.build(sch.func, target="cuda")(a, got)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
