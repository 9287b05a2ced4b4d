"""Caches of a blockized block (issue 31, the TVM tensor-core flow): the blocks nested in the
blockized block are its own, as in TVM, where compute_at and cache_write see the blocks of one
scope only.

* ``compute_at`` of a ``cache_read`` copy that the blockized block reads, at one of its loops
  (was refused: "a nested block lies between the loop and the block");
* ``cache_write`` of the blockized block's output (was refused: the nested update and init
  blocks counted as other writers);
* ``reverse_compute_at`` of that write-back under a thread-bound loop: the blockized block
  writes 4x4 tiles, and the write-back copies exactly the tiles this thread wrote (was
  refused: "written with extent 4").
"""

from __future__ import annotations

import loopir
from loopir import te
from tests.schedule.dm_util import check_schedule


def _mm(n: int = 16) -> loopir.PrimFunc:
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis(n, name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def _blockized(sch: loopir.Schedule, t: int = 4) -> tuple[loopir.schedule.BlockRV, list]:
    """4x4x4 tiles blockized: (block C_o, loops i0 j0 k0)."""
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, t])
    j0, j1 = sch.split(j, [None, t])
    k0, k1 = sch.split(k, [None, t])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    return sch.blockize(i1), [i0, j0, k0]


def test_compute_at_of_a_blockized_blocks_input() -> None:
    func = _mm()
    sch = loopir.Schedule(func)
    outer, (_, _, k0) = _blockized(sch)
    copy = sch.cache_read(outer, 0, "shared")
    sch.compute_at(copy, k0)
    assert [sch.get(lp).loop_var.name for lp in sch.get_loops(copy)][:3] == ["i_0", "j_0", "k_0"]
    check_schedule(func, sch)


def test_cache_write_of_a_blockized_block_and_write_back_under_a_thread_loop() -> None:
    func = _mm()
    sch = loopir.Schedule(func)
    outer, (i0, j0, _) = _blockized(sch)
    sch.bind(i0, "threadIdx.y")
    sch.bind(j0, "threadIdx.x")
    local = sch.cache_write(outer, 0, "local")
    sch.reverse_compute_at(local, j0)
    # the write-back copies this thread's 4x4 tile
    loops = sch.get_loops(local)
    assert [int(sch.get(lp).extent) for lp in loops[2:]] == [4, 4]
    sch.decompose_reduction(outer, sch.get_loops(outer)[2])
    check_schedule(func, sch)
