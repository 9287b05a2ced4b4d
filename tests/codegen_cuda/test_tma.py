"""TMA copies and mbarriers in the CUDA backend (issue 32): the device calls, the tensor map
kernel parameter, the host encoding (run without a GPU in the host-trace build), the refusals
of layouts TMA cannot copy, nvcc for sm_90a, and the copy on a GPU against numpy."""

from __future__ import annotations

import re

import attrs
import numpy as np
import pytest

import loopir
from loopir.codegen_cuda import build_cuda, emit_function, lower_for_cuda, prepare_function
from loopir.codegen_cuda.units import build_library
from loopir.errors import CodegenError, LaunchError
from loopir.examples.tma import tma_copy
from loopir.ir import tma as T
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Var
from loopir.ir.stmt import Allocate, Evaluate, For, ForKind, IfThenElse, PrimFunc, seq

TRACE = ("-DLOOPIR_HOST_TRACE",)


def _source(func: PrimFunc) -> tuple[str, str]:
    code = emit_function(lower_for_cuda(func))
    return code.emitted.source, code.host.source


def test_the_kernel_takes_a_tensor_map_and_issues_the_copy() -> None:
    src, host = _source(tma_copy(100, 72, (16, 64), swizzle=128))
    assert "const __grid_constant__ CUtensorMap A_tmap)" in src
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in src
    assert "loopir_tma_load_2d(&A_s[0], &A_tmap, &bar[0], static_cast<int>(bx * 64), static_cast<int>(by * 16));" in src
    assert "mbarrier.try_wait.parity.shared::cta.b64" in src and "mbarrier.arrive.expect_tx" in src
    assert "__shared__ __align__(1024) half A_s[1024];" in src  # the swizzle atom
    kernel = src[src.index('extern "C" __global__'):]
    assert kernel.count("fence.proxy.async.shared::cta;") == 2  # before each barrier
    helper = src[src.index("void loopir_tma_load_2d("):]
    assert helper.index("fence.proxy.async.shared::cta;") < helper.index("cp.async.bulk.tensor.2d")
    # the host encodes one map (innermost first) and passes it by value after the pointers
    assert "const uint32_t b[2] = {64, 16};" in host and "CU_TENSOR_MAP_SWIZZLE_128B" in host
    assert "CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, d, s, b" in host
    assert "LOOPIR_LAUNCH(tma_copy_kernel0, grid, block, stream, A, B, tma_copy_kernel0_tmap0.map);" in host
    assert "% 16 != 0" in host  # A's address: TMA's alignment


def test_constant_strides_that_are_not_16_byte_multiples_are_refused_naming_the_buffer() -> None:
    with pytest.raises(CodegenError, match=r"TMA needs the global strides of A to be multiples of 16 bytes, "
                       r"got 140 bytes \(shape \('100', '70'\), float16\)"):  # fmt: skip
        _source(tma_copy(100, 70, (16, 64)))


def test_a_tile_off_the_alignment_tma_needs_is_refused() -> None:
    G = Buffer("G", (16, 16), "float16")
    S = Buffer("S", (4, 1, 16), "float16", scope="shared")  # 32-byte tiles: S[1] is at 32 bytes
    bar = Buffer("bar", (1,), "uint64", scope="shared")
    tx = Var("tx")
    body = IfThenElse(tx == 0, seq(Evaluate(T.mbarrier_init(bar[0], 1)),
                                   Evaluate(T.tma_load(S[1, 0, 0], G[0, 0], bar[0], (1, 16))),
                                   Evaluate(T.mbarrier_wait(bar[0], 0))))  # fmt: skip
    k = For(tx, 0, 32, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")
    f = PrimFunc((G,), For(Var("b"), 0, 1, ForKind.THREAD_BINDING, Allocate(S, Allocate(bar, k)),
                           thread_tag="blockIdx.x"), name="off")  # fmt: skip
    with pytest.raises(CodegenError, match=r"kernel off_kernel0: the shared tile S\[1, 0, 0\] must start at a "
                       r"multiple of 128 bytes"):  # fmt: skip
        _source(f)


@pytest.mark.nvcc
def test_the_module_compiles_for_sm_90a(tmp_path) -> None:
    # the real host path (the driver entry point, cuTensorMapEncodeTiled), every rank's helper
    funcs = [tma_copy(64, 64, (16, 64), swizzle=128), tma_copy(Var("M"), Var("N"), (8, 16), "float32", 0, tiles=3)]
    codes = [prepare_function(attrs.evolve(f, name=f"tma_copy_{i}")) for i, f in enumerate(funcs)]
    built = build_library(codes, arch="sm_90a", cache_dir=tmp_path)
    assert built.binary.data[:4] == b"\x7fELF"
    assert {"tma_copy_0_kernel0", "tma_copy_1_kernel0"} <= set(built.binary.resources)


@pytest.mark.nvcc
def test_the_host_encodes_the_map_per_call_and_checks_symbolic_strides(tmp_path) -> None:
    M, N = Var("M"), Var("N")
    mod = build_cuda(tma_copy(M, N, (16, 64)), arch="sm_90a", nvcc_flags=TRACE, cache_dir=tmp_path)
    a = np.zeros((100, 72), "float16")
    mod(a, np.zeros_like(a))
    trace = mod._library().trace()
    assert "tensormap tma_copy_kernel0 A rank=2 dims=72,100 box=64,16 swizzle=3" in trace  # 3: 128B
    assert "args= 0x" in trace and trace.rstrip().splitlines()[-2].endswith("100 72 tensormap")
    bad = np.zeros((100, 70), "float16")
    with pytest.raises(LaunchError, match=r"tma_copy: kernel tma_copy_kernel0: TMA needs the strides of 'A' to be "
                       r"multiples of 16 bytes, got 140 bytes for dimension 0"):  # fmt: skip
        mod(bad, np.zeros_like(bad))


CASES = [((100, 72), (16, 64), "float16", 128, 1), ((257, 136), (64, 64), "bfloat16", 128, 3),
         ((64, 40), (32, 32), "float16", 64, 1), ((33, 20), (8, 16), "float32", 64, 2),
         ((130, 24), (64, 16), "float16", 32, 1), ((75, 8), (16, 8), "float32", 0, 4)]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.nvcc
@pytest.mark.parametrize(("shape", "block", "dtype", "swizzle", "tiles"), CASES)
def test_tma_copy_on_the_gpu_equals_numpy(shape, block, dtype, swizzle, tiles, tmp_path) -> None:
    torch = pytest.importorskip("torch")

    threads = 128 if 128 % block[1] == 0 and (block[0] * block[1]) % 128 == 0 else 32
    mod = loopir.build(tma_copy(*shape, block, dtype, swizzle, threads=threads, tiles=tiles), target="cuda")
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    a = torch.randn(shape, device="cuda").to(tdt)
    b = torch.zeros_like(a)
    mod(a, b)
    torch.cuda.synchronize()
    assert torch.equal(a, b)
    b.zero_()
    mod(a, b)  # the cached map
    assert torch.equal(a, b)
    a2 = torch.randn(shape, device="cuda").to(tdt)
    mod(a2, b)  # a new pointer: the map is encoded again
    assert torch.equal(a2, b)


def test_a_3d_copy_uses_the_3d_instruction_and_three_coordinates() -> None:
    G = Buffer("G", (4, 10, 16), "float16")
    tile = Buffer("tile", (2, 4, 16), "float16", scope="shared")
    bar = Buffer("bar", (1,), "uint64", scope="shared")
    tx, z = Var("tx"), Var("z")
    body = IfThenElse(tx == 0, seq(Evaluate(T.mbarrier_init(bar[0], 1)),
                                   Evaluate(T.mbarrier_arrive_expect_tx(bar[0], 2 * 4 * 16 * 2)),
                                   Evaluate(T.tma_load(tile[0, 0, 0], G[z * 2, 3, 0], bar[0], (2, 4, 16))),
                                   Evaluate(T.mbarrier_wait(bar[0], 0))))  # fmt: skip
    k = For(tx, 0, 32, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")
    f = PrimFunc((G,), For(z, 0, 2, ForKind.THREAD_BINDING, Allocate(tile, Allocate(bar, k)),
                           thread_tag="blockIdx.x"), name="box3")  # fmt: skip
    src, host = _source(f)
    assert "loopir_tma_load_3d(&tile[0], &G_tmap, &bar[0], static_cast<int>(0), static_cast<int>(3), static_cast<int>(z * 2));" in src
    assert "const uint64_t d[3] = {static_cast<uint64_t>(16), static_cast<uint64_t>(10), static_cast<uint64_t>(4)};" in host
    assert "const uint32_t b[3] = {16, 4, 2};" in host


def test_setmaxnreg_counts_the_entry_registers_cannot_cover_are_refused() -> None:
    """``setmaxnreg.inc`` waits for registers the block's pool does not hold (what it got at
    entry plus what the producer released): the kernel would hang. (24, 240) at 384 threads and
    one block an SM is exactly the pool (128 x 24 + 256 x 240 = 384 x 168); 8 more a consumer,
    8 more for the producer, or two blocks an SM are refused at codegen, naming the counts."""
    from loopir.codegen_cuda.tma import check_register_budget
    from loopir.examples.attention import attention

    def func(regs: tuple[int, int]) -> PrimFunc:
        return attention(1, 2, 1024, 1024, 64, "float16", wgmma=True, overlap=True, tma=regs, block_m=128,
                         block_n=128).func  # fmt: skip

    assert "setmaxnreg.inc.sync.aligned.u32 240;" in prepare_function(func((24, 240))).emitted.source
    for regs, mb, need, pool in (((24, 248), None, "128 x 24 + 256 x 248 = 66560", "384 x 168 = 64512"),
                                 ((32, 240), None, "128 x 32 + 256 x 240 = 65536", "384 x 168 = 64512"),
                                 ((24, 240), 2, "128 x 24 + 256 x 240 = 64512", "384 x 80 = 30720")):  # fmt: skip
        with pytest.raises(CodegenError, match=f"kernel attention_kernel0: setmaxnreg asks {re.escape(need)} registers, "
                                               f"more than the block's {pool} at entry .*would wait forever"):  # fmt: skip
            prepare_function(func(regs), mb)
    check_register_budget("k", [(24, False), (104, True)], 384, 2)  # 3072 + 26624 <= 384 x 80
    check_register_budget("k", [(40, False), (232, True)], 384, 1)  # hopper_gemm's: 5120 + 59392 = 64512
    check_register_budget("k", [(24, False)], 384, 1)  # only a decrease: nothing to wait for
    check_register_budget("k", [(256, True)], 128, 2)  # 128 x 256: two blocks of 4 warps fill the SM exactly
    with pytest.raises(CodegenError, match="setmaxnreg asks 128 x 256 = 32768 registers, more than the block's "
                                           "128 x 168 = 21504"):  # fmt: skip
        check_register_budget("k", [(256, True)], 128, 3)  # no decrease: every thread increases
