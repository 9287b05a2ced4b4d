"""DefaultGPUSchedule: give the blocks nobody scheduled a GPU schedule (as TVM's pass does).

The CUDA target's second pass, after ``GemmOffload`` (a GEMM CUTLASS takes needs no schedule). Each
root-level block none of whose loops is bound to a thread axis gets the schedule of
[`loopir.schedule.default_gpu.default_gpu_schedule`][loopir.schedule.default_gpu.default_gpu_schedule]
(GEMMs on float16/bfloat16 on tensor cores unless ``cuda.default_schedule.tensor_cores`` is
False, on Hopper's ``wgmma`` where ``cuda.default_schedule.wgmma`` says so: by default when the
visible GPU is a Hopper, fused elementwise kernels, one thread block per row for softmax-like rows, cross-thread reductions,
a shared tile for transposes, 256 threads per block otherwise), and the pass logs what it did at
INFO level. Disable it with ``PassContext(disabled_passes=["DefaultGPUSchedule"])`` to get the error
about unbound loops instead.

Example (before, an unscheduled te function; after, the default schedule)::

    for i, j in T.grid(64, 32):                    for bx in T.thread_binding(2, "blockIdx.x"):
        with T.block("B"):                             for tx in T.thread_binding(256, "threadIdx.x"):
            B[vi, vj] = A[vi, vj] * 2.0                    for v in T.vectorized(4): ...
"""

from __future__ import annotations

import functools
import logging

from loopir.codegen_cuda.compile import visible_capability
from loopir.errors import PassError, ScheduleError
from loopir.ir.stmt import PrimFunc
from loopir.passes.base import Pass
from loopir.passes.context import PassContext, register_config
from loopir.schedule import Schedule
from loopir.schedule.default_gpu import default_gpu_schedule, unscheduled_blocks

__all__ = ["TENSOR_CORES_KEY", "WGMMA_KEY", "DefaultGPUSchedule", "hopper_visible"]

#: PassContext key: may the default schedule put GEMMs on tensor cores (sm_80+)?
TENSOR_CORES_KEY = "cuda.default_schedule.tensor_cores"
register_config(
    TENSOR_CORES_KEY, bool, True,
    "DefaultGPUSchedule: schedule float16/bfloat16 GEMMs that CUTLASS does not take on tensor cores "
    "(ldmatrix + mma.sync, sm_80 or newer); False keeps them on CUDA cores (for an older -arch).",
)  # fmt: skip

#: PassContext key (registered in ``loopir.passes.cuda_config``): does the tensor-core rule use
#: Hopper's wgmma (sm_90a) where a GEMM fits it? "auto" (a Hopper GPU is visible), "on", "off".
WGMMA_KEY = "cuda.default_schedule.wgmma"
_WGMMA_CHOICES = ("auto", "on", "off")

logger = logging.getLogger(__name__)


@functools.cache
def hopper_visible() -> bool:
    """Whether the first visible CUDA device has compute capability 9.0 (False without a
    device or a driver)."""
    return visible_capability() == (9, 0)


def _wgmma(ctx: PassContext) -> bool:
    choice = ctx.get(WGMMA_KEY)
    if choice not in _WGMMA_CHOICES:
        raise PassError(f"pass DefaultGPUSchedule: {WGMMA_KEY} must be one of {_WGMMA_CHOICES}, got {choice!r}")
    return choice == "on" or (choice == "auto" and hopper_visible())


class DefaultGPUSchedule(Pass):
    """Schedule unscheduled root-level blocks for the GPU (see the module docstring).

    Attributes
    ----------
    applied
        The rules applied in the last run, one line each (empty when nothing was unscheduled).
    """

    name = "DefaultGPUSchedule"
    opt_level = 0
    required = False

    def __init__(self) -> None:
        self.applied: list[str] = []

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        self.applied = []
        sch = Schedule(func)
        if not unscheduled_blocks(sch):
            return func
        try:
            self.applied = default_gpu_schedule(sch, tensor_cores=bool(ctx.get(TENSOR_CORES_KEY)),
                                                wgmma=_wgmma(ctx), gemv_rows=int(ctx.get("cuda.gemv_max_rows")),
                                                row_registers=bool(ctx.get("cuda.default_schedule.row_registers")),
                                                decode_rows=int(ctx.get("cuda.decode_gemm_max_rows")))
        except ScheduleError as exc:
            raise PassError(f"pass {self.name}: {exc}") from exc
        logger.info(
            "DefaultGPUSchedule: %s has unscheduled blocks; applied the default GPU schedule: %s",
            func.name, "; ".join(self.applied),
        )  # fmt: skip
        return sch.func
