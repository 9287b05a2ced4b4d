"""Sampling instructions: draws, decisions in traces (Python, JSON, replay), tuner mutations."""

from __future__ import annotations

import collections
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.errors import ScheduleError, TraceError
from loopir.ir.stmt import For
from loopir.schedule import Trace
from loopir.schedule.sampling import INLINE, ROOT, draw_perfect_tile
from loopir.schedule.trace import ExprRV
from loopir.testing import check_equivalent
from tests.schedule.workloads import elementwise, matmul, two_stage


def _tilings(extent: int, n: int, inner_max: int) -> set[tuple[int, ...]]:
    """Every valid tiling, by brute force (the reference the sampler must cover)."""
    if n == 1:
        return {(extent,)} if extent <= inner_max else set()
    out = set()
    for d in range(1, extent + 1):
        if extent % d == 0:
            out |= {(d, *rest) for rest in _tilings(extent // d, n - 1, inner_max)}
    return out


def _tiled(seed: int | None = None, n: int = 2, m: int = 64) -> loopir.Schedule:
    sch = loopir.Schedule(matmul(m, 12, 20), seed=seed)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, sch.sample_perfect_tile(i, n=n, max_innermost_factor=16))
    return sch


def _replayed(trace: Trace, func: loopir.PrimFunc, seed: int | None = None) -> loopir.Schedule:
    sch = loopir.Schedule(func, seed=seed)
    trace.apply_to(sch)
    return sch


# --- sample_perfect_tile ----------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    extent=st.integers(1, 720), n=st.integers(1, 4), inner=st.integers(1, 40), seed=st.integers(0, 2**32)
)
def test_every_sampled_tiling_is_valid(extent: int, n: int, inner: int, seed: int) -> None:
    f = elementwise(extent, 3)
    sch = loopir.Schedule(f, seed=seed)
    i, _ = sch.get_loops(sch.get_block("B"))
    if n == 1 and extent > inner:
        with pytest.raises(ScheduleError, match="sample_perfect_tile"):
            sch.sample_perfect_tile(i, n=n, max_innermost_factor=inner)
        assert len(sch.trace) == 2  # a failing primitive records nothing
        return
    for _ in range(5):
        fs = sch.sample_perfect_tile(i, n=n, max_innermost_factor=inner)
        assert len(fs) == n and all(isinstance(v, ExprRV) and v >= 1 for v in fs)
        assert math.prod(fs) == extent and fs[-1] <= inner


@pytest.mark.parametrize(("extent", "n", "inner"), [(12, 2, 16), (24, 3, 4), (16, 4, 16), (7, 2, 3)])
def test_perfect_tile_covers_every_tiling_about_uniformly(extent: int, n: int, inner: int) -> None:
    import random

    rng = random.Random(1)
    valid = _tilings(extent, n, inner)
    draws = collections.Counter(tuple(draw_perfect_tile(rng, extent, n, inner)) for _ in range(200 * len(valid)))
    assert set(draws) == valid
    # Uniform: each of the k tilings expects 200 draws; 100 is > 7 standard deviations away.
    assert min(draws.values()) > 100, draws


def test_perfect_tile_large_extent_is_exact() -> None:
    import random

    fs = draw_perfect_tile(random.Random(0), 2**20 * 3**5, 4, 16)
    assert math.prod(fs) == 2**20 * 3**5 and fs[-1] <= 16


def test_perfect_tile_needs_a_constant_extent() -> None:
    sch = loopir.Schedule(elementwise(loopir.Var("n"), 4))
    i, _ = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="sample_perfect_tile: .*non-constant extent"):
        sch.sample_perfect_tile(i, n=2)


@pytest.mark.parametrize(("kw", "match"), [({"n": 0}, "n must be"), ({"n": 2, "max_innermost_factor": 0}, "max_innermost")])
def test_perfect_tile_bad_arguments(kw: dict, match: str) -> None:
    sch = loopir.Schedule(elementwise(8, 4))
    i, _ = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match=match):
        sch.sample_perfect_tile(i, **kw)


# --- determinism and seeds --------------------------------------------------------------------
def test_same_seed_same_decisions_and_seeds_differ() -> None:
    traces = {s: [str(_tiled(s, n=3).trace) for _ in range(2)] for s in range(8)}
    for a, b in traces.values():
        assert a == b
    assert len({t[0] for t in traces.values()}) > 1  # 8 seeds over 19 tilings of 64 into 3


def test_default_seed_is_zero() -> None:
    assert str(_tiled(None, n=3).trace) == str(_tiled(0, n=3).trace)


def test_copy_continues_the_random_state() -> None:
    sch = _tiled(5)
    other = sch.copy()
    _, j, _ = sch.get_loops(sch.get_block("C"))[1:]
    _, j2, _ = other.get_loops(other.get_block("C"))[1:]
    assert sch.sample_perfect_tile(j, 2) == other.sample_perfect_tile(j2, 2)


def test_bad_seed() -> None:
    with pytest.raises(ScheduleError, match="seed must be an int"):
        loopir.Schedule(elementwise(4, 4), seed="1")  # type: ignore[arg-type]


# --- sample_categorical -----------------------------------------------------------------------
def test_categorical_frequencies_follow_probs() -> None:
    sch = loopir.Schedule(elementwise(4, 4), seed=7)
    cands, probs = [1, 2, 4, 8], [0.5, 0.3, 0.2, 0.0]
    counts = collections.Counter(int(sch.sample_categorical(cands, probs)) for _ in range(1000))
    assert counts[8] == 0
    for c, p in zip(cands, probs):
        if p >= 0.2:  # expected >= 200 of 1000: a loose bound, no chi-square needed
            assert counts[c] >= 100, counts
    assert counts[1] > counts[4]


@pytest.mark.parametrize(
    ("cands", "probs", "match"),
    [([], [], "non-empty"), ([1, 2], [1.0], "one per candidate"), ([1, "a"], [1, 1], "ints"),
     ([1, 2], [0, 0], "all be zero"), ([1, 2], [-1, 2], ">= 0"), ([1, 2], [float("nan"), 1], ">= 0")],
)  # fmt: skip
def test_categorical_bad_arguments(cands: list, probs: list, match: str) -> None:
    sch = loopir.Schedule(elementwise(4, 4))
    with pytest.raises(ScheduleError, match=f"sample_categorical: .*{match}"):
        sch.sample_categorical(cands, probs)


def test_categorical_decision_is_the_index() -> None:
    sch = loopir.Schedule(elementwise(4, 4))
    v = sch.sample_categorical([16, 32, 64], [1, 1, 1], decision=2)
    assert v == 64 and sch.get(v) == 64 and sch.trace[0].attrs["decision"] == 2
    with pytest.raises(ScheduleError, match=r"invalid decision=3: expected a candidate index in \[0, 3\)"):
        sch.sample_categorical([16, 32, 64], [1, 1, 1], decision=3)


# --- decisions in traces ----------------------------------------------------------------------
def _sampled(seed: int = 11) -> loopir.Schedule:
    """Tile sizes and an unroll choice sampled, then used by split and annotate."""
    sch = loopir.Schedule(matmul(48, 12, 40), seed=seed)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=8))
    j0, j1, j2 = sch.split(j, sch.sample_perfect_tile(j, n=3, max_innermost_factor=4))
    sch.reorder(i0, j0, i1, j1, k, j2)
    sch.annotate(i0, "pragma_auto_unroll_max_step", sch.sample_categorical([0, 16, 64], [0.4, 0.3, 0.3]))
    return sch


def test_decisions_print_and_split_refers_to_the_samples() -> None:
    sch = _sampled()
    text = str(sch.trace)
    d2 = sch.trace.decisions[2]
    assert f"v4, v5 = sch.sample_perfect_tile(l1, 2, max_innermost_factor=8, decision={d2})" in text
    assert "sch.split(l1, [v4, v5]," in text
    assert 'sch.annotate(l6, "pragma_auto_unroll_max_step", v14)' in text


def test_decisions_round_trip_python_json_and_replay() -> None:
    sch = _sampled()
    f = matmul(48, 12, 40)
    ns: dict = {}
    exec(str(sch.trace), ns)  # noqa: S102
    from_py = loopir.Schedule(f, seed=999)  # the seed must not matter: decisions are recorded
    ns["apply_trace"](from_py)
    loopir.assert_structural_equal(sch.func, from_py.func)
    assert str(from_py.trace) == str(sch.trace)
    d = sch.trace.as_json()
    assert d["version"] == 2 and {"rv": "v4"} in d["instructions"][3]["attrs"]["factors"]
    tr = Trace.from_json(d)
    assert tr.as_json() == d and str(tr) == str(sch.trace)
    replayed = _replayed(tr, f, seed=12345)
    loopir.assert_structural_equal(sch.func, replayed.func)
    assert replayed.trace.decisions == sch.trace.decisions


def test_trace_without_references_stays_version_1() -> None:
    sch = loopir.Schedule(elementwise(8, 4))
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.split(i, [int(v) for v in sch.sample_perfect_tile(i, 2)])  # plain ints: literals
    d = sch.trace.as_json()
    assert d["version"] == 1 and "decision" in d["instructions"][2]["attrs"]
    assert Trace.from_json(d).as_json() == d


def test_changed_decision_replays_with_the_new_value() -> None:
    sch = _sampled()
    f = matmul(48, 12, 40)
    tr = sch.trace.with_decision(2, [6, 8]).with_decision(7, 2)
    new = _replayed(tr, f)
    assert new.trace.decisions[2] == [6, 8] and new.trace.decisions[7] == 2
    loops = [s for s in _loops(new.func)]
    assert [lp.extent.value for lp in loops[:2]] == [6, new.trace.decisions[4][0]]
    assert loops[0].annotations["pragma_auto_unroll_max_step"] == 64
    check_equivalent(f, new.func)


def _loops(func: loopir.PrimFunc) -> list[For]:
    from loopir.schedule import tree

    return [s for s, _ in tree.walk(func) if isinstance(s, For)]


@pytest.mark.parametrize(
    ("index", "decision", "match"),
    [(2, [5, 10], "product is 50, not 48"), (2, [3, 16], "innermost factor 16 exceeds 8"),
     (2, [48], "list of 2 ints"), (2, "x", "list of 2 ints"), (7, 3, "candidate index"),
     (7, -1, "candidate index")],
)  # fmt: skip
def test_invalid_decision_is_a_clear_error(index: int, decision: object, match: str) -> None:
    tr = _sampled().trace.with_decision(index, decision)
    sch = loopir.Schedule(matmul(48, 12, 40))
    kind = tr[index].kind
    with pytest.raises(TraceError, match=rf"replay of instruction {index} \({kind}\) failed: invalid decision="):
        tr.apply_to(sch)
    with pytest.raises(TraceError, match=match):
        tr.apply_to(loopir.Schedule(matmul(48, 12, 40)))


def test_with_decision_checks_its_arguments() -> None:
    tr = _sampled().trace
    with pytest.raises(TraceError, match=r"instruction 0 \(get_block\) is not a sampling"):
        tr.with_decision(0, 1)
    with pytest.raises(TraceError, match="no instruction 99"):
        tr.with_decision(99, 1)
    assert tr[-2].kind == "sample_categorical"
    assert tr.with_decision(-2, 0)[-2].attrs["decision"] == 0 and tr[-2].attrs["decision"] is not None
    assert 7 not in tr.with_decision(7, None).decisions


def test_removed_decisions_resample_from_the_seed() -> None:
    f = matmul(48, 12, 40)
    bare = _sampled(seed=11).trace.without_decisions()
    assert bare.decisions == {} and "decision=None" in str(bare)
    # Same seed: the same draws as the original; the replayed trace records them.
    again = _replayed(bare, f, seed=11)
    loopir.assert_structural_equal(again.func, _sampled(seed=11).func)
    assert again.trace.decisions == _sampled(seed=11).trace.decisions
    # Other seeds draw again (and differ somewhere over a few seeds).
    others = {str(_replayed(bare, f, seed=s).trace.decisions) for s in range(6)}
    assert len(others) > 1
    assert Trace.from_json(bare.as_json()).decisions == {}


# --- sample_compute_location ------------------------------------------------------------------
def _location(decision: int | None = None, seed: int = 0) -> loopir.Schedule:
    sch = loopir.Schedule(two_stage(16, 8), seed=seed)
    c = sch.get_block("C")
    i, j = sch.get_loops(c)
    sch.split(i, [4, 4])
    b = sch.get_block("B")
    sch.compute_at(b, sch.sample_compute_location(b, decision=decision))
    return sch


@pytest.mark.parametrize("decision", [INLINE, ROOT, 0, 1, 2])
def test_compute_location_decisions(decision: int) -> None:
    f = two_stage(16, 8)
    sch = _location(decision)
    check_equivalent(f, sch.func)
    from loopir.schedule import tree

    names = [s.loop_var.name for s in _loops(sch.func)]
    if decision == INLINE:
        assert "B" not in loopir.schedule.tree.block_names(sch.func)
    elif decision == ROOT:
        loopir.assert_structural_equal(sch.func, _location(ROOT).func)
        assert len(names) == 5  # B's 2 loops untouched, C's 3
    else:  # under the chosen one of C's loops i_0, i_1, j
        hit = tree.find_block_realize(sch.func, "B")
        assert hit is not None
        assert ["i_0", "i_1", "j"][decision] in [lp.loop_var.name for lp in tree.enclosing_loops(hit[1])]
    replay = _replayed(Trace.from_json(sch.trace.as_json()), f, seed=3)
    loopir.assert_structural_equal(sch.func, replay.func)


def test_compute_location_candidates_and_uniform_draws() -> None:
    seen = collections.Counter(_location(None, seed=s).trace.decisions[4] for s in range(60))
    assert set(seen) == {INLINE, ROOT, 0, 1, 2}  # i_0, i_1 and j under C, and the marks


def test_compute_location_invalid_decision_and_marks() -> None:
    with pytest.raises(ScheduleError, match=r"sample_compute_location: invalid decision=3 .*valid are"):
        _location(3)
    sch = loopir.Schedule(two_stage(16, 8))
    b = sch.get_block("B")
    root = sch.sample_compute_location(b, decision=ROOT)
    assert sch.get(root) is None
    with pytest.raises(ScheduleError, match="split: .*root mark of sample_compute_location"):
        sch.split(root, [2, None])


def test_reverse_compute_at_inline_mark() -> None:
    f = two_stage(16, 8)
    sch = loopir.Schedule(f)
    c = sch.get_block("C")
    # C is no producer: only the root mark, and reverse_compute_at to it does nothing.
    loc = sch.sample_compute_location(c)
    assert sch.trace.decisions[1] == ROOT
    sch.reverse_compute_at(c, loc)
    loopir.assert_structural_equal(sch.func, f)


# --- a sampled schedule stays correct ---------------------------------------------------------
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32), m=st.sampled_from([1, 7, 48, 60]))
def test_sampled_schedule_is_equivalent(seed: int, m: int) -> None:
    f = matmul(m, 12, 20)
    sch = loopir.Schedule(f, seed=seed)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=8))
    j0, j1 = sch.split(j, sch.sample_perfect_tile(j, n=2, max_innermost_factor=4))
    sch.reorder(i0, j0, k, i1, j1)
    check_equivalent(f, sch.func)
