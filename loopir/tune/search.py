"""Evolutionary search over a design space's sampling decisions.

A candidate is a trace: the space applied to a fresh ``Schedule(func, seed=s)`` samples every
decision. The first ``population`` candidates are sampled; after that each new one is a
mutation of one of the best ``elite`` so far: one sampling instruction's decision is dropped
and resampled on replay (later decisions are kept when they still apply). Candidates whose
replay fails (a precondition, the race checker) are dropped; duplicates (same decisions) are
measured once. The runner gives milliseconds, lower is better.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from loopir._progress import progress
from loopir.errors import LoopIRError
from loopir.ir.stmt import PrimFunc
from loopir.schedule import Schedule, Trace
from loopir.schedule.database import Database

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
    sizes: Any = None

    def __call__(self, func: PrimFunc) -> float:
        from loopir.driver import build

        return self.measure_module(func, build(func, target="cpu"))

    def measure_module(self, func: PrimFunc, mod: Any) -> float:
        """Time ``mod``, a build of ``func`` (a farm's runners call this)."""
        from loopir.testing import random_inputs

        return median_ms(mod, random_inputs(func, sizes=self.sizes, seed=0), self.repeat)


@attrs.frozen
class CUDARunner:
    """Check a candidate on the GPU against the CPU executor (random inputs), then time it with
    CUDA events (``mod.benchmark``).

    With ``reference`` (the unscheduled function, as [`tune`][loopir.tune.search.tune] passes it),
    the expected outputs are computed once per process by the CPU executor and every candidate is
    compared with them; without it each candidate is compared with its own CPU execution.
    """

    sizes: Any = None
    reference: PrimFunc | None = None

    def __call__(self, func: PrimFunc) -> float:
        from loopir.driver import build

        return self.measure_module(func, build(func, target="cuda"))

    def measure_module(self, func: PrimFunc, mod: Any) -> float:
        """Check and time ``mod``, a build of ``func`` (a farm's runners call this)."""
        return check_and_time(func, mod, "cuda", self.sizes, self.reference)


def median_ms(mod: Any, args: list[np.ndarray], repeat: int) -> float:
    """Median wall time in milliseconds of ``repeat`` calls ``mod(*args)``."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        mod(*args)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def check_and_time(func: PrimFunc, mod: Any, target: str, sizes: Any, reference: PrimFunc | None,
                   repeat: int = 3) -> float:  # fmt: skip
    """Run built candidate ``mod`` of ``func`` on random inputs, compare its outputs with the CPU
    executor's for ``reference`` (default ``func``; computed once per process) normwise, as a
    tiled sum adds in another order, then time it: CUDA events (``mod.benchmark``) for
    ``"cuda"``, the median of ``repeat`` calls on the CPU.

    Raises
    ------
    EquivalenceError
        When the outputs differ.
    """
    from loopir.testing import assert_outputs_equal, random_inputs

    inputs, expected = _expected(reference or func, sizes)
    got = [np.array(x, copy=True) for x in inputs]
    mod(*got)
    assert_outputs_equal(func, expected, got, norm=True)
    if target == "cuda":
        return float(mod.benchmark(*random_inputs(func, sizes=sizes, seed=1)))
    return median_ms(mod, got, repeat)


_EXPECTED: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}


def _expected(func: PrimFunc, sizes: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Random inputs of ``func`` and its outputs on the CPU executor (cached per process)."""
    from loopir.driver import build
    from loopir.schedule.database import workload_key
    from loopir.testing import random_inputs

    key = workload_key(func) + json.dumps(sorted((sizes or {}).items()))
    if key not in _EXPECTED:
        if len(_EXPECTED) >= 4:
            _EXPECTED.pop(next(iter(_EXPECTED)))
        inputs = random_inputs(func, sizes=sizes, seed=0)
        out = [np.array(x, copy=True) for x in inputs]
        build(func, target="cpu")(*out)
        _EXPECTED[key] = (inputs, out)
    return _EXPECTED[key]


def cpu_runner(repeat: int = 3, sizes: Any = None) -> Runner:
    """The default runner of ``target="cpu"`` (a [`CPURunner`][loopir.tune.search.CPURunner];
    ``sizes``: the values of the function's symbolic sizes to measure at)."""
    return CPURunner(repeat, sizes)


def cuda_runner(sizes: Any = None, reference: PrimFunc | None = None) -> Runner:
    """The default runner of ``target="cuda"`` (a [`CUDARunner`][loopir.tune.search.CUDARunner])."""
    return CUDARunner(sizes, reference)


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
    sizes: Any = None,
    bucket: str | None = None,
    farm: Any = None,
    patience: int | None = None,
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
        ``runner(scheduled_func) -> ms``; default [`cpu_runner`][loopir.tune.search.cpu_runner] /
        [`cuda_runner`][loopir.tune.search.cuda_runner].
    database
        A [`Database`][loopir.schedule.database.Database] or the path of one (as ``build``
        takes): every measured candidate is committed.
    pool
        A [`DevicePool`][loopir.tune.workers.DevicePool]: candidates are measured in batches of one
        per device, each on its own GPU (the runner must be picklable, as the default ones are).
    farm
        A [`Farm`][loopir.tune.farm.Farm]: candidates are compiled by its builders and measured
        by its runners (local processes, or a Dask cluster), ``farm.width`` at a time; the
        farm's runners check and time them against the CPU executor, or, with a ``runner``, by
        its ``measure_module(func, mod) -> ms`` method (the loaded build; a runner without that
        method is refused with a farm).
    patience
        Stop early after this many measured candidates in a row without a new best (None:
        measure ``trials``).
    sizes
        Values of ``func``'s symbolic sizes the default runner measures at.
    bucket
        The shape bucket label the database records carry (see
        [`tune_buckets`][loopir.tune.search.tune_buckets]).

    Raises
    ------
    LoopIRError
        When no candidate could be measured (the message gives the first failure), for an
        unknown target or a ``database`` that is neither a Database nor a path.
    LaunchError
        At once, before any candidate, for ``target="cuda"`` with the default runner on a
        machine without a CUDA device.
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise LoopIRError(f"tune: trials must be a positive int, got {trials!r}")
    if patience is not None and (isinstance(patience, bool) or not isinstance(patience, int) or patience < 1):
        raise LoopIRError(f"tune: patience must be a positive int or None, got {patience!r}")
    if target not in ("cpu", "cuda"):
        raise LoopIRError(f"tune: unknown target {target!r}; known targets: cpu, cuda")
    if farm is not None and runner is not None and not callable(getattr(runner, "measure_module", None)):
        raise LoopIRError(f"tune: with farm=, runner must have a measure_module(func, mod) method (the farm builds "
                          f"the candidates, its runners check and time the loaded modules), got {runner!r}")
    if database is not None:
        database = Database.of(database, "tune")
    if target == "cuda" and runner is None and farm is None:
        # the default runner measures here: without a GPU every candidate would fail, one by one
        from loopir.codegen_cuda.device import require_device

        require_device("tune(target='cuda')")
    run = runner or (cuda_runner(sizes, reference=func) if target == "cuda" else cpu_runner(sizes=sizes))
    rng = random.Random(seed)
    measured: dict[str, tuple[float, Trace, PrimFunc]] = {}
    order: list[tuple[float, dict[int, Any]]] = []
    dropped, first_error = 0, None
    step = progress(trials, "tune", show_progress)
    batch_size = farm.width if farm is not None else len(pool.devices) if pool is not None else 1
    if farm is not None:
        from loopir.tune.farm import Measure

        job = Measure(sizes, reference=func, runner=runner)
        measure: Callable[[list[PrimFunc]], list[float | LoopIRError]] = lambda fs: farm.measure(fs, job)  # noqa: E731
    else:
        measure = functools.partial(_measure, run, pool=pool)
    since_best = 0
    for _ in range(trials * 20):
        if len(measured) >= trials or (patience is not None and since_best >= patience):
            break
        if dropped >= 4 * trials:
            logger.warning("tune: %d candidates dropped (%d measured); stopping. First failure: %s",
                           dropped, len(measured), first_error)  # fmt: skip
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
        results = measure([s.func for s in batch])
        for sch, res in zip(batch, results):
            if isinstance(res, LoopIRError):
                dropped += 1
                if first_error is None:
                    logger.warning("tune: a candidate failed (later failures are logged at INFO): %s", res)
                first_error = first_error or res
                logger.info("tune: candidate dropped: %s", res)
                continue
            ms = float(res)
            best_before = min((m[0] for m in measured.values()), default=math.inf)
            since_best = 0 if ms < best_before else since_best + 1
            measured[_key(sch.trace)] = (ms, sch.trace, sch.func)
            order.append((ms, sch.trace.decisions))
            if database is not None:
                database.commit(sch.trace, func, target, ms, bucket=bucket)
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


def _safe_in(ctx: Any, run: Runner, func: PrimFunc) -> float | LoopIRError:
    with ctx.enter():  # the caller's PassContext, in the worker process
        return _safe(run, func)


def _measure(run: Runner, funcs: list[PrimFunc], pool: Any) -> list[float | LoopIRError]:
    if pool is None:
        return [_safe(run, f) for f in funcs]
    from loopir.tune.farm import ContextSpec

    results: list[float | LoopIRError] = pool.map(functools.partial(_safe_in, ContextSpec.current(), run), funcs)
    return results


def tune_buckets(
    func: PrimFunc,
    space: Callable[[Schedule], Any],
    buckets: Sequence[Mapping[str, tuple[int, int]]],
    *,
    target: str = "cpu",
    database: Any = None,
    runner: Callable[[Mapping[str, int]], Runner] | None = None,
    **options: Any,
) -> dict[str, TuneResult]:
    """Tune one schedule per shape bucket of a function with symbolic sizes (DietCode).

    Each bucket (``{"n": (lo, hi)}``, both ends included) is tuned at its largest sizes
    (``hi``): with local padding the tuned tile serves every size of the bucket. Records go to
    ``database`` labelled with the bucket, so that ``loopir.build(func, target,
    database=database)`` builds one module per bucket and dispatches each call on its sizes.

    Parameters
    ----------
    func
        A function with symbolic sizes.
    space, target, database
        As for [`tune`][loopir.tune.search.tune].
    buckets
        The shape ranges.
    runner
        ``runner(sizes) -> Runner`` for a bucket's representative sizes; default: the target's
        runner at those sizes.
    **options
        Passed to [`tune`][loopir.tune.search.tune] (``trials``, ``seed``, ...).

    Returns
    -------
    dict
        The bucket label -> its [`TuneResult`][loopir.tune.search.TuneResult].
    """
    from loopir.schedule.database import bucket_label

    out: dict[str, TuneResult] = {}
    for ranges in buckets:
        label = bucket_label(ranges)
        sizes = {n: hi for n, (_, hi) in ranges.items()}
        run = runner(sizes) if runner is not None else None
        logger.info("tune_buckets: bucket %s, measured at %s", label, sizes)
        out[label] = tune(func, space, target=target, database=database, runner=run, sizes=sizes,
                          bucket=label, **options)  # fmt: skip
    return out
