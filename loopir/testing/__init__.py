"""Testing helpers for users' own workloads: random inputs and numerical equivalence.

``check_equivalent(f1, f2)`` runs both functions on the CPU reference executor with the same
random (never zero) data and reports the first differing element. Lowered functions run with
``thread_order="random"`` for a few seeds (the threads of a block in a random order between
barriers, as a GPU may run them), so a missing barrier is a difference too.
``check_local_pad(func)`` does that for ``func`` lowered with and without local padding.

Submodules:

- [`loopir.testing.workloads`][loopir.testing.workloads]: small te workloads (matmul, conv2d,
  chains, reductions, symbolic extents) as [`Workload`][loopir.testing.workloads.Workload].
- [`loopir.testing.fuzz`][loopir.testing.fuzz]:
  [`ScheduleFuzzer`][loopir.testing.fuzz.ScheduleFuzzer], which applies random (valid and invalid)
  schedule primitives and checks every step.
- [`loopir.testing.strategies`][loopir.testing.strategies]: hypothesis strategies for shapes,
  factors, workloads and schedules. Only this one needs hypothesis (a test dependency); importing
  ``loopir.testing`` does not.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from loopir.errors import LoopIRError
from loopir.ir import dtype as dt
from loopir.ir.expr import IntImm, PrimExpr
from loopir.ir.functor import collect_vars, post_order_visit
from loopir.ir.stmt import Block, BlockRealize, PrimFunc

TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-4, 1e-5),
    "float16": (2e-2, 2e-2),
    "bfloat16": (5e-2, 5e-2),
}
"""(rtol, atol) used when comparing outputs of each dtype."""


ORDER_SEEDS: tuple[int, ...] = (0, 1, 2)
"""Seeds of the random thread order that [`check_equivalent`][loopir.testing.check_equivalent] runs
lowered functions with."""


class EquivalenceError(LoopIRError, AssertionError):
    """Two functions computed different results on the same inputs."""


@attrs.frozen(eq=False, repr=False)
class EquivalenceResult:
    """What [`check_equivalent`][loopir.testing.check_equivalent] checked (its repr is one line, not
    the arrays).

    Indexing and iterating it go to ``outputs``, for code written when
    ``check_equivalent`` returned that list.

    Attributes
    ----------
    outputs
        The arrays after running ``f1`` (one per parameter).
    thread_order
        How the CPU ran ``f2``: ``"sequential"`` or ``"random"``.
    seeds
        The thread-order seeds ``f2`` ran with (empty unless ``thread_order`` is
        ``"random"`` and ``f2`` has thread regions).
    """

    outputs: tuple[np.ndarray, ...]
    thread_order: str = "sequential"
    seeds: tuple[int, ...] = ()

    def __repr__(self) -> str:
        order = f"thread_order={self.thread_order!r}"
        if self.seeds:
            order += f", seeds {self.seeds}"
        return f"<EquivalenceResult: {len(self.outputs)} parameters equal; {order}>"

    def __len__(self) -> int:
        return len(self.outputs)

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter(self.outputs)

    def __getitem__(self, k: Any) -> Any:
        return self.outputs[k]


def is_lowered(func: PrimFunc) -> bool:
    """Whether ``func`` is in lowered form (no blocks): its threads run as a GPU's would
    under ``thread_order="random"``."""
    found = False

    def visit(n: Any) -> None:
        nonlocal found
        found = found or isinstance(n, (Block, BlockRealize))

    post_order_visit(func.body, visit)
    return not found


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
        arr: np.ndarray = mag * sign
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


def _known_dims(shape: Sequence[PrimExpr], sizes: Mapping[str, int]) -> list[int | None]:
    """The extents of ``shape`` that constants or ``sizes`` fix (None for the others)."""
    out: list[int | None] = []
    for s in shape:
        if isinstance(s, IntImm):
            out.append(int(s.value))
            continue
        vs = collect_vars(s)
        if not all(v.name in sizes for v in vs):
            out.append(None)
            continue
        from loopir.arith import simplify
        from loopir.ir.functor import substitute

        val = simplify(substitute(s, {v: IntImm(sizes[v.name], v.dtype) for v in vs}))
        out.append(int(val.value) if isinstance(val, IntImm) else None)
    return out


def _check_signatures(f1: PrimFunc, f2: PrimFunc, sizes: Mapping[str, int]) -> None:
    """Refuse functions that cannot take the same arrays, naming the parameter (rather than
    letting the second run fail on an argument). Extents neither constant nor fixed by
    ``sizes`` are not compared: the run binds them from the arrays."""
    p1, p2 = f1.params, f2.params
    if len(p1) != len(p2):
        raise EquivalenceError(
            f"check_equivalent: the signatures differ: {len(p1)} parameters "
            f"({', '.join(b.name for b in p1)}) vs {len(p2)} ({', '.join(b.name for b in p2)})"
        )
    diffs = []
    for n, (b1, b2) in enumerate(zip(p1, p2)):
        what = f"parameter {n} ({b1.name}" + (f" / {b2.name})" if b2.name != b1.name else ")")
        if b1.dtype != b2.dtype:
            diffs.append(f"{what}: dtype {b1.dtype} vs {b2.dtype}")
        d1, d2 = _known_dims(b1.shape, sizes), _known_dims(b2.shape, sizes)
        if len(d1) != len(d2) or any(a is not None and b is not None and a != b for a, b in zip(d1, d2)):
            diffs.append(f"{what}: shape {_shape_text(b1.shape, d1)} vs {_shape_text(b2.shape, d2)}")
    if diffs:
        raise EquivalenceError(f"check_equivalent: the signatures differ: {'; '.join(diffs)}")


def _shape_text(shape: Sequence[PrimExpr], known: Sequence[int | None]) -> str:
    dims = [str(k) if k is not None else str(s) for s, k in zip(shape, known)]
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"  # as a tuple prints


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
    thread_order: str | None = None,
    order_seeds: Sequence[int] = ORDER_SEEDS,
    norm: bool = False,
) -> EquivalenceResult:
    """Run ``f1`` and ``f2`` on the same random inputs and compare every parameter afterwards.

    Parameters
    ----------
    f1, f2
        Functions with parameters of the same shapes and dtypes (e.g. before and after a
        schedule). ``f1`` runs on the CPU executor; ``f2`` on ``target2`` ("cpu" or "cuda").
    sizes
        Values of symbolic sizes, by Var name.
    seed
        Seed of the random inputs.
    rtol, atol
        Tolerances; default by dtype from [`TOLERANCES`][loopir.testing.TOLERANCES], exact for
        integers.
    inputs
        Explicit inputs instead of random ones.
    build_options
        Options of the builds (CPU options for both when ``target2`` is "cpu").
    thread_order : {None, "sequential", "random"}
        How the CPU executor runs the threads (see
        [`loopir.runtime.build_cpu`][loopir.runtime.cpu.build_cpu]). None (default): ``"random"``
        for lowered functions (no blocks), ``"sequential"`` for the others, which are sequential
        programs. ``"random"`` runs ``f2`` once per seed of ``order_seeds`` (and ``f1``, when
        lowered, with the first), so that a missing barrier shows as a difference.
    order_seeds
        Seeds of the random thread order.
    norm
        Compare float outputs normwise (see
        [`assert_outputs_equal`][loopir.testing.assert_outputs_equal]): for long reductions whose
        order of additions differs.

    Returns
    -------
    EquivalenceResult
        ``f1``'s outputs and the orders checked (a one-line repr).

    Raises
    ------
    EquivalenceError
        Naming the parameter, the first differing index and both values (and the
        thread-order seed, when ``f2`` ran in random order); or, before running anything,
        when the signatures differ: the parameter count, or a parameter's dtype or shape
        (extents that are constants or fixed by ``sizes``).
    """
    import loopir

    _check_signatures(f1, f2, sizes or {})
    options = dict(build_options or {})
    order = _thread_order(thread_order, options)
    seeds = tuple(order_seeds)
    if not seeds or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in seeds):
        raise LoopIRError(f"check_equivalent: order_seeds must be a non-empty sequence of ints, got {order_seeds!r}")
    options.pop("thread_order", None)
    options.pop("seed", None)

    def cpu_options(f: PrimFunc) -> dict[str, Any]:
        mode = order if order is not None else ("random" if is_lowered(f) else "sequential")
        # build_options are the CUDA build's when target2 is "cuda"
        return {**(options if target2 == "cpu" else {}), "thread_order": mode, "seed": int(seeds[0])}

    base = list(inputs) if inputs is not None else random_inputs(f1, sizes, seed)
    a1 = [np.array(x, copy=True) for x in base]
    loopir.build(f1, target="cpu", **cpu_options(f1))(*a1)
    if target2 != "cpu":
        a2 = [np.array(x, copy=True) for x in base]
        loopir.build(f2, target=target2, **options)(*a2)
        assert_outputs_equal(f1, a1, a2, rtol=rtol, atol=atol, norm=norm)
        return EquivalenceResult(tuple(a1))
    opts2 = cpu_options(f2)
    ran: list[int] = []
    for s, a2 in run_cpu_orders(f2, base, opts2, seeds):
        try:
            assert_outputs_equal(f1, a1, a2, rtol=rtol, atol=atol, norm=norm)
        except EquivalenceError as e:
            if s is None:
                raise
            raise EquivalenceError(
                f"{e} (second function run with thread_order='random', seed={s}: its threads "
                "race, is a barrier missing?)"
            ) from None
        if s is not None:
            ran.append(s)
    return EquivalenceResult(tuple(a1), opts2["thread_order"], tuple(ran))


def _thread_order(thread_order: str | None, options: Mapping[str, Any]) -> str | None:
    given = options.get("thread_order")
    if thread_order is not None and given is not None and given != thread_order:
        raise LoopIRError(
            f"check_equivalent: thread_order={thread_order!r} contradicts "
            f"build_options['thread_order']={given!r}"
        )
    order = thread_order if thread_order is not None else given
    if order is not None and order not in ("sequential", "random"):
        raise LoopIRError(
            f"check_equivalent: thread_order must be None, 'sequential' or 'random', got {order!r}"
        )
    return order


def run_cpu_orders(
    func: PrimFunc,
    inputs: Sequence[np.ndarray],
    build_options: Mapping[str, Any] | None,
    seeds: Sequence[int],
) -> Iterator[tuple[int | None, list[np.ndarray]]]:
    """Run ``func`` on copies of ``inputs``, built once with ``build_options``: once per seed
    when it runs threads in random order, else once. Yields (seed or None, the copies)."""
    import loopir

    mod = loopir.build(func, target="cpu", **dict(build_options or {}))
    try:
        for s in seeds if mod.program.seeded else [None]:
            if s is not None:
                mod.seed = s
            arrays = [np.array(x, copy=True) for x in inputs]
            mod(*arrays)
            yield s, arrays
    finally:
        _unload(mod)


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


def check_local_pad(
    func: PrimFunc,
    *,
    sizes: Mapping[str, int] | None = None,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    inputs: Sequence[np.ndarray] | None = None,
    build_options: Mapping[str, Any] | None = None,
    order_seeds: Sequence[int] = ORDER_SEEDS,
    norm: bool = False,
) -> EquivalenceResult:
    """Check that local padding keeps ``func``'s results: lower it with ``tir.enable_local_pad``
    off and on, then run both lowerings on the CPU executor on the same random inputs and
    compare every parameter.

    Both lowerings run under the current [`PassContext`][loopir.passes.context.PassContext]'s
    config, opt level and disabled passes (not its instruments), with only
    ``tir.enable_local_pad`` set, so that ``with PassContext(config={"tir.prefetch_shared":
    True}): check_local_pad(func)`` checks padding with prefetch on. The lowered functions run
    with their threads in a random order, once per seed of ``order_seeds``, as in
    [`check_equivalent`][loopir.testing.check_equivalent] (a missing barrier is a difference).

    Parameters
    ----------
    func
        A scheduled (or unscheduled) function, e.g. ``sch.func``.
    sizes, seed, rtol, atol, inputs, build_options, order_seeds, norm
        As for [`check_equivalent`][loopir.testing.check_equivalent]; the padded lowering is its
        second function.

    Returns
    -------
    EquivalenceResult
        The unpadded lowering's outputs and the thread orders checked.

    Raises
    ------
    EquivalenceError
        When the padded lowering computes something else: names the parameter, the first
        differing index, both values and the thread-order seed.
    PassError
        When either lowering fails (the message says which).
    """
    if not isinstance(func, PrimFunc):
        raise LoopIRError(f"check_local_pad: expected a PrimFunc, got {type(func).__name__}")
    unpadded, padded = (_lower_local_pad(func, pad) for pad in (False, True))
    try:
        return check_equivalent(
            unpadded, padded, sizes=sizes, seed=seed, rtol=rtol, atol=atol, inputs=inputs,
            build_options=build_options, order_seeds=order_seeds, norm=norm,
        )  # fmt: skip
    except EquivalenceError as e:
        raise EquivalenceError(
            f"check_local_pad: {func.name} lowered with tir.enable_local_pad=True (second) "
            f"differs from its lowering without it (first): {e}"
        ) from None
    except LoopIRError as e:
        if type(e) is not LoopIRError:
            raise
        # check_equivalent's argument errors: a symbolic size without a value, ...
        raise LoopIRError(f"check_local_pad: {e}") from e


def _lower_local_pad(func: PrimFunc, pad: bool) -> PrimFunc:
    """``func`` lowered under the current PassContext with ``tir.enable_local_pad=pad``."""
    from loopir.errors import PassError
    from loopir.passes import pipeline
    from loopir.passes.context import PassContext

    cur = PassContext.current()
    ctx = PassContext(
        config={**cur.config, "tir.enable_local_pad": pad}, opt_level=cur.opt_level,
        disabled_passes=cur.disabled_passes,
    )  # fmt: skip
    try:
        with ctx:
            return pipeline.lower(func)
    except PassError as e:
        raise PassError(
            f"check_local_pad: lowering {func.name} with tir.enable_local_pad={pad} failed: {e}"
        ) from e


def check_gemm(mod: Any, M: int, K: int, N: int, *, seed: int = 0, rtol: float = 1e-5) -> float:
    """Check a built float32 GEMM ``C = A @ B`` (parameters ``A (M, K)``, ``B (K, N)``,
    ``C (M, N)``, any target) against the float64 product, normwise.

    ``A`` and ``B`` are uniform in [-0.5, 0.5); ``C`` starts as NaN, so an element the module
    never writes fails the check.

    Returns
    -------
    float
        The relative (Frobenius) error.

    Raises
    ------
    EquivalenceError
        When the error is over ``rtol`` (or NaN).
    """
    rng = np.random.default_rng(seed)
    a = rng.random((M, K), "float32") - 0.5
    b = rng.random((K, N), "float32") - 0.5
    c = np.full((M, N), np.nan, "float32")
    mod(a, b, c)
    err = _relative_error(a.astype(np.float64) @ b.astype(np.float64), c)
    if not err <= rtol:  # NaN fails too
        raise EquivalenceError(
            f"check_gemm: the {M}x{K}x{N} GEMM's relative (Frobenius) error is {err:.3g} > {rtol:g}"
        )
    return err


def assert_outputs_equal(
    func: PrimFunc,
    expected: Sequence[np.ndarray],
    actual: Sequence[np.ndarray],
    *,
    rtol: float | None = None,
    atol: float | None = None,
    norm: bool = False,
) -> None:
    """Compare two runs of functions with ``func``'s parameters, array by array.

    ``norm=True`` compares float arrays as wholes, ``||x - y|| / ||x|| <= rtol`` (Frobenius),
    the check for results that differ only by the order of a long reduction's additions
    (elementwise, an output near zero has no relative precision left).

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
        _compare(p.name, p.dtype, x, y, rtol, atol, norm)


def _relative_error(expected: np.ndarray, actual: np.ndarray) -> float:
    """``||actual - expected|| / ||expected||`` (Frobenius, in float64; ``||actual||`` when
    ``expected`` is all zeros; NaN when ``actual`` has a NaN)."""
    xd, yd = expected.astype(np.float64), actual.astype(np.float64)
    scale = float(np.linalg.norm(xd))
    return float(np.linalg.norm(xd - yd)) / scale if scale else float(np.linalg.norm(yd))


def _compare(name: str, dtype: str, x: np.ndarray, y: np.ndarray, rtol: float | None,
             atol: float | None, norm: bool = False) -> None:
    if x.shape != y.shape:
        raise EquivalenceError(f"parameter {name}: shapes differ {x.shape} vs {y.shape}")
    if dt.is_float(dtype):
        r, a = TOLERANCES.get(dtype, (1e-5, 1e-6))
        r = r if rtol is None else rtol
        a = a if atol is None else atol
        if norm and dtype != "bfloat16":
            err = _relative_error(x, y)
            if not err <= r:  # NaN fails too
                raise EquivalenceError(f"parameter {name}: relative (Frobenius) error {err:.3g} > {r:g}")
            return
        if dtype == "bfloat16":
            x = (x.astype(np.uint32) << 16).view(np.float32)
            y = (y.astype(np.uint32) << 16).view(np.float32)
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
    "check_equivalent", "check_local_pad", "random_inputs", "random_array", "run_cpu",
    "run_cpu_orders", "assert_outputs_equal", "check_gemm", "is_lowered", "EquivalenceError",
    "EquivalenceResult", "TOLERANCES", "ORDER_SEEDS",
]  # fmt: skip
