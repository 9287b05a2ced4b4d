"""Evolutionary search over a design space's sampling decisions.

A candidate is a trace: the space applied to a fresh ``Schedule(func, seed=s)`` samples every
decision. The first ``population`` candidates are sampled; after that each new one is a
mutation of one of the best ``elite`` so far: one sampling instruction's decision is dropped
and resampled on replay (later decisions are kept when they still apply). Candidates whose
replay fails (a precondition, the race checker) are dropped; duplicates (same decisions) are
measured once. The runner gives milliseconds, lower is better.
"""

from __future__ import annotations

import json
import logging
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import attrs

from loopir._progress import progress
from loopir.errors import LoopIRError
from loopir.ir.stmt import PrimFunc
from loopir.schedule import Schedule, Trace

logger = logging.getLogger(__name__)

Runner = Callable[[PrimFunc], float]


@attrs.frozen
class TuneResult:
    """The best candidate and what the search measured.

    Attributes
    ----------
    trace, func, ms
        The best trace, the function it schedules, its measured time.
    measured
        ``[(ms, decisions)]`` in measuring order.
    dropped
        Candidates whose replay or measurement failed.
    """

    trace: Trace
    func: PrimFunc
    ms: float
    measured: list[tuple[float, dict[int, Any]]]
    dropped: int


@attrs.frozen
class CPURunner:
    """Time a function on the CPU executor: median of ``repeat`` calls on random inputs.

    A class (not a closure) so that it can be sent to worker processes.
    """

    repeat: int = 3

    def __call__(self, func: PrimFunc) -> float:
        from loopir.driver import build
        from loopir.testing import random_inputs

        mod = build(func, target="cpu")
        args = random_inputs(func, seed=0)
        times = []
        for _ in range(self.repeat):
            t0 = time.perf_counter()
            mod(*args)
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)


@attrs.frozen
class CUDARunner:
    """Check a function on the GPU against the CPU executor (random inputs), then time it with
    CUDA events (``mod.benchmark``)."""

    sizes: Any = None

    def __call__(self, func: PrimFunc) -> float:
        from loopir.driver import build
        from loopir.testing import check_equivalent, random_inputs

        check_equivalent(func, func, target2="cuda", sizes=self.sizes)
        mod = build(func, target="cuda")
        return float(mod.benchmark(*random_inputs(func, sizes=self.sizes, seed=1)))


def cpu_runner(repeat: int = 3) -> Runner:
    """The default runner of ``target="cpu"`` (a :class:`CPURunner`)."""
    return CPURunner(repeat)


def cuda_runner(sizes: Any = None) -> Runner:
    """The default runner of ``target="cuda"`` (a :class:`CUDARunner`)."""
    return CUDARunner(sizes)


def _key(trace: Trace) -> str:
    return json.dumps(sorted(trace.decisions.items()), default=str)


def tune(
    func: PrimFunc,
    space: Callable[[Schedule], Any],
    *,
    target: str = "cpu",
    trials: int = 32,
    population: int = 8,
    elite: int = 4,
    seed: int = 0,
    runner: Runner | None = None,
    database: Any = None,
    pool: Any = None,
    show_progress: bool = True,
) -> TuneResult:
    """Search ``space`` for the fastest schedule of ``func``.

    Parameters
    ----------
    func
        The unscheduled function.
    space
        ``space(sch)``: a schedule function using sampling instructions.
    target
        ``"cpu"`` or ``"cuda"``: picks the default runner and the database's target.
    trials
        Candidates to measure.
    population, elite
        Random candidates before mutating; how many of the best are mutated.
    seed
        Seeds the search (the same seed, space and runner give the same search).
    runner
        ``runner(scheduled_func) -> ms``; default :func:`cpu_runner` / :func:`cuda_runner`.
    database
        A :class:`~loopir.schedule.database.Database`: every measured candidate is committed.
    pool
        A :class:`~loopir.tune.workers.DevicePool`: candidates are measured in batches of one
        per device, each on its own GPU (the runner must be picklable, as the default ones are).

    Raises
    ------
    LoopIRError
        When no candidate could be measured (the message gives the first failure).
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise LoopIRError(f"tune: trials must be a positive int, got {trials!r}")
    run = runner or (cuda_runner() if target == "cuda" else cpu_runner())
    rng = random.Random(seed)
    measured: dict[str, tuple[float, Trace, PrimFunc]] = {}
    order: list[tuple[float, dict[int, Any]]] = []
    dropped, first_error = 0, None
    step = progress(trials, "tune", show_progress)
    batch_size = len(pool.devices) if pool is not None else 1
    for _ in range(trials * 20):
        if len(measured) >= trials:
            break
        batch: list[Schedule] = []
        keys: set[str] = set()
        for _ in range(batch_size * 4):
            if len(batch) >= min(batch_size, trials - len(measured)):
                break
            sch = _candidate(func, space, measured, rng, population, elite)
            if isinstance(sch, LoopIRError):
                dropped += 1
                first_error = first_error or sch
                continue
            key = _key(sch.trace)
            if key not in measured and key not in keys:
                keys.add(key)
                batch.append(sch)
        if not batch:
            continue
        results = _measure(run, [s.func for s in batch], pool)
        for sch, res in zip(batch, results):
            if isinstance(res, LoopIRError):
                dropped += 1
                first_error = first_error or res
                logger.info("tune: candidate dropped: %s", res)
                continue
            ms = float(res)
            measured[_key(sch.trace)] = (ms, sch.trace, sch.func)
            order.append((ms, sch.trace.decisions))
            if database is not None:
                database.commit(sch.trace, func, target, ms)
            step(f"{ms:.4g} ms (best {min(m[0] for m in measured.values()):.4g})")
    if not measured:
        raise LoopIRError(f"tune: no candidate could be measured; first failure: {first_error}")
    ms, trace, best_func = min(measured.values(), key=lambda m: m[0])
    return TuneResult(trace, best_func, ms, order, dropped)


def _candidate(func: PrimFunc, space: Callable[[Schedule], Any],
               measured: dict[str, tuple[float, Trace, PrimFunc]], rng: random.Random,
               population: int, elite: int) -> Schedule | LoopIRError:  # fmt: skip
    """A new candidate: sampled from the space, or a mutation of one of the elite."""
    sch = Schedule(func, seed=rng.randrange(2**31))
    try:
        if len(measured) < population:
            space(sch)
            return sch
        best = sorted(measured.values(), key=lambda m: m[0])[:elite]
        parent = best[rng.randrange(len(best))][1]
        sampling = list(parent.decisions)
        if sampling:
            parent.with_decision(rng.choice(sampling), None).apply_to(sch)
        else:
            space(sch)
    except LoopIRError as exc:
        return exc
    return sch


def _safe(run: Runner, func: PrimFunc) -> float | LoopIRError:
    try:
        return run(func)
    except LoopIRError as exc:
        return exc


def _measure(run: Runner, funcs: list[PrimFunc], pool: Any) -> list[float | LoopIRError]:
    if pool is None:
        return [_safe(run, f) for f in funcs]
    import functools

    return pool.map(functools.partial(_safe, run), funcs)
