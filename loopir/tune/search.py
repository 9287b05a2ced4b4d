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


def cpu_runner(repeat: int = 3) -> Runner:
    """Time the function on the CPU executor (median of ``repeat`` calls on random inputs)."""
    from loopir.driver import build
    from loopir.testing import random_inputs

    def run(func: PrimFunc) -> float:
        mod = build(func, target="cpu")
        args = random_inputs(func, seed=0)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            mod(*args)
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    return run


def cuda_runner(sizes: Any = None) -> Runner:
    """Check the function on the GPU against the CPU executor (random inputs), then time it
    with CUDA events (``mod.benchmark``)."""
    from loopir.driver import build
    from loopir.testing import check_equivalent, random_inputs

    def run(func: PrimFunc) -> float:
        check_equivalent(func, func, target2="cuda", sizes=sizes)
        mod = build(func, target="cuda")
        return float(mod.benchmark(*random_inputs(func, sizes=sizes, seed=1)))

    return run


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
    for _ in range(trials * 20):
        if len(measured) >= trials:
            break
        sch = Schedule(func, seed=rng.randrange(2**31))
        try:
            if len(measured) < population:
                space(sch)
            else:
                best = sorted(measured.values(), key=lambda m: m[0])[:elite]
                parent = best[rng.randrange(len(best))][1]
                sampling = list(parent.decisions)
                if sampling:
                    parent.with_decision(rng.choice(sampling), None).apply_to(sch)
                else:
                    space(sch)
        except LoopIRError as exc:
            dropped += 1
            first_error = first_error or exc
            continue
        key = _key(sch.trace)
        if key in measured:
            continue
        try:
            ms = float(run(sch.func))
        except LoopIRError as exc:
            dropped += 1
            first_error = first_error or exc
            logger.info("tune: candidate dropped: %s", exc)
            continue
        measured[key] = (ms, sch.trace, sch.func)
        order.append((ms, sch.trace.decisions))
        if database is not None:
            database.commit(sch.trace, func, target, ms)
        step(f"{ms:.4g} ms (best {min(m[0] for m in measured.values()):.4g})")
    if not measured:
        raise LoopIRError(f"tune: no candidate could be measured; first failure: {first_error}")
    ms, trace, best_func = min(measured.values(), key=lambda m: m[0])
    return TuneResult(trace, best_func, ms, order, dropped)
