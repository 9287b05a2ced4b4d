"""The standard lowering pipeline: :func:`lower` and :func:`default_pipeline`.

Order (each is its own pass object; see their modules):

0. the target's own passes, with ``target=`` (``"cuda"``: ``GemmOffload``, then
   ``DefaultGPUSchedule`` for blocks nobody scheduled; registered by the backend through
   :func:`register_target_passes`);
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
   copies ``cp.async`` with commit/wait groups (docs/pipelining.md); only when asked for.
9. ``ThreadSync`` -- ``storage_sync("shared")`` barriers.
10. ``InjectSharedPrefetch`` -- register prefetch of the next shared tile, for loops annotated
   ``"loopir.prefetch_shared"`` or every eligible loop under ``tir.prefetch_shared``
   (docs/prefetch.md); it runs only when one of those asks for it.

Vectorized loops are kept as loops: the CUDA backend emits them as vector accesses when it can.
"""

from __future__ import annotations

from collections.abc import Callable

from loopir.errors import PassError
from loopir.ir.stmt import PrimFunc
from loopir.passes.base import Pass, Sequential
from loopir.passes.compact import CompactBufferAllocation
from loopir.passes.context import PassContext
from loopir.passes.cross_thread import LowerCrossThreadReduction
from loopir.passes.inject_vthread import InjectVirtualThread
from loopir.passes.local_pad import LocalPadding
from loopir.passes.lower_blocks import LowerBlocks
from loopir.passes.prefetch import InjectSharedPrefetch, prefetch_requested
from loopir.passes.simplify import Simplify
from loopir.passes.software_pipeline import InjectSoftwarePipeline, pipeline_requested
from loopir.passes.thread_sync import ThreadSync
from loopir.passes.unify_threads import UnifyThreadLoops

__all__ = ["default_pipeline", "lower", "register_target_passes"]


# Passes a target runs before the standard ones, registered by its backend when the backend is
# imported (the CUDA backend registers GemmOffload), so that passes never import a backend.
_TARGET_PASSES: dict[str, Callable[[PassContext], list[Pass]]] = {"cpu": lambda ctx: []}


def register_target_passes(target: str, passes: Callable[[PassContext], list[Pass]]) -> None:
    """Make ``default_pipeline(target=target)`` start with ``passes(ctx)`` (backends call it)."""
    _TARGET_PASSES[target] = passes


def default_pipeline(
    ctx: PassContext | None = None, explain_local_pad: bool = False, func: PrimFunc | None = None,
    target: str | None = None,
) -> Sequential:
    """The passes :func:`lower` runs under ``ctx`` (default: the current context) on ``func``
    (``func`` only decides whether annotation-driven passes are included). With ``target``
    (``"cpu"``, ``"cuda"``), the target's own passes come first: for CUDA, ``GemmOffload``
    (registered when ``loopir.codegen_cuda`` is imported, as ``loopir.build`` does)."""
    ctx = ctx or PassContext.current()
    passes: list[Pass] = []
    if target is not None:
        factory = _TARGET_PASSES.get(target)
        if factory is None:
            raise PassError(
                f"default_pipeline: no passes are registered for target {target!r} (known: "
                f"{', '.join(sorted(_TARGET_PASSES))}; a backend registers its target when it "
                "is imported, e.g. import loopir.codegen_cuda)"
            )
        passes += factory(ctx)
    passes += [LowerCrossThreadReduction(), LowerBlocks(), UnifyThreadLoops(), CompactBufferAllocation()]
    if ctx.get("tir.enable_local_pad"):
        passes.append(LocalPadding(explain=explain_local_pad))
    passes += [Simplify(), InjectVirtualThread()]
    if pipeline_requested(func):
        passes.append(InjectSoftwarePipeline())
    passes.append(ThreadSync())
    if prefetch_requested(func, ctx):
        passes.append(InjectSharedPrefetch())
    return Sequential(passes, name="lower")


def lower(func: PrimFunc, target: str | None = None) -> PrimFunc:
    """Lower a (scheduled) PrimFunc to the loop form the backends consume.

    Runs :func:`default_pipeline` under the current :class:`PassContext`. The result has no
    Block/BlockRealize: only For, IfThenElse, SeqStmt, BufferStore, Evaluate and Allocate (of
    shared/local buffers with their compacted shapes), with shared-memory barriers inserted
    and cooperative-fetch thread loops unified.

    Parameters
    ----------
    func
        The function (typically ``sch.func``).
    target
        Run the target's own passes first (see :func:`default_pipeline`).

    Returns
    -------
    PrimFunc
        The lowered function.
    """
    if not isinstance(func, PrimFunc):
        raise PassError(f"lower: expected a PrimFunc, got {type(func).__name__}")
    return default_pipeline(func=func, target=target)(func)
