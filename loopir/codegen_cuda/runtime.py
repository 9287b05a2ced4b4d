"""The callable CUDA module: a shared library of kernels and compiled host code.

``mod(*arrays)`` checks the arguments (dtype, shape, contiguity, device: a cached signature
check, so a repeated call with the same shapes costs a few attribute reads per argument) and
calls the library's entry point, which launches the kernels on the caller's stream:

* CUDA arrays (torch tensors, anything with ``__cuda_array_interface__`` or ``__dlpack__``) are used
  in place and the call is **asynchronous**: it returns once the kernels are queued, on torch's
  current stream for torch tensors, cupy's for cupy arrays, the legacy default stream otherwise, or
  ``stream=`` when given. Nothing is allocated, copied or synchronized, so calls can be captured in
  a CUDA graph: ``torch.cuda.graph(g)``, with or without ``stream=``. Device temporaries
  (intermediate buffers in global memory) live in a workspace per stream, from torch's caching
  allocator when torch tensors are passed, and a captured call takes a graph-private one from it
  (see [`loopir.codegen_cuda.workspace`][loopir.codegen_cuda.workspace]).
* NumPy arrays are copied to the device and, when the function writes them, back; such a
  call is synchronous, and refused with LaunchError during a capture.

[`CUDAModule.synchronize`][loopir.codegen_cuda.runtime.CUDAModule.synchronize] waits for the device;
launch errors raise [`LaunchError`][loopir.errors.LaunchError] naming the kernel (a fault inside a
kernel surfaces at the next synchronization, or at its own launch when built with
``cuda.sync_after_launch``).
"""

from __future__ import annotations

import ctypes
import logging
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loopir.codegen_cuda.args import (
    ArgInfo,
    caller_stream,
    describe,
    dtype_matches,
    explicit_stream,
    torch_module,
)
from loopir.codegen_cuda.compile import CompiledBinary, KernelResources
from loopir.codegen_cuda.device import explain as explain_device_error
from loopir.codegen_cuda.exprs import eval_int
from loopir.codegen_cuda.host import HostCode
from loopir.codegen_cuda.source import EmitResult, KernelSource
from loopir.codegen_cuda.workspace import WorkspacePool, refuse_capture, torch_capturing
from loopir.errors import LaunchError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import IntImm, Var
from loopir.ir.stmt import PrimFunc
from loopir.runtime.module import bind_arguments

logger = logging.getLogger(__name__)

_vp, _i64 = ctypes.c_void_p, ctypes.c_int64
_HELPERS: dict[str, tuple[list[Any], Any]] = {
    "loopir_rt_malloc": ([ctypes.POINTER(_vp), _i64, ctypes.c_int], ctypes.c_int),
    "loopir_rt_free": ([_vp], ctypes.c_int),
    "loopir_rt_copy": ([_vp, _vp, _i64, ctypes.c_int, _vp], ctypes.c_int),
    "loopir_rt_stream_sync": ([_vp], ctypes.c_int),
    "loopir_rt_device_sync": ([ctypes.c_int], ctypes.c_int),
    "loopir_rt_event_create": ([ctypes.POINTER(_vp)], ctypes.c_int),
    "loopir_rt_event_destroy": ([_vp], ctypes.c_int),
    "loopir_rt_event_record": ([_vp, _vp], ctypes.c_int),
    "loopir_rt_event_elapsed": ([_vp, _vp, ctypes.POINTER(ctypes.c_float)], ctypes.c_int),
    "loopir_rt_last_error": ([], ctypes.c_char_p),
    "loopir_rt_capture_status": ([_vp, ctypes.c_int], ctypes.c_int),
}


class _Library:
    """The loaded shared library: the entry point and the runtime helpers."""

    def __init__(self, path: Path, host: HostCode, nparams: int) -> None:
        try:
            self.dll = ctypes.CDLL(str(path))
        except OSError as exc:
            raise LaunchError(f"cannot load the module library {path}: {exc}") from exc
        for name, (argtypes, restype) in _HELPERS.items():
            fn = getattr(self.dll, name)
            fn.argtypes, fn.restype = argtypes, restype
        self.entry = getattr(self.dll, host.entry)
        self.entry.argtypes = [_vp] * nparams + [_i64] * len(host.size_vars) + [_vp, _vp, ctypes.c_int]
        self.entry.restype = ctypes.c_int
        self.workspace = getattr(self.dll, host.workspace_entry)
        self.workspace.argtypes = [_i64] * len(host.size_vars)
        self.workspace.restype = _i64
        # the CPython builtin of the entry, when the library was built with Python's headers
        self.py_entry: Any = None
        py = ctypes.PyDLL(str(path))
        getter = getattr(py, f"loopir_py_{host.entry}", None)
        if getter is not None:
            getter.restype = ctypes.py_object
            self.py_entry = getter()
        self.call = self.py_entry or self.entry
        # capture_status(stream, device): loopir_rt_capture_status (asked on every call of a
        # function with device temporaries), as a builtin too when the entry is one
        status = getattr(py, "loopir_py_rt_capture_status", None)
        if status is not None:
            status.restype = ctypes.py_object
            self.capture_status: Callable[[int, int], int] = status()
        else:
            self.capture_status = self.dll.loopir_rt_capture_status
        self.traced = hasattr(self.dll, "loopir_rt_trace")
        if self.traced:
            self.dll.loopir_rt_trace.restype = ctypes.c_char_p

    def error(self) -> str:
        return (self.dll.loopir_rt_last_error() or b"").decode(errors="replace")

    def check(self, rc: int, prefix: str) -> None:
        if rc:
            msg = self.error()
            # without a driver the runtime says "driver version is insufficient": say no device
            raise LaunchError(explain_device_error(msg if msg.startswith(prefix) else f"{prefix}: {msg}"))

    def malloc(self, nbytes: int, device: int, prefix: str) -> int:
        out = _vp()
        self.check(self.dll.loopir_rt_malloc(ctypes.byref(out), nbytes, device), prefix)
        return int(out.value or 0)

    def free(self, ptr: int, device: int, prefix: str) -> None:
        """Free a workspace once every kernel that may use it is done."""
        self.check(self.dll.loopir_rt_device_sync(device), prefix)
        self.check(self.dll.loopir_rt_free(ptr), prefix)

    def trace(self) -> str:
        """What a ``-DLOOPIR_HOST_TRACE`` build recorded instead of launching (tests)."""
        return (self.dll.loopir_rt_trace() or b"").decode()


class _DeviceArray:
    """A device copy of a NumPy array, as a CUDA array (what
    [`CUDAModule.benchmark`][loopir.codegen_cuda.runtime.CUDAModule.benchmark] uses)."""

    def __init__(self, ptr: int, host: np.ndarray, device: int) -> None:
        self.ptr, self.host, self.device_index = ptr, host, device
        typestr = "<u2" if host.dtype.name == "bfloat16" else host.dtype.str
        self.__cuda_array_interface__ = {
            "shape": host.shape, "typestr": typestr, "data": (ptr, False), "version": 3,
            "strides": None,
        }  # fmt: skip


class CUDAModule:
    """A built CUDA function: call it like the PrimFunc, on arrays.

    Attributes
    ----------
    func
        The lowered function.
    source
        The generated translation unit: kernels, then the host code.
    cutlass_source
        The CUTLASS unit linked into the library ("" without extern GEMMs).
    kernels
        Per-kernel launch information.
    arch
        The ``sm_XX`` target.
    resource_usage
        ``{kernel name: KernelResources}`` from ptxas ``-v`` (registers, spills, shared).
    compile_log
        nvcc's full output.
    library_path, source_path
        Where the disk cache holds the shared library and the source.
    cache_hit
        Whether the library came from the cache.
    library_calls
        The CUTLASS calls (see ``loopir.codegen_cuda.cutlass.hook``).
    """

    def __init__(self, func: PrimFunc, emitted: EmitResult, host: HostCode, binary: CompiledBinary,
                 source: str, cutlass: Any = None) -> None:  # fmt: skip
        self.func = func
        self.source = source
        self.kernels: tuple[KernelSource, ...] = emitted.kernels
        self.host_code = host
        self.arch = binary.arch
        self.compile_log = binary.log
        self.library_path = binary.path
        self.cache_hit = binary.cache_hit
        self.source_path = binary.source_path
        self.resource_usage: dict[str, KernelResources] = dict(binary.resources)
        self.library_calls: list[Any] = list(getattr(cutlass, "library_calls", []))
        self.cutlass_source: str = getattr(cutlass, "source", "")
        written = {b for k in self.kernels for b in k.spec.written}
        if emitted.extern_calls:
            written = set(func.params)  # library calls write their outputs by name
        self._written = [b in written for b in func.params]
        self._params = func.params
        self._n = len(func.params)
        self._dtypes = [dt.element(b.dtype) for b in func.params]
        self._signatures: dict[tuple[Any, ...], tuple[int, ...]] = {}
        self._workspaces = WorkspacePool(func.name)
        self._lib: _Library | None = None
        self._fast: Any = None  # see _torch_fast_path
        self._device = 0

    def __repr__(self) -> str:
        names = ", ".join(k.name for k in self.kernels)
        return f"<CUDAModule {self.func.name} [{names}] {self.arch}>"

    # -- the library -------------------------------------------------------------------------
    def _library(self) -> _Library:
        if self._lib is None:
            self._lib = _Library(self.library_path, self.host_code, self._n)
        return self._lib

    # -- argument checking (once per signature) ------------------------------------------------
    def _where(self, buf: Buffer) -> str:
        return f"{self.func.name}: parameter {buf.name!r}"

    def _bind(self, shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
        """The size variables' values for these argument shapes (checked, then cached)."""
        key = tuple(shapes)
        hit = self._signatures.get(key)
        if hit is not None:
            return hit
        env: dict[Var, int] = {}
        for buf, shape in zip(self._params, shapes):
            where = self._where(buf)
            if len(shape) != len(buf.shape):
                raise LaunchError(
                    f"{where}: expected {len(buf.shape)} dimensions "
                    f"{tuple(str(s) for s in buf.shape)}, got shape {tuple(shape)}"
                )
            for i, (e, s) in enumerate(zip(buf.shape, shape)):
                if isinstance(e, IntImm) and e.value != s:
                    raise LaunchError(f"{where}: dimension {i} must be {e.value}, got {s} (shape {tuple(shape)})")
                if isinstance(e, Var):
                    if e in env and env[e] != s:
                        raise LaunchError(
                            f"{where}: dimension {i} is size {e.name}, bound to {env[e]} by an "
                            f"earlier argument, but got {s}"
                        )
                    env[e] = int(s)
        for buf, shape in zip(self._params, shapes):  # shapes that are expressions of sizes
            for i, (e, s) in enumerate(zip(buf.shape, shape)):
                if not isinstance(e, (IntImm, Var)) and eval_int(e, env) != s:
                    raise LaunchError(
                        f"{self._where(buf)}: dimension {i} must be {e} = {eval_int(e, env)}, got {s}"
                    )
        sizes = []
        for v in self.host_code.size_vars:
            if v not in env:
                raise LaunchError(
                    f"{self.func.name}: size {v.name} is not the size of any parameter dimension, "
                    "so a call cannot determine it"
                )
            if v.dtype == "int32" and not -(2**31) <= env[v] < 2**31:
                raise LaunchError(f"{self.func.name}: size {v.name} = {env[v]} does not fit int32")
            sizes.append(env[v])
        out = tuple(sizes)
        if len(self._signatures) < 4096:
            self._signatures[key] = out
        return out

    def _check_info(self, buf: Buffer, info: ArgInfo, dtype: str) -> None:
        where = self._where(buf)
        if not dtype_matches(info.dtype, dtype):
            raise LaunchError(f"{where}: dtype must be {buf.dtype}, got {info.dtype}")
        if not info.contiguous:
            raise LaunchError(
                f"{where}: array is not C-contiguous; pass a contiguous copy "
                "(np.ascontiguousarray / .contiguous())"
            )

    # -- calling -----------------------------------------------------------------------------
    def __call__(self, *arrays: Any, stream: Any = None, **named: Any) -> None:
        """Run the function on ``arrays`` (outputs are written in place).

        Parameters
        ----------
        arrays
            One array per parameter: CUDA arrays (used in place, asynchronous) or NumPy
            arrays (copied; the call is synchronous).
        stream
            A CUDA stream (torch/cupy stream object, ``__cuda_stream__`` object or raw
            handle); default: the current stream of the arrays' library.
        named
            Arrays by parameter (buffer) name, ``mod(A=a, B=b, C=c)``, alone or after
            positional ones (a parameter named ``stream`` is passed by position).

        Raises
        ------
        LaunchError
            Wrong arguments (naming the parameter) or a failed launch (naming the kernel);
            without a GPU, that this machine has no CUDA device.
        """
        if named:
            arrays = bind_arguments(self.func.name, [b.name for b in self._params], arrays, named)
        fast = self._fast
        if stream is None and len(arrays) == self._n:
            if fast is None and "torch" in sys.modules:
                fast = self._fast = _torch_fast_path(self, sys.modules["torch"])
            if fast is not None and fast(*arrays):
                return
        self._call_general(arrays, stream)

    def _launch(self, ptrs: Sequence[int], sizes: tuple[int, ...], stream: int, device: int,
                torch: Any = None) -> None:  # fmt: skip
        """Call the entry; ``torch`` is the torch module when torch is the caller (the
        workspace of device temporaries then comes from torch's caching allocator)."""
        lib = self._lib or self._library()
        ws, keep = (self._workspaces.get(lib, sizes, stream, device, torch)
                    if self.host_code.temps else (None, None))  # fmt: skip
        self._device = device
        rc = lib.call(*ptrs, *sizes, ws, stream or None, device)
        del keep  # a captured call's workspace: released to the graph's pool once recorded
        if rc:
            lib.check(rc, self.func.name)

    def _describe_all(self, arrays: Sequence[Any]) -> list[ArgInfo]:
        if len(arrays) != self._n:
            raise LaunchError(
                f"{self.func.name}: expected {self._n} arrays "
                f"({', '.join(b.name for b in self._params)}), got {len(arrays)}"
            )
        infos = []
        for buf, a, d in zip(self._params, arrays, self._dtypes):
            info = describe(a, self._where(buf))
            self._check_info(buf, info, d)
            infos.append(info)
        return infos

    def _placement(self, infos: Sequence[ArgInfo], stream: Any) -> tuple[int, int]:
        """The device the arrays live on and the stream to run on (explicit, else the
        current stream of the arrays' library)."""
        devices = {i.device for i in infos if i.device is not None}
        if len(devices) > 1:
            raise LaunchError(f"{self.func.name}: arrays live on different CUDA devices {sorted(devices)}")
        device = devices.pop() if devices else 0
        source = next((i.stream_source for i in infos if i.stream_source), None)
        return device, explicit_stream(stream) if stream is not None else caller_stream(source, device)

    def _call_general(self, arrays: Sequence[Any], stream: Any) -> None:
        infos = self._describe_all(arrays)
        sizes = self._bind([i.shape for i in infos])
        device, s = self._placement(infos, stream)
        torch = torch_module() if any(i.stream_source == "torch" for i in infos) else None
        if not any(i.host is not None for i in infos):
            self._launch([i.ptr for i in infos], sizes, s, device, torch)
            return
        self._call_with_copies(infos, sizes, s, device, torch)

    def _call_with_copies(self, infos: list[ArgInfo], sizes: tuple[int, ...], s: int,
                          device: int, torch: Any) -> None:  # fmt: skip
        """NumPy arguments: copy in, run, copy the written ones back, synchronize."""
        lib = self._library()
        refuse_capture(lib, s, device, self.func.name,
                       "a call with NumPy arrays (copied to the device and back, synchronized)")  # fmt: skip
        uploaded: dict[int, int] = {}
        try:
            uploaded = self._upload(lib, infos, device, s)
            self._launch([uploaded.get(j, i.ptr) for j, i in enumerate(infos)], sizes, s, device, torch)
            self._download(lib, infos, uploaded, s, check_writeable=True)
        finally:
            self._release(lib, uploaded, s)

    def _upload(self, lib: _Library, infos: Sequence[ArgInfo], device: int, s: int) -> dict[int, int]:
        """Device copies of the NumPy arguments: ``{argument index: device pointer}``."""
        name = self.func.name
        out: dict[int, int] = {}
        try:
            for j, info in enumerate(infos):
                if info.host is not None:
                    out[j] = lib.malloc(info.host.nbytes, device, name)
                    lib.check(lib.dll.loopir_rt_copy(out[j], info.host.ctypes.data, info.host.nbytes, 1, s or None), name)
        except BaseException:
            self._release(lib, out, s)
            raise
        return out

    def _download(self, lib: _Library, infos: Sequence[ArgInfo], uploaded: dict[int, int], s: int,
                  check_writeable: bool) -> None:  # fmt: skip
        """Copy the written NumPy arguments back from their device copies; synchronize."""
        name = self.func.name
        for j, ptr in uploaded.items():
            host = infos[j].host
            assert host is not None
            if self._written[j]:
                if check_writeable and not host.flags.writeable:
                    raise LaunchError(f"{name}: an output array is read-only")
                lib.check(lib.dll.loopir_rt_copy(host.ctypes.data, ptr, host.nbytes, 0, s or None), name)
        lib.check(lib.dll.loopir_rt_stream_sync(s or None), name)

    @staticmethod
    def _release(lib: _Library, uploaded: dict[int, int], s: int) -> None:
        if uploaded:
            lib.dll.loopir_rt_stream_sync(s or None)  # the copies may still be in flight
            for ptr in uploaded.values():
                lib.dll.loopir_rt_free(ptr)

    def synchronize(self) -> None:
        """Wait for every kernel on the device; a kernel's fault is raised as LaunchError."""
        lib = self._library()
        if torch_capturing():  # a device-wide synchronization would invalidate torch's capture
            raise LaunchError(f"{self.func.name}: synchronize() cannot be captured in a CUDA graph: "
                              "torch's current stream is capturing a CUDA graph")  # fmt: skip
        lib.check(lib.dll.loopir_rt_device_sync(self._device), f"{self.func.name}: synchronize")

    # -- timing ------------------------------------------------------------------------------
    def benchmark(self, *arrays: Any, warmup: int = 10, repeat: int = 50, inner: int = 1,
                  stream: Any = None) -> float:  # fmt: skip
        """Median milliseconds per call of ``mod(*arrays)``, timed with CUDA events.

        Each sample records an event, makes ``inner`` calls through the same entry users call
        (argument checks and all), and records another; ``inner=1`` is one call as a program
        makes it, larger values measure back-to-back throughput. NumPy inputs are copied to
        the device once, before timing (and the written ones back after).
        """
        if warmup < 0 or repeat < 1 or inner < 1:
            raise LaunchError(
                f"benchmark: need warmup >= 0, repeat >= 1 and inner >= 1, got {warmup}, "
                f"{repeat}, {inner}"
            )
        infos = self._describe_all(arrays)
        self._bind([i.shape for i in infos])
        lib = self._library()
        name = self.func.name
        device, s = self._placement(infos, stream)
        refuse_capture(lib, s, device, name, "benchmark() (events, copies, synchronization)")
        uploaded: dict[int, int] = {}
        events = [_vp(), _vp()]
        try:
            uploaded = self._upload(lib, infos, device, s)
            args = [
                _DeviceArray(uploaded[j], info.host, device) if j in uploaded else a  # type: ignore[arg-type]
                for j, (a, info) in enumerate(zip(arrays, infos))
            ]
            for ev in events:
                lib.check(lib.dll.loopir_rt_event_create(ctypes.byref(ev)), name)
            call: Callable[..., None] = self if stream is None else (lambda *a: self(*a, stream=stream))
            for _ in range(warmup):
                call(*args)
            times = []
            ms = ctypes.c_float()
            for _ in range(repeat):
                lib.check(lib.dll.loopir_rt_event_record(events[0], s or None), name)
                for _ in range(inner):
                    call(*args)
                lib.check(lib.dll.loopir_rt_event_record(events[1], s or None), name)
                lib.check(lib.dll.loopir_rt_event_elapsed(events[0], events[1], ctypes.byref(ms)), name)
                times.append(ms.value / inner)
            self._download(lib, infos, uploaded, s, check_writeable=False)
        finally:
            for ev in events:
                if ev.value:
                    lib.dll.loopir_rt_event_destroy(ev)
            self._release(lib, uploaded, s)
        return float(statistics.median(times))


def _torch_fast_path(mod: CUDAModule, torch: Any) -> Any:
    """A function of the module's arguments that launches when all are contiguous CUDA torch
    tensors of the right dtypes on one device with a known signature, and returns False
    otherwise (the general path then checks and explains).

    It is generated for the parameter count, so a call costs a few attribute reads per tensor,
    one dict lookup and one call of the CPython entry: no loop, no argument lists.
    """
    n = mod._n
    names = [f"a{i}" for i in range(n)]
    env: dict[str, Any] = {
        "T": torch.Tensor, "sigs": mod._signatures, "bind": mod._bind, "mod": mod, "torch": torch,
        "raw": getattr(torch._C, "_cuda_getCurrentRawStream", None)
        or (lambda d: torch.cuda.current_stream(d).cuda_stream),
    }  # fmt: skip
    for i, d in enumerate(mod._dtypes):
        env[f"w{i}"] = getattr(torch, d, None)
    # the tensor methods as plain functions: no bound-method object per read
    env.update(contig=torch.Tensor.is_contiguous, dev=torch.Tensor.get_device,
               ptr=torch.Tensor.data_ptr)  # fmt: skip
    checks = " and ".join(
        f"{a}.__class__ is T and {a}.dtype is w{i} and contig({a})"
        for i, a in enumerate(names)
    ) or "True"
    same = " and ".join(f"dev({a}) == d" for a in names[1:]) or "True"
    ptrs = "".join(f"ptr({a}), " for a in names)
    shapes = "".join(f"{a}.shape, " for a in names)
    if mod.host_code.temps:  # torch is the caller: the workspace comes from its allocator
        launch = f"    mod._launch(({ptrs}), sizes, raw(d), d, torch)\n"
    else:  # the common case, inlined
        launch = (
            "    mod._device = d\n"
            f"    rc = call({ptrs}*sizes, None, raw(d) or None, d)\n"
            "    if rc:\n"
            "        lib.check(rc, mod.func.name)\n"
        )
    src = (
        f"def fast({', '.join(names)}):\n"
        f"    if not ({checks}):\n"
        "        return False\n"
        f"    d = {f'dev({names[0]})' if n else '0'}\n"
        f"    if d < 0 or not ({same}):\n"
        "        return False\n"
        f"    key = ({shapes})\n"
        "    sizes = sigs.get(key)\n"
        "    if sizes is None:\n"
        "        sizes = bind(key)\n"
        f"{launch}"
        "    return True\n"
    )
    lib = mod._library()
    env["lib"], env["call"] = lib, lib.call
    exec(compile(src, f"<loopir fast path of {mod.func.name}>", "exec"), env)  # noqa: S102
    return env["fast"]


def describe_resources(mod: CUDAModule) -> str:
    """One line per kernel: registers, shared memory (ptxas' static figure, plus the dynamic
    shared memory the launch gives), stack and spills."""
    lines = []
    dynamic = {k.name: k.dynamic_shared_bytes for k in mod.kernels}
    for name, r in mod.resource_usage.items():
        dyn = f" + {dynamic[name]} B dynamic" if dynamic.get(name) else ""
        lines.append(
            f"{name}: {r.registers} registers, {r.shared_bytes} B smem{dyn}, "
            f"{r.stack_frame_bytes} B stack, {r.spill_store_bytes}/{r.spill_load_bytes} B "
            "spill stores/loads"
        )
    return "\n".join(lines)


__all__ = ["CUDAModule", "describe_resources"]
