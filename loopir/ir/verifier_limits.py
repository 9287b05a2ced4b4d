"""CUDA launch limits of thread-bound loops, shared by ``bind`` and
[`loopir.verify`][loopir.analysis.verifier.verify].

The limits are the ones every CUDA device since compute capability 2.0 has (the H200 too):
at most 1024 threads per block, ``blockDim`` at most (1024, 1024, 64) and ``gridDim`` at most
(2**31 - 1, 65535, 65535). Checking them where the loop is bound names the mistake; otherwise
nvcc compiles the kernel and the launch fails (or, worse, a launch wrapper clamps it).
``vthread.*`` loops are virtual: codegen folds them into each thread, so they have no limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from loopir.ir.expr import IntImm, PrimExpr

__all__ = [
    "MAX_THREADS_PER_BLOCK",
    "TAG_LIMITS",
    "block_threads_problem",
    "extent_problem",
    "tag_limit",
]

MAX_THREADS_PER_BLOCK = 1024
"""Threads in one block (product of the ``threadIdx`` extents)."""

TAG_LIMITS: dict[str, int] = {
    "threadIdx.x": 1024,
    "threadIdx.y": 1024,
    "threadIdx.z": 64,
    "blockIdx.x": 2**31 - 1,
    "blockIdx.y": 65535,
    "blockIdx.z": 65535,
}
"""Largest extent a loop bound to each tag may have."""


def tag_limit(tag: str) -> int | None:
    """The largest extent allowed for ``tag``, or None (vthread: no hardware limit)."""
    return TAG_LIMITS.get(tag)


def extent_problem(tag: str, extent: PrimExpr) -> str | None:
    """Why a constant ``extent`` cannot be bound to ``tag``, or None when it can (or is symbolic)."""
    limit = tag_limit(tag)
    if limit is None or not isinstance(extent, IntImm) or extent.value <= limit:
        return None
    what = "grid dimension" if tag.startswith("blockIdx") else "thread block dimension"
    return f"extent {extent.value} exceeds the CUDA {what} limit of {limit} for {tag}"


def block_threads_problem(extents: Mapping[str, PrimExpr]) -> str | None:
    """Why the ``threadIdx`` extents of one kernel (tag -> extent) exceed a block, or None.

    Only constant extents count (``bind`` refuses symbolic thread extents); one extent per tag,
    since every loop of a tag in a kernel has the same extent (the ``thread-extent`` rule).
    """
    dims = {
        t: int(e.value) for t, e in sorted(extents.items())
        if t.startswith("threadIdx") and isinstance(e, IntImm)
    }  # fmt: skip
    total = math.prod(dims.values())
    if total <= MAX_THREADS_PER_BLOCK:
        return None
    shape = " x ".join(f"{t}={n}" for t, n in dims.items())
    return (
        f"the kernel would have {total} threads per block ({shape}), more than the CUDA limit "
        f"of {MAX_THREADS_PER_BLOCK}"
    )
