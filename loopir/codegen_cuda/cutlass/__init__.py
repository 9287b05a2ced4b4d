"""CUTLASS GEMM and convolution kernels for loopir: enumeration, emission, building, tuning and
running.

- [`problem`][loopir.codegen_cuda.cutlass.problem] -- the problem signatures
  ([`GemmProblem`][loopir.codegen_cuda.cutlass.problem.GemmProblem],
  [`ConvProblem`][loopir.codegen_cuda.cutlass.problem.ConvProblem] for implicit-GEMM conv2d
  fprop, [`EpilogueSpec`][loopir.codegen_cuda.cutlass.problem.EpilogueSpec]).
- [`enumerate`][loopir.codegen_cuda.cutlass.enumerate] -- candidate configurations from
  ``cutlass_library``'s generator.
- [`emit`][loopir.codegen_cuda.cutlass.emit] -- C++ instantiations behind ``extern "C"`` host entry
  points.
- [`library`][loopir.codegen_cuda.cutlass.library] -- one-nvcc-call shared libraries with a
  content-hash cache, via ctypes.
- [`tune`][loopir.codegen_cuda.cutlass.tune] --
  [`tune.tune`][loopir.codegen_cuda.cutlass.tune.tune]: parallel compile + CUDA-event timing, choice
  cached on disk.
- [`runtime`][loopir.codegen_cuda.cutlass.runtime] --
  [`CutlassGemm`][loopir.codegen_cuda.cutlass.runtime.CutlassGemm], a callable on numpy/torch/CUDA
  arrays.
- [`offload`][loopir.codegen_cuda.cutlass.offload] -- the GemmOffload pass (its IR matching is
  [`loopir.passes.gemm_match`][loopir.passes.gemm_match] and
  [`loopir.passes.conv_match`][loopir.passes.conv_match]).
- [`hook`][loopir.codegen_cuda.cutlass.hook] -- the CUDA build's side: the CUTLASS calls of a
  function's host code.

Only lightweight names are imported here; ``cutlass_library`` loads on first use.
"""

from __future__ import annotations

from typing import Any

from loopir.codegen_cuda.cutlass.problem import ConvProblem, EpilogueSpec, GemmProblem

__all__ = ["ConvProblem", "CutlassGemm", "EpilogueSpec", "GemmProblem"]


def __getattr__(name: str) -> Any:
    if name == "CutlassGemm":
        from loopir.codegen_cuda.cutlass.runtime import CutlassGemm

        return CutlassGemm
    raise AttributeError(f"module 'loopir.codegen_cuda.cutlass' has no attribute {name!r}")
