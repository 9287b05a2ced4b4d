"""The CUDA target's build options, registered here so that a PassContext can name them
before the backend (``loopir.codegen_cuda``) is imported; the backend reads them.

``cuda.race_check`` lives with the race checker (``loopir.passes.race_check``). The backend's
own passes are declared by name, so that ``disabled_passes`` accepts them too.
"""

from __future__ import annotations

from loopir.passes.base import declare_pass
from loopir.passes.context import register_config

register_config(
    "cuda.gemm_backend",
    str,
    "auto",
    "GEMM blocks: 'auto' (CUTLASS when supported), 'cutlass' (require the package), "
    "'generated' (never offload)",
)
register_config(
    "cuda.gemm_allow_tf32", bool, False, "offload fp32 GEMMs to TF32 tensor-core CUTLASS kernels"
)
register_config(
    "cuda.cutlass_arch", int, 90, "CUTLASS kernel family: 90 (3.x, sm_90a) or 80 (2.x)"
)
register_config(
    "cuda.cutlass_tune_candidates",
    int,
    0,
    "at build time, tune GEMMs without a cached choice over this many CUTLASS candidates "
    "(0: cached choice or the default heuristic)",
)
register_config(
    "cuda.sync_after_launch",
    bool,
    False,
    "synchronize after every kernel launch of a built CUDA module, so that a fault is raised "
    "at the kernel that caused it (debugging; such calls cannot be captured in CUDA graphs)",
)

register_config(
    "cuda.gemv_max_rows",
    int,
    16,
    "GEMMs with at most this many rows (M), K contiguous in both operands and no batch or "
    "epilogue are decode GEMVs: GemmOffload leaves them to the default GPU schedule's GEMV rule "
    "(loopir.schedule.gemv); 0 keeps them GEMMs",
)

# Defined by the CUDA backend (loopir.codegen_cuda.cutlass.offload, .default_schedule); optional.
declare_pass("GemmOffload", required=False)
declare_pass("DefaultGPUSchedule", required=False)
