"""InjectSoftwarePipeline: multi-stage pipelines with cp.async, equal to the unpipelined loop."""

from __future__ import annotations

import shutil
import tempfile
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.errors import PassError
from loopir.examples.dense import dense, dense_func
from loopir.ir.expr import Var
from loopir.passes.race_check import RaceCheckWarning, check_races
from loopir.testing import check_equivalent, check_gemm


def _piped(M: object, K: object, N: object, stages: int, asynchronous: bool = True,
           order: list[int] | None = None) -> loopir.Schedule:  # fmt: skip
    sch = dense(M, K, N)
    k0 = sch.get_loops(sch.get_block("C"))[3]
    sch.annotate(k0, "software_pipeline_stage", [0, 0, stages - 1])
    if order is not None:
        sch.annotate(k0, "software_pipeline_order", order)
    if asynchronous:
        sch.annotate(k0, "software_pipeline_async_stages", [0])
    return sch


@pytest.mark.parametrize("stages", [2, 3])
def test_golden_pipelines(stages: int, golden) -> None:
    with loopir.PassContext(config={"tir.enable_local_pad": True}):
        low = loopir.lower(_piped(130, 12, 150, stages).func)
    golden(f"passes/software_pipeline_{stages}_stages", low.script())
    text = low.script()
    assert f"A_shared = T.allocate(({stages}, 128, 4)" in text
    assert text.count("cp_async_commit") == 2 * (stages - 1) + 1  # prologue and epilogue steps, steady state
    assert f"T.loopir.cp_async_wait({stages - 1})" in text


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("pad", [False, True])
def test_pipelined_loops_define_their_own_vars(stages: int, pad: bool) -> None:
    # the prologue and epilogue copies of a step once reused the fetch loops' Vars: IR that
    # loopir.verify rejects (duplicate-var) and a script cannot say
    with loopir.PassContext(config={"tir.enable_local_pad": pad}):
        low = loopir.lower(_piped(130, 12, 150, stages).func)
    loopir.verify(low)
    loopir.assert_structural_equal(low, loopir.script.from_source(low.script()))


@settings(max_examples=25, deadline=None)
@given(M=st.integers(1, 140), K=st.integers(1, 24), N=st.integers(1, 140), stages=st.sampled_from([2, 3]),
       asynchronous=st.booleans(), pad=st.booleans(), order=st.sampled_from([None, [0, 1, 2], [1, 0, 2]]))  # fmt: skip
def test_pipelined_equals_unpipelined_on_the_cpu(M, K, N, stages, asynchronous, pad, order) -> None:
    sch = _piped(M, K, N, stages, asynchronous, order)
    with loopir.PassContext(config={"tir.enable_local_pad": pad}):
        low = loopir.lower(sch.func)
    check_equivalent(dense_func(M, K, N), low, thread_order="random")


@pytest.mark.parametrize("k", [1, 2, 3, 5, 30])
def test_a_symbolic_trip_count_shorter_than_the_pipeline(k: int) -> None:
    kv = Var("k")
    low = loopir.lower(_piped(30, kv, 40, 3).func)
    check_equivalent(dense_func(30, kv, 40), low, sizes={"k": k}, thread_order="random")


def test_pipelined_kernels_are_race_proven() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RaceCheckWarning)
        for pad in (False, True):
            with loopir.PassContext(config={"tir.enable_local_pad": pad}):
                check_races(loopir.lower(_piped(960, 770, 2304, 2).func))
                check_races(loopir.lower(_piped(256, 64, 256, 3).func))


def test_the_depth_shorthand_and_the_examples_schedule() -> None:
    low = loopir.lower(dense(64, 16, 64, stages=3).func)
    assert "T.loopir.cp_async_wait(2)" in low.script()
    sch = dense(64, 16, 64)
    k0 = sch.get_loops(sch.get_block("C"))[3]
    sch.annotate(k0, "loopir.software_pipeline_depth", 3)
    assert loopir.structural_equal(loopir.lower(sch.func), low)
    sch1 = dense(64, 16, 64)
    sch1.annotate(sch1.get_loops(sch1.get_block("C"))[3], "loopir.software_pipeline_depth", 1)
    assert "cp_async" not in loopir.lower(sch1.func).script()


def _register_passed_on(order: list[int], stages: tuple[int, int] = (0, 1)) -> loopir.PrimFunc:
    """``t = 2 x[k]`` (stage ``stages[0]``), ``y[k] = t + 1`` (stage ``stages[1]``), ``t`` a
    register buffer allocated around the loop, the step's order ``order``."""
    from loopir.ir.buffer import Buffer
    from loopir.ir.expr import FloatImm
    from loopir.ir.stmt import Allocate, BufferStore, For, ForKind, PrimFunc, seq

    x, y = Buffer("x", (6,), "float32"), Buffer("y", (6,), "float32")
    t, k = Buffer("t", (1,), "float32", scope="local"), Var("k")
    body = seq(BufferStore(t, x[k] * FloatImm(2.0, "float32"), (0,)), BufferStore(y, t[0] + FloatImm(1.0, "float32"), (k,)))
    loop = For(k, 0, 6, ForKind.SERIAL, body, annotations={"software_pipeline_stage": list(stages),
                                                           "software_pipeline_order": order})  # fmt: skip
    return PrimFunc((x, y), Allocate(t, loop))


@pytest.mark.parametrize("order, stages, versions", [
    ([1, 0], (0, 1), 1),  # the reader of iteration k before the writer of k + 1 in a step: one version
    ([0, 1], (0, 1), 2),  # the writer of k + 1 first: two
    ([1, 0], (0, 2), 2),
    ([0, 1], (0, 2), 3),
])  # fmt: skip
def test_versions_follow_the_steps_order(order: list[int], stages: tuple[int, int], versions: int) -> None:
    import numpy as np

    from loopir.passes import InjectSoftwarePipeline

    piped = InjectSoftwarePipeline()(_register_passed_on(order, stages))
    text = piped.script()
    assert (f"t = T.allocate(({versions}, 1)" in text) if versions > 1 else "t = T.allocate((1,)" in text, text
    assert ("% " in text) == (versions > 1)  # no dynamic version index for a single version
    x = np.arange(6, dtype=np.float32)
    y = np.full(6, np.nan, np.float32)
    loopir.build(piped, target="cpu")(x, y)
    np.testing.assert_array_equal(y, 2 * x + 1)


def _annotated(key: str, value: object) -> loopir.PrimFunc:
    sch = dense(64, 16, 64)
    sch.annotate(sch.get_loops(sch.get_block("C"))[3], key, value)  # type: ignore[arg-type]
    return sch.func


@pytest.mark.parametrize("key,value,message", [
    ("software_pipeline_stage", [0, 1], r"loop k_0 has 3 statements after lowering, but software_pipeline_stage=\[0, 1\]"),
    ("software_pipeline_stage", [0, -1, 1], r"software_pipeline_stage must be a list of non-negative ints"),
    ("software_pipeline_stage", [1, 1, 0], r"A_shared is written in stage 1 and read in the earlier stage 0"),
    ("loopir.software_pipeline_depth", 0, r"loopir.software_pipeline_depth must be a positive int, got 0"),
])  # fmt: skip
def test_bad_annotations_are_refused_naming_the_loop(key: str, value: object, message: str) -> None:
    with pytest.raises(PassError, match=message):
        loopir.lower(_annotated(key, value))


def test_pipeline_and_register_prefetch_on_one_loop_are_refused() -> None:
    sch = _piped(64, 16, 64, 2)
    sch.annotate(sch.get_loops(sch.get_block("C"))[3], "loopir.prefetch_shared", True)
    with pytest.raises(PassError, match="also asks for the register prefetch"):
        loopir.lower(sch.func)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cp_async_kernels_compile(arch: str) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    from loopir.codegen_cuda import compile_cuda, emit_cuda, lower_for_cuda

    for pad in (False, True):
        with loopir.PassContext(config={"tir.enable_local_pad": pad}):
            src = emit_cuda(lower_for_cuda(_piped(960, 770, 2304, 3).func)).source
        assert "loopir_cp_async<16>(B_shared" in src and "loopir_cp_async<8>(A_shared" in src
        assert "loopir_cp_async_wait<2>();" in src
        compile_cuda(src, arch=arch, cache_dir=tempfile.mkdtemp())


@pytest.mark.gpu
@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("shape", [(960, 770, 2304), (130, 37, 150), (64, 8, 64)])
def test_pipelined_dense_on_the_gpu(shape, stages: int, pad: bool) -> None:
    M, K, N = shape
    with loopir.PassContext(config={"tir.enable_local_pad": pad}):
        mod = loopir.build(_piped(M, K, N, stages).func, target="cuda")
    check_gemm(mod, M, K, N, seed=M + stages)


def test_the_examples_refuse_a_bad_stage_count() -> None:
    from loopir.errors import ScheduleError

    for bad in (0, 5, True, 2.0):
        with pytest.raises(ScheduleError, match="stages must be an int in 1..4"):
            dense(64, 16, 64, stages=bad)  # type: ignore[arg-type]


def test_the_gemm_space_samples_the_pipeline_depth() -> None:
    from loopir.tune.spaces import gemm_space

    depths = set()
    for seed in range(8):
        sch = loopir.Schedule(dense_func(64, 32, 64), seed=seed)
        gemm_space(sch)
        depths.add("cp_async_commit" in loopir.lower(sch.func).script())
    assert depths == {True, False}


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_the_pipelined_gemm_example(stages: int) -> None:
    from loopir.examples import pipelined_gemm

    sch = pipelined_gemm(70, 40, 90, stages=stages, ki=8)
    low = loopir.lower(sch.func)
    assert ("cp_async_commit" in low.script()) == (stages > 1)
    check_equivalent(dense_func(70, 40, 90), low, thread_order="random")


@pytest.mark.gpu
def test_the_pipelined_gemm_example_on_the_gpu() -> None:
    from loopir.examples import pipelined_gemm

    with loopir.PassContext(config={"tir.enable_local_pad": True}):
        mod = loopir.build(pipelined_gemm(960, 770, 2304).func, target="cuda")
    check_gemm(mod, 960, 770, 2304)
