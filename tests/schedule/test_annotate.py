"""sch.annotate / sch.unannotate: values, errors, trace round-trips, effect on lowering."""

from __future__ import annotations

import json

import pytest

import loopir
from loopir.errors import ScheduleError
from loopir.ir.stmt import For
from loopir.schedule import Trace
from loopir.schedule.trace import INSTRUCTION_KINDS


def _dense() -> tuple[loopir.Schedule, object, object]:
    sch = loopir.examples.dense(60, 50, 70)
    c = sch.get_block("C")
    k0 = sch.get_loops(c)[3]
    return sch, c, k0


def test_kinds_registered() -> None:
    assert {"annotate", "unannotate"} <= set(INSTRUCTION_KINDS)


@pytest.mark.parametrize("value", [True, False, 0, 7, -2, 1.5, "", "s", [1, "a", [2.5, False]], []])
def test_annotate_loop_and_block_values(value: object) -> None:
    sch, c, k0 = _dense()
    before = sch.func
    sch.annotate(k0, "user.key", value)
    loop = sch.get(k0)
    assert isinstance(loop, For) and loop.annotations["user.key"] == value
    assert type(loop.annotations["user.key"]) is type(value)
    sch.annotate(c, "user.key", value)
    assert sch.get(c).annotations["user.key"] == value
    # only the annotations changed: removing them gives the original function back
    sch.unannotate(k0, "user.key")
    sch.unannotate(c, "user.key")
    loopir.assert_structural_equal(before, sch.func)


def test_tuple_becomes_list_and_value_is_replaced() -> None:
    sch, _, k0 = _dense()
    sch.annotate(k0, "k", (1, 2))
    assert sch.get(k0).annotations["k"] == [1, 2]
    sch.annotate(k0, "k", "again")
    assert dict(sch.get(k0).annotations) == {"k": "again"}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("", True, "annotation key must be a non-empty str"),
        (3, True, "annotation key must be a non-empty str, got 3"),
        ("k", None, "value must be a bool, int, float, str or a list of those, got None"),
        ("k", {"a": 1}, "must be None, a bool, int, float, str or a list of those"),
        ("k", [1, object], "must be None, a bool, int, float, str or a list of those"),
    ],
)
def test_annotate_errors_leave_schedule_unchanged(key: object, value: object, message: str) -> None:
    sch, _, k0 = _dense()
    func, n = sch.func, len(sch.trace)
    with pytest.raises(ScheduleError, match="annotate") as info:
        sch.annotate(k0, key, value)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert sch.func is func and len(sch.trace) == n


def test_unannotate_missing_key_names_existing_ones() -> None:
    sch, c, k0 = _dense()
    sch.annotate(k0, "a", 1)
    with pytest.raises(ScheduleError, match=r"unannotate: loop k_0 has no annotation 'b'; it has \['a'\]"):
        sch.unannotate(k0, "b")
    with pytest.raises(ScheduleError, match="block 'C' has no annotation 'a'"):
        sch.unannotate(c, "a")


def test_bad_handle() -> None:
    sch, _, _ = _dense()
    with pytest.raises(ScheduleError, match="annotate: argument block_or_loop must be a BlockRV or LoopRV"):
        sch.annotate("k_0", "a", 1)  # type: ignore[arg-type]


def _annotated() -> loopir.Schedule:
    sch, c, k0 = _dense()
    sch.annotate(k0, "loopir.prefetch_shared", True)
    sch.annotate(c, "meta", [1, 2.5, "x", [False]])
    sch.unannotate(c, "meta")
    sch.annotate(c, "meta2", "kept")
    return sch


def test_trace_python_round_trip() -> None:
    sch = _annotated()
    text = str(sch.trace)
    assert 'sch.annotate(l' in text and ', "loopir.prefetch_shared", True)' in text
    assert 'sch.annotate(b' in text and '"meta", [1, 2.5, "x", [False]])' in text
    assert 'sch.unannotate(b' in text
    ns: dict = {}
    exec(text, ns)  # noqa: S102 - our own generated code
    fresh = loopir.Schedule(loopir.examples.dense_func(60, 50, 70))
    ns["apply_trace"](fresh)
    loopir.assert_structural_equal(sch.func, fresh.func)
    assert str(fresh.trace) == text


def test_trace_json_round_trip() -> None:
    sch = _annotated()
    d = json.loads(json.dumps(sch.trace.as_json()))
    kinds = [i["kind"] for i in d["instructions"]]
    assert kinds.count("annotate") == 3 and kinds.count("unannotate") == 1
    ann = [i for i in d["instructions"] if i["kind"] == "annotate"]
    assert ann[0]["attrs"] == {"ann_key": "loopir.prefetch_shared", "ann_val": True}
    assert ann[1]["attrs"]["ann_val"] == [1, 2.5, "x", [False]]
    tr = Trace.from_json(d)
    fresh = loopir.Schedule(loopir.examples.dense_func(60, 50, 70))
    tr.apply_to(fresh)
    loopir.assert_structural_equal(sch.func, fresh.func)
    got = fresh.get(fresh.get_loops(fresh.get_block("C"))[3])
    assert got.annotations["loopir.prefetch_shared"] is True


def test_annotation_survives_lowering() -> None:
    """Loop annotations reach the lowered IR; the prefetch request is consumed by the pass
    that serves it (so lowering twice does not prefetch the prefetch registers)."""
    sch = _annotated()
    k0_rv = sch.get_loops(sch.get_block("C"))[3]
    sch.annotate(k0_rv, "user.note", "kept")
    lowered = loopir.lower(sch.func)
    loops = []
    from loopir.ir.functor import post_order_visit

    post_order_visit(lowered.body, lambda n: loops.append(n) if isinstance(n, For) else None)
    (k0,) = [f for f in loops if f.loop_var.name == "k_0"]
    assert k0.annotations["user.note"] == "kept"
    assert "loopir.prefetch_shared" not in k0.annotations
    assert "_prefetch = T.allocate" in lowered.script()
