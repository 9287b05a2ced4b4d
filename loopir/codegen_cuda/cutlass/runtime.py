"""Calling CUTLASS entry points on arrays: device pointers, checks, timing.

Arrays may be torch tensors on the GPU, objects with ``__cuda_array_interface__`` (used in
place) or numpy arrays (copied to the device and, for outputs, back). Wrong dtype, shape,
device or a non-contiguous array raises [`LaunchError`][loopir.errors.LaunchError] naming the
parameter.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

from loopir.codegen_cuda.cutlass.emit import KernelSpec
from loopir.codegen_cuda.cutlass.enumerate import GemmCandidate, default_candidate
from loopir.codegen_cuda.cutlass.library import CutlassLibrary, ensure_context
from loopir.codegen_cuda.cutlass.problem import ConvProblem, GemmProblem, Problem
from loopir.errors import LaunchError

__all__ = [
    "CutlassGemm",
    "DeviceArg",
    "as_device",
    "entry_dims",
    "numpy_to_bits",
    "operand_shapes",
    "time_ms",
]


def operand_shapes(problem: Problem) -> dict[str, tuple[int, ...]]:
    """Shapes of the operands by role (A, B, D, source, bias), as the caller stores them."""
    if isinstance(problem, ConvProblem):
        return problem.shapes()
    p = problem
    pre = (p.batch,) if p.batch > 1 else ()
    return {
        "A": pre + ((p.k, p.m) if p.layout_a == "col" else (p.m, p.k)),
        "B": pre + ((p.n, p.k) if p.layout_b == "col" else (p.k, p.n)),
        "D": pre + (p.m, p.n),
        "source": pre + (p.m, p.n),
        "bias": (p.n,),
    }


def entry_dims(problem: Problem) -> tuple[int, ...]:
    """The integer arguments of ``problem``'s entry point (see ``emit.py``)."""
    if isinstance(problem, ConvProblem):
        return problem.dims()
    return (problem.m, problem.n, problem.k, problem.batch)

_TYPESTR = {"<f2": "float16", "<f4": "float32", "<f8": "float64", "<V2": "bfloat16"}


def numpy_to_bits(a: np.ndarray, dtype: str) -> np.ndarray:
    """A numpy array holding ``a`` rounded to ``dtype`` as raw bits (bf16 via round-to-nearest)."""
    if dtype == "float16":
        return np.ascontiguousarray(a, dtype=np.float16)
    if dtype == "float32":
        return np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "bfloat16":
        x = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
        rounded = x + 0x7FFF + ((x >> 16) & 1)
        return (rounded >> 16).astype(np.uint16)
    raise LaunchError(f"cutlass: no host representation for dtype {dtype!r}")


class DeviceArg:
    """A device pointer for one parameter, plus how to copy results back (numpy inputs)."""

    def __init__(self, ptr: int, keep: Any = None, copy_back: Callable[[], None] | None = None) -> None:
        self.ptr = ptr
        self.keep = keep
        self.copy_back = copy_back


def as_device(arr: Any, name: str, shape: tuple[int, ...], dtype: str, *, output: bool) -> DeviceArg:
    """Validate ``arr`` against ``shape``/``dtype`` and return its device pointer.

    Raises
    ------
    LaunchError
        Naming ``name`` when the array does not fit.
    """
    # torch tensors (also bf16, which __cuda_array_interface__ cannot describe)
    if hasattr(arr, "data_ptr") and hasattr(arr, "is_cuda"):
        got_dtype = str(arr.dtype).replace("torch.", "")
        if not arr.is_cuda:
            raise LaunchError(f"cutlass: parameter {name} is a CPU torch tensor; move it to the GPU")
        if got_dtype != dtype:
            raise LaunchError(f"cutlass: parameter {name} has dtype {got_dtype}, expected {dtype}")
        if tuple(arr.shape) != shape:
            raise LaunchError(f"cutlass: parameter {name} has shape {tuple(arr.shape)}, expected {shape}")
        if not arr.is_contiguous():
            raise LaunchError(f"cutlass: parameter {name} is not contiguous")
        return DeviceArg(int(arr.data_ptr()), keep=arr)
    cai = getattr(arr, "__cuda_array_interface__", None)
    if cai is not None:
        got = _TYPESTR.get(cai["typestr"], cai["typestr"])
        if got != dtype:
            raise LaunchError(f"cutlass: parameter {name} has dtype {got}, expected {dtype}")
        if tuple(cai["shape"]) != shape:
            raise LaunchError(f"cutlass: parameter {name} has shape {tuple(cai['shape'])}, expected {shape}")
        strides = cai.get("strides")
        if strides is not None:
            item = np.dtype(cai["typestr"]).itemsize
            want = []
            acc = item
            for s in reversed(shape):
                want.append(acc)
                acc *= s
            if tuple(strides) != tuple(reversed(want)):
                raise LaunchError(f"cutlass: parameter {name} is not contiguous (strides {strides})")
        return DeviceArg(int(cai["data"][0]), keep=arr)
    if isinstance(arr, np.ndarray):
        host_dtype = {"float16": np.float16, "float32": np.float32, "bfloat16": np.uint16}[dtype]
        if dtype == "bfloat16" and arr.dtype != np.uint16 and arr.dtype.name != "bfloat16":
            raise LaunchError(
                f"cutlass: parameter {name}: pass bfloat16 numpy data as raw uint16 bits "
                "(see numpy_to_bits) or as an ml_dtypes bfloat16 array"
            )
        if dtype != "bfloat16" and arr.dtype != host_dtype:
            raise LaunchError(f"cutlass: parameter {name} has dtype {arr.dtype}, expected {dtype}")
        if arr.shape != shape:
            raise LaunchError(f"cutlass: parameter {name} has shape {arr.shape}, expected {shape}")
        ensure_context()
        import pycuda.driver as drv

        host = np.ascontiguousarray(arr)
        mem = drv.mem_alloc(max(host.nbytes, 1))
        drv.memcpy_htod(mem, host)
        copy_back = None
        if output:
            if not arr.flags.c_contiguous or not arr.flags.writeable:
                raise LaunchError(f"cutlass: output parameter {name} must be a writable contiguous array")

            def copy_back() -> None:
                drv.memcpy_dtoh(arr, mem)

        return DeviceArg(int(mem), keep=mem, copy_back=copy_back)
    raise LaunchError(
        f"cutlass: parameter {name} is a {type(arr).__name__}; pass a numpy array, a CUDA torch "
        "tensor or an object with __cuda_array_interface__"
    )


def time_ms(run: Callable[[], None], *, warmup: int = 5, repeat: int = 20, inner: int = 1) -> float:
    """Median milliseconds of ``run`` over ``repeat`` CUDA-event-timed samples.

    Each sample times ``inner`` back-to-back calls and divides, so that host launch overhead
    (ctypes, Python) overlaps with the GPU work as it does in a real program.
    """
    ensure_context()
    import pycuda.driver as drv

    for _ in range(warmup):
        run()
    times = []
    start, end = drv.Event(), drv.Event()
    for _ in range(repeat):
        start.record()
        for _ in range(inner):
            run()
        end.record()
        end.synchronize()
        times.append(end.time_since(start) / inner)
    return float(statistics.median(times))


class CutlassGemm:
    """One CUTLASS GEMM or implicit-GEMM convolution (problem + configuration) ready to call on
    arrays (for a convolution: A is the NHWC input, B the filter, D the NHWC output).

    Parameters
    ----------
    problem
        The GEMM or convolution.
    arch
        90 or 80.
    candidate
        The configuration; None takes the default heuristic's choice.
    cache
        Library cache folder override.
    library
        An already built library holding this kernel (else one is built).
    """

    def __init__(
        self,
        problem: GemmProblem | ConvProblem,
        *,
        arch: int = 90,
        candidate: GemmCandidate | None = None,
        cache: Any = None,
        library: CutlassLibrary | None = None,
    ) -> None:
        self.problem = problem
        self.candidate = candidate or default_candidate(problem, arch)
        self.spec = KernelSpec.for_problem(problem, self.candidate)
        self.library = library or CutlassLibrary([self.spec], cache=cache)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return operand_shapes(self.problem)

    def _args(self, a: Any, b: Any, d: Any, source: Any, bias: Any) -> list[DeviceArg | None]:
        p = self.problem
        shp = self.shapes()
        epi = p.epilogue
        if epi.has_source != (source is not None):
            raise LaunchError(
                f"cutlass: this GEMM {'needs' if epi.has_source else 'takes no'} a source matrix"
            )
        if epi.has_bias != (bias is not None):
            raise LaunchError(f"cutlass: this GEMM {'needs' if epi.has_bias else 'takes no'} a bias vector")
        return [
            as_device(a, "A", shp["A"], p.dtype_ab, output=False),
            as_device(b, "B", shp["B"], p.dtype_ab, output=False),
            as_device(d, "D", shp["D"], p.dtype_d, output=True),
            None if source is None else as_device(source, "source", shp["source"], p.dtype_d, output=False),
            None if bias is None else as_device(bias, "bias", shp["bias"], p.dtype_d, output=False),
        ]

    def _launch(self, args: list[DeviceArg | None], stream: int = 0) -> None:
        p = self.problem
        a, b, d, s, bias = args
        assert a is not None and b is not None and d is not None
        self.library.call(
            self.spec.entry, a.ptr, b.ptr, d.ptr, *entry_dims(p),
            source=s.ptr if s else 0, bias=bias.ptr if bias else 0,
            alpha=p.epilogue.alpha, beta=p.epilogue.beta, stream=stream,
        )  # fmt: skip

    def __call__(self, a: Any, b: Any, d: Any, *, source: Any = None, bias: Any = None, stream: int = 0) -> None:
        """Compute D (numpy outputs are copied back; device arrays are written in place)."""
        args = self._args(a, b, d, source, bias)
        self._launch(args, stream)
        if args[2] is not None and args[2].copy_back is not None:
            import pycuda.driver as drv

            drv.Context.synchronize()
            args[2].copy_back()

    def benchmark(
        self, a: Any, b: Any, d: Any, *, source: Any = None, bias: Any = None,
        warmup: int = 5, repeat: int = 20,
    ) -> float:  # fmt: skip
        """Median milliseconds per call (CUDA events), on device-resident copies of the inputs."""
        args = self._args(a, b, d, source, bias)
        return time_ms(lambda: self._launch(args), warmup=warmup, repeat=repeat)
