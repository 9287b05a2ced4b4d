"""CUTLASS GEMM kernels for loopir: enumeration, emission, building, tuning and running.

- :mod:`.problem` -- the GEMM signature (:class:`GemmProblem`, :class:`EpilogueSpec`).
- :mod:`.enumerate` -- candidate configurations from ``cutlass_library``'s generator.
- :mod:`.emit` -- C++ instantiations behind ``extern "C"`` host entry points.
- :mod:`.library` -- one-nvcc-call shared libraries with a content-hash cache, via ctypes.
- :mod:`.tune` -- :func:`.tune.tune`: parallel compile + CUDA-event timing, choice cached on disk.
- :mod:`.runtime` -- :class:`CutlassGemm`, a callable on numpy/torch/CUDA arrays.
- :mod:`.offload` -- the GemmOffload pass (its IR matching is :mod:`loopir.passes.gemm_match`).
- :mod:`.hook` -- the CUDA build's side: the CUTLASS calls of a function's host code.

Only lightweight names are imported here; ``cutlass_library`` loads on first use.
"""

from __future__ import annotations

from typing import Any

from loopir.codegen_cuda.cutlass.problem import EpilogueSpec, GemmProblem

__all__ = ["CutlassGemm", "EpilogueSpec", "GemmProblem"]


def __getattr__(name: str) -> Any:
    if name == "CutlassGemm":
        from loopir.codegen_cuda.cutlass.runtime import CutlassGemm

        return CutlassGemm
    raise AttributeError(f"module 'loopir.codegen_cuda.cutlass' has no attribute {name!r}")
