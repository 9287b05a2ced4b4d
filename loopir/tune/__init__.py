"""Tuning with traces: search a design space of schedules, keep the best trace.

[`tune`][loopir.tune.search.tune] runs an evolutionary search over the sampling decisions of a
design space (a plain Python function of ``sch`` that calls ``sch.sample_perfect_tile`` /
``sample_categorical`` / ``sample_compute_location``), measures candidates with a runner, and stores
them in a [`Database`][loopir.schedule.database.Database] when given one.
"""

from loopir.tune.search import TuneResult, cpu_runner, cuda_runner, tune, tune_buckets
from loopir.tune.workers import DevicePool, visible_devices

__all__ = [
    "DevicePool", "TuneResult", "cpu_runner", "cuda_runner", "tune", "tune_buckets", "visible_devices",
]  # fmt: skip
