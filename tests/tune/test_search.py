"""tune(): evolutionary search over sampling decisions, with a synthetic and a CPU runner."""

from __future__ import annotations

import pytest

import loopir
from loopir.errors import LoopIRError
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import For
from loopir.schedule.database import Database
from loopir.testing.workloads import matmul
from loopir.tune import tune


def _space(sch: loopir.Schedule) -> None:
    i, _, _ = sch.get_loops(sch.get_block("C"))
    factors = sch.sample_perfect_tile(i, n=2, max_innermost_factor=64)
    sch.split(i, factors)


def _inner_extent(func: loopir.PrimFunc) -> int:
    loops: dict[str, int] = {}
    post_order_visit(func.body, lambda n: loops.setdefault(n.loop_var.name, int(n.extent)) if isinstance(n, For) else None)
    return loops["i_1"]


def _synthetic(func: loopir.PrimFunc) -> float:
    """A cost with a known best: inner tile 8 of the 64 rows (cost 1)."""
    return abs(_inner_extent(func) - 8) + 1.0


def test_search_finds_the_known_best_decision() -> None:
    res = tune(matmul(64, 8, 12).func, _space, trials=7, population=3, seed=1, runner=_synthetic,
               show_progress=False)  # fmt: skip
    assert res.ms == 1.0 and _inner_extent(res.func) == 8
    assert len(res.measured) == 7  # 64 = 2^6: seven tilings, each measured once
    assert len({str(sorted(d.items())) for _, d in res.measured}) == 7
    # the best trace replays to the best function
    sch = loopir.Schedule(matmul(64, 8, 12).func)
    res.trace.apply_to(sch)
    loopir.assert_structural_equal(sch.func, res.func)


def test_the_same_seed_gives_the_same_search() -> None:
    a = tune(matmul(64, 8, 12).func, _space, trials=4, seed=5, runner=_synthetic, show_progress=False)
    b = tune(matmul(64, 8, 12).func, _space, trials=4, seed=5, runner=_synthetic, show_progress=False)
    assert a.measured == b.measured


def test_candidates_go_to_the_database_and_build_uses_the_best(tmp_path) -> None:
    db = Database(tmp_path / "tuned.jsonl")
    res = tune(matmul(64, 8, 12).func, _space, trials=5, seed=2, runner=_synthetic, database=db,
               show_progress=False)  # fmt: skip
    assert len(db) == 5 and len(Database(tmp_path / "tuned.jsonl")) == 5
    built = loopir.build(matmul(64, 8, 12).func, target="cpu", database=db)
    loopir.assert_structural_equal(built.func, res.func)


def test_the_cpu_runner_measures_real_candidates() -> None:
    res = tune(matmul(32, 8, 12).func, _space, trials=2, seed=0, show_progress=False)
    assert res.ms > 0 and len(res.measured) == 2


def test_failures_are_dropped_and_reported() -> None:
    def bad_space(sch: loopir.Schedule) -> None:
        sch.get_block("nope")

    with pytest.raises(LoopIRError, match="tune: no candidate could be measured; first failure: get_block"):
        tune(matmul(16, 8, 12).func, bad_space, trials=2, runner=_synthetic, show_progress=False)
    with pytest.raises(LoopIRError, match="trials must be a positive int, got 0"):
        tune(matmul(16, 8, 12).func, _space, trials=0, runner=_synthetic)


def test_a_device_pool_measures_batches_on_its_workers() -> None:
    from loopir.tune import DevicePool

    with DevicePool(["0", "1"]) as pool:
        res = tune(matmul(64, 8, 12).func, _space, trials=7, population=3, seed=1,
                   runner=_synthetic, pool=pool, show_progress=False)  # fmt: skip
    assert res.ms == 1.0 and len(res.measured) == 7


def test_the_default_runners_can_be_sent_to_workers() -> None:
    import pickle

    from loopir.tune import cpu_runner, cuda_runner

    for r in (cpu_runner(5), cuda_runner({"n": 7})):
        assert pickle.loads(pickle.dumps(r)) == r


def test_patience_stops_the_search_once_nothing_improves() -> None:
    calls = []

    def flat(func: loopir.PrimFunc) -> float:
        calls.append(func)
        return 5.0 if calls[1:] else 1.0  # the first candidate is the best there will be

    res = tune(matmul(64, 8, 12).func, _space, trials=7, population=3, seed=1, runner=flat,
               patience=2, show_progress=False)  # fmt: skip
    assert len(res.measured) == 3 and res.ms == 1.0
    with pytest.raises(LoopIRError, match="patience must be a positive int or None, got 0"):
        tune(matmul(64, 8, 12).func, _space, trials=3, runner=flat, patience=0, show_progress=False)


def test_a_search_whose_candidates_all_fail_stops_and_says_why() -> None:
    def broken(func: loopir.PrimFunc) -> float:
        raise LoopIRError("every candidate is wrong")

    with pytest.raises(LoopIRError, match="no candidate could be measured; first failure: every candidate is wrong"):
        tune(matmul(64, 8, 12).func, _space, trials=3, runner=broken, show_progress=False)
