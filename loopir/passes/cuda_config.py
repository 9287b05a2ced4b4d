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
    "cuda.conv_backend",
    str,
    "auto",
    "conv2d blocks: 'auto' (CUTLASS implicit GEMM when supported), 'cutlass' (require the "
    "package), 'generated' (never offload)",
)
register_config(
    "cuda.conv_pointwise_as_gemm",
    bool,
    False,
    "offload a 1x1, stride-1, unpadded conv2d as the GEMM it is on the same NHWC memory (CUTLASS's "
    "persistent GEMM kernels; its sm90 conv kernel is not persistent). Off until every ResNet-50 1x1 "
    "shape is measured: on the H200, c2 1x1 64->256 ran at 1.05x cuDNN as a ping-pong GEMM against "
    "0.58x as a conv (docs/benchmarks.md, session 13)",
)
register_config(
    "cuda.gemm_allow_tf32",
    bool,
    False,
    "offload fp32 GEMMs and convolutions to TF32 tensor-core CUTLASS kernels",
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
    "cuda.default_schedule.wgmma",
    str,
    "auto",
    "DefaultGPUSchedule: put GEMMs with B [N, K] on wgmma (sm_90a) instead of mma.sync: 'auto' (when "
    "the visible GPU is a Hopper, compute capability 9.0), 'on' or 'off'",
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
    2,
    "GEMMs with at most this many rows (M, up to 16), K contiguous in both operands and no batch "
    "or epilogue are decode GEMVs: GemmOffload leaves them to the default GPU schedule's GEMV rule "
    "(loopir.schedule.gemv); 0 keeps them GEMMs. Default 2: on the H200 the rule reads the weight "
    "at 0.84-1.0 of copy bandwidth at M = 1 and 2 (1.0-3.8x torch); from M = 3 the tensor-core "
    "rule (cuda.decode_gemm_max_rows) is ahead (docs/benchmarks.md)",
)
register_config(
    "cuda.decode_gemm_max_rows",
    int,
    16,
    "16-bit GEMMs with more than cuda.gemv_max_rows and at most this many rows (up to 16), B [N, K], "
    "K contiguous, no batch or epilogue (decode with a few tokens): GemmOffload leaves them to the "
    "default GPU schedule's tensor-core rule, one 16-row tile (loopir.schedule.tensor_core_gemm."
    "skinny_params) when its tensor cores are on; 0 keeps them GEMMs. On the H200 these read the "
    "weight at 0.83-0.95 of copy bandwidth at M = 4-16, 1.0-2.3x torch (docs/benchmarks.md, session 14)",
)
register_config(
    "cuda.default_schedule.row_registers",
    bool,
    False,
    "DefaultGPUSchedule: keep each thread's part of a 16-bit row in registers (read from HBM once; "
    "stage_row_registers); off: on the H200 it measured the same as the plain rule",
)

#: CUDA codegen: global addresses in short unrolled loops as a pointer hoisted before the loop plus
#: a constant (see ``loopir.codegen_cuda.base_pointers``)
HOIST_GLOBAL_BASE_KEY = "cuda.hoist_global_base"
register_config(
    HOIST_GLOBAL_BASE_KEY,
    bool,
    True,
    "CUDA codegen: in a loop nest of constant extents that nvcc unrolls, print a vector or "
    "cp.async access of a global buffer as a pointer to its loop-invariant part, declared before "
    "the loop, plus the part that reads the loop variables (a constant once unrolled: ptxas "
    "folds it into the access's immediate offset instead of a 64-bit address per access)",
)

#: CUDA codegen: threadIdx.y / .z read once through ``__shfl_sync`` where whole warps share them
#: (see ``loopir.codegen_cuda.warp_uniform``)
WARP_UNIFORM_KEY = "cuda.warp_uniform_thread_index"
register_config(
    WARP_UNIFORM_KEY,
    bool,
    True,
    "CUDA codegen: in a kernel with wgmma or TMA whose threadIdx.x extent is a multiple of 32 (x * y for threadIdx.z), "
    "read threadIdx.y (.z) once at the kernel's entry as lane 0's value (__shfl_sync): nvcc then "
    "knows it is the same in every lane of a warp, keeps what derives from it (warp roles, wgmma "
    "descriptors, loop counters under a role's branch) in uniform registers and branches on it "
    "without divergence",
)

# Defined by the CUDA backend (loopir.codegen_cuda.cutlass.offload, .default_schedule); optional.
declare_pass("GemmOffload", required=False)
declare_pass("DefaultGPUSchedule", required=False)
