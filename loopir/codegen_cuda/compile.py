"""nvcc invocation with a content-addressed disk cache.

nvcc produces one of three outputs: a cubin (kernels only, for inspection and SASS), an object file
(a translation unit to link), or a shared library (kernels plus their host code, what a built module
loads). An output is stored under ``<cache_dir>/<key>.<cubin|o|so>`` with ``<key>.json`` beside it
(the ptxas resource report and the output's SHA-256), where ``key`` hashes the source, the flags,
the output kind, the target architecture, the nvcc version and the hashes of the objects linked in.
Every file is written to a temporary name and moved into place with `os.replace`, so concurrent
builds never see half a file. A cache entry whose output does not match its recorded hash is
rebuilt; a directory or entry someone else could have written is refused (see
[`loopir._cache_dir`][loopir._cache_dir], which resolves the default directory,
``<cache root>/cuda``).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

from loopir import _cache_dir
from loopir.errors import CodegenError

logger = logging.getLogger(__name__)

DEFAULT_ARCH = "sm_90a"
BASE_FLAGS = ("-O3", "-std=c++17", "-Xptxas", "-v")
CACHE_VERSION = "2"
OUTPUTS = {"cubin": "cubin", "object": "o", "shared": "so"}


@attrs.frozen
class KernelResources:
    """ptxas' resource report for one kernel."""

    registers: int
    shared_bytes: int
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    barriers: int = 0


@attrs.frozen
class CompiledBinary:
    """A compiled cubin, object or shared library and what nvcc said about it.

    Attributes
    ----------
    data
        The output's bytes.
    path, source_path
        Where the cache holds the output and the source.
    output
        ``"cubin"``, ``"object"`` or ``"shared"``.
    sha256
        The output's hash (checked against the cache entry when loaded; part of the key of a
        library linking it).
    arch
        ``sm_XX`` target.
    log
        nvcc's output (ptxas ``-v`` report).
    resources
        Per-kernel register/shared/spill figures parsed from the log.
    cache_hit
        Whether the output came from the cache.
    """

    data: bytes
    path: Path
    source_path: Path
    arch: str
    log: str
    resources: dict[str, KernelResources]
    cache_hit: bool
    output: str = "cubin"
    sha256: str = ""


def default_cache_dir() -> Path:
    """``<cache root>/cuda``: the root set by ``loopir.runtime.set_cache_dir``, else
    ``$LOOPIR_CACHE_DIR``, else ``$XDG_CACHE_HOME/loopir`` (``~/.cache/loopir``).

    The path only; [`compile_cuda`][loopir.codegen_cuda.compile.compile_cuda] creates and checks it
    (see ``loopir._cache_dir``).
    """
    return _cache_dir.cache_root()[0] / "cuda"


def find_nvcc() -> str:
    """Path of nvcc (``$LOOPIR_NVCC``, PATH, ``$CUDA_HOME/bin``), or CodegenError."""
    cand = os.environ.get("LOOPIR_NVCC") or shutil.which("nvcc")
    if cand is None:
        for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
            if root and Path(root, "bin", "nvcc").exists():
                cand = str(Path(root, "bin", "nvcc"))
                break
    if cand is None:
        raise CodegenError(
            "CUDA compile: nvcc was not found (set LOOPIR_NVCC or CUDA_HOME, or put it on PATH)"
        )
    return cand


@functools.cache
def nvcc_version(nvcc: str) -> str:
    """The full ``nvcc --version`` text (part of the cache key)."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise CodegenError(f"CUDA compile: `{nvcc} --version` failed: {exc}") from exc
    return out.stdout.strip()


def normalize_arch(arch: str | None) -> str:
    """``"sm_90a"`` from ``"sm_90a"``, ``"90a"``, ``"9.0"``, ``"compute_90"``...; None -> detected."""
    if arch is None:
        return detect_arch()
    text = str(arch).strip().lower()
    text = text.removeprefix("sm_").removeprefix("compute_").replace(".", "")
    if not re.fullmatch(r"\d{2,3}[af]?", text):
        raise CodegenError(
            f"CUDA compile: invalid arch {arch!r}; expected e.g. 'sm_90a', 'sm_80', '90a'"
        )
    return f"sm_{text}"


def visible_capability() -> tuple[int, int] | None:
    """The compute capability of the first visible CUDA device (through pycuda), or None
    without pycuda, a driver or a device."""
    try:
        import pycuda.driver as drv

        drv.init()
        if drv.Device.count() > 0:
            major, minor = drv.Device(0).compute_capability()
            return int(major), int(minor)
    except Exception as exc:  # no pycuda / no driver
        logger.debug("no CUDA device visible (%s)", exc)
    return None


def detect_arch() -> str:
    """The visible device's architecture (``sm_90a`` for Hopper), or ``sm_90a`` without one."""
    cc = visible_capability()
    if cc is None:
        return DEFAULT_ARCH
    major, minor = cc
    return f"sm_{major}{minor}{'a' if cc == (9, 0) else ''}"


def cache_key(source: str, flags: Sequence[str], arch: str, version: str,
              output: str = "cubin", link: Sequence[str] = ()) -> str:  # fmt: skip
    h = hashlib.sha256()
    for part in (CACHE_VERSION, arch, "\0".join(flags), version, output, *link, source):
        h.update(part.encode())
        h.update(b"\0\1")
    return h.hexdigest()[:40]


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED = re.compile(r"Used (\d+) registers(.*)")


def parse_resources(log: str) -> dict[str, KernelResources]:
    """Per-kernel figures from ptxas ``-v`` output."""
    out: dict[str, KernelResources] = {}
    current: str | None = None
    frame = (0, 0, 0)
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current, frame = m.group(1), (0, 0, 0)
            continue
        m = _FRAME.search(line)
        if m and current is not None:
            frame = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            continue
        m = _USED.search(line)
        if m and current is not None:
            rest = m.group(2)
            smem = re.search(r"(\d+) bytes smem", rest)
            bars = re.search(r"used (\d+) barriers", rest)
            out[current] = KernelResources(
                registers=int(m.group(1)),
                shared_bytes=int(smem.group(1)) if smem else 0,
                stack_frame_bytes=frame[0],
                spill_store_bytes=frame[1],
                spill_load_bytes=frame[2],
                barriers=int(bars.group(1)) if bars else 0,
            )
    return out


def compile_cuda(
    source: str,
    arch: str | None = None,
    flags: Sequence[str] = (),
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
    output: str = "cubin",
    link: Sequence[CompiledBinary] = (),
) -> CompiledBinary:
    """Compile CUDA C++ ``source`` with nvcc, through the disk cache.

    Parameters
    ----------
    source
        CUDA C++ source.
    arch
        Target (``"sm_90a"``...); None detects the visible GPU, else ``sm_90a``.
    flags
        Extra nvcc flags, appended after the defaults (``-O3 -std=c++17 -Xptxas -v``).
    cache_dir
        Cache directory, used as is (default
        [`default_cache_dir`][loopir.codegen_cuda.compile.default_cache_dir]); created with mode
        0700, refused when another user owns it or group/others can write it.
    use_cache
        If False, always run nvcc (the result still refreshes the cache).
    output
        ``"cubin"`` (device code only), ``"object"`` (a unit to link) or ``"shared"`` (a
        shared library with the host code, linked with the static CUDA runtime).
    link
        Object files (``output="object"`` results) linked into a shared library.

    Raises
    ------
    CodegenError
        If nvcc is missing or fails; the message holds nvcc's log and the saved source's path.
    """
    arch = normalize_arch(arch)
    if output not in OUTPUTS:
        raise CodegenError(f"CUDA compile: output must be one of {sorted(OUTPUTS)}, got {output!r}")
    if link and output != "shared":
        raise CodegenError("CUDA compile: objects can only be linked into a shared library")
    nvcc = find_nvcc()
    all_flags = (*BASE_FLAGS, *flags)
    digests = [o.sha256 or hashlib.sha256(o.data).hexdigest() for o in link]
    key = cache_key(source, all_flags, arch, nvcc_version(nvcc), output, digests)
    root = _cache_dir.kind_dir("cuda", cache_dir)
    out_path = root / f"{key}.{OUTPUTS[output]}"
    meta_path = root / f"{key}.json"
    src_path = root / f"{key}.cu"
    if use_cache:
        hit = _cached(out_path, meta_path, src_path, arch, output)
        if hit is not None:
            return hit
    # One nvcc per key at a time: the processes that waited reuse the first one's output.
    with _locked(root / f"{key}.lock"):
        if use_cache:
            hit = _cached(out_path, meta_path, src_path, arch, output)
            if hit is not None:
                return hit
        return _build(source, nvcc, arch, all_flags, root, key, output, link)


def _cached(out_path: Path, meta_path: Path, src_path: Path, arch: str,
            output: str) -> CompiledBinary | None:  # fmt: skip
    # check_entry refuses (CodegenError) an entry someone else could have written.
    if _cache_dir.check_entry(out_path) and _cache_dir.check_entry(meta_path):
        return _load_entry(out_path, meta_path, src_path, arch, output)
    return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive inter-process lock on ``path`` (created if needed, never deleted)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


_KIND_FLAGS = {
    "cubin": ("-cubin",),
    "object": ("-c", "-Xcompiler", "-fPIC"),
    "shared": ("-shared", "-Xcompiler", "-fPIC"),
}


def _build(source: str, nvcc: str, arch: str, all_flags: Sequence[str], root: Path,
           key: str, output: str, link: Sequence[CompiledBinary]) -> CompiledBinary:  # fmt: skip
    suffix = OUTPUTS[output]
    out_path = root / f"{key}.{suffix}"
    meta_path = root / f"{key}.json"
    src_path = root / f"{key}.cu"
    _atomic_write(src_path, source.encode())
    num = arch.removeprefix("sm_")
    cmd = [
        nvcc,
        *_KIND_FLAGS[output],
        f"-gencode=arch=compute_{num},code=sm_{num}",
        *all_flags,
        "-o",
        "",  # filled below: a temporary name, moved into place on success
        str(src_path),
        *(str(o.path) for o in link),
    ]
    fd, tmp_out = tempfile.mkstemp(dir=root, prefix=f"{key}.", suffix=f".{suffix}.tmp")
    os.close(fd)
    cmd[cmd.index("")] = tmp_out
    logger.info("nvcc: %s", " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        os.unlink(tmp_out)
        raise CodegenError(f"CUDA compile: could not run nvcc ({exc}); source: {src_path}") from exc
    log = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        os.unlink(tmp_out)
        raise CodegenError(
            f"CUDA compile: nvcc failed (exit {proc.returncode}) for {arch}; source saved at "
            f"{src_path}\ncommand: {' '.join(cmd)}\n{log}"
        )
    os.chmod(tmp_out, 0o600)  # nvcc may recreate it with the umask's mode
    data = Path(tmp_out).read_bytes()
    os.replace(tmp_out, out_path)
    digest = hashlib.sha256(data).hexdigest()
    meta = {
        "version": CACHE_VERSION,
        "arch": arch,
        "output": output,
        "sha256": digest,
        "log": log,
        "command": cmd,
    }
    _atomic_write(meta_path, json.dumps(meta, indent=1).encode())
    return CompiledBinary(
        data=data,
        path=out_path,
        source_path=src_path,
        arch=arch,
        log=log,
        resources=parse_resources(log),
        cache_hit=False,
        output=output,
        sha256=digest,
    )


def _load_entry(out_path: Path, meta_path: Path, src_path: Path, arch: str,
                output: str) -> CompiledBinary | None:  # fmt: skip
    """A cached output, or None (with a warning) when the entry is unreadable or corrupted."""
    try:
        meta = json.loads(meta_path.read_text())
        data = out_path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        ok = (
            meta.get("version") == CACHE_VERSION
            and meta.get("sha256") == digest
            and data[:4] == b"\x7fELF"
        )
    except (OSError, ValueError) as exc:
        logger.warning("CUDA cache entry %s is unreadable (%s); rebuilding", out_path, exc)
        return None
    if not ok:
        logger.warning("CUDA cache entry %s is corrupted (hash mismatch); rebuilding", out_path)
        return None
    log = str(meta.get("log", ""))
    return CompiledBinary(
        data=data,
        path=out_path,
        source_path=src_path,
        arch=arch,
        log=log,
        resources=parse_resources(log),
        cache_hit=True,
        output=output,
        sha256=digest,
    )
