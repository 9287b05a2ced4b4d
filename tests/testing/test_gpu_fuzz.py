"""The GPU schedule fuzzer (loopir.testing.gpu_fuzz, issue 11 "Fuzz what was missed"):
deterministic generation, the features it must reach, and its outcomes."""

from __future__ import annotations

import json
import warnings

import pytest

import loopir
from loopir import te
from loopir.testing import check_equivalent
from loopir.testing.gpu_fuzz import (
    BAD_OUTCOMES,
    FAMILIES,
    GpuCase,
    features,
    main,
    random_gpu_schedule,
    run_case,
)
from loopir.testing.workloads import shared_transpose

FEATURE_SEEDS = range(40)
REQUIRED = {"sibling-shared", "2d-block-extent1", "two-level-reduction", "transpose-shared",
            "vthread", "predicate", "local-accumulator"}  # fmt: skip


@pytest.fixture(autouse=True)
def _quiet_race_checker():
    from loopir.passes.race_check import RaceCheckWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RaceCheckWarning)
        yield


@pytest.mark.parametrize("seed", [0, 7, 19, 33])
def test_generation_is_deterministic_per_seed(seed):
    a, b = random_gpu_schedule(seed), random_gpu_schedule(seed)
    assert a.description == b.description and a.trace == b.trace and a.skipped == b.skipped
    assert a.func is not None and b.func is not None
    loopir.assert_structural_equal(a.func, b.func)
    # the trace replays to the same function
    sch = loopir.Schedule(a.base)
    scope: dict = {}
    exec(a.trace, scope)  # noqa: S102
    scope["apply_trace"](sch)
    loopir.assert_structural_equal(sch.func, a.func)


def test_generation_differs_between_seeds():
    assert len({random_gpu_schedule(s).trace for s in range(10)}) == 10


def test_every_family_and_feature_is_generated():
    cases = [random_gpu_schedule(s) for s in FEATURE_SEEDS]
    assert {c.family for c in cases} == set(FAMILIES)
    built = [c for c in cases if c.func is not None]
    assert len(built) >= 0.9 * len(cases), [c.description for c in cases if c.func is None]
    seen: set[str] = set()
    for c in built:
        seen |= features(c.func)
    assert REQUIRED <= seen, f"never generated: {sorted(REQUIRED - seen)}"


def test_every_family_can_be_forced():
    for fam in FAMILIES:
        case = random_gpu_schedule(3, family=fam)
        assert case.family == fam and case.description.startswith(fam)


def test_features_of_the_issue_transpose():
    """The issue's reproducer: a transpose through a shared tile filled by a sibling
    threadIdx nest. ``features`` must see both."""
    before = features(shared_transpose(100, 70, shared_tile=False).func)
    sch = shared_transpose(100, 70)
    after = features(sch.func)
    assert "sibling-shared" not in before and "transpose-shared" not in before
    assert {"sibling-shared", "transpose-shared", "predicate"} <= after
    assert "vthread" not in after and "2d-block-extent1" not in after


@pytest.mark.parametrize("seed", range(20))
def test_generated_schedules_keep_the_meaning_on_the_cpu(seed):
    case = random_gpu_schedule(seed)
    assert case.func is not None, case.description
    check_equivalent(case.base, case.func)
    # lowered, in thread order: right (a race would show in random order; run_case
    # classifies those by what the CUDA build's race checker says)
    check_equivalent(case.base, loopir.lower(case.func), thread_order="sequential")


def _wrong_case() -> GpuCase:
    A = te.placeholder((5, 3), "float32", name="A")
    good = te.create_prim_func([A, te.compute((5, 3), lambda i, j: A[i, j] + 1.0, name="B")])
    bad = te.create_prim_func([A, te.compute((5, 3), lambda i, j: A[i, j] + 2.0, name="B")])
    return GpuCase(seed=0, family="ew_chain", base=good, func=bad, sizes={}, description="wrong",
                   trace="")  # fmt: skip


def test_run_case_reports_a_wrong_schedule_as_cpu_mismatch():
    out = run_case(_wrong_case(), target="compile")
    assert out.kind == "cpu-mismatch" and "parameter B differs" in out.message


def test_run_case_reports_generation_refusals():
    case = random_gpu_schedule(0)
    out = run_case(GpuCase(seed=0, family=case.family, base=case.base, func=None, sizes={},
                           description="x", trace="", error="ScheduleError: split: no"),
                   target="compile")  # fmt: skip
    assert out.kind == "gen-refused" and "split" in out.message
    with pytest.raises(loopir.LoopIRError, match="target"):
        run_case(case, target="gpu")


@pytest.mark.nvcc
@pytest.mark.parametrize("seed", [0, 4, 16, 19, 28, 31])
def test_run_case_compiles_without_crash_or_mismatch(seed, tmp_path_factory):
    case = random_gpu_schedule(seed)
    out = run_case(case, target="compile", cache_dir=tmp_path_factory.getbasetemp() / "gpu-fuzz")
    assert out.kind not in BAD_OUTCOMES, f"seed {seed}: {case.description}\n{out.message}\n{case.trace}"


def test_main_exits_1_on_a_bad_outcome_and_writes_it(tmp_path, monkeypatch):
    import loopir.testing.gpu_fuzz as gf

    def fake_campaign(n, first_seed, workers, target, progress=None):
        return [{"seed": 5, "family": "matmul", "outcome": "crash", "description": "d", "message": "boom"},
                {"seed": 6, "family": "matmul", "outcome": "compiled", "description": "d", "message": ""}]

    monkeypatch.setattr(gf, "campaign", fake_campaign)
    out = tmp_path / "r.json"
    assert main(["--schedules", "2", "--target", "compile", "--out", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["counts"] == {"crash": 1, "compiled": 1}
    assert [c["seed"] for c in data["cases"]] == [5]
