"""``hopper_gemm_space``'s warp-specialized persistent form (issue 32): the default form's
design space for ``loopir.tune``.

* The sampled decisions (block rows, depth, raster group, persistent grid) are in the trace:
  a sampled trace replays through JSON to the same function, and a changed decision replays
  to the form it names (the raster group and the blocks follow it).
* Every candidate at a few shapes lowers race-free (no warning); candidates equal the
  unscheduled program on the CPU executor; every pair of two decisions' choices compiles with
  nvcc for sm_90a without spills.
* Where it does not fit (a batch) the space is the ``cp.async`` one; asking for the
  warp-specialized form where it does not fit is refused by name.
"""

from __future__ import annotations

import itertools
import json
import shutil
import warnings
from pathlib import Path

import pytest

import loopir
from loopir.errors import ScheduleError
from loopir.examples.tensor_core import PERSISTENT_CTAS, hopper_gemm_space, tc_gemm_func


def _sampled(func: loopir.PrimFunc, seed: int = 0) -> loopir.Schedule:
    sch = loopir.Schedule(func, seed=seed)
    hopper_gemm_space(sch)
    return sch


def _pairwise(sizes: list[int]) -> list[tuple[int, ...]]:
    """Combinations of four decisions of at most 3 choices each in which every pair of two
    decisions' choices occurs (the 9 rows of the orthogonal array L9(3^4), each column's
    values folded onto its choices)."""
    rows = [(a, b, (a + b) % 3, (a + 2 * b) % 3) for a in range(3) for b in range(3)]
    return sorted({tuple(r[i] % n for i, n in enumerate(sizes)) for r in rows})


def _candidates(func: loopir.PrimFunc, pairwise: bool = False) -> list[loopir.Schedule]:
    """Every combination of the space's decisions (or, ``pairwise``, those of
    ``_pairwise``), replayed."""
    trace = _sampled(func).trace
    sampling = [(i, len(inst.inputs.get("candidates") or inst.attrs.get("candidates") or []))
                for i, inst in enumerate(trace.instructions) if inst.kind == "sample_categorical"]  # fmt: skip
    assert len(sampling) == 4 and max(n for _, n in sampling) <= 3
    sizes = [n for _, n in sampling]
    out = []
    for combo in _pairwise(sizes) if pairwise else itertools.product(*(range(n) for n in sizes)):
        t = trace
        for (index, _), choice in zip(sampling, combo):
            t = t.with_decision(index, choice)
        sch = loopir.Schedule(func)
        t.apply_to(sch)
        out.append(sch)
    return out


def test_the_decisions_are_in_the_trace_and_replay_through_json() -> None:
    func = tc_gemm_func(4096, 512, 4096, b_trans=True, out_dtype="float16")
    for seed in range(3):
        sch = _sampled(func, seed)
        text = str(sch.trace)
        assert "sch.sample_categorical([4, 8]" in text and "sch.sample_categorical([2, 3, 4]" in text
        assert "sch.sample_categorical([1, 8, 16]" in text
        assert f"sch.sample_categorical([{PERSISTENT_CTAS}, 512]" in text  # 32 x 16 tiles of 128 x 256
        assert '"loopir.warp_specialize", True' in text and '"loopir.pipeline_tma", True' in text
        replay = loopir.Schedule(func)
        loopir.Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(replay)
        loopir.assert_structural_equal(sch.func, replay.func)


def test_a_changed_decision_replays_to_the_form_it_names() -> None:
    """Each decision at each value: the block rows (64 or 128 rows: 4 or 8 consumer warps), the
    raster group (the fused tile loop split by it), the blocks of the grid."""
    func = tc_gemm_func(4096, 512, 4096, b_trans=True, out_dtype="float16")
    for sch in _candidates(func)[::7]:
        rows, depth, raster, ctas = (sch.trace.decisions[i] for i in sorted(sch.trace.decisions))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            low = loopir.lower(sch.func).script()
        ctas_n = [PERSISTENT_CTAS, 512][ctas]
        assert f'T.thread_binding({ctas_n}, thread="blockIdx.x")' in low
        assert f'T.thread_binding({[4, 8][rows] + 4}, thread="threadIdx.y")' in low
        assert f"k_0_0_tma_bar = T.allocate(({[2, 3, 4][depth]},)" in low
        # the raster group: the tile's row from the fused index's digits of that group
        assert (f"% {[1, 8, 16][raster]} * {[64, 128][rows]} + i0_0_1 * 16" in low) == (raster > 0)


@pytest.mark.parametrize("shape", [(256, 128, 512), (1024, 256, 768)])
def test_every_candidate_is_race_free_and_equals_the_program(shape: tuple[int, int, int]) -> None:
    from loopir.testing import check_equivalent

    func = tc_gemm_func(*shape, b_trans=True)
    cands = _candidates(func)
    for sch in cands:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # proven race-free
            low = loopir.lower(sch.func)
        if shape[0] * shape[2] <= 256 * 512:
            check_equivalent(func, low, thread_order="random")


@pytest.mark.nvcc
@pytest.mark.parametrize("shape", [(512, 512, 1024), (2048, 256, 4096)])
def test_candidates_compile_for_sm_90a_without_spills(shape: tuple[int, int, int], tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda, emit_function, lower_for_cuda

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    func = tc_gemm_func(*shape, b_trans=True, out_dtype="float16")
    sources = set()
    # every block-row count with every depth, raster group and grid in pairs (9 of 36 at
    # 2048 x 256 x 4096: the raster and grid change index arithmetic only; CI time)
    for sch in _candidates(func, pairwise=True):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sources.add(emit_function(lower_for_cuda(sch.func)).emitted.source)
    assert len(sources) > 1
    for src in sorted(sources):
        binary = compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)
        for res in binary.resources.values():
            assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, binary.log


def test_where_the_form_does_not_fit_the_space_is_cp_async() -> None:
    for func in (tc_gemm_func(128, 64, 256, b_trans=True, batch=2),):  # K is a multiple of 64 in the space
        sch = _sampled(func)
        assert "loopir.warp_specialize" not in str(sch.trace)
        assert [i.kind for i in sch.trace.instructions].count("sample_categorical") == 3
    with pytest.raises(ScheduleError, match=r"hopper_gemm_space: warp_specialized=True needs K a multiple of 8.*"
                                            r"got K=100"):  # fmt: skip
        hopper_gemm_space(loopir.Schedule(tc_gemm_func(128, 100, 256, b_trans=True)), warp_specialized=True)
    plain = loopir.Schedule(tc_gemm_func(4096, 512, 4096, b_trans=True))
    hopper_gemm_space(plain, warp_specialized=False)
    assert "loopir.pipeline_tma" not in str(plain.trace)


@pytest.mark.gpu
def test_gpu_every_candidate_equals_float64() -> None:
    import numpy as np

    from tests.examples.test_hopper_gemm_tma import _inputs
    from tests.tensor_intrin.kernels import from_storage

    M, K, N = 512, 512, 1024
    a, b, c = _inputs(M, K, N, "float16", seed=7)
    want = from_storage(a, "float16").astype(np.float64) @ from_storage(b, "float16").astype(np.float64).T
    for sch in _candidates(tc_gemm_func(M, K, N, b_trans=True)):
        got = c.copy()
        loopir.build(sch.func, target="cuda")(a, b, got)
        assert not np.isnan(got).any(), sch.trace.decisions
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
