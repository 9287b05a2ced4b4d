"""Build CUTLASS modules into shared libraries (one nvcc call each) and call them via ctypes.

The CUTLASS device adapters are host code, so a module is a shared library of ``extern "C"``
host entry points (see ``emit.py``). Libraries are cached on disk under a content hash of the
source, the nvcc flags, the nvcc version and the CUTLASS version, and written atomically, so
a warm build is a hash plus a ``dlopen``.

The CUDA runtime inside the library uses the CUDA context current on the calling thread (or the
device's primary context when none is):
[`ensure_context`][loopir.codegen_cuda.cutlass.library.ensure_context] makes pycuda's current
context the device's primary context when nothing is current, so the generated kernels loaded by
pycuda, the library and frameworks such as PyTorch all share one context.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loopir import _cache_dir
from loopir.codegen_cuda.cutlass.emit import STATUS_MESSAGES, KernelSpec, emit_module
from loopir.codegen_cuda.cutlass.problem import cutlass_version
from loopir.errors import CodegenError, LaunchError

__all__ = [
    "CutlassLibrary",
    "build_library",
    "cache_dir",
    "compile_flags",
    "cutlass_include_dirs",
    "ensure_context",
    "nvcc_version",
]

logger = logging.getLogger(__name__)


def cutlass_include_dirs() -> list[str]:
    """The CUTLASS (and CuTe) header folders shipped by the ``nvidia-cutlass`` package.

    Raises
    ------
    CodegenError
        If ``cutlass_library`` is not installed or ships no headers.
    """
    try:
        import cutlass_library
    except ImportError as exc:
        raise CodegenError(
            "cutlass: cutlass_library is not importable; install nvidia-cutlass "
            "(pip install --no-deps nvidia-cutlass==4.2.0.0)"
        ) from exc
    root = Path(cutlass_library.__file__).parent / "source"
    dirs = [root / "include", root / "tools" / "util" / "include"]
    for d in dirs:
        if not (d / "cutlass").is_dir():
            raise CodegenError(f"cutlass: the nvidia-cutlass package has no headers under {d}")
    return [str(d) for d in dirs]


@functools.lru_cache(maxsize=1)
def nvcc_version() -> str:
    """nvcc's release, e.g. ``"release 13.0"`` (part of cache keys).

    Only the release is keyed, not the build number, so that libraries built on one machine
    can be carried to another with the same toolkit release (a patch build of the same
    release generates the same code for these templates).

    Raises
    ------
    CodegenError
        If nvcc is not on PATH.
    """
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CodegenError("cutlass: nvcc is not on PATH; the CUDA toolkit is needed to build CUTLASS kernels")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if "release" in line:
            return "release " + line.split("release", 1)[1].split(",")[0].strip()
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "unknown"


def compile_flags(arch: int, extra: Sequence[str] = ()) -> list[str]:
    """nvcc flags for a module whose newest kernels target ``arch`` (90 or 80).

    sm90 kernels need the ``sm_90a`` target (wgmma, setmaxnreg), written in the ``-gencode``
    form; sm80-only modules are built for sm_80 plus sm_90 machine code so they also run on
    Hopper.
    """
    if arch == 90:
        gencode = ["-gencode=arch=compute_90a,code=sm_90a"]
    elif arch == 80:
        gencode = ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90"]
    else:
        raise CodegenError(f"cutlass: no compile flags for arch {arch} (supported: 90, 80)")
    flags = [
        "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC",
        "-shared", "-lineinfo", *gencode,
    ]  # fmt: skip
    for inc in cutlass_include_dirs():
        flags.append(f"-I{inc}")
    flags.extend(extra)
    return flags


def unit_flags() -> list[str]:
    """nvcc flags for the CUTLASS translation unit of a built module (an object file).

    The target architecture and ``-c``/``-fPIC`` come from the module's compile
    ([`loopir.codegen_cuda.compile.compile_cuda`][loopir.codegen_cuda.compile.compile_cuda]); these
    are what CUTLASS's headers need.
    """
    return ["-DNDEBUG", "--expt-relaxed-constexpr", "-lineinfo",
            *(f"-I{inc}" for inc in cutlass_include_dirs())]  # fmt: skip


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where built libraries are cached: ``override`` (used as is), else ``<cache root>/cutlass``.

    The cache root is resolved by [`loopir._cache_dir`][loopir._cache_dir]
    (``loopir.runtime.set_cache_dir``, ``$LOOPIR_CACHE_DIR``, ``$XDG_CACHE_HOME/loopir``,
    ``~/.cache/loopir``). The folder is created with mode 0700; one owned by another user or
    writable by group/others is refused with a CodegenError, since its libraries are loaded into
    this process.
    """
    return _cache_dir.kind_dir("cutlass", override)


def _cache_key(source: str, flags: Sequence[str]) -> str:
    # Include paths name the package's install location; the CUTLASS version stands for
    # the headers instead, so a cache survives a reinstall of the same version.
    portable = [f for f in flags if not f.startswith("-I")]
    h = hashlib.sha256()
    for part in (source, "\0".join(portable), nvcc_version(), cutlass_version()):
        h.update(part.encode())
        h.update(b"\1")
    return h.hexdigest()[:24]


def build_library(
    source: str,
    arch: int,
    *,
    cache: str | os.PathLike[str] | None = None,
    extra_flags: Sequence[str] = (),
    timeout_s: float | None = None,
) -> tuple[Path, bool, float]:
    """Compile ``source`` into a shared library with one nvcc invocation (cached).

    Parameters
    ----------
    source
        The C++/CUDA source (see [`emit_module`][loopir.codegen_cuda.cutlass.emit.emit_module]).
    arch
        90 or 80 (see [`compile_flags`][loopir.codegen_cuda.cutlass.library.compile_flags]).
    cache
        Cache folder override.
    extra_flags
        More nvcc flags (part of the cache key).
    timeout_s
        Kill nvcc after this many seconds.

    Returns
    -------
    (path, hit, seconds)
        The library, whether it came from the cache, and the build time.

    Raises
    ------
    CodegenError
        If nvcc fails; the message holds the log and the path of the saved source.
    """
    t0 = time.perf_counter()
    flags = compile_flags(arch, extra_flags)
    key = _cache_key(source, flags)
    folder = cache_dir(cache)
    lib_path = folder / f"lib_{key}.so"
    digest_path = folder / f"lib_{key}.sha256"
    if _entry_ok(lib_path, digest_path):
        return lib_path, True, time.perf_counter() - t0
    src_path = folder / f"src_{key}.cu"
    _atomic_write(src_path, source.encode())
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CodegenError("cutlass: nvcc is not on PATH; the CUDA toolkit is needed to build CUTLASS kernels")
    fd, tmp_out = tempfile.mkstemp(prefix=f".lib_{key}.", suffix=".so", dir=folder)
    os.close(fd)
    cmd = [nvcc, *flags, str(src_path), "-o", tmp_out]
    logger.info("cutlass: nvcc building %s (sm_%d)", lib_path.name, arch)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        os.unlink(tmp_out)
        raise CodegenError(
            f"cutlass: nvcc timed out after {timeout_s} s building {src_path}"
        ) from exc
    if proc.returncode != 0:
        os.unlink(tmp_out)
        log = (proc.stdout + proc.stderr)[-20000:]
        raise CodegenError(
            f"cutlass: nvcc failed (exit {proc.returncode}) on {src_path}\n"
            f"command: {' '.join(cmd)}\n{log}"
        )
    # The linker creates its output with the umask's mode; the cache's files are the owner's.
    os.chmod(tmp_out, 0o700)
    # The checksum first: a reader pairing it with an older library only rebuilds.
    _atomic_write(digest_path, (_cache_dir.sha256_file(Path(tmp_out)) + "\n").encode())
    os.replace(tmp_out, lib_path)
    return lib_path, False, time.perf_counter() - t0


def _entry_ok(lib: Path, digest: Path) -> bool:
    """Whether cached ``lib`` may be loaded: ours (else CodegenError) and matching its checksum.

    A library without a checksum (built by an older loopir), truncated or altered is rebuilt.
    """
    if not _cache_dir.check_entry(lib):
        return False
    try:
        if not _cache_dir.check_entry(digest):
            logger.debug("cutlass: cached %s has no checksum file; rebuilding", lib)
            return False
        ok = digest.read_text().strip() == _cache_dir.sha256_file(lib)
    except OSError as exc:
        logger.warning("cutlass: cached %s is unreadable (%s); rebuilding", lib, exc)
        return False
    if not ok:
        logger.warning("cutlass: cached %s does not match its checksum; rebuilding", lib)
    return ok


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


_PUSHED: list[Any] = []


def _pop_pushed() -> None:
    # pycuda aborts the process at exit when its context stack is not empty: pop what
    # ensure_context pushed (atexit handlers run before pycuda's module cleanup).
    while _PUSHED:
        ctx = _PUSHED.pop()
        try:
            ctx.pop()
        except Exception:  # pragma: no cover - best effort at interpreter exit
            logger.debug("cutlass: could not pop the CUDA context at exit", exc_info=True)


def ensure_context() -> Any:
    """Make sure a CUDA context is current on this thread (pycuda's primary context).

    pycuda only sees contexts on its own stack, so when that stack is empty the device's
    primary context -- the one the CUDA runtime (CUTLASS, PyTorch) uses -- is retained and
    pushed once, and popped again at interpreter exit.

    Returns the pycuda context, or raises [`LaunchError`][loopir.errors.LaunchError] when pycuda or
    a GPU is missing.
    """
    try:
        import pycuda.driver as drv
    except ImportError as exc:
        raise LaunchError("cutlass: pycuda is not installed; cannot run CUTLASS kernels") from exc
    try:
        drv.init()
        ctx = drv.Context.get_current()
        if ctx is None:
            if drv.Device.count() == 0:
                raise LaunchError("cutlass: no CUDA device is visible")
            ctx = drv.Device(0).retain_primary_context()
            ctx.push()
            if not _PUSHED:
                atexit.register(_pop_pushed)
            _PUSHED.append(ctx)
        return ctx
    except drv.Error as exc:
        raise LaunchError(f"cutlass: cannot set up a CUDA context: {exc}") from exc


def _entry_argtypes(n_ints: int) -> list[Any]:
    """ctypes argument types of an entry point: five pointers, ``n_ints`` extents, alpha, beta
    and the stream (4 extents for a GEMM, 15 for a convolution: see ``emit.py``)."""
    return [*[ctypes.c_void_p] * 5, *[ctypes.c_int] * n_ints, ctypes.c_float, ctypes.c_float,
            ctypes.c_void_p]  # fmt: skip


def _n_ints(spec: KernelSpec) -> int:
    return 15 if spec.is_conv else 4


class CutlassLibrary:
    """A built CUTLASS module: its source, its shared library and its entry points.

    Parameters
    ----------
    specs
        The kernels it holds.
    cache
        Cache folder override (see [`cache_dir`][loopir.codegen_cuda.cutlass.library.cache_dir]).
    extra_flags
        More nvcc flags.

    Attributes
    ----------
    source, path, cache_hit, build_seconds
        The emitted source, the ``.so``, whether it came from the cache and the build time.
    """

    def __init__(
        self,
        specs: Sequence[KernelSpec],
        *,
        cache: str | os.PathLike[str] | None = None,
        extra_flags: Sequence[str] = (),
        timeout_s: float | None = None,
    ) -> None:
        self.specs = {s.entry: s for s in specs}
        self.source = emit_module(list(self.specs.values()))
        arch = max(s.candidate.arch for s in self.specs.values())
        self.path, self.cache_hit, self.build_seconds = build_library(
            self.source, arch, cache=cache, extra_flags=extra_flags, timeout_s=timeout_s
        )
        self._dll: ctypes.CDLL | None = None
        self._fns: dict[str, Any] = {}

    def _load(self) -> ctypes.CDLL:
        if self._dll is None:
            try:
                self._dll = ctypes.CDLL(str(self.path))
            except OSError as exc:
                raise LaunchError(f"cutlass: cannot load {self.path}: {exc}") from exc
            self._dll.loopir_cutlass_last_error.restype = ctypes.c_char_p
        return self._dll

    def entry(self, name: str) -> Any:
        """The ctypes function of entry point ``name``."""
        fn = self._fns.get(name)
        if fn is not None:
            return fn
        if name not in self.specs:
            raise LaunchError(f"cutlass: module has no entry point {name!r}; it has {sorted(self.specs)}")
        fn = getattr(self._load(), name)
        fn.argtypes = _entry_argtypes(_n_ints(self.specs[name]))
        fn.restype = ctypes.c_int
        self._fns[name] = fn
        return fn

    def last_error(self) -> str:
        return (self._load().loopir_cutlass_last_error() or b"").decode(errors="replace")

    def _dims(self, name: str, dims: Sequence[int]) -> tuple[int, ...]:
        """The entry's integer arguments: a GEMM's ``m, n, k[, batch=1]``, a convolution's 15
        (``ConvProblem.dims``)."""
        want = _n_ints(self.specs[name]) if name in self.specs else 4
        out = tuple(int(v) for v in dims)
        if want == 4 and len(out) == 3:
            out += (1,)
        if len(out) != want:
            raise LaunchError(f"cutlass: entry {name} takes {want} extents, got {len(out)}: {out}")
        return out

    def bind(
        self,
        name: str,
        a: int,
        b: int,
        d: int,
        *dims: int,
        source: int = 0,
        bias: int = 0,
        alpha: float = 1.0,
        beta: float = 0.0,
        stream: int = 0,
    ) -> Callable[[], None]:
        """A zero-argument callable running entry ``name`` on fixed device pointers.

        ``dims`` are a GEMM's ``m, n, k[, batch]`` or a convolution's 15 extents
        ([`ConvProblem.dims`][loopir.codegen_cuda.cutlass.problem.ConvProblem.dims]).

        The entry point, the ctypes argument conversion and the CUDA context are resolved once, so a
        repeated call costs one ctypes call plus the launch (what timing loops and repeated launches
        on the same buffers want). Errors are raised as by
        [`call`][loopir.codegen_cuda.cutlass.library.CutlassLibrary.call].
        """
        ensure_context()
        fn = self.entry(name)
        ints = self._dims(name, dims)
        args = (
            ctypes.c_void_p(a), ctypes.c_void_p(b), ctypes.c_void_p(source or None),
            ctypes.c_void_p(bias or None), ctypes.c_void_p(d), *map(ctypes.c_int, ints),
            ctypes.c_float(alpha), ctypes.c_float(beta), ctypes.c_void_p(stream or None),
        )  # fmt: skip

        def run() -> None:
            status = fn(*args)
            if status != 0:
                raise LaunchError(self._failure(name, ints, status))

        return run

    def _failure(self, name: str, ints: tuple[int, ...], status: int) -> str:
        what = f"(M={ints[0]}, N={ints[1]}, K={ints[2]}, batch={ints[3]})" if len(ints) == 4 else f"extents {ints}"
        return (f"cutlass: {name} on {what} returned {status} "
                f"({STATUS_MESSAGES.get(status, 'unknown status')}): {self.last_error()}")  # fmt: skip

    def call(
        self,
        name: str,
        a: int,
        b: int,
        d: int,
        *dims: int,
        source: int = 0,
        bias: int = 0,
        alpha: float = 1.0,
        beta: float = 0.0,
        stream: int = 0,
    ) -> None:
        """Run entry ``name`` on device pointers (asynchronous on ``stream``); ``dims`` as for
        [`bind`][loopir.codegen_cuda.cutlass.library.CutlassLibrary.bind].

        Raises
        ------
        LaunchError
            With CUTLASS's status and message when the entry point returns an error.
        """
        ensure_context()
        fn = self.entry(name)
        ints = self._dims(name, dims)
        status = fn(a, b, source or None, bias or None, d, *ints, alpha, beta, stream or None)
        if status != 0:
            raise LaunchError(self._failure(name, ints, status))
