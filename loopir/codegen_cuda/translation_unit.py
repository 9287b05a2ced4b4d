"""The translation unit of a lowered function: every kernel emitted (each on static shared
memory, or dynamic when it needs more than 48 KB), the device helpers they use, and the host
program's split ([`emit_cuda`][loopir.codegen_cuda.translation_unit.emit_cuda]).

The kernels themselves are printed by ``KernelEmitter`` (``loopir.codegen_cuda.emitter``, whose
docstring says how the IR maps to CUDA).
"""

from __future__ import annotations

import logging

from loopir.codegen_cuda import shared_memory as smem
from loopir.codegen_cuda.allreduce import ALLREDUCE_HELPERS
from loopir.codegen_cuda.async_copy import ASYNC_HELPERS
from loopir.codegen_cuda.emitter import KernelEmitter
from loopir.codegen_cuda.exprs_cuda import FAST_MATH_HELPERS
from loopir.codegen_cuda.source import EmitResult, KernelSource
from loopir.codegen_cuda.split import HostDeviceSplitter, KernelSpec, shape_vars
from loopir.codegen_cuda.tensor_core import TENSOR_CORE_HELPERS
from loopir.codegen_cuda.tma import TMA_DEVICE_HELPERS
from loopir.codegen_cuda.wgmma import wgmma_helpers
from loopir.errors import CodegenError
from loopir.ir.expr import Var
from loopir.ir.functor import post_order_stmts
from loopir.ir.stmt import Block, PrimFunc

__all__ = ["FLOOR_HELPERS", "emit_cuda"]

logger = logging.getLogger("loopir.codegen_cuda.emitter")  # the messages users filter on

FLOOR_HELPERS = """\
// Floor division and modulo (round toward -inf), as loopir's floordiv/floormod; C's / and %
// truncate toward zero. Used only where an operand may be negative.
template <typename T>
__host__ __device__ __forceinline__ T loopir_floordiv(T a, T b) {
  T q = a / b;
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T>
__host__ __device__ __forceinline__ T loopir_floormod(T a, T b) {
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
"""


def _emit_kernel(func: PrimFunc, spec: KernelSpec, size_vars: set[Var], min_blocks: int | None
                 ) -> tuple[KernelEmitter, str, KernelSource]:  # fmt: skip
    """One kernel: on static shared memory when it fits the 48 KB, else emitted again with its
    largest shared buffers in dynamic shared memory; refused beyond what any device allows."""
    em = KernelEmitter(func, spec, size_vars, min_blocks)
    text, info = em.emit()
    if info.shared_bytes > smem.STATIC_LIMIT:
        allocs = smem.shared_allocations(spec.body)
        scratch = info.shared_bytes - sum(smem.allocation_bytes(a) for a in allocs)  # reductions'
        plan = smem.plan_dynamic(allocs, smem.STATIC_LIMIT - scratch, em.smem_align)
        em = KernelEmitter(func, spec, size_vars, min_blocks, dynamic=plan)
        text, info = em.emit()
    if info.shared_bytes > smem.STATIC_LIMIT:  # a static part no buffer can be moved from
        raise CodegenError(
            f"CUDA codegen: kernel {spec.name} declares {info.shared_bytes} bytes of static shared "
            f"memory outside its shared buffers (cross-thread reductions), over the "
            f"{smem.STATIC_LIMIT}-byte static limit"
        )
    total = info.shared_bytes + info.dynamic_shared_bytes
    if total > smem.MAX_OPTIN:
        raise CodegenError(
            f"CUDA codegen: kernel {spec.name} needs {total} bytes of shared memory per block "
            f"({info.dynamic_shared_bytes} dynamic + {info.shared_bytes} static), over the "
            f"{smem.MAX_OPTIN}-byte limit of every CUDA device (the sm_90 opt-in maximum)"
        )
    return em, text, info


def emit_cuda(func: PrimFunc, min_blocks_per_sm: int | None = None) -> EmitResult:
    """Emit CUDA C++ for the lowered function ``func``.

    Parameters
    ----------
    func
        A function in lowered form.
    min_blocks_per_sm
        If set, the second argument of every kernel's ``__launch_bounds__`` (the register cap
        that lets that many blocks share a multiprocessor).

    Returns
    -------
    EmitResult
        The source, the host program and per-kernel launch information.

    Raises
    ------
    CodegenError
        If the function is not in lowered form or cannot be split into host and kernels.
    """
    if min_blocks_per_sm is not None and (
        isinstance(min_blocks_per_sm, bool) or not isinstance(min_blocks_per_sm, int)
        or min_blocks_per_sm < 1
    ):
        raise CodegenError(
            f"CUDA codegen: min_blocks_per_sm must be a positive int, got {min_blocks_per_sm!r}"
        )
    blocks: list[str] = []
    post_order_stmts(
        func.body, lambda n: blocks.append(n.name) if isinstance(n, Block) else None
    )
    if blocks:
        raise CodegenError(
            f"CUDA codegen: {func.name} still has blocks ({', '.join(repr(b) for b in blocks[:3])}"
            f"{', ...' if len(blocks) > 3 else ''}), which are not part of the lowered form: lower "
            "it first (loopir.lower), or build it with loopir.build(func, target='cuda')"
        )
    splitter = HostDeviceSplitter(func)
    host = splitter.run()
    size_vars = set(shape_vars((*func.params, *splitter.host_temps)))
    texts: list[str] = []
    kernels: list[KernelSource] = []
    fp16 = bf16 = False
    helpers = allreduce = async_copies = tensor_cores = tma = ex2 = False
    wgmma: set[tuple[str, int, int, str, str]] = set()
    for spec in splitter.kernels:
        em, text, info = _emit_kernel(func, spec, size_vars, min_blocks_per_sm)
        fp16 |= em.uses_fp16
        bf16 |= em.uses_bf16
        helpers |= em.printer.uses_floor_helpers
        ex2 |= em.printer.uses_ex2
        allreduce |= em.uses_allreduce
        async_copies |= em.uses_async
        tensor_cores |= em.uses_tensor_core
        tma |= em.uses_tma
        wgmma |= em.wgmma_shapes
        texts.append(text)
        kernels.append(info)
    if not kernels and not splitter.extern_calls:
        logger.warning("CUDA codegen: function %s has no thread-bound loop: no kernel", func.name)
    fp16 |= tensor_cores  # the helpers have half and nv_bfloat16 overloads
    bf16 |= tensor_cores
    includes = [h for h, used in (("#include <cuda_fp16.h>", fp16), ("#include <cuda_bf16.h>", bf16)) if used]
    parts = ["\n".join([f"// Generated by loopir from PrimFunc {func.name!r}.", *includes])]
    preamble = list(includes)
    if helpers:
        parts.append(FLOOR_HELPERS.rstrip("\n"))
        preamble.append(FLOOR_HELPERS.rstrip("\n"))
    if ex2:
        parts.append(FAST_MATH_HELPERS)
        preamble.append(FAST_MATH_HELPERS)
    if allreduce:
        parts.append(ALLREDUCE_HELPERS)
        preamble.append(ALLREDUCE_HELPERS)
    if async_copies:
        parts.append(ASYNC_HELPERS)
        preamble.append(ASYNC_HELPERS)
    if tensor_cores:
        parts.append(TENSOR_CORE_HELPERS)
        preamble.append(TENSOR_CORE_HELPERS)
    if wgmma:
        parts.append(wgmma_helpers(wgmma))
        preamble.append(wgmma_helpers(wgmma))
    if tma:
        parts.append(TMA_DEVICE_HELPERS)
        preamble.append(TMA_DEVICE_HELPERS)
    parts.extend(texts)
    source = "\n\n".join(parts) + "\n"
    return EmitResult(
        source=source,
        host=host,
        kernels=tuple(kernels),
        host_temps=tuple(splitter.host_temps),
        extern_calls=tuple(splitter.extern_calls),
        preamble=tuple(preamble),
        kernel_texts=tuple(texts),
    )
