"""``hopper_gemm(tma=True)`` (issue 32): the A and B tiles fetched by TMA copies on mbarriers.

* The lowered kernel (proven race-free: no RaceCheckWarning) computes on the CPU executor what
  the plain program does, and what ``tma=False`` does bit for bit (the copies and TMA's box
  copy are the same values), on fixed and drawn shapes, stages 2-4, both pipeline orders,
  synchronous and asynchronous ``wgmma``.
* The structure: one ``tma_load`` per operand and step issued by thread 0 after
  ``arrive_expect_tx`` of both boxes' bytes, one mbarrier per stage, every thread waiting with
  the parity ``j // stages % 2``; no ``cp.async``; the knob is in the trace and replays.
* The race check refuses the kernel broken three ways, naming the copy: no wait, the wait on
  another stage's barrier, the next copy issued before the step's barrier (its readers).
* nvcc compiles it for sm_90a without spills; on a GPU it equals float64 and the CPU executor.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.codegen_cuda import lower_for_cuda
from loopir.errors import CodegenError, ScheduleError
from loopir.examples.tensor_core import tc_gemm_func
from loopir.ir import tma as T
from loopir.ir.expr import Call, FloorMod, IntImm, PrimExpr
from loopir.ir.functor import Mutator
from loopir.ir.stmt import Evaluate, For, PrimFunc, Stmt, seq
from loopir.passes.race_check import check_races, find_races
from loopir.passes.race_phase import check_phases
from tests.examples.hopper_forms import hopper_gemm  # the forms of before the default changed
from tests.tensor_intrin.kernels import from_storage, to_storage

#: one warpgroup of 4 warps, 16 x 32 each: quick on the CPU executor
SMALL = dict(block=(64, 32, 64), wn=32)


def _lowered(sch: loopir.Schedule) -> PrimFunc:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RaceCheckWarning
        return loopir.lower(sch.func)


def _inputs(M: int, K: int, N: int, dtype: str, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    a = to_storage(rng.standard_normal((M, K)), dtype)
    b = to_storage(rng.standard_normal((N, K)), dtype)
    return a, b, np.full((M, N), np.nan, "float32")


def _run(func: PrimFunc, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    out = c.copy()
    loopir.build(func, target="cpu", thread_order="random")(a, b, out)
    return out


@settings(max_examples=10, deadline=None)
@given(M=st.integers(1, 140), k8=st.integers(1, 48), N=st.integers(1, 80), stages=st.integers(2, 4),
       wait_first=st.booleans(), async_mma=st.booleans(), dtype=st.sampled_from(["float16", "bfloat16"]))  # fmt: skip
def test_tma_equals_cp_async_and_float64_on_the_cpu(M: int, k8: int, N: int, stages: int, wait_first: bool,
                                                     async_mma: bool, dtype: str) -> None:  # fmt: skip
    """Drawn sizes (K a multiple of 8, 1 to 6 K steps: fewer than the stages too; most off the
    tiles, whose boxes TMA fills with zeros past A and B), every pipeline form: the TMA kernel
    equals the ``cp.async`` one exactly and float64 closely."""
    K = 8 * k8
    params = dict(
        SMALL,
        stages=stages,
        wait_first=wait_first,
        async_mma=async_mma and stages >= 3,
        dtype=dtype,
    )
    a, b, c = _inputs(M, K, N, dtype, seed=M * 1000 + K * 10 + N)
    got = _run(_lowered(hopper_gemm(M, K, N, **params, tma=True)), a, b, c)
    plain = _run(_lowered(hopper_gemm(M, K, N, **params)), a, b, c)
    np.testing.assert_array_equal(got, plain)
    want = from_storage(a, dtype) @ from_storage(b, dtype).T
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * max(np.abs(want).max(), 1.0))


def test_tma_equals_the_unscheduled_program() -> None:
    from loopir.testing import check_equivalent

    sch = hopper_gemm(128, 320, 64, **SMALL, stages=4, tma=True)
    check_equivalent(tc_gemm_func(128, 320, 64, b_trans=True), _lowered(sch), thread_order="random")


def test_structure() -> None:
    """Per step: every thread waits on the stage's barrier with the phase's parity, one block
    barrier, then thread 0 announces both boxes' bytes and issues the two copies."""
    low = _lowered(hopper_gemm(512, 1024, 512, tma=True)).script()  # 128 x 256 x 64, 4 stages
    assert "cp_async" not in low and "async_copy" not in low
    assert 'k_0_0_tma_bar = T.allocate((4,), "uint64", "shared")' in low
    assert low.count("T.ptx_mbarrier_init(k_0_0_tma_bar[") == 4
    steady = low[low.index("k_0_0_steady in T.serial") :]
    assert (
        "T.ptx_mbarrier_wait(k_0_0_tma_bar[(k_0_0_steady + 1) % 4], (k_0_0_steady + 1) // 4 % 2)"
        in steady
    )
    assert (
        "T.ptx_mbarrier_arrive_expect_tx(k_0_0_tma_bar[(k_0_0_steady + 3) % 4], 49152)" in steady
    )  # 16 + 32 KB
    assert ("T.ptx_tma_load(A_shared[(k_0_0_steady + 3) % 4, 0, 0], A[i0_0_0 * 128, k_0_0_steady * 64 + 192], "
            "k_0_0_tma_bar[(k_0_0_steady + 3) % 4], 128, 128, 64)") in steady  # fmt: skip
    assert (
        "B[i1_0_0 * 256, k_0_0_steady * 64 + 192], k_0_0_tma_bar[(k_0_0_steady + 3) % 4], 128, 256, 64)"
        in steady
    )
    body = steady[: steady.index("T.ptx_wgmma_wait(1")]
    assert body.count("tvm_storage_sync") == 1 and "if i0_0_1 == 0 and tma_tx" in body


def test_the_knob_is_in_the_trace_and_replays() -> None:
    sch = hopper_gemm(128, 256, 64, **SMALL, stages=3, tma=True)
    assert 'sch.annotate(l17, "loopir.pipeline_tma", True)' in str(sch.trace)
    replay = loopir.Schedule(tc_gemm_func(128, 256, 64, b_trans=True))
    loopir.Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(replay)
    loopir.assert_structural_equal(sch.func, replay.func)


def test_bad_parameters_are_refused_by_name() -> None:
    with pytest.raises(ScheduleError, match=r"examples.hopper_gemm.*tma must be a bool"):
        hopper_gemm(128, 128, 64, **SMALL, tma=1)  # type: ignore[arg-type]
    with pytest.raises(
        ScheduleError, match=r"tma=True needs K a multiple of 8 .* got K=100, a_prologue=False"
    ):
        hopper_gemm(128, 100, 64, **SMALL, tma=True)
    with pytest.raises(ScheduleError, match=r"a_prologue=True"):
        hopper_gemm(128, 128, 64, **SMALL, tma=True, a_prologue=lambda x: x)
    with pytest.raises(ScheduleError, match=r"tma needs wgmma.*stages >= 2.*stages 1"):
        hopper_gemm(128, 128, 64, **SMALL, tma=True, stages=1)


# --- the race check refuses broken forms ---------------------------------------------------


def _is(s: Stmt, name: str) -> bool:
    return isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.op == name


class _Steady(Mutator):
    """Rewrite the statements of the pipeline's steady loop."""

    def __init__(self, fn: Callable[[list[Stmt]], list[Stmt]]) -> None:
        super().__init__()
        self.fn = fn

    def visit_For(self, s: For) -> Stmt:
        s = self.generic_visit(s)
        if s.loop_var.name.endswith("_steady"):
            return attrs.evolve(s, body=seq(*self.fn(list(s.body.seq))))  # type: ignore[attr-defined]
        return s


def _other_stage(stmts: list[Stmt]) -> list[Stmt]:
    out = []
    for s in stmts:
        if _is(s, "ptx_mbarrier_wait"):
            bar, parity = s.value.args  # type: ignore[attr-defined]
            i = bar.indices[0]
            assert isinstance(i, FloorMod)
            s = Evaluate(T.mbarrier_wait(bar.buffer[FloorMod(i.a + 1, i.b)], parity))
        out.append(s)
    return out


def _no_wait(stmts: list[Stmt]) -> list[Stmt]:
    return [s for s in stmts if not _is(s, "ptx_mbarrier_wait")]


def _copy_first(stmts: list[Stmt]) -> list[Stmt]:
    i = next(
        i
        for i, s in enumerate(stmts)
        if isinstance(s, For) and s.loop_var.name.startswith("tma_tx")
    )
    return [stmts[i], *stmts[:i], *stmts[i + 1 :]]


@pytest.fixture(scope="module")
def pipelined() -> PrimFunc:
    return lower_for_cuda(
        hopper_gemm(128, 512, 128, block=(64, 64, 64), wn=64, stages=3, tma=True).func
    )


def test_the_correct_kernel_is_proven(pipelined: PrimFunc) -> None:
    report = find_races(pipelined)
    assert not report.races and not report.unproven
    check_phases(pipelined)  # check_races' other part (find_races above is its race part)


@pytest.mark.parametrize(("broken", "match"), [
    (_no_wait, r"the TMA copy is not waited on before mbarrier_arrive_expect_tx\(k_0_0_tma_bar\[\(k_0_0_steady "
               r"\+ 2\) % 3\]\) starts another phase of its barrier:\n  T.ptx_tma_load\(A_shared\[1, 0, 0\]"),
    (_other_stage, r"the TMA copy is not waited on after the last iterations of loop k_0_0_steady "
                   r"\(k_0_0_tma_bar\[\(k_0_0_steady \+ 2\) % 3\]\):\n  T.ptx_tma_load\(A_shared\[\(k_0_0_steady \+ 2\)"),
    (_copy_first, r"data race on shared buffer A_shared(.|\n)*T.ptx_tma_load\(A_shared\[\(k_0_0_steady \+ 2\) % 3"),
])  # fmt: skip
def test_broken_pipelines_are_refused_naming_the_copy(
    pipelined: PrimFunc, broken: Callable, match: str
) -> None:
    bad = pipelined.with_body(_Steady(broken).visit(pipelined.body))
    with pytest.raises(CodegenError, match=r"race check \(main\): " + match):
        check_races(bad)


# --- nvcc and the GPU ------------------------------------------------------------------------

NVCC_CASES = {
    "defaults_512": ((512, 512, 512), {}),
    "bf16_out_3_stages": (
        (256, 384, 256),
        dict(dtype="bfloat16", out_dtype="bfloat16", block=(128, 128, 64), wn=128, stages=3),
    ),  # fmt: skip
    "two_barriers_sync_mma": ((512, 512, 512), dict(wait_first=False, async_mma=False)),
    "padded_300x200x260": ((300, 200, 260), {}),  # zeros past A and B from TMA, C through shared
}


@pytest.mark.nvcc
@pytest.mark.parametrize("name", list(NVCC_CASES))
def test_compiles_with_nvcc_for_sm_90a(name: str, tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda, prepare_function

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    shape, params = NVCC_CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        src = prepare_function(hopper_gemm(*shape, **params, tma=True).func).emitted.source
    assert "cp.async.bulk.tensor.2d" in src and "loopir_tma_load_2d(&A_" in src
    assert (
        "__grid_constant__ CUtensorMap A_tmap" in src
        and "loopir_cp_async" not in src.split("__global__")[-1]
    )
    binary = compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)
    for res in binary.resources.values():
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, binary.log


@pytest.mark.gpu
@pytest.mark.parametrize(("shape", "params"), [
    ((512, 512, 512), {}),
    ((1024, 4096, 768), dict(dtype="bfloat16")),
    ((256, 384, 256), dict(block=(128, 128, 64), wn=128, stages=3, out_dtype="float16")),
    ((256, 192, 256), dict(block=(128, 128, 64), wn=128, stages=2, async_mma=False, wait_first=False)),
    ((128, 64, 64), dict(SMALL, stages=4)),  # one K step: all prologue and epilogue
    ((300, 200, 260), dict(out_dtype="float16")),  # padded: TMA's zeros past A and B
    ((1000, 1032, 700), dict(dtype="bfloat16", block=(128, 128, 64), wn=128, stages=3)),
])  # fmt: skip
def test_gpu_equals_float64_and_the_cpu(shape: tuple[int, int, int], params: dict) -> None:
    gpu_equals_float64_and_the_cpu(shape, params)


def gpu_equals_float64_and_the_cpu(shape: tuple[int, int, int], params: dict) -> None:
    """``hopper_gemm(*shape, **params, tma=True)`` on the GPU equals float64, and the CPU
    executor on the smaller shapes (also the warp-specialized form's check)."""
    M, K, N = shape
    dtype = params.get("dtype", "float16")
    out = params.get("out_dtype") or "float32"
    a, b, _ = _inputs(M, K, N, dtype, seed=M + K + N)
    c = to_storage(np.full((M, N), np.nan), out)
    sch = hopper_gemm(M, K, N, **{**params, "tma": True})  # params may name tma too (the persistent tests)
    loopir.build(sch.func, target="cuda")(a, b, c)
    got = from_storage(c, out)
    want = from_storage(a, dtype).astype(np.float64) @ from_storage(b, dtype).astype(np.float64).T
    tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[out]
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(np.abs(want).max(), 1.0))
    if M * N * K <= 256 * 384 * 256:
        cpu = to_storage(np.full((M, N), np.nan), out)
        loopir.build(loopir.lower(sch.func), target="cpu")(a, b, cpu)
        np.testing.assert_allclose(
            got, from_storage(cpu, out), rtol=max(tol, 1e-4), atol=max(tol, 1e-4)
        )


@pytest.mark.gpu
@settings(max_examples=10, deadline=None)
@given(mt=st.integers(1, 4), kt=st.integers(1, 9), nt=st.integers(1, 3), stages=st.integers(2, 4),
       wait_first=st.booleans(), async_mma=st.booleans(), dtype=st.sampled_from(["float16", "bfloat16"]))  # fmt: skip
def test_gpu_equals_the_cpu_on_drawn_shapes(mt: int, kt: int, nt: int, stages: int, wait_first: bool,
                                            async_mma: bool, dtype: str) -> None:  # fmt: skip
    M, K, N = (
        128 * mt - 37 * (mt % 2),
        64 * kt - 8 * (kt % 3),
        128 * nt - 5 * (nt % 2),
    )  # some padded
    params = dict(block=(128, 128, 64), wn=128, stages=stages, wait_first=wait_first,
                  async_mma=async_mma and stages >= 3, dtype=dtype)  # fmt: skip
    sch = hopper_gemm(M, K, N, **params, tma=True)
    a, b, c = _inputs(M, K, N, dtype, seed=M * 90000 + K * 300 + N)
    cpu = c.copy()
    loopir.build(loopir.lower(sch.func), target="cpu")(a, b, cpu)
    loopir.build(sch.func, target="cuda")(a, b, c)
    assert not np.isnan(c).any()
    np.testing.assert_allclose(c, cpu, rtol=1e-4, atol=1e-4 * max(np.abs(cpu).max(), 1.0))


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_every_pipeline_form_is_proven_race_free(stages: int) -> None:
    """K steps from one (all prologue and epilogue) to more than twice the stages (the copy of
    a prologue step in flight into the loop, the loop's last copies waited on after it), both
    orders, synchronous and asynchronous wgmma: no race, no unproven pair, the phases proven."""
    for kt in sorted({1, 2, stages, stages + 1, stages + 2, 9}):
        for wait_first in (True, False):
            for async_mma in (False, True) if stages >= 3 else (False,):
                sch = hopper_gemm(64, 64 * kt, 32, **SMALL, stages=stages, wait_first=wait_first, async_mma=async_mma,
                                  tma=True)  # fmt: skip
                f = lower_for_cuda(sch.func)
                report = find_races(f)
                assert not report.races and not report.unproven, (
                    kt,
                    wait_first,
                    async_mma,
                    report.unproven[:1],
                )
                check_phases(f)  # check_races' other part (find_races above is its race part)


class _Parity(Mutator):
    def __init__(self, parity: Callable[[PrimExpr], PrimExpr]) -> None:
        super().__init__()
        self.parity = parity

    def visit_Evaluate(self, s: Evaluate) -> Stmt:
        v = s.value
        if isinstance(v, Call) and v.op == "ptx_mbarrier_wait":
            return Evaluate(T.mbarrier_wait(v.args[0], self.parity(v.args[1])))
        return s


@pytest.mark.parametrize(("parity", "kt"), [(lambda p: IntImm(0, "int32"), 7), (lambda p: 1 - p, 2),
                                             (lambda p: 1 - p, 7)])  # fmt: skip
def test_a_wait_on_the_wrong_parity_is_refused(
    parity: Callable[[PrimExpr], PrimExpr], kt: int
) -> None:
    """Every wait on parity 0 (a stage's second phase returns at once), or every parity flipped
    (the first returns at once): refused, naming the arrival; the kernel as generated passes."""
    f = lower_for_cuda(hopper_gemm(64, 64 * kt, 32, **SMALL, stages=3, tma=True).func)
    check_phases(f)
    with pytest.raises(CodegenError, match=r"race check \(main\): the mbarrier arrival is waited on with parity "
                       r"(.|\n)*T.ptx_mbarrier_arrive_expect_tx\(k_0_0_tma_bar"):  # fmt: skip
        check_phases(f.with_body(_Parity(parity).visit(f.body)))
