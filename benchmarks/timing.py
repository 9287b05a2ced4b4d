"""Timing helpers shared by the benchmarks (CUDA events through torch; no loopir imports)."""

from __future__ import annotations

import statistics
from typing import Any


def events_per_call(torch: Any, fn: Any, calls: int, repeat: int, warmup: int = 0) -> float:
    """Median milliseconds per call of ``fn``: ``calls`` calls between two CUDA events, over
    ``repeat`` samples, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    if warmup:
        torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeat):
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / calls)
    return statistics.median(times)


def rel_err(got: Any, ref: Any) -> float:
    """``||got - ref|| / ||ref||`` in float64 (torch tensors)."""
    return float((got.double() - ref).norm() / ref.norm())
