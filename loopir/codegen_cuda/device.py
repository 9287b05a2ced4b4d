"""Whether this machine has a CUDA device, asked of the NVIDIA driver directly.

Without a driver the CUDA runtime reports "CUDA driver version is insufficient for CUDA runtime
version" (``cudaErrorInsufficientDriver``), which reads as an old driver rather than as no GPU.
:func:`probe` asks the driver API (``libcuda.so.1``: ``cuInit``, ``cuDeviceGetCount``) without
the toolkit, pycuda or torch; :func:`explain` rewrites the runtime's message when the probe
finds no device, and :func:`require_device` lets tuning fail before it samples anything.
"""

from __future__ import annotations

import ctypes
import os

import attrs

from loopir.errors import LaunchError

__all__ = ["DeviceProbe", "explain", "probe", "require_device"]

# CUresult values (cuda.h)
_CUDA_SUCCESS = 0
_CUDA_ERROR_NO_DEVICE = 100

# cudaError_t names the runtime gives when it finds no usable device
_NO_DEVICE_ERRORS = ("cudaErrorInsufficientDriver", "cudaErrorNoDevice")


@attrs.frozen
class DeviceProbe:
    """What the driver says: ``count`` visible devices; ``reason`` says why when there is none
    ("" otherwise)."""

    count: int
    reason: str


def _visible_hint() -> str:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "" if env is None else f" (CUDA_VISIBLE_DEVICES={env!r})"


def probe() -> DeviceProbe:
    """Ask the NVIDIA driver how many CUDA devices this process can see."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return DeviceProbe(0, f"no NVIDIA driver is installed (libcuda.so.1 cannot be loaded: {exc})")
    rc = lib.cuInit(0)
    if rc == _CUDA_SUCCESS:
        n = ctypes.c_int(0)
        rc = lib.cuDeviceGetCount(ctypes.byref(n))
        if rc == _CUDA_SUCCESS:
            if n.value > 0:
                return DeviceProbe(n.value, "")
            return DeviceProbe(0, f"the NVIDIA driver sees no device{_visible_hint()}")
    if rc == _CUDA_ERROR_NO_DEVICE:
        return DeviceProbe(0, f"the NVIDIA driver sees no device{_visible_hint()}")
    return DeviceProbe(0, f"the NVIDIA driver cannot be initialized (CUresult {rc})")


def explain(message: str) -> str:
    """``message`` (a CUDA runtime failure), saying first that there is no CUDA device when
    the runtime's error is one it gives for that and the driver finds none; else unchanged.

    ``"f: no usable CUDA device: CUDA driver version is insufficient for CUDA runtime version
    (cudaErrorInsufficientDriver)"`` becomes ``"f: no usable CUDA device: this machine has no
    CUDA device: no NVIDIA driver is installed (...); the CUDA runtime said: CUDA driver
    version is insufficient ..."``.
    """
    if not any(e in message for e in _NO_DEVICE_ERRORS):
        return message
    found = probe()
    if found.count > 0:  # a real driver/runtime mismatch: the runtime's words are right
        return message
    head, sep, said = message.partition("no usable CUDA device: ")
    if not sep:
        head, said = "", message
    return (
        f"{head}no usable CUDA device: this machine has no CUDA device: {found.reason}; "
        f"the CUDA runtime said: {said}"
    )


def require_device(what: str) -> None:
    """Raise :class:`LaunchError` naming ``what`` when this machine has no CUDA device.

    Raises
    ------
    LaunchError
        ``"<what>: this machine has no CUDA device: <why>"``.
    """
    found = probe()
    if found.count == 0:
        raise LaunchError(
            f"{what}: this machine has no CUDA device: {found.reason}; run it where a GPU is, "
            "pass a runner= or farm= that measures elsewhere, or use target='cpu'"
        )
