"""Scripts written for TVM parse with only their import changed, and run right.

DietCode's ``Dense_960x770x2304`` (as its PR's test writes a dense kernel: handles bound by
``T.match_buffer``, ``T.grid``, ``T.axis.remap``, ``T.init``, no ``T.reads``/``T.writes``) is
written out here from the PR's description; its DietCode schedule gives the same kernel as the
te version's. The TVM blitz course's ``mm_relu`` (an ``I.ir_module`` class, TVM 0.27 style)
parses, schedules and runs.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import loopir
from loopir.examples.dense import dense, dense_func
from loopir.script import I, T
from loopir.testing import check_equivalent, check_gemm

# --- DietCode's dense, as the PR's test writes TVMScript (TVM 0.9 era) ----------------------


@T.prim_func
def Dense_960x770x2304(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, [960, 770], dtype="float32")
    B = T.match_buffer(b, [770, 2304], dtype="float32")
    C = T.match_buffer(c, [960, 2304], dtype="float32")
    for i, j, k in T.grid(960, 2304, 770):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


# the same in TVM 0.27's style: typed parameters, T.sblock, explicit axes and regions
@T.prim_func
def dense_tvm027(A: T.Buffer((960, 770), "float32"), B: T.Buffer((770, 2304), "float32"),
                 C: T.Buffer((960, 2304), "float32")):  # fmt: skip
    for i, j, k in T.grid(960, 2304, 770):
        with T.sblock("C"):
            vi = T.axis.spatial(960, i)
            vj = T.axis.spatial(2304, j)
            vk = T.axis.reduce(770, k)
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


# DietCode's point: a dynamic M
@T.prim_func
def dense_dynamic(a: T.handle, B: T.Buffer((770, 2304), "float32"), c: T.handle):
    m = T.int32()
    A = T.match_buffer(a, (m, 770), "float32")
    C = T.match_buffer(c, (m, 2304), "float32")
    for i, j, k in T.grid(m, 2304, 770):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] += A[vi, vk] * B[vk, vj]


def _named(f: loopir.PrimFunc, name: str) -> loopir.PrimFunc:
    return attrs.evolve(f, name=name)


def test_dietcode_script_is_the_te_function() -> None:
    te_func = dense_func(960, 770, 2304)
    loopir.assert_structural_equal(_named(te_func, "Dense_960x770x2304"), Dense_960x770x2304)
    loopir.assert_structural_equal(_named(te_func, "dense_tvm027"), dense_tvm027)
    loopir.verify(Dense_960x770x2304)


def _dietcode_on(func: loopir.PrimFunc, M: object, K: int, N: int) -> loopir.Schedule:
    """The DietCode dense schedule (loopir.examples.dense) replayed on ``func``."""
    sch = loopir.Schedule(func)
    dense(M, K, N).trace.apply_to(sch)
    return sch


def test_dietcode_schedule_gives_the_te_kernel() -> None:
    sch = _dietcode_on(Dense_960x770x2304, 960, 770, 2304)
    want = dense(960, 770, 2304).func
    loopir.assert_structural_equal(_named(want, "Dense_960x770x2304"), sch.func)
    for pad in (False, True):
        with loopir.PassContext(config={"tir.enable_local_pad": pad}):
            got, ref = loopir.lower(sch.func), loopir.lower(want)
        loopir.assert_structural_equal(_named(ref, "Dense_960x770x2304"), got)


def test_dietcode_dynamic_script() -> None:
    te_func = dense_func(loopir.te.var("m"), 770, 2304)
    loopir.assert_structural_equal(_named(te_func, "dense_dynamic"), dense_dynamic)
    sch = _dietcode_on(dense_dynamic, loopir.te.var("m"), 770, 2304)
    loopir.assert_structural_equal(
        _named(dense(loopir.te.var("m"), 770, 2304).func, "dense_dynamic"), sch.func
    )


def dense_script(M: int, K: int, N: int) -> loopir.PrimFunc:
    """The same kernel at other sizes: the script reads M, K, N from its closure."""

    @T.prim_func
    def dense_mkn(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, [M, K], dtype="float32")
        B = T.match_buffer(b, [K, N], dtype="float32")
        C = T.match_buffer(c, [M, N], dtype="float32")
        for i, j, k in T.grid(M, N, K):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    return dense_mkn  # type: ignore[no-any-return]


def test_dietcode_script_runs_on_the_cpu() -> None:
    check_gemm(loopir.build(Dense_960x770x2304, target="cpu"), 960, 770, 2304)
    # scheduled: the CPU executor runs the GPU kernel's threads one by one, so a smaller size
    loopir.assert_structural_equal(_named(dense_func(130, 70, 150), "dense_mkn"), dense_script(130, 70, 150))
    sch = _dietcode_on(dense_script(130, 70, 150), 130, 70, 150)
    for pad in (False, True):
        with loopir.PassContext(config={"tir.enable_local_pad": pad}):
            mod = loopir.build(sch.func, target="cpu")
        check_gemm(mod, 130, 70, 150, seed=int(pad))


@pytest.mark.gpu
@pytest.mark.parametrize("pad", [False, True])
def test_dietcode_script_runs_on_the_gpu(pad: bool) -> None:
    sch = _dietcode_on(Dense_960x770x2304, 960, 770, 2304)
    with loopir.PassContext(config={"tir.enable_local_pad": pad}):
        mod = loopir.build(sch.func, target="cuda")
    check_gemm(mod, 960, 770, 2304, seed=int(pad))


# --- the TVM blitz course's mm_relu ---------------------------------------------------------


@I.ir_module
class MyModule:
    @T.prim_func
    def mm_relu(A: T.Buffer((128, 128), "float32"),
                B: T.Buffer((128, 128), "float32"),
                C: T.Buffer((128, 128), "float32")):  # fmt: skip
        T.func_attr({"global_symbol": "mm_relu", "tir.noalias": True})
        Y = T.alloc_buffer((128, 128), dtype="float32")
        for i, j, k in T.grid(128, 128, 128):
            with T.block("Y"):
                vi = T.axis.spatial(128, i)
                vj = T.axis.spatial(128, j)
                vk = T.axis.reduce(128, k)
                with T.init():
                    Y[vi, vj] = T.float32(0)
                Y[vi, vj] = Y[vi, vj] + A[vi, vk] * B[vk, vj]
        for i, j in T.grid(128, 128):
            with T.block("C"):
                vi = T.axis.spatial(128, i)
                vj = T.axis.spatial(128, j)
                C[vi, vj] = T.max(Y[vi, vj], T.float32(0))


def _mm_relu_numpy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(a.astype("float64") @ b.astype("float64"), 0)


def _run(func: loopir.PrimFunc, target: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a, b = (rng.random((128, 128), "float32") - 0.5 for _ in range(2))
    c = np.full((128, 128), np.nan, "float32")
    loopir.build(func, target=target)(a, b, c)
    return c, _mm_relu_numpy(a, b)


def _blitz_schedule() -> loopir.Schedule:
    """The blitz course's transformations: split j by 4, reorder, the relu under j0."""
    sch = loopir.Schedule(MyModule["mm_relu"])
    block_y = sch.get_block("Y")
    i, j, k = sch.get_loops(block_y)
    j0, j1 = sch.split(j, factors=[None, 4])
    sch.reorder(j0, k, j1)
    sch.reverse_compute_at(sch.get_block("C"), j0)
    return sch


def test_mm_relu_parses_with_its_tvm_structure() -> None:
    f = MyModule["mm_relu"]
    loopir.verify(f)
    assert f.attrs["global_symbol"] == "mm_relu"
    root = f.body.block
    assert [b.name for b in root.alloc_buffers] == ["Y"]
    y = root.body.seq[0].body.body.body.block
    # inferred as TVM does: the reduction's output is not read (it has an init)
    assert [r.buffer.name for r in y.reads] == ["A", "B"]
    assert [r.buffer.name for r in y.writes] == ["Y"]
    # the sibling loop nests reuse the names i, j, vi, vj: each defines its own variable
    c = root.body.seq[1].body.body.block
    assert c.iter_vars[0].var is not y.iter_vars[0].var
    assert [r.buffer.name for r in c.reads] == ["Y"]


def test_mm_relu_runs_on_the_cpu() -> None:
    got, want = _run(MyModule["mm_relu"], "cpu")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    sch = _blitz_schedule()
    check_equivalent(MyModule["mm_relu"], sch.func)
    got, want = _run(sch.func, "cpu")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _mm_relu_gpu() -> loopir.Schedule:
    sch = _blitz_schedule()
    i = sch.get_loops(sch.get_block("Y"))[0]
    i0, i1 = sch.split(i, factors=[None, 32])
    sch.bind(i0, "blockIdx.x")
    sch.bind(i1, "threadIdx.x")
    return sch


def test_mm_relu_gpu_schedule_on_the_cpu() -> None:
    check_equivalent(MyModule["mm_relu"], loopir.lower(_mm_relu_gpu().func), thread_order="random")


@pytest.mark.gpu
def test_mm_relu_runs_on_the_gpu() -> None:
    got, want = _run(_mm_relu_gpu().func, "cuda")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# --- text TVM 0.27 printed ------------------------------------------------------------------


def test_text_printed_by_tvm_parses() -> None:
    """TVM 0.27's LowerCrossThreadReduction output (kept as a golden reference): its printer's
    idioms parse (T.sblock, the root as a comment, T.sblock_alloc_buffer without a dtype,
    range loops, @T.prim_func(s_tir=True)); the one TVM-only statement, T.attr with a
    comm_reducer around tvm_thread_allreduce, is refused at its line."""
    from pathlib import Path

    from loopir.errors import ScriptError
    from loopir.script import from_source

    path = Path(__file__).resolve().parents[1] / "golden" / "passes" / "tvm" / "cross_thread_k_outside.txt"
    text = path.read_text()
    with pytest.raises(ScriptError, match=r"T.attr is not a construct") as info:
        from_source(text, file=str(path))
    assert "T.attr(T.comm_reducer" in str(info.value)
    # without the TVM-lowered block
    lines = text.splitlines()
    start = next(n for n, ln in enumerate(lines) if 'T.sblock("S_cross_thread")' in ln)
    end = next(n for n in range(start + 1, len(lines)) if "T.sblock(" in lines[n])
    f = from_source("\n".join(lines[:start] + lines[end:]), file=str(path))
    assert f.attrs["tirx.noalias"] is True
    root = f.body.block
    assert [(b.name, b.dtype, b.scope) for b in root.alloc_buffers] == [
        ("cross_thread_S", "float32", "local"), ("in_thread_S", "float32", "local")]  # fmt: skip
    loopir.verify(f)
