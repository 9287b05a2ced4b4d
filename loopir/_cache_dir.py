"""Where compiled code is cached, and the checks that make loading it from there safe.

Every cache of loopir -- the CPU executor's shared libraries, the CUDA cubins and the CUTLASS
shared libraries -- lives in one root directory, in a subfolder per kind (``cpu/``, ``cuda/``,
``cutlass/``). The root is, in order of precedence:

1. the value given to [`set_cache_root`][loopir._cache_dir.set_cache_root]
   (``loopir.runtime.set_cache_dir`` is the same);
2. the ``LOOPIR_CACHE_DIR`` environment variable;
3. ``$XDG_CACHE_HOME/loopir``, else ``~/.cache/loopir``.

A cache holds code that loopir loads into the calling process (``ctypes`` for the shared
libraries, the CUDA driver for cubins), so a directory that someone else can write is code
execution as the caller. Hence:

- directories loopir creates are created with mode 0700;
- an existing cache directory owned by another user, or writable by group or others, is
  refused with a [`CodegenError`][loopir.errors.CodegenError] naming it (so is such a cache entry,
  see [`check_entry`][loopir._cache_dir.check_entry]);
- only when the *default* root cannot be created or written (a read-only home, say) does loopir fall
  back, and then only to a private directory, ``<tmp>/loopir-<uid>``, with the same checks plus "not
  readable by others" (the name is predictable: someone may have created it first, which is then
  refused rather than used). A root chosen explicitly (an argument,
  [`set_cache_root`][loopir._cache_dir.set_cache_root] or ``LOOPIR_CACHE_DIR``) never falls back:
  the error says why it is unusable.

The writability probe is ``os.access`` (no shared probe file), so any number of processes may
resolve the same directory at once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
from pathlib import Path

from loopir.errors import CodegenError

logger = logging.getLogger(__name__)

__all__ = [
    "KINDS",
    "CacheRefusedError",
    "cache_root",
    "check_entry",
    "default_root",
    "ensure_private_dir",
    "kind_dir",
    "set_cache_root",
]

KINDS = ("cpu", "cuda", "cutlass")

_root_override: Path | None = None


class CacheRefusedError(CodegenError):
    """A cache directory or entry that someone else owns or can write (never used)."""


def set_cache_root(path: str | os.PathLike[str] | None) -> None:
    """Set the cache root for this process (None: back to the default lookup).

    Parameters
    ----------
    path
        The root folder; each kind of cache uses a subfolder of it.
    """
    global _root_override
    _root_override = None if path is None else Path(path)


def default_root() -> Path:
    """``$XDG_CACHE_HOME/loopir``, else ``~/.cache/loopir`` (ignores overrides)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "loopir"


def cache_root() -> tuple[Path, bool]:
    """The root in effect and whether it was chosen explicitly (see the module docstring)."""
    if _root_override is not None:
        return _root_override, True
    env = os.environ.get("LOOPIR_CACHE_DIR")
    if env:
        return Path(env), True
    return default_root(), False


def _fallback_root() -> Path:
    return Path(tempfile.gettempdir()) / f"loopir-{os.geteuid()}"


def _refuse_reason(st: os.stat_result, *, private: bool) -> str | None:
    """Why a file or directory with status ``st`` must not hold code we load, or None."""
    if st.st_uid != os.geteuid():
        return f"it is owned by uid {st.st_uid}, not by the current user (uid {os.geteuid()})"
    mode = stat.S_IMODE(st.st_mode)
    if private and mode & 0o077:
        return f"its mode is {mode:04o}: group or others can access it (it must be 0700)"
    if mode & 0o022:
        return f"its mode is {mode:04o}: group or others can write it"
    return None


def _check_dir(path: Path, *, private: bool = False) -> None:
    try:
        st = path.stat()
    except OSError as exc:
        raise CodegenError(f"cache directory {path}: cannot stat it ({exc})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise CodegenError(f"cache directory {path} is not a directory")
    reason = _refuse_reason(st, private=private)
    if reason is not None:
        raise CacheRefusedError(
            f"cache directory {path} is refused: {reason}; loopir loads compiled code from its "
            f"cache, so it must be owned by you and not writable by others "
            f"(chmod {'700' if private else 'go-w'} {path}, or choose another cache directory)"
        )


def ensure_private_dir(path: str | os.PathLike[str], *, private: bool = False) -> Path:
    """Create ``path`` (mode 0700, parents as needed) or check the existing one.

    Parameters
    ----------
    path
        The directory.
    private
        Also refuse a directory that group or others can read or enter (for the fallback).

    Returns
    -------
    Path
        ``path``, owned by the current user, not writable by group or others, writable by us.

    Raises
    ------
    CodegenError
        If it cannot be created, is not a directory, is owned by someone else, is writable by
        group or others, or is not writable by us. The message names the path.
    """
    path = Path(path)
    try:
        # mkdir -p semantics: a concurrent creator is fine (exist_ok), and only the folders
        # created here get 0700 -- an existing one keeps its mode and is checked below.
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        raise CodegenError(f"cache directory {path} is not a directory") from None
    except OSError as exc:
        raise CodegenError(f"cache directory {path}: cannot create it ({exc})") from None
    _check_dir(path, private=private)
    if not os.access(path, os.W_OK | os.X_OK):
        raise CodegenError(f"cache directory {path} is not writable by the current user")
    return path


def kind_dir(
    kind: str,
    explicit: str | os.PathLike[str] | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
) -> Path:
    """The checked directory for caches of ``kind``.

    Parameters
    ----------
    kind
        One of [`KINDS`][loopir._cache_dir.KINDS] (the subfolder of the root).
    explicit
        A directory chosen by the caller for this kind, used as is (no subfolder, no fallback).
    root
        A root chosen by the caller (``<root>/<kind>`` is used, no fallback).

    Raises
    ------
    CodegenError
        If the directory is unusable (see
        [`ensure_private_dir`][loopir._cache_dir.ensure_private_dir]) and no fallback applies.
    """
    if kind not in KINDS:
        raise CodegenError(f"cache: unknown cache kind {kind!r}; expected one of {KINDS}")
    if explicit is not None:
        return ensure_private_dir(explicit)
    chosen = root is not None
    if root is None:
        root, chosen = cache_root()
    root = Path(root)
    if chosen:
        ensure_private_dir(root)
        return ensure_private_dir(root / kind)
    try:
        ensure_private_dir(root)
        return ensure_private_dir(root / kind)
    except CacheRefusedError:
        # Someone else's (or an open) directory at the default place is an attack or a
        # misconfiguration, not a read-only home: say so instead of working around it.
        raise
    except CodegenError as exc:
        fallback = _fallback_root()
        logger.warning("%s; using the private fallback %s", exc, fallback)
        ensure_private_dir(fallback, private=True)
        return ensure_private_dir(fallback / kind, private=True)


def check_entry(path: str | os.PathLike[str]) -> bool:
    """Whether cache entry ``path`` exists; refuse it when someone else could have written it.

    Called before a cached file is read to be loaded (its hash is verified after this).

    Returns
    -------
    bool
        False when the file does not exist.

    Raises
    ------
    CodegenError
        If the entry is not a regular file, is owned by another user or is writable by group
        or others; the message names the path.
    """
    path = Path(path)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise CodegenError(f"cache entry {path}: cannot stat it ({exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise CacheRefusedError(f"cache entry {path} is refused: it is not a regular file")
    reason = _refuse_reason(st, private=False)
    if reason is not None:
        raise CacheRefusedError(
            f"cache entry {path} is refused: {reason}; loopir will not load code someone else "
            f"could have written (delete it, or choose another cache directory)"
        )
    return True


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes (hex), read in chunks: a cache entry's checksum."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
