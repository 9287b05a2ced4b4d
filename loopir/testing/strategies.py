"""Hypothesis strategies for loopir: shapes, split factors, workloads, schedules, and a
stateful schedule fuzzer.

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

Run the stateful fuzzer on your workloads::

    TestMine = schedule_state_machine(st.just(my_workload)).TestCase
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from loopir.errors import ScheduleError
from loopir.schedule import Schedule
from loopir.testing.fuzz import FuzzFinding, ScheduleFuzzer, draw_workload
from loopir.testing.workloads import WORKLOADS, Workload

T = TypeVar("T")

__all__ = [
    "DrawChooser", "extents", "shapes", "split_factors", "workloads", "schedules",
    "schedule_state_machine", "COUNTER_ENV", "FINDINGS_ENV",
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
