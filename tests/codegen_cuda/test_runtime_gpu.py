"""The compiled runtime on the GPU: asynchronous calls on the caller's stream, CUDA graphs (of
modules with device temporaries too), DLPack and cupy arrays, symbolic shapes, and faults
surfaced as LaunchError."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from loopir.codegen_cuda import build_cuda
from loopir.errors import LaunchError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Var
from loopir.ir.stmt import BufferStore, IfThenElse, PrimFunc

from .builders import bind, row_sum_difference, vector_add

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]


def _accumulate(n) -> PrimFunc:
    """A[i] += B[i] (in place: a chain of calls is order-sensitive)."""
    A = Buffer("A", (n,), "float32")
    B = Buffer("B", (n,), "float32")
    bx, tx = Var("bx"), Var("tx")
    i = bx * 128 + tx
    body = IfThenElse(i < n, BufferStore(A, A[i] + B[i], (i,)))
    blocks = op.ceildiv(n, 128) if isinstance(n, Var) else (n + 127) // 128
    return PrimFunc((A, B), bind(bx, blocks, "blockIdx.x", bind(tx, 128, "threadIdx.x", body)), name="acc")


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def acc(tmp_path_factory):
    return build_cuda(_accumulate(Var("n")), cache_dir=tmp_path_factory.mktemp("acc"))


def _rand(torch, n, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.rand(n, device="cuda", generator=g) + 0.5


def test_call_is_asynchronous_and_ordered_on_the_current_stream(torch, acc):
    a, b = _rand(torch, 1 << 20), _rand(torch, 1 << 20, 1)
    ref = a.double() + 3 * b.double()
    acc(a, b)  # warm: loads the library
    torch.cuda.synchronize()
    a.copy_(ref.float() - 3 * b)
    # a long op in flight on the current stream (about 1 s: three host calls fit in it even
    # when other processes load the machine)
    torch.cuda._sleep(2_000_000_000)
    for _ in range(3):
        acc(a, b)
    busy = not torch.cuda.current_stream().query()
    assert busy, "mod() waited for the GPU: the call must return before the queued work ends"
    torch.cuda.synchronize()
    assert torch.allclose(a.double(), ref, rtol=1e-6)


def test_side_stream_runs_without_device_wide_sync(torch, acc):
    n = 1 << 16
    a, b = _rand(torch, n), _rand(torch, n, 1)
    a0 = a.clone()
    side = torch.cuda.Stream()
    # warm up everything the side stream runs below: CUDA loads kernels lazily, and loading one
    # waits for the kernels in flight, so a first `a * 2` in this process would wait for the
    # sleep (seen when pytest-xdist gave this test to a worker where no earlier test had
    # multiplied a float tensor)
    with torch.cuda.stream(side):
        acc(a, b)
        a * 2
    torch.cuda.synchronize()
    a.copy_(a0)
    torch.cuda.synchronize()
    # keeps the default stream busy for about 1 s, so the side stream's few microseconds of
    # work finish first even when other processes share the GPU
    torch.cuda._sleep(2_000_000_000)
    with torch.cuda.stream(side):
        acc(a, b)
        c = a * 2  # a torch op after the loopir call on the same stream
    side.synchronize()  # the side stream finishes while the default one is still busy
    assert not torch.cuda.current_stream().query()
    assert torch.allclose(c, 2 * (a0 + b), rtol=1e-6)
    torch.cuda.synchronize()


def test_explicit_stream_argument(torch, acc):
    a, b = _rand(torch, 4096), _rand(torch, 4096, 2)
    ref = a + b
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    acc(a, b, stream=s)
    s.synchronize()
    assert torch.allclose(a, ref)
    acc(a, b, stream=s.cuda_stream)  # a raw handle
    s.synchronize()
    assert torch.allclose(a, ref + b)


def test_cuda_graph_of_100_captured_calls_replays_right(torch, acc):
    n = 10_000
    a, b = _rand(torch, n), _rand(torch, n, 3)
    a0 = a.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        acc(a, b)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(100):
            acc(a, b)
    a.copy_(a0)
    g.replay()
    torch.cuda.synchronize()
    assert torch.allclose(a.double(), a0.double() + 100 * b.double(), rtol=1e-5)
    g.replay()
    torch.cuda.synchronize()
    assert torch.allclose(a.double(), a0.double() + 200 * b.double(), rtol=1e-5)


@pytest.fixture(scope="module")
def rowdiff(tmp_path_factory):
    """R = row sums of A (a device temporary: a global intermediate in the workspace), then
    O[i] = R[i] - R[n - 1 - i]."""
    mod = build_cuda(row_sum_difference(Var("n")), cache_dir=tmp_path_factory.mktemp("rowdiff"))
    assert mod.host_code.temps
    return mod


def _rows(torch, n, seed):
    return _rand(torch, n * 64, seed).view(n, 64)


def _check_rowdiff(torch, a, o):
    r = a.double().sum(dim=1)
    assert torch.allclose(o.double(), r - r.flip(0), rtol=0, atol=1e-3)


def _warm_up(torch, mod, *arrays, explicit_stream=False):
    """One call outside the capture on a side stream, as torch's docs say to warm up (the
    library and its kernels are loaded); returns the side stream."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        if explicit_stream:
            mod(*arrays, stream=s)
        else:
            mod(*arrays)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    return s


@pytest.mark.parametrize("on", ["graph(g)", "graph(g, stream=s)"])
def test_cuda_graph_of_a_module_with_device_temporaries(torch, rowdiff, on):
    """graph(g) captures on torch's own side stream, where no call ran before (the workspace
    used to be allocated inside the capture there, which failed and broke the process's CUDA
    state); graph(g, stream=s) on the warm-up stream. Captured calls take their workspace from
    torch's allocator (the graph's pool), also at a size never called outside the capture."""
    n, m = 5000, 7001
    a, o = _rows(torch, n, 0), torch.empty(n, device="cuda")
    b, p = _rows(torch, m, 1), torch.empty(m, device="cuda")
    s = _warm_up(torch, rowdiff, a, o)
    _check_rowdiff(torch, a, o)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, **({"stream": s} if on == "graph(g, stream=s)" else {})):
        rowdiff(a, o)
        rowdiff(b, p)  # m was never called: its workspace is new
    for seed in range(2, 5):  # new data in the static inputs, replayed
        a.copy_(_rows(torch, n, seed))
        b.copy_(_rows(torch, m, seed + 10))
        o.fill_(float("nan"))
        p.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        _check_rowdiff(torch, a, o)
        _check_rowdiff(torch, b, p)
    # the process's CUDA state is intact: eager calls on the warm-up stream and replays agree
    c, q = _rows(torch, n, 20), torch.empty(n, device="cuda")
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        rowdiff(c, q)
    g.replay()
    torch.cuda.synchronize()
    _check_rowdiff(torch, c, q)
    _check_rowdiff(torch, a, o)


def test_capture_that_cannot_work_is_refused_and_leaves_the_capture_intact(torch, rowdiff):
    n = 6000  # more than test_capture_without_torch_reuses_the_streams_workspace's calls need
    a, o = _rows(torch, n, 0), torch.empty(n, device="cuda")
    _warm_up(torch, rowdiff, a, o)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        with pytest.raises(LaunchError, match=r"rowdiff: a call with NumPy arrays \(copied to the device "
                           r"and back, synchronized\) cannot be captured in a CUDA graph: torch's "
                           "current stream is capturing"):
            rowdiff(np.ones((n, 64), np.float32), np.empty(n, np.float32))
        # arrays torch does not own: no capture-aware allocator, and the capture stream has no
        # workspace this large from an earlier call (torch pools its streams: an earlier test's
        # side stream may be this one)
        with pytest.raises(LaunchError, match=r"is capturing a CUDA graph, and the function's device "
                           r"temporaries need a 24064-byte workspace \(the stream has (none|\d+)\), "
                           "which cannot be allocated during a capture"):
            rowdiff(_DLPackOnly(a), _DLPackOnly(o), stream=torch.cuda.current_stream())
        rowdiff(a, o)  # the capture goes on
    a.copy_(_rows(torch, n, 5))
    g.replay()
    torch.cuda.synchronize()
    _check_rowdiff(torch, a, o)


def test_capture_without_torch_reuses_the_streams_workspace(torch, rowdiff):
    """A caller without torch (DLPack arrays, an explicit stream) captures on a stream where a
    call with the same shapes made the workspace before the capture."""
    n = 4000
    a, o = _rows(torch, n, 0), torch.empty(n, device="cuda")
    s = _warm_up(torch, rowdiff, _DLPackOnly(a), _DLPackOnly(o), explicit_stream=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        rowdiff(_DLPackOnly(a), _DLPackOnly(o), stream=s)
    for seed in (1, 2):
        a.copy_(_rows(torch, n, seed))
        o.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        _check_rowdiff(torch, a, o)


def test_symbolic_sizes_through_the_fast_path(torch, tmp_path):
    mod = build_cuda(vector_add(Var("n"), 128), cache_dir=tmp_path)
    for n in (1, 127, 128, 129, 100_003):
        a, b = _rand(torch, n), _rand(torch, n, 1)
        c = torch.full((n,), float("nan"), device="cuda")
        mod(a, b, c)
        torch.cuda.synchronize()
        assert torch.equal(c, a + b), n
    with pytest.raises(LaunchError, match="parameter 'C': dimension 0 is size n, bound to 5"):
        mod(_rand(torch, 5), _rand(torch, 5), _rand(torch, 6))
    with pytest.raises(LaunchError, match=r"parameter 'B': a torch tensor on cpu; move it to the GPU"):
        mod(_rand(torch, 5), _rand(torch, 5).cpu(), _rand(torch, 5))
    with pytest.raises(LaunchError, match="parameter 'A': dtype must be float32, got float16"):
        mod(_rand(torch, 5).half(), _rand(torch, 5), _rand(torch, 5))
    with pytest.raises(LaunchError, match="parameter 'A': array is not C-contiguous"):
        mod(_rand(torch, 10)[::2], _rand(torch, 5), _rand(torch, 5))


class _DLPackOnly:
    """An array that only speaks DLPack (as jax's do)."""

    def __init__(self, t) -> None:
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_dlpack_and_cupy_arrays(torch, tmp_path):
    mod = build_cuda(vector_add(Var("n"), 128), cache_dir=tmp_path)
    a, b = _rand(torch, 1000), _rand(torch, 1000, 1)
    c = torch.zeros(1000, device="cuda")
    mod(_DLPackOnly(a), _DLPackOnly(b), _DLPackOnly(c))
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)
    with pytest.raises(LaunchError, match="parameter 'A': dtype must be float32, got float64"):
        mod(_DLPackOnly(a.double()), b, c)
    cupy = pytest.importorskip("cupy")
    # The inputs are made on the stream the call runs on: a non-blocking stream is not ordered
    # after cupy's default one, so inputs made there could still be in flight (seen under load).
    with cupy.cuda.Stream(non_blocking=True) as s:  # cupy's current stream is used
        x = cupy.random.rand(777, dtype=cupy.float32)
        y = cupy.random.rand(777, dtype=cupy.float32)
        z = cupy.zeros(777, dtype=cupy.float32)
        mod(x, y, z)
        s.synchronize()
    assert cupy.allclose(z, x + y)


def test_numpy_arrays_are_copied_and_synchronous(tmp_path):
    mod = build_cuda(_accumulate(1000), cache_dir=tmp_path)
    a = np.random.default_rng(0).random(1000, dtype=np.float32)
    b = np.random.default_rng(1).random(1000, dtype=np.float32)
    a0 = a.copy()
    mod(a, b)
    np.testing.assert_allclose(a, a0 + b, rtol=1e-6)


def test_benchmark_times_the_user_entry(torch, acc):
    a, b = _rand(torch, 1 << 20), _rand(torch, 1 << 20, 1)
    one = acc.benchmark(a, b, warmup=3, repeat=10)
    many = acc.benchmark(a, b, warmup=3, repeat=10, inner=20)
    assert one > 0 and many > 0


_FAULT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import loopir
    from loopir.codegen_cuda import build_cuda
    from loopir.errors import LaunchError
    from loopir.ir.buffer import Buffer
    from loopir.ir.expr import Var
    from loopir.ir.stmt import BufferStore, For, ForKind, PrimFunc

    n = Var("n")
    A = Buffer("A", (n,), "float32")
    tx = Var("tx")
    # an index far past the end (hand-written IR: nothing checks it)
    body = For(tx, 0, 32, ForKind.THREAD_BINDING, BufferStore(A, 1.0, (tx + n * 131072,)),
               thread_tag="threadIdx.x")
    func = PrimFunc((A,), body, name="oob")
    sync = sys.argv[1] == "sync"
    with loopir.PassContext(config={"cuda.sync_after_launch": sync, "cuda.race_check": False}):
        mod = build_cuda(func, cache_dir=sys.argv[2])
    import torch
    a = torch.zeros(1 << 12, device="cuda")
    try:
        mod(a)
        mod.synchronize()
    except LaunchError as e:
        print("LaunchError:", e)
        sys.exit(0)
    print("no error")
    sys.exit(1)
    """
)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_faulting_kernel_gives_a_launch_error_naming_it(mode, tmp_path):
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "-c", _FAULT, mode, str(tmp_path)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "LaunchError:" in out and "illegal" in out.lower(), out
    if mode == "sync":  # at its own launch: the kernel is named
        assert "oob: kernel oob_kernel0 failed" in out, out
    else:  # surfaced at the synchronization, naming the function
        assert "oob: synchronize" in out, out
