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


def graph_per_call(torch: Any, op: Any, calls: int, repeat: int) -> float:
    """Milliseconds per call of ``op`` replayed from a CUDA graph of ``calls`` calls: run three
    times first on a side stream (cudnn.benchmark's choice and its workspace are made before the
    capture), then captured and timed as :func:`events_per_call` times ``graph.replay``."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            op()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            op()
    return float(events_per_call(torch, graph.replay, 1, repeat, warmup=2)) / calls
