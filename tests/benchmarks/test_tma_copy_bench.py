"""benchmarks/tma_copy.py keeps working where there is no GPU: ``--smoke`` builds every
configuration (race checked, emitted, compiled with nvcc where it is on PATH)."""

from __future__ import annotations

import shutil

import pytest

from tests.benchmarks import load_script


def test_smoke_builds_every_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    module = load_script("tma_copy")
    assert module.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert out.count(": 1 copy") == len(module.CONFIGS), out
    if shutil.which("nvcc") is not None:
        assert f"compiled: {len(module.CONFIGS)} kernels" in out, out
