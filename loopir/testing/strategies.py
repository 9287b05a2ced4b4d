"""Hypothesis strategies for loopir: shapes, split and tile factors, workloads, schedules,
thread-bound GPU schedules, and a stateful schedule fuzzer.

This module needs ``hypothesis`` (a test dependency); ``import loopir.testing`` does not.

Examples
--------
Check a schedule space of your own workload::

    from hypothesis import given
    from loopir.testing import check_equivalent
    from loopir.testing.strategies import schedules

    @given(sch=schedules(my_workload))
    def test_any_schedule_is_equivalent(sch):
        check_equivalent(my_workload.func, sch.func)

Check local padding on random thread-bound schedules, and tile a loop perfectly::

    from loopir.testing import check_local_pad
    from loopir.testing.strategies import gpu_schedules, tile_factors

    @given(case=gpu_schedules(families=["matmul", "transpose"]))
    def test_padding_keeps_results(case):
        check_local_pad(case.func)

    @given(factors=tile_factors(64, 3, max_innermost_factor=16))
    def test_tiles(factors):
        i0, i1, i2 = sch.split(i, factors)   # product 64: no predicate

Run the stateful fuzzer on your workloads::

    TestMine = schedule_state_machine(st.just(my_workload)).TestCase
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from loopir.errors import ScheduleError
from loopir.ir.buffer import Buffer
from loopir.ir.expr import EQ, GE, LT, And, BufferLoad, FloatImm, IntImm, PrimExpr, Var
from loopir.ir.op import floormod
from loopir.ir.stmt import Allocate, BufferStore, For, ForKind, IfThenElse, PrimFunc, Stmt, seq
from loopir.schedule import Schedule
from loopir.testing.fuzz import FuzzFinding, ScheduleFuzzer, draw_workload
from loopir.testing.gpu_fuzz import FAMILIES, GpuCase, random_gpu_schedule
from loopir.testing.workloads import WORKLOADS, Workload

T = TypeVar("T")

__all__ = [
    "DrawChooser", "extents", "shapes", "split_factors", "tile_factors", "workloads", "schedules",
    "gpu_schedules", "schedule_state_machine", "carried_values", "te_functions", "COUNTER_ENV",
    "FINDINGS_ENV",
]  # fmt: skip

COUNTER_ENV = "LOOPIR_FUZZ_COUNTER"
"""Environment variable: a JSON file where the state machine counts schedules, steps, and per
primitive the calls that succeeded / were refused with ScheduleError."""
FINDINGS_ENV = "LOOPIR_FUZZ_FINDINGS"
"""Environment variable: a JSONL file; when set, findings are appended there and the run
continues with the next schedule instead of failing (for long surveys)."""


class _Draw(Protocol):
    """The ``draw`` of a composite strategy (`hypothesis.strategies.DrawFn`) or of
    ``st.data()`` (`hypothesis.strategies.DataObject.draw`)."""

    def __call__(self, strategy: st.SearchStrategy[T], label: object = None) -> T: ...


class DrawChooser:
    """A [`Chooser`][loopir.testing.fuzz.Chooser] over hypothesis' ``draw`` (shrinks well)."""

    def __init__(self, draw: _Draw) -> None:
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return int(self.draw(st.integers(lo, hi)))

    def choice(self, options: Sequence[T]) -> T:
        return self.draw(st.sampled_from(list(options)))

    def weighted(self, options: Mapping[str, int]) -> str:
        pool = [k for k, w in options.items() for _ in range(w)]
        return str(self.draw(st.sampled_from(pool)))


def extents(max_value: int = 8) -> st.SearchStrategy[int]:
    """A small loop extent (1..max_value)."""
    return st.integers(1, max_value)


def shapes(max_ndim: int = 3, max_side: int = 8) -> st.SearchStrategy[tuple[int, ...]]:
    """Array shapes of 1..max_ndim dimensions of 1..max_side."""
    return st.lists(extents(max_side), min_size=1, max_size=max_ndim).map(tuple)


@st.composite
def split_factors(draw: Any, extent: int, max_parts: int = 3, allow_none: bool = True) -> list[int | None]:
    """Valid ``split`` factors for ``extent``: 2..max_parts positive ints, at most one None.

    Without a None, the product is at least ``extent`` (larger products make an inexact
    split, which ``split`` accepts by adding a predicate).
    """
    n = draw(st.integers(2, max_parts))
    facs: list[int | None] = [draw(st.integers(1, max(extent, 1))) for _ in range(n)]
    if allow_none and draw(st.booleans()):
        facs[draw(st.integers(0, n - 1))] = None
        return facs
    prod = 1
    for f in facs[1:]:
        prod *= int(f or 1)
    # Make the product cover the extent by raising the outermost factor.
    facs[0] = max(int(facs[0] or 1), -(-extent // prod))
    return facs


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def tile_factors(
    extent: int, n: int, max_innermost_factor: int | None = None
) -> st.SearchStrategy[list[int]]:
    """``n`` tile sizes of a loop of ``extent``: positive ints, outermost first, whose product
    is exactly ``extent`` (a perfect tiling, as ``Schedule.sample_perfect_tile`` draws, so
    ``split`` with them adds no predicate).

    Every perfect tiling can be drawn; examples shrink toward ``[extent, 1, ..., 1]``.

    Parameters
    ----------
    extent
        The loop's extent (>= 1).
    n
        How many factors (>= 1).
    max_innermost_factor
        Upper bound of the last factor, as ``sample_perfect_tile``'s (TVM's default there is
        16); None: no bound.

    Raises
    ------
    ValueError
        For a bad argument, or when no tiling exists (``n == 1`` and ``extent`` over the bound).
    """
    for name, value in (("extent", extent), ("n", n)):
        if type(value) is not int or value < 1:
            raise ValueError(f"tile_factors: {name} must be an int >= 1, got {value!r}")
    bound = extent if max_innermost_factor is None else max_innermost_factor
    if type(bound) is not int or bound < 1:
        raise ValueError(
            "tile_factors: max_innermost_factor must be None or an int >= 1, "
            f"got {max_innermost_factor!r}"
        )
    inner = [d for d in range(1, min(extent, bound) + 1) if extent % d == 0]
    if n == 1:
        if extent > bound:
            raise ValueError(
                f"tile_factors: no 1-way tiling of extent {extent} has an innermost factor "
                f"<= {max_innermost_factor}"
            )
        return st.just([extent])

    @st.composite
    def draw_tiles(draw: Any) -> list[int]:
        last = draw(st.sampled_from(inner))
        outer = [1] * (n - 1)
        # each prime factor of the rest goes to one outer slot: every factorization is reachable
        for p in _prime_factors(extent // last):
            outer[draw(st.integers(0, n - 2))] *= p
        return [*outer, last]

    return draw_tiles()


@st.composite
def workloads(draw: Any, names: Sequence[str] | None = None) -> Workload:
    """A workload of [`WORKLOADS`][loopir.testing.workloads.WORKLOADS] with small random shapes."""
    if names is not None:
        unknown = sorted(set(names) - set(WORKLOADS))
        if unknown:
            raise ValueError(f"workloads: unknown workload names {unknown}")
    return draw_workload(DrawChooser(draw), names)


@st.composite
def schedules(draw: Any, workload: Workload | st.SearchStrategy[Workload] | None = None,
              max_steps: int = 8) -> Schedule:  # fmt: skip
    """A Schedule of ``workload`` after up to ``max_steps`` random primitive calls.

    Calls that raise ScheduleError are skipped (they leave the schedule unchanged); nothing
    is checked here -- the test decides what to check (e.g. ``check_equivalent``).
    """
    if workload is None:
        workload = workloads()
    w = draw(workload) if isinstance(workload, st.SearchStrategy) else workload
    fz = ScheduleFuzzer(w, check_every_step=False)
    ch = DrawChooser(draw)
    for _ in range(draw(st.integers(0, max_steps))):
        call = fz.draw(ch)
        try:
            out = getattr(fz.sch, call.kind)(*call.args, **call.kwargs)
        except ScheduleError:
            continue
        fz._record_outputs(call.kind, out, call.args, call.kwargs)
    return fz.sch


@st.composite
def gpu_schedules(draw: Any, families: Sequence[str] | None = None) -> GpuCase:
    """A [`GpuCase`][loopir.testing.gpu_fuzz.GpuCase] from
    [`random_gpu_schedule`][loopir.testing.gpu_fuzz.random_gpu_schedule]: a random workload of
    one of ``families`` (default: all of [`FAMILIES`][loopir.testing.gpu_fuzz.FAMILIES]) with
    a random thread-bound schedule (cooperative shared-memory fetches, transposes through
    shared tiles, two-level reductions, virtual threads, inexact splits).

    The case is drawn from a seed, so hypothesis shrinks the seed, not the schedule; a
    failure's repr says how to draw it again (``random_gpu_schedule(seed, family)``), and
    ``case.trace`` is the schedule as Python. Cases whose core schedule step was refused
    (``case.func is None``) are never drawn.

    Check a drawn case with ``check_equivalent(case.base, case.func)`` (the schedule keeps the
    workload's meaning), with [`check_local_pad`][loopir.testing.check_local_pad] on
    ``case.func``, or, on a GPU, with [`run_case`][loopir.testing.gpu_fuzz.run_case].
    """
    names = list(FAMILIES if families is None else families)
    unknown = sorted(set(names) - set(FAMILIES))
    if unknown or not names:
        raise ValueError(
            f"gpu_schedules: unknown or no families {unknown or names}; known: {FAMILIES}"
        )
    family = draw(st.sampled_from(names))
    seed = draw(st.integers(0, 2**31 - 1))
    case = random_gpu_schedule(seed, family)
    assume(case.func is not None)
    return case


def _bump_counter(fz: ScheduleFuzzer) -> None:
    """Add one schedule (its steps, per-primitive successes and refusals) to the counter file.

    The file is JSON: ``{"schedules": n, "steps": n, "succeeded": {...}, "refused": {...}}``.
    """
    path = os.environ.get(COUNTER_ENV)
    if not path:
        return
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        data = {}
    data["schedules"] = int(data.get("schedules", 0)) + 1
    data["steps"] = int(data.get("steps", 0)) + fz.steps
    data["gpu_lowering_refused"] = int(data.get("gpu_lowering_refused", 0)) + fz.gpu_refused
    for field, counts in (("succeeded", fz.succeeded), ("refused", fz.refused)):
        agg = data.setdefault(field, {})
        for k, v in counts.items():
            agg[k] = int(agg.get(k, 0)) + v
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True) + "\n")
    os.replace(tmp, p)


def _record_finding(f: FuzzFinding) -> bool:
    """Append ``f`` to the findings file; False when no file is configured."""
    path = os.environ.get(FINDINGS_ENV)
    if not path:
        return False
    with open(path, "a") as out:
        out.write(json.dumps({"category": f.category, "message": str(f)}) + "\n")
    return True


def schedule_state_machine(
    workload_strategy: st.SearchStrategy[Workload] | None = None,
) -> type[RuleBasedStateMachine]:
    """A RuleBasedStateMachine: draw a workload, then random primitives, checking each step.

    Each rule applies one random primitive call (valid or not) through
    [`ScheduleFuzzer.step`][loopir.testing.fuzz.ScheduleFuzzer.step]; teardown runs
    [`ScheduleFuzzer.finish`][loopir.testing.fuzz.ScheduleFuzzer.finish] (trace replay through
    Python and JSON, local padding on and off). With ``$LOOPIR_FUZZ_FINDINGS`` set, a finding is
    recorded there and the machine stops stepping instead of failing; with ``$LOOPIR_FUZZ_COUNTER``
    set, schedules and steps are counted in that file.
    """
    wl = workload_strategy if workload_strategy is not None else workloads()

    class ScheduleMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.fuzzer: ScheduleFuzzer | None = None
            self.dead = False

        def _guard(self, fn: Any) -> None:
            try:
                fn()
            except FuzzFinding as f:
                if not _record_finding(f):
                    raise
                self.dead = True

        @initialize(workload=wl, seed=st.integers(0, 2**16))
        def start(self, workload: Workload, seed: int) -> None:
            self.fuzzer = ScheduleFuzzer(workload, seed=seed)

        @precondition(lambda self: self.fuzzer is not None and not self.dead)
        @rule(data=st.data())
        def apply_primitive(self, data: st.DataObject) -> None:
            fz = self.fuzzer
            if fz is None:  # pragma: no cover - excluded by the precondition
                return
            call = fz.draw(DrawChooser(data.draw))
            data.draw(st.just(call.text), label="call")  # shown in hypothesis' failure report
            self._guard(lambda: fz.step(call))

        def teardown(self) -> None:
            fz = self.fuzzer
            if fz is None:
                return
            try:
                if not self.dead:
                    self._guard(fz.finish)
            finally:
                _bump_counter(fz)

    return ScheduleMachine


@st.composite
def carried_values(draw: Any, scopes: Sequence[str] = ("local", "shared", "global")) -> PrimFunc:
    """Lowered IR that passes values through a scratch buffer, often across loop iterations.

    ``main(A, B)`` (float32, ``rows x cols``) runs ``for j: <prologue>; for i: <body>;
    <epilogue>`` with a scratch buffer ``L[rows, cols]`` allocated at the root in one of
    ``scopes``. The body writes, accumulates into and reads ``L`` in a random order, at
    elements such as ``L[j, i]``, ``L[j, i - 1]``, ``L[0, i]`` or ``L[j, 0]``, under random
    guards on ``i`` (``i == g``, ``i < g``, ``i >= g``, ``i % 2 == 0``, some with an else
    branch), and stores what it reads to ``B[j, i]``: a value read may come from the same
    iteration, an earlier one of ``i`` or of ``j``, or from nowhere (an allocation the CPU
    executor fills with NaN). With a local ``L`` indexed by ``j`` the ``j`` loop may be bound to
    ``threadIdx.x``. For properties of the passes that narrow or move allocations
    (CompactBufferAllocation): where the original function computes a number (not NaN), the
    transformed one must compute the same.
    """
    rows, cols = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    scope = draw(st.sampled_from(list(scopes)))
    A, B = Buffer("A", (rows, cols), "float32"), Buffer("B", (rows, cols), "float32")
    L = Buffer("L", (rows, cols), "float32", scope=scope)
    j, i = Var("j", "int32"), Var("i", "int32")

    def c(v: int) -> PrimExpr:
        return IntImm(v, "int32")

    def guard() -> PrimExpr | None:
        g = c(draw(st.integers(0, max(cols - 1, 0))))
        kind = draw(st.sampled_from(["none", "eq", "lt", "ge", "even"]))
        return {"none": None, "eq": EQ(i, g), "lt": LT(i, g), "ge": GE(i, g),
                "even": EQ(floormod(i, c(2)), c(0))}[kind]  # fmt: skip

    rows_used: list[str] = []

    def element(in_loop: bool = True) -> tuple[tuple[PrimExpr, PrimExpr], PrimExpr | None]:
        row = draw(st.sampled_from(["j", "0"]))
        rows_used.append(row)
        col = draw(st.sampled_from(["i", "i-1", "0", "last", "next"] if in_loop else ["0", "last"]))
        need = GE(i, c(1)) if col == "i-1" else None
        idx = {"i": i, "i-1": i - 1, "0": c(0), "last": c(cols - 1), "next": floormod(i + 1, c(cols))}[col]
        return (j if row == "j" else c(0), idx), need

    def guarded(body: Stmt, *conds: PrimExpr | None, other: Stmt | None = None) -> Stmt:
        cs = [x for x in conds if x is not None]
        if not cs:
            return body
        cond = cs[0] if len(cs) == 1 else And(cs[0], cs[1])
        return IfThenElse(cond, body, other)

    def statement() -> Stmt:
        kind = draw(st.sampled_from(["write", "acc", "read", "read"]))
        at, need = element()
        g = guard()
        if kind == "read":
            return guarded(BufferStore(B, BufferLoad(L, at) + BufferLoad(A, (j, i)), (j, i)), g, need)
        value = BufferLoad(A, (j, i)) * 2.0
        if kind == "acc":
            value = BufferLoad(L, at) + value
        other = BufferStore(L, FloatImm(0.5, "float32"), at) if g is not None and draw(st.booleans()) else None
        return guarded(BufferStore(L, value, at), need, g, other=other if need is None else None)

    body = seq(*(statement() for _ in range(draw(st.integers(1, 3)))))
    inner: Stmt = For(i, c(0), c(cols), draw(st.sampled_from([ForKind.SERIAL, ForKind.UNROLLED])), body)
    prologue = draw(st.sampled_from(["none", "row", "one"]))
    if prologue == "row":  # clear the row (or row 0) before the loop: covers every later read of it
        t = Var("t", "int32")
        row = j if draw(st.booleans()) else c(0)
        rows_used.append("j" if row is j else "0")
        inner = seq(For(t, c(0), c(cols), ForKind.SERIAL, BufferStore(L, FloatImm(0.0, "float32"), (row, t))), inner)
    elif prologue == "one":
        at, _ = element(in_loop=False)
        inner = seq(BufferStore(L, BufferLoad(A, (j, c(0))), at), inner)
    if draw(st.booleans()):  # read after the loop
        at, _ = element(in_loop=False)
        inner = seq(inner, BufferStore(B, BufferLoad(L, at), (j, c(0))))
    threads = scope == "local" and "0" not in rows_used and draw(st.booleans())
    kind = ForKind.THREAD_BINDING if threads else ForKind.SERIAL
    outer = For(j, c(0), c(rows), kind, inner, thread_tag="threadIdx.x" if threads else None)
    return PrimFunc((A, B), Allocate(L, outer))


_TE_DTYPES = ("float32", "float16", "float64", "int32", "int8", "int64", "uint8")
_TE_MATH = ("exp", "log", "sqrt", "tanh", "sigmoid", "erf", "sin", "floor", "round", "fabs")


@st.composite
def te_functions(draw: Any, max_stages: int = 3) -> PrimFunc:
    """A random te function: one or two inputs of random dtypes (the first size sometimes
    symbolic), then 1..``max_stages`` compute stages whose elements are random expressions
    over the earlier tensors: arithmetic, ``//``/``%`` by constants, min/max, comparisons under
    ``if_then_else``, math intrinsics, casts, constants (negative, infinite), and sometimes a
    ``sum``/``max``/``min`` reduction over the last dimension (with a ``where``).

    Meant for properties of whole functions that do not run them (printing and parsing,
    structural checks): values may overflow or be NaN.
    """
    from loopir import te
    from loopir.ir import op

    ndim = draw(st.integers(1, 3))
    shape: list[Any] = [draw(st.integers(1, 6)) for _ in range(ndim)]
    if draw(st.booleans()):
        shape[0] = te.var("n")
    tensors = [te.placeholder(tuple(shape), draw(st.sampled_from(_TE_DTYPES)), name=f"X{k}")
               for k in range(draw(st.integers(1, 2)))]  # fmt: skip

    def const(dtype: str) -> PrimExpr:
        if dtype.startswith("float") and draw(st.integers(0, 5)) == 0:
            return op.const(float(draw(st.sampled_from(["inf", "-inf"]))), dtype)
        lo = 0 if dtype.startswith("uint") else -9
        value = draw(st.integers(lo, 9))
        return op.const(value if not dtype.startswith("float") else value / 2, dtype)

    def expr(idx: tuple[Any, ...], dtype: str, depth: int) -> PrimExpr:
        kind = draw(st.sampled_from(["load", "const"] if depth == 0 else
                                    ["load", "const", "binary", "binary", "minmax", "select",
                                     "math", "cast", "divmod"]))  # fmt: skip
        if kind == "load":
            t = draw(st.sampled_from(tensors))
            load: PrimExpr = t[idx]
            return load.astype(dtype)
        if kind == "const":
            return const(dtype)
        if kind == "math" and dtype.startswith("float"):
            fn = getattr(op, draw(st.sampled_from(_TE_MATH)))
            return fn(expr(idx, dtype, depth - 1))  # type: ignore[no-any-return]
        if kind == "cast":
            other = draw(st.sampled_from(_TE_DTYPES))
            return op.cast(expr(idx, other, depth - 1), dtype)
        if kind == "divmod" and not dtype.startswith("float"):
            a = expr(idx, dtype, depth - 1)
            d = op.const(draw(st.integers(1, 5)), dtype)
            return op.floordiv(a, d) if draw(st.booleans()) else op.floormod(a, d)
        a, b = expr(idx, dtype, depth - 1), expr(idx, dtype, depth - 1)
        if kind == "minmax":
            return op.min_(a, b) if draw(st.booleans()) else op.max_(a, b)
        if kind == "select":
            c = draw(st.sampled_from(["lt", "eq", "ge"]))
            cond = {"lt": a < b, "eq": a == b, "ge": a >= b}[c]
            if draw(st.booleans()):
                cond = op.not_(cond) if draw(st.booleans()) else op.all_(cond, idx[-1] < 2)
            return op.if_then_else(cond, a, b)
        sym = draw(st.sampled_from(["+", "-", "*", "/"] if dtype.startswith("float") else ["+", "-", "*"]))
        return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if sym == "/" else a}[sym]

    def reduction(dtype: str, depth: int) -> Callable[..., PrimExpr]:
        k = te.reduce_axis(shape[-1], name="k")
        red = getattr(te, draw(st.sampled_from(["sum", "max", "min"])))
        where = (k < 3) if draw(st.booleans()) else None

        def fcompute(*i: Any) -> PrimExpr:
            idx = (*i[: ndim - 1], k)  # a 1-d input reduces to one element
            return red(expr(idx, dtype, depth), axis=k, where=where)  # type: ignore[no-any-return]

        return fcompute

    def elementwise(dtype: str, depth: int) -> Callable[..., PrimExpr]:
        def fcompute(*i: Any) -> PrimExpr:
            return expr(tuple(i), dtype, depth)

        return fcompute

    last = tensors[0]
    for s in range(draw(st.integers(1, max_stages))):
        dtype = draw(st.sampled_from(_TE_DTYPES))
        depth = draw(st.integers(0, 3))
        if draw(st.integers(0, 2)) == 0:
            last = te.compute(tuple(shape[:-1]) or (1,), reduction(dtype, depth), name=f"S{s}")
        else:
            last = te.compute(tuple(shape), elementwise(dtype, depth), name=f"S{s}")
            tensors.append(last)  # later stages load it at their own indices
    inputs = [t for t in tensors if t.op.__class__.__name__ == "PlaceholderOp"]
    return te.create_prim_func([*inputs, last])
