"""The decode GEMV schedule (``loopir.schedule.gemv``) and its place in the default GPU schedule
and GemmOffload."""

from __future__ import annotations

import numpy as np
import pytest

import loopir
from loopir import te
from loopir.codegen_cuda import emit_cuda
from loopir.schedule.default_gpu import default_gpu_schedule
from loopir.schedule.gemv import gemv, gemv_shape


def _gemv_func(m: int, n: int, k: int, dtype: str = "float16", w_layout: str = "nk"):
    X = te.placeholder((m, k), dtype, name="X")
    W = te.placeholder((n, k) if w_layout == "nk" else (k, n), dtype, name="W")
    r = te.reduce_axis(k, name="r")

    def w(j, kk):
        return W[j, kk] if w_layout == "nk" else W[kk, j]

    Y = te.compute((m, n), lambda i, j: te.sum(X[i, r].astype("float32") * w(j, r).astype("float32"), axis=r),
                   name="Y")  # fmt: skip
    return te.create_prim_func([X, W, Y])


def test_the_shapes_it_takes() -> None:
    def shape(*a, **kw):
        return gemv_shape(loopir.Schedule(_gemv_func(*a, **kw)), "Y")

    assert shape(1, 64, 512) == (1, 64, 512, 8)
    assert shape(16, 64, 512, "float32") == (16, 64, 512, 4)
    assert shape(17, 64, 512) is None  # more rows: a GEMM
    assert shape(4, 64, 500) is None  # K not whole 16-byte runs per lane
    assert shape(4, 62, 512) is None  # N not whole warps per block
    assert shape(4, 64, 512, w_layout="kn") is None  # W[k, n]: k not contiguous


def test_the_scheduled_ir(golden) -> None:
    sch = loopir.Schedule(_gemv_func(2, 8, 512))
    gemv(sch, "Y")
    golden("schedule/gemv_m2", sch.func.script())


@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_it_computes_the_gemv(m, dtype) -> None:
    f = _gemv_func(m, 8, 1024, dtype)
    sch = loopir.Schedule(f)
    gemv(sch, "Y")
    loopir.testing.check_equivalent(f, sch.func, rtol=1e-4, atol=1e-4)
    low = loopir.lower(sch.func, target="cuda")
    loopir.testing.check_equivalent(f, low, rtol=1e-4, atol=1e-4, thread_order="random")


def test_the_default_schedule_takes_small_m_when_the_key_asks() -> None:
    """``cuda.gemv_max_rows``: 1 by default (measured on the H200: M = 1 only); set higher, M
    up to 16 goes to the GEMV rule; 0 turns it off."""
    for m in (1, 8, 16):
        assert default_gpu_schedule(loopir.Schedule(_gemv_func(m, 256, 1024)), gemv_rows=16)[0].startswith("gemv Y")
    assert not default_gpu_schedule(loopir.Schedule(_gemv_func(32, 256, 1024)), gemv_rows=16)[0].startswith("gemv")
    assert not default_gpu_schedule(loopir.Schedule(_gemv_func(8, 256, 1024)))[0].startswith("gemv")
    with loopir.PassContext(config={"cuda.gemm_backend": "generated"}):
        assert "Y_rf" not in emit_cuda(loopir.lower(_gemv_func(8, 256, 1024), target="cuda")).source
        assert "Y_rf" in emit_cuda(loopir.lower(_gemv_func(1, 256, 1024), target="cuda")).source
    with loopir.PassContext(config={"cuda.gemm_backend": "generated", "cuda.gemv_max_rows": 0}):
        assert "Y_rf" not in emit_cuda(loopir.lower(_gemv_func(1, 256, 1024), target="cuda")).source
    with loopir.PassContext(config={"cuda.gemv_max_rows": 16, "cuda.gemm_backend": "generated"}):
        assert "Y_rf" in emit_cuda(loopir.lower(_gemv_func(8, 256, 1024), target="cuda")).source


def test_gemm_offload_leaves_decode_gemvs_to_the_gemv_rule() -> None:
    pytest.importorskip("cutlass_library")
    from loopir.codegen_cuda.cutlass.offload import GemmOffload

    with loopir.PassContext(config={"cuda.gemv_max_rows": 16}):
        for rows, offloaded in ((8, False), (64, True)):
            p = GemmOffload()
            p(_gemv_func(rows, 256, 1024))
            assert [d.offloaded for d in p.report] == [offloaded], p.report
    for rows, offloaded in ((8, True), (1, False)):  # the default: CUTLASS keeps M > 1
        p = GemmOffload()
        p(_gemv_func(rows, 256, 1024))
        assert [d.offloaded for d in p.report] == [offloaded], p.report


@pytest.mark.nvcc
def test_gemv_kernels_keep_their_partials_in_registers(tmp_path) -> None:
    from loopir.codegen_cuda.compile import compile_cuda

    for m in (1, 8, 16):
        with loopir.PassContext(config={"cuda.gemm_backend": "generated", "cuda.gemv_max_rows": 16}):
            source = emit_cuda(loopir.lower(_gemv_func(m, 4096, 4096, "bfloat16"), target="cuda")).source
        res = compile_cuda(source, arch="sm_90a", cache_dir=tmp_path).resources
        assert all(r.stack_frame_bytes == 0 and r.spill_store_bytes == 0 for r in res.values()), res


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 16])
def test_gemv_on_the_gpu_matches_float64(m) -> None:
    rng = np.random.default_rng()
    x = (rng.random((m, 4096)) - 0.5).astype("float16")
    w = (rng.random((512, 4096)) - 0.5).astype("float16")
    y = np.full((m, 512), np.nan, "float32")
    loopir.build(_gemv_func(m, 512, 4096), target="cuda")(x, w, y)
    ref = x.astype("float64") @ w.astype("float64").T
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max() + 1e-5
