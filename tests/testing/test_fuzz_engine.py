"""The fuzzer must catch what it claims to catch: inject each kind of bug and see it reported."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

import loopir
import loopir.schedule.loops as loops_mod
from loopir.errors import ScheduleError
from loopir.ir.stmt import For, ForKind
from loopir.schedule import Schedule
from loopir.testing.fuzz import Call, FuzzFinding, RandomChooser, ScheduleFuzzer, fuzz_many
from loopir.testing.workloads import matmul


def _fuzzer() -> ScheduleFuzzer:
    return ScheduleFuzzer(matmul(6, 4, 5))


def _split_call(fz: ScheduleFuzzer, factors: list[Any]) -> Call:
    loop = fz.loops[0]  # loop i of C
    return Call("split", (loop, factors), {}, f"sch.split(l1, {factors!r})")


def test_valid_steps_pass_and_are_in_the_reproducer() -> None:
    fz = _fuzzer()
    assert fz.step(_split_call(fz, [None, 4]))
    assert not fz.step(_split_call(fz, [0, None]))  # a ScheduleError (stale / bad factor)
    fz.finish()
    text = fz.reproducer()
    assert "make_workload('matmul'" in text and "sch.split(l1, [None, 4])" in text
    # The reproducer runs and rebuilds the same function.
    ns: dict[str, Any] = {}
    exec(text, ns)  # noqa: S102 - our own text
    loopir.assert_structural_equal(ns["sch"].func, fz.sch.func)


def test_wrong_output_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = loops_mod.split

    def wrong_split(func: Any, var: Any, factors: Any, *rest: Any) -> Any:
        # Drop the last iteration of the loop: a plausible off-by-one.
        new, outs = real(func, var, factors, *rest)
        from loopir.ir.functor import Mutator

        class Shrink(Mutator):
            def visit_For(self, node: For) -> Any:
                node = self.generic_visit(node)
                if node.loop_var is outs[0]:
                    import attrs

                    node = attrs.evolve(node, extent=node.extent - 1)
                return node

        return new.__class__(new.params, Shrink().visit(new.body), new.name, new.attrs), outs

    monkeypatch.setattr(loops_mod, "split", wrong_split)
    fz = _fuzzer()
    with pytest.raises(FuzzFinding, match=r"(?s)\[wrong-output\] after split.*parameter C differs"):
        fz.step(_split_call(fz, [3, 2]))


def test_non_schedule_error_is_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise KeyError("oops")

    monkeypatch.setattr(loops_mod, "split", broken)
    fz = _fuzzer()
    with pytest.raises(FuzzFinding, match=r"(?s)\[crash\] split raised KeyError.*# <- fails here"):
        fz.step(_split_call(fz, [None, 2]))


def test_changed_schedule_on_error_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Schedule.unroll

    def sneaky(self: Schedule, loop: Any) -> None:
        self._func = matmul(6, 4, 5).func  # a different object: "changed"
        raise ScheduleError("refused", primitive="unroll")

    monkeypatch.setattr(Schedule, "unroll", sneaky)
    fz = _fuzzer()
    with pytest.raises(FuzzFinding, match=r"\[changed-on-error\] unroll raised ScheduleError"):
        fz.step(Call("unroll", (fz.loops[0],), {}, "sch.unroll(l1)"))
    monkeypatch.setattr(Schedule, "unroll", real)


def test_bad_replay_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = loopir.Trace.as_python

    def drop_last(self: Any, func_name: str = "apply_trace") -> str:
        return "\n".join(real(self, func_name).splitlines()[:-1])

    fz = _fuzzer()
    fz.step(_split_call(fz, [None, 4]))
    monkeypatch.setattr(loopir.Trace, "as_python", drop_last)
    with pytest.raises(FuzzFinding, match=r"\[replay-python\]"):
        fz.finish()


def test_bad_json_replay_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = loopir.Trace.as_json

    def drop_attr(self: Any) -> Any:
        d = real(self)
        d["instructions"][-1]["attrs"]["factors"] = [None, 2]
        return d

    fz = _fuzzer()
    fz.step(_split_call(fz, [None, 4]))
    monkeypatch.setattr(loopir.Trace, "as_json", drop_attr)
    with pytest.raises(FuzzFinding, match=r"\[replay-json\].*StructuralEqualError"):
        fz.finish()


def test_a_script_that_does_not_read_back_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    import loopir.ir.printer as printer

    real = printer._Printer.for_

    def wrong_kind(self: Any, s: Any, depth: int) -> None:  # every loop printed as unrolled
        real(self, attrs.evolve(s, kind=ForKind.UNROLLED) if s.kind is ForKind.SERIAL else s, depth)

    fz = _fuzzer()
    fz.step(_split_call(fz, [None, 4]))
    monkeypatch.setattr(printer._Printer, "for_", wrong_kind)
    with pytest.raises(FuzzFinding, match=r"\[script\].*StructuralEqualError"):
        fz.finish()


def test_fuzz_many_collects_instead_of_stopping() -> None:
    seen: list[FuzzFinding] = []
    n, steps, findings = fuzz_many(3, 4, first_seed=7, on_finding=seen.append)
    assert n == 3 and steps == 12 and findings == seen


def test_draws_are_reproducible() -> None:
    def texts(seed: int) -> list[str]:
        ch = RandomChooser(seed)
        fz = _fuzzer()
        out = []
        for _ in range(6):
            c = fz.draw(ch)
            out.append(c.text)
            fz.step(c)
        return out

    assert texts(5) == texts(5)
    assert texts(5) != texts(6)


def test_bind_for_gpu_binds_each_nest_and_keeps_semantics() -> None:
    from loopir.ir.stmt import ForKind
    from loopir.testing import check_equivalent
    from loopir.testing.fuzz import bind_for_gpu
    from loopir.testing.workloads import matmul_bias_relu

    w = matmul_bias_relu(4, 3, 5)
    sch = Schedule(w.func)
    assert bind_for_gpu(sch) == 6  # three nests, blockIdx.x + threadIdx.x each
    for name in ("C", "BiasAdd", "D"):
        outer = [sch.get(lp) for lp in sch.get_loops(sch.get_block(name))][:2]
        assert [lp.kind for lp in outer] == [ForKind.THREAD_BINDING] * 2
        assert [lp.thread_tag for lp in outer] == ["blockIdx.x", "threadIdx.x"]
    assert bind_for_gpu(sch) == 0  # idempotent
    check_equivalent(w.func, sch.func)
    check_equivalent(w.func, loopir.lower(sch.func))


def test_finish_checks_the_gpu_bound_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    import loopir.testing.fuzz as fuzz_mod

    seen: list[int] = []
    real = fuzz_mod.bind_for_gpu

    def spy(sch: Any) -> int:
        n = real(sch)
        seen.append(n)
        return n

    monkeypatch.setattr(fuzz_mod, "bind_for_gpu", spy)
    fz = _fuzzer()
    fz.finish()
    assert seen == [2]  # matmul: i -> blockIdx.x, j -> threadIdx.x
    assert len(fz.sch.trace) == 2  # the schedule itself was not touched (a copy was bound)


def test_the_fuzzer_covers_the_primitive_registry() -> None:
    """Every registered primitive is fuzzed or excluded with a reason (no hand-synced list can
    silently miss a new one), and every fuzzed name is a registered primitive."""
    from loopir.schedule.schedule import INSTRUCTION_KINDS
    from loopir.testing.fuzz import EXCLUDED, PRIMITIVES

    assert set(PRIMITIVES).isdisjoint(EXCLUDED)
    assert set(PRIMITIVES) | set(EXCLUDED) == set(INSTRUCTION_KINDS)
    assert all(reason for reason in EXCLUDED.values())


def test_the_fuzzer_draws_every_primitive_it_lists() -> None:
    from loopir.testing.fuzz import PRIMITIVES, RandomChooser, ScheduleFuzzer
    from loopir.testing.workloads import matmul

    seen: set[str] = set()
    for seed in range(60):
        fz = ScheduleFuzzer(matmul(16, 8, 12))
        ch = RandomChooser(seed)
        for _ in range(12):
            seen.add(fz.draw(ch).kind)
    assert seen == set(PRIMITIVES)


def _bound_reduction(fz: ScheduleFuzzer) -> None:
    """matmul with k reordered outside j and bound to threadIdx.y: bind accepts it, and
    LowerCrossThreadReduction refuses it (j, a spatial loop, lies between k and the block)."""
    i, j, k = fz.loops[:3]
    assert fz.step(Call("reorder", (k, j), {}, "sch.reorder(l3, l2)"))
    assert fz.step(Call("bind", (k, "threadIdx.y"), {}, "sch.bind(l3, 'threadIdx.y')"))


def test_a_cross_thread_reduction_refused_at_lowering_is_not_a_finding() -> None:
    """Fuzz finding (issue 29): random schedules that bind a reduction loop in a way
    LowerCrossThreadReduction refuses, with a PassError that says why, made the CI fuzz
    test fail with a "lower" finding. The refusal is counted instead."""
    fz = ScheduleFuzzer(matmul(6, 4, 5), gpu_lowering=False)
    _bound_reduction(fz)
    with pytest.raises(loopir.errors.PassError, match="LowerCrossThreadReduction"):
        loopir.lower(fz.sch.func)
    fz.finish()
    assert fz.lowering_refused == 2  # local padding off and on


def test_other_pass_errors_stay_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    from loopir.errors import PassError

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise PassError("pass Simplify: oops")

    fz = _fuzzer()
    monkeypatch.setattr(loopir, "lower", broken)
    with pytest.raises(FuzzFinding, match=r"\[lower\].*pass Simplify: oops"):
        fz.finish()
