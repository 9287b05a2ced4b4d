"""Corrupted or truncated kernel cache entries are detected and rebuilt, never loaded.

Both caches are covered: the CPU executor's shared libraries (loopir/runtime/cache.py, a
``.sha256`` file per library) and the CUDA libraries and cubins (loopir/codegen_cuda/compile.py, a
``.json`` file with the output's hash). Corruption is planted in a fresh cache directory
with a name no library loaded by this process has: rewriting a loaded ``.so`` in place would
crash the process, which is not what is under test.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import loopir
from loopir.ir.stmt import PrimFunc
from loopir.testing import random_inputs, run_cpu
from loopir.testing.workloads import elementwise_chain


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])


def _flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))


def _empty(p: Path) -> None:
    p.write_bytes(b"")


def _garbage(p: Path) -> None:
    p.write_bytes(b"\x7fELF" + b"\0" * 100)


CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "truncated": _truncate, "bitflip": _flip, "empty": _empty, "garbage-elf": _garbage,
}  # fmt: skip


def _cpu_func(tag: int) -> PrimFunc:
    # A different shape per test: a library never loaded before in this process.
    return elementwise_chain(3, 2 + tag, stages=2).func


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_cpu_library_corrupted(tmp_path: Path, how: str) -> None:
    func = _cpu_func(list(CORRUPTIONS).index(how))
    src_dir, bad_dir = tmp_path / "src", tmp_path / "bad"
    m1 = loopir.build(func, target="cpu", cache_dir=src_dir)
    assert not m1.cache_hit
    # Copy the whole entry to a second cache, corrupt the copy, build from there.
    shutil.copytree(src_dir, bad_dir)
    lib = bad_dir / "cpu" / Path(m1.library_path).name
    CORRUPTIONS[how](lib)
    m2 = loopir.build(func, target="cpu", cache_dir=bad_dir)
    assert not m2.cache_hit, "a corrupted library was taken from the cache"
    inputs = random_inputs(func)
    expected = run_cpu(func, inputs, {"cache_dir": src_dir})
    out = [np.array(x, copy=True) for x in inputs]
    out[-1][...] = np.nan
    m2(*out)
    np.testing.assert_array_equal(out[-1], expected[-1])
    # The rebuilt entry is healthy again: the next build is a hit.
    assert loopir.build(func, target="cpu", cache_dir=bad_dir).cache_hit


def test_cpu_checksum_file_missing_or_wrong(tmp_path: Path) -> None:
    func = _cpu_func(10)
    m1 = loopir.build(func, target="cpu", cache_dir=tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.copytree(tmp_path / "a", tmp_path / "c")
    stem = Path(m1.library_path).stem
    (tmp_path / "b" / "cpu" / f"{stem}.sha256").unlink()
    (tmp_path / "c" / "cpu" / f"{stem}.sha256").write_text("0" * 64 + "\n")
    for d in ("b", "c"):
        assert not loopir.build(func, target="cpu", cache_dir=tmp_path / d).cache_hit
        assert loopir.build(func, target="cpu", cache_dir=tmp_path / d).cache_hit


needs_nvcc = pytest.mark.nvcc  # skipped without nvcc (tests/conftest.py)


@needs_nvcc
@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_cuda_library_corrupted(gpu_matmul: PrimFunc, cuda_cache_dir: Path, tmp_path: Path,
                              how: str) -> None:  # fmt: skip
    mod = loopir.build(gpu_matmul, target="cuda", cache_dir=cuda_cache_dir)
    good = mod.library_path.read_bytes()
    shutil.copytree(cuda_cache_dir, tmp_path / "c")
    CORRUPTIONS[how](tmp_path / "c" / mod.library_path.name)
    corrupted = (tmp_path / "c" / mod.library_path.name).read_bytes()
    again = loopir.build(gpu_matmul, target="cuda", cache_dir=tmp_path / "c")
    assert again.library_path.name == mod.library_path.name  # the same cache entry
    assert not again.cache_hit, "a corrupted library was taken from the cache"
    # rebuilt (a host-compiled library is not bit-reproducible), recorded, and loadable
    rebuilt = again.library_path.read_bytes()
    assert rebuilt != corrupted and rebuilt[:4] == good[:4] == b"\x7fELF"
    assert loopir.build(gpu_matmul, target="cuda", cache_dir=tmp_path / "c").cache_hit


@needs_nvcc
@pytest.mark.parametrize("meta", ["truncated", "not-json", "wrong-hash", "missing"])
def test_cuda_metadata_corrupted(gpu_matmul: PrimFunc, cuda_cache_dir: Path, tmp_path: Path,
                                 meta: str) -> None:  # fmt: skip
    mod = loopir.build(gpu_matmul, target="cuda", cache_dir=cuda_cache_dir)
    shutil.copytree(cuda_cache_dir, tmp_path / "c")
    meta_path = tmp_path / "c" / (mod.library_path.stem + ".json")
    if meta == "truncated":
        _truncate(meta_path)
    elif meta == "not-json":
        meta_path.write_text("garbage")
    elif meta == "wrong-hash":
        meta_path.write_text(meta_path.read_text().replace('"sha256": "', '"sha256": "00'))
    else:
        meta_path.unlink()
    assert not loopir.build(gpu_matmul, target="cuda", cache_dir=tmp_path / "c").cache_hit
    assert loopir.build(gpu_matmul, target="cuda", cache_dir=tmp_path / "c").cache_hit
