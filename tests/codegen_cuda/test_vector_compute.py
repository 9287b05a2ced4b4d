"""Vectorized loops that compute (vector loads, the value per lane, one vector store)."""

from __future__ import annotations

import numpy as np
import pytest

import loopir
from loopir import te
from loopir.codegen_cuda import emit_cuda
from loopir.examples import softmax
from loopir.ir.buffer import Buffer
from loopir.ir.expr import IntImm, Var
from loopir.ir.stmt import Allocate, BufferStore, For, ForKind, PrimFunc, Stmt, seq


def _gelu(rows: int, cols: int, vector: int, dtype: str = "float32"):
    X = te.placeholder((rows, cols), dtype, name="X")
    B = te.placeholder((cols,), dtype, name="B")

    def f(i, j):
        x = X[i, j].astype("float32") * 0.5 + B[j].astype("float32")
        return (0.5 * x * (1.0 + te.erf(x * 0.7071067811865476))).astype(dtype)

    Y = te.compute((rows, cols), f, name="Y")
    sch = loopir.Schedule(te.create_prim_func([X, B, Y]))
    i, j = sch.get_loops(sch.get_block("Y"))
    bx, tx, v = sch.split(sch.fuse(i, j), [None, 64, vector])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(v)
    return sch.func


@pytest.mark.parametrize("dtype,vector,carrier", [("float32", 4, "float4"), ("float16", 8, "uint4"),
                                                  ("float16", 4, "uint2"), ("float32", 2, "float2")])  # fmt: skip
def test_computed_value_is_one_vector_load_per_input_and_one_store(dtype, vector, carrier) -> None:
    (text,) = emit_cuda(loopir.lower(_gelu(8, 512, vector, dtype), target="cuda")).kernel_texts
    assert text.count(f"const {carrier} X_v = *(const {carrier}*)(X + ") == 1
    assert text.count(f"const {carrier} B_v = *(const {carrier}*)(B + ") == 1
    assert text.count(f"*({carrier}*)(Y + ") == 1 and text.count("erff(") == vector


def test_lanes_compute_what_the_scalar_loop_computes() -> None:
    f = _gelu(4, 256, 4)
    loopir.testing.check_equivalent(f, loopir.lower(f, target="cuda"), thread_order="random")


def test_unaligned_or_self_reading_loops_stay_scalar() -> None:
    # Y[b + v] = Y[b] * 2: lane 1 sees lane 0's store sequentially, not after a vector load
    Y = Buffer("Y", (256,), "float32")
    t, v = Var("t"), Var("v")
    b = t * 4
    body = BufferStore(Y, Y[b] * 2.0, (b + v,))
    f = PrimFunc((Y,), For(t, 0, 64, ForKind.THREAD_BINDING,
                           For(v, 0, 4, ForKind.VECTORIZED, body), thread_tag="threadIdx.x"))  # fmt: skip
    (text,) = emit_cuda(f).kernel_texts
    assert "float4" not in text
    # a lazily evaluated load (a padded read) is not hoisted into a vector load
    from loopir.ir.expr import LT, FloatImm, Select

    guarded = BufferStore(Y, Select(LT(b + v, IntImm(100, "int32")), Y[b + v] * 2.0, FloatImm(0.0, "float32")),
                          (b + v,))  # fmt: skip
    g = PrimFunc((Y,), For(t, 0, 64, ForKind.THREAD_BINDING,
                           For(v, 0, 4, ForKind.VECTORIZED, guarded), thread_tag="threadIdx.x"))  # fmt: skip
    (gtext,) = emit_cuda(g).kernel_texts
    assert "float4" not in gtext
    # an odd row length is not provably aligned: scalar lanes
    (odd,) = emit_cuda(loopir.lower(_gelu(3, 258, 4), target="cuda")).kernel_texts
    assert "float4" not in odd


def _guarded_copy(guard_uses_lane: bool, reads_register: bool = False) -> PrimFunc:
    """``Y[b + v] = (guard) ? X[b + v] * 2 : 0`` over vectors of 4: the guard ``t < 50`` is the
    same for the 4 lanes; ``b + v < 199`` (``guard_uses_lane``) is not; ``R[0] > 0`` reads a
    register."""
    from loopir.ir.expr import GT, LT, FloatImm, Select

    X, Y = Buffer("X", (256,), "float32"), Buffer("Y", (256,), "float32")
    R = Buffer("R", (1,), "float32", scope="local")
    t, v = Var("t"), Var("v")
    b = t * 4
    cond = LT(b + v, IntImm(199, "int32")) if guard_uses_lane else LT(t, IntImm(50, "int32"))
    if reads_register:
        cond = GT(R[0], FloatImm(0.0, "float32"))
    body: Stmt = For(v, 0, 4, ForKind.VECTORIZED,
                     BufferStore(Y, Select(cond, X[b + v] * 2.0, FloatImm(0.0, "float32")), (b + v,)))  # fmt: skip
    if reads_register:
        body = Allocate(R, seq(BufferStore(R, X[t], (0,)), body))
    return PrimFunc((X, Y), For(t, 0, 64, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x"))


def test_a_guard_the_same_for_every_lane_guards_the_vector_load() -> None:
    """A load in a ``Select`` branch is evaluated lazily; when the condition is the same for
    every lane (no lane variable, no load) the vector load is made under it, and each lane
    still selects as written. A lane-dependent or register-reading guard keeps scalar lanes."""
    (text,) = emit_cuda(_guarded_copy(False)).kernel_texts
    assert "float4 X_v = {};" in text and "if (t < 50) X_v = *(const float4*)(X + t * 4);" in text
    assert text.count("t < 50 ? ") == 4 or text.count("(t < 50) ? ") == 4
    for lane, reg in ((True, False), (False, True)):
        (scalar,) = emit_cuda(_guarded_copy(lane, reg)).kernel_texts
        assert "float4 X_v" not in scalar


@pytest.mark.nvcc
def test_vectorized_kernels_compile(tmp_path) -> None:
    from loopir.codegen_cuda.compile import compile_cuda

    for f in (_gelu(8, 512, 8, "float16"), softmax(8, 1024, "float16", vector=8).func):
        compile_cuda(emit_cuda(loopir.lower(f, target="cuda")).source, arch="sm_90a", cache_dir=tmp_path)
    compile_cuda(emit_cuda(_guarded_copy(False)).source, arch="sm_90a", cache_dir=tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,vector", [("float32", 4), ("float16", 8)])
def test_vectorized_kernels_match_the_cpu(dtype, vector) -> None:
    f = _gelu(16, 512, vector, dtype)
    rng = np.random.default_rng(vector)
    x, b = (rng.random((16, 512)) * 4 - 2).astype(dtype), (rng.random(512) - 0.5).astype(dtype)
    gpu, cpu = np.full((16, 512), np.nan, dtype), np.full((16, 512), np.nan, dtype)
    loopir.build(f, target="cuda")(x, b, gpu)
    loopir.build(f, target="cpu")(x, b, cpu)
    np.testing.assert_allclose(gpu.astype("float64"), cpu.astype("float64"), rtol=2e-3 if dtype == "float16" else 1e-5, atol=1e-3)
    sch = softmax(16, 1024, dtype, vector=vector)
    xs = (rng.random((16, 1024)) * 4 - 2).astype(dtype)
    g2, c2 = np.full_like(xs, np.nan), np.full_like(xs, np.nan)
    loopir.build(sch.func, target="cuda")(xs, g2)
    loopir.build(sch.func, target="cpu")(xs, c2)
    np.testing.assert_allclose(g2.astype("float64"), c2.astype("float64"), atol=1e-3)


@pytest.mark.gpu
def test_guarded_vector_loads_match_the_cpu() -> None:
    """The lanes past the guard read nothing (X is 256 floats; threads 50-63 load no vector)."""
    f = _guarded_copy(False)
    x = np.random.default_rng(3).random(256).astype("float32") + 0.5
    gpu, cpu = np.full(256, np.nan, "float32"), np.full(256, np.nan, "float32")
    loopir.build(f, target="cuda")(x, gpu)
    loopir.build(f, target="cpu")(x, cpu)
    np.testing.assert_array_equal(gpu, cpu)
    assert (cpu[200:] == 0).all() and (cpu[:200] == 2 * x[:200]).all()
