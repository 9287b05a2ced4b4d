"""A kernel that nvcc rejects: CodegenError carrying nvcc's log and the saved source."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

import loopir
import loopir.codegen_cuda as cg
from loopir.errors import CodegenError
from loopir.ir.stmt import PrimFunc

pytestmark = pytest.mark.nvcc  # skipped without nvcc (tests/conftest.py)

BAD = """
extern "C" __global__ void broken(float* a) {
    a[threadIdx.x] = undeclared_identifier_xyz + 1.0f;
}
"""


def test_compile_cuda_rejects_with_log(tmp_path: Path) -> None:
    with pytest.raises(CodegenError) as info:
        cg.compile_cuda(BAD, arch="sm_90a", cache_dir=tmp_path)
    text = str(info.value)
    assert "nvcc failed" in text
    assert "undeclared_identifier_xyz" in text  # nvcc's own diagnostic is in the message
    assert "is undefined" in text
    saved = [p for p in tmp_path.iterdir() if p.suffix == ".cu"]
    assert len(saved) == 1 and str(saved[0]) in text
    assert saved[0].read_text() == BAD
    # Nothing half-built is left to be mistaken for a cache entry.
    assert not [p for p in tmp_path.iterdir() if p.suffix in (".cubin", ".json", ".tmp")]


def test_build_with_rejected_kernel(gpu_matmul: PrimFunc, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Through loopir.build: the emitted source is broken after emission (a stand-in for an
    emitter bug), and build reports nvcc's log instead of crashing or caching anything."""
    real = cg.emit_cuda

    def broken_emit(*args: object, **kwargs: object) -> cg.EmitResult:
        res = real(*args, **kwargs)  # type: ignore[arg-type]
        return attrs.evolve(res, kernel_texts=(*res.kernel_texts, "static int oops = undeclared_in_emit;"))

    monkeypatch.setattr(cg, "emit_cuda", broken_emit)
    with pytest.raises(CodegenError, match=r"(?s)nvcc failed.*undeclared_in_emit"):
        loopir.build(gpu_matmul, target="cuda", cache_dir=tmp_path)
    assert not list(tmp_path.glob("*.so")) and not list(tmp_path.glob("*.cubin"))


def test_bad_flag_and_arch(tmp_path: Path) -> None:
    ok = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] = 1.0f; }\n'
    with pytest.raises(CodegenError, match="nvcc failed"):
        cg.compile_cuda(ok, arch="sm_90a", flags=("--no-such-nvcc-flag",), cache_dir=tmp_path)
    with pytest.raises(CodegenError, match="invalid arch 'pentium'"):
        cg.compile_cuda(ok, arch="pentium", cache_dir=tmp_path)
