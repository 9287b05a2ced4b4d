"""``hopper_gemm(tma=True, warp_specialized=True)`` (issue 32): a producer warpgroup issues the
TMA copies on full/empty mbarriers, the consumer warps wait on them themselves.

* On the CPU executor (whose thread regions run the mbarriers as barriers) the lowered kernel,
  proven race-free by the race check (``race_ws``), equals the ``tma=True`` kernel bit for bit
  and float64 closely, on fixed and drawn shapes, 2-4 stages, synchronous and asynchronous
  ``wgmma``, with and without ``setmaxnreg``.
* The structure: 4 more warps, one elected producer thread waiting on ``empty[j % V]`` from
  ``j >= V``, no block barrier in the K loop, one release per consumer warp; the knob is in the
  trace and replays; bad parameters are refused by name.
* The executor's mbarriers: a kernel whose producer never issues deadlocks there (reported),
  and more arrivals than a phase expects are reported.
* nvcc compiles it for sm_90a without spills (``setmaxnreg`` taking effect: no C7508); on a
  GPU it equals float64 and the CPU executor (next session's H200).
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.codegen_cuda import lower_for_cuda
from loopir.errors import LaunchError, ScheduleError
from loopir.examples.tensor_core import tc_gemm_func
from loopir.ir import tma as T
from loopir.ir.expr import Call, IntImm
from loopir.ir.functor import Mutator
from loopir.ir.stmt import Evaluate, PrimFunc, Stmt
from loopir.passes.race_check import RaceCheckWarning, check_races, find_races
from loopir.passes.race_phase import check_phases
from tests.examples.hopper_forms import hopper_gemm  # the forms of before the default changed
from tests.examples.test_hopper_gemm_tma import (  # as tma=True's tests
    SMALL,
    _inputs,
    _lowered,
    gpu_equals_float64_and_the_cpu,
)
from tests.tensor_intrin.kernels import from_storage


def _run(func: PrimFunc, a: np.ndarray, b: np.ndarray, c: np.ndarray, order: str = "random") -> np.ndarray:
    out = c.copy()
    loopir.build(func, target="cpu", thread_order=order)(a, b, out)
    return out


@settings(max_examples=6, deadline=None)
@given(M=st.integers(1, 140), k8=st.integers(1, 48), N=st.integers(1, 80), stages=st.integers(2, 4),
       async_mma=st.booleans(), regs=st.booleans(), dtype=st.sampled_from(["float16", "bfloat16"]))  # fmt: skip
def test_ws_equals_tma_and_float64_on_the_cpu(M: int, k8: int, N: int, stages: int, async_mma: bool, regs: bool,
                                              dtype: str) -> None:  # fmt: skip
    """Drawn sizes (K a multiple of 8, 1 to 6 K steps: fewer than the stages too; most off the
    tiles): the warp-specialized kernel, proven race-free, equals the ``tma=True`` one exactly
    and float64 closely."""
    K = 8 * k8
    params = dict(SMALL, stages=stages, async_mma=async_mma and stages >= 3, dtype=dtype)
    a, b, c = _inputs(M, K, N, dtype, seed=M * 1000 + K * 10 + N)
    sch = hopper_gemm(M, K, N, **params, tma=True, warp_specialized=(40, 232) if regs else True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RaceCheckWarning)  # proven, not merely not refuted
        check_races(lower_for_cuda(sch.func))
    got = _run(_lowered(sch), a, b, c)
    plain = _run(_lowered(hopper_gemm(M, K, N, **params, tma=True)), a, b, c)
    np.testing.assert_array_equal(got, plain)
    want = from_storage(a, dtype) @ from_storage(b, dtype).T
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * max(np.abs(want).max(), 1.0))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_warp_leaves_a_wgmma_together(seed: int) -> None:
    """Synchronous wgmma, 2 stages: lane 0 releases the version right after the call; the
    executor's lanes compute their parts of it after a rendezvous and leave it after another,
    so that no lane still reads the tile the producer refills (seed 0 read it, without)."""
    M, K, N = 3, 200, 1
    a, b, c = _inputs(M, K, N, "float16", seed=M * 1000 + K * 10 + N)
    sch = hopper_gemm(M, K, N, **SMALL, stages=2, async_mma=False, tma=True, warp_specialized=True)
    out = c.copy()
    loopir.build(_lowered(sch), target="cpu", thread_order="random", seed=seed)(a, b, out)
    want = from_storage(a, "float16").astype(np.float64) @ from_storage(b, "float16").astype(np.float64).T
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3)


def test_ws_equals_the_unscheduled_program() -> None:
    from loopir.testing import check_equivalent

    sch = hopper_gemm(128, 320, 64, **SMALL, stages=3, tma=True, warp_specialized=True)
    check_equivalent(tc_gemm_func(128, 320, 64, b_trans=True), _lowered(sch), thread_order="random")


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_both_thread_orders(order: str) -> None:
    """Sequentially the consumers (lower thread ids) run first and wait: the executor's
    mbarriers let the producer run; the result is the GEMM either way."""
    M, K, N = 64, 320, 32
    a, b, c = _inputs(M, K, N, "float16", seed=3)
    got = _run(_lowered(hopper_gemm(M, K, N, **SMALL, stages=3, tma=True, warp_specialized=True)), a, b, c, order)
    want = from_storage(a, "float16") @ from_storage(b, "float16").T
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


def test_structure() -> None:
    """The defaults' 128 x 256 tile: 8 consumer warps and 4 producer warps; the producer's
    one thread waits on the empty barrier from the 5th step, the consumers on the full one
    with the phase's parity and release one step later (asynchronous wgmma), one arrival per
    warp; no block barrier in either role."""
    low = _lowered(hopper_gemm(512, 1024, 512, tma=True, warp_specialized=True)).script()
    assert "cp_async" not in low
    assert 'T.thread_binding(12, thread="threadIdx.y")' in low
    assert low.count("T.ptx_mbarrier_init(k_0_0_tma_bar[") == 4
    assert low.count("T.ptx_mbarrier_init(k_0_0_empty_bar[") == 4 and "k_0_0_empty_bar[0], 8)" in low
    producer = low[low.index("if i0_0_1 >= 8:") : low.index("else:")]
    assert "if i0_0_1 == 8 and ws_producer_tx == 0:" in producer
    assert "if k_0_0_produce >= 4:\n" in producer
    assert ("T.ptx_mbarrier_wait(k_0_0_empty_bar[k_0_0_produce % 4], (k_0_0_produce // 4 + 1) % 2)"
            in producer)  # fmt: skip
    assert "T.ptx_mbarrier_arrive_expect_tx(k_0_0_tma_bar[k_0_0_produce % 4], 49152)" in producer
    assert "tvm_storage_sync" not in producer
    consumer = low[low.index("for k_0_0_consume in T.serial(16):") :]
    assert "T.ptx_mbarrier_wait(k_0_0_tma_bar[k_0_0_consume % 4], k_0_0_consume // 4 % 2)" in consumer
    assert "T.ptx_mbarrier_arrive(k_0_0_empty_bar[(k_0_0_consume - 1) % 4], 1)" in consumer
    assert "tvm_storage_sync" not in consumer
    assert "mma_store" in consumer  # the epilogue by the consumers, in their branch


def test_the_knob_is_in_the_trace_and_replays() -> None:
    sch = hopper_gemm(128, 256, 64, **SMALL, stages=3, tma=True, warp_specialized=(40, 232))
    assert '"loopir.warp_specialize", [40, 232])' in str(sch.trace)
    replay = loopir.Schedule(tc_gemm_func(128, 256, 64, b_trans=True))
    loopir.Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(replay)
    loopir.assert_structural_equal(sch.func, replay.func)


def test_bad_parameters_are_refused_by_name() -> None:
    with pytest.raises(ScheduleError, match=r"examples.hopper_gemm.*warp_specialized must be .* with tma=True"):
        hopper_gemm(128, 256, 64, **SMALL, warp_specialized=True)
    with pytest.raises(ScheduleError, match=r"warp_specialized must be False, True or \(dec, inc\)"):
        hopper_gemm(128, 256, 64, **SMALL, tma=True, warp_specialized=(41, 232))
    with pytest.raises(ScheduleError, match=r"warp_specialized needs one warp column, block\[1\] == wn"):
        hopper_gemm(128, 256, 128, block=(64, 64, 64), wn=32, tma=True, warp_specialized=True)


class _NoIssue(Mutator):
    """The producer's arrive_expect_tx dropped: the consumers' first wait never completes."""

    def visit_Evaluate(self, s: Evaluate) -> Stmt:
        v = s.value
        if isinstance(v, Call) and v.op == "ptx_mbarrier_arrive_expect_tx":
            return Evaluate(IntImm(0, "int32"))
        return s


class _DoubleRelease(Mutator):
    """Each release arrives twice: more arrivals than the empty barrier's phase expects."""

    def visit_Evaluate(self, s: Evaluate) -> Stmt:
        v = s.value
        if isinstance(v, Call) and v.op == "ptx_mbarrier_arrive":
            return Evaluate(T.mbarrier_arrive(v.args[0], 8))
        return s


def test_the_executor_reports_mbarrier_deadlocks_and_over_arrivals() -> None:
    f = _lowered(hopper_gemm(64, 512, 32, **SMALL, stages=3, tma=True, warp_specialized=True))
    a, b, c = _inputs(64, 512, 32, "float16", seed=1)
    _run(f, a, b, c)
    with pytest.raises(LaunchError, match=r"mbarrier deadlock in a thread region: 129 of 256 threads wait on mbarrier "
                                          r"phases that no thread can complete"):  # fmt: skip
        _run(f.with_body(_NoIssue().visit(f.body)), a, b, c)
    with pytest.raises(LaunchError, match=r"an mbarrier arrival of count 8 where its phase expects 4 more \(of 4\)"):
        _run(f.with_body(_DoubleRelease().visit(f.body)), a, b, c)


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_every_form_is_proven_race_free(stages: int) -> None:
    for kt in sorted({1, 2, stages, stages + 1, 2 * stages + 1}):
        for async_mma in (False, True) if stages >= 3 else (False,):
            f = lower_for_cuda(hopper_gemm(64, 64 * kt, 32, **SMALL, stages=stages, async_mma=async_mma, tma=True,
                                           warp_specialized=True).func)  # fmt: skip
            report = find_races(f)
            assert not report.races and not report.unproven, (kt, async_mma, report.unproven[:1])
            check_phases(f)  # check_races' other part (find_races above is its race part)


# --- nvcc and the GPU ------------------------------------------------------------------------

NVCC_CASES = {
    "defaults_512": ((512, 512, 512), {}),
    "setmaxnreg_512": ((512, 1024, 512), dict(warp_specialized=(40, 232))),
    "bf16_out_3_stages": ((256, 384, 256), dict(dtype="bfloat16", out_dtype="bfloat16", block=(128, 128, 64),
                                                wn=128, stages=3)),
    "sync_mma_2_stages": ((256, 384, 256), dict(block=(128, 128, 64), wn=128, stages=2, async_mma=False)),
    "padded_300x200x260": ((300, 200, 260), {}),  # zeros past A and B from TMA, C through shared
}  # fmt: skip


@pytest.mark.nvcc
@pytest.mark.parametrize("name", list(NVCC_CASES))
def test_compiles_with_nvcc_for_sm_90a(name: str, tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda, prepare_function

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    shape, params = NVCC_CASES[name]
    params = dict(dict(warp_specialized=True), **params)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        src = prepare_function(hopper_gemm(*shape, **params, tma=True).func).emitted.source
    assert "cp.async.bulk.tensor.2d" in src and "mbarrier.arrive.shared::cta.b64" in src
    body = src.split("__global__")[-1]
    assert "__syncthreads" in body and "loopir_mbarrier_arrive(&k_0_0_empty_bar" in body
    regs = isinstance(params["warp_specialized"], tuple)
    assert ("setmaxnreg.dec.sync.aligned.u32 40;" in body) == regs
    assert ("__launch_bounds__(384, 1)" in src) == regs
    binary = compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)
    assert "C7508" not in binary.log  # setmaxnreg not ignored
    for res in binary.resources.values():
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, binary.log


GPU_CASES = [
    ((512, 512, 512), {}),
    ((512, 1024, 512), dict(warp_specialized=(40, 232))),
    ((1024, 4096, 768), dict(dtype="bfloat16")),
    ((256, 384, 256), dict(block=(128, 128, 64), wn=128, stages=3, out_dtype="float16")),
    ((256, 192, 256), dict(block=(128, 128, 64), wn=128, stages=2, async_mma=False)),
    ((128, 64, 64), dict(SMALL, stages=4)),  # one K step
    ((300, 200, 260), dict(out_dtype="float16")),  # padded: TMA's zeros past A and B
    ((1000, 1032, 700), dict(dtype="bfloat16", block=(128, 128, 64), wn=128, stages=3)),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("shape", "params"), GPU_CASES)
def test_gpu_equals_float64_and_the_cpu(shape: tuple[int, int, int], params: dict) -> None:
    gpu_equals_float64_and_the_cpu(shape, dict(dict(warp_specialized=True), **params))


@pytest.mark.gpu
@settings(max_examples=10, deadline=None)
@given(mt=st.integers(1, 4), kt=st.integers(1, 9), nt=st.integers(1, 3), stages=st.integers(2, 4),
       async_mma=st.booleans(), regs=st.booleans(), dtype=st.sampled_from(["float16", "bfloat16"]))  # fmt: skip
def test_gpu_equals_the_cpu_on_drawn_shapes(mt: int, kt: int, nt: int, stages: int, async_mma: bool, regs: bool,
                                            dtype: str) -> None:  # fmt: skip
    M, K, N = 128 * mt - 37 * (mt % 2), 64 * kt - 8 * (kt % 3), 128 * nt - 5 * (nt % 2)  # some padded
    params = dict(block=(128, 128, 64), wn=128, stages=stages, async_mma=async_mma and stages >= 3, dtype=dtype)
    sch = hopper_gemm(M, K, N, **params, tma=True, warp_specialized=(40, 232) if regs else True)
    a, b, c = _inputs(M, K, N, dtype, seed=M * 90000 + K * 300 + N)
    cpu = c.copy()
    loopir.build(loopir.lower(sch.func), target="cpu")(a, b, cpu)
    loopir.build(sch.func, target="cuda")(a, b, c)
    assert not np.isnan(c).any()
    np.testing.assert_allclose(c, cpu, rtol=1e-4, atol=1e-4 * max(np.abs(cpu).max(), 1.0))
