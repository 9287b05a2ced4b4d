"""CUDA graph capture and device temporaries, without a GPU: a trace build (its capture query
answers what the test sets, per stream) and a fake torch (tests/codegen_cuda/fake_torch.py).

What is checked: where a call's workspace comes from (one per stream outside a capture; from
torch's allocator, fresh and graph-private, for a captured torch call; the stream's existing one
for a captured call without torch), and that everything a capture cannot record is refused with
LaunchError before any allocation, copy or launch. The same behaviour on the H200 is in
test_runtime_gpu.py.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest

from loopir.codegen_cuda import args as args_module
from loopir.codegen_cuda import build_cuda
from loopir.codegen_cuda.runtime import _Library
from loopir.codegen_cuda.workspace import torch_capturing
from loopir.errors import LaunchError, LoopIRError
from loopir.ir.expr import Var

from .builders import row_sum_difference, vector_add
from .fake_torch import FakeTorch

pytestmark = pytest.mark.nvcc
TRACE = ("-DLOOPIR_HOST_TRACE",)
S1, S2, S3 = 0x10, 0x20, 0x30  # stream handles (the trace build never dereferences them)


class _Cai:
    """A CUDA array of a library other than torch (cupy-like, __cuda_array_interface__)."""

    def __init__(self, shape, ptr):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (ptr, False),
                                         "version": 3, "strides": None}  # fmt: skip


@pytest.fixture(scope="module")
def trace_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("capture")


def _build(func, cache):
    """A fresh module (its own workspaces) of the cached trace library; the library's fake
    capture state is process-wide, so it is reset when the test ends (see ``rowdiff``)."""
    return build_cuda(func, cache_dir=cache, nvcc_flags=TRACE)


@pytest.fixture
def rowdiff(trace_cache):
    mod = _build(row_sum_difference(Var("n")), trace_cache)
    assert mod.host_code.temps  # R lives in the workspace
    yield mod
    _capturing(mod, 0, 0)


@pytest.fixture
def vadd(trace_cache):
    mod = _build(vector_add(Var("n"), 128), trace_cache)
    yield mod
    _capturing(mod, 0, 0)


def _refuse(*a, **k):
    raise AssertionError("cudaMalloc/cudaFree called")


@pytest.fixture
def no_malloc(monkeypatch):
    """Fail the test if the runtime calls cudaMalloc or cudaFree."""
    monkeypatch.setattr(_Library, "malloc", _refuse)
    monkeypatch.setattr(_Library, "free", _refuse)


@pytest.fixture
def torch(monkeypatch):
    fake = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(args_module, "_RAW_STREAM", [])  # never cache the fake's getter
    return fake


def _capturing(mod, stream, status=1):
    """The trace build's capture query answers ``status`` for ``stream`` (0 for the others)."""
    fn = mod._library().dll.loopir_rt_set_capture_status
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int]
    fn(stream or None, status)


def _launches(mod, since=0):
    return [x.split() for x in mod._library().trace().splitlines()[since:] if x.startswith("launch")]


def _mark(mod):
    return len(mod._library().trace().splitlines())


def _temp_ptrs(mod, since):
    """The workspace pointer each launch since ``since`` got (R: the second argument)."""
    return [int(x[6], 16) for x in _launches(mod, since)]


def _cai(n):
    return _Cai((n, 64), 0x100000), _Cai((n,), 0x200000)


# ---- outside a capture ------------------------------------------------------------------------


def test_eager_calls_share_one_workspace_per_stream_and_grow_it(rowdiff):
    m = _mark(rowdiff)
    rowdiff(*_cai(1000), stream=S1)
    rowdiff(*_cai(1000), stream=S1)
    rowdiff(*_cai(1000), stream=S2)
    ptrs = _temp_ptrs(rowdiff, m)
    assert len(ptrs) == 6 and len(set(ptrs[:4])) == 1 and len(set(ptrs[4:])) == 1
    assert ptrs[0] != ptrs[4]  # another stream, another workspace
    pool = rowdiff._workspaces
    assert sorted(pool.cached) == [(0, S1), (0, S2)] and pool.cached[(0, S1)].nbytes == 4096
    m = _mark(rowdiff)
    rowdiff(*_cai(3000), stream=S1)  # needs more: grown
    assert pool.cached[(0, S1)].nbytes == 12032
    assert _temp_ptrs(rowdiff, m)[0] not in ptrs


def test_eager_torch_calls_take_the_workspace_from_torchs_allocator(rowdiff, torch, no_malloc):
    torch.stream = S1
    a, o = torch.tensor((1000, 64), 0x100000), torch.tensor((1000,), 0x200000)
    m = _mark(rowdiff)
    rowdiff(a, o)  # the fast path
    rowdiff(a, o)
    assert torch.allocations == [(4096, "uint8", 0, S1)]  # once, on the call's stream
    ws = rowdiff._workspaces.cached[(0, S1)]
    assert set(_temp_ptrs(rowdiff, m)) == {ws.tensor.data_ptr()}
    # an explicit stream that is not torch's current one: allocated with that stream current,
    # so the caching allocator ties the block to the stream the kernels run on
    rowdiff(a, o, stream=S2)
    assert torch.allocations[-1] == (4096, "uint8", 0, S2)
    rowdiff(torch.tensor((3000, 64), 0x100000), torch.tensor((3000,), 0x200000))
    assert torch.allocations[-1] == (12032, "uint8", 0, S1)  # grown: the old one just dropped


# ---- during a capture --------------------------------------------------------------------------


@pytest.mark.parametrize("warm_on_capture_stream", [False, True], ids=["graph(g)", "graph(g, stream=s)"])
def test_captured_torch_calls_get_graph_private_workspaces(rowdiff, torch, no_malloc,
                                                           warm_on_capture_stream):  # fmt: skip
    """torch.cuda.graph(g) captures on a side stream of its own; graph(g, stream=s) on s, where
    the warm-up made a workspace. Either way a captured call takes a fresh workspace from
    torch's allocator (the graph's pool), never a cudaMalloc, and never the eager one."""
    a, o = torch.tensor((1000, 64), 0x100000), torch.tensor((1000,), 0x200000)
    capture_stream = S1 if warm_on_capture_stream else S3
    torch.stream = S1
    rowdiff(a, o)  # warm-up
    eager = rowdiff._workspaces.cached[(0, S1)].ptr
    torch.stream = capture_stream
    _capturing(rowdiff, capture_stream)
    m = _mark(rowdiff)
    rowdiff(a, o)
    rowdiff(a, o)
    assert torch.allocations[1:] == [(4096, "uint8", 0, capture_stream)] * 2
    ptrs = _temp_ptrs(rowdiff, m)
    assert len(ptrs) == 4 and eager not in ptrs
    assert sorted(rowdiff._workspaces.cached) == [(0, S1)]  # a captured one is not kept
    _capturing(rowdiff, capture_stream, 0)  # the capture ended: eager calls as before
    torch.stream = S1
    m = _mark(rowdiff)
    rowdiff(a, o)
    assert _temp_ptrs(rowdiff, m) == [eager, eager]


def test_captured_torch_call_on_an_explicit_stream_allocates_on_that_stream(rowdiff, torch, no_malloc):
    torch.stream = S1  # torch's current stream is not the capturing one
    _capturing(rowdiff, S2)
    rowdiff(torch.tensor((500, 64), 0x100000), torch.tensor((500,), 0x200000), stream=S2)
    assert torch.allocations == [(2048, "uint8", 0, S2)]
    assert torch.stream == S1


def test_captured_call_without_torch_reuses_a_large_enough_workspace(rowdiff, monkeypatch):
    rowdiff(*_cai(1000), stream=S1)  # warm-up on the capture stream: a 4096-byte workspace
    warm = rowdiff._workspaces.cached[(0, S1)].ptr
    monkeypatch.setattr(_Library, "malloc", _refuse)
    _capturing(rowdiff, S1)
    m = _mark(rowdiff)
    rowdiff(*_cai(1000), stream=S1)
    rowdiff(*_cai(10), stream=S1)  # smaller: the same workspace
    assert _temp_ptrs(rowdiff, m) == [warm] * 4
    m = _mark(rowdiff)
    with pytest.raises(LaunchError, match=r"rowdiff: stream 0x10 is capturing a CUDA graph, and the "
                       r"function's device temporaries need a 8192-byte workspace \(the stream has "
                       r"4096\), which cannot be allocated during a capture: pass torch tensors"):
        rowdiff(*_cai(2000), stream=S1)
    assert _launches(rowdiff, m) == []


def test_captured_call_without_torch_or_workspace_is_refused_before_touching_cuda(rowdiff, monkeypatch):
    calls = []
    monkeypatch.setattr(_Library, "malloc", lambda self, *a: calls.append(a) or 0x1000)
    _capturing(rowdiff, S1)
    m = _mark(rowdiff)
    with pytest.raises(LoopIRError, match=r"need a 4096-byte workspace \(the stream has none\), which "
                       "cannot be allocated during a capture"):
        rowdiff(*_cai(1000), stream=S1)
    assert calls == [] and _launches(rowdiff, m) == [] and rowdiff._workspaces.cached == {}
    rowdiff(*_cai(1000), stream=S2)  # another stream is not capturing
    assert len(calls) == 1


def test_numpy_arrays_during_a_capture_are_refused_before_any_copy(vadd, torch):
    a = np.ones(100, np.float32)
    torch.capturing = True  # inside torch.cuda.graph: the NumPy call would use stream 0
    m = _mark(vadd)
    with pytest.raises(LaunchError, match=r"vector_add: a call with NumPy arrays \(copied to the "
                       r"device and back, synchronized\) cannot be captured in a CUDA graph: "
                       "torch's current stream is capturing a CUDA graph"):
        vadd(a, a, a.copy())
    torch.capturing = False
    _capturing(vadd, S1)
    with pytest.raises(LaunchError, match="cannot be captured in a CUDA graph: stream 0x10 is capturing"):
        vadd(a, a, a.copy(), stream=S1)
    assert vadd._library().trace().splitlines()[m:] == []  # no copy, no launch
    vadd(a, a, a.copy())  # not capturing: copied as ever
    assert vadd._library().trace().splitlines()[m:][:3] == ["htod 400"] * 3


def test_benchmark_and_synchronize_are_refused_during_a_capture(vadd, torch):
    a = np.ones(100, np.float32)
    _capturing(vadd, 0)
    with pytest.raises(LaunchError, match=r"benchmark\(\) \(events, copies, synchronization\) cannot "
                       "be captured in a CUDA graph: stream 0x0 is capturing"):
        vadd.benchmark(a, a, a.copy())
    torch.capturing = True
    with pytest.raises(LaunchError, match=r"synchronize\(\) cannot be captured in a CUDA graph"):
        vadd.synchronize()


@pytest.mark.parametrize("status,message", [
    (2, "stream 0x10 was capturing a CUDA graph that an earlier operation invalidated"),
    (3, "the call would use the legacy default stream while a blocking stream captures"),
    (-1, "cudaStreamIsCapturing: a failure the test asked for"),
])  # fmt: skip
def test_an_unusable_capture_state_is_reported_before_the_launch(rowdiff, torch, status, message):
    _capturing(rowdiff, S1, status)
    m = _mark(rowdiff)
    with pytest.raises(LaunchError, match=f"rowdiff: .*{message}"):
        rowdiff(*_cai(100), stream=S1)
    torch.stream = S1
    with pytest.raises(LaunchError, match=f"rowdiff: .*{message}"):
        rowdiff(torch.tensor((100, 64), 0x100000), torch.tensor((100,), 0x200000))
    assert _launches(rowdiff, m) == [] and torch.allocations == []


def test_a_function_without_temporaries_is_captured_as_it_was(vadd, torch, no_malloc):
    """No workspace, nothing to decide: the launch goes straight to the capturing stream."""
    torch.stream = S1
    _capturing(vadd, S1)
    m = _mark(vadd)
    x = torch.tensor((10,), 0x100)
    vadd(x, x, x)
    assert len(_launches(vadd, m)) == 1 and torch.allocations == []


def test_torch_capture_check_does_not_initialize_cuda(torch):
    asked = []
    torch.cuda.is_current_stream_capturing = lambda: asked.append(1) or True
    torch.cuda.is_initialized = lambda: False
    assert not torch_capturing() and asked == []  # no torch capture before CUDA is up
    torch.cuda.is_initialized = lambda: True
    assert torch_capturing() and asked == [1]
