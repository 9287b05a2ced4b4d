"""What this machine can do: a CUDA GPU through pycuda, nvcc, torch, the CUTLASS package.

Each probe returns ``(available, detail)``: the device/tool name when available, else a short
reason that the demo and ``bench`` print as "skipped ...: <reason>".
"""

from __future__ import annotations

import functools
import importlib.util

__all__ = ["probe_cutlass", "probe_gpu", "probe_nvcc", "probe_torch_cuda"]


@functools.cache
def probe_gpu() -> tuple[bool, str]:
    """Whether pycuda is importable and the CUDA driver sees a device; its name, or why not."""
    try:
        import pycuda.driver as drv
    except ImportError as exc:
        return False, f"pycuda is not installed ({exc}; pip install -e '.[cuda]')"
    try:
        drv.init()
        count = drv.Device.count()
    except Exception as exc:  # pycuda raises its own driver errors; any of them means "no GPU"
        return False, f"the CUDA driver is not usable ({exc})"
    if count == 0:
        return False, "the CUDA driver sees no GPU"
    return True, str(drv.Device(0).name())


@functools.cache
def probe_nvcc() -> tuple[bool, str]:
    """Whether nvcc can be found (same lookup as the CUDA backend); its path, or why not."""
    from loopir.codegen_cuda.compile import find_nvcc
    from loopir.errors import CodegenError

    try:
        return True, find_nvcc()
    except CodegenError as exc:
        return False, str(exc)


@functools.cache
def probe_torch_cuda() -> tuple[bool, str]:
    """Whether torch with CUDA is importable (for the cuBLAS baseline); its version, or why not."""
    if importlib.util.find_spec("torch") is None:
        return False, "torch is not installed"
    try:
        import torch
    except Exception as exc:  # a broken torch install must not break the demo
        return False, f"torch failed to import ({exc})"
    if not torch.cuda.is_available():
        return False, "torch sees no CUDA device"
    return True, f"torch {torch.__version__}"


@functools.cache
def probe_cutlass() -> tuple[bool, str]:
    """Whether the nvidia-cutlass package (``cutlass_library``) is importable."""
    if importlib.util.find_spec("cutlass_library") is None:
        return False, "the nvidia-cutlass package is not installed (pip install -e '.[cutlass]')"
    return True, "cutlass_library"
