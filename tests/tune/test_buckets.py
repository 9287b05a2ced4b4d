"""Shape buckets (DietCode): one tuned schedule per range of sizes, dispatched per call."""

from __future__ import annotations

import json

import numpy as np
import pytest

import loopir
from loopir.errors import LoopIRError
from loopir.examples.dense import dense_func
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Var
from loopir.ir.stmt import BufferStore, For, ForKind, PrimFunc
from loopir.runtime.dispatch import ShapeDispatch, size_locations
from loopir.schedule.database import Database, DatabaseWarning, bucket_label, parse_bucket
from loopir.tune import tune_buckets
from loopir.tune.spaces import gpu_space

BUCKETS = [{"n": (1, 16)}, {"n": (17, 64)}]


def test_bucket_labels_round_trip_and_bad_ones_are_refused() -> None:
    assert bucket_label({"n": (1, 256), "m": (8, 8)}) == "m=8..8,n=1..256"
    assert parse_bucket("m=8..8,n=1..256") == {"m": (8, 8), "n": (1, 256)}
    for bad in ({"n": (0, 4)}, {"n": (5, 4)}, {"n": (True, 4)}, {}):
        with pytest.raises(LoopIRError, match="bucket"):
            bucket_label(bad)  # type: ignore[arg-type]
    for bad in ("n=1-4", "n", "n=a..b", "n=3..1"):
        with pytest.raises(LoopIRError, match="bucket"):
            parse_bucket(bad)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[PrimFunc, Database, dict]:
    func = dense_func(Var("n"), 16, 24)
    db = Database(tmp_path_factory.mktemp("db") / "tuned.jsonl")
    res = tune_buckets(func, gpu_space, BUCKETS, trials=3, population=2, database=db, show_progress=False)
    return func, db, res


def test_each_bucket_is_tuned_at_its_largest_size_and_stored_with_its_label(tuned) -> None:
    func, db, res = tuned
    assert sorted(res) == ["n=1..16", "n=17..64"] == db.buckets(func, "cpu")
    assert len(db) == 6
    assert db.best(func, "cpu") is None  # no unbucketed record


def test_build_dispatches_each_call_to_its_bucket(tuned) -> None:
    func, db, res = tuned
    mod = loopir.build(func, target="cpu", database=db)
    assert isinstance(mod, ShapeDispatch)
    for n, label in ((1, "n=1..16"), (16, "n=1..16"), (17, "n=17..64"), (64, "n=17..64"), (65, None)):
        chosen = mod.module_for({"n": n})
        if label is None:
            assert chosen is mod.fallback
            assert loopir.structural_equal(chosen.func, func)
        else:
            assert loopir.structural_equal(chosen.func, res[label].func)
        rng = np.random.default_rng(n)
        a, b = rng.random((n, 16), "float32") + 0.5, rng.random((16, 24), "float32") + 0.5
        c = np.full((n, 24), np.nan, "float32")
        mod(a, b, c)
        np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-5)


def test_a_corrupted_bucket_label_is_skipped_with_a_warning(tuned, tmp_path) -> None:
    func, db, _ = tuned
    lines = db.path.read_text().splitlines()
    rec = json.loads(lines[0])
    rec["bucket"] = "n=oops"
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([json.dumps(rec), *lines[3:]]) + "\n")
    with pytest.warns(DatabaseWarning, match="malformed label 'n=oops'"):
        mod = loopir.build(func, target="cpu", database=Database(path))
    assert [r for r, _ in mod.buckets] == [{"n": (17, 64)}]


def test_a_size_that_is_not_a_whole_dimension_cannot_dispatch() -> None:
    n = Var("n")
    A = Buffer("A", (n * 2,), "float32")
    i = Var("i")
    f = PrimFunc((A,), For(i, 0, n * 2, ForKind.SERIAL, BufferStore(A, 1.0, (i,))), name="twice")
    with pytest.raises(LoopIRError, match=r"sizes \['n'\] are not a whole dimension"):
        size_locations(f)


def test_a_bucket_over_a_size_the_function_lacks_is_refused() -> None:
    with pytest.raises(LoopIRError, match=r"bucket sizes \['m'\] are not sizes of the function"):
        ShapeDispatch(dense_func(Var("n"), 4, 4), [({"m": (1, 2)}, None)], None)
