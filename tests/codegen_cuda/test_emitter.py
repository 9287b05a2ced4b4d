"""CUDA emitter on hand-built lowered IR: source shape, and every kernel compiles with nvcc."""

from __future__ import annotations

import re

import numpy as np
import pytest

from loopir.codegen_cuda import emit_cuda, lower_for_cuda
from loopir.errors import CodegenError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Broadcast, Cast, FloatImm, IntImm, Ramp, Var
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    seq,
)
from loopir.testing import run_cpu

from .builders import bind, loop, sync, tiled_matmul, vector_add, vthread_gemm

pytestmark = pytest.mark.nvcc


def _kernel_text(source: str, name: str) -> str:
    start = source.index(f"{name}(")
    return source[source.rfind("extern", 0, start):]


def test_vector_add_golden(golden, nvcc_compiles):
    res = emit_cuda(vector_add(1000, 128))
    golden("codegen_cuda/vector_add", res.source)
    assert len(res.kernels) == 1
    k = res.kernels[0]
    assert [str(e) for e in k.spec.grid] == ["8", "1", "1"]
    assert [str(e) for e in k.spec.block] == ["128", "1", "1"]
    assert "__launch_bounds__(128)" in res.source
    # read-only inputs are const, the output is not; all are restrict
    assert "const float* __restrict__ A" in res.source
    assert re.search(r"[^t] float\* __restrict__ C", res.source)
    nvcc_compiles(res.source)


def test_tiled_matmul_structure(golden, nvcc_compiles):
    res = emit_cuda(tiled_matmul(100, 70, 90))
    src = res.source
    golden("codegen_cuda/tiled_matmul", src)
    assert src.count("__syncthreads();") == 2
    assert "__shared__ __align__(16) float A_shared[256];" in src
    assert "float C_local[16];" in src
    assert src.count("#pragma unroll") >= 6
    # all index operands are non-negative: plain / and %, no floor helper
    assert "loopir_floordiv" not in src and "loopir_floormod" not in src
    binary = nvcc_compiles(src)
    usage = binary.resources["matmul_kernel0"]
    assert usage.registers > 0 and usage.shared_bytes == 2048
    assert usage.spill_store_bytes == 0


def test_floordiv_negative_operands_use_floor_helpers(nvcc_compiles):
    A = Buffer("A", (64,), "int32")
    tx = Var("tx")
    # tx - 32 may be negative: C's / and % would round toward zero
    body = BufferStore(A, op.floordiv(tx - 32, 5) * 100 + op.floormod(tx - 32, 5), (tx,))
    f = PrimFunc((A,), bind(tx, 64, "threadIdx.x", body), name="fd")
    src = emit_cuda(f).source
    assert "loopir_floordiv(tx - 32, 5)" in src
    assert "loopir_floormod(tx - 32, 5)" in src
    nvcc_compiles(src)


def test_floordiv_nonnegative_operands_use_c_operators():
    A = Buffer("A", (64,), "int32")
    tx = Var("tx")
    body = BufferStore(A, op.floordiv(tx + 3, 5) + op.floormod(tx, 7), (tx,))
    f = PrimFunc((A,), bind(tx, 64, "threadIdx.x", body))
    src = emit_cuda(f).source
    assert "(tx + 3) / 5 + tx % 7" in src
    assert "loopir_floor" not in src


def test_floordiv_by_symbolic_divisor_needs_proof():
    n = Var("n")
    A = Buffer("A", (n,), "int32")
    tx = Var("tx")
    # n is a size (>= 0) but may be 0: not provably positive, so the helper is kept
    body = IfThenElse(tx < n, BufferStore(A, op.floordiv(tx, n), (tx,)))
    f = PrimFunc((A,), bind(tx, 32, "threadIdx.x", body))
    assert "loopir_floordiv(tx, n)" in emit_cuda(f).source


def _copy_func(offset: int, lanes: int = 4, dtype: str = "float32", kind: str = "vectorized"):
    A = Buffer("A", (1024,), dtype)
    B = Buffer("B", (1024 + 8,), dtype)
    S = Buffer("S", (1024,), dtype, scope="shared")
    tx, v = Var("tx"), Var("v")
    fetch = loop(v, lanes, BufferStore(S, B[tx * lanes + v + offset], (tx * lanes + v,)), kind)
    back = loop(v, lanes, BufferStore(A, S[tx * lanes + v], (tx * lanes + v,)), kind)
    n = 1024 // lanes
    body = Allocate(S, bind(tx, n, "threadIdx.x", seq(fetch, sync(), back)))
    return PrimFunc((A, B), body, name="copy")


@pytest.mark.parametrize(
    "dtype,lanes,carrier",
    [("float32", 4, "float4"), ("float32", 2, "float2"), ("float16", 2, "half2"),
     ("bfloat16", 2, "nv_bfloat162"), ("float16", 8, "uint4")],
)
def test_aligned_vector_loop_becomes_vector_access(dtype, lanes, carrier, nvcc_compiles):
    res = emit_cuda(_copy_func(0, lanes, dtype))
    src = res.source
    assert f"*({carrier}*)(S + tx * {lanes}) = *(const {carrier}*)(B + tx * {lanes});" in src
    assert f"*({carrier}*)(A + tx * {lanes}) = *({carrier}*)(S + tx * {lanes});" in src
    # the runtime must check the global pointers' alignment
    align = {b.name: a for b, a in res.kernels[0].alignment.items()}
    nbytes = lanes * (2 if "16" in dtype else 4)
    assert align == {"A": nbytes, "B": nbytes}
    nvcc_compiles(src)


def test_misaligned_vector_loop_falls_back_to_unrolled_scalars(nvcc_compiles):
    src = emit_cuda(_copy_func(1)).source
    assert "float4" not in src.split("S + tx * 4) =")[0] or "B + tx * 4 + 1" not in src
    assert "*(const float4*)(B" not in src
    assert re.search(r"#pragma unroll\n\s*for \(int v = 0; v < 4; \+\+v\) \{\n\s*S\[tx \* 4 \+ v\] = "
                     r"B\[tx \* 4 \+ v \+ 1\];", src)
    # the aligned write-back is still vectorized
    assert "*(float4*)(A + tx * 4) = *(float4*)(S + tx * 4);" in src
    nvcc_compiles(src)


def test_ramp_store_vectorized_or_scalarized(nvcc_compiles):
    A = Buffer("A", (256,), "float32")
    B = Buffer("B", (256,), "float32")
    tx = Var("tx")
    ramp = Ramp(tx * 4, IntImm(1), 4)
    copy = BufferStore(A, B[ramp], (ramp,))
    odd = Ramp(tx * 4 + 1, IntImm(1), 2)
    # vector arithmetic has no single access: scalarized per lane
    arith = BufferStore(B, A[odd] * Broadcast(FloatImm(2.0), 2), (odd,))
    f = PrimFunc((A, B), bind(tx, 63, "threadIdx.x", seq(copy, arith)), name="ramps")
    src = emit_cuda(f).source
    assert "*(float4*)(A + tx * 4) = *(float4*)(B + tx * 4);" in src
    assert "B[tx * 4 + 1] = A[tx * 4 + 1] * 2.0f;" in src
    assert "B[tx * 4 + 1 + 1] = A[tx * 4 + 1 + 1] * 2.0f;" in src
    nvcc_compiles(src)


def test_fp16_bf16_math_and_casts(nvcc_compiles):
    H = Buffer("H", (128,), "float16")
    Bf = Buffer("Bf", (128,), "bfloat16")
    F = Buffer("F", (128,), "float32")
    D = Buffer("D", (128,), "float64")
    tx = Var("tx")
    body = seq(
        BufferStore(H, op.exp(H[tx]) + Cast("float16", F[tx]), (tx,)),
        BufferStore(Bf, op.sqrt(Bf[tx]) * Cast("bfloat16", H[tx]), (tx,)),
        BufferStore(F, op.exp(F[tx]) + op.tanh(F[tx]) + op.sigmoid(F[tx])
                    + op.max_(F[tx], op.const(0.0, "float32")), (tx,)),
        BufferStore(D, op.exp(D[tx]) + op.log(D[tx]) + op.pow(D[tx], D[tx]), (tx,)),
    )
    src = emit_cuda(PrimFunc((H, Bf, F, D), bind(tx, 128, "threadIdx.x", body), name="m")).source
    assert "#include <cuda_fp16.h>" in src and "#include <cuda_bf16.h>" in src
    assert "__float2half(expf((float)(H[tx])))" in src
    assert "__float2bfloat16(sqrtf((float)(Bf[tx])))" in src
    assert "expf(F[tx]) + tanhf(F[tx])" in src and "fmaxf(F[tx], 0.0f)" in src
    assert "(1.0f / (1.0f + expf(-(F[tx]))))" in src
    assert "exp(D[tx]) + log(D[tx]) + pow(D[tx], D[tx])" in src
    assert "((half)(F[tx]))" in src
    nvcc_compiles(src)


def test_no_fp16_header_without_fp16():
    assert "cuda_fp16" not in emit_cuda(vector_add()).source


def test_select_and_special_constants(nvcc_compiles):
    A = Buffer("A", (64,), "float32")
    tx = Var("tx")
    neg_inf = FloatImm(float("-inf"), "float32")
    body = BufferStore(A, op.if_then_else(op.all_(tx > 3, tx < 60), A[tx], neg_inf), (tx,))
    src = emit_cuda(PrimFunc((A,), bind(tx, 64, "threadIdx.x", body))).source
    assert "A[tx] = (tx > 3 && tx < 60) ? A[tx] : __int_as_float(0xff800000);" in src
    nvcc_compiles(src)


def test_symbolic_extent_becomes_kernel_parameter(nvcc_compiles):
    n = Var("n")
    res = emit_cuda(vector_add(n, 256))
    src = res.source
    assert re.search(r"float\* __restrict__ C,\s+int n\)", src)
    spec = res.kernels[0].spec
    assert spec.scalars == (n,)
    from loopir.codegen_cuda.exprs import eval_int

    assert eval_int(spec.grid[0], {n: 1000}) == 4
    assert eval_int(spec.grid[0], {n: 1024}) == 4
    nvcc_compiles(src)


def test_thread_loops_with_smaller_extent_are_guarded(nvcc_compiles):
    A = Buffer("A", (128,), "float32")
    S = Buffer("S", (128,), "float32", scope="shared")
    t1, t2 = Var("t1"), Var("t2")
    body = Allocate(S, bind(Var("b"), 1, "blockIdx.x", seq(
        bind(t1, 128, "threadIdx.x", BufferStore(S, A[t1], (t1,))),
        sync(),
        bind(t2, 96, "threadIdx.x", BufferStore(A, S[t2] + S[t2 + 32], (t2,))),
    )))
    res = emit_cuda(PrimFunc((A,), body, name="g"))
    assert [str(e) for e in res.kernels[0].spec.block] == ["128", "1", "1"]
    assert [int(e) for e in res.kernels[0].spec.block] == [128, 1, 1]  # IntImm converts
    assert "if (threadIdx.x < 96) {" in res.source
    assert "const int t1 = ((int)threadIdx.x);" in res.source
    nvcc_compiles(res.source)


def test_vthread_injection_expands_local_accumulators(golden, nvcc_compiles):
    # the emitter only prints: virtual threads are folded by the pass build_cuda runs
    res = emit_cuda(lower_for_cuda(vthread_gemm(200, 70, 256)))
    src = res.source
    golden("codegen_cuda/vthread_gemm", src)
    # two virtual threads of 32 accumulators fold into one 64-element register array
    assert "float C_local[64];" in src
    assert "C_local[vx * 32 + i3 * 2 + j4] = 0.0f;" in src
    # the fetch and its barriers run once per k0 (not once per virtual thread)
    assert src.count("__syncthreads();") == 2
    assert src.count("for (int k0 = 0;") == 1
    assert "vthread" not in src
    # B's fetch is contiguous and provably aligned: a float2 access
    assert "*(float2*)(B_shared + tx * 2 / 128 * 128 + tx * 2 % 128) =" in src
    binary = nvcc_compiles(src)
    assert binary.resources["vt_gemm_kernel0"].stack_frame_bytes == 0


def test_serial_vthread_with_one_lane_is_substituted():
    A = Buffer("A", (32,), "float32")
    vx, tx = Var("vx"), Var("tx")
    body = bind(vx, 1, "vthread.x", bind(tx, 32, "threadIdx.x",
                                         BufferStore(A, A[tx] + 1.0, (tx + vx,))))
    src = emit_cuda(lower_for_cuda(PrimFunc((A,), bind(Var("b"), 1, "blockIdx.x", body)))).source
    assert "A[tx + 0] = A[tx] + 1.0f;" in src


def test_names_are_unique_and_not_reserved(nvcc_compiles):
    A = Buffer("int", (32,), "float32")
    i1, i2 = Var("i"), Var("i")
    tx = Var("threadIdx")
    inner = seq(loop(i1, 2, BufferStore(A, A[tx] + 1.0, (tx,))),
                loop(i2, 2, BufferStore(A, A[tx] * 2.0, (tx,))))
    src = emit_cuda(PrimFunc((A,), bind(tx, 32, "threadIdx.x", inner))).source
    assert "float* __restrict__ int_1" in src
    assert "const int threadIdx_1 = ((int)threadIdx.x);" in src
    assert "for (int i = 0;" in src and "for (int i_1 = 0;" in src
    nvcc_compiles(src)


def test_host_program_with_temporaries_and_two_kernels(nvcc_compiles):
    n = 256
    A = Buffer("A", (n,), "float32")
    C = Buffer("C", (n,), "float32")
    T = Buffer("T", (n,), "float32")
    t1, t2, b1, b2 = Var("t1"), Var("t2"), Var("b1"), Var("b2")
    k1 = bind(b1, 2, "blockIdx.x", bind(t1, 128, "threadIdx.x",
                                         BufferStore(T, A[b1 * 128 + t1] * 2.0, (b1 * 128 + t1,))))
    k2 = bind(b2, 2, "blockIdx.x", bind(t2, 128, "threadIdx.x",
                                         BufferStore(C, T[b2 * 128 + t2] + 1.0, (b2 * 128 + t2,))))
    res = emit_cuda(PrimFunc((A, C), Allocate(T, seq(k1, sync(), k2)), name="two"))
    assert [k.name for k in res.kernels] == ["two_kernel0", "two_kernel1"]
    assert [b.name for b in res.kernels[0].spec.buffers] == ["A", "T"]
    assert res.host_temps == (T,)
    nvcc_compiles(res.source)


def test_host_loop_variable_is_passed_to_the_kernel(nvcc_compiles):
    A = Buffer("A", (4, 64), "float32")
    t, tx = Var("t"), Var("tx")
    body = loop(t, 4, bind(tx, 64, "threadIdx.x", BufferStore(A, A[t, tx] + 1.0, (t, tx))))
    res = emit_cuda(PrimFunc((A,), body, name="hl"))
    assert res.kernels[0].spec.scalars == (t,)
    assert re.search(r"float\* __restrict__ A,\s+int t\)", res.source)
    nvcc_compiles(res.source)


# ---- errors -----------------------------------------------------------------------------------


def test_store_outside_kernels_is_an_error():
    A = Buffer("A", (8,), "float32")
    i = Var("i")
    f = PrimFunc((A,), loop(i, 8, BufferStore(A, 1.0, (i,))), name="host")
    with pytest.raises(CodegenError, match=r"outside every thread-bound loop writes buffer\(s\) A"):
        emit_cuda(f)


def test_blocks_are_rejected_by_the_emitter():
    from loopir.ir.stmt import Block, BlockRealize

    A = Buffer("A", (8,), "float32")
    blk = Block("b", (), (), (), BufferStore(A, 1.0, (IntImm(0),)))
    f = PrimFunc((A,), bind(Var("t"), 1, "threadIdx.x", BlockRealize((), block=blk)))
    with pytest.raises(CodegenError, match=r"still has blocks \(.b.\).*lower it first"):
        emit_cuda(f)


def test_shared_buffer_across_kernels_is_an_error():
    A = Buffer("A", (128,), "float32")
    S = Buffer("S", (128,), "float32", scope="shared")
    t1, t2 = Var("t1"), Var("t2")
    body = Allocate(S, seq(
        bind(t1, 128, "threadIdx.x", BufferStore(S, A[t1], (t1,))),
        bind(t2, 128, "threadIdx.x", BufferStore(A, S[t2], (t2,))),
    ))
    with pytest.raises(CodegenError, match="shared buffer S is used by kernels main_kernel0 and "
                                           "main_kernel1"):
        emit_cuda(PrimFunc((A,), body))


def test_global_allocate_inside_kernel_is_an_error():
    A = Buffer("A", (8,), "float32")
    T = Buffer("T", (8,), "float32")
    tx = Var("tx")
    body = bind(tx, 8, "threadIdx.x", Allocate(T, BufferStore(A, 1.0, (tx,))))
    with pytest.raises(CodegenError, match="global buffer T is allocated inside"):
        emit_cuda(PrimFunc((A,), body))


def test_too_much_shared_memory_is_an_error():
    A = Buffer("A", (8,), "float32")
    S = Buffer("S", (60000,), "float32", scope="shared")
    tx = Var("tx")
    body = Allocate(S, bind(tx, 8, "threadIdx.x", BufferStore(A, S[tx], (tx,))))
    with pytest.raises(CodegenError, match=r"kernel main_kernel0 needs 240000 bytes of shared "
                       r"memory per block \(240000 dynamic \+ 0 static\), over the 232448-byte "
                       "limit of every CUDA device"):
        emit_cuda(PrimFunc((A,), body))


def test_barrier_under_partial_thread_loop_is_an_error():
    A = Buffer("A", (128,), "float32")
    t1, t2 = Var("t1"), Var("t2")
    body = bind(Var("b"), 1, "blockIdx.x", seq(
        bind(t1, 128, "threadIdx.x", BufferStore(A, 0.0, (t1,))),
        bind(t2, 64, "threadIdx.x", seq(BufferStore(A, 1.0, (t2,)), sync()))))
    with pytest.raises(CodegenError, match="barrier would make|guard would make the barrier"):
        emit_cuda(PrimFunc((A,), body))


def test_undefined_variable_is_an_error():
    A = Buffer("A", (8,), "float32")
    tx, ghost = Var("tx"), Var("ghost")
    body = bind(tx, 8, "threadIdx.x", BufferStore(A, 1.0, (ghost,)))
    with pytest.raises(CodegenError, match="variable ghost is used but defined neither"):
        emit_cuda(PrimFunc((A,), body))


def test_differing_symbolic_thread_extents_are_an_error():
    n, m = Var("n"), Var("m")
    A = Buffer("A", (n, m), "float32")
    t1, t2 = Var("t1"), Var("t2")
    body = bind(Var("b"), 1, "blockIdx.x", seq(
        bind(t1, n, "threadIdx.x", BufferStore(A, 0.0, (t1, IntImm(0)))),
        bind(t2, m, "threadIdx.x", BufferStore(A, 0.0, (IntImm(0), t2)))))
    with pytest.raises(CodegenError, match="different extents"):
        emit_cuda(PrimFunc((A,), body))


def test_global_storage_sync_in_kernel_is_an_error():
    A = Buffer("A", (8,), "float32")
    tx = Var("tx")
    body = bind(tx, 8, "threadIdx.x", seq(BufferStore(A, 0.0, (tx,)),
                                          Evaluate(op.storage_sync("global"))))
    with pytest.raises(CodegenError, match=r"storage_sync\('global'\)"):
        emit_cuda(PrimFunc((A,), body))


def test_parallel_and_unrolled_loops_inside_kernel(nvcc_compiles):
    A = Buffer("A", (8, 8), "float32")
    tx, i, j = Var("tx"), Var("i"), Var("j")
    body = bind(tx, 8, "threadIdx.x", seq(
        For(i, 0, 8, ForKind.PARALLEL, BufferStore(A, 0.0, (tx, i))),
        For(j, 2, 6, ForKind.UNROLLED, BufferStore(A, A[tx, j - 2] + 1.0, (tx, j - 2))),
    ))
    src = emit_cuda(PrimFunc((A,), body)).source
    assert "for (int i = 0; i < 8; ++i) {" in src
    assert "#pragma unroll\n  for (int j = 2; j < 8; ++j) {" in src
    nvcc_compiles(src)


def test_half_aligned_vector_loop_splits_into_aligned_chunks(nvcc_compiles):
    # B + 2 is 8-byte but not 16-byte aligned: two float2 accesses instead of one float4
    src = emit_cuda(_copy_func(2)).source
    assert "*(float2*)(S + tx * 4) = *(const float2*)(B + tx * 4 + 2);" in src
    assert "*(float2*)(S + tx * 4 + 2) = *(const float2*)(B + tx * 4 + 2 + 2);" in src
    nvcc_compiles(src)


def test_lane_dependent_guard_becomes_per_chunk_guard(nvcc_compiles):
    # rows of 770 floats: 8-byte aligned; the k < 770 edge splits between float2 chunks
    A = Buffer("A", (4, 770), "float32")
    S = Buffer("S", (4, 772), "float32", scope="shared")
    tx, k0, v = Var("tx"), Var("k0"), Var("v")
    store = BufferStore(S, op.if_then_else(k0 * 4 + v < 770, A[tx, k0 * 4 + v], 0.0),
                        (tx, k0 * 4 + v))
    body = Allocate(S, bind(tx, 4, "threadIdx.x", seq(
        loop(k0, 193, loop(v, 4, store, "vectorized")), sync(),
        BufferStore(A, S[tx, 0], (tx, IntImm(0))))))
    src = emit_cuda(PrimFunc((A,), body, name="edge")).source
    assert ("*(float2*)(S + tx * 772 + k0 * 4) = (k0 * 4 < 770) ? "
            "*(float2*)(A + tx * 770 + k0 * 4) : make_float2(0.0f, 0.0f);") in src
    assert "(k0 * 4 + 2 < 770) ?" in src
    nvcc_compiles(src)


def test_nested_vthreads_and_vthread_dependent_shared_buffer(nvcc_compiles):
    A = Buffer("A", (4, 64), "float32")
    S = Buffer("S", (64,), "float32", scope="shared")
    vy, vx, tx, i = Var("vy"), Var("vx"), Var("tx"), Var("i")
    # S is written with values that depend on (vy, vx) and shared by the block's threads: the
    # virtual threads take turns, each refilling S between barriers
    row = vy * 2 + vx
    body = bind(vy, 2, "vthread.y", bind(vx, 2, "vthread.x", Allocate(S, bind(
        tx, 64, "threadIdx.x", seq(
            BufferStore(S, A[row, tx] * 2.0, (tx,)),
            sync(),
            # a loop whose extent depends on vx cannot be split: it is replicated whole
            loop(i, vx + 1, BufferStore(A, A[row, tx] + S[63 - tx], (row, tx))),
        )))))
    func = PrimFunc((A,), bind(Var("b"), 1, "blockIdx.x", body), name="nv")
    lowered = lower_for_cuda(func)
    src = emit_cuda(lowered).source
    assert "__shared__ __align__(16) float S[64];" in src
    assert "S[tx] = A[(vy * 2 + vx) * 64 + tx] * 2.0f;" in src
    # before each refill every thread has finished reading the previous virtual thread's S
    assert src.count("__syncthreads();") == 2
    assert re.search(r"__syncthreads\(\);\n\s*for \(int i = 0; i < vx \+ 1;", src)
    a = np.random.default_rng(0).random((4, 64), dtype=np.float32)
    want = a.copy()
    for r in range(4):
        s = want[r] * 2
        for _ in range(r % 2 + 1):
            want[r] = want[r] + s[::-1]
    for seed in range(3):
        got = run_cpu(lowered, [a], {"thread_order": "random", "seed": seed})[0]
        np.testing.assert_allclose(got, want, rtol=1e-6)
    nvcc_compiles(src)


def test_vthread_read_modify_write_runs_once_per_virtual_thread():
    # issue 11 item 2: the emitter's own vthread folding ran this increment once, not twice
    A = Buffer("A", (1,), "float32")
    vx, tx = Var("vx"), Var("tx")
    body = bind(vx, 2, "vthread.x", bind(tx, 1, "threadIdx.x",
                                         BufferStore(A, A[0] + 1.0, (0,))))
    func = PrimFunc((A,), bind(Var("b"), 1, "blockIdx.x", body), name="inc")
    lowered = lower_for_cuda(func)
    out = run_cpu(lowered, [np.zeros(1, np.float32)])
    assert out[0][0] == 2.0
    src = emit_cuda(lowered).source
    assert re.search(r"for \(int vx = 0; vx < 2; \+\+vx\) \{\n\s*A\[0\] = A\[0\] \+ 1.0f;", src)


def test_if_else_int64_sizes_and_bool_buffers(nvcc_compiles):
    n = Var("n", "int64")
    A = Buffer("A", (n,), "float32")
    M = Buffer("M", (n,), "bool")
    bx, tx = Var("bx", "int64"), Var("tx", "int64")
    i = bx * 256 + tx
    body = IfThenElse(i < n, IfThenElse(M[i], BufferStore(A, A[i] * 2.0, (i,)),
                                        BufferStore(A, op.const(0.0, "float32"), (i,))))
    f = PrimFunc((A, M), bind(bx, op.ceildiv(n, 256), "blockIdx.x",
                              bind(tx, 256, "threadIdx.x", body)), name="mask")
    res = emit_cuda(f)
    src = res.source
    assert "long long n)" in src
    assert "const long long bx = ((long long)blockIdx.x);" in src
    assert re.search(r"if \(M\[bx \* 256LL \+ tx\]\) \{\n\s*A\[.*\} else \{\n\s*A\[bx \* 256LL \+ tx\] = 0.0f;",
                     src, re.S)
    assert "const bool* __restrict__ M" in src
    nvcc_compiles(src)


def test_nested_loops_of_one_thread_tag_are_an_error():
    A = Buffer("A", (8, 8), "float32")
    t1, t2 = Var("t1"), Var("t2")
    body = bind(t1, 8, "threadIdx.x", bind(t2, 8, "threadIdx.x", BufferStore(A, 0.0, (t1, t2))))
    with pytest.raises(CodegenError, match="bound to threadIdx.x inside another threadIdx.x"):
        emit_cuda(PrimFunc((A,), body))


@pytest.mark.parametrize("uniform", [True, False])
def test_a_barrier_under_a_condition_warns_unless_the_block_agrees(uniform: bool, caplog) -> None:
    """``__syncthreads()`` under ``if``: no warning when the condition reads only sizes and
    block coordinates (a pipeline's first step under ``n >= 1``, the attention kernels'
    ``blockIdx``-dependent KV tile count); a warning naming the kernel when a thread variable
    decides it (the emitter cannot know that the caller made it uniform)."""
    import logging


    n = Var("n")
    a = Buffer("A", (n,), "float32")
    s = Buffer("S", (32,), "float32", scope="shared")
    b, t = Var("b"), Var("t")
    cond = b * 32 < n if uniform else t < 16
    body = seq(BufferStore(s, a[b * 32 + t], (t,)), IfThenElse(cond, sync()), BufferStore(a, s[31 - t], (b * 32 + t,)))
    func = PrimFunc((a,), bind(b, 4, "blockIdx.x", Allocate(s, bind(t, 32, "threadIdx.x", body))), name="k")
    with caplog.at_level(logging.WARNING, logger="loopir.codegen_cuda.emitter"):
        emit_cuda(func)
    assert ("under the condition" in caplog.text) == (not uniform), caplog.text


def test_launch_bounds_take_the_blocks_an_sm() -> None:
    """``min_blocks_per_sm`` caps the registers (``__launch_bounds__(threads, blocks)``) with or
    without ``setmaxnreg``; without either, only the threads (a regression: session 23's
    register-budget check once sat between the branches and replaced the cap)."""
    from loopir.codegen_cuda import emit_function
    from loopir.examples.attention import attention

    assert "__launch_bounds__(128) " in emit_function(vector_add(1000, 128)).emitted.source
    assert "__launch_bounds__(128, 3) " in emit_function(vector_add(1000, 128), 3).emitted.source
    tma = lower_for_cuda(attention(1, 2, 1024, 1024, 64, "float16", wgmma=True, overlap=True, tma=(24, 104),
                                   block_m=128, block_n=64).func)  # fmt: skip
    assert "__launch_bounds__(384, 1) " in emit_function(tma).emitted.source
    assert "__launch_bounds__(384, 2) " in emit_function(tma, 2).emitted.source
