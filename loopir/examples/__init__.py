"""Ready-made schedules of common workloads (used by docs, tests and benchmarks)."""

from loopir.examples.dense import dense, dense_func

__all__ = ["dense", "dense_func"]
