"""Cache directories and entries someone else could write are refused (loopir/_cache_dir.py).

A cache holds code that is loaded into the process (ctypes, the CUDA driver), so an open or
foreign directory is code execution as the caller. Also: the default location, its 0700
mode, and the private fallback when the default cannot be created.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

import loopir
from loopir import _cache_dir
from loopir.errors import CodegenError
from loopir.testing.workloads import elementwise_chain

OTHER_UID = 54321
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


@pytest.fixture
def default_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default lookup (no session override), with XDG_CACHE_HOME and the temp dir here."""
    monkeypatch.setattr(_cache_dir, "_root_override", None)
    monkeypatch.delenv("LOOPIR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (tmp_path / "tmp").mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _func(n: int):
    return elementwise_chain(3, 20 + n, stages=1).func


def test_default_location_is_created_private(default_location: Path) -> None:
    d = _cache_dir.kind_dir("cpu")
    root = default_location / "xdg" / "loopir"
    assert d == root / "cpu"
    assert _mode(root) == 0o700 and _mode(d) == 0o700
    from loopir.codegen_cuda.compile import default_cache_dir

    assert default_cache_dir() == root / "cuda"
    # No XDG_CACHE_HOME: ~/.cache/loopir.
    os.environ.pop("XDG_CACHE_HOME")
    assert _cache_dir.default_root() == Path.home() / ".cache" / "loopir"


def test_env_and_set_cache_root_precedence(default_location: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("LOOPIR_CACHE_DIR", str(default_location / "env"))
    assert _cache_dir.kind_dir("cuda") == default_location / "env" / "cuda"
    loopir.runtime.set_cache_dir(default_location / "set")
    assert _cache_dir.kind_dir("cutlass") == default_location / "set" / "cutlass"
    assert loopir.runtime.get_cache_dir() == default_location / "set"
    with pytest.raises(CodegenError, match="unknown cache kind 'gpu'"):
        _cache_dir.kind_dir("gpu")


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_open_directory_refused(tmp_path: Path, mode: int) -> None:
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(mode)
    with pytest.raises(CodegenError, match=rf"cache directory {d} is refused: its mode is {mode:04o}"):
        loopir.build(_func(0), target="cpu", cache_dir=d)
    assert not (d / "cpu").exists()


def test_open_kind_subdirectory_refused(tmp_path: Path) -> None:
    (tmp_path / "c" / "cuda").mkdir(parents=True)
    (tmp_path / "c" / "cuda").chmod(0o777)
    with pytest.raises(CodegenError, match="cuda is refused: its mode is 0777"):
        _cache_dir.kind_dir("cuda", root=tmp_path / "c")


@as_root
def test_foreign_directory_refused(tmp_path: Path) -> None:
    d = tmp_path / "theirs"
    d.mkdir(mode=0o755)
    os.chown(d, OTHER_UID, -1)
    with pytest.raises(CodegenError, match=rf"{d} is refused: it is owned by uid {OTHER_UID}"):
        loopir.build(_func(1), target="cpu", cache_dir=d)


def test_open_default_location_refused_not_bypassed(default_location: Path) -> None:
    root = default_location / "xdg" / "loopir"
    root.mkdir(parents=True)
    root.chmod(0o777)
    with pytest.raises(CodegenError, match="refused: its mode is 0777"):
        _cache_dir.kind_dir("cpu")
    assert not list((default_location / "tmp").iterdir()), "fell back instead of refusing"


def test_fallback_is_private(default_location: Path) -> None:
    # XDG_CACHE_HOME under a regular file: the default root cannot be created.
    (default_location / "file").write_text("")
    os.environ["XDG_CACHE_HOME"] = str(default_location / "file" / "x")
    d = _cache_dir.kind_dir("cuda")
    fallback = default_location / "tmp" / f"loopir-{os.geteuid()}"
    assert d == fallback / "cuda"
    assert _mode(fallback) == 0o700 and _mode(d) == 0o700
    # A predictable name: one that is readable by others (made by someone first) is refused.
    shutil.rmtree(fallback)
    fallback.mkdir(mode=0o755)
    fallback.chmod(0o755)
    with pytest.raises(CodegenError, match=rf"{fallback} is refused: its mode is 0755.*0700"):
        _cache_dir.kind_dir("cuda")


def test_explicit_directory_never_falls_back(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CodegenError, match=r"cache directory .*file/c: cannot create it"):
        _cache_dir.kind_dir("cpu", root=tmp_path / "file" / "c")
    with pytest.raises(CodegenError, match="is not a directory"):
        _cache_dir.kind_dir("cpu", tmp_path / "file")


def _planted_cpu_entry(tmp_path: Path, n: int) -> tuple[Path, Path]:
    """A healthy CPU entry (built, never loaded here) and the cache root holding it."""
    from loopir.runtime.cache import compile_shared

    src = f"int f{n}(void) {{ return {n}; }}\n"
    res = compile_shared(src, cache_dir=tmp_path / "c")
    return res.path, tmp_path / "c"


def test_cpu_entry_writable_by_others_refused(tmp_path: Path) -> None:
    from loopir.runtime.cache import compile_shared

    lib, root = _planted_cpu_entry(tmp_path, 1)
    src = "int f1(void) { return 1; }\n"
    assert compile_shared(src, cache_dir=root).cache_hit
    lib.chmod(0o666)
    with pytest.raises(CodegenError, match=rf"cache entry {lib} is refused: its mode is 0666"):
        compile_shared(src, cache_dir=root)
    lib.chmod(0o700)
    lib.with_suffix(".sha256").chmod(0o646)
    with pytest.raises(CodegenError, match=r"\.sha256 is refused: its mode is 0646"):
        compile_shared(src, cache_dir=root)


@as_root
def test_cpu_entry_owned_by_another_user_refused(tmp_path: Path) -> None:
    from loopir.runtime.cache import compile_shared

    lib, root = _planted_cpu_entry(tmp_path, 2)
    # A planted library with a matching checksum passes the hash check: the owner must not.
    os.chown(lib, OTHER_UID, -1)
    with pytest.raises(CodegenError, match=rf"{lib} is refused: it is owned by uid {OTHER_UID}"):
        compile_shared("int f2(void) { return 2; }\n", cache_dir=root)


def test_cache_files_are_owner_only_even_under_a_loose_umask(tmp_path: Path) -> None:
    from loopir.runtime.cache import compile_shared

    old = os.umask(0o002)
    try:
        first = compile_shared("int g(void) { return 7; }\n", cache_dir=tmp_path)
        # A group-writable library (the linker's default mode under umask 002) would be
        # refused by the next build: the cache must write its files owner-only.
        assert _mode(first.path) & 0o077 == 0
        assert compile_shared("int g(void) { return 7; }\n", cache_dir=tmp_path).cache_hit
    finally:
        os.umask(old)


def test_check_entry_rejects_non_files(tmp_path: Path) -> None:
    assert _cache_dir.check_entry(tmp_path / "absent") is False
    (tmp_path / "real").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(CodegenError, match="link is refused: it is not a regular file"):
        _cache_dir.check_entry(tmp_path / "link")


@pytest.mark.nvcc
def test_cuda_entry_refused(tmp_path: Path) -> None:
    from loopir.codegen_cuda.compile import compile_cuda

    src = '__global__ void k(float* a) { a[threadIdx.x] = 1.0f; }\n'
    first = compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)
    assert compile_cuda(src, arch="sm_90a", cache_dir=tmp_path).cache_hit
    first.path.chmod(0o622)
    with pytest.raises(CodegenError, match=r"\.cubin is refused: its mode is 0622"):
        compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)
    first.path.chmod(0o600)
    meta = first.path.with_suffix(".json")
    meta.chmod(0o666)
    with pytest.raises(CodegenError, match=r"\.json is refused"):
        compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)


def test_cutlass_library_verified_before_load(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    pytest.importorskip("cutlass_library")
    from loopir.codegen_cuda.cutlass import library

    monkeypatch.setattr(library, "nvcc_version", lambda: "release 0.0")
    monkeypatch.setattr(library, "compile_flags", lambda arch, extra=(): ["-O3"])
    key = library._cache_key("source", ["-O3"])
    lib = tmp_path / f"lib_{key}.so"
    lib.write_bytes(b"planted")
    lib.chmod(0o600)
    digest = lib.with_suffix(".sha256")
    digest.write_text(hashlib.sha256(b"planted").hexdigest() + "\n")
    assert library.build_library("source", 90, cache=tmp_path)[1], "a verified entry is a hit"
    # Altered library (checksum mismatch): never a hit. nvcc is not run here: it is replaced.
    lib.write_bytes(b"altered")
    assert not library._entry_ok(lib, digest)
    digest.unlink()
    assert not library._entry_ok(lib, digest)
    digest.write_text(hashlib.sha256(b"altered").hexdigest() + "\n")
    lib.chmod(0o666)
    with pytest.raises(CodegenError, match=rf"{lib} is refused: its mode is 0666"):
        library.build_library("source", 90, cache=tmp_path)
    lib.chmod(0o600)
    (tmp_path / "open").mkdir(mode=0o777)
    (tmp_path / "open").chmod(0o777)
    with pytest.raises(CodegenError, match="open is refused: its mode is 0777"):
        library.cache_dir(tmp_path / "open")
