"""Ready-made schedules of common workloads (used by docs, tests and benchmarks)."""

from loopir.examples.dense import dense, dense_func
from loopir.examples.transpose import transpose, transpose_func

__all__ = ["dense", "dense_func", "transpose", "transpose_func"]
