"""``examples.tc_gemm`` (issue 31): the tensor-core GEMM built from loopir's schedule primitives.

* The lowered function equals numpy (float64) on the CPU executor, in sequential and random
  thread order, for fp16 / bf16, B row- and column-major, fp32 and fp16 accumulation, with and
  without the swizzle and the cp.async pipeline; and the TensorIR (blocks) with the
  descriptions in place of the implementations equals the unscheduled function.
* Sizes that are not multiples of the block tile are padded (``pad_einsum``: zero-filled
  fetches, C stored through a shared tile with guards), or refused by name with ``pad=False``;
  bad parameters are refused by name.
* It lowers with no RaceCheckWarning and compiles with nvcc for sm_80 and sm_90a, without
  spills, with ldmatrix / mma.sync / cp.async in the source.
* A leading batch dimension (``blockIdx.z``), padded or not.
* On a GPU: the same numbers as the CPU executor, and as torch.matmul at a larger size.
"""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.errors import ScheduleError
from loopir.examples import tc_gemm, tc_gemm_func
from loopir.tensor_intrin.binding import with_descriptions
from loopir.testing import check_equivalent
from tests.tensor_intrin.kernels import from_storage, to_storage

#: small tiles (2 x 2 warps of 32 x 16) so that the CPU executor is quick
SMALL = dict(block=(64, 32, 32), warp=(32, 16))

CASES = {
    "f16_64": ((64, 64, 64), dict(SMALL)),
    "f16_128x96x64": ((128, 96, 64), dict(SMALL)),
    "f16_128x64x96": ((128, 64, 96), dict(SMALL, stages=2)),
    "f16_btrans": ((64, 64, 64), dict(SMALL, b_trans=True)),
    "bf16": ((64, 64, 64), dict(SMALL, dtype="bfloat16")),
    "bf16_btrans_kstep64": ((32, 128, 64), dict(block=(32, 64, 64), warp=(16, 32), b_trans=True,
                                                dtype="bfloat16")),  # fmt: skip
    "f16_acc16": ((64, 64, 64), dict(SMALL, acc="float16", stages=1)),
    "f16_plain": ((64, 64, 64), dict(SMALL, swizzle=False, stages=1)),
    "f16_defaults": ((128, 64, 128), {}),
    # sizes off the block tile: pad_einsum, zero-filled fetches, C through a shared tile
    "pad_40x40x24": ((40, 40, 24), dict(SMALL)),
    "pad_97x100x50_btrans": ((97, 100, 50), dict(SMALL, b_trans=True)),
    "pad_k_only": ((64, 100, 64), dict(SMALL, stages=2)),
    "pad_bf16_33x70x129": ((33, 70, 129), dict(block=(32, 64, 64), warp=(16, 32), dtype="bfloat16")),
    "pad_acc16_mn_only": ((50, 64, 70), dict(SMALL, acc="float16")),
    # a leading batch dimension on blockIdx.z
    "batch3": ((64, 64, 32), dict(SMALL, batch=3)),
    "batch2_pad_btrans": ((40, 70, 24), dict(SMALL, batch=2, b_trans=True)),
    "batch2_bf16_plain": ((64, 64, 32), dict(SMALL, batch=2, dtype="bfloat16", swizzle=False)),
    # fragments double-buffered in registers (the K steps of a shared tile pipelined)
    "f16_frag2": ((64, 64, 64), dict(SMALL, fragment_stages=2)),
    "pad_frag2_kstep64_btrans": ((40, 130, 50), dict(block=(32, 64, 64), warp=(16, 32), b_trans=True,
                                                     fragment_stages=2)),  # fmt: skip
    "batch2_frag2": ((64, 64, 32), dict(SMALL, batch=2, fragment_stages=2, stages=1)),
    # thread blocks in groups of block rows (L2 locality): 4 rows of 64 in groups of 2 / of 4
    "raster2_pad_btrans": ((200, 64, 96), dict(SMALL, raster=2, b_trans=True)),
    "raster4_batch2": ((256, 32, 64), dict(SMALL, raster=8, batch=2)),
    # a float32 accumulator stored as the half-precision result D (converting stores)
    "f16_out16": ((64, 64, 64), dict(SMALL, out_dtype="float16")),
    "bf16_outbf16_btrans": ((64, 64, 64), dict(SMALL, dtype="bfloat16", out_dtype="bfloat16", b_trans=True)),
    "pad_out16_97x100x50": ((97, 100, 50), dict(SMALL, out_dtype="float16")),
    "batch2_pad_outbf16": ((40, 70, 24), dict(SMALL, batch=2, dtype="bfloat16", out_dtype="bfloat16")),
}


def _inputs(shape: tuple[int, int, int], params: dict, seed: int = 0) -> tuple[np.ndarray, ...]:
    M, K, N = shape
    dtype = params.get("dtype", "float16")
    lead = () if params.get("batch") is None else (params["batch"],)
    rng = np.random.default_rng(seed)
    a = to_storage(rng.standard_normal((*lead, M, K)), dtype)
    b = to_storage(rng.standard_normal((*lead, *((N, K) if params.get("b_trans") else (K, N)))), dtype)
    out = params.get("out_dtype") or params.get("acc", "float32")
    c = to_storage(np.full((*lead, M, N), np.nan), out)
    return a, b, c


def _out_tol(params: dict) -> float:
    """Relative tolerance of the result: fp32 accumulation of exact products differs from
    float64 only in the summation order; an fp16 accumulator, or a half-precision result,
    rounds (bf16 keeps 8 bits)."""
    out = params.get("out_dtype") or params.get("acc", "float32")
    return {"float32": 1e-5, "float16": 2e-2 if params.get("acc") == "float16" else 2e-3,
            "bfloat16": 1e-2}[out]  # fmt: skip


def _result(c: np.ndarray, params: dict) -> np.ndarray:
    return from_storage(c, params.get("out_dtype") or params.get("acc", "float32"))


def _reference(a: np.ndarray, b: np.ndarray, params: dict) -> np.ndarray:
    dtype = params.get("dtype", "float16")
    am, bm = from_storage(a, dtype), from_storage(b, dtype)
    return am @ (np.swapaxes(bm, -1, -2) if params.get("b_trans") else bm)


def _lowered(sch: loopir.Schedule) -> loopir.PrimFunc:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return loopir.lower(sch.func)


@pytest.mark.parametrize("name", list(CASES))
def test_equals_numpy_on_the_cpu(name: str) -> None:
    shape, params = CASES[name]
    func = _lowered(tc_gemm(*shape, **params))  # once for both thread orders (CI time)
    want = None
    # Random thread order (the race check) for every case; sequential order, another build of the
    # executor's, for every fourth (CI's time: each build is a gcc compile)
    orders = ("sequential", "random") if list(CASES).index(name) % 4 == 0 else ("random",)
    for order in orders:
        a, b, c = _inputs(shape, params)
        loopir.build(func, target="cpu", thread_order=order)(a, b, c)
        want = _reference(a, b, params) if want is None else want
        got = _result(c, params)
        assert not np.isnan(got).any(), order
        tol = _out_tol(params)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max(), err_msg=order)


@pytest.mark.parametrize("shape, params", [
    ((32, 32, 16), dict(block=(32, 16, 32), warp=(16, 16), stages=1)),
    ((32, 32, 32), dict(block=(32, 32, 32), warp=(16, 16), stages=1, swizzle=False, vec=1)),
    ((96, 100, 80), dict(block=(64, 64, 32), warp=(32, 32))),
])  # fmt: skip
def test_scheduled_tensorir_equals_numpy_on_the_cpu(shape, params: dict) -> None:
    """The scheduled TensorIR itself (not lowered by the test): its warp-collective calls make
    its thread loops fiber regions on the CPU executor, which must then order a warp's
    ldmatrix after the other warps' parts of the shared fetch. Regression: warp 0 read rows of
    A that warp 1 had not fetched yet (K steps of 2+ fragments; 2+ warps)."""
    sch = tc_gemm(*shape, **params)
    a, b, c = _inputs(shape, params)
    loopir.build(sch.func, target="cpu")(a, b, c)
    want = _reference(a, b, params)
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("name", ["f16_128x96x64", "f16_btrans", "bf16", "batch2_pad_btrans"])
def test_tensorir_with_descriptions_equals_the_unscheduled_function(name: str) -> None:
    """Before lowering, the schedule's blocks with each intrinsic's description (a sequential
    nest) compute what the unscheduled function does. Without the swizzle: it is applied after
    tensorize, to the implementation's row addresses (16-byte rows stay whole), and a
    description indexes its parameter as a strided tile, which a swizzled tile is not."""
    shape, params = CASES[name]
    sch = tc_gemm(*shape, **params, swizzle=False)
    loopir.verify(sch.func)
    func = tc_gemm_func(*shape, params.get("dtype", "float16"), b_trans=params.get("b_trans", False),
                        batch=params.get("batch"))
    check_equivalent(func, with_descriptions(sch.func))


def test_schedule_structure() -> None:
    """The intrinsics the schedule tensorizes with, the warps, the swizzle and the pipeline."""
    sch = tc_gemm(256, 128, 256)
    text = sch.func.script()
    for intrin in ("mma_ldmatrix_f16_a", "mma_ldmatrix_f16_b", "mma_f16f16f32", "mma_fill_f32",
                   "mma_store_f32_global"):  # fmt: skip
        assert f'"loopir.tensorized": "{intrin}"' in text
    assert 'thread="threadIdx.y"' in text and 'thread="threadIdx.z"' in text
    assert "software_pipeline_stage" in text and "^" in text
    low = _lowered(sch).script()
    # 4 stages of the 128x32 A tile and the 32x128 B tile
    assert 'A_shared = T.allocate((4, 128, 32), "float16", "shared")' in low
    assert 'B_shared = T.allocate((4, 32, 128), "float16", "shared")' in low
    assert 'C_warp = T.allocate((4, 4, 32, 8), "float32", "warp")' in low
    bt = tc_gemm(128, 64, 128, b_trans=True, dtype="bfloat16").func.script()
    assert '"loopir.tensorized": "mma_ldmatrix_bf16_b_trans"' in bt


@pytest.mark.parametrize("shape, what", [
    ((100, 64, 128), "M = 100 is not a multiple of the block tile's 128"),
    ((128, 64, 96), "N = 96 is not a multiple of the block tile's 128"),
    ((128, 100, 128), "K = 100 is not a multiple of the block tile's 32"),
])  # fmt: skip
def test_sizes_off_the_block_tile_are_refused_without_padding(shape, what: str) -> None:
    with pytest.raises(ScheduleError, match=what) as info:
        tc_gemm(*shape, pad=False)
    assert info.value.primitive == "examples.tc_gemm"
    assert "predicate that blockize cannot divide" in str(info.value)


def test_padding_only_where_needed() -> None:
    """pad_einsum grows only what a size off the tile needs: K alone pads A and B (C is stored
    straight to global memory); M pads A and C (stored through a shared tile)."""
    k_only = tc_gemm(128, 100, 128).func.script()
    assert "A_pad" in k_only and "B_pad" in k_only and "C_pad" not in k_only
    assert '"loopir.tensorized": "mma_store_f32_global"' in k_only
    m_only = tc_gemm(100, 64, 128).func.script()
    assert "A_pad" in m_only and "C_pad" in m_only and "B_pad" not in m_only
    assert '"loopir.tensorized": "mma_store_f32_shared"' in m_only
    assert "C_pad" not in tc_gemm(128, 64, 128).func.script()


def test_fragment_double_buffering() -> None:
    """fragment_stages=2 pipelines the K steps of a shared tile: the warp buffers allocated
    in that loop get two versions (hoisted around it), and step k + 1's ldmatrix comes before
    step k's mma."""
    src = _source(tc_gemm(128, 256, 128, block=(64, 64, 64), warp=(32, 32), fragment_stages=2))
    assert "half A_shared_warp[32];" in src and "half B_shared_warp[32];" in src  # 2 x 16 per lane
    steady = src[src.index("k_0_1_steady"):]
    next_load = steady.index("&A_shared_warp[(k_0_1_steady + 1) % 2 * 16")
    this_mma = steady.index("loopir_mma_m16n8k16(&C_warp")
    assert next_load < this_mma
    assert "&A_shared_warp[k_0_1_steady % 2 * 16" in steady[this_mma:]


def test_half_precision_result_is_converted_as_it_is_stored() -> None:
    """``out_dtype``: D = C.astype(out) is folded into the fragments' stores (a converting
    mma_store, vectorized in pairs), or into the padded tile's copy-out; no float32 C is left
    in global memory."""
    plain = tc_gemm(128, 64, 128, out_dtype="float16")
    assert [p.name for p in plain.func.params] == ["A", "B", "D"]
    assert '"loopir.tensorized": "mma_store_f32_f16_global"' in plain.func.script()
    src = _source(plain)
    # D itself, or a pointer into it hoisted before an unrolled store loop (cuda.hoist_global_base)
    assert re.search(r"\*\((uint1|half2)\*\)\(D(_base\w*)? \+ ", src), src
    padded = tc_gemm(100, 64, 128, out_dtype="bfloat16", dtype="bfloat16").func.script()
    assert '"loopir.tensorized": "mma_store_f32_shared"' in padded
    assert "T.Cast(\"bfloat16\", C_pad_shared" in padded or 'T.Cast("bfloat16", C_pad' in padded


@pytest.mark.parametrize("params, what", [
    (dict(dtype="float32"), "dtype must be 'float16' or 'bfloat16'"),
    (dict(dtype="bfloat16", acc="float16"), "acc 'float16' with dtype 'bfloat16'"),
    (dict(block=(128, 128, 24)), "multiples of 16"),
    (dict(warp=(48, 64)), "must divide the block tile"),
    (dict(stages=0), "stages must be an int in 1..4"),
    (dict(vec=16), "vec must be 1, 2, 4 or 8"),
    (dict(block=(256, 256, 32), warp=(32, 32)), "64 warps per block"),
    (dict(batch=0), "batch must be a positive int or None"),
    (dict(out_dtype="float32", acc="float16"), "out_dtype 'float32' with acc 'float16'"),
    (dict(out_dtype="int8"), "out_dtype 'int8' with acc 'float32'"),
    (dict(fragment_stages=3), "fragment_stages must be 1 or 2"),
    (dict(raster=0), "raster must be a positive int"),
])  # fmt: skip
def test_bad_parameters_are_refused(params: dict, what: str) -> None:
    with pytest.raises(ScheduleError, match=what):
        tc_gemm(256, 64, 256, **params)


# --- CUDA -----------------------------------------------------------------------------------


def _source(sch: loopir.Schedule) -> str:
    from loopir.codegen_cuda import prepare_function

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RaceCheckWarning
        return prepare_function(sch.func).emitted.source


NVCC_CASES = {
    "defaults": ((512, 256, 512), {}),
    "bf16_btrans_4stages": ((256, 128, 256), dict(dtype="bfloat16", b_trans=True, stages=4)),
    "f16_acc16_64k": ((256, 128, 256), dict(acc="float16", block=(128, 128, 64))),
    "pad_k100": ((256, 100, 256), {}),
    "pad_300x200x260": ((300, 200, 260), {}),
    "batch32_512x128x512": ((512, 128, 512), dict(batch=32)),
    "out16_512x256x512": ((512, 256, 512), dict(out_dtype="float16")),
    "pad_outbf16_300x200x260": ((300, 200, 260), dict(dtype="bfloat16", out_dtype="bfloat16")),
}


@pytest.mark.nvcc
@pytest.mark.parametrize("name", list(NVCC_CASES))
def test_compiles_with_nvcc(name: str, tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    shape, params = NVCC_CASES[name]
    src = _source(tc_gemm(*shape, **params))  # lowered once for both architectures
    assert "ldmatrix.sync.aligned.m8n8.x4" in src and "mma.sync.aligned.m16n8k16" in src
    assert "loopir_cp_async<" in src
    for arch in ("sm_80", "sm_90a"):
        binary = compile_cuda(src, arch=arch, cache_dir=tmp_path)
        for res in binary.resources.values():
            assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, (arch, binary.log)


# --- on the GPU -----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["f16_128x96x64", "f16_btrans", "bf16", "f16_acc16", "f16_defaults",
                                  "pad_97x100x50_btrans", "pad_bf16_33x70x129", "pad_acc16_mn_only",
                                  "batch2_pad_btrans", "f16_out16", "bf16_outbf16_btrans",
                                  "pad_out16_97x100x50", "batch2_pad_outbf16", "f16_frag2",
                                  "pad_frag2_kstep64_btrans", "raster2_pad_btrans", "raster4_batch2"])
def test_gpu_matches_the_cpu(name: str) -> None:
    shape, params = CASES[name]
    sch = tc_gemm(*shape, **params)
    a, b, c = _inputs(shape, params, seed=3)
    cpu = c.copy()
    loopir.build(loopir.lower(sch.func), target="cpu")(a, b, cpu)
    loopir.build(sch.func, target="cuda")(a, b, c)
    tol = max(_out_tol(params), 1e-4)
    want = _result(cpu, params)
    np.testing.assert_allclose(_result(c, params), want, rtol=tol, atol=tol * np.abs(want).max())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("b_trans", [False, True])
def test_gpu_matches_torch(dtype: str, b_trans: bool) -> None:
    torch = pytest.importorskip("torch")
    M, K, N = 1024, 512, 768
    sch = tc_gemm(M, K, N, dtype, b_trans=b_trans, block=(128, 128, 32), warp=(64, 64), stages=3)
    mod = loopir.build(sch.func, target="cuda")
    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=tdt, generator=gen)
    b = torch.randn((N, K) if b_trans else (K, N), device="cuda", dtype=tdt, generator=gen)
    c = torch.empty(M, N, device="cuda", dtype=torch.float32)
    mod(a, b, c)
    want = a.float() @ (b.float().T if b_trans else b.float())
    torch.testing.assert_close(c, want, rtol=1e-3, atol=1e-2)


@settings(max_examples=4, deadline=None)
@given(M=st.integers(1, 80), K=st.integers(1, 80), N=st.integers(1, 80), b_trans=st.booleans(),
       stages=st.integers(1, 3))  # fmt: skip
def test_any_shape_equals_numpy(M: int, K: int, N: int, b_trans: bool, stages: int) -> None:
    """Hypothesis-drawn sizes, most of them off the 16x16x16 tiles: padded, and equal to numpy
    in random thread order."""
    params = dict(SMALL, b_trans=b_trans, stages=stages)
    func = _lowered(tc_gemm(M, K, N, **params))
    a, b, c = _inputs((M, K, N), params, seed=M * 10000 + K * 100 + N)
    loopir.build(func, target="cpu", thread_order="random")(a, b, c)
    want = _reference(a, b, params)
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=1e-5, atol=1e-5 * max(np.abs(want).max(), 1.0))


@pytest.mark.gpu
@settings(max_examples=12, deadline=None)
@given(M=st.integers(1, 200), K=st.integers(1, 200), N=st.integers(1, 200), b_trans=st.booleans(),
       dtype=st.sampled_from(["float16", "bfloat16"]), half_out=st.booleans(), stages=st.integers(1, 4))  # fmt: skip
def test_gpu_equals_the_cpu_on_drawn_shapes(M: int, K: int, N: int, b_trans: bool, dtype: str, half_out: bool,
                                            stages: int) -> None:  # fmt: skip
    """Hypothesis-drawn sizes, most not multiples of 16 (padded): the CUDA kernel equals the CPU
    executor's ldmatrix / mma semantics (fp32 accumulation in another order; a half-precision
    result may round the other way)."""
    params = dict(SMALL, b_trans=b_trans, dtype=dtype, stages=stages, out_dtype=dtype if half_out else None)
    sch = tc_gemm(M, K, N, **params)
    a, b, c = _inputs((M, K, N), params, seed=M * 40000 + K * 200 + N)
    cpu = c.copy()
    loopir.build(loopir.lower(sch.func), target="cpu")(a, b, cpu)
    loopir.build(sch.func, target="cuda")(a, b, c)
    want = _result(cpu, params)
    tol = max(_out_tol(params), 1e-4)
    np.testing.assert_allclose(_result(c, params), want, rtol=tol, atol=tol * max(np.abs(want).max(), 1.0))


@pytest.mark.parametrize("name", ["pad_97x100x50_btrans", "batch2_pad_btrans", "bf16"])
def test_trace_replays(name: str) -> None:
    """The schedule's trace (fragment maps and swizzles recorded as lambda text) replays through
    its JSON and its Python text to the same function."""
    import json

    shape, params = CASES[name]
    sch = tc_gemm(*shape, **params)
    func = tc_gemm_func(*shape, params.get("dtype", "float16"), b_trans=params.get("b_trans", False),
                        batch=params.get("batch"))
    replay = loopir.Schedule(func)
    loopir.Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(replay)
    loopir.assert_structural_equal(sch.func, replay.func)
    ns: dict = {}
    exec(sch.trace.as_python(), ns)  # noqa: S102 - the trace's own Python text
    again = loopir.Schedule(func)
    ns["apply_trace"](again)
    loopir.assert_structural_equal(sch.func, again.func)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("b_trans, batch", [(False, None), (True, 2)])
def test_design_space_candidates_are_correct_and_replay(seed: int, b_trans: bool, batch: int | None) -> None:
    """``tc_gemm_space``: sampled warps, warp tiles and pipeline depth; each candidate replays
    through its trace's JSON, lowers race-free and computes what the unscheduled function does."""
    import functools
    import json

    from loopir.examples.tensor_core import tc_gemm_space

    func = tc_gemm_func(256, 64, 256, b_trans=b_trans, batch=batch)
    sch = loopir.Schedule(func, seed=seed)
    functools.partial(tc_gemm_space, b_trans=b_trans)(sch)
    kinds = [i.kind for i in sch.trace.instructions]
    assert kinds.count("sample_categorical") == 5
    replay = loopir.Schedule(func)
    loopir.Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(replay)
    loopir.assert_structural_equal(sch.func, replay.func)
    check_equivalent(func, _lowered(sch), thread_order="random")
