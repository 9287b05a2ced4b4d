"""Where a call's device temporaries live, and what a call may do while a CUDA graph is captured.

A function whose lowered form keeps an intermediate buffer in global memory (a device temporary)
needs a workspace per call, of the bytes its host code's ``loopir_workspace_<func>`` gives for the
call's sizes. [`WorkspacePool`][loopir.codegen_cuda.workspace.WorkspacePool] hands it out:

* **outside a capture**, one workspace per (device, stream), kept and grown when a call needs
  more. Calls on one stream are ordered, so they can share it. When torch is the caller (torch
  tensors were passed) it is a uint8 tensor from torch's caching allocator, allocated with the
  call's stream current, so torch accounts for it and a grown one is released stream-ordered;
  otherwise it comes from ``cudaMalloc``.
* **during a capture** (the call's stream is capturing a CUDA graph: asked of the CUDA runtime
  on every call of such a function, through the library's own ``cudaStreamIsCapturing``), a
  torch caller gets a fresh tensor from torch's caching allocator, which allocates from the
  graph's private memory pool during ``torch.cuda.graph``: the graph owns its workspace, as it
  owns a torch op's temporaries, whichever stream it is captured and replayed on (torch must
  have begun the capture -- ``torch.cuda.graph`` or ``CUDAGraph.capture_begin`` -- for its
  allocator to know the capture, as for any torch op). A caller without torch can only reuse
  the stream's workspace when it is already large enough (a call with the same shapes on that
  stream before the capture); anything else is a [`LaunchError`][loopir.errors.LaunchError] raised
  before the CUDA state is touched, because an allocation during a capture fails and
  invalidates the capture.

[`refuse_capture`][loopir.codegen_cuda.workspace.refuse_capture] is the check that the calls which
allocate, copy or synchronize (NumPy arguments, ``benchmark``) make first.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

import attrs

from loopir.codegen_cuda.args import caller_stream
from loopir.errors import LaunchError

# loopir_rt_capture_status's answers (host_runtime.py)
NOT_CAPTURING, CAPTURING, INVALIDATED, LEGACY_IMPLICIT, QUERY_FAILED = 0, 1, 2, 3, -1


class Library(Protocol):
    """What the pool needs of the loaded library (``runtime._Library``)."""

    def capture_status(self, stream: int, device: int) -> int: ...

    def workspace(self, *sizes: int) -> int: ...

    def check(self, rc: int, prefix: str) -> None: ...

    def malloc(self, nbytes: int, device: int, prefix: str) -> int: ...

    def free(self, ptr: int, device: int, prefix: str) -> None: ...


@attrs.define
class _Workspace:
    ptr: int
    nbytes: int
    tensor: Any = None  # the torch tensor that owns it; None: cudaMalloc'd
    # what WorkspacePool.get returns for it, built once: a call allocates nothing
    result: tuple[int, None] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.result = (self.ptr, None)


def torch_capturing() -> bool:
    """Whether torch's current stream is capturing a CUDA graph (False without torch or before
    torch has initialized CUDA: no torch capture can be under way then)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return False
    return bool(cuda.is_current_stream_capturing())


def _reason(status: int, stream: int) -> str:
    if status == CAPTURING:
        return f"stream {stream:#x} is capturing a CUDA graph"
    if status == INVALIDATED:
        return (f"stream {stream:#x} was capturing a CUDA graph that an earlier operation "
                "invalidated (end the capture: torch raises the cause there)")  # fmt: skip
    if status == LEGACY_IMPLICIT:
        return ("the call would use the legacy default stream while a blocking stream captures "
                "a CUDA graph, which invalidates that capture")  # fmt: skip
    return "torch's current stream is capturing a CUDA graph"


def refuse_capture(lib: Library, stream: int, device: int, name: str, what: str) -> None:
    """Raise LaunchError when ``stream`` (or torch's current stream) is capturing a CUDA graph,
    before ``what`` (something a capture cannot record) touches the CUDA state.

    Raises
    ------
    LaunchError
        ``"<name>: <what> cannot be captured in a CUDA graph: <why>"``, or the query's failure.
    """
    status = lib.capture_status(stream, device)
    if status == QUERY_FAILED:
        lib.check(1, name)
    if status == NOT_CAPTURING and not torch_capturing():
        return
    raise LaunchError(f"{name}: {what} cannot be captured in a CUDA graph: {_reason(status, stream)}")


def torch_bytes(torch: Any, nbytes: int, device: int, stream: int) -> Any:
    """A uint8 tensor of ``nbytes`` from torch's caching allocator, allocated with ``stream``
    current: the allocator ties the block to that stream (and, during ``torch.cuda.graph``,
    takes it from the graph's pool when that stream is the one capturing)."""
    n = max(nbytes, 1)
    if caller_stream("torch", device) == stream:
        return torch.empty(n, dtype=torch.uint8, device=device)
    s = torch.cuda.default_stream(device) if stream == 0 else torch.cuda.ExternalStream(stream, device=device)
    with torch.cuda.stream(s):
        return torch.empty(n, dtype=torch.uint8, device=device)


class WorkspacePool:
    """The workspaces of one module's function (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cached: dict[tuple[int, int], _Workspace] = {}  # (device, stream) -> workspace
        self.nbytes: dict[tuple[int, ...], int] = {}  # sizes -> bytes needed

    def get(self, lib: Library, sizes: tuple[int, ...], stream: int, device: int,
            torch: Any) -> tuple[int, Any]:  # fmt: skip
        """The workspace pointer for a call, and what must stay referenced until it is queued.

        ``torch`` is the torch module when torch is the caller, else None.
        """
        need = self.nbytes.get(sizes)
        if need is None:
            need = self.nbytes[sizes] = int(lib.workspace(*sizes))
        status = lib.capture_status(stream, device)
        if status:
            return self._during_capture(lib, need, stream, device, torch, status)
        ws = self.cached.get((device, stream))
        if ws is None or need > ws.nbytes:
            ws = self._grow(lib, ws, need, stream, device, torch)
        return ws.result

    def _during_capture(self, lib: Library, need: int, stream: int, device: int, torch: Any,
                        status: int) -> tuple[int, Any]:  # fmt: skip
        if status == QUERY_FAILED:
            lib.check(1, self.name)
        if status == CAPTURING and torch is not None:
            # the graph's own workspace: released to the graph's pool once this call is
            # recorded, so later calls of the same capture reuse it in stream order
            t = torch_bytes(torch, need, device, stream)
            return int(t.data_ptr()), t
        ws = self.cached.get((device, stream))
        if status == CAPTURING and ws is not None and ws.nbytes >= need:
            return ws.ptr, None
        if status != CAPTURING:
            raise LaunchError(f"{self.name}: cannot run: {_reason(status, stream)}")
        have = f"has {ws.nbytes}" if ws is not None else "has none"
        raise LaunchError(
            f"{self.name}: stream {stream:#x} is capturing a CUDA graph, and the function's "
            f"device temporaries need a {need}-byte workspace (the stream {have}), which cannot "
            "be allocated during a capture: pass torch tensors (the workspace then comes from "
            "torch's caching allocator, capture-aware), or call the module once with these "
            "shapes on this stream before capturing"
        )

    def _grow(self, lib: Library, old: _Workspace | None, need: int, stream: int, device: int,
              torch: Any) -> _Workspace:  # fmt: skip
        if torch is None:  # cudaMalloc (and, for a grown one, a synchronization) ahead
            refuse_capture(lib, stream, device, self.name, "allocating the workspace")
        if old is not None:
            del self.cached[(device, stream)]
            if old.tensor is None:  # torch's are released by dropping them, stream-ordered
                lib.free(old.ptr, device, self.name)
        if torch is not None:
            t = torch_bytes(torch, need, device, stream)
            ws = _Workspace(int(t.data_ptr()), need, t)
        else:
            ws = _Workspace(lib.malloc(need, device, self.name), need)
        self.cached[(device, stream)] = ws
        return ws


__all__ = ["WorkspacePool", "refuse_capture", "torch_bytes", "torch_capturing"]
