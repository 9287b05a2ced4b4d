"""CUDA emission of the tensor-core calls: inline PTX, every kernel compiled with nvcc for sm_80
and sm_90a, and (on a GPU) the same numbers as the CPU executor."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import loopir
from loopir.codegen_cuda import compile_cuda, emit_cuda, emit_function, prepare_function
from loopir.errors import CodegenError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Var
from loopir.ir.stmt import Allocate, Evaluate, For, ForKind, PrimFunc
from loopir.passes import ThreadSync
from tests.tensor_intrin.kernels import Gemm, from_storage, gemm_one_nest, tile_16x8, to_storage

KERNELS = {
    "f16_f32": Gemm(),
    "f16_f32_2x2_shared": Gemm(M=64, N=64, K=48, warps_m=2, warps_n=2, store="shared"),
    "bf16_f32_btrans": Gemm(dtype="bfloat16", b_trans=True),
    "f16_f32_atrans": Gemm(a_trans=True, warps_m=2, warps_n=1, M=64),
    "bf16_atrans_btrans": Gemm(dtype="bfloat16", a_trans=True, b_trans=True, store="shared"),
    "f16_f16": Gemm(acc="float16"),
    "f16_f16_shared": Gemm(acc="float16", store="shared", warps_m=2, M=64),
}
TILES = {"x2": (1, False), "x1": (2, True), "x2_3steps": (3, False)}


def _source(func: PrimFunc) -> str:
    """Lowered for CUDA, emitted and race-checked (a proven race raises)."""
    return prepare_function(func).emitted.source


def _compile(source: str, arch: str, cache: Path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    return compile_cuda(source, arch=arch, cache_dir=cache)


@pytest.mark.nvcc
@pytest.mark.filterwarnings("error::loopir.passes.race_check.RaceCheckWarning")  # proven race-free
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", [*KERNELS, *(f"tile_{t}" for t in TILES)])
def test_every_kernel_compiles(name: str, arch: str, cuda_cache: Path) -> None:
    if name.startswith("tile_"):
        func = tile_16x8(*TILES[name.removeprefix("tile_")])
    else:
        func = ThreadSync()(KERNELS[name].func())
    _compile(_source(func), arch, cuda_cache)


def test_source_uses_ldmatrix_mma_and_registers() -> None:
    src = _source(ThreadSync()(Gemm(store="shared").func()))
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in src
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in src
    assert "__cvta_generic_to_shared" in src
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src
    assert "loopir_ldmatrix<4, false>(&A_warp[" in src and "loopir_ldmatrix<4, true>(&B_warp[" in src
    assert "half A_warp[8];" in src and "float C_warp[16];" in src  # per-thread registers
    assert "__syncthreads();" in src
    bf = _source(ThreadSync()(Gemm(dtype="bfloat16", acc="float32").func()))
    assert "loopir_mma_m16n8k16(&C_warp[" in bf and "row.col.f32.bf16.bf16.f32" in bf
    x1 = _source(tile_16x8(2, True))
    assert "loopir_ldmatrix<1, true>" in x1 and "loopir_ldmatrix<2" not in x1.split("extern")[1]
    assert "loopir_ldmatrix<2, true>" in _source(tile_16x8(1, False)).split("extern")[1]


@pytest.mark.nvcc
def test_older_architectures_are_refused_by_the_source(cuda_cache: Path) -> None:
    with pytest.raises(CodegenError, match="need sm_80 or newer"):
        _compile(_source(tile_16x8()), "sm_75", cuda_cache)


def _one_ldmatrix(col0: int) -> PrimFunc:
    S = Buffer("S", (16, 24), "float16", scope="shared")
    W = Buffer("W", (32, 8), "float16", scope="warp")
    tx, bx = Var("tx"), Var("bx")
    body = For(tx, 0, 32, ForKind.THREAD_BINDING,
               Evaluate(op.ptx_ldmatrix(W[tx, 0], S[tx % 16, col0 + 8 * (tx // 16)])), thread_tag="threadIdx.x")  # fmt: skip
    return PrimFunc((), For(bx, 0, 1, ForKind.THREAD_BINDING, Allocate(S, Allocate(W, body)),
                            thread_tag="blockIdx.x"))  # fmt: skip


def test_unaligned_ldmatrix_row_is_refused() -> None:
    _source(_one_ldmatrix(8))
    with pytest.raises(CodegenError, match="must be 16-byte aligned"):
        _source(_one_ldmatrix(4))


def test_fragments_must_be_lowered_first() -> None:
    func = ThreadSync()(Gemm().func())
    with pytest.raises(CodegenError, match="LowerWarpMemory"):
        emit_cuda(func)


# --- on the GPU: the same numbers as the CPU executor -------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(KERNELS))
def test_gemm_on_the_gpu_matches_the_cpu(name: str) -> None:
    gemm = KERNELS[name]
    func = gemm.func()
    rng = np.random.default_rng(5)
    a, b, c = gemm.inputs(rng)
    cpu = c.copy()
    loopir.build(ThreadSync()(func), target="cpu")(a, b, cpu)
    loopir.build(func, target="cuda")(a, b, c)
    got, want = from_storage(c, gemm.acc), from_storage(cpu, gemm.acc)
    tol = 2e-2 if gemm.acc == "float16" else 1e-4
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    np.testing.assert_allclose(got, gemm.reference(a, b), rtol=5 * tol, atol=5 * tol * np.abs(want).max())


@pytest.mark.gpu
@pytest.mark.parametrize("tile", list(TILES))
def test_tile_16x8_on_the_gpu_matches_the_cpu(tile: str) -> None:
    x_steps, b_x1 = TILES[tile]
    func = tile_16x8(x_steps, b_x1)
    rng = np.random.default_rng(6)
    a = rng.standard_normal((16, 16 * x_steps)).astype(np.float16)
    b = rng.standard_normal((16 * x_steps, 8)).astype(np.float16)
    cpu = np.full((16, 8), np.nan, np.float32)
    gpu = cpu.copy()
    loopir.build(func, target="cpu")(a, b, cpu)
    loopir.build(func, target="cuda")(a, b, gpu)
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-4)


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_fragments_stay_in_registers(arch: str, cuda_cache: Path) -> None:
    """With constant offsets, the fragment arrays (and the memcpy to and from the 32-bit
    registers of the PTX) compile to registers: no stack frame, no spills."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    binary = compile_cuda(_source(tile_16x8(2, True)), arch=arch, cache_dir=cuda_cache, output="cubin")
    (res,) = binary.resources.values()
    assert (res.stack_frame_bytes, res.spill_store_bytes, res.spill_load_bytes) == (0, 0, 0)


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_one_nest_gemm_compiles_without_stack(dtype: str, arch: str, cuda_cache: Path) -> None:
    """Through the whole CUDA lowering (compaction included): fragments of one warp's tile,
    in registers; the race checker proves the tile stores (only the test kernel's plain
    cooperative copies into shared memory are beyond its prover)."""
    import warnings

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        source = emit_function(loopir.lower(gemm_one_nest(dtype=dtype), target="cuda")).emitted.source
    assert "half A_warp[8];" in source or "nv_bfloat16 A_warp[8];" in source
    unproven = {str(w.message).split(": ")[1] for w in caught}
    assert unproven <= {"A_shared", "B_shared"}, unproven
    binary = compile_cuda(source, arch=arch, cache_dir=cuda_cache, output="cubin")
    (res,) = binary.resources.values()
    assert (res.stack_frame_bytes, res.spill_store_bytes) == (0, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_one_nest_gemm_on_the_gpu_matches_the_cpu(dtype: str) -> None:
    func = gemm_one_nest(M=128, N=64, K=64, dtype=dtype)
    rng = np.random.default_rng(8)
    a = to_storage(rng.standard_normal((128, 64)), dtype)
    b = to_storage(rng.standard_normal((64, 64)), dtype)
    cpu = np.full((128, 64), np.nan, np.float32)
    # the kernel is written without barriers (lowering inserts them, and a CUDA build lowers):
    # the CPU reference needs ThreadSync's, or its warps read shared tiles too early
    # (tests/tensor_intrin/test_cpu_semantics.py::test_one_nest_gemm_reference_needs_threadsync)
    loopir.build(ThreadSync()(func), target="cpu")(a, b, cpu)
    assert not np.isnan(cpu).any()  # assert_allclose takes NaN == NaN
    np.testing.assert_allclose(cpu, from_storage(a, dtype) @ from_storage(b, dtype), rtol=1e-5, atol=1e-4)
    for f in (func, loopir.lower(func)):  # as written, and compacted (one warp's fragments)
        gpu = np.full((128, 64), np.nan, np.float32)
        loopir.build(f, target="cuda")(a, b, gpu)
        np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-3)
