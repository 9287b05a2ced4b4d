"""Decode GEMMs (``Y = X W^T`` with 2-16 rows) on tensor cores: one 16-row tile of ``mma.sync``
(``skinny_params``), chosen by the default GPU schedule and left to it by GemmOffload
(``cuda.decode_gemm_max_rows``, issue 35)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.codegen_cuda import emit_cuda
from loopir.schedule import tensor_core_gemm as tcg
from loopir.schedule.default_gpu import default_gpu_schedule
from tests.schedule.test_gemv import _gemv_func as _decode_func


def _params(m: int, n: int, k: int, w_layout: str = "nk"):
    sch = loopir.Schedule(_decode_func(m, n, k, w_layout=w_layout))
    match = tcg.match(sch, "Y")
    assert match is not None
    return tcg.skinny_params(match)


def test_the_tiles() -> None:
    assert _params(8, 4096, 4096) == {"block": (16, 32, 256), "warp": (16, 16), "stages": 4}
    assert _params(16, 11008, 4096) == {"block": (16, 32, 128), "warp": (16, 16), "stages": 4}
    assert _params(2, 4096, 96)["block"] == (16, 32, 64)  # K steps no longer than K
    for args in ((17, 4096, 4096), (8, 16, 4096), (8, 4096, 32)):  # too many rows, N or K too small
        assert _params(*args) is None, args
    assert _params(8, 4096, 4096, w_layout="kn") is None  # B [K, N]


def test_the_default_schedule_takes_2_to_16_rows() -> None:
    for m in (3, 5, 8, 16):
        line = default_gpu_schedule(loopir.Schedule(_decode_func(m, 256, 1024)))[0]
        assert line.startswith(f"tensor_core Y (M = {m}: one 16 x 32 x 256 tile of rows on mma.sync"), line
    for m in (1, 2):  # the GEMV rule's (cuda.gemv_max_rows)
        assert default_gpu_schedule(loopir.Schedule(_decode_func(m, 256, 1024)))[0].startswith("gemv Y")
    line = default_gpu_schedule(loopir.Schedule(_decode_func(2, 256, 1024)), gemv_rows=1)[0]
    assert line.startswith("tensor_core Y (M = 2: one 16 x 32"), line
    assert default_gpu_schedule(loopir.Schedule(_decode_func(4, 256, 1024)), gemv_rows=4)[0].startswith("gemv Y")
    off = default_gpu_schedule(loopir.Schedule(_decode_func(8, 256, 1024)), decode_rows=0)[0]
    assert "tile of rows" not in off, off
    big = default_gpu_schedule(loopir.Schedule(_decode_func(32, 256, 1024)))[0]
    assert "tile of rows" not in big and big.startswith("tensor_core Y"), big


@settings(max_examples=12, deadline=None)
@given(m=st.integers(2, 16), n=st.sampled_from([32, 48, 64, 96]), k=st.sampled_from([64, 128, 192]),
       dtype=st.sampled_from(["float16", "bfloat16"]))  # fmt: skip
def test_it_computes_the_gemm(m, n, k, dtype) -> None:
    """Padded to 16 rows and to the 32-column, K-step tiles, on the CPU executor in a random
    thread order, against the unscheduled function."""
    f = _decode_func(m, n, k, dtype)
    sch = loopir.Schedule(f)
    assert "tile of rows" in default_gpu_schedule(sch, gemv_rows=1)[0]
    low = loopir.lower(sch.func, target="cuda")
    loopir.testing.check_equivalent(f, low, rtol=1e-4, atol=1e-4, thread_order="random")


def test_gemm_offload_leaves_16_bit_decode_gemms_to_the_default_schedule() -> None:
    pytest.importorskip("cutlass_library")
    from loopir.codegen_cuda.cutlass.offload import GemmOffload

    def offloaded(m: int, dtype: str = "float16", **config) -> list[bool]:
        with loopir.PassContext(config=config):
            p = GemmOffload()
            p(_decode_func(m, 256, 1024, dtype))
        return [d.offloaded for d in p.report]

    for m in (2, 3, 8, 16):  # 1-2: the GEMV rule's, 3-16: the tensor-core rule's
        assert offloaded(m) == [False]
        assert offloaded(m, "bfloat16") == [False]
    assert offloaded(17) == [True]
    # no tensor-core rule for float32 inputs: CUTLASS (TF32 allowed) takes it
    assert offloaded(8, "float32", **{"cuda.gemm_allow_tf32": True}) == [True]
    assert offloaded(8, **{"cuda.decode_gemm_max_rows": 0}) == [True]
    assert offloaded(8, **{"cuda.default_schedule.tensor_cores": False}) == [True]
    assert offloaded(8, **{"cuda.decode_gemm_max_rows": 4}) == [True]
    assert offloaded(4, **{"cuda.decode_gemm_max_rows": 4}) == [False]


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_kernels_compile_without_spills(arch, tmp_path) -> None:
    from loopir.codegen_cuda.compile import compile_cuda

    for m, n in ((3, 4096), (8, 11008), (16, 4096)):
        for dtype in ("float16", "bfloat16"):
            with loopir.PassContext(config={"cuda.gemm_backend": "generated"}):
                source = emit_cuda(loopir.lower(_decode_func(m, n, 4096, dtype), target="cuda")).source
            assert "mma.sync" in source
            res = compile_cuda(source, arch=arch, cache_dir=tmp_path).resources
            assert all(r.stack_frame_bytes == 0 and r.spill_store_bytes == 0 for r in res.values()), (m, n, res)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [3, 5, 8, 16])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_decode_gemms_on_the_gpu_match_float64(m, dtype) -> None:
    """Through ``mod()`` with the default configuration, as a torch program calls it."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    tdt = getattr(torch, dtype)
    x = (torch.rand(m, 4096, device="cuda") - 0.5).to(tdt)
    w = (torch.rand(1056, 4096, device="cuda") - 0.5).to(tdt)  # 33 column tiles
    y = torch.full((m, 1056), float("nan"), device="cuda")
    mod = loopir.build(_decode_func(m, 1056, 4096, dtype), target="cuda")
    assert not getattr(mod, "library_calls", None)  # generated code, not CUTLASS
    mod(x, w, y)
    ref = x.double() @ w.double().t()
    err = (y.double() - ref).abs().max().item()
    assert err <= 1e-4 * ref.abs().max().item() + 1e-5, err
    assert np.isfinite(y.cpu().numpy()).all()
