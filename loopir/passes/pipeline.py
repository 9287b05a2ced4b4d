"""The standard lowering pipeline: [`lower`][loopir.passes.pipeline.lower] and
[`default_pipeline`][loopir.passes.pipeline.default_pipeline].

Order (each is its own pass object; see their modules):

0. the target's own passes, with ``target=`` (``"cuda"``: ``GemmOffload``, then
   ``DefaultGPUSchedule`` for blocks nobody scheduled; registered by the backend through
   [`register_target_passes`][loopir.passes.pipeline.register_target_passes], the backend
   imported by name on the target's first use);
1. ``LowerCrossThreadReduction`` -- reductions bound to ``threadIdx`` loops become per-thread
   parts, a combine (``thread_allreduce``, or a shared-memory tree) and a write-back by thread 0.
2. ``LowerBlocks`` -- blocks become loops, guards (predicates), init ``if``\\ s, Allocates.
3. ``UnifyThreadLoops`` -- cooperative-fetch thread loops share the outer thread index.
4. ``CompactBufferAllocation`` -- shared/local buffers shrink to their tile and move to the
   lowest common ancestor of their uses (shared: above the thread loops).
5. ``LocalPadding`` -- only when ``tir.enable_local_pad`` is True.
6. ``Simplify`` -- arithmetic simplification under loop ranges (opt_level >= 1).
7. ``InjectVirtualThread`` -- ``vthread`` loops folded into each real thread: statements that do
   not depend on the virtual thread (the cooperative fetches, barriers) run once, the others in
   small unrolled loops, local tiles expanded per virtual thread (2 x 32 = 64 accumulators per
   thread in the dense schedule).
8. ``InjectSoftwarePipeline`` -- loops annotated ``software_pipeline_stage`` become a
   prologue, a steady state and an epilogue, their stage buffers multi-buffered, async stages'
   copies ``cp.async`` with commit/wait groups (docs/pipelining.md); when a loop asks for it,
   and always with a target (its first passes may schedule the function: the default GPU
   schedule pipelines its GEMMs; without annotated loops the pass changes nothing).
9. ``SinkWgmmaWaits`` -- only when a loop is annotated ``loopir.wgmma_async`` or under
   ``cuda.wgmma_async``: ``ptx_wgmma`` issued asynchronously, each ``wgmma.wait_group`` sunk
   to the first statement that needs its group retired (``loopir.passes.wgmma_waits``).
10. ``ThreadSync`` -- ``storage_sync("shared")`` barriers.
11. ``InjectSharedPrefetch`` -- register prefetch of the next shared tile, for loops annotated
   ``"loopir.prefetch_shared"`` or every eligible loop under ``tir.prefetch_shared``
   (docs/prefetch.md); it runs only when one of those asks for it.
12. the target's late passes (``"cuda"``: ``PrivatizeThreadLocals`` and ``LowerWarpMemory``, a
   thread's slots of local buffers and warp buffers of tensor-core fragments -> each thread's
   registers; ``HoistIfThenElse``, loop-invariant guards above their loops).

Vectorized loops are kept as loops: the CUDA backend emits them as vector accesses when it can.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import overload

from loopir.errors import PassError
from loopir.ir.module import IRModule
from loopir.ir.stmt import PrimFunc
from loopir.passes.base import Pass, Sequential
from loopir.passes.compact import CompactBufferAllocation
from loopir.passes.context import PassContext
from loopir.passes.cross_thread import LowerCrossThreadReduction
from loopir.passes.hoist_if import HoistIfThenElse
from loopir.passes.inject_vthread import InjectVirtualThread
from loopir.passes.local_pad import LocalPadding
from loopir.passes.lower_blocks import LowerBlocks
from loopir.passes.lower_warp_memory import LowerWarpMemory
from loopir.passes.prefetch import InjectSharedPrefetch, prefetch_requested
from loopir.passes.simplify import Simplify
from loopir.passes.software_pipeline import InjectSoftwarePipeline, pipeline_requested
from loopir.passes.thread_registers import PrivatizeThreadLocals
from loopir.passes.thread_sync import ThreadSync
from loopir.passes.unify_threads import UnifyThreadLoops
from loopir.passes.wgmma_waits import SinkWgmmaWaits, wgmma_async_requested

__all__ = [
    "default_pipeline", "late_target_passes", "lower", "register_target_backend",
    "register_target_passes", "target_passes",
]  # fmt: skip


# Passes a target runs before the standard ones, registered by its backend when the backend is
# imported (the CUDA backend registers GemmOffload), so that passes never import a backend.
_TARGET_PASSES: dict[str, Callable[[PassContext], list[Pass]]] = {"cpu": lambda ctx: []}

# Passes a target runs after the standard ones: lowering to the target's memory model (the CPU
# executor runs IR without them: a warp buffer is an ordinary array there).
_LATE_TARGET_PASSES: dict[str, Callable[[PassContext], list[Pass]]] = {
    "cuda": lambda ctx: [PrivatizeThreadLocals(), LowerWarpMemory(), HoistIfThenElse()],
}

# The backend module of each target, by name: imported on the target's first use, so that
# ``lower(f, target="cuda")`` works before anything imported the backend (a name, not an import:
# passes sit below the backends in the import layers).
_TARGET_BACKENDS: dict[str, str] = {"cuda": "loopir.codegen_cuda"}


def register_target_passes(target: str, passes: Callable[[PassContext], list[Pass]]) -> None:
    """Make ``default_pipeline(target=target)`` start with ``passes(ctx)`` (backends call it)."""
    _TARGET_PASSES[target] = passes


def register_target_backend(target: str, module: str) -> None:
    """Name the module that registers ``target``'s passes when imported: the pipeline imports
    it on the target's first use (``"cuda"`` is ``loopir.codegen_cuda``)."""
    _TARGET_BACKENDS[target] = module


def target_passes(target: str) -> Callable[[PassContext], list[Pass]]:
    """The pass factory of ``target``, importing its backend module on first use.

    Raises
    ------
    PassError
        For a target with no passes and no backend, listing the known targets; or when the
        backend module fails to import or registers nothing.
    """
    factory = _TARGET_PASSES.get(target)
    if factory is not None:
        return factory
    module = _TARGET_BACKENDS.get(target)
    if module is None:
        known = sorted(set(_TARGET_PASSES) | set(_TARGET_BACKENDS))
        raise PassError(
            f"default_pipeline: no passes are registered for target {target!r} (known: "
            f"{', '.join(known)}; a backend registers a new target with register_target_passes "
            "and register_target_backend)"
        )
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise PassError(
            f"default_pipeline: the backend {module} of target {target!r} cannot be imported: {exc}"
        ) from exc
    factory = _TARGET_PASSES.get(target)
    if factory is None:
        raise PassError(
            f"default_pipeline: importing {module} registered no passes for target {target!r}"
        )
    return factory


def default_pipeline(
    ctx: PassContext | None = None, explain_local_pad: bool = False, func: PrimFunc | None = None,
    target: str | None = None,
) -> Sequential:
    """The passes [`lower`][loopir.passes.pipeline.lower] runs under ``ctx`` (default: the current
    context) on ``func`` (``func`` only decides whether annotation-driven passes are included). With
    ``target`` (``"cpu"``, ``"cuda"``), the target's own passes come first: for CUDA,
    ``GemmOffload`` (registered by ``loopir.codegen_cuda``, which
    [`target_passes`][loopir.passes.pipeline.target_passes] imports on first use); and its late
    passes last ([`late_target_passes`][loopir.passes.pipeline.late_target_passes]: for CUDA,
    ``LowerWarpMemory``)."""
    ctx = ctx or PassContext.current()
    passes: list[Pass] = []
    if target is not None:
        passes += target_passes(target)(ctx)
    passes += [LowerCrossThreadReduction(), LowerBlocks(), UnifyThreadLoops(), CompactBufferAllocation()]
    if ctx.get("tir.enable_local_pad"):
        passes.append(LocalPadding(explain=explain_local_pad))
    passes += [Simplify(), InjectVirtualThread()]
    # with a target, its first passes may schedule the function (the default GPU schedule
    # pipelines its GEMMs), so the unscheduled input cannot tell; the pass is a no-op without
    # annotated loops
    if target is not None or pipeline_requested(func):
        passes.append(InjectSoftwarePipeline())
    if wgmma_async_requested(func, ctx):
        passes.append(SinkWgmmaWaits())
    passes.append(ThreadSync())
    if prefetch_requested(func, ctx):
        passes.append(InjectSharedPrefetch())
    if target is not None:
        passes += late_target_passes(target)(ctx)
    return Sequential(passes, name="lower")


def late_target_passes(target: str) -> Callable[[PassContext], list[Pass]]:
    """The passes ``target`` runs after the standard ones (none for most targets)."""
    return _LATE_TARGET_PASSES.get(target, lambda ctx: [])


@overload
def lower(func: PrimFunc, target: str | None = None) -> PrimFunc: ...


@overload
def lower(func: IRModule, target: str | None = None) -> IRModule: ...


def lower(func: PrimFunc | IRModule, target: str | None = None) -> PrimFunc | IRModule:
    """Lower a (scheduled) PrimFunc, or each function of an IRModule, to the loop form the
    backends consume.

    Runs [`default_pipeline`][loopir.passes.pipeline.default_pipeline] under the current
    [`PassContext`][loopir.passes.context.PassContext]. The result has no Block/BlockRealize: only
    For, IfThenElse, SeqStmt, BufferStore, Evaluate and Allocate (of shared/local buffers with their
    compacted shapes), with shared-memory barriers inserted and cooperative-fetch thread loops
    unified.

    Parameters
    ----------
    func
        The function (typically ``sch.func``), or a ``loopir.IRModule`` (``sch.mod``).
    target
        Run the target's own passes first (see
        [`default_pipeline`][loopir.passes.pipeline.default_pipeline]).

    Returns
    -------
    PrimFunc or IRModule
        The lowered function, or a module of the lowered functions under the same names.
    """
    if isinstance(func, IRModule):
        return IRModule({name: lower(func[name], target) for name in func.names})
    if not isinstance(func, PrimFunc):
        raise PassError(f"lower: expected a PrimFunc or an IRModule, got {type(func).__name__}")
    return default_pipeline(func=func, target=target)(func)
