"""Warp-uniform thread indices (``cuda.warp_uniform_thread_index``, on by default).

CUDA numbers a block's threads by ``threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y *
threadIdx.z)`` and cuts that order into warps of 32. When ``blockDim.x`` is a multiple of 32,
every lane of a warp has the same ``threadIdx.y`` (the same ``threadIdx.z`` when ``blockDim.x *
blockDim.y`` is one). nvcc cannot know this (the block's shape is a launch parameter), so a
value computed from ``threadIdx.y`` lives in a vector register of each lane, and so does all that
derives from it: a warpgroup's role branch (``if (ty < 4)``) is potentially divergent, the loop
counters and ``wgmma`` descriptors under it are computed per lane and moved to uniform
registers by an ``R2UR`` per 32-bit half before each ``HGMMA``.

CUTLASS's answer (``canonical_warp_idx_sync``) is to read the warp index as lane 0's value,
``__shfl_sync(0xffffffff, threadIdx.x / 32, 0)``, a value nvcc knows to be warp-uniform. The
emitter does the same: the kernel's first statements, where all threads of the block are
converged (a kernel starts converged), read each warp-uniform index once::

    const int loopir_warp_y = __shfl_sync(0xffffffffu, (int)threadIdx.y, 0);

and the ``threadIdx.y`` loops and guards print ``loopir_warp_y``. The value is the same (lane 0
of the warp has this lane's ``threadIdx.y``); what changes is what nvcc may assume. Measured by
SASS (nvcc 13.0, sm_90a): the warp-specialized attention's consumer step 382 -> 323 instructions
(40 ``R2UR`` -> 0), registers 168 -> 138; ``hopper_gemm``'s consumer tile loop 438 -> 295.

Scope: kernels on Hopper's asynchronous proxy (``wgmma`` or TMA), whose warpgroup roles and
descriptors it serves. Elsewhere ``threadIdx.*`` prints as before: on the CUDA-core
FlashAttention 2 kernel (``attention(..., fragments=False)``) ptxas 13.0 for sm_80 answered the
uniform index by capping the kernel at 80 registers with an 8-byte spill (112 registers, no
spill, without it). Off (``cuda.warp_uniform_thread_index = False``), or where the block's shape
does not make the index uniform, likewise.
"""

from __future__ import annotations

from loopir.ir.expr import IntImm, PrimExpr

__all__ = ["uniform_tags", "warp_index_decl", "warp_index_name"]

_WARP = 32


def uniform_tags(block: dict[str, PrimExpr]) -> frozenset[str]:
    """The thread tags whose value is the same in every lane of a warp, given the launched
    ``threadIdx.*`` extents (constant extents only)."""
    x, y = block.get("threadIdx.x"), block.get("threadIdx.y")
    if not isinstance(x, IntImm) or x.value % _WARP:
        return frozenset()
    tags = {"threadIdx.y"}
    if isinstance(y, IntImm) and (x.value * y.value) % _WARP == 0:
        tags.add("threadIdx.z")
    return frozenset(tags)


def warp_index_name(tag: str) -> str:
    """The kernel-level name of a warp-uniform ``threadIdx.y`` / ``.z``."""
    return "loopir_warp_" + tag.rsplit(".", 1)[1]


def warp_index_decl(tag: str) -> str:
    """The declaration at the kernel's entry (all threads converged)."""
    return f"const int {warp_index_name(tag)} = __shfl_sync(0xffffffffu, (int){tag}, 0);"
