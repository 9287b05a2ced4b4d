"""What a call's arguments are: device pointer, shape, dtype, device, and the caller's stream.

A CUDA module accepts torch tensors (through a fast path: a handful of attribute reads), any object
with ``__cuda_array_interface__`` (cupy, numba, ...) or ``__dlpack__`` (jax, ...), and NumPy arrays
(copied to the device and back by the runtime). [`describe`][loopir.codegen_cuda.args.describe]
reads one argument; [`caller_stream`][loopir.codegen_cuda.args.caller_stream] finds the stream the
caller is working on.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, cast

import attrs
import numpy as np

from loopir.errors import LaunchError
from loopir.ir import dtype as dt

# DLPack type codes (dlpack.h): kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLBool
_DL_CODES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 6: "bool"}
_KDL_CUDA, _KDL_CUDA_MANAGED = 2, 13


@attrs.frozen
class ArgInfo:
    """One argument as the runtime sees it.

    ``device`` is the CUDA device index, or None for a host (NumPy) array, whose data is in
    ``host``. ``dtype`` is a loopir dtype name, or a description when there is none.
    """

    ptr: int
    shape: tuple[int, ...]
    dtype: str
    device: int | None
    contiguous: bool
    host: np.ndarray | None = None
    stream_source: str | None = None  # "torch" or "cupy": whose current stream applies
    keep: Any = None


def _torch_dtype_name(t: Any) -> str:
    return str(t).removeprefix("torch.")


def torch_module() -> Any | None:
    """torch, when the caller has imported it (never imported here)."""
    return sys.modules.get("torch")


def _from_torch(a: Any, where: str) -> ArgInfo:
    if not a.is_cuda:
        raise LaunchError(
            f"{where}: a torch tensor on {a.device}; move it to the GPU (.cuda()), or pass a "
            "numpy array to have it copied"
        )
    dev = a.get_device()
    return ArgInfo(
        ptr=int(a.data_ptr()), shape=tuple(a.shape), dtype=_torch_dtype_name(a.dtype),
        device=dev, contiguous=bool(a.is_contiguous()),
        host=None, stream_source="torch", keep=a,
    )  # fmt: skip


def _typestr_dtype(typestr: str) -> str:
    if typestr in ("<V2", "|V2"):
        return "bfloat16"  # raw 2-byte records: how bf16 is exported
    if typestr == "|b1":
        return "bool"
    try:
        return np.dtype(typestr).name
    except TypeError:
        return typestr


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    out, acc = [], itemsize
    for s in reversed(shape):
        out.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(out))


def _from_cai(a: Any, cai: dict[str, Any]) -> ArgInfo:
    shape = tuple(int(s) for s in cai["shape"])
    typestr = cai["typestr"]
    dtype = _typestr_dtype(typestr)
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 1
    strides = cai.get("strides")
    contiguous = strides is None or tuple(strides) == _c_strides(shape, itemsize)
    dev = getattr(getattr(a, "device", None), "id", None)
    module = type(a).__module__.split(".")[0]
    return ArgInfo(
        ptr=int(cai["data"][0]), shape=shape, dtype=dtype,
        device=dev if isinstance(dev, int) else 0, contiguous=contiguous,
        stream_source="cupy" if module == "cupy" else None, keep=a,
    )  # fmt: skip


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
        ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
    ]  # fmt: skip


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(a: Any, where: str) -> ArgInfo:
    """Read a DLPack capsule (the array keeps ownership: the capsule is never consumed)."""
    try:
        capsule = a.__dlpack__()
        # DLManagedTensor starts with its DLTensor
        t = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    except Exception as exc:
        raise LaunchError(f"{where}: could not read the array through __dlpack__ ({exc})") from exc
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    code = _DL_CODES.get(t.dtype.code)
    dtype = f"{code}{t.dtype.bits}" if code not in (None, "bool") else (code or f"code{t.dtype.code}")
    if t.dtype.lanes != 1:
        dtype = f"{dtype}x{t.dtype.lanes}"
    contiguous = True
    if t.strides:
        want = _c_strides(shape, 1)
        contiguous = all(int(t.strides[i]) == want[i] for i in range(t.ndim) if shape[i] > 1)
    on_gpu = t.device.device_type in (_KDL_CUDA, _KDL_CUDA_MANAGED)
    if not on_gpu:
        raise LaunchError(
            f"{where}: a __dlpack__ array on DLPack device type {t.device.device_type}; pass a "
            "CUDA array, or a NumPy array to have it copied"
        )
    return ArgInfo(
        ptr=int(t.data or 0) + int(t.byte_offset), shape=shape, dtype=dtype,
        device=int(t.device.device_id), contiguous=contiguous, keep=(a, capsule),
    )  # fmt: skip


def describe(a: Any, where: str) -> ArgInfo:
    """Read argument ``a``; ``where`` names the parameter in errors.

    Raises
    ------
    LaunchError
        If ``a`` is none of the accepted kinds.
    """
    torch = torch_module()
    if torch is not None and isinstance(a, torch.Tensor):
        return _from_torch(a, where)
    if isinstance(a, np.ndarray):
        return ArgInfo(
            ptr=0, shape=tuple(a.shape), dtype=a.dtype.name, device=None,
            contiguous=bool(a.flags.c_contiguous), host=a,
        )  # fmt: skip
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(a, cai)
    if hasattr(a, "__dlpack__"):
        return _from_dlpack(a, where)
    raise LaunchError(
        f"{where}: expected a CUDA array (torch, cupy, or any object with "
        f"__cuda_array_interface__ or __dlpack__) or a numpy array, got {type(a).__name__}"
    )


def dtype_matches(got: str, want: str) -> bool:
    """Whether an argument of dtype ``got`` can be passed for a buffer of dtype ``want``."""
    want = dt.element(want)
    if got == want:
        return True
    # raw 16-bit records for bf16 (numpy has no bfloat16: callers pass uint16 bits)
    return want == "bfloat16" and got in ("uint16", "bfloat16")


def explicit_stream(stream: Any) -> int:
    """The handle of an explicit ``stream=`` argument (an int, torch/cupy stream, or
    ``__cuda_stream__`` object)."""
    if isinstance(stream, bool):
        raise LaunchError(f"stream: expected a CUDA stream or handle, got {stream!r}")
    if isinstance(stream, int):
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    raise LaunchError(f"stream: expected a CUDA stream or handle, got {type(stream).__name__}")


_RAW_STREAM: list[Any] = []  # torch's current-stream getter, looked up once


def caller_stream(source: str | None, device: int) -> int:
    """The current stream of the library the arrays came from (0: the legacy default)."""
    if source == "torch":
        if _RAW_STREAM:
            return int(_RAW_STREAM[0](device))
        # stream_source "torch" comes from a torch tensor argument, so torch is imported
        torch = cast(Any, torch_module())
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            _RAW_STREAM.append(raw)
            return int(raw(device))
        return int(torch.cuda.current_stream(device).cuda_stream)
    if source == "cupy":
        cupy = sys.modules.get("cupy")
        if cupy is not None:
            return int(cupy.cuda.get_current_stream().ptr)
    return 0
