"""Compiling generated C to shared libraries, cached on disk by content hash.

The cache root is, in order of precedence: the ``cache_dir`` build option, the value set
with :func:`set_cache_dir`, the ``LOOPIR_CACHE_DIR`` environment variable, then
``$XDG_CACHE_HOME/loopir`` (``~/.cache/loopir``); :mod:`loopir._cache_dir` resolves it and
refuses directories and entries someone else could have written. CPU libraries live in its
``cpu/`` subfolder, named by the SHA-256 of (source, compiler flags, compiler version). Files
are written under a temporary name and renamed into place, so concurrent builds of the same
function never see a half-written library.

Each library has a ``.sha256`` file beside it holding the library's own SHA-256; an entry
whose library is missing, truncated or altered (or whose checksum file is) is rebuilt, never
loaded. Builds of the same key take an exclusive lock (``.lock`` file, ``fcntl.flock``), so
concurrent processes compile it once and the others reuse the result.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from loopir import _cache_dir
from loopir.errors import CodegenError

logger = logging.getLogger(__name__)

__all__ = [
    "set_cache_dir", "get_cache_dir", "compile_shared", "CompileResult", "DEFAULT_FLAGS",
    "find_compiler", "supports_flag",
]  # fmt: skip

# -fno-aggressive-loop-optimizations: gcc 12 at -O2 derived wrong loop bounds from the sizes of
# stack-allocated intermediate buffers and produced zeros for a twice-padded batch matmul (fuzz
# finding O1; correct at -O0/-O1, under ASan/UBSan and with this flag). The executor is the
# reference: it must not depend on such inferences. -pipe: the compiler's stages hand their output
# on through pipes, not temporary files (5-6 % of a small library's compile, measured).
DEFAULT_FLAGS = (
    "-O2", "-shared", "-fPIC", "-fwrapv", "-fexcess-precision=standard", "-std=gnu11",
    "-fno-aggressive-loop-optimizations", "-pipe",
)  # fmt: skip

def set_cache_dir(path: str | os.PathLike[str] | None) -> None:
    """Set the cache root of every loopir cache for this process (None: the default lookup).

    The same as :func:`loopir._cache_dir.set_cache_root`: CPU libraries go to its ``cpu/``
    subfolder, cubins to ``cuda/``, CUTLASS libraries to ``cutlass/``.
    """
    _cache_dir.set_cache_root(path)


def get_cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The cache root in effect (see the module docstring for the precedence)."""
    if override is not None:
        return Path(override)
    return _cache_dir.cache_root()[0]


@functools.lru_cache(maxsize=8)
def _compiler_version(compiler: str) -> str:
    try:
        out = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CodegenError(f"build(target='cpu'): cannot run C compiler {compiler!r}: {exc}") from None
    return out.stdout.strip() or out.stderr.strip()


def find_compiler(compiler: str | None = None) -> str:
    """The C compiler to use: ``compiler``, else ``$CC``, then gcc, then cc."""
    cc = compiler or os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise CodegenError("build(target='cpu'): no C compiler found (install gcc or set CC)")
    return cc


_PROBES = {
    # OpenMP: the runtime library must link too (clang without libomp has the flag but no omp.h)
    "-fopenmp": "#include <omp.h>\nint lir_probe(void) { return omp_get_max_threads(); }\n",
    "-fopenmp-simd": "int lir_probe(int* a) {\n#pragma omp simd\nfor (int i = 0; i < 8; ++i) a[i] += 1;\nreturn 0; }\n",
}


@functools.lru_cache(maxsize=16)
def supports_flag(compiler: str, flag: str) -> bool:
    """Whether ``compiler`` builds a shared library with ``flag`` (``-fopenmp`` or
    ``-fopenmp-simd``): one small compile per compiler and flag in a process."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(_PROBES[flag])
        cmd = [compiler, flag, "-shared", "-fPIC", "-o", str(Path(tmp) / "probe.so"), str(src)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
    if proc.returncode != 0:
        logger.warning("C compiler %s does not support %s; parallel/vectorized loops run serially: %s",
                       compiler, flag, proc.stderr.strip()[:500])  # fmt: skip
    return proc.returncode == 0


class CompileResult:
    """Where the library is, how long compiling took (0 on a cache hit) and whether it hit."""

    def __init__(self, path: Path, seconds: float, cache_hit: bool, source_path: Path) -> None:
        self.path = path
        self.seconds = seconds
        self.cache_hit = cache_hit
        self.source_path = source_path


def compile_shared(
    source: str,
    *,
    compiler: str | None = None,
    flags: tuple[str, ...] = DEFAULT_FLAGS,
    cache_dir: str | os.PathLike[str] | None = None,
) -> CompileResult:
    """Compile ``source`` to a shared library (or reuse the cached one).

    Raises
    ------
    CodegenError
        If no compiler is found or compilation fails (the message has the compiler log and
        the path of the saved source).
    """
    cc = find_compiler(compiler)
    version = _compiler_version(cc)
    key = hashlib.sha256("\0".join([source, " ".join(flags), cc, version]).encode()).hexdigest()
    directory = _cache_dir.kind_dir("cpu", root=cache_dir)
    lib = directory / f"lib_{key[:32]}.so"
    src = directory / f"lib_{key[:32]}.c"
    digest = directory / f"lib_{key[:32]}.sha256"
    if _entry_ok(lib, digest):
        logger.debug("cpu build cache hit: %s", lib)
        return CompileResult(lib, 0.0, True, src)
    with _locked(directory / f"lib_{key[:32]}.lock"):
        # Another process may have built it while we waited for the lock.
        if _entry_ok(lib, digest):
            logger.debug("cpu build cache hit after waiting: %s", lib)
            return CompileResult(lib, 0.0, True, src)
        return _compile(source, cc, flags, directory, lib, src, digest)


def _entry_ok(lib: Path, digest: Path) -> bool:
    """Whether ``lib`` exists and matches the checksum recorded when it was compiled.

    A missing checksum (an entry of an older loopir, or a build that died between the two
    renames), a truncated or altered library, or an unreadable file all mean "rebuild".
    """
    # Refuse (CodegenError) an entry someone else could have planted, checksum and all.
    if not _cache_dir.check_entry(lib):
        return False
    try:
        if not _cache_dir.check_entry(digest):
            logger.debug("cpu cache entry %s has no checksum file; rebuilding", lib)
            return False
        want = digest.read_text().strip()
        ok = want == _cache_dir.sha256_file(lib)
    except FileNotFoundError:
        # An entry written by a loopir without checksums (or a build that died between the
        # two renames): rebuild quietly, it is not a sign of corruption.
        logger.debug("cpu cache entry %s has no checksum file; rebuilding", lib)
        return False
    except OSError as exc:
        logger.warning("cpu cache entry %s is unreadable (%s); rebuilding", lib, exc)
        return False
    if not ok:
        logger.warning("cpu cache entry %s does not match its checksum; rebuilding", lib)
    return ok


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive inter-process lock on ``path`` (created if needed)."""
    with open(path, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _compile(source: str, cc: str, flags: tuple[str, ...], directory: Path, lib: Path, src: Path,
             digest: Path) -> CompileResult:  # fmt: skip
    fd, tmp_src = tempfile.mkstemp(suffix=".c", dir=directory)
    with os.fdopen(fd, "w") as f:
        f.write(source)
    fd, tmp_lib = tempfile.mkstemp(suffix=".so", dir=directory)
    os.close(fd)
    cmd = [cc, *flags, "-o", tmp_lib, tmp_src, "-lm"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        os.unlink(tmp_lib)
        os.replace(tmp_src, src)
        raise CodegenError(
            f"build(target='cpu'): running {' '.join(cmd)} failed: {exc}; source saved at {src}"
        ) from None
    seconds = time.perf_counter() - t0
    os.replace(tmp_src, src)
    if proc.returncode != 0:
        os.unlink(tmp_lib)
        raise CodegenError(
            f"build(target='cpu'): the C compiler failed (exit {proc.returncode}) on the "
            f"generated source saved at {src}\ncommand: {' '.join(cmd)}\n"
            f"{proc.stderr.strip()}"
        )
    # The checksum describes the new library; write it first so that a reader never pairs
    # the new library with an old checksum for long (a mismatch only costs a rebuild).
    # The linker creates its output with the umask's mode; under umask 002 that is group-
    # writable, which the next load would refuse: the cache's files are the owner's only.
    os.chmod(tmp_lib, 0o700)
    checksum = _cache_dir.sha256_file(Path(tmp_lib))
    _atomic_write_text(digest, checksum + "\n")
    os.replace(tmp_lib, lib)
    logger.debug("compiled %s in %.3f s", lib, seconds)
    return CompileResult(lib, seconds, False, src)
