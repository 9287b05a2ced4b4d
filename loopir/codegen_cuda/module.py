"""Building an IRModule for CUDA: every function in one shared library.

``loopir.build(loopir.IRModule({"qkv": f1, "up": f2}), target="cuda")`` returns a
[`CUDARuntimeModule`][loopir.codegen_cuda.module.CUDARuntimeModule]; ``rt["qkv"]`` is called like
``f1``, and ``rt.source`` and ``rt.units`` show what was compiled.

Functions are prepared one by one (offload, lowering, emission, race check, host code), then
[`build_library`][loopir.codegen_cuda.units.build_library] compiles them together: one CUTLASS unit
with each distinct configuration instantiated once, and the generated code as one unit or one unit
per function (``strategy``; see that module).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from loopir.codegen_cuda.runtime import CUDAModule
from loopir.codegen_cuda.units import BuiltLibrary, build_library
from loopir.errors import CodegenError, LaunchError
from loopir.ir.module import IRModule
from loopir.runtime.module import RuntimeModule

logger = logging.getLogger(__name__)


class CUDARuntimeModule(RuntimeModule):
    """A built CUDA module: ``rt["name"]`` is a
    [`CUDAModule`][loopir.codegen_cuda.runtime.CUDAModule] of the shared library.

    Attributes
    ----------
    source
        The whole module: the generated code, then the CUTLASS unit.
    library_path
        The one shared library.
    units
        Per nvcc invocation: unit name, cache hit, seconds.
    build_seconds
        Wall time of the build (preparation included).
    """

    def __init__(self, functions: dict[str, CUDAModule], built: BuiltLibrary, seconds: float) -> None:
        super().__init__(functions, "cuda")
        self.library_path = built.binary.path
        self.units = built.units
        self.build_seconds = seconds
        self.source = built.source
        if built.cutlass_source:
            self.source += "\n// ---- the CUTLASS unit ----\n" + built.cutlass_source

    def synchronize(self) -> None:
        """Wait for the device (a kernel's fault is raised as LaunchError)."""
        if self._functions:
            next(iter(self._functions.values())).synchronize()


def build_cuda_module(
    mod: IRModule,
    arch: str | None = None,
    nvcc_flags: Sequence[str] = (),
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
    min_blocks_per_sm: int | None = None,
    strategy: str = "single",
    workers: int | None = None,
    **options: Any,
) -> CUDARuntimeModule:
    """Build every function of ``mod`` into one shared library.

    Parameters are those of [`loopir.codegen_cuda.build_cuda`][loopir.codegen_cuda.build_cuda], plus
    ``strategy`` (``"single"`` or ``"units"``) and ``workers`` (concurrent nvcc processes for
    ``"units"``).

    Raises
    ------
    CodegenError
        Naming the function whose preparation or compile failed.
    """
    from loopir.codegen_cuda import prepare_function

    if options:
        raise CodegenError(f"build (IRModule, cuda): unknown option(s) {', '.join(sorted(options))}")
    t0 = time.perf_counter()
    codes = []
    for name in mod.names:
        try:
            codes.append(prepare_function(mod[name], min_blocks_per_sm))
        except CodegenError as exc:
            raise CodegenError(f"IRModule function {name!r}: {exc}") from exc
    built = build_library(codes, arch=arch, nvcc_flags=nvcc_flags, cache_dir=cache_dir,
                          use_cache=use_cache, strategy=strategy, workers=workers)  # fmt: skip
    functions = {
        c.func.name: CUDAModule(c.func, c.emitted, c.host, built.binary, built.source, cutlass=c.gemms)
        for c in codes
    }
    seconds = time.perf_counter() - t0
    logger.info("built CUDA module (%s) in %.2f s: %s", ", ".join(mod.names), seconds, built.units)
    return CUDARuntimeModule(functions, built, seconds)


__all__ = ["CUDARuntimeModule", "LaunchError", "build_cuda_module"]
