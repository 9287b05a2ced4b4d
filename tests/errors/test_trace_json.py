"""Malformed and wrong-version trace JSON: always a TraceError naming what is wrong."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

import loopir
from loopir.errors import ScheduleError, TraceError
from loopir.testing.workloads import matmul


def _trace_json() -> dict[str, Any]:
    sch = loopir.Schedule(matmul(8, 6, 5).func)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    i0, i1 = sch.split(i, [None, 4])
    sch.reorder(i0, j, i1)
    a = sch.cache_read(b, "A", "shared")
    sch.compute_at(a, j)
    return sch.trace.as_json()


def test_well_formed_trace_round_trips() -> None:
    d = _trace_json()
    tr = loopir.Trace.from_json(json.dumps(d))
    assert tr.as_json() == d


@pytest.mark.parametrize(
    "text, match",
    [
        ("{", "not valid JSON"),
        ("", "not valid JSON"),
        ("[1, 2]", "expected a dict, got list"),
        ("42", "expected a dict, got int"),
        ('{"instructions": []}', "unsupported trace version None"),
    ],
)
def test_unparseable_json(text: str, match: str) -> None:
    with pytest.raises(TraceError, match=match):
        loopir.Trace.from_json(text)


@pytest.mark.parametrize("version", [0, 3, "1", 1.5, None, [1], True, 1.0, 2.0])
def test_wrong_version(version: Any) -> None:
    d = _trace_json()
    d["version"] = version
    with pytest.raises(TraceError, match=r"unsupported trace version .*reads version 1"):
        loopir.Trace.from_json(d)


def _mutate(path: list[Any], value: Any) -> dict[str, Any]:
    d = copy.deepcopy(_trace_json())
    node: Any = d
    for p in path[:-1]:
        node = node[p]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return d


_DELETE = object()


@pytest.mark.parametrize(
    "path, value, match",
    [
        (["instructions"], {"a": 1}, "'instructions' must be a list"),
        (["instructions"], _DELETE, "'instructions' must be a list"),
        (["extra"], 1, "unknown top-level fields"),
        (["instructions", 0], "get_block", "instruction 0: expected a dict"),
        (["instructions", 2, "kind"], "spilt", "instruction 2: unknown instruction kind 'spilt'"),
        (["instructions", 2, "kind"], 7, "instruction 2: unknown instruction kind 7"),
        (["instructions", 2, "outputs"], _DELETE, "instruction 2: fields must be exactly"),
        (["instructions", 2, "inputs"], [], "instruction 2: split: 'inputs' must be a dict"),
        (["instructions", 2, "attrs"], None, "instruction 2: split: 'attrs' must be a dict"),
        (["instructions", 2, "inputs", "loop"], "l99", "uses handle 'l99' defined by no earlier"),
        (["instructions", 2, "inputs", "loop"], "b0", "must be a loop handle, got 'b0'"),
        (["instructions", 2, "inputs", "loop"], 3, "input 'loop' must name a handle, got 3"),
        (["instructions", 2, "inputs", "loop"], None, "input 'loop' may not be null"),
        (["instructions", 2, "inputs", "bogus"], "l1", r"unknown parameters \['bogus'\]"),
        (["instructions", 2, "attrs", "factors"], {"x": 1}, "is not a JSON literal"),
        (["instructions", 2, "attrs"], {}, "missing attribute 'factors'"),
        (["instructions", 2, "outputs"], ["l1", "l9"], "output handle 'l1' is already defined"),
        (["instructions", 2, "outputs"], ["", "l9"], "output names must be non-empty strings"),
        (["instructions", 3, "outputs"], ["l100"], "reorder returns nothing"),
        (["instructions", 0, "outputs"], [], "get_block returns one handle"),
    ],
)
def test_malformed_fields(path: list[Any], value: Any, match: str) -> None:
    with pytest.raises(TraceError, match=match):
        loopir.Trace.from_json(_mutate(path, value))


def test_trace_error_is_a_schedule_error() -> None:
    with pytest.raises(ScheduleError):
        loopir.Trace.from_json("{")


def test_valid_json_that_does_not_fit_the_function_fails_replay_with_index() -> None:
    # Well-formed, but instruction 2 splits by a non-int factor: replay names it.
    d = _mutate(["instructions", 2, "attrs", "factors"], ["x", None])
    tr = loopir.Trace.from_json(d)
    sch = loopir.Schedule(matmul(8, 6, 5).func)
    with pytest.raises(TraceError, match=r"replay of instruction 2 \(split\) failed"):
        tr.apply_to(sch)
    # A trace replayed on a different function (no block "C") fails at instruction 0.
    from loopir.testing.workloads import reduce_max

    with pytest.raises(TraceError, match=r"instruction 0 \(get_block\)"):
        loopir.Trace.from_json(_trace_json()).apply_to(loopir.Schedule(reduce_max().func))


def test_truncated_json_text() -> None:
    text = json.dumps(_trace_json())
    for cut in (1, len(text) // 3, len(text) - 1):
        with pytest.raises(TraceError, match="not valid JSON"):
            loopir.Trace.from_json(text[:cut])
