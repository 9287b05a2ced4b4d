"""compute_at regions per storage scope (TVM 0.27, semantics.md "Regions under compute_at
depend on the storage scope"): ``global`` relaxes no thread-bound loop, ``shared`` the
``threadIdx`` / ``vthread`` loops, ``local`` none.

Issue 28: a reduction into a global intermediate computed at a threadIdx-bound loop had its
region relaxed over the thread loops; every thread recomputed (and, lowered, accumulated into)
the whole block's elements, so the lowered function's result was 16x too large.
"""

from __future__ import annotations

import pytest

import loopir
from loopir.testing import check_equivalent
from tests.schedule.dm_util import assert_equivalent, extents, matmul_bias_relu


def test_global_reduction_under_thread_loop_lowers_correctly() -> None:
    """C (a global sum) computed at D's threadIdx-bound j0: each thread computes the two
    columns of its own row that it reads, not the whole 16x32 C."""
    f = matmul_bias_relu(16, 8, 32)
    sch = loopir.Schedule(f)
    d = sch.get_block("D")
    i, j = sch.get_loops(d)
    j0, _ = sch.split(j, [16, None])
    sch.bind(i, "blockIdx.x")
    sch.bind(j0, "threadIdx.x")
    sch.compute_at(sch.get_block("C"), j0)
    assert_equivalent(f, sch.func)
    check_equivalent(f, loopir.lower(sch.func))
    assert extents(sch.func, "C") == [16, 16, 2, 8]


# --- the 3 x 3 table: scope of the producer's output x kind of the position's loop -----------

# C's region (rows, columns) per (scope, loop): under D's blockIdx i0 every scope covers the
# block's 4 x 16 tile (blockIdx is never relaxed; the loops inside are); under the threadIdx j0
# and the serial i1 inside it only shared relaxes j0 (the whole block's 16 columns), global and
# local keep the thread's 4 columns, like an unbound loop.
REGIONS = {
    ("global", "blockIdx"): (4, 16),
    ("global", "threadIdx"): (4, 4),
    ("global", "serial"): (1, 4),
    ("shared", "blockIdx"): (4, 16),
    ("shared", "threadIdx"): (4, 16),
    ("shared", "serial"): (1, 16),
    ("local", "blockIdx"): (4, 16),
    ("local", "threadIdx"): (4, 4),
    ("local", "serial"): (1, 4),
}
# the positions where C's region is shared by D's 4 threads: every thread would compute (and,
# lowered, accumulate into) the same elements, as in TVM; the lowered check binds C's own loops
# to the threads first (the cooperative pattern of semantics.md)
SHARED_BY_THREADS = {
    ("global", "blockIdx"), ("shared", "blockIdx"), ("shared", "threadIdx"), ("shared", "serial")
}


def _at(scope: str, position: str) -> tuple[loopir.PrimFunc, loopir.Schedule, int]:
    """matmul 8x4x16 (+bias, relu) with C in ``scope``, D's loops i0 (blockIdx.x, 2), j0
    (threadIdx.x, 4), i1 (4), j1 (4), and C computed at i0, j0 or i1. Returns the function,
    the schedule and the number of D's loops C shares."""
    f = matmul_bias_relu(8, 4, 16)
    sch = loopir.Schedule(f)
    c = sch.get_block("C")
    sch.set_scope(c, 0, scope)
    i, j = sch.get_loops(sch.get_block("D"))
    i0, i1 = sch.split(i, [2, None])
    j0, j1 = sch.split(j, [4, None])
    sch.reorder(i0, j0, i1, j1)
    sch.bind(i0, "blockIdx.x")
    sch.bind(j0, "threadIdx.x")
    positions = {"blockIdx": (i0, 1), "threadIdx": (j0, 2), "serial": (i1, 3)}
    loop, shared_loops = positions[position]
    sch.compute_at(c, loop)
    return f, sch, shared_loops


@pytest.mark.parametrize("position", ["blockIdx", "threadIdx", "serial"])
@pytest.mark.parametrize("scope", ["global", "shared", "local"])
def test_compute_at_region_by_scope_and_loop(golden, scope: str, position: str) -> None:
    f, sch, n_outer = _at(scope, position)
    rows, cols = REGIONS[scope, position]
    own = [n for n in (rows, cols) if n != 1]
    assert extents(sch.func, "C")[n_outer:] == [*own, 4]  # then the 4 reduction steps
    golden(f"schedule/compute_at_scope_{scope}_{position}", sch.func.script())
    assert_equivalent(f, sch.func)
    if (scope, position) in SHARED_BY_THREADS:
        c = sch.get_block("C")
        spatial = sch.get_loops(c)[n_outer:-1]
        _, tx = sch.split(sch.fuse(*spatial), [None, 4])
        sch.bind(tx, "threadIdx.x")
        assert_equivalent(f, sch.func)
    check_equivalent(f, loopir.lower(sch.func))
