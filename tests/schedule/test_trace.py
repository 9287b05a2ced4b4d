"""Traces: printed Python, JSON round trips, validation of malformed JSON, replay drift."""

from __future__ import annotations

import copy
import json
import re

import pytest

import loopir
from loopir.errors import ScheduleError, TraceError
from loopir.schedule import INSTRUCTION_KINDS, BlockRV, LoopRV, Trace
from tests.schedule.workloads import elementwise, matmul


def _scheduled() -> loopir.Schedule:
    sch = loopir.Schedule(matmul(60, 20, 70))
    b0 = sch.get_block("C")
    i, j, k = sch.get_loops(b0)
    i0, i1 = sch.split(i, [None, 32])
    j0, j1 = sch.split(j, [8, None])
    sch.reorder(i0, j0, i1, j1)
    f = sch.fuse(i0, j0)
    sch.bind(f, "blockIdx.x")
    sch.unroll(k)
    sch.vectorize(j1)
    return sch


EXPECTED = """\
def apply_trace(sch):
    b0 = sch.get_block("C")
    l1, l2, l3 = sch.get_loops(b0)
    l4, l5 = sch.split(l1, [None, 32], disable_predication=False)
    l6, l7 = sch.split(l2, [8, None], disable_predication=False)
    sch.reorder(l4, l6, l5, l7)
    l8 = sch.fuse(l4, l6)
    sch.bind(l8, "blockIdx.x")
    sch.unroll(l3)
    sch.vectorize(l7)"""


def test_python_text() -> None:
    sch = _scheduled()
    assert str(sch.trace) == EXPECTED
    assert sch.trace.as_python() == EXPECTED


def test_python_round_trip() -> None:
    sch = _scheduled()
    ns: dict = {}
    exec(str(sch.trace), ns)  # noqa: S102 - our own generated code
    fresh = loopir.Schedule(matmul(60, 20, 70))  # a structurally equal, separately built func
    ns["apply_trace"](fresh)
    loopir.assert_structural_equal(sch.func, fresh.func)
    assert str(fresh.trace) == EXPECTED


def test_json_round_trip() -> None:
    sch = _scheduled()
    d = sch.trace.as_json()
    assert d["version"] == 1
    text = json.dumps(d)
    tr = Trace.from_json(json.loads(text))
    assert tr.as_json() == d
    assert str(tr) == EXPECTED
    fresh = loopir.Schedule(matmul(60, 20, 70))
    tr.apply_to(fresh)
    loopir.assert_structural_equal(sch.func, fresh.func)
    # from_json also takes the JSON text itself.
    assert Trace.from_json(text).as_json() == d


def test_instruction_contents() -> None:
    sch = _scheduled()
    inst = sch.trace[2]
    assert inst.kind == "split"
    assert set(inst.inputs) == {"loop"} and isinstance(inst.inputs["loop"], LoopRV)
    assert dict(inst.attrs) == {"factors": [None, 32], "disable_predication": False}
    assert len(inst.outputs) == 2 and all(isinstance(o, LoopRV) for o in inst.outputs)
    assert isinstance(sch.trace[0].outputs[0], BlockRV)


def test_every_primitive_is_a_registered_kind() -> None:
    expected = {
        "get_block", "get_loops", "get_child_blocks", "split", "fuse", "reorder", "bind",
        "vectorize", "unroll", "parallel", "cache_read", "cache_write", "compute_at",
        "reverse_compute_at", "compute_inline", "reverse_compute_inline",
        "decompose_reduction", "pad",
    }  # fmt: skip
    assert expected <= set(INSTRUCTION_KINDS)


def test_single_output_list_prints_as_tuple() -> None:
    sch = loopir.Schedule(elementwise(4, 4))
    root_children = sch.get_child_blocks(sch.get_block("root"))
    assert len(root_children) == 1
    text = str(sch.trace)
    assert '(b1,) = sch.get_child_blocks(b0)' in text
    ns: dict = {}
    exec(text, ns)  # noqa: S102
    fresh = loopir.Schedule(elementwise(4, 4))
    ns["apply_trace"](fresh)
    assert len(fresh.trace) == 2


def test_empty_trace() -> None:
    sch = loopir.Schedule(elementwise())
    assert str(sch.trace) == "def apply_trace(sch):\n    pass"
    assert sch.trace.as_json() == {"version": 1, "instructions": []}


# --- from_json validation -----------------------------------------------------------------------


def _json() -> dict:
    return _scheduled().trace.as_json()


def _broken(index: int, **changes) -> dict:
    d = copy.deepcopy(_json())
    d["instructions"][index].update(changes)
    return d


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"version": 3, "instructions": []}, "unsupported trace version 3"),
        ({"instructions": []}, "unsupported trace version None"),
        ({"version": 1}, "'instructions' must be a list"),
        ({"version": 1, "instructions": [], "extra": 1}, "unknown top-level fields"),
        ([1, 2], "expected a dict, got list"),
        ("{not json", "not valid JSON"),
        (_broken(3, kind="spilt"), "instruction 3: unknown instruction kind 'spilt'"),
        (_broken(2, inputs=["l1"]), "instruction 2: split: 'inputs' must be a dict"),
        (_broken(2, inputs={"loop": "l99"}), "instruction 2: split: input 'loop' uses handle 'l99'"),
        (_broken(2, inputs={"loop": "b0"}), "instruction 2: split: input 'loop' must be a loop handle"),
        (_broken(2, inputs={}), "instruction 2: split: missing input 'loop'"),
        (_broken(2, attrs={}), "instruction 2: split: missing attribute 'factors'"),
        (_broken(2, attrs={"factors": {"a": 1}}), "instruction 2: split: attribute 'factors' is not a JSON literal"),
        (_broken(2, attrs={"factors": [None, 32], "bogus": 1}), "instruction 2: split: unknown parameters \\['bogus'\\]"),
        (_broken(5, outputs=[]), "instruction 5: fuse returns one handle"),
        (_broken(6, outputs=["l9"]), "instruction 6: bind returns nothing"),
        (_broken(3, outputs=["l4", "l6"]), "instruction 3: split: output handle 'l4' is already defined"),
        (_broken(4, inputs={"ordered_loops": "l4"}), "instruction 4: reorder: input 'ordered_loops' must be a list"),
        (_broken(1, outputs="l1"), "instruction 1: get_loops: 'outputs' must be a list"),
    ],
)
def test_from_json_errors(data, message) -> None:
    with pytest.raises(TraceError, match=message):
        Trace.from_json(data)


def test_from_json_instruction_fields() -> None:
    d = _json()
    d["instructions"][0]["extra"] = 1
    with pytest.raises(TraceError, match="instruction 0: fields must be exactly"):
        Trace.from_json(d)
    d = _json()
    d["instructions"][1] = "get_loops"
    with pytest.raises(TraceError, match="instruction 1: expected a dict, got str"):
        Trace.from_json(d)


def test_trace_error_is_a_schedule_error() -> None:
    assert issubclass(TraceError, ScheduleError)


# --- replay drift -------------------------------------------------------------------------------


def test_replay_factor_no_longer_fits() -> None:
    sch = loopir.Schedule(elementwise(100, 24))
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.split(i, [4, 32])  # covers 100 (inexact)
    other = loopir.Schedule(elementwise(200, 24))
    with pytest.raises(TraceError, match=r"replay of instruction 2 \(split\) failed: the product") as info:
        sch.trace.apply_to(other)
    assert info.value.primitive == "split"
    assert "def main" in str(info.value)


def test_replay_missing_block() -> None:
    sch = loopir.Schedule(elementwise())
    sch.get_block("B")
    with pytest.raises(TraceError, match=r"instruction 0 \(get_block\) failed: no block named 'B'"):
        sch.trace.apply_to(loopir.Schedule(matmul()))


def test_replay_different_loop_count() -> None:
    from loopir import te

    sch = loopir.Schedule(elementwise(4, 4))
    sch.get_loops(sch.get_block("B"))
    A = te.placeholder((4, 4, 2), "float32", name="A")
    B = te.compute((4, 4, 2), lambda i, j, k: A[i, j, k] + 1.0, name="B")
    other = loopir.Schedule(te.create_prim_func([A, B]))
    with pytest.raises(TraceError, match=r"instruction 1 \(get_loops\) produced 3 handles where the trace recorded 2"):
        sch.trace.apply_to(other)


def test_replay_thread_extent_conflict() -> None:
    """An edited trace that binds two extents to one tag is refused at the offending instruction."""
    sch = loopir.Schedule(elementwise(64, 32))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "threadIdx.x")
    sch.bind(j, "vthread.x")
    tr = Trace.from_json(
        json.loads(json.dumps(sch.trace.as_json()).replace("vthread.x", "threadIdx.x"))
    )
    with pytest.raises(TraceError, match=r"instruction 3 \(bind\) failed: threadIdx.x is already bound with extent 64") as info:
        tr.apply_to(loopir.Schedule(elementwise(64, 32)))
    assert "^^^" in str(info.value)  # the conflicting loop is marked


# --- robustness: any mutation of a valid trace gives a TraceError or a valid replay -------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 300) | st.text(max_size=4)
    | st.sampled_from(["l1", "l2", "b0", "l99", "threadIdx.x", "blockIdx.x"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=6,
)  # fmt: skip


@given(index=st.integers(0, 8), field=st.sampled_from(["kind", "inputs", "attrs", "outputs"]),
       key=st.sampled_from([None, "loop", "factors", "ordered_loops", "loops", "thread_axis", "block"]),
       value=_json_values)  # fmt: skip
def test_mutated_json_fails_cleanly(index: int, field: str, key: str | None, value) -> None:
    d = copy.deepcopy(_json())
    inst = d["instructions"][index]
    if key is None or not isinstance(inst[field], dict):
        inst[field] = value
    else:
        inst[field][key] = value
    try:
        tr = Trace.from_json(d)
    except TraceError as e:
        # The mutated instruction, or a later one that uses its (now missing) outputs.
        m = re.search(r"instruction (\d+)", str(e))
        assert m is not None and int(m.group(1)) >= index
        return
    try:
        tr.apply_to(loopir.Schedule(matmul(60, 20, 70)))
    except TraceError as e:
        assert re.search(r"instruction \d+ \(\w+\)", str(e)), str(e)


def test_handle_list_input_round_trip_and_stale_block() -> None:
    from tests.schedule.workloads import two_stage

    sch = loopir.Schedule(two_stage())
    b = sch.get_block("B")
    sch.get_block("C")
    sch.cache_read(b, "A", "shared", consumer_blocks=[b])
    sch.compute_inline(b)
    text = str(sch.trace)
    assert 'b2 = sch.cache_read(b0, "A", "shared", consumer_blocks=[b0])' in text
    d = sch.trace.as_json()
    assert d["instructions"][2]["inputs"] == {"block": "b0", "consumer_blocks": ["b0"]}
    for replay in ("python", "json"):
        fresh = loopir.Schedule(two_stage())
        if replay == "json":
            Trace.from_json(json.loads(json.dumps(d))).apply_to(fresh)
        else:
            ns: dict = {}
            exec(text, ns)  # noqa: S102
            ns["apply_trace"](fresh)
        loopir.assert_structural_equal(sch.func, fresh.func)
    with pytest.raises(ScheduleError, match=r"BlockRV\(B\) is stale: its block was removed by instruction 3 \(compute_inline\)"):
        sch.get(b)
