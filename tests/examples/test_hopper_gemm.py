"""``examples.hopper_gemm`` (issue 32): ``wgmma`` from loopir's schedule primitives.

* The lowered function equals numpy (float64) on the CPU executor, whose ``ptx_wgmma`` reads the
  shared tiles through the 128-byte swizzle as the tensor cores do: sequential and random
  thread order, fp16 / bf16, fp32 or half-precision results, padded sizes, a batch axis.
* The schedule tensorizes each warp's 16 x wn x 16 step with ``wgmma`` (no ``ldmatrix``), the
  shared tiles stored with the swizzle the descriptors name; its trace replays.
* It lowers with no RaceCheckWarning and compiles with nvcc for sm_90a without spills; a kernel
  whose warps do not form warpgroups is refused by the emitter, naming the reason.
* ``async_mma``: the same on the CPU (fixed and drawn shapes, against the plain program), the
  steady step's structure, and a model of one thread's ``cp.async`` and ``wgmma`` groups: every
  read after its copies' completion and a barrier, every copy after the retirement of the MMAs
  that read the version before and a barrier (negative controls: waits one group short, copies
  one step too far ahead).
* On a GPU: the same numbers as the CPU executor (fixed and drawn shapes), and as torch.
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
from loopir.errors import CodegenError, ScheduleError
from loopir.examples.tensor_core import tc_gemm_func
from loopir.schedule import tensor_core_gemm as tcg
from tests.examples.hopper_forms import hopper_gemm  # the forms of before the default changed
from tests.tensor_intrin.kernels import from_storage, to_storage

#: one warpgroup of 4 warps, 16 x 32 each: quick on the CPU executor
SMALL = dict(block=(64, 32, 64), wn=32)

CASES = {
    "f16_64x128x64": ((64, 128, 64), dict(SMALL)),
    "f16_128x64x64_2wg": ((128, 64, 64), dict(block=(128, 32, 64), wn=32, stages=2)),
    "bf16_out_bf16": ((64, 128, 32), dict(SMALL, dtype="bfloat16", out_dtype="bfloat16", stages=2)),
    "f16_out16_wn16x2": ((64, 64, 64), dict(block=(64, 32, 64), wn=16, out_dtype="float16")),
    "pad_70x100x40": ((70, 100, 40), dict(SMALL, stages=3)),
    "pad_bf16_33x65x20": ((33, 65, 20), dict(SMALL, dtype="bfloat16")),
    "batch2_pad": ((40, 64, 24), dict(SMALL, batch=2)),
    "wait_first_pad": ((70, 100, 200), dict(SMALL, stages=3, wait_first=True)),
    "wait_first_2wg": ((128, 64, 256), dict(block=(128, 32, 64), wn=32, stages=4, wait_first=True)),
    "async_pad_two_barriers": ((70, 100, 200), dict(SMALL, stages=3, async_mma=True, wait_first=False)),
    "async_wait_first_2wg": ((128, 64, 256), dict(block=(128, 32, 64), wn=32, stages=4, async_mma=True,
                                                  wait_first=True)),
    "async_one_k_step": ((33, 65, 20), dict(SMALL, stages=4, async_mma=True, dtype="bfloat16")),
    "raster_4_rows": ((256, 128, 96), dict(SMALL, raster=4)),  # 4 block rows grouped (L2 reuse)
}


def _inputs(shape: tuple[int, int, int], params: dict, seed: int = 0) -> tuple[np.ndarray, ...]:
    M, K, N = shape
    dtype = params.get("dtype", "float16")
    lead = () if params.get("batch") is None else (params["batch"],)
    rng = np.random.default_rng(seed)
    a = to_storage(rng.standard_normal((*lead, M, K)), dtype)
    b = to_storage(rng.standard_normal((*lead, N, K)), dtype)
    c = to_storage(np.full((*lead, M, N), np.nan), params.get("out_dtype") or "float32")
    return a, b, c


def _tol(params: dict) -> float:
    return {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[params.get("out_dtype") or "float32"]


def _result(c: np.ndarray, params: dict) -> np.ndarray:
    return from_storage(c, params.get("out_dtype") or "float32")


def _reference(a: np.ndarray, b: np.ndarray, params: dict) -> np.ndarray:
    dtype = params.get("dtype", "float16")
    return from_storage(a, dtype) @ np.swapaxes(from_storage(b, dtype), -1, -2)


def _lowered(sch: loopir.Schedule) -> loopir.PrimFunc:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RaceCheckWarning
        return loopir.lower(sch.func)


def _check(got: np.ndarray, want: np.ndarray, tol: float) -> None:
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(np.abs(want).max(), 1.0))


@pytest.mark.parametrize("name", list(CASES))
def test_equals_numpy_on_the_cpu(name: str) -> None:
    shape, params = CASES[name]
    func = _lowered(hopper_gemm(*shape, **params))  # once for both thread orders (CI time)
    for order in ("sequential", "random"):
        a, b, c = _inputs(shape, params)
        loopir.build(func, target="cpu", thread_order=order)(a, b, c)
        _check(_result(c, params), _reference(a, b, params), _tol(params))


@settings(max_examples=4, deadline=None)
@given(M=st.integers(1, 130), K=st.integers(1, 130), N=st.integers(1, 70), stages=st.integers(1, 3),
       dtype=st.sampled_from(["float16", "bfloat16"]))  # fmt: skip
def test_any_shape_equals_numpy(M: int, K: int, N: int, stages: int, dtype: str) -> None:
    """Hypothesis-drawn sizes, most of them off the tiles (padded): the scheduled TensorIR run
    as it is (the executor lowers it) equals numpy in random thread order."""
    params = dict(SMALL, stages=stages, dtype=dtype)
    sch = hopper_gemm(M, K, N, **params)
    a, b, c = _inputs((M, K, N), params, seed=M * 10000 + K * 100 + N)
    loopir.build(sch.func, target="cpu", thread_order="random")(a, b, c)
    _check(_result(c, params), _reference(a, b, params), _tol(params))


@settings(max_examples=6, deadline=None)
@given(M=st.integers(1, 130), K=st.integers(1, 400), N=st.integers(1, 70), stages=st.integers(3, 4),
       wait_first=st.booleans())  # fmt: skip
def test_async_mma_equals_the_plain_program(M: int, K: int, N: int, stages: int, wait_first: bool) -> None:
    """``async_mma``: drawn sizes (1 to 7 K steps, fewer than the stages too), both pipeline
    orders; the lowered kernel (proven race-free, no warning) computes what the unscheduled
    function does, in random thread order."""
    from loopir.testing import check_equivalent

    sch = hopper_gemm(M, K, N, **SMALL, stages=stages, wait_first=wait_first, async_mma=True)
    check_equivalent(tc_gemm_func(M, K, N, b_trans=True), _lowered(sch), thread_order="random")


def test_async_mma_structure() -> None:
    """``async_mma``: each steady K step issues its wgmma without waiting and then retires the
    previous step's (``wait_group 1``, a register fence on the accumulators), the copies run
    ``stages - 2`` steps ahead in ``stages`` versions, and ``wait_group 0`` comes before the
    accumulators are stored."""
    src = _source(hopper_gemm(512, 512, 512, async_mma=True))
    steady = src[src.index("_steady"):]
    steady = steady[:steady.index("\n  }\n")]
    assert "loopir_wgmma_async_m64n256k64_f16(" in steady and "loopir_wgmma_m64n" not in steady
    assert steady.index("loopir_wgmma_async_") < steady.index("loopir_wgmma_wait<1>(); loopir_wgmma_fence_n256(")
    # the copies 2 steps ahead of the compute in 4 versions (the version between: in flight)
    assert "A_shared + (k_0_0_steady + 3) % 4 * 8192" in steady and "&A_shared[(k_0_0_steady + 1) % 4 * 8192" in steady
    assert src.count("loopir_wgmma_wait<0>()") == 1
    tail = src[src.index("loopir_wgmma_wait<0>()"):]
    assert "make_float2(C_warp[" in tail and "wgmma_async" not in tail  # the stores of the accumulators


def test_async_mma_needs_three_stages() -> None:
    with pytest.raises(ScheduleError, match="async_mma needs stages >= 3"):
        hopper_gemm(256, 128, 256, stages=2, async_mma=True)
    with pytest.raises(ScheduleError, match="examples.hopper_gemm: raster must be a positive int, got 0"):
        hopper_gemm(256, 128, 256, raster=0)


def test_schedule_structure() -> None:
    """One wgmma per warp and 16-wide K step, reading the swizzled shared tiles: no ldmatrix,
    no operand fragments; the accumulator is the warp's 16 x wn tiles."""
    sch = hopper_gemm(256, 128, 256, block=(128, 128, 64), wn=128)
    text = sch.func.script()
    assert '"loopir.tensorized": "wgmma_m64n128k64_f16f16f32"' in text
    assert '"loopir.tensorized": "mma_fill_f32"' in text and '"loopir.tensorized": "mma_store_f32_global"' in text
    assert "ldmatrix" not in text and "A_shared_warp" not in text
    low = _lowered(sch).script()
    assert 'A_shared = T.allocate((4, 128, 64), "float16", "shared")' in low
    assert 'B_shared = T.allocate((4, 128, 64), "float16", "shared")' in low
    assert 'C_warp = T.allocate((1, 8, 32, 8), "float32", "warp")' in low
    assert 'T.ptx_wgmma_async("m64n128k64"' in low and 'T.ptx_wgmma_wait(1, "m64n128k64"' in low  # 4 stages


@pytest.mark.parametrize("name", ["pad_70x100x40", "batch2_pad"])
def test_trace_replays(name: str) -> None:
    import json

    shape, params = CASES[name]
    sch = hopper_gemm(*shape, **params)
    func = tc_gemm_func(*shape, params.get("dtype", "float16"), b_trans=True, batch=params.get("batch"))
    replay = loopir.Schedule(func)
    loopir.Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(replay)
    loopir.assert_structural_equal(sch.func, replay.func)


@pytest.mark.parametrize("params, what", [
    (dict(block=(128, 128, 32), wn=128), r"block \(128, 128, 32\) and wn 128"),
    (dict(block=(96, 128, 64)), r"block \(96, 128, 64\)"),
    (dict(wn=24), "wn 24"),
    (dict(block=(128, 192, 64), wn=128), "a multiple of wn"),
    (dict(dtype="float32"), "dtype must be 'float16' or 'bfloat16'"),
    (dict(stages=5), "stages must be an int in 1..4"),
    (dict(out_dtype="int8"), "out_dtype 'int8'"),
])  # fmt: skip
def test_bad_parameters_are_refused(params: dict, what: str) -> None:
    with pytest.raises(ScheduleError, match=what) as info:
        hopper_gemm(256, 128, 256, **params)
    assert info.value.primitive == "examples.hopper_gemm"


# --- CUDA -----------------------------------------------------------------------------------


def _source(sch: loopir.Schedule) -> str:
    from loopir.codegen_cuda import prepare_function

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return prepare_function(sch.func).emitted.source


NVCC_CASES = {
    "defaults_512": ((512, 256, 512), {}),
    "bf16_out_pad": ((300, 200, 260), dict(dtype="bfloat16", out_dtype="bfloat16")),
    "wn256_batch": ((256, 128, 256), dict(block=(128, 256, 64), wn=256, batch=2, stages=3)),
    "two_barriers": ((512, 512, 512), dict(wait_first=False)),
    "defaults_async": ((512, 512, 512), dict(async_mma=True)),
    "async_two_barriers_bf16_pad": ((300, 200, 260), dict(dtype="bfloat16", out_dtype="bfloat16", block=(128, 128, 64),
                                                           wn=128, stages=3, async_mma=True, wait_first=False)),
}


@pytest.mark.parametrize("wait_first, barriers", [(False, 2), (True, 1), (None, 1)])
def test_wait_first_steps_have_one_barrier(wait_first: bool | None, barriers: int) -> None:
    """``wait_first``: a K step waits for its tiles (one group fewer pending: its own is not
    committed yet) and synchronizes, then copies and multiplies; ThreadSync and the race
    checker prove that the step's copies (version ``(k + 3) % 4``) and reads (``k % 4``) need
    no barrier between them. It is the default (None: not given)."""
    params = {} if wait_first is None else {"wait_first": wait_first}
    src = _source(hopper_gemm(512, 512, 512, **params, async_mma=False))  # the copies 3 steps ahead
    steady = src[src.index("_steady"):]
    steady = steady[:steady.index("\n  }\n")]
    assert steady.count("__syncthreads()") == barriers
    assert f"loopir_cp_async_wait<{barriers + 1}>();" in steady


@pytest.mark.nvcc
@pytest.mark.parametrize("name", list(NVCC_CASES))
def test_compiles_with_nvcc(name: str, tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    shape, params = NVCC_CASES[name]
    src = _source(hopper_gemm(*shape, **params))
    assert "wgmma.mma_async.sync.aligned.m64n" in src and "ldmatrix" not in src.split("loopir_wgmma_")[-1]
    assert "fence.proxy.async.shared::cta" in src and "__align__(1024)" in src
    if params.get("async_mma"):
        assert "wgmma.wait_group.sync.aligned %0" in src and "loopir_wgmma_wait<1>();" in src
    binary = compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)
    for res in binary.resources.values():
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, binary.log


def test_default_depth_fits_shared_memory() -> None:
    """The default pipeline depth: 4 stages of the 128 x 256 tiles (192 KB), fewer when the
    padded C tile (128 KB of fp32) must fit too; what does not fit at all is refused by name."""
    deep = _lowered(hopper_gemm(512, 256, 512)).script()
    assert 'A_shared = T.allocate((4, 128, 64), "float16", "shared")' in deep
    shallow = _lowered(hopper_gemm(300, 200, 260)).script()
    assert 'T.allocate((2, 128, 64), "float16", "shared") as A_pad_shared' in shallow
    with pytest.raises(CodegenError, match="bytes of shared memory per block"):
        _source(hopper_gemm(300, 200, 260, stages=4))


def test_warps_that_are_not_warpgroups_are_refused() -> None:
    """Two warps per block (threadIdx.y = 2): wgmma's 4-warp instruction would read rows that no
    warp of the block owns. The emitter refuses it, naming the block shape."""
    sch = loopir.Schedule(tc_gemm_func(32, 64, 32, b_trans=True))
    m = tcg.match(sch, "C")
    assert m is not None
    tcg.schedule_with_pad(sch, m, (32, 32, 64), (16, 32), 1, wgmma=True)
    with pytest.raises(CodegenError, match=r"whole warpgroups.*y = 2"):
        _source(sch)


# --- on the GPU -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in CASES if n.startswith("async")])
def test_every_async_case_is_proven_race_free_for_cuda(name: str) -> None:
    """The CUDA lowering's race check (what ``loopir.build(..., target="cuda")`` runs) on the
    GPU test's asynchronous cases. With fewer K steps than stages the pipeline is all prologue
    and epilogue, no loop: the retiring wait's in-flight read once reached back to the
    kernel's start, over the prologue's copies into the same version (a race reported that
    the barriers after those copies exclude; found on the H200, session 13)."""
    shape, params = CASES[name]
    _source(hopper_gemm(*shape, **params))


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_gpu_matches_the_cpu(name: str) -> None:
    shape, params = CASES[name]
    sch = hopper_gemm(*shape, **params)
    a, b, c = _inputs(shape, params, seed=3)
    cpu = c.copy()
    loopir.build(loopir.lower(sch.func), target="cpu")(a, b, cpu)
    loopir.build(sch.func, target="cuda")(a, b, c)
    _check(_result(c, params), _result(cpu, params), max(_tol(params), 1e-4))


@pytest.mark.gpu
@settings(max_examples=10, deadline=None)
@given(M=st.integers(1, 300), K=st.integers(1, 300), N=st.integers(1, 300),
       dtype=st.sampled_from(["float16", "bfloat16"]), half_out=st.booleans(), stages=st.integers(1, 4),
       wide=st.booleans(), wait_first=st.booleans(), async_mma=st.booleans())  # fmt: skip
def test_gpu_equals_the_cpu_on_drawn_shapes(M: int, K: int, N: int, dtype: str, half_out: bool, stages: int,
                                            wide: bool, wait_first: bool, async_mma: bool) -> None:  # fmt: skip
    """Drawn sizes (padded), both tile shapes, both pipeline orders, synchronous or (3 stages
    or more) asynchronous wgmma: the CUDA kernel equals the CPU executor."""
    tiles = dict(block=(128, 128, 64), wn=128) if wide else dict(SMALL)
    params = dict(tiles, dtype=dtype, stages=stages, out_dtype=dtype if half_out else None, wait_first=wait_first,
                  async_mma=async_mma and stages >= 3)  # fmt: skip
    sch = hopper_gemm(M, K, N, **params)
    a, b, c = _inputs((M, K, N), params, seed=M * 90000 + K * 300 + N)
    cpu = c.copy()
    loopir.build(loopir.lower(sch.func), target="cpu")(a, b, cpu)
    loopir.build(sch.func, target="cuda")(a, b, c)
    _check(_result(c, params), _result(cpu, params), max(_tol(params), 1e-4))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_matches_torch(dtype: str) -> None:
    torch = pytest.importorskip("torch")
    M, K, N = 1024, 512, 768
    mod = loopir.build(hopper_gemm(M, K, N, dtype).func, target="cuda")
    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=tdt, generator=gen)
    b = torch.randn(N, K, device="cuda", dtype=tdt, generator=gen)
    c = torch.empty(M, N, device="cuda", dtype=torch.float32)
    mod(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float().T, rtol=1e-3, atol=1e-2)


def test_a_bias_and_cast_epilogue_is_fused() -> None:
    """The default schedule's wgmma form with te stages after the GEMM (a bias add, a ReLU and a
    cast to fp16): folded into C's stores (the default form since issue 32: the guarded stores
    from the fragments), equal to the unscheduled function."""
    from loopir import te
    from loopir.ir import op
    from loopir.schedule.default_gpu import default_gpu_schedule
    from loopir.testing import check_equivalent

    M, K, N = 96, 64, 80
    A = te.placeholder((M, K), "float16", name="A")
    B = te.placeholder((N, K), "float16", name="B")
    bias = te.placeholder((N,), "float32", name="bias")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("float32") * B[j, k].astype("float32"), axis=k),
                   name="C")  # fmt: skip
    D = te.compute((M, N), lambda i, j: op.max_(C[i, j] + bias[j], op.const(0, "float32")).astype("float16"),
                   name="D")  # fmt: skip
    func = te.create_prim_func([A, B, bias, D])
    sch = loopir.Schedule(func)
    assert default_gpu_schedule(sch, wgmma=True) == [
        "tensor_core C (64 x 64 x 64 tiles on wgmma, 4-stage TMA pipeline, warp-specialized (a producer warpgroup), "
        "persistent over 4 blocks in groups of 2 block rows, async wgmma, guarded stores from the fragments)"
    ]
    check_equivalent(func, sch.func, norm=True)
    assert "loopir_wgmma_async_m64n64k64_f16(" in _source(sch)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("batch", [None, 2])
def test_design_space_candidates_are_correct_and_replay(seed: int, batch: int | None) -> None:
    """``hopper_gemm_space``: sampled warps and pipeline depth; each candidate replays through its
    trace's JSON, lowers race-free and computes what the unscheduled function does."""
    import json

    from loopir.examples.tensor_core import hopper_gemm_space
    from loopir.testing import check_equivalent

    func = tc_gemm_func(128, 64, 256, b_trans=True, batch=batch)
    sch = loopir.Schedule(func, seed=seed)
    hopper_gemm_space(sch, warp_specialized=False)  # the cp.async form (the WS one: test_hopper_gemm_space.py)
    assert [i.kind for i in sch.trace.instructions].count("sample_categorical") == 3
    replay = loopir.Schedule(func)
    loopir.Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(replay)
    loopir.assert_structural_equal(sch.func, replay.func)
    check_equivalent(func, _lowered(sch), thread_order="random")
    assert "wgmma.mma_async" in _source(sch)


def test_design_space_depth_follows_a_changed_decision() -> None:
    """A tuner mutates the sampled depth and replays the trace: the pipeline must follow the new
    decision (the depth was recorded as the literal stage list of the first sample, so every
    replay kept it)."""
    from loopir.examples.tensor_core import hopper_gemm_space

    func = tc_gemm_func(128, 64 * 5, 256, b_trans=True)
    sch = loopir.Schedule(func, seed=0)
    hopper_gemm_space(sch, warp_specialized=False)  # the cp.async form (the WS one: test_hopper_gemm_space.py)
    index = list(sch.trace.decisions)[-1]  # the depth: uniform([2, 3, 4])
    versions = []
    for choice in range(3):
        replay = loopir.Schedule(func)
        sch.trace.with_decision(index, choice).apply_to(replay)
        low = _lowered(replay).script()
        versions.append(next(ln for ln in low.splitlines() if "A_shared = T.allocate(" in ln))
    assert [v.split("(")[2].split(",")[0] for v in versions] == ["2", "3", "4"], versions


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_design_space_depths_wait_first_and_keep_wgmma_in_flight_from_three(depth: int) -> None:
    """The space's sampled depth with hopper_gemm's defaults: waits first at every depth, the
    wgmma retired a step later from depth 3 (the synchronous call at 2); equal to the
    unscheduled function and race-free."""
    from loopir.examples.tensor_core import hopper_gemm_space
    from loopir.testing import check_equivalent

    func = tc_gemm_func(128, 64 * 5, 256, b_trans=True)
    for seed in range(40):
        sch = loopir.Schedule(func, seed=seed)
        hopper_gemm_space(sch, warp_specialized=False)  # the cp.async form (the WS one: test_hopper_gemm_space.py)
        if sch.trace.decisions and list(sch.trace.decisions.values())[-1] == [2, 3, 4].index(depth):
            break
    else:
        pytest.fail(f"no seed sampled depth {depth}")
    low = _lowered(sch).script()
    assert ("T.ptx_wgmma_async(" in low) == (depth >= 3) and ("T.ptx_wgmma(" in low) == (depth < 3)
    check_equivalent(func, _lowered(sch), thread_order="random")


def test_design_space_refuses_b_stored_k_by_n() -> None:
    from loopir.examples.tensor_core import hopper_gemm_space

    with pytest.raises(ScheduleError, match="B \\[N, K\\]"):
        hopper_gemm_space(loopir.Schedule(tc_gemm_func(128, 64, 256)), warp_specialized=False)


def _async_groups_complete(func: loopir.PrimFunc) -> int:
    """Walk a lowered kernel in one thread's program order (every thread runs the same one;
    thread loops at 0) modelling ``cp.async`` groups: a copy joins the open group, a commit
    closes it, ``wait_group n`` completes all but the newest ``n`` closed groups. Each read of a
    multi-buffered shared tile's version (its first index) must come after a barrier that was
    itself after the completion of the group of that version's last copy, the copies of other
    threads being visible only so. Returns the reads checked; fails on the first too early.

    And ``wgmma`` groups: each ``ptx_wgmma_async`` is a group reading the versions of its A and
    B tiles, retired by a ``ptx_wgmma_wait(n)`` that leaves at most ``n`` newer ones in flight
    (a synchronous ``ptx_wgmma`` is retired at once). Every copy into a version must come after
    a barrier that was itself after the retirement of every group that read the version before:
    the other threads' MMAs read it until then."""
    from loopir.arith.evaluate import evaluate
    from loopir.ir.expr import BufferLoad, Call
    from loopir.ir.stmt import Allocate, BufferStore, Evaluate, For, ForKind, IfThenElse, SeqStmt
    from loopir.passes.software_pipeline import ASYNC_COPY_KEY

    versioned = set()
    groups: list[bool] = []  # closed groups: completed?
    state = {"open": 0, "reads": 0}
    last_copy: dict[tuple[object, int], int] = {}  # (buffer, version) -> its group's index
    done_at_barrier: set[int] = set()  # groups complete at the last barrier
    mmas: list[tuple[set, list[bool]]] = []  # wgmma groups: versions read, retired?
    mmas_at_barrier: set[int] = set()  # wgmma groups retired at the last barrier

    def val(e: object, env: dict) -> int:
        return int(evaluate(e, env))  # type: ignore[arg-type]

    def read(load: BufferLoad, env: dict) -> None:
        if load.buffer in versioned:
            key = (load.buffer, val(load.indices[0], env))
            g = last_copy.get(key)
            assert g is None or g in done_at_barrier, f"{load} reads group {g} before it is waited and synced"
            state["reads"] += 1

    def exprs(e: object, env: dict) -> None:
        if isinstance(e, BufferLoad):
            read(e, env)
        for c in getattr(e, "args", ()) or ():
            exprs(c, env)
        for name in ("a", "b", "value", "condition", "true_value", "false_value"):
            if hasattr(e, name) and not isinstance(e, BufferLoad):
                exprs(getattr(e, name), env)

    def walk(s: object, env: dict, in_async: bool) -> None:
        if isinstance(s, SeqStmt):
            for c in s.seq:
                walk(c, env, in_async)
        elif isinstance(s, Allocate):
            if s.buffer.scope == "shared" and len(s.buffer.shape) == 3:
                versioned.add(s.buffer)
            walk(s.body, env, in_async)
        elif isinstance(s, For):
            a = in_async or bool(s.annotations.get(ASYNC_COPY_KEY))
            if s.kind is ForKind.THREAD_BINDING:
                walk(s.body, {**env, s.loop_var: 0}, a)
            else:
                lo = val(s.min, env)
                for i in range(lo, lo + val(s.extent, env)):
                    walk(s.body, {**env, s.loop_var: i}, a)
        elif isinstance(s, IfThenElse):
            if val(s.condition, env):
                walk(s.then_case, env, in_async)
            elif s.else_case is not None:
                walk(s.else_case, env, in_async)
        elif isinstance(s, BufferStore):
            exprs(s.value, env)
            if s.buffer in versioned:
                key = (s.buffer, val(s.indices[0], env))
                for g, (reads, _) in enumerate(mmas):
                    assert key not in reads or g in mmas_at_barrier, \
                        f"{s.buffer.name}[{key[1]}] is overwritten before the wgmma group {g} reading it is retired and synced"
            if in_async and s.buffer in versioned:
                last_copy[(s.buffer, val(s.indices[0], env))] = len(groups)  # the open group
        elif isinstance(s, Evaluate) and isinstance(s.value, Call):
            c = s.value
            if c.op == "loopir.cp_async_commit":
                groups.append(False)
            elif c.op == "loopir.cp_async_wait":
                n = val(c.args[0], env)
                for g in range(len(groups) - n):
                    groups[g] = True
            elif c.op == "tvm_storage_sync":
                done_at_barrier.update(g for g, ok in enumerate(groups) if ok)
                mmas_at_barrier.update(g for g, (_, ok) in enumerate(mmas) if ok[0])
            elif c.op == "ptx_wgmma_wait":
                exprs(c, env)
                for g in range(len(mmas) - val(c.args[0], env)):
                    mmas[g][1][0] = True
            else:
                exprs(c, env)
                if c.op in ("ptx_wgmma", "ptx_wgmma_async"):
                    reads = {(t.buffer, val(t.indices[0], env)) for t in c.args[1:3] if t.buffer in versioned}
                    mmas.append((reads, [c.op == "ptx_wgmma"]))

    walk(func.body, {}, False)
    return int(state["reads"])


@pytest.mark.parametrize("stages, async_mma", [(2, False), (3, False), (4, False), (3, True), (4, True)])
@pytest.mark.parametrize("wait_first", [False, True])
def test_every_read_waits_for_its_copies(stages: int, wait_first: bool, async_mma: bool) -> None:
    """The wait counts of both pipeline orders, checked by modelling the cp.async groups (the
    CPU executor runs copies synchronously, so it cannot tell a wait one group short), and the
    wgmma groups (the executor's MMAs happen at their issue)."""
    func = _lowered(hopper_gemm(64, 64 * 7, 32, block=(64, 32, 64), wn=32, stages=stages, wait_first=wait_first,
                                async_mma=async_mma))  # fmt: skip
    assert _async_groups_complete(func) >= 2 * 7  # A and B of each of the 7 K steps


@pytest.mark.parametrize("wait_first", [False, True])
def test_a_wait_one_group_short_is_caught(wait_first: bool) -> None:
    """The model above fails a kernel whose waits each leave one more group pending."""
    from loopir.ir.expr import Call, IntImm
    from loopir.ir.functor import Mutator

    class Looser(Mutator):
        def visit_Call(self, e: Call) -> object:
            if e.op == "loopir.cp_async_wait":
                return Call(e.dtype, e.op, (IntImm(int(e.args[0].value) + 1, "int32"),))  # type: ignore[attr-defined]
            return self.generic_visit(e)

    func = _lowered(hopper_gemm(64, 64 * 7, 32, block=(64, 32, 64), wn=32, stages=3, wait_first=wait_first))
    with pytest.raises(AssertionError, match="before it is waited and synced"):
        _async_groups_complete(func.with_body(Looser().visit(func.body)))


@pytest.mark.parametrize("wait_first", [False, True])
def test_a_wgmma_wait_one_group_short_is_caught(wait_first: bool) -> None:
    """The wgmma model fails an ``async_mma`` kernel whose steady waits leave two groups in
    flight: a copy then overwrites a version a wgmma still reads."""
    from loopir.ir.expr import Call, IntImm
    from loopir.ir.functor import Mutator

    class Looser(Mutator):
        def visit_Call(self, e: Call) -> object:
            if e.op == "ptx_wgmma_wait" and e.args[0].value == 1:  # type: ignore[attr-defined]
                return Call(e.dtype, e.op, (IntImm(2, "int32"), *e.args[1:]))
            return self.generic_visit(e)

    func = _lowered(hopper_gemm(64, 64 * 7, 32, block=(64, 32, 64), wn=32, stages=3, wait_first=wait_first,
                                async_mma=True))  # fmt: skip
    assert _async_groups_complete(func) >= 2 * 7
    with pytest.raises(AssertionError, match="before the wgmma group .* is retired and synced"):
        _async_groups_complete(func.with_body(Looser().visit(func.body)))


def test_a_copy_one_step_too_far_ahead_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wgmma model also fails the kernel whose copies run ``S - 1`` steps ahead with ``S``
    versions (the pipeline giving the tiles one version fewer than the wait's reads need)."""
    from loopir.passes import software_pipeline as sp

    versions = sp._Rewrite._versions
    monkeypatch.setattr(sp._Rewrite, "_versions",
                        lambda self, *a: {b: v - 1 for b, v in versions(self, *a).items()})  # fmt: skip
    sch = hopper_gemm(64, 64 * 7, 32, block=(64, 32, 64), wn=32, stages=4, async_mma=True)
    with loopir.PassContext(config={"cuda.race_check": False}):
        func = loopir.lower(sch.func)
    with pytest.raises(AssertionError, match="before the wgmma group .* is retired and synced"):
        _async_groups_complete(func)
