"""The decode GEMV schedule (``loopir.schedule.gemv``) and its place in the default GPU schedule
and GemmOffload."""

from __future__ import annotations

import re

import numpy as np
import pytest

import loopir
from loopir import te
from loopir.codegen_cuda import emit_cuda
from loopir.errors import ScheduleError
from loopir.schedule.default_gpu import default_gpu_schedule
from loopir.schedule.gemv import gemv, gemv_columns, gemv_shape


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


def test_the_columns_per_warp() -> None:
    """One for M = 1 (the measured form); else 4, halved until it divides N / warps."""
    assert gemv_columns(1, 4096) == 1
    assert [gemv_columns(m, 4096) for m in (2, 4, 8, 16)] == [4, 4, 4, 4]
    assert gemv_columns(8, 11008) == 4  # 11008 / 4 = 2752
    assert gemv_columns(8, 24) == 2  # N / warps = 6
    assert gemv_columns(8, 12) == 1  # N / warps = 3: one column per warp, as at M = 1
    assert gemv_columns(8, 24, warps=2) == 4


def test_it_refuses_what_it_cannot_take() -> None:
    with pytest.raises(ScheduleError, match="not a GEMV"):
        gemv(loopir.Schedule(_gemv_func(17, 64, 512)), "Y")
    with pytest.raises(ScheduleError, match="not a GEMV"):
        gemv(loopir.Schedule(_gemv_func(4, 64, 512, w_layout="kn")), "Y")
    with pytest.raises(ScheduleError, match="3 columns per warp do not divide"):
        gemv(loopir.Schedule(_gemv_func(4, 32, 512)), "Y", columns=3)  # N / warps = 8
    with pytest.raises(ScheduleError, match="4 columns per warp do not divide"):
        gemv(loopir.Schedule(_gemv_func(4, 24, 512)), "Y", columns=4)  # N / warps = 6
    with pytest.raises(ScheduleError, match="48 lanes"):
        gemv(loopir.Schedule(_gemv_func(4, 32, 1536)), "Y", lanes=48)  # not whole warps
    with pytest.raises(ScheduleError, match="64 lanes"):
        gemv(loopir.Schedule(_gemv_func(4, 32, 768)), "Y", lanes=64)  # 768 = 1.5 runs of 64 * 8


def test_the_scheduled_ir(golden) -> None:
    sch = loopir.Schedule(_gemv_func(2, 8, 512))
    gemv(sch, "Y")  # 2 columns per warp (N / warps = 2)
    golden("schedule/gemv_m2", sch.func.script())


@pytest.mark.parametrize("m", [1, 2, 3, 8, 16])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_it_computes_the_gemv(m, dtype) -> None:
    f = _gemv_func(m, 32, 1024, dtype)
    sch = loopir.Schedule(f)
    gemv(sch, "Y")
    loopir.testing.check_equivalent(f, sch.func, rtol=1e-4, atol=1e-4)
    low = loopir.lower(sch.func, target="cuda")
    loopir.testing.check_equivalent(f, low, rtol=1e-4, atol=1e-4, thread_order="random")


@pytest.mark.parametrize(("m", "n", "k", "dtype", "kw"), [
    (8, 24, 1024, "float16", {}),  # N / warps = 6: 2 columns per warp
    (8, 12, 1024, "float16", {}),  # N / warps = 3: one column per warp
    (4, 64, 1024, "float16", {"columns": 8, "unroll": 2}),  # ko and ku loops
    (4, 64, 1024, "bfloat16", {"columns": 4, "unroll": 4}),  # no ko loop (steps = unroll)
    (5, 32, 256, "float16", {}),  # one K step: neither ko nor ku
    (1, 8, 256, "float16", {}),  # the same at M = 1
    (1, 32, 512, "float32", {"columns": 2}),  # several columns at M = 1, if asked for
    (6, 16, 512, "float16", {"columns": 2, "warps": 2}),
    (8, 32, 2048, "float16", {"columns": 4, "lanes": 64, "warps": 2}),  # K split over 2 warps
    (3, 16, 1024, "bfloat16", {"lanes": 128, "warps": 1}),
])  # fmt: skip
def test_it_computes_other_forms(m, n, k, dtype, kw) -> None:
    f = _gemv_func(m, n, k, dtype)
    sch = loopir.Schedule(f)
    gemv(sch, "Y", **kw)
    low = loopir.lower(sch.func, target="cuda")
    loopir.testing.check_equivalent(f, low, rtol=1e-4, atol=1e-4, thread_order="random")


@pytest.mark.parametrize(("m", "columns", "unroll"), [(1, 1, 4), (2, 4, 1), (8, 4, 1), (16, 4, 1), (8, 4, 2)])
def test_each_run_of_x_is_loaded_once_per_k_step_for_all_columns(m, columns, unroll) -> None:
    """Per K step of a lane: the C runs of W into registers, then per row one run of X into
    registers, which the sums of all C columns read (M = 1: the loads of the sum itself)."""
    sch = loopir.Schedule(_gemv_func(m, 4096, 4096))
    gemv(sch, "Y", unroll=unroll, **({} if m == 1 else {"columns": columns}))
    source = emit_cuda(loopir.lower(sch.func, target="cuda")).source
    assert source.count("const uint4 X_v") == source.count("const uint4 W_v") == 1  # in unrolled loops
    assert f"float Y_rf[{m * columns}];" in source
    if m == 1:
        assert "X_local" not in source and "W_local" not in source
        return
    body = source[source.index(f"half W_local[{8 * columns}];"):]
    assert body.index("const uint4 W_v") < body.index("half X_local[8];") < body.index("const uint4 X_v")
    assert re.search(r"\+ \(\(float\)X_local\[(\w+)\]\) \* \(\(float\)W_local\[\w+ \* 8 \+ \1\]\);", body), body


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
    with loopir.PassContext(config={"cuda.decode_gemm_max_rows": 0}):  # (else the tensor-core rule's, M > 1)
        for rows, offloaded in ((8, True), (1, False)):  # the default: CUTLASS keeps M > 1
            p = GemmOffload()
            p(_gemv_func(rows, 256, 1024))
            assert [d.offloaded for d in p.report] == [offloaded], p.report


@pytest.mark.nvcc
@pytest.mark.parametrize("m", [1, 2, 4, 8, 16])
def test_gemv_kernels_keep_their_partials_in_registers(m, tmp_path) -> None:
    from loopir.codegen_cuda.compile import compile_cuda

    for n in (4096, 11008):
        for dtype in ("float16", "bfloat16"):
            with loopir.PassContext(config={"cuda.gemm_backend": "generated", "cuda.gemv_max_rows": 16}):
                source = emit_cuda(loopir.lower(_gemv_func(m, n, 4096, dtype), target="cuda")).source
            assert "Y_rf" in source
            res = compile_cuda(source, arch="sm_90a", cache_dir=tmp_path).resources
            assert all(r.stack_frame_bytes == 0 and r.spill_store_bytes == 0 for r in res.values()), (n, dtype, res)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 8, 16])
def test_gemv_on_the_gpu_matches_float64(m) -> None:
    rng = np.random.default_rng()
    x = (rng.random((m, 4096)) - 0.5).astype("float16")
    w = (rng.random((512, 4096)) - 0.5).astype("float16")
    y = np.full((m, 512), np.nan, "float32")
    with loopir.PassContext(config={"cuda.gemm_backend": "generated", "cuda.gemv_max_rows": 16}):
        mod = loopir.build(_gemv_func(m, 512, 4096), target="cuda")
    mod(x, w, y)
    ref = x.astype("float64") @ w.astype("float64").T
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max() + 1e-5
