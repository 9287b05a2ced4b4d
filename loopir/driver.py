"""``loopir.build``: compile a PrimFunc for a target.

The module is called ``driver`` (not ``build``) so that the submodule never shadows the
``loopir.build`` function.
"""

from __future__ import annotations

import warnings
from typing import Any

from loopir.errors import CodegenError, LoopIRError
from loopir.ir.stmt import PrimFunc

__all__ = ["build", "TARGETS"]

TARGETS = ("cpu", "cuda")


def build(func: Any, target: str = "cpu", **options: Any) -> Any:
    """Compile ``func`` (a PrimFunc, or an IRModule of them) for ``target``.

    Parameters
    ----------
    func
        The function (TensorIR with blocks, or lowered), or a
        [`loopir.IRModule`][loopir.ir.module.IRModule]: then a
        [`loopir.runtime.module.RuntimeModule`][loopir.runtime.module.RuntimeModule] whose functions
        are called by name (``rt["qkv"](x, w, y)``); for CUDA all of them are in one shared library
        (options ``strategy="single" | "units"`` and ``workers``, see
        ``loopir.codegen_cuda.units``).
    target
        ``"cpu"``: the reference executor
        ([`loopir.runtime.CPUModule`][loopir.runtime.cpu.CPUModule]); ``"cuda"``: CUDA kernels and
        their host code compiled with nvcc into a shared library (``CUDAModule``).
    database
        A [`loopir.schedule.database.Database`][loopir.schedule.database.Database] (or the path of
        one): functions with a stored trace for ``target`` are built with their best schedule; the
        others as given. A function with symbolic sizes whose schedules were tuned per shape bucket
        (``loopir.tune.tune_buckets``) is built once per bucket, and the result
        ([`loopir.runtime.dispatch.ShapeDispatch`][loopir.runtime.dispatch.ShapeDispatch]) runs each
        call with the bucket's module (sizes outside every bucket: the function as given).
    **options
        Target options, e.g. ``check_bounds=False`` or ``cache_dir=...`` for the CPU (see
        [`loopir.runtime.build_cpu`][loopir.runtime.cpu.build_cpu]) and the CUDA options of
        ``loopir.codegen_cuda.build_cuda``.

    Raises
    ------
    CodegenError
        For an unknown target, options the target does not know, or a failed compilation.
    """
    from loopir.ir.module import IRModule

    database = options.pop("database", None)
    if database is not None:
        database = _database(database)  # read once for both lookups
        dispatch = _bucketed(func, target, database, options)
        if dispatch is not None:
            return dispatch
        func = _tuned(func, target, database)
    if isinstance(func, IRModule):
        return _build_module(func, target, **options)
    if not isinstance(func, PrimFunc):
        raise CodegenError(
            f"build: expected a PrimFunc or an IRModule, got {type(func).__name__}: {func!r}"
        )
    if target == "cpu":
        from loopir.runtime.cpu import build_cpu

        return build_cpu(func, **options)
    if target == "cuda":
        from loopir.codegen_cuda import build_cuda

        return build_cuda(func, **options)
    raise CodegenError(f"build: unknown target {target!r}; known targets: {', '.join(TARGETS)}")


def _build_module(mod: Any, target: str, **options: Any) -> Any:
    if target == "cpu":
        from loopir.runtime.cpu import build_cpu
        from loopir.runtime.module import RuntimeModule

        return RuntimeModule({n: build_cpu(mod[n], **options) for n in mod.names}, "cpu")
    if target == "cuda":
        from loopir.codegen_cuda.module import build_cuda_module

        return build_cuda_module(mod, **options)
    raise CodegenError(f"build: unknown target {target!r}; known targets: {', '.join(TARGETS)}")


def _database(database: Any) -> Any:
    from loopir.schedule.database import Database

    return Database.of(database, "build")


def _bucketed(func: Any, target: str, db: Any, options: dict[str, Any]) -> Any:
    """A [`ShapeDispatch`][loopir.runtime.dispatch.ShapeDispatch] over ``func``'s tuned buckets, or
    None when it has none."""
    if not isinstance(func, PrimFunc):
        return None
    from loopir.runtime.dispatch import ShapeDispatch
    from loopir.schedule.database import DatabaseWarning, parse_bucket

    built = []
    for label in db.buckets(func, target):
        try:
            ranges = parse_bucket(label)
        except LoopIRError as exc:
            warnings.warn(f"tuning database {db.path}: {exc}; skipped", DatabaseWarning, stacklevel=3)
            continue
        tuned = db.apply(func, target, bucket=label)
        if tuned is not None:
            built.append((ranges, build(tuned, target, **options)))
    if not built:
        return None
    fallback = build(db.apply(func, target) or func, target, **options)
    return ShapeDispatch(func, built, fallback)


def _tuned(func: Any, target: str, db: Any) -> Any:
    """``func`` (or each function of a module) with its best stored schedule applied."""
    from loopir.ir.module import IRModule

    if isinstance(func, IRModule):
        return IRModule({n: db.apply(func[n], target) or func[n] for n in func.names})
    if isinstance(func, PrimFunc):
        return db.apply(func, target) or func
    return func
