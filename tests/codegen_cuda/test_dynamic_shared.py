"""Dynamic shared memory beyond 48 KB (issue 31): the emitter's plan, the limits per target
architecture and per device, the host code that allows a kernel its size once, and the runs."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import loopir
from loopir.codegen_cuda import (
    build_cuda,
    describe_resources,
    emit_cuda,
    lower_for_cuda,
    prepare_function,
)
from loopir.codegen_cuda import shared_memory as smem
from loopir.errors import CodegenError, LaunchError
from loopir.examples import dense_func, pipelined_gemm
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Var
from loopir.ir.stmt import Allocate, BufferStore, PrimFunc
from loopir.testing import check_equivalent, check_gemm

from .builders import bind

TRACE = ("-DLOOPIR_HOST_TRACE",)
SHAPE = (97, 131, 203)  # M, K, N: nothing divides the tiles


def _kernel(func):
    (k,) = prepare_function(func).emitted.kernels
    return k


def _shared_func(*sizes: int, dtype: str = "float32") -> PrimFunc:
    """One kernel with a shared buffer of each size (elements), all read."""
    A = Buffer("A", (8,), dtype)
    tx = Var("tx")
    bufs = [Buffer(f"S{i}", (n,), dtype, scope="shared") for i, n in enumerate(sizes)]
    value = bufs[0][tx]
    for b in bufs[1:]:
        value = value + b[tx]
    body = bind(tx, 8, "threadIdx.x", BufferStore(A, value, (tx,)))
    for b in reversed(bufs):
        body = Allocate(b, body)
    return PrimFunc((A,), body)


# ---- the emitter's plan ------------------------------------------------------------------------


def test_the_issue_case_takes_dynamic_shared_memory_for_its_largest_buffer() -> None:
    k = _kernel(pipelined_gemm(*SHAPE, stages=3).func)
    # B's three 32 x 128 float tiles (49152 B) move; A's three padded 32 x 36 ones stay static
    assert (k.shared_bytes, k.dynamic_shared_bytes) == (13776, 49152)
    text = emit_cuda(lower_for_cuda(pipelined_gemm(*SHAPE, stages=3).func)).source
    assert "extern __shared__ __align__(16) unsigned char loopir_smem[];" in text
    assert "float* B_shared = reinterpret_cast<float*>(loopir_smem);" in text
    assert "__shared__ __align__(16) float A_shared[3444];" in text


@pytest.mark.parametrize("stages", [1, 2])
def test_kernels_within_48kb_keep_static_shared_memory(stages: int) -> None:
    func = pipelined_gemm(*SHAPE, stages=stages).func
    k = _kernel(func)
    assert k.dynamic_shared_bytes == 0 and 0 < k.shared_bytes <= 48 * 1024
    assert "extern __shared__" not in emit_cuda(lower_for_cuda(func)).source


def test_four_stages_build_on_dynamic_shared_memory() -> None:
    k = _kernel(pipelined_gemm(*SHAPE, stages=4).func)
    assert (k.shared_bytes, k.dynamic_shared_bytes) == (18368, 65536)


def test_plan_moves_the_largest_buffers_until_the_rest_fit_and_aligns_offsets() -> None:
    f = _shared_func(3, 40000, 9000, 5)  # 12 B, 160000 B, 36000 B, 20 B
    allocs = smem.shared_allocations(f.body)
    assert [a.buffer.name for a in allocs] == ["S0", "S1", "S2", "S3"]  # program order
    offsets, total = smem.plan_dynamic(allocs, 48 * 1024)
    assert {a.buffer.name: o for a, o in offsets.items()} == {"S1": 0}
    assert total == 160000
    offsets, total = smem.plan_dynamic(allocs, 20)  # S1, S2, then S3: S0's 12 B fit
    assert {a.buffer.name: o for a, o in offsets.items()} == {"S1": 0, "S2": 160000, "S3": 196000}
    assert total == 196020
    offsets, total = smem.plan_dynamic(allocs, 0)  # all of them, each at a multiple of 16
    assert {a.buffer.name: o for a, o in offsets.items()} == {"S0": 0, "S1": 16, "S2": 160016,
                                                             "S3": 196016}
    assert total == 196036
    assert smem.plan_dynamic(allocs, 10**6) == ({}, 0)


def test_a_kernel_with_several_dynamic_buffers_emits_each_at_its_offset() -> None:
    # 124000 B: S0 and S1 (52000 B each) move, S2 (20000 B) stays
    res = emit_cuda(_shared_func(13000, 13000, 5000))
    assert "float* S0 = reinterpret_cast<float*>(loopir_smem);" in res.source
    assert "float* S1 = reinterpret_cast<float*>(loopir_smem + 52000);" in res.source
    assert "__shared__ __align__(16) float S2[5000];" in res.source
    (k,) = res.kernels
    assert (k.shared_bytes, k.dynamic_shared_bytes) == (20000, 104000)


def test_over_what_any_device_allows_is_refused_at_emission() -> None:
    with pytest.raises(CodegenError, match=r"CUDA codegen: kernel main_kernel0 needs 240000 bytes "
                       r"of shared memory per block \(240000 dynamic \+ 0 static\), over the "
                       r"232448-byte limit"):
        emit_cuda(_shared_func(30000, 30000))


# ---- limits per architecture -------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "limit"), [
    ("sm_90a", 232448), ("sm_90", 232448), ("sm_80", 166912), ("sm_86", 101376),
    ("sm_89", 101376), ("sm_75", 65536), ("sm_100a", 232448), ("sm_120", 101376),
    ("sm_53", 49152),
])  # fmt: skip
def test_optin_limit_per_architecture(arch: str, limit: int) -> None:
    assert smem.optin_limit(arch)[0] == limit


def test_the_build_refuses_a_kernel_over_its_architectures_limit_before_nvcc() -> None:
    func = pipelined_gemm(*SHAPE, stages=4).func  # 83904 B
    with pytest.raises(CodegenError, match=r"CUDA build \(main\): kernel main_kernel0 needs 83904 "
                       r"bytes of shared memory per block \(65536 dynamic \+ 18368 static\), over "
                       r"the 65536-byte limit of sm_75 \(the sm_75 opt-in maximum\)"):
        build_cuda(func, arch="sm_75")
    big = _shared_func(42500)  # 170000 B: sm_90 only
    with pytest.raises(CodegenError, match=r"needs 170000 bytes .* over the 166912-byte limit of "
                       r"sm_80"):
        build_cuda(big, arch="sm_80")


# ---- the host code (trace builds: no GPU needed) -----------------------------------------------


def _trace(mod) -> list[str]:
    return mod._library().trace().splitlines()


def _args():
    M, K, N = SHAPE
    return np.zeros((M, K), "float32"), np.zeros((K, N), "float32"), np.zeros((M, N), "float32")


@pytest.mark.nvcc
# both architectures and both sizes, in two builds (each ~10-20 s of nvcc in CI)
@pytest.mark.parametrize(("arch", "stages"), [("sm_80", 3), ("sm_90a", 4)])
def test_pipelined_gemm_compiles_and_allows_its_size_once(tmp_path, arch: str, stages: int) -> None:
    mod = build_cuda(pipelined_gemm(*SHAPE, stages=stages).func, arch=arch, nvcc_flags=TRACE,
                     cache_dir=tmp_path)  # fmt: skip
    assert mod.arch == arch
    dyn = 16384 * stages
    if stages == 4:  # one build (nvcc's time) also serves the launch's check of the device's limit
        _the_launch_checks_the_devices_limit(mod)
    mod(*_args())
    mod(*_args())
    lines = _trace(mod)
    assert lines.count(f"smem_optin main_kernel0 {dyn}") == 1  # once, not per call
    launches = [x for x in lines if x.startswith("launch")]
    assert len(launches) == 2 and all(f" smem={dyn} args=" in x for x in launches)
    assert lines.index(f"smem_optin main_kernel0 {dyn}") < lines.index(launches[0])
    assert f" B smem + {dyn} B dynamic, " in describe_resources(mod)


def _the_launch_checks_the_devices_limit(mod) -> None:
    """A device that allows less than the kernel needs: the launch is refused, naming both,
    before anything is launched or allowed; a refused launch set nothing, so the next call
    checks again (and passes, the limit restored)."""
    lib = mod._library().dll
    lib.loopir_rt_set_fake_smem_optin.argtypes = [ctypes.c_int]
    lib.loopir_rt_set_fake_smem_optin(80000)
    try:
        with pytest.raises(LaunchError, match=r"main: kernel main_kernel0 needs 83904 bytes of "
                           r"shared memory per block \(65536 dynamic \+ 18368 static\); device 0 "
                           r"allows at most 80000 \(cudaDevAttrMaxSharedMemoryPerBlockOptin\)"):
            mod(*_args())
        assert not any(x.startswith(("launch", "smem_optin")) for x in _trace(mod))
    finally:
        lib.loopir_rt_set_fake_smem_optin(227 * 1024)


# ---- the CPU executor and the GPU --------------------------------------------------------------


@pytest.mark.parametrize("stages", [3, 4])
def test_the_cpu_executor_is_unaffected(stages: int) -> None:
    sch = pipelined_gemm(*SHAPE, stages=stages)
    check_equivalent(dense_func(*SHAPE), loopir.lower(sch.func), thread_order="random")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [SHAPE, (1024, 1024, 1024), (960, 770, 2304)])
@pytest.mark.parametrize("stages", [3, 4])
def test_pipelined_gemm_on_dynamic_shared_memory_on_the_gpu(shape, stages: int) -> None:
    mod = loopir.build(pipelined_gemm(*shape, stages=stages).func, target="cuda")
    assert mod.kernels[0].dynamic_shared_bytes > 0
    check_gemm(mod, *shape)
    check_gemm(mod, *shape, seed=1)  # a second call: the size was allowed once
