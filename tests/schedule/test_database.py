"""The tuning database: JSON lines of measured traces, best per workload, robust loading."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import loopir
from loopir.schedule.database import Database, DatabaseWarning, workload_key
from loopir.testing.workloads import matmul


def _scheduled(factor: int) -> loopir.Schedule:
    sch = loopir.Schedule(matmul(16, 8, 12).func)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, factor])
    return sch


def test_round_trip_and_best_per_workload_and_target(tmp_path) -> None:
    path = tmp_path / "db.jsonl"
    db = Database(path)
    base = matmul(16, 8, 12).func
    db.commit(_scheduled(4).trace, base, "cuda", time_ms=0.5)
    db.commit(_scheduled(8).trace, base, "cuda", time_ms=0.2)
    db.commit(_scheduled(2).trace, base, "cpu", time_ms=0.1)
    db.commit(_scheduled(2).trace, base, "cuda", time_ms=0.3, bucket="m<=512")
    again = Database(path)  # what was written loads back
    assert len(again) == 4
    assert loopir.structural_equal(again.apply(base, "cuda"), _scheduled(8).func)
    assert loopir.structural_equal(again.apply(base, "cpu"), _scheduled(2).func)
    assert loopir.structural_equal(again.apply(base, "cuda", bucket="m<=512"), _scheduled(2).func)
    assert again.apply(matmul(16, 8, 13).func, "cuda") is None  # another workload
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert {x["format"] for x in lines} == {1} and lines[0]["workload"] == workload_key(base)


def test_the_key_ignores_the_function_name() -> None:
    import attrs

    base = matmul(16, 8, 12).func
    assert workload_key(base) == workload_key(attrs.evolve(base, name="other"))
    assert workload_key(base) != workload_key(matmul(16, 8, 13).func)


def test_corrupted_and_foreign_lines_are_skipped_with_a_warning(tmp_path) -> None:
    path = tmp_path / "db.jsonl"
    db = Database(path)
    base = matmul(16, 8, 12).func
    db.commit(_scheduled(4).trace, base, "cpu", time_ms=0.5)
    good = path.read_text()
    foreign = json.loads(good)
    foreign["loopir"] = "0.0.1"
    broken_trace = json.loads(good)
    broken_trace["trace"] = {"version": 99}
    path.write_text(good + "{not json\n" + json.dumps(foreign) + "\n[1, 2]\n" + json.dumps(broken_trace) + "\n")
    with pytest.warns(DatabaseWarning) as record:
        loaded = Database(path)
    messages = [str(w.message) for w in record]
    assert len(loaded) == 1 and len(messages) == 4
    assert f"{path}:2: unreadable record" in messages[0]
    assert "loopir '0.0.1'" in messages[1]
    assert all(m.endswith("; skipped") for m in messages)


def test_a_trace_that_no_longer_applies_gives_the_untuned_function(tmp_path) -> None:
    from loopir.testing.workloads import shared_transpose

    db = Database(tmp_path / "db.jsonl")
    base = matmul(16, 8, 12).func
    # a trace recorded on another function (its block "B" does not exist here), stored under
    # this workload's key: what a stale or hand-edited database holds
    db.commit(shared_transpose(64, 64).trace, base, "cpu", time_ms=0.1)
    with pytest.warns(DatabaseWarning, match="the best trace for 'main' no longer applies"):
        assert db.apply(base, "cpu") is None
    with pytest.warns(DatabaseWarning):
        assert loopir.build(base, target="cpu", database=db).func is base


def test_build_applies_the_database(tmp_path) -> None:
    db = Database(tmp_path / "db.jsonl")
    base = matmul(16, 8, 12).func
    db.commit(_scheduled(8).trace, base, "cpu", time_ms=0.2)
    mod = loopir.build(base, target="cpu", database=db)
    assert loopir.structural_equal(mod.func, _scheduled(8).func)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing stored for the CUDA target: untouched
        assert loopir.build(base, target="cpu", database=tmp_path / "none.jsonl").func is base
    a = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((8, 12)).astype(np.float32)
    c = np.zeros((16, 12), np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    rt = loopir.build(loopir.IRModule({"mm": base}), target="cpu", database=str(tmp_path / "db.jsonl"))
    assert loopir.structural_equal(rt["mm"].func, attrs_renamed(_scheduled(8).func, "mm"))


def attrs_renamed(func, name):
    import attrs

    return attrs.evolve(func, name=name)
