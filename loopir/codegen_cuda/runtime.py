"""The callable CUDA module: argument checking, host program, pycuda launches, benchmark.

pycuda is imported only when a module is called; without it (or without a GPU) calling raises
:class:`~loopir.errors.LaunchError` saying why, after the arguments have been checked (so
argument errors are reported the same everywhere).

Arguments are NumPy arrays (copied to the device and, when the kernels write them, back) or
objects exposing ``__cuda_array_interface__`` (torch, cupy), used in place. Kernels run on the
legacy default stream of the device's primary context, the one torch and cupy use by default.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from loopir.codegen_cuda.compile import CompiledBinary, KernelResources
from loopir.codegen_cuda.emitter import EmitResult, KernelSource
from loopir.codegen_cuda.exprs import eval_int
from loopir.codegen_cuda.split import (
    HostAlloc,
    HostExtern,
    HostFor,
    HostIf,
    HostLaunch,
    HostNode,
    HostSeq,
)
from loopir.errors import CodegenError, LaunchError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import IntImm, PrimExpr, Var
from loopir.ir.stmt import PrimFunc

logger = logging.getLogger(__name__)

_MAX_GRID = (2**31 - 1, 65535, 65535)
_MAX_BLOCK = (1024, 1024, 64)


class _Arg:
    """One checked argument: where its data lives and how big it is."""

    def __init__(self, buffer: Buffer, value: Any, shape: tuple[int, ...], nbytes: int,
                 device_ptr: int | None, host: np.ndarray | None, device_id: int | None) -> None:
        self.buffer = buffer
        self.value = value
        self.shape = shape
        self.nbytes = nbytes
        self.device_ptr = device_ptr  # set for CUDA arrays
        self.host = host  # set for numpy arrays
        self.device_id = device_id


def _cai_typestr(dtype: str) -> tuple[str, ...]:
    """Accepted ``__cuda_array_interface__`` typestrs for a loopir dtype."""
    e = dt.element(dtype)
    if e == "bfloat16":
        return ("<V2", "<u2", "|V2")  # torch exports bf16 as raw 2-byte records
    if e == "bool":
        return ("|b1",)
    np_dt = np.dtype(e)
    return (np_dt.str, np_dt.newbyteorder("=").str)


def _c_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    out, acc = [], itemsize
    for s in reversed(shape):
        out.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(out))


class _Driver:
    """pycuda state: initialised once per process, on first call."""

    _instance: _Driver | None = None
    _error: str | None = None

    def __init__(self) -> None:
        import pycuda.driver as drv

        drv.init()
        if drv.Device.count() == 0:
            raise RuntimeError("the CUDA driver sees no GPU")
        self.drv = drv
        self.device = drv.Device(0)
        self.context = self.device.retain_primary_context()
        self.modules: dict[bytes, Any] = {}

    @classmethod
    def get(cls) -> _Driver:
        if cls._instance is not None:
            return cls._instance
        if cls._error is not None:
            raise LaunchError(cls._error)
        try:
            cls._instance = cls()
        except ImportError as exc:
            cls._error = f"cannot run CUDA kernels: pycuda is not installed ({exc})"
        except Exception as exc:
            cls._error = f"cannot run CUDA kernels: no usable CUDA device ({exc})"
        if cls._instance is None:
            raise LaunchError(cls._error)
        return cls._instance

    def load(self, cubin: bytes) -> Any:
        mod = self.modules.get(cubin)
        if mod is None:
            mod = self.drv.module_from_buffer(cubin)
            self.modules[cubin] = mod
        return mod


class CUDAModule:
    """A built CUDA function: call it like the PrimFunc, on arrays.

    Attributes
    ----------
    func
        The lowered function.
    source
        The generated CUDA C++.
    kernels
        Per-kernel launch information.
    arch
        The ``sm_XX`` target the cubin was built for.
    resource_usage
        ``{kernel name: KernelResources}`` from ptxas ``-v`` (registers, spills, shared).
    compile_log
        nvcc's full output.
    cubin_path, source_path
        Where the disk cache holds the binary and the source.
    """

    def __init__(
        self,
        func: PrimFunc,
        emitted: EmitResult,
        binary: CompiledBinary,
        extern_runner: Any = None,
    ) -> None:
        self.func = func
        self.source = emitted.source
        self.kernels: tuple[KernelSource, ...] = emitted.kernels
        self._host = emitted.host
        self._temps = emitted.host_temps
        self._binary = binary
        self.arch = binary.arch
        self.compile_log = binary.log
        self.cubin_path = binary.cubin_path
        self.source_path = binary.source_path
        self.resource_usage: dict[str, KernelResources] = dict(binary.resources)
        # CUTLASS calls of the GemmOffload pass (loopir.codegen_cuda.cutlass.hook)
        self._extern = extern_runner
        self.library_calls: list[Any] = list(getattr(extern_runner, "library_calls", []))
        self._written = frozenset(b for k in self.kernels for b in k.spec.written)
        if emitted.extern_calls:
            # library calls write their outputs by name; copy every numpy argument back
            self._written = frozenset(func.params)

    def __repr__(self) -> str:
        names = ", ".join(k.name for k in self.kernels)
        return f"<CUDAModule {self.func.name} [{names}] {self.arch}>"

    # -- argument checking --------------------------------------------------------------------
    def _check_args(self, arrays: Sequence[Any]) -> tuple[list[_Arg], dict[Var, int]]:
        params = self.func.params
        if len(arrays) != len(params):
            raise LaunchError(
                f"{self.func.name}: expected {len(params)} arrays "
                f"({', '.join(b.name for b in params)}), got {len(arrays)}"
            )
        env: dict[Var, int] = {}
        out: list[_Arg] = []
        for buf, a in zip(params, arrays):
            out.append(self._check_one(buf, a, env))
        for buf, arg in zip(params, out):  # shapes that are expressions of other sizes
            for i, (e, s) in enumerate(zip(buf.shape, arg.shape)):
                if not isinstance(e, (IntImm, Var)):
                    want = eval_int(e, env)
                    if want != s:
                        raise LaunchError(
                            f"{self.func.name}: parameter {buf.name!r} dimension {i} must be "
                            f"{e} = {want}, got {s}"
                        )
        return out, env

    def _check_one(self, buf: Buffer, a: Any, env: dict[Var, int]) -> _Arg:
        where = f"{self.func.name}: parameter {buf.name!r}"
        cai = getattr(a, "__cuda_array_interface__", None)
        if cai is not None:
            shape = tuple(int(s) for s in cai["shape"])
            typestr = cai["typestr"]
            if typestr not in _cai_typestr(buf.dtype):
                raise LaunchError(f"{where}: dtype must be {buf.dtype}, got CUDA array of {typestr}")
            itemsize = int(typestr[2:])
            strides = cai.get("strides")
            if strides is not None and tuple(strides) != _c_strides(shape, itemsize):
                raise LaunchError(
                    f"{where}: CUDA array is not C-contiguous (strides {tuple(strides)}); "
                    "pass a contiguous copy"
                )
            ptr = int(cai["data"][0])
            dev = _device_id(a)
            host = None
        elif isinstance(a, np.ndarray):
            want = dt.to_numpy(buf.dtype)
            if a.dtype != want:
                raise LaunchError(f"{where}: dtype must be {buf.dtype} ({want}), got {a.dtype}")
            if not a.flags.c_contiguous:
                raise LaunchError(f"{where}: array is not C-contiguous; pass np.ascontiguousarray(...)")
            shape, itemsize, ptr, dev, host = a.shape, a.itemsize, None, None, a
        else:
            raise LaunchError(
                f"{where}: expected a numpy array or an object with __cuda_array_interface__ "
                f"(torch, cupy), got {type(a).__name__}"
            )
        if len(shape) != len(buf.shape):
            raise LaunchError(
                f"{where}: expected {len(buf.shape)} dimensions "
                f"{tuple(str(s) for s in buf.shape)}, got shape {shape}"
            )
        for i, (e, s) in enumerate(zip(buf.shape, shape)):
            if isinstance(e, IntImm) and e.value != s:
                raise LaunchError(f"{where}: dimension {i} must be {e.value}, got {s} (shape {shape})")
            if isinstance(e, Var):
                if e in env and env[e] != s:
                    raise LaunchError(
                        f"{where}: dimension {i} is size {e.name}, bound to {env[e]} by an "
                        f"earlier argument, but got {s}"
                    )
                env[e] = int(s)
        nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
        return _Arg(buf, a, tuple(int(s) for s in shape), nbytes, ptr, host, dev)

    # -- running ---------------------------------------------------------------------------
    def _prepare(self, arrays: Sequence[Any]) -> tuple[_Driver, list[_Arg], dict[Var, int], list[Any]]:
        args, env = self._check_args(arrays)
        drv = _Driver.get()
        drv.context.push()
        keep: list[Any] = []
        try:
            for arg in args:
                if arg.device_ptr is not None:
                    if arg.device_id is not None and arg.device_id != 0:
                        raise LaunchError(
                            f"{self.func.name}: parameter {arg.buffer.name!r} lives on CUDA "
                            f"device {arg.device_id}; this module runs on device 0"
                        )
                    continue
                alloc = drv.drv.mem_alloc(max(arg.nbytes, 1))
                keep.append(alloc)
                if arg.nbytes:
                    drv.drv.memcpy_htod(alloc, arg.host)
                arg.device_ptr = int(alloc)
            for k in self.kernels:
                for buf, align in k.alignment.items():
                    for arg in args:
                        if arg.buffer is buf and arg.device_ptr % align:
                            raise LaunchError(
                                f"{self.func.name}: parameter {buf.name!r} must be {align}-byte "
                                f"aligned for the vector accesses of {k.name}, got address "
                                f"{arg.device_ptr:#x}"
                            )
        except BaseException:
            drv.context.pop()
            raise
        return drv, args, env, keep

    def _finish(self, drv: _Driver, args: list[_Arg]) -> None:
        try:
            for arg in args:
                if arg.host is not None and arg.buffer in self._written and arg.nbytes:
                    drv.drv.memcpy_dtoh(arg.host, arg.device_ptr)
        finally:
            drv.context.pop()

    def _launcher(self, drv: _Driver, args: list[_Arg], env: dict[Var, int],
                  keep: list[Any]) -> Callable[[], None]:
        """A function running the host program once (no synchronisation)."""
        mod = drv.load(self._binary.cubin)
        funcs = [mod.get_function(k.name) for k in self.kernels]
        ptrs: dict[Buffer, int] = {a.buffer: int(a.device_ptr) for a in args}  # type: ignore[arg-type]

        def launch(k: KernelSource, fn: Any, local_env: dict[Var, int]) -> None:
            spec = k.spec
            grid = tuple(eval_int(e, local_env) for e in spec.grid)
            block = tuple(eval_int(e, local_env) for e in spec.block)
            if 0 in grid or 0 in block:
                return  # empty iteration space
            for axis, (g, lim) in enumerate(zip(grid, _MAX_GRID)):
                if g < 0 or g > lim:
                    raise LaunchError(f"{k.name}: grid dimension {'xyz'[axis]} = {g} is out of range")
            if any(b > lim for b, lim in zip(block, _MAX_BLOCK)) or np.prod(block) > 1024:
                raise LaunchError(f"{k.name}: block {block} exceeds the 1024-thread limit")
            kargs: list[Any] = [np.uintp(ptrs[b]) for b in spec.buffers]
            for v in spec.scalars:
                kargs.append(np.int64(local_env[v]) if v.dtype == "int64" else np.int32(local_env[v]))
            fn(*kargs, grid=grid, block=block)

        def run(node: HostNode, local_env: dict[Var, int]) -> None:
            if isinstance(node, HostLaunch):
                launch(self.kernels[node.kernel], funcs[node.kernel], local_env)
            elif isinstance(node, HostSeq):
                for n in node.items:
                    run(n, local_env)
            elif isinstance(node, HostFor):
                lo = eval_int(node.min, local_env)
                for i in range(lo, lo + eval_int(node.extent, local_env)):
                    run(node.body, {**local_env, node.var: i})
            elif isinstance(node, HostIf):
                if eval_int(node.condition, local_env):
                    run(node.then_case, local_env)
                elif node.else_case is not None:
                    run(node.else_case, local_env)
            elif isinstance(node, HostExtern):
                if self._extern is None:
                    raise LaunchError(
                        f"{self.func.name}: extern call {node.call_id!r} has no library runner"
                    )
                by_name = {b.name: p for b, p in ptrs.items()}
                self._extern.run(node.call_id, by_name)
            elif isinstance(node, HostAlloc):
                shape = [eval_int(e, local_env) for e in node.buffer.shape]
                nbytes = int(np.prod(shape, dtype=np.int64)) * max(1, dt.bits(node.buffer.dtype) // 8)
                if node.buffer not in ptrs:
                    alloc = drv.drv.mem_alloc(max(nbytes, 1))
                    keep.append(alloc)
                    ptrs[node.buffer] = int(alloc)
                run(node.body, local_env)
            else:  # pragma: no cover - the splitter builds only the node types above
                raise CodegenError(f"unknown host node {type(node).__name__}")

        return lambda: run(self._host, dict(env))

    def _sync(self, drv: _Driver, what: str) -> None:
        try:
            drv.context.synchronize()
        except drv.drv.Error as exc:
            raise LaunchError(f"{self.func.name}: {what} failed on the GPU: {exc}") from exc

    def __call__(self, *arrays: Any) -> None:
        """Run the function on ``arrays`` (outputs are written in place)."""
        drv, args, env, keep = self._prepare(arrays)
        try:
            try:
                self._launcher(drv, args, env, keep)()
            except drv.drv.Error as exc:
                raise LaunchError(f"{self.func.name}: kernel launch failed: {exc}") from exc
            self._sync(drv, "kernel execution")
        except BaseException:
            drv.context.pop()
            raise
        self._finish(drv, args)

    def benchmark(self, *arrays: Any, warmup: int = 10, repeat: int = 50) -> float:
        """Median time in milliseconds of one run, measured with CUDA events.

        NumPy inputs are copied to the device once, before timing; the result is copied back
        after the last run.
        """
        if warmup < 0 or repeat < 1:
            raise LaunchError(f"benchmark: need warmup >= 0 and repeat >= 1, got {warmup}, {repeat}")
        drv, args, env, keep = self._prepare(arrays)
        try:
            run = self._launcher(drv, args, env, keep)
            try:
                for _ in range(warmup):
                    run()
                self._sync(drv, "warm-up")
                times = []
                start, stop = drv.drv.Event(), drv.drv.Event()
                for _ in range(repeat):
                    start.record()
                    run()
                    stop.record()
                    stop.synchronize()
                    times.append(stop.time_since(start))
            except drv.drv.Error as exc:
                raise LaunchError(f"{self.func.name}: benchmark run failed: {exc}") from exc
            self._sync(drv, "benchmark")
        except BaseException:
            drv.context.pop()
            raise
        self._finish(drv, args)
        return float(statistics.median(times))


def _device_id(a: Any) -> int | None:
    """The CUDA device index of a torch tensor / cupy array, when it says."""
    dev = getattr(a, "device", None)
    if dev is None:
        return None
    for attr in ("index", "id"):
        v = getattr(dev, attr, None)
        if isinstance(v, int):
            return v
    return None


def describe_resources(mod: CUDAModule) -> str:
    """One line per kernel: registers, shared memory, stack and spills."""
    lines = []
    for name, r in mod.resource_usage.items():
        lines.append(
            f"{name}: {r.registers} registers, {r.shared_bytes} B smem, "
            f"{r.stack_frame_bytes} B stack, {r.spill_store_bytes}/{r.spill_load_bytes} B "
            "spill stores/loads"
        )
    return "\n".join(lines)


__all__ = ["CUDAModule", "describe_resources", "PrimExpr"]
