"""Building and measuring candidates on other processes or machines (``concurrent.futures``).

A [`Farm`][loopir.tune.farm.Farm] has two executors: **builders** compile candidates (CPU work:
lowering, code generation, the C compiler or nvcc) and return an
[`Artifact`][loopir.tune.farm.Artifact] (the compiled library's bytes and what loading it needs);
**runners** load an artifact, check its outputs against the CPU executor's and time it. Any
``concurrent.futures.Executor`` serves: a local ``ProcessPoolExecutor``
([`local_farm`][loopir.tune.farm.local_farm]), a [`DevicePool`][loopir.tune.workers.DevicePool] for
one runner per GPU, or a Dask ``distributed`` cluster ([`dask_farm`][loopir.tune.farm.dask_farm],
the optional extra ``loopir[distributed]``), where workers declaring the resource ``BUILD`` compile
and those declaring ``MEASURE`` (GPU workers) measure. A runner needs no compiler: it writes the
artifact's library into a private directory, checks its SHA-256 and loads it.

Each build is handed to a runner as soon as it is done, so compiles overlap measurements.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import attrs

from loopir.errors import CodegenError, LoopIRError
from loopir.ir.stmt import PrimFunc

__all__ = ["Artifact", "ContextSpec", "Farm", "build_artifact", "dask_farm", "load_artifact", "local_farm"]

logger = logging.getLogger(__name__)


@attrs.frozen(eq=False)
class Artifact:
    """A compiled candidate, ready to load where no compiler runs.

    Attributes
    ----------
    target
        ``"cpu"`` or ``"cuda"``.
    func
        The candidate.
    parts
        What the module needs besides the library (the C program, or the CUDA function's code
        and its compiled binary's metadata).
    library, sha256
        The shared library's bytes and their hash.
    built_on
        ``hostname:pid`` of the builder (for logs and tests).
    """

    target: str
    func: PrimFunc
    parts: Any
    library: bytes
    sha256: str
    built_on: str


def _where() -> str:
    return f"{os.uname().nodename}:{os.getpid()}"


def build_artifact(func: PrimFunc, target: str) -> Artifact:
    """Compile ``func`` for ``target`` (a builder's job).

    Raises
    ------
    LoopIRError
        When the candidate cannot be lowered or compiled (the tuner drops it).
    """
    if target == "cpu":
        from loopir.runtime.cpu import build_cpu

        mod = build_cpu(func)
        data = Path(mod.library_path).read_bytes()
        return Artifact("cpu", func, mod.program, data, hashlib.sha256(data).hexdigest(), _where())
    if target == "cuda":
        from loopir.codegen_cuda import prepare_function
        from loopir.codegen_cuda.units import build_library

        code = prepare_function(func)
        built = build_library([code])
        data = built.binary.data
        return Artifact("cuda", func, (code, attrs.evolve(built.binary, data=b""), built.source), data,
                        hashlib.sha256(data).hexdigest(), _where())  # fmt: skip
    raise CodegenError(f"build_artifact: unknown target {target!r}; known: cpu, cuda")


_LOADED: dict[str, Path] = {}


def _install(art: Artifact) -> Path:
    """The artifact's library in this process's private directory, its hash checked."""
    if hashlib.sha256(art.library).hexdigest() != art.sha256:
        raise CodegenError(f"load_artifact: the library of {art.func.name!r} from {art.built_on} does not "
                           "match its SHA-256; refusing to load it")  # fmt: skip
    if art.sha256 not in _LOADED:
        from loopir import _cache_dir

        root = _cache_dir.ensure_private_dir(tempfile.mkdtemp(prefix="loopir-artifacts-"), private=True)
        path = Path(root) / f"{art.sha256}.so"
        path.write_bytes(art.library)
        _LOADED[art.sha256] = path
    return _LOADED[art.sha256]


def load_artifact(art: Artifact) -> Any:
    """The callable module of an artifact (a runner's job; no compiler needed)."""
    path = _install(art)
    if art.target == "cpu":
        from loopir.runtime.cpu import CPUModule

        return CPUModule(art.func, art.parts, os.fspath(path), check_bounds=True, compile_seconds=0.0,
                         codegen_seconds=0.0, cache_hit=True)  # fmt: skip
    from loopir.codegen_cuda.runtime import CUDAModule

    code, binary, source = art.parts
    binary = attrs.evolve(binary, data=art.library, path=path)
    return CUDAModule(code.func, code.emitted, code.host, binary, source, cutlass=code.gemms)


@attrs.frozen
class Measure:
    """A runner's job: load the artifact, compare its outputs with the CPU executor's on
    random inputs (``reference``: the unscheduled function, whose outputs are computed once per
    process), then time it (CPU: median of ``repeat`` calls; CUDA: CUDA events).

    ``runner``: a runner with a ``measure_module(func, mod) -> ms`` method (picklable: it is
    sent to the farm's runner processes) that checks and times the loaded module instead, say
    against a reference computed on the GPU where the CPU executor would take minutes (a
    4096^3 GEMM). None: the CPU executor's check above.
    """

    sizes: Any = None
    reference: PrimFunc | None = None
    repeat: int = 3
    runner: Any = None

    def __call__(self, art: Artifact | LoopIRError) -> tuple[float, str] | LoopIRError:
        if isinstance(art, LoopIRError):
            return art
        from loopir.tune.search import check_and_time

        try:
            mod = load_artifact(art)
            if self.runner is not None:
                ms = float(self.runner.measure_module(art.func, mod))
            else:
                ms = check_and_time(art.func, mod, art.target, self.sizes, self.reference, self.repeat)
            return ms, _where()
        except LoopIRError as exc:
            return exc


@attrs.frozen
class ContextSpec:
    """A PassContext's options, to rebuild it in another process (instruments stay behind)."""

    config: tuple[tuple[str, Any], ...]
    opt_level: int
    disabled_passes: tuple[str, ...]

    @staticmethod
    def current() -> ContextSpec:
        from loopir.passes.context import PassContext

        ctx = PassContext.current()
        return ContextSpec(tuple(sorted(ctx.config.items())), ctx.opt_level, tuple(sorted(ctx.disabled_passes)))

    def enter(self) -> Any:
        from loopir.passes.context import PassContext

        return PassContext(config=dict(self.config), opt_level=self.opt_level, disabled_passes=self.disabled_passes)


def _build(target: str, ctx: ContextSpec, func: PrimFunc) -> Artifact | LoopIRError:
    try:
        with ctx.enter():
            return build_artifact(func, target)
    except LoopIRError as exc:
        return exc


class Farm:
    """Builders and runners (see the module docstring).

    Parameters
    ----------
    builders
        Executor for compile jobs.
    runners
        Executor (or [`DevicePool`][loopir.tune.workers.DevicePool]) for measurements.
    target
        ``"cpu"`` or ``"cuda"``.
    width
        Candidates handed out per round (default: 8).
    """

    def __init__(self, builders: Executor, runners: Any, target: str, width: int = 8) -> None:
        if target not in ("cpu", "cuda"):
            raise LoopIRError(f"Farm: target must be 'cpu' or 'cuda', got {target!r}")
        self.builders, self.runners, self.target, self.width = builders, runners, target, width
        self.log: list[tuple[str, str]] = []  # (built_on, measured_on) per measured candidate

    def measure(self, funcs: Sequence[PrimFunc], job: Measure) -> list[float | LoopIRError]:
        """Build every function (under the caller's PassContext), measure each build as soon as
        it is done; results in order."""
        import functools

        build = functools.partial(_build, self.target, ContextSpec.current())
        builds = {self.builders.submit(build, f): n for n, f in enumerate(funcs)}
        runs: dict[int, Future[Any]] = {}
        built: dict[int, Artifact | LoopIRError] = {}
        for fut in as_completed(builds):
            n = builds[fut]
            built[n] = fut.result()
            runs[n] = self.runners.submit(job, built[n])
        out: list[float | LoopIRError] = []
        for n in range(len(funcs)):
            res = runs[n].result()
            if isinstance(res, LoopIRError):
                out.append(res)
                continue
            ms, where = res
            art = built[n]
            assert isinstance(art, Artifact)
            self.log.append((art.built_on, where))
            out.append(ms)
        return out

    def close(self) -> None:
        for ex in (self.builders, self.runners):
            shutdown = getattr(ex, "shutdown", None) or getattr(ex, "close", None)
            if shutdown is not None:
                shutdown()

    def __enter__(self) -> Farm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def local_farm(target: str, builders: int | None = None, devices: Sequence[str | int] | None = None) -> Farm:
    """Builders in a local process pool (default: one per CPU core); runners: one process per
    visible GPU for ``"cuda"`` ([`DevicePool`][loopir.tune.workers.DevicePool]), one process for
    ``"cpu"`` (measurements must not share the CPU with each other)."""
    import multiprocessing as mp

    from loopir.tune.workers import DevicePool

    ctx = mp.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=builders or os.cpu_count() or 1, mp_context=ctx)
    runners: Any = DevicePool(devices) if target == "cuda" else ProcessPoolExecutor(1, mp_context=ctx)
    return Farm(pool, runners, target)


def dask_farm(client: Any, target: str, build_resources: Mapping[str, float] | None = None,
              measure_resources: Mapping[str, float] | None = None) -> Farm:  # fmt: skip
    """Builders and runners on a Dask ``distributed`` cluster.

    Parameters
    ----------
    client
        A ``distributed.Client``.
    target
        ``"cpu"`` or ``"cuda"``.
    build_resources, measure_resources
        Worker resources a build / a measurement needs (default ``{"BUILD": 1}`` and
        ``{"MEASURE": 1}``: start compile workers with ``--resources BUILD=1`` and one worker
        per GPU with ``--resources MEASURE=1``).
    """
    builders = client.get_executor(resources=dict(build_resources or {"BUILD": 1}), pure=False)
    runners = client.get_executor(resources=dict(measure_resources or {"MEASURE": 1}), pure=False)
    return Farm(builders, runners, target)
