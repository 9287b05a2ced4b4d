"""Autotuning CUTLASS configurations: compile candidates in parallel, time them, cache the pick.

[`tune`][loopir.codegen_cuda.cutlass.tune.tune] takes ``max_candidates`` candidates spread over
kernel designs (``enumerate.tuning_candidates``: the heuristic's default first, never a
configuration whose accumulators spill), compiles each in its own translation unit (one nvcc process
per candidate, ``workers`` at a time, cached by content), times each on the real shape with CUDA
events and keeps the fastest. The choice is stored in ``<cache>/tuning.json`` under a key made of
the problem signature (dtypes, layouts, epilogue, shape), the arch and the CUTLASS version, and
[`lookup`][loopir.codegen_cuda.cutlass.tune.lookup] returns it to later builds.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from loopir import _cache_dir
from loopir._progress import progress
from loopir.codegen_cuda.cutlass.emit import KernelSpec
from loopir.codegen_cuda.cutlass.enumerate import (
    GemmCandidate,
    enumerate_candidates,
    tuning_candidates,
)
from loopir.codegen_cuda.cutlass.library import CutlassLibrary, cache_dir
from loopir.codegen_cuda.cutlass.problem import Problem, cutlass_version
from loopir.errors import CodegenError, LaunchError, LoopIRError

__all__ = ["TuneResult", "compile_candidates", "lookup", "record_choice", "tune", "tuning_key"]

logger = logging.getLogger(__name__)
_LOCK = threading.Lock()


@attrs.frozen
class TuneResult:
    """Outcome of [`tune`][loopir.codegen_cuda.cutlass.tune.tune].

    Attributes
    ----------
    best
        The fastest candidate.
    best_ms
        Its median time.
    timings
        ``[(candidate short name, ms or None when it failed)]`` in tried order.
    compile_wall_s
        Wall time of the parallel compile.
    compile_unit_s
        Per-unit compile times (their sum is what a serial compile would take, under the
        same machine load).
    from_cache
        True when the choice came from the tuning cache (nothing compiled or timed).
    """

    best: GemmCandidate
    best_ms: float | None
    timings: list[tuple[str, float | None]]
    compile_wall_s: float
    compile_unit_s: list[float]
    from_cache: bool


def tuning_key(problem: Problem, arch: int) -> str:
    """Cache key: problem signature hash + arch + CUTLASS version."""
    return f"{problem.key()}-sm{arch}-cutlass{cutlass_version()}"


def _db_path(cache: Any) -> Path:
    return cache_dir(cache) / "tuning.json"


def _load_db(cache: Any) -> dict[str, Any]:
    path = _db_path(cache)
    # The choice picks the library that is loaded: refuse a file someone else could write.
    if not _cache_dir.check_entry(path):
        return {}
    try:
        db: dict[str, Any] = json.loads(path.read_text())
        return db
    except (OSError, ValueError):
        logger.warning("cutlass tune: ignoring unreadable tuning cache %s", path)
        return {}


def _store(cache: Any, key: str, record: dict[str, Any]) -> None:
    with _LOCK:
        db = _load_db(cache)
        db[key] = record
        path = _db_path(cache)
        fd, tmp = tempfile.mkstemp(prefix=".tuning.", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(db, f, indent=1, sort_keys=True)
        os.replace(tmp, path)


def record_choice(
    problem: Problem,
    arch: int,
    candidate: GemmCandidate,
    ms: float,
    timings: list[tuple[str, float | None]],
    cache: Any = None,
) -> None:
    """Store ``candidate`` as the tuned choice for ``problem`` (what
    [`tune`][loopir.codegen_cuda.cutlass.tune.tune] does after timing; public for callers that time
    candidates themselves, e.g. benchmarks/gemm.py)."""
    _store(
        cache,
        tuning_key(problem, arch),
        {"candidate": candidate.config(), "ms": ms, "problem": problem.signature(), "timings": timings},
    )


def lookup(problem: Problem, arch: int = 90, cache: Any = None) -> GemmCandidate | None:
    """The tuned candidate for ``problem`` on ``arch`` (None when it was never tuned)."""
    rec = _load_db(cache).get(tuning_key(problem, arch))
    if rec is None:
        return None
    cfg = dict(rec["candidate"])
    for key in ("tile", "cluster", "warp_count", "instruction"):
        cfg[key] = tuple(cfg[key])
    cand = GemmCandidate(**cfg)
    # The generator's set may have changed (other package build): only trust listed kernels.
    if cand not in enumerate_candidates(problem, arch):
        logger.info("cutlass tune: cached choice %s is no longer a candidate", cand.short)
        return None
    return cand


def _progress(total: int, enabled: bool) -> Callable[[str], None]:
    return progress(total, "cutlass compile", enabled)


def compile_candidates(
    specs: list[KernelSpec],
    *,
    workers: int | None = None,
    cache: Any = None,
    progress: bool = True,
    timeout_s: float | None = None,
) -> tuple[list[CutlassLibrary | None], float, list[float]]:
    """Compile each spec in its own translation unit, ``workers`` nvcc processes at a time.

    Returns the libraries (None where compilation failed, with the error logged), the wall
    time and the per-unit build times.
    """
    n = len(specs)
    workers = max(1, min(workers or os.cpu_count() or 1, n))
    step = _progress(n, progress)
    t0 = time.perf_counter()
    out: list[CutlassLibrary | None] = [None] * n
    unit: list[float] = [0.0] * n

    def build(i: int) -> None:
        t = time.perf_counter()
        try:
            out[i] = CutlassLibrary([specs[i]], cache=cache, timeout_s=timeout_s)
        except CodegenError as exc:
            logger.warning("cutlass tune: candidate %s failed to compile: %s",
                           specs[i].candidate.short, str(exc)[:2000])  # fmt: skip
        unit[i] = time.perf_counter() - t
        step(specs[i].candidate.short)

    with cf.ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(build, range(n)))
    return out, time.perf_counter() - t0, unit


def _random_operands(problem: Problem, seed: int = 0) -> dict[str, Any]:
    """Random device operands for timing (pycuda allocations, kept alive by the dict)."""
    from loopir.codegen_cuda.cutlass.runtime import numpy_to_bits, operand_shapes

    rng = np.random.default_rng(seed)
    shapes = operand_shapes(problem)
    import pycuda.driver as drv

    out: dict[str, Any] = {}
    for name, shape in shapes.items():
        dtype = problem.dtype_ab if name in ("A", "B") else problem.dtype_d
        host = numpy_to_bits(rng.uniform(-1, 1, size=shape).astype(np.float32), dtype)
        mem = drv.mem_alloc(host.nbytes)
        drv.memcpy_htod(mem, host)
        out[name] = mem
    return out


def tune(
    problem: Problem,
    *,
    arch: int = 90,
    max_candidates: int = 8,
    workers: int | None = None,
    cache: Any = None,
    warmup: int = 3,
    repeat: int = 10,
    progress: bool = True,
    force: bool = False,
    timeout_s: float | None = None,
) -> TuneResult:
    """Pick the fastest of ``max_candidates`` tuning candidates for ``problem`` on the GPU.

    Parameters
    ----------
    problem, arch
        What to tune.
    max_candidates
        Bound on the candidates compiled and timed (sm90 units take about a minute each).
    workers
        Parallel nvcc processes (default: the CPU count).
    cache
        Cache folder override (libraries and ``tuning.json``).
    warmup, repeat
        Timing loop (median of ``repeat`` CUDA-event-timed runs).
    progress
        Show a progress bar (tqdm, when installed) while compiling.
    force
        Re-tune even when the cache holds a choice.

    Raises
    ------
    LaunchError
        Without a GPU, or when no candidate compiled and ran.
    """
    from loopir.codegen_cuda.cutlass.library import ensure_context

    if max_candidates < 1:
        raise CodegenError(f"cutlass tune: max_candidates must be >= 1, got {max_candidates}")
    key = tuning_key(problem, arch)
    if not force:
        cached = lookup(problem, arch, cache)
        if cached is not None:
            rec = _load_db(cache)[key]
            return TuneResult(cached, rec.get("ms"), [(cached.short, rec.get("ms"))], 0.0, [], True)
    ensure_context()
    cands = tuning_candidates(problem, enumerate_candidates(problem, arch), max_candidates)
    specs = [KernelSpec.for_problem(problem, c) for c in cands]
    libs, wall, unit = compile_candidates(
        specs, workers=workers, cache=cache, progress=progress, timeout_s=timeout_s
    )
    from loopir.codegen_cuda.cutlass.runtime import entry_dims, time_ms

    ops = _random_operands(problem)
    epi = problem.epilogue
    timings: list[tuple[str, float | None]] = []
    best: tuple[float, GemmCandidate] | None = None
    for spec, lib in zip(specs, libs):
        if lib is None:
            timings.append((spec.candidate.short, None))
            continue

        try:
            # pre-bound call: one ctypes call per launch, so small shapes time the kernel
            run = lib.bind(
                spec.entry, int(ops["A"]), int(ops["B"]), int(ops["D"]), *entry_dims(problem),
                source=int(ops["source"]) if epi.has_source else 0,
                bias=int(ops["bias"]) if epi.has_bias else 0,
                alpha=epi.alpha, beta=epi.beta,
            )  # fmt: skip
            ms = time_ms(run, warmup=warmup, repeat=repeat)
        except LoopIRError as exc:
            logger.warning("cutlass tune: candidate %s failed to run: %s", spec.candidate.short, exc)
            timings.append((spec.candidate.short, None))
            continue
        timings.append((spec.candidate.short, ms))
        if best is None or ms < best[0]:
            best = (ms, spec.candidate)
    if best is None:
        raise LaunchError(f"cutlass tune: no candidate compiled and ran for {problem.signature()}")
    record_choice(problem, arch, best[1], best[0], timings, cache)
    logger.info("cutlass tune: %s -> %s (%.4f ms)", problem.signature(), best[1].short, best[0])
    return TuneResult(best[1], best[0], timings, wall, unit, False)
