"""The default GPU schedule: every te workload gets a correct, race-free GPU schedule."""

from __future__ import annotations

import re
import warnings

import pytest
from hypothesis import given, settings

import loopir
from loopir.errors import ScheduleError
from loopir.examples import tc_gemm_func
from loopir.examples.dense import dense_func
from loopir.examples.reductions import layernorm_func, rmsnorm_func, row_sum_func, softmax_func
from loopir.examples.transpose import transpose_func
from loopir.passes.race_check import RaceCheckWarning, check_races
from loopir.schedule.default_gpu import default_gpu_schedule, unscheduled_blocks
from loopir.testing import check_equivalent
from loopir.testing.strategies import workloads
from loopir.testing.workloads import WORKLOADS, make_workload


def _examples() -> dict[str, tuple[object, dict[str, int]]]:
    from loopir.ir.expr import Var

    n = Var("n")
    return {
        "softmax_f32": (softmax_func(6, 300), {}),
        "softmax_f16": (softmax_func(3, 2048, "float16"), {}),
        # a warp per row, 4 rows a block (6 rows: the last block half full), the row in registers
        "softmax_f16_warp_rows": (softmax_func(6, 512, "bfloat16"), {}),
        "layernorm_f16_warp_rows": (layernorm_func(n, 256, "float16"), {"n": 7}),
        "rmsnorm_f16_warp_rows": (rmsnorm_func(4, 1024, "float16"), {}),
        "layernorm_f16": (layernorm_func(5, 200, "float16"), {}),
        "rmsnorm": (rmsnorm_func(4, 512), {}),
        "row_sum": (row_sum_func(3, 1000), {}),
        "row_sum_symbolic_rows": (row_sum_func(n, 700), {"n": 5}),
        "transpose": (transpose_func(70, 45), {}),
        "gemm_f16_k100": (make_workload("matmul", M=96, K=100, N=80, dtype="float16").func, {}),
        "gemm_f32": (dense_func(200, 100, 300), {}),
        "gemm_symbolic_m": (dense_func(n, 64, 130), {"n": 77}),
        "gemm_batched": (make_workload("batch_matmul", Bt=2, M=70, K=20, N=65).func, {}),
        # tensor cores: a bias add and a ReLU after a GEMM CUTLASS refuses (K = 100), folded
        # into the copy-out of C's shared tile
        "gemm_f16_bias_relu_k100": (make_workload("matmul_bias_relu", M=96, K=100, N=80, dtype="float16").func,
                                    {}),  # fmt: skip
        # the same with M and N on the tiles: the copy-out in 16-byte vectors, no guards
        "gemm_f16_bias_relu_vec": (make_workload("matmul_bias_relu", M=128, K=48, N=128, dtype="float16").func,
                                   {}),  # fmt: skip
        # tensor cores: a ReLU prologue on A, a bfloat16 result of a float32 accumulator
        "gemm_bf16_relu_batched": (tc_gemm_func(40, 48, 72, "bfloat16", batch=2, out_dtype="bfloat16",
                                                a_prologue=_relu), {}),  # fmt: skip
        # B [N, K] with a ReLU prologue (CUTLASS refuses it): wgmma where the GPU is a Hopper
        # (cuda.default_schedule.wgmma "auto"), else mma.sync; M, N, K off the tiles
        "gemm_f16_btrans_relu": (tc_gemm_func(100, 130, 90, "float16", b_trans=True, out_dtype="float16",
                                              a_prologue=_relu), {}),  # fmt: skip
    }


def _relu(x: object) -> object:
    from loopir.ir import op

    return op.max_(x, op.const(0, x.dtype))  # type: ignore[attr-defined]


CASES = {**{n: (make_workload(n).func, dict(make_workload(n).sizes)) for n in WORKLOADS}, **_examples()}


def _scheduled(func: object) -> tuple[loopir.Schedule, list[str]]:
    sch = loopir.Schedule(func)
    return sch, default_gpu_schedule(sch)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_workload_is_scheduled_correct_and_race_free(name: str) -> None:
    func, sizes = CASES[name]
    sch, lines = _scheduled(func)
    assert lines and not unscheduled_blocks(sch), lines
    check_equivalent(func, sch.func, sizes=sizes)
    check_equivalent(func, sch.func, sizes=sizes, thread_order="random")
    lowered = loopir.lower(sch.func)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RaceCheckWarning)  # proven, not merely not refuted
        check_races(lowered)


EXPECTED_RULES = {
    "softmax_f32": ["rows Y <- M, S (128 threads)"],
    "softmax_f16": ["rows Y <- M, S (128 threads x 8 lanes)"],
    "softmax_f16_warp_rows": ["rows Y <- M, S (32 threads x 8 lanes, 4 rows a block, X in registers)"],
    "layernorm_f16_warp_rows": ["rows Y <- S1, S2 (32 threads x 8 lanes, 4 rows a block)"],  # symbolic rows
    "rmsnorm_f16_warp_rows": ["rows Y <- S (32 threads x 8 lanes, 4 rows a block, X in registers)"],
    "layernorm_f16": ["rows Y <- S1, S2 (128 threads)"],
    "row_sum": ["reduction S (128 threads)"],
    "transpose": ["transpose B (32 x 32 shared tile of A)"],
    "elementwise_chain": ["inline T1", "inline T2", "spatial T3 (24 threads)"],
    "conv2d_nhwc": ["inline Xpad", "spatial Y (75 threads)"],
}


@pytest.mark.parametrize("name", sorted(EXPECTED_RULES))
def test_each_pattern_gets_its_rule(name: str) -> None:
    assert _scheduled(CASES[name][0])[1] == EXPECTED_RULES[name]


def test_a_large_elementwise_function_is_vectorized() -> None:
    from loopir.testing.workloads import elementwise_chain

    sch, lines = _scheduled(elementwise_chain(64, 32).func)
    assert lines[-1] == "spatial T3 (256 threads x 4 lanes)"
    assert "T.vectorized(4)" in sch.func.script()


def test_a_gemm_cutlass_cannot_take_gets_shared_tiles() -> None:
    # float32 inputs: CUDA cores, DietCode's tiles
    sch, lines = _scheduled(make_workload("matmul", M=64, K=100, N=64).func)
    assert lines == ["gemm C (128 x 128 tiles, 256 threads)"]
    text = sch.func.script()
    assert text.count('scope="shared"') == 2 and 'scope="local"' in text
    # float16 inputs without tensor cores: the same
    sch = loopir.Schedule(make_workload("matmul", M=64, K=100, N=64, dtype="float16").func)
    assert default_gpu_schedule(sch, tensor_cores=False) == ["gemm C (128 x 128 tiles, 256 threads)"]


def test_elementwise_consumers_of_a_tensor_core_gemm_are_its_epilogue() -> None:
    """GEMM -> BiasAdd -> ReLU: the chain is inlined into one block and computed as C's tile is
    copied out of shared memory (fragments stored with mma_store_*_shared), in one kernel."""
    from loopir.schedule import tensor_core_gemm as tcg

    func = CASES["gemm_f16_bias_relu_k100"][0]
    sch, lines = _scheduled(func)
    assert lines == ["tensor_core C (64 x 64 x 32 tiles on mma.sync, 4-stage cp.async pipeline)"]
    text = sch.func.script()
    assert '"loopir.tensorized": "mma_store_f16_shared"' in text
    assert 'T.block("BiasAdd")' not in text
    # what match folds, and what it leaves
    m = tcg.match(loopir.Schedule(func), "C")
    assert m is None  # BiasAdd writes an intermediate: inlined first by the rule
    one = loopir.Schedule(func)
    assert tcg.inlinable_consumer(one, "C") == "BiasAdd"
    one.compute_inline(one.get_block("BiasAdd"))
    folded = tcg.match(one, "C")
    assert folded is not None and folded.epilogue == "D" and folded.converts is None
    # M and N on the tiles: the shared tile is copied out in vectors
    from loopir.codegen_cuda import prepare_function

    src = prepare_function(CASES["gemm_f16_bias_relu_vec"][0]).emitted.source
    # D itself, or a pointer into it hoisted before an unrolled copy-out (cuda.hoist_global_base)
    assert re.search(r"\*\((uint4|uint2)\*\)\(D(_base\w*)? \+ ", src), src


def test_a_gemm_result_read_twice_is_not_folded() -> None:
    from loopir import te
    from loopir.schedule import tensor_core_gemm as tcg

    A = te.placeholder((64, 32), "float16", name="A")
    B = te.placeholder((32, 64), "float16", name="B")
    k = te.reduce_axis(32, name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k),
                   name="C")  # fmt: skip
    D = te.compute((64, 64), lambda i, j: C[i, j] + C[j, i], name="D")  # C transposed: not elementwise
    sch = loopir.Schedule(te.create_prim_func([A, B, D]))
    assert tcg.match(sch, "C") is None
    lines = default_gpu_schedule(sch)
    assert "gemm C (128 x 128 tiles, 256 threads)" in lines  # the CUDA-core rule
    assert not any(ln.startswith("tensor_core") for ln in lines)


def test_a_half_precision_gemm_runs_on_tensor_cores() -> None:
    """float16 / bfloat16 GEMMs CUTLASS does not take (K = 100, a ReLU prologue on A, an fp16
    result of an fp32 accumulator): the tensor-core rule, padded where the sizes are off the
    tiles; the prologue computed in A's fetch, the conversion in the fragments' stores."""
    sch, lines = _scheduled(make_workload("matmul", M=64, K=100, N=64, dtype="float16").func)
    assert lines == ["tensor_core C (64 x 64 x 32 tiles on mma.sync, 4-stage cp.async pipeline)"]
    assert "mma_f16f16f16" in sch.func.script()  # float16 C: float16 accumulation, as written

    func = CASES["gemm_bf16_relu_batched"][0]
    sch, lines = _scheduled(func)
    assert lines == ["tensor_core C (32 x 64 x 32 tiles on mma.sync)"]
    text = sch.func.script()
    assert 'T.block("A_prologue")' not in text and 'T.block("D")' not in text  # folded in
    assert "mma_bf16bf16f32" in text
    check_equivalent(func, sch.func)


def test_a_small_gemm_is_one_output_per_thread() -> None:
    # below 64 x 64 outputs a 128 x 128 tile would idle most threads
    assert _scheduled(make_workload("matmul", M=32, K=100, N=64).func)[1] == ["spatial C (256 threads)"]


def test_a_gemv_is_a_cross_thread_reduction() -> None:
    sch, lines = _scheduled(make_workload("matmul", M=1, K=4096, N=64).func)
    # A[i, k] and B[k, j]: k is contiguous in A, so the threads share the reduction
    assert lines == ["reduction C (256 threads x 4 lanes)"]  # float32: runs of 4 (16 bytes) per thread


def test_the_schedule_is_in_the_trace_and_replays(golden) -> None:
    sch, _ = _scheduled(softmax_func(8, 1024))
    golden("schedule/default_gpu_softmax_trace", str(sch.trace))
    golden("schedule/default_gpu_softmax", sch.func.script())
    replayed = loopir.Schedule(softmax_func(8, 1024))
    sch.trace.apply_to(replayed)
    assert loopir.structural_equal(replayed.func, sch.func)


def test_scheduled_blocks_are_left_alone() -> None:
    from loopir.examples import softmax

    sch = softmax(16, 256)
    before = sch.func
    assert default_gpu_schedule(sch) == [] and sch.func is before


def test_only_the_unscheduled_block_of_a_partly_scheduled_function_is_scheduled() -> None:
    w = make_workload("matmul_bias_relu", M=8, K=4, N=16)
    sch = loopir.Schedule(w.func)
    i, j = sch.get_loops(sch.get_block("D"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    lines = default_gpu_schedule(sch)
    assert lines == ["inline BiasAdd", "spatial C (128 threads)"] or lines[-1].startswith("spatial C")
    check_equivalent(w.func, sch.func, thread_order="random")


def test_a_nest_holding_two_blocks_is_refused_naming_the_block() -> None:
    w = make_workload("matmul_bias_relu", M=8, K=4, N=16)
    sch = loopir.Schedule(w.func)
    sch.compute_inline(sch.get_block("BiasAdd"))
    sch.compute_at(sch.get_block("C"), sch.get_loops(sch.get_block("D"))[0])
    with pytest.raises(ScheduleError, match=r"the loops above block 'D' hold other statements"):
        default_gpu_schedule(sch)


def test_interleaved_reduction_loops_are_refused_naming_the_block() -> None:
    sch = loopir.Schedule(make_workload("matmul", M=8, K=4, N=16).func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(i, k, j)
    with pytest.raises(ScheduleError, match=r"block 'C' has its reduction loops between"):
        default_gpu_schedule(sch)


@settings(max_examples=25, deadline=None)
@given(workloads())
def test_default_schedule_preserves_semantics(w) -> None:
    sch, _ = _scheduled(w.func)
    check_equivalent(w.func, sch.func, sizes=w.sizes, thread_order="random")
