"""Asynchronous ``wgmma`` in a software pipeline (``loopir.pipeline_mma_in_flight``, issue 32).

* The race checker proves the pipelined kernel race-free in both pipeline orders, and reports
  as a race the kernel whose copies run one step further ahead (a prefetch distance of
  ``S - 1`` with ``S`` versions: a copy overwrites the version an in-flight ``wgmma`` still
  reads; ThreadSync's barriers around it do not order the tensor cores' read, only the
  retiring wait does).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

import loopir
from loopir.errors import CodegenError
from loopir.examples import hopper_gemm
from loopir.passes import software_pipeline as sp
from loopir.passes.pipeline_mma import MMA_IN_FLIGHT_KEY
from loopir.passes.race_check import check_races, find_races

SMALL = dict(block=(64, 32, 64), wn=32)


def _annotated(stages: int = 3, wait_first: bool = False, k_steps: int = 5) -> loopir.Schedule:
    """``hopper_gemm``'s schedule with the K loop annotated by hand: copies in stage 0, the
    compute in stage ``stages - 2``, one step of MMAs in flight."""
    sch = hopper_gemm(64, 64 * k_steps, 32, **SMALL, stages=stages, wait_first=wait_first)
    k0 = sch.get_loops(sch.get_block("C_o"))[4]
    sch.annotate(k0, "software_pipeline_stage", [0, 0, stages - 2])
    sch.annotate(k0, MMA_IN_FLIGHT_KEY, 1)
    return sch


def _lower_unchecked(sch: loopir.Schedule) -> loopir.PrimFunc:
    with loopir.PassContext(config={"cuda.race_check": False}):
        return loopir.lower(sch.func)


@pytest.fixture
def one_version_short(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The pipeline gives every multi-buffered tile one version fewer than its readers need:
    as if the wait's reads were not counted, the copies run ``S - 1`` steps ahead with ``S``
    versions."""
    versions = sp._Rewrite._versions

    def short(self: sp._Rewrite, *args: object) -> dict:
        return {b: v - 1 for b, v in versions(self, *args).items()}  # type: ignore[arg-type]

    monkeypatch.setattr(sp._Rewrite, "_versions", short)
    yield


@pytest.mark.parametrize("wait_first", [False, True])
@pytest.mark.parametrize("stages", [3, 4])
def test_a_copy_into_a_version_in_flight_is_a_race(one_version_short: None, stages: int, wait_first: bool) -> None:
    func = _lower_unchecked(_annotated(stages, wait_first))
    report = find_races(func)
    assert report.races, report
    assert "A_shared" in report.races[0] or "B_shared" in report.races[0]
    with pytest.raises(CodegenError, match="data race on shared buffer [AB]_shared"):
        check_races(func)


@pytest.mark.parametrize("wait_first", [False, True])
@pytest.mark.parametrize("stages", [3, 4])
def test_the_pipelined_kernel_is_proven_race_free(stages: int, wait_first: bool) -> None:
    func = _lower_unchecked(_annotated(stages, wait_first))
    report = find_races(func)
    assert not report.races and not report.unproven, report
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_races(func)
