"""Runtimes: the CPU reference executor (C via the system compiler, loaded with ctypes).

``loopir.build(func, target="cpu")`` is the usual entry point; :func:`set_cache_dir` chooses
where compiled libraries are kept.
"""

from loopir.runtime.cache import get_cache_dir, set_cache_dir
from loopir.runtime.cpu import CPUModule, build_cpu

__all__ = ["CPUModule", "build_cpu", "get_cache_dir", "set_cache_dir"]
