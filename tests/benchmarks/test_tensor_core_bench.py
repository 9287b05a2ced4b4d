"""benchmarks/tensor_core.py keeps working where there is no GPU: it imports, and ``--smoke``
builds every loopir schedule of the run (race checked, emitted, and compiled with nvcc where it is
on PATH)."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from tests.benchmarks import load_script


def _module() -> Any:
    return load_script("tensor_core")


def test_smoke_builds_every_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    assert _module().main(["--smoke"]) == 0
    out = capsys.readouterr().out
    for dtype in ("float16", "bfloat16"):
        for shape in ("4096x4096x4096", "8192x8192x8192", "4096x4096x11008"):
            assert f"{dtype} {shape}: " in out
    if shutil.which("nvcc") is not None:
        assert out.count("spills 0/0") == 12, out  # tc_gemm and hopper_gemm (wgmma)
        assert out.count("  wgmma: ") == 6, out
    assert "fp16 K=100: loopir supported" in out
    assert "fp16 32 x 512x128x512: loopir supported" in out


def test_the_fused_case_is_one_wgmma_kernel_equal_to_its_stages() -> None:
    """``--fused``'s GEMM + bias + GELU: the default schedule's wgmma form (``hopper_gemm``'s
    default: TMA, warp-specialized, persistent) folds the bias and the GELU into the GEMM's
    guarded stores from the fragments, computing what the te stages do."""
    import loopir
    from loopir.schedule.default_gpu import default_gpu_schedule
    from loopir.testing import check_equivalent

    func = _module().gemm_bias_gelu_func(96, 64, 80, "float16")
    sch = loopir.Schedule(func)
    assert default_gpu_schedule(sch, wgmma=True) == [
        "tensor_core C (64 x 64 x 64 tiles on wgmma, 4-stage TMA pipeline, warp-specialized (a producer warpgroup), "
        "persistent over 4 blocks in groups of 2 block rows, async wgmma, guarded stores from the fragments)"
    ]
    check_equivalent(func, sch.func, norm=True)
