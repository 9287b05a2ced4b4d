"""cuBLAS-class fp32 GEMM tiles (issue 15, session 6): ``tile_gemm``'s unrolled K step, padded and
transposed A tiles, ``examples.dense`` with other tiles, and ``sgemm_space``.

Every schedule is checked against the unscheduled function on the CPU executor (random thread
order, local padding on and off); the generated CUDA is compiled with nvcc where it is on PATH,
and checked for the 16-byte shared loads and copies the schedules are for.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.examples.dense import dense, dense_func
from loopir.schedule.default_gpu import tile_gemm
from loopir.testing import check_equivalent, check_gemm
from loopir.tune.spaces import sgemm_space

#: 8 x 8 outputs per thread as 2 x 2 virtual threads of 4 x 4 (cuBLAS's SGEMM layout), small
#: thread blocks so that the CPU executor is quick
EIGHT_BY_EIGHT = dict(ti=4, tj=4, vi=2, vj=2, ri=4, rj=4, vec=4)


def _tiled(M: int, K: int, N: int, **params: object) -> loopir.Schedule:
    sch = loopir.Schedule(dense_func(M, K, N))
    tile_gemm(sch, "C", **params)
    return sch


def _source(func: loopir.PrimFunc, pad: bool = True) -> str:
    from loopir.codegen_cuda import emit_cuda, lower_for_cuda

    with loopir.PassContext(config={"tir.enable_local_pad": pad}):
        return emit_cuda(lower_for_cuda(func)).source


@settings(max_examples=12, deadline=None)
@given(M=st.integers(1, 80), K=st.integers(1, 40), N=st.integers(1, 80), stages=st.sampled_from([1, 2, 3]),
       ki=st.sampled_from([8, 16]), pad_a=st.sampled_from([0, 4]), transpose_a=st.booleans(), pad=st.booleans())  # fmt: skip
def test_new_tile_gemm_options_compute_the_gemm(M, K, N, stages, ki, pad_a, transpose_a, pad) -> None:
    sch = _tiled(M, K, N, **EIGHT_BY_EIGHT, ki=ki, stages=stages, unroll_k=True, pad_a=pad_a,
                 transpose_a=transpose_a)  # fmt: skip
    with loopir.PassContext(config={"tir.enable_local_pad": pad}):
        low = loopir.lower(sch.func)
    check_equivalent(dense_func(M, K, N), low, thread_order="random")


def test_the_defaults_leave_the_schedule_as_it_was() -> None:
    sch = _tiled(64, 32, 64, ti=4, tj=8, vi=2, ri=2, ki=8, vec=4, stages=2)
    same = _tiled(64, 32, 64, ti=4, tj=8, vi=2, ri=2, ki=8, vec=4, stages=2, unroll_k=False, pad_a=0,
                  transpose_a=False)  # fmt: skip
    assert str(sch.trace) == str(same.trace)
    kinds = {i.kind for i in sch.trace.instructions}
    assert not kinds & {"unroll", "storage_align", "transform_layout"}


def test_padding_survives_the_pipeline_and_keeps_16_byte_copies() -> None:
    """pad_a = 4 on a K step of 8: rows of 12 floats in both versions of the 2-stage pipeline,
    and the fetches into them are still whole 16-byte cp.async (a padded stride keeps the rows
    16-byte aligned)."""
    src = _source(_tiled(128, 64, 128, ti=16, tj=16, vi=2, vj=2, ri=4, rj=4, ki=8, vec=4, stages=2,
                         unroll_k=True, pad_a=4).func)  # fmt: skip
    assert "float A_shared[3064];" in src  # 2 versions x (127 * 12 + 8), the second 16-byte aligned
    assert re.search(r"loopir_cp_async<16>\(A_shared \+ \(k_0_steady \+ 1\) % 2 \* 1532 \+ .* \* 12", src)
    assert "loopir_cp_async<16>(B_shared" in src


def test_a_transposed_tile_is_stored_k_major() -> None:
    src = _source(_tiled(128, 64, 128, ti=16, tj=16, vi=2, vj=2, ri=4, rj=4, ki=8, vec=4, stages=2,
                         unroll_k=True, pad_a=4, transpose_a=True).func)  # fmt: skip
    # A's fetch: one element per copy into row k (stride 132 = 128 + 4) of the tile
    assert re.search(r"loopir_cp_async<4>\(&A_shared\[.*% 8 \* 132 \+", src)
    assert re.search(r"A_shared\[k_0_steady % 2 \* 1052 \+ k_1 \* 132 \+", src)


def test_the_dietcode_schedule_takes_other_tiles() -> None:
    M, K, N = 70, 37, 66
    sch = dense(M, K, N, stages=2, i_tiles=(2, 4, 1, 4), j_tiles=(2, 4, 1, 4), k_tiles=(2, 4), unroll=True,
                pad_a=4)  # fmt: skip
    with loopir.PassContext(config={"tir.enable_local_pad": True}):
        check_equivalent(dense_func(M, K, N), loopir.lower(sch.func), thread_order="random")
    default = dense(M, K, N)
    assert str(default.trace) == str(dense(M, K, N, i_tiles=(1, 8, 8, 2), j_tiles=(2, 32, 1, 2), k_tiles=(1, 4)).trace)
    with pytest.raises(loopir.errors.ScheduleError, match="threads per block"):
        dense(M, K, N, i_tiles=(1, 64, 1, 1), j_tiles=(1, 32, 1, 1))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sgemm_space_candidates_compute_the_gemm_and_replay(seed: int) -> None:
    func = dense_func(50, 20, 70)
    sch = loopir.Schedule(func, seed=seed)
    sgemm_space(sch)
    again = loopir.Schedule(func)
    sch.trace.apply_to(again)
    assert loopir.structural_equal(again.func, sch.func)
    with loopir.PassContext(config={"tir.enable_local_pad": True}):
        check_equivalent(func, loopir.lower(sch.func), thread_order="random")


@pytest.mark.parametrize("transpose_a", [False, True])
def test_the_8x8_kernels_compile_with_16_byte_shared_loads(transpose_a: bool) -> None:
    """960x770x2304 (ragged K) with 64 x 64 blocks and 4096^3 with 128 x 128 blocks: nvcc
    (sm_90a) compiles the kernels without spills, and every shared load is a 16-byte
    ``ld.shared.v4``: four of them per 64 FFMA (the ragged K's last step, guarded, included)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    from loopir.codegen_cuda import compile_cuda

    for (M, K, N), (ti, ki) in (((960, 770, 2304), (8, 16)), ((4096, 4096, 4096), (16, 8))):
        sch = _tiled(M, K, N, ti=ti, tj=ti, vi=2, vj=2, ri=4, rj=4, ki=ki, vec=4, stages=2, unroll_k=True,
                     pad_a=4, transpose_a=transpose_a)  # fmt: skip
        src = _source(sch.func)
        res = next(iter(compile_cuda(src, arch="sm_90a", cache_dir=tempfile.mkdtemp()).resources.values()))
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0
        with tempfile.TemporaryDirectory() as tmp:
            cu, ptx = Path(tmp) / "k.cu", Path(tmp) / "k.ptx"
            cu.write_text(src)
            subprocess.run([shutil.which("nvcc"), "-arch=sm_90a", "-O3", "-std=c++17", "-ptx", "-o", str(ptx), str(cu)],
                           check=True, capture_output=True)  # fmt: skip
            text = ptx.read_text()
        vec4, scalar = text.count("ld.shared.v4.f32"), text.count("ld.shared.f32")
        fma = text.count("fma.rn.f32")
        assert fma == 16 * vec4 and scalar == 0, (vec4, scalar, fma)


@pytest.mark.gpu
@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("shape", [(960, 770, 2304), (130, 37, 150)])
def test_8x8_tiles_on_the_gpu(shape, transpose_a: bool, stages: int, pad: bool) -> None:
    M, K, N = shape
    sch = _tiled(M, K, N, ti=16, tj=16, vi=2, vj=2, ri=4, rj=4, vec=4, ki=8, stages=stages,
                 unroll_k=True, pad_a=4, transpose_a=transpose_a)  # fmt: skip
    with loopir.PassContext(config={"tir.enable_local_pad": pad}):
        mod = loopir.build(sch.func, target="cuda")
    check_gemm(mod, M, K, N, seed=M + stages)
