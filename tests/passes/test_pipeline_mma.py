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
from loopir.passes import software_pipeline as sp
from loopir.passes.pipeline_mma import MMA_IN_FLIGHT_KEY
from loopir.passes.race_check import check_races, find_races
from tests.examples.hopper_forms import hopper_gemm  # the forms of before the default changed

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


def _lines(func: loopir.PrimFunc) -> list[str]:
    keep = ("ptx_wgmma", "tvm_storage_sync", "cp_async_wait", "k_0_0_steady in")
    return [ln.strip() for ln in func.script().splitlines() if any(k in ln for k in keep)]


def test_the_steps_of_the_module_doc_example() -> None:
    """The pipeline of ``loopir.passes.pipeline_mma``'s example (one async stage, the compute in
    stage 1, 3 versions, 5 K steps): the prologue issues step 0, each steady step issues step
    ``k + 1`` from version ``(k + 1) % 3`` and retires step ``k``, the epilogue issues the last
    step and retires the last two, the very last with ``wait_group 0``."""
    got = _lines(_lower_unchecked(_annotated(3, k_steps=5)))
    issue, wait = 'T.ptx_wgmma_async("m64n32k64", ', 'T.ptx_wgmma_wait({}, "m64n32k64", '
    ops = [ln for ln in got if "ptx_wgmma" in ln]
    assert ops == [
        issue + "A_shared[0, i0_0_1 * 16, 0], B_shared[0, 0, 0], C_warp[0, 0, tx_1, 0])",
        issue + "A_shared[(k_0_0_steady + 1) % 3, i0_0_1 * 16, 0], B_shared[(k_0_0_steady + 1) % 3, 0, 0], C_warp[0, 0, tx_2, 0])",
        wait.format(1) + "A_shared[k_0_0_steady, i0_0_1 * 16, 0], B_shared[k_0_0_steady, 0, 0], C_warp[0, 0, tx_3, 0])",
        issue + "A_shared[1, i0_0_1 * 16, 0], B_shared[1, 0, 0], C_warp[0, 0, tx_4, 0])",
        wait.format(1) + "A_shared[0, i0_0_1 * 16, 0], B_shared[0, 0, 0], C_warp[0, 0, tx_5, 0])",
        wait.format(0) + "A_shared[1, i0_0_1 * 16, 0], B_shared[1, 0, 0], C_warp[0, 0, tx_6, 0])",
    ], "\n".join(ops)
    steady = got[got.index("for k_0_0_steady in T.serial(3):"):]
    # ThreadSync: the barrier at the top of a step orders its copy after every thread's wait
    assert steady[1] == 'T.tvm_storage_sync("shared")'


def test_a_bad_depth_is_refused() -> None:
    sch = _annotated(3)
    k0 = sch.get_loops(sch.get_block("C_o"))[4]
    sch.annotate(k0, MMA_IN_FLIGHT_KEY, 2)
    with pytest.raises(loopir.PassError, match="pipeline_mma_in_flight: must be 0 or 1"):
        loopir.lower(sch.func)
