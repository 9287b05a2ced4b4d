"""CUDAModule: argument checking and the compiled host program (no GPU needed), GPU runs.

Without a GPU the host program is checked through a trace build (``-DLOOPIR_HOST_TRACE``): the
same generated host code, compiled by nvcc, records its launches, library calls and copies
instead of running them.
"""

from __future__ import annotations

import numpy as np
import pytest

from loopir.codegen_cuda import build_cuda
from loopir.errors import LaunchError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Cast, Var
from loopir.ir.stmt import Allocate, BufferStore, PrimFunc, seq
from loopir.testing import check_gemm
from loopir.tune.workers import visible_devices

from .builders import bind, loop, sync, tiled_matmul, vector_add, vthread_gemm
from .test_emitter import _copy_func

pytestmark = pytest.mark.nvcc


@pytest.fixture(scope="module")
def vadd(tmp_path_factory):
    return build_cuda(vector_add(Var("n"), 128), cache_dir=tmp_path_factory.mktemp("c"))


TRACE = ("-DLOOPIR_HOST_TRACE",)


def _f32(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def test_wrong_argument_count(vadd):
    with pytest.raises(LaunchError, match=r"expected 3 arrays \(A, B, C\), got 2"):
        vadd(_f32(10), _f32(10))


def test_wrong_dtype_names_parameter(vadd):
    with pytest.raises(LaunchError, match="parameter 'B': dtype must be float32.*got float64"):
        vadd(_f32(10), np.zeros(10), _f32(10))


def test_wrong_ndim_and_inconsistent_sizes(vadd):
    with pytest.raises(LaunchError, match=r"parameter 'A': expected 1 dimensions"):
        vadd(_f32(2, 5), _f32(10), _f32(10))
    with pytest.raises(LaunchError, match="parameter 'C': dimension 0 is size n, bound to 10"):
        vadd(_f32(10), _f32(10), _f32(11))


def test_fixed_shape_mismatch(tmp_path):
    mod = build_cuda(vector_add(64, 32), cache_dir=tmp_path)
    with pytest.raises(LaunchError, match="parameter 'A': dimension 0 must be 64, got 63"):
        mod(_f32(63), _f32(64), _f32(64))


def test_non_contiguous_and_foreign_objects(vadd):
    with pytest.raises(LaunchError, match="parameter 'A': array is not C-contiguous"):
        vadd(_f32(20)[::2], _f32(10), _f32(10))
    with pytest.raises(LaunchError, match="parameter 'A': expected a CUDA array.*or a numpy array, got list"):
        vadd([1.0] * 10, _f32(10), _f32(10))


class _FakeCudaArray:
    """Just enough of __cuda_array_interface__ to exercise the checks."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x10000):
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "strides": strides, "data": (ptr, False),
            "version": 3,
        }


def test_cuda_array_interface_checks(vadd):
    ok = _FakeCudaArray((10,))
    with pytest.raises(LaunchError, match="parameter 'A': dtype must be float32, got float64"):
        vadd(_FakeCudaArray((10,), "<f8"), ok, ok)
    with pytest.raises(LaunchError, match="parameter 'B': array is not C-contiguous"):
        vadd(ok, _FakeCudaArray((10,), strides=(8,)), ok)


@pytest.mark.skipif(bool(visible_devices()), reason="checks the error a machine without a GPU gives")
def test_call_without_a_gpu_raises_launch_error(vadd):
    # the library loads and its entry runs; the CUDA runtime finds no device
    ok = _FakeCudaArray((10,))
    with pytest.raises(LaunchError, match="vector_add: no usable CUDA device"):
        vadd(ok, ok, ok)
    with pytest.raises(LaunchError, match="vector_add: no usable CUDA device"):
        vadd(_f32(10), _f32(10), _f32(10))
    with pytest.raises(LaunchError, match="vector_add: no usable CUDA device"):
        vadd.benchmark(_f32(10), _f32(10), _f32(10))


def test_benchmark_argument_checks(vadd):
    with pytest.raises(LaunchError, match="repeat >= 1"):
        vadd.benchmark(_f32(10), _f32(10), _f32(10), repeat=0)
    with pytest.raises(LaunchError, match="expected 3 arrays"):
        vadd.benchmark(_f32(10), _f32(10))


def test_explicit_stream_argument_is_checked(vadd):
    ok = _FakeCudaArray((10,))
    with pytest.raises(LaunchError, match="stream: expected a CUDA stream or handle, got str"):
        vadd(ok, ok, ok, stream="s0")


# ---- on the GPU ---------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_vector_add_symbolic(vadd):
    for n in (1, 1000, 4097):
        a, b = _f32(n), _f32(n) + 1
        c = np.full(n, np.nan, np.float32)
        vadd(a, b, c)
        np.testing.assert_allclose(c, a + b, rtol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(100, 70, 90), (64, 64, 64), (33, 9, 130)])
def test_gpu_tiled_matmul(shape, cuda_cache):
    M, K, N = shape
    mod = build_cuda(tiled_matmul(M, K, N), cache_dir=cuda_cache)
    check_gemm(mod, M, K, N, seed=1)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(200, 70, 256), (128, 4, 128), (257, 33, 512)])
def test_gpu_vthread_gemm(shape, cuda_cache):
    M, K, N = shape
    mod = build_cuda(vthread_gemm(M, K, N), cache_dir=cuda_cache)
    check_gemm(mod, M, K, N, seed=2)
    a, b, c = np.ones((M, K), np.float32), np.ones((K, N), np.float32), np.empty((M, N), np.float32)
    assert mod.benchmark(a, b, c, warmup=2, repeat=5) > 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,lanes", [("float32", 4), ("float16", 2), ("float16", 8)])
def test_gpu_vector_copy(dtype, lanes, cuda_cache):
    mod = build_cuda(_copy_func(0, lanes, dtype), cache_dir=cuda_cache)
    b = np.arange(1032).astype(dtype)
    a = np.zeros(1024, dtype)
    mod(a, b)
    np.testing.assert_array_equal(a, b[:1024])


@pytest.mark.gpu
def test_gpu_torch_arrays_in_place_and_alignment(cuda_cache):
    torch = pytest.importorskip("torch")
    mod = build_cuda(_copy_func(0), cache_dir=cuda_cache)
    b = torch.arange(1032, dtype=torch.float32, device="cuda")
    a = torch.zeros(1024, dtype=torch.float32, device="cuda")
    mod(a, b)
    torch.cuda.synchronize()
    assert torch.equal(a, b[:1024])
    # a view starting one element in is 4-byte aligned only: the float4 path refuses it
    big = torch.zeros(1025, dtype=torch.float32, device="cuda")
    with pytest.raises(LaunchError, match="parameter 'A' must be 16-byte aligned"):
        mod(big[1:], b)
    with pytest.raises(LaunchError, match="parameter 'B': array is not C-contiguous"):
        mod(a, torch.zeros(2064, device="cuda")[::2])
    with pytest.raises(LaunchError, match="parameter 'A': dtype must be float32"):
        mod(a.half(), b)


@pytest.mark.gpu
def test_gpu_host_temporaries_and_host_loop(cuda_cache):
    n = 256
    A = Buffer("A", (n,), "float32")
    C = Buffer("C", (n,), "float32")
    T = Buffer("T", (n,), "float32")
    t1, t2, b1, b2, it = Var("t1"), Var("t2"), Var("b1"), Var("b2"), Var("it")
    k1 = bind(b1, 2, "blockIdx.x", bind(t1, 128, "threadIdx.x",
                                         BufferStore(T, A[b1 * 128 + t1] * 2.0, (b1 * 128 + t1,))))
    k2 = bind(b2, 2, "blockIdx.x", bind(t2, 128, "threadIdx.x", BufferStore(
        C, C[b2 * 128 + t2] + T[b2 * 128 + t2] + Cast("float32", it), (b2 * 128 + t2,))))
    f = PrimFunc((A, C), Allocate(T, seq(k1, loop(it, 3, k2))), name="two")
    mod = build_cuda(f, cache_dir=cuda_cache)
    a = _f32(n)
    c = np.ones(n, np.float32)
    mod(a, c)
    np.testing.assert_allclose(c, 1 + 3 * 2 * a + (0 + 1 + 2), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_floor_semantics(cuda_cache):
    A = Buffer("A", (64,), "int32")
    tx = Var("tx")
    body = BufferStore(A, op.floordiv(tx - 32, 5) * 100 + op.floormod(tx - 32, 5), (tx,))
    mod = build_cuda(PrimFunc((A,), bind(tx, 64, "threadIdx.x", body)), cache_dir=cuda_cache)
    a = np.zeros(64, np.int32)
    mod(a)
    t = np.arange(64) - 32
    np.testing.assert_array_equal(a, (t // 5) * 100 + t % 5)


@pytest.mark.gpu
def test_gpu_fp16_math(cuda_cache):
    H = Buffer("H", (128,), "float16")
    F = Buffer("F", (128,), "float32")
    tx = Var("tx")
    body = seq(BufferStore(F, Cast("float32", op.exp(H[tx])) + op.tanh(F[tx]), (tx,)),
               BufferStore(H, H[tx] * Cast("float16", F[tx]), (tx,)))
    mod = build_cuda(PrimFunc((H, F), bind(tx, 128, "threadIdx.x", body)), cache_dir=cuda_cache)
    h = (np.linspace(-2, 2, 128)).astype(np.float16)
    f = np.linspace(-1, 1, 128).astype(np.float32)
    h0, f0 = h.copy(), f.copy()
    mod(h, f)
    f_ref = np.exp(h0.astype(np.float32)).astype(np.float16).astype(np.float32) + np.tanh(f0)
    np.testing.assert_allclose(f, f_ref, rtol=2e-3)
    np.testing.assert_allclose(h.astype(np.float32),
                               (h0 * f_ref.astype(np.float16)).astype(np.float32), rtol=2e-3)


@pytest.mark.gpu
def test_gpu_block_limit_is_reported(cuda_cache):
    A = Buffer("A", (2048,), "float32")
    tx = Var("tx")
    mod = build_cuda(PrimFunc((A,), bind(tx, 2048, "threadIdx.x", BufferStore(A, 1.0, (tx,)))),
                     cache_dir=cuda_cache)
    with pytest.raises(LaunchError, match="exceeds the 1024-thread limit"):
        mod(np.zeros(2048, np.float32))


@pytest.mark.gpu
def test_gpu_shared_roundtrip_with_barrier(cuda_cache):
    A = Buffer("A", (128,), "float32")
    S = Buffer("S", (128,), "float32", scope="shared")
    t1, t2 = Var("t1"), Var("t2")
    body = Allocate(S, bind(Var("b"), 1, "blockIdx.x", seq(
        bind(t1, 128, "threadIdx.x", BufferStore(S, A[t1], (t1,))),
        sync(),
        bind(t2, 96, "threadIdx.x", BufferStore(A, S[t2] + S[t2 + 32], (t2,))),
    )))
    mod = build_cuda(PrimFunc((A,), body), cache_dir=cuda_cache)
    a = _f32(128)
    a0 = a.copy()
    mod(a)
    np.testing.assert_allclose(a[:96], a0[:96] + a0[32:128], rtol=1e-6)
    np.testing.assert_array_equal(a[96:], a0[96:])


# ---- the compiled host program, through a trace build (no GPU needed) -------------------------


def _trace(mod) -> list[str]:
    return mod._library().trace().splitlines()


def test_launch_marshalling_in_a_trace_build(tmp_path):
    mod = build_cuda(vector_add(Var("n"), 128), cache_dir=tmp_path, nvcc_flags=TRACE)
    a, b, c = _f32(1000), _f32(1000), _f32(1000)
    mod(a, b, c)
    # inputs copied in, one launch with the size as its int parameter, the output copied back
    lines = _trace(mod)
    assert lines[:3] == ["htod 4000"] * 3 and lines[4:] == ["dtoh 4000"]
    assert lines[3].startswith("launch vector_add_kernel0 grid=(8,1,1) block=(128,1,1) args=")
    assert lines[3].endswith(" 1000")
    assert mod.benchmark(a, b, c, warmup=1, repeat=3) == 1.5
    # device arrays: no copies, the pointers passed through as given
    before = len(_trace(mod))
    mod(_FakeCudaArray((7,), ptr=0x100), _FakeCudaArray((7,), ptr=0x200), _FakeCudaArray((7,), ptr=0x300))
    assert _trace(mod)[before:] == [
        "launch vector_add_kernel0 grid=(1,1,1) block=(128,1,1) args= 0x100 0x200 0x300 7"]


def test_host_loop_and_workspace_in_a_trace_build(tmp_path):
    A = Buffer("A", (4, 64), "float32")
    T = Buffer("T", (4, 64), "float32")
    t, tx, tx2 = Var("t"), Var("tx"), Var("tx2")
    body = Allocate(T, seq(
        loop(t, 4, bind(tx, 64, "threadIdx.x", BufferStore(T, A[t, tx], (t, tx)))),
        bind(tx2, 64, "threadIdx.x", BufferStore(A, T[0, tx2], (0, tx2))),
    ))
    mod = build_cuda(PrimFunc((A,), body, name="h"), cache_dir=tmp_path, nvcc_flags=TRACE)
    mod(_FakeCudaArray((4, 64), ptr=0x1000))
    launches = [x.split() for x in _trace(mod) if x.startswith("launch")]
    assert [x[1] for x in launches] == ["h_kernel0"] * 4 + ["h_kernel1"]
    assert [x[-1] for x in launches[:4]] == ["0", "1", "2", "3"]  # the host loop variable
    temp = launches[0][-2]
    assert launches[4][-1] == temp and temp != "0x1000"  # one temporary, from the workspace
    assert mod._library().workspace() == 1024


@pytest.mark.parametrize("symbolic", [False, True])
def test_workspace_spans_a_padded_temporary(tmp_path, symbolic):
    # Regression (GPU fuzzer, seed 9002): storage_align gave a global temporary strides (48, 16)
    # but the host sized its workspace slot by the shape (6 x 3 floats), so the kernel's writes
    # ran into the next temporary. The slot must span 1 + sum((extent - 1) * stride) elements.
    n = Var("n") if symbolic else 6
    A = Buffer("A", (n, 3), "float32")
    T = Buffer("T", (n, 3), "float32", strides=(48, 16))
    i, tx, tx2 = Var("i"), Var("tx"), Var("tx2")
    body = Allocate(T, seq(
        bind(i, n, "blockIdx.x", bind(tx, 3, "threadIdx.x", BufferStore(T, A[i, tx], (i, tx)))),
        bind(i, n, "blockIdx.x", bind(tx2, 3, "threadIdx.x", BufferStore(A, T[i, tx2], (i, tx2)))),
    ))
    mod = build_cuda(PrimFunc((A,), body, name="h"), cache_dir=tmp_path, nvcc_flags=TRACE)
    span = (5 * 48 + 2 * 16 + 1) * 4  # 1092 bytes, not 6 * 3 * 4 = 72
    sizes = (6,) if symbolic else ()
    assert mod._library().workspace(*sizes) == (span + 255) // 256 * 256
    if symbolic:
        assert mod._library().workspace(0) == 0  # an empty temporary spans nothing


def test_misaligned_cuda_pointer_is_refused_by_the_host_code(tmp_path):
    mod = build_cuda(_copy_func(0), cache_dir=tmp_path, nvcc_flags=TRACE)
    a = _FakeCudaArray((1024,), ptr=0x10004)
    b = _FakeCudaArray((1032,), ptr=0x20000)
    with pytest.raises(LaunchError, match="parameter 'A' must be 16-byte aligned for vector accesses, got address 0x10004"):
        mod(a, b)
    assert _trace(mod) == []


def test_host_if_on_sizes_in_a_trace_build(tmp_path):
    from loopir.ir.stmt import IfThenElse

    n = Var("n")
    A = Buffer("A", (n,), "float32")
    tx, ty = Var("tx"), Var("ty")
    big = bind(tx, 64, "threadIdx.x", BufferStore(A, 1.0, (tx,)))
    small = bind(ty, 8, "threadIdx.x", BufferStore(A, 2.0, (ty,)))
    mod = build_cuda(PrimFunc((A,), IfThenElse(n >= 64, big, small), name="pick"),
                     cache_dir=tmp_path, nvcc_flags=TRACE)
    mod(_FakeCudaArray((100,)))
    mod(_FakeCudaArray((10,)))
    assert [x.split()[1:4] for x in _trace(mod)] == [
        ["pick_kernel0", "grid=(1,1,1)", "block=(64,1,1)"], ["pick_kernel1", "grid=(1,1,1)", "block=(8,1,1)"]]


def test_launch_limits_are_checked_by_the_host_code(tmp_path):
    A = Buffer("A", (2048,), "float32")
    tx = Var("tx")
    mod = build_cuda(PrimFunc((A,), bind(tx, 2048, "threadIdx.x", BufferStore(A, 1.0, (tx,)))),
                     cache_dir=tmp_path, nvcc_flags=TRACE)
    with pytest.raises(LaunchError, match=r"kernel main_kernel0: block \(2048, 1, 1\) exceeds the 1024-thread limit"):
        mod(_FakeCudaArray((2048,)))


def test_symbolic_signature_is_checked_once_and_cached(tmp_path):
    mod = build_cuda(vector_add(Var("n"), 128), cache_dir=tmp_path, nvcc_flags=TRACE)
    ok = _FakeCudaArray((10,))
    mod(ok, ok, ok)
    assert mod._signatures == {((10,), (10,), (10,)): (10,)}
    mod(ok, ok, ok)
    assert len(mod._signatures) == 1
    with pytest.raises(LaunchError, match="dimension 0 is size n, bound to 10"):
        mod(ok, ok, _FakeCudaArray((11,)))
    assert len(mod._signatures) == 1  # a refused signature is not cached
