"""Testing helpers for users' own workloads: random inputs and numerical equivalence.

``check_equivalent(f1, f2)`` runs both functions on the CPU reference executor with the same
random (never zero) data and reports the first differing element.

Submodules:

- :mod:`loopir.testing.workloads`: small te workloads (matmul, conv2d, chains, reductions,
  symbolic extents) as :class:`~loopir.testing.workloads.Workload`.
- :mod:`loopir.testing.fuzz`: :class:`~loopir.testing.fuzz.ScheduleFuzzer`, which applies
  random (valid and invalid) schedule primitives and checks every step.
- :mod:`loopir.testing.strategies`: hypothesis strategies for shapes, factors, workloads and
  schedules. Only this one needs hypothesis (a test dependency); importing
  ``loopir.testing`` does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from loopir.errors import LoopIRError
from loopir.ir import dtype as dt
from loopir.ir.expr import IntImm, PrimExpr
from loopir.ir.functor import collect_vars
from loopir.ir.stmt import PrimFunc

#: (rtol, atol) used when comparing outputs of each dtype.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-4, 1e-5),
    "float16": (2e-2, 2e-2),
    "bfloat16": (5e-2, 5e-2),
}


class EquivalenceError(LoopIRError, AssertionError):
    """Two functions computed different results on the same inputs."""


def _shape(func: PrimFunc, shapes: Sequence[PrimExpr], sizes: Mapping[str, int]) -> tuple[int, ...]:
    out = []
    for s in shapes:
        if isinstance(s, IntImm):
            out.append(int(s.value))
            continue
        env = {}
        for v in collect_vars(s):
            if v.name not in sizes:
                raise LoopIRError(
                    f"check_equivalent: symbolic size {v.name!r} of {func.name} needs a value; "
                    f"pass sizes={{'{v.name}': ...}}"
                )
            env[v] = sizes[v.name]
        from loopir.arith import simplify
        from loopir.ir.functor import substitute

        val = simplify(substitute(s, {k: IntImm(v, k.dtype) for k, v in env.items()}))
        if not isinstance(val, IntImm):
            raise LoopIRError(f"check_equivalent: cannot evaluate extent {s}")
        out.append(int(val.value))
    return tuple(out)


def random_array(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Random data that is never zero: floats in +-[0.5, 1.5), ints in +-[1, 5]."""
    np_dtype = dt.to_numpy(dtype)
    if dt.is_float(dtype):
        mag = rng.uniform(0.5, 1.5, size=shape)
        sign = rng.choice([-1.0, 1.0], size=shape)
        arr = mag * sign
        if dtype == "bfloat16":
            f32 = arr.astype(np.float32)
            return (f32.view(np.uint32) >> 16).astype(np.uint16)
        return arr.astype(np_dtype)
    if dt.is_bool(dtype):
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    lo = 1 if dt.is_uint(dtype) else -5
    vals = rng.integers(lo, 6, size=shape)
    if lo < 0:
        vals = np.where(vals == 0, 1, vals)
    return vals.astype(np_dtype)


def random_inputs(func: PrimFunc, sizes: Mapping[str, int] | None = None, seed: int = 0) -> list[np.ndarray]:
    """One random non-zero array per parameter of ``func``."""
    rng = np.random.default_rng(seed)
    sizes = dict(sizes or {})
    return [random_array(_shape(func, p.shape, sizes), p.dtype, rng) for p in func.params]


def check_equivalent(
    f1: PrimFunc,
    f2: PrimFunc,
    *,
    sizes: Mapping[str, int] | None = None,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    inputs: Sequence[np.ndarray] | None = None,
    target2: str = "cpu",
    build_options: Mapping[str, Any] | None = None,
) -> list[np.ndarray]:
    """Run ``f1`` and ``f2`` on the same random inputs and compare every parameter afterwards.

    Parameters
    ----------
    f1, f2
        Functions with parameters of the same shapes and dtypes (e.g. before and after a
        schedule). ``f1`` runs on the CPU executor; ``f2`` on ``target2`` ("cpu" or "cuda").
    sizes
        Values of symbolic sizes, by Var name.
    rtol, atol
        Tolerances; default by dtype from :data:`TOLERANCES`, exact for integers.
    inputs
        Explicit inputs instead of random ones.

    Returns
    -------
    list of numpy.ndarray
        The arrays after running ``f1``.

    Raises
    ------
    EquivalenceError
        Naming the parameter, the first differing index and both values.
    """
    import loopir

    if len(f1.params) != len(f2.params):
        raise EquivalenceError(
            f"check_equivalent: {len(f1.params)} vs {len(f2.params)} parameters"
        )
    base = list(inputs) if inputs is not None else random_inputs(f1, sizes, seed)
    a1 = [np.array(x, copy=True) for x in base]
    a2 = [np.array(x, copy=True) for x in base]
    cpu_options = dict(build_options or {}) if target2 == "cpu" else {}
    loopir.build(f1, target="cpu", **cpu_options)(*a1)
    loopir.build(f2, target=target2, **dict(build_options or {}))(*a2)
    assert_outputs_equal(f1, a1, a2, rtol=rtol, atol=atol)
    return a1


def run_cpu(
    func: PrimFunc, inputs: Sequence[np.ndarray], build_options: Mapping[str, Any] | None = None
) -> list[np.ndarray]:
    """Run ``func`` on copies of ``inputs`` with the CPU executor; returns the copies after."""
    import loopir

    arrays = [np.array(x, copy=True) for x in inputs]
    mod = loopir.build(func, target="cpu", **dict(build_options or {}))
    try:
        mod(*arrays)
    finally:
        _unload(mod)
    return arrays


def _unload(mod: Any) -> None:
    """dlclose the module's library: ctypes never unloads one, and a fuzz run that builds tens
    of thousands of throw-away libraries in one process would otherwise keep them all
    mapped (gigabytes). Each CPUModule holds its own dlopen reference, so this only drops
    ``mod``'s; ``mod`` must not be called afterwards."""
    lib = getattr(mod, "_lib", None)
    handle = getattr(lib, "_handle", None)
    if handle is None:
        return
    import _ctypes

    mod._fn = None
    mod._lib = None
    _ctypes.dlclose(handle)


def assert_outputs_equal(
    func: PrimFunc,
    expected: Sequence[np.ndarray],
    actual: Sequence[np.ndarray],
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    """Compare two runs of functions with ``func``'s parameters, array by array.

    Raises
    ------
    EquivalenceError
        Naming the parameter, the first differing index and both values.
    """
    if len(expected) != len(func.params) or len(actual) != len(func.params):
        raise EquivalenceError(
            f"assert_outputs_equal: {func.name} has {len(func.params)} parameters, got "
            f"{len(expected)} and {len(actual)} arrays"
        )
    for p, x, y in zip(func.params, expected, actual):
        _compare(p.name, p.dtype, x, y, rtol, atol)


def _compare(name: str, dtype: str, x: np.ndarray, y: np.ndarray, rtol: float | None,
             atol: float | None) -> None:
    if x.shape != y.shape:
        raise EquivalenceError(f"parameter {name}: shapes differ {x.shape} vs {y.shape}")
    if dt.is_float(dtype):
        if dtype == "bfloat16":
            x = (x.astype(np.uint32) << 16).view(np.float32)
            y = (y.astype(np.uint32) << 16).view(np.float32)
        r, a = TOLERANCES.get(dtype, (1e-5, 1e-6))
        r = r if rtol is None else rtol
        a = a if atol is None else atol
        bad = ~np.isclose(x.astype(np.float64), y.astype(np.float64), rtol=r, atol=a, equal_nan=True)
    else:
        bad = x != y
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise EquivalenceError(
            f"parameter {name} differs at index {idx}: {x[idx]!r} (first) vs {y[idx]!r} "
            f"(second); {int(bad.sum())} of {bad.size} elements differ"
        )


__all__ = [
    "check_equivalent", "random_inputs", "random_array", "run_cpu", "assert_outputs_equal",
    "EquivalenceError", "TOLERANCES",
]  # fmt: skip
