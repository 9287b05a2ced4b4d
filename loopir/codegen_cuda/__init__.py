"""CUDA backend: lowered loopir -> CUDA C++ kernels + C++ host code -> one shared library.

Entry point: [`build_cuda`][loopir.codegen_cuda.build_cuda] (``loopir.build(func, target="cuda")``
calls it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from loopir.codegen_cuda.compile import (
    DEFAULT_ARCH,
    CompiledBinary,
    KernelResources,
    compile_cuda,
    default_cache_dir,
)
from loopir.codegen_cuda.host import emit_host
from loopir.codegen_cuda.runtime import CUDAModule, describe_resources
from loopir.codegen_cuda.source import EmitResult, KernelSource
from loopir.codegen_cuda.translation_unit import emit_cuda
from loopir.codegen_cuda.units import FunctionCode, build_library
from loopir.errors import CodegenError
from loopir.ir.functor import post_order_stmts
from loopir.ir.stmt import Block, BlockRealize, PrimFunc
from loopir.passes.pipeline import register_target_passes
from loopir.passes.race_check import check_races


def _cuda_target_passes(ctx: object) -> list:  # type: ignore[type-arg]
    from loopir.codegen_cuda.cutlass.offload import GemmOffload
    from loopir.codegen_cuda.default_schedule import DefaultGPUSchedule
    from loopir.passes.fast_math import FastMath

    return [GemmOffload(), DefaultGPUSchedule(), FastMath()]


register_target_passes("cuda", _cuda_target_passes)

logger = logging.getLogger(__name__)


def _needs_lowering(func: PrimFunc) -> bool:
    found = False

    def f(n: object) -> None:
        nonlocal found
        if isinstance(n, (Block, BlockRealize)):
            found = True

    post_order_stmts(func.body, f)
    return found


def lower_for_cuda(func: PrimFunc) -> PrimFunc:
    """Lower ``func`` for the CUDA backend under the current PassContext.

    Scheduled TensorIR goes through ``loopir.lower(func, target="cuda")``, whose first pass
    hands GEMM stages to CUTLASS (``GemmOffload``). IR that is already in loop form (written
    by hand, or lowered before) still gets the passes every kernel needs -- virtual-thread
    injection, barrier planning, the annotation-driven register prefetch when asked for, and
    warp buffers as registers (LowerWarpMemory): each is idempotent on IR it has already run
    on, so the emitter only prints.
    """
    from loopir.passes import (
        InjectVirtualThread,
        LowerWarpMemory,
        PassContext,
        Sequential,
        ThreadSync,
        lower,
    )
    from loopir.passes.prefetch import InjectSharedPrefetch, prefetch_requested

    if not isinstance(func, PrimFunc):
        raise CodegenError(f"build_cuda: expected a PrimFunc, got {type(func).__name__}")
    if _needs_lowering(func):
        return lower(func, target="cuda")
    tail = [InjectVirtualThread(), ThreadSync()]
    if prefetch_requested(func, PassContext.current()):
        tail.append(InjectSharedPrefetch())
    tail.append(LowerWarpMemory())
    return Sequential(tail, name="lower_for_cuda")(func)


def build_cuda(
    func: PrimFunc,
    arch: str | None = None,
    nvcc_flags: Sequence[str] = (),
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
    min_blocks_per_sm: int | None = None,
    **options: object,
) -> CUDAModule:
    """Lower ``func``, emit CUDA C++, compile it with nvcc and return a callable module.

    Parameters
    ----------
    func
        A PrimFunc (scheduled TensorIR or already lowered).
    arch
        nvcc target such as ``"sm_90a"``; None: the visible GPU's, else ``sm_90a``.
    nvcc_flags
        Extra flags for nvcc (e.g. ``("--use_fast_math",)``).
    cache_dir
        Where compiled libraries are cached (default ``~/.cache/loopir/cuda`` or
        ``$LOOPIR_CACHE_DIR``).
    use_cache
        False forces a fresh nvcc run.
    min_blocks_per_sm
        Second ``__launch_bounds__`` argument of every kernel (caps registers per thread so
        that this many blocks fit on one multiprocessor).

    Returns
    -------
    CUDAModule
        Callable on arrays; also holds ``source``, ``resource_usage`` and ``benchmark``.

    Raises
    ------
    CodegenError
        If the function cannot be lowered, split or emitted, or nvcc fails.
    """
    if options:
        raise CodegenError(
            f"build_cuda: unknown option(s) {', '.join(sorted(options))}; known: arch, "
            "nvcc_flags, cache_dir, use_cache, min_blocks_per_sm"
        )
    code = prepare_function(func, min_blocks_per_sm)
    built = build_library([code], arch=arch, nvcc_flags=nvcc_flags, cache_dir=cache_dir,
                          use_cache=use_cache)  # fmt: skip
    mod = CUDAModule(code.func, code.emitted, code.host, built.binary, built.source, cutlass=code.gemms)
    _warn_spills(mod)
    return mod


def prepare_function(func: PrimFunc, min_blocks_per_sm: int | None = None) -> FunctionCode:
    """Everything before nvcc: GEMM offload, lowering, emission, race check, host code."""
    return emit_function(lower_for_cuda(func), min_blocks_per_sm)


def emit_function(lowered: PrimFunc, min_blocks_per_sm: int | None = None) -> FunctionCode:
    """The emission half of [`prepare_function`][loopir.codegen_cuda.prepare_function], on an
    already lowered function: kernels, race check, CUTLASS call descriptions and host code (what
    ``benchmarks/compile_time.py`` times as "emit")."""
    from loopir.codegen_cuda.cutlass.hook import ExternGemms
    from loopir.passes.context import PassContext

    emitted = emit_cuda(lowered, min_blocks_per_sm=min_blocks_per_sm)
    # after the emitter's structural checks, whose diagnoses are more specific
    check_races(lowered)
    # the offload's call descriptions are function attributes: lowering keeps them
    gemms = ExternGemms(lowered) if emitted.extern_calls else None
    sync = bool(PassContext.current().get("cuda.sync_after_launch"))
    host = emit_host(lowered, emitted, gemms.calls if gemms else (), sync_after_launch=sync)
    return FunctionCode(lowered, emitted, host, gemms)


def _warn_spills(mod: CUDAModule) -> None:
    for name, r in mod.resource_usage.items():
        if r.spill_store_bytes or r.spill_load_bytes:
            logger.warning(
                "kernel %s spills registers (%d B stores, %d B loads)",
                name,
                r.spill_store_bytes,
                r.spill_load_bytes,
            )


__all__ = [
    "DEFAULT_ARCH",
    "CUDAModule",
    "CompiledBinary",
    "EmitResult",
    "KernelResources",
    "KernelSource",
    "build_cuda",
    "prepare_function",
    "compile_cuda",
    "default_cache_dir",
    "describe_resources",
    "emit_cuda",
    "emit_function",
    "lower_for_cuda",
]
