"""Ready-made schedules of common workloads (used by docs, tests and benchmarks)."""

from loopir.examples.attention import attention, attention_func
from loopir.examples.decode import decode_attention, decode_attention_func
from loopir.examples.dense import dense, dense_func, pipelined_gemm
from loopir.examples.reductions import (
    layernorm,
    layernorm_func,
    rmsnorm,
    rmsnorm_func,
    row_sum,
    row_sum_func,
    softmax,
    softmax_func,
)
from loopir.examples.tensor_core import hopper_gemm, tc_gemm, tc_gemm_func
from loopir.examples.tma import tma_copy
from loopir.examples.transpose import transpose, transpose_func

__all__ = [
    "attention", "attention_func", "decode_attention", "decode_attention_func", "dense", "dense_func", "pipelined_gemm", "layernorm", "layernorm_func", "rmsnorm", "rmsnorm_func", "row_sum", "row_sum_func", "softmax",
    "softmax_func", "hopper_gemm", "tc_gemm", "tc_gemm_func", "tma_copy", "transpose", "transpose_func",
]  # fmt: skip
