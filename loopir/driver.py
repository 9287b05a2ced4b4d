"""``loopir.build``: compile a PrimFunc for a target.

The module is called ``driver`` (not ``build``) so that the submodule never shadows the
``loopir.build`` function.
"""

from __future__ import annotations

from typing import Any

from loopir.errors import CodegenError
from loopir.ir.stmt import PrimFunc

__all__ = ["build", "TARGETS"]

TARGETS = ("cpu", "cuda")


def build(func: PrimFunc, target: str = "cpu", **options: Any) -> Any:
    """Compile ``func`` for ``target``.

    Parameters
    ----------
    func
        The function (TensorIR with blocks, or lowered).
    target
        ``"cpu"``: the reference executor (:class:`loopir.runtime.CPUModule`); ``"cuda"``:
        CUDA C++ compiled with nvcc and run through pycuda (``CUDAModule``).
    **options
        Target options, e.g. ``check_bounds=False`` or ``cache_dir=...`` for the CPU (see
        :func:`loopir.runtime.build_cpu`) and the CUDA options of
        ``loopir.codegen_cuda.build_cuda``.

    Raises
    ------
    CodegenError
        For an unknown target, options the target does not know, or a failed compilation.
    """
    if not isinstance(func, PrimFunc):
        raise CodegenError(f"build: expected a PrimFunc, got {type(func).__name__}: {func!r}")
    if target == "cpu":
        from loopir.runtime.cpu import build_cpu

        return build_cpu(func, **options)
    if target == "cuda":
        from loopir.codegen_cuda import build_cuda  # type: ignore[attr-defined]

        return build_cuda(func, **options)
    raise CodegenError(f"build: unknown target {target!r}; known targets: {', '.join(TARGETS)}")
