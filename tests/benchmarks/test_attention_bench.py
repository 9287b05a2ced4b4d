"""benchmarks/attention.py keeps working where there is no GPU: it imports, selects cases by
pattern, and ``--smoke`` builds the loopir kernels of a case (race checked, emitted, and
compiled with nvcc where it is on PATH)."""

from __future__ import annotations

import shutil

import pytest

from tests.benchmarks import load_script


def test_cases_are_selected_by_pattern() -> None:
    bench = load_script("attention")
    assert [bench.case_name(*c) for c in bench.selected("b4h32s1024d64*")] == ["b4h32s1024d64", "b4h32s1024d64c"]
    assert len(bench.selected(None)) == len(bench.CASES) == 12


def test_smoke_builds_the_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    assert load_script("attention").main(["--smoke", "--cases", "b4h32s1024d128c"]) == 0
    out = capsys.readouterr().out
    for dtype in ("float16", "bfloat16"):
        assert f"{dtype} b4h32s1024d128c: " in out
    assert "decode b8h32kv32d128: " in out
    if shutil.which("nvcc") is not None:
        assert out.count("spills 0/0") == 2 and "decode b8h32kv32d128: " in out and ": spills 0" in out, out


def test_smoke_builds_the_wgmma_variants(capsys: pytest.CaptureFixture[str]) -> None:
    """``--wgmma`` (FlashAttention 3's GEMMs, its overlap, and FA2 as ``fa2``) beside the default,
    and a tile of ``--wgmma-tiles`` (both forms); one dtype (the variants' plumbing is the same for
    both; the kernel tests compile bf16)."""
    bench = load_script("attention")
    assert bench.main(["--smoke", "--dtypes", "bfloat16", "--cases", "b4h32s1024d64", "--wgmma",
                       "--wgmma-tiles", "[[128, 128]]"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    for label in ("", " fa2", " wgmma", " wgmma_qk", " wgmma_overlap", " wgmma_tma", " wgmma_tma_128", " wgmma_128x128", " wgmma_overlap_128x128"):
        assert f"bfloat16 b4h32s1024d64{label}: " in out
    assert "float16 b4h32s1024d64" not in out.replace("bfloat16", "")
    if shutil.which("nvcc") is not None:
        assert out.count("spills 0/0") == 9 and "C7515" not in out, out


def test_smoke_builds_the_decode_variants(capsys: pytest.CaptureFixture[str]) -> None:
    """``--decode-variants`` (decode_attention keyword arguments) beside the default decode, each
    race checked and compiled; a bad keyword value is refused by the schedule."""
    from loopir.errors import ScheduleError

    bench = load_script("attention")
    assert bench.main(["--smoke", "--cases", "none", "--decode-variants", '[{"prefetch": "v"}, {"prefetch": "kv"}]']) == 0
    out = capsys.readouterr().out
    for label in ("", " decode_variant0", " decode_variant1"):
        assert f"decode b8h32kv32d128{label}: " in out
    if shutil.which("nvcc") is not None:
        assert out.count(": spills 0") == 3 and out.count(" registers") == 2, out
    with pytest.raises(ScheduleError, match="prefetch must be None or one of"):
        bench.main(["--smoke", "--cases", "none", "--decode-variants", '[{"prefetch": "q"}]'])
