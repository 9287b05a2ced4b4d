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
from loopir.schedule.default_gpu import tile_transpose
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
    tile_transpose(sch, sch.get_block("B"), "A" if shared else None, pad)
    return sch
