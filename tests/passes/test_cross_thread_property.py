"""Property: any split, order and threadIdx binding of a row reduction's loops lowers to what
the unscheduled function computes, on the CPU executor with threads in random orders
(LowerCrossThreadReduction, issue 29)."""

from __future__ import annotations

import math

from hypothesis import assume, given, settings
from hypothesis import strategies as st

import loopir
from loopir import te
from loopir.testing import check_equivalent

THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


def _base(op: str, rows: int, n: int, dtype: str) -> loopir.PrimFunc:
    A = te.placeholder((rows, n), dtype, name="A")
    k = te.reduce_axis(n, name="k")
    red = {"sum": te.sum, "max": te.max, "min": te.min}[op]
    S = te.compute((rows,), lambda i: red(A[i, k], axis=k), name="S")
    return te.create_prim_func([A, S])


@st.composite
def row_reduction_schedules(draw):
    """(unscheduled function, scheduled function, whether local padding is on, a description)."""
    op = draw(st.sampled_from(["sum", "max", "min"]))
    dtype = draw(st.sampled_from(["int32", "float32"]))
    rows, n = draw(st.integers(1, 3)), draw(st.integers(1, 200))
    base = _base(op, rows, n, dtype)
    sch = loopir.Schedule(base)
    i, kk = sch.get_loops(sch.get_block("S"))
    parts = draw(st.integers(1, 4))
    loops = [kk]
    factors: list[int | None] = []
    if parts > 1:
        factors = [draw(st.integers(1, 12)) for _ in range(parts - 1)]
        factors.insert(draw(st.integers(0, parts - 1)), None)
        loops = list(sch.split(kk, factors))
    extents = [sch.get(lp).extent.value for lp in loops]
    bound = draw(st.lists(st.integers(0, parts - 1), min_size=1, max_size=min(parts, 2), unique=True))
    tags = draw(st.permutations(THREAD_TAGS))[: len(bound) + 1]
    threads = math.prod(extents[b] for b in bound)
    assume(threads <= 256 and all(extents[b] <= 64 for b, t in zip(bound, tags) if t == "threadIdx.z"))
    order = draw(st.permutations(range(parts)))
    placed = [loops[j] for j in order]
    # the row loop: serial or blockIdx.x outside, or bound to the remaining thread axis,
    # outside the reduction loops or among them (threads run in parallel anyway)
    row = draw(st.sampled_from(["serial", "blockIdx.x", "thread"]))
    if row == "thread" and rows * threads <= 256:
        sch.bind(i, tags[-1])
        placed.insert(draw(st.integers(0, parts)), i)
    else:
        row = "serial" if row == "thread" else row
        if row == "blockIdx.x":
            sch.bind(i, "blockIdx.x")
        placed.insert(0, i)
    if len(placed) > 1:
        sch.reorder(*placed)
    for b, tag in zip(bound, tags):
        sch.bind(loops[b], tag)
    serial = [j for j in range(parts) if j not in bound]
    if serial and draw(st.booleans()):
        sch.unroll(loops[draw(st.sampled_from(serial))])
    pad = draw(st.booleans())
    desc = (f"{op} {dtype} {rows}x{n} split {factors} bound {[(b, t) for b, t in zip(bound, tags)]} "
            f"order {list(order)} row {row} pad {pad}")  # fmt: skip
    return base, sch.func, pad, desc


@settings(max_examples=30, deadline=None)
@given(case=row_reduction_schedules())
def test_scheduled_and_lowered_equals_unscheduled(case) -> None:
    base, scheduled, pad, desc = case
    with loopir.PassContext(config={"tir.enable_local_pad": pad}):
        low = loopir.lower(scheduled)
    # sums of floats in another order: compared normwise; max/min and integers exactly
    norm = "float32" in desc and desc.startswith("sum")
    check_equivalent(base, low, thread_order="random", norm=norm)


def test_the_strategy_draws_every_form() -> None:
    """The strategy reaches serial loops outside the thread loop, y/z reductions and a thread
    loop of the row among the reduction loops (so the property covers them)."""
    seen: set[str] = set()

    @settings(max_examples=200, deadline=None, database=None)
    @given(case=row_reduction_schedules())
    def draw(case) -> None:
        _, f, _, desc = case
        text = loopir.script(f)
        if "threadIdx.y" in desc.split("row")[0] or "threadIdx.z" in desc.split("row")[0]:
            seen.add("yz")
        if "row thread" in desc:
            seen.add("row thread")
        lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("for k")]
        kinds = ["thread" if "thread_binding" in ln else "serial" for ln in lines]
        if "serial" in kinds and "thread" in kinds and kinds.index("serial") < kinds.index("thread"):
            seen.add("serial outside")

    draw()
    assert seen == {"yz", "row thread", "serial outside"}, seen
