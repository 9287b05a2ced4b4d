"""A transpose through a shared tile without bank conflicts (``storage_align``).

``B[j, i] = A[i, j]``: each block copies a 32 x 32 tile of A into shared memory with coalesced
row reads, then writes it out transposed with coalesced row writes, reading the tile along
its columns. Unpadded, the 32 threads of a warp reading one column hit one shared-memory bank
32 times; ``storage_align(..., factor=32, offset=1)`` pads the tile's rows to 33 floats, so
they hit 32 different banks. Any M and N (the edges are predicated).
"""

from __future__ import annotations

from typing import Any

from loopir.schedule import Schedule
from loopir.te import compute, create_prim_func, placeholder


def transpose_func(M: Any, N: Any, dtype: str = "float32") -> Any:
    """The unscheduled ``B[N, M] = A[M, N]^T``."""
    A = placeholder((M, N), dtype, name="A")
    B = compute((N, M), lambda j, i: A[i, j], name="B")
    return create_prim_func([A, B])


def transpose(M: Any, N: Any, dtype: str = "float32", pad: bool = True,
              shared: bool = True) -> Schedule:  # fmt: skip
    """The shared-tile transpose schedule: 32 x 32 tiles, 32 x 8 threads (four rows each).

    Parameters
    ----------
    M, N
        Sizes of A.
    dtype
        Element type.
    pad
        Pad the tile's rows (``storage_align`` with factor 32, offset 1); False gives the
        bank-conflicted layout, for comparison.
    shared
        Stage A through the shared tile; False reads A directly (strided global reads).

    Returns
    -------
    Schedule
        ``sch.func`` is the scheduled function.
    """
    sch = Schedule(transpose_func(M, N, dtype))
    b = sch.get_block("B")
    j, i = sch.get_loops(b)
    j0, j1 = sch.split(j, [None, 32])
    i0, i1 = sch.split(i, [None, 32])
    j10, j11 = sch.split(j1, [None, 8])
    sch.reorder(j0, i0, j11, i1, j10)
    sch.bind(j0, "blockIdx.y")
    sch.bind(i0, "blockIdx.x")
    sch.bind(j11, "threadIdx.y")
    sch.bind(i1, "threadIdx.x")
    if not shared:
        return sch
    tile = sch.cache_read(b, "A", "shared")
    sch.compute_at(tile, i0)
    ax0, ax1 = sch.get_loops(tile)[2:]
    a0, a1 = sch.split(ax0, [None, 8])
    sch.reorder(a1, ax1, a0)
    sch.bind(a1, "threadIdx.y")
    sch.bind(ax1, "threadIdx.x")
    if pad:
        sch.storage_align(tile, 0, 0, 32, 1)
    return sch
