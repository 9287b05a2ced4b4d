"""``blockize`` and ``tensorize`` on ``loopir.schedule.Schedule`` (a mixin, as
``schedule_tvm.TVMForms``); the pure functions are in ``loopir.schedule.blockize`` and
``loopir.schedule.tensorize``, the intrinsics in ``loopir.tensor_intrin``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopir.errors import ScheduleError
from loopir.schedule.recording import _result, check_bool, instruction
from loopir.schedule.trace import BlockRV, LoopRV

if TYPE_CHECKING:
    from loopir.ir.expr import Var
    from loopir.ir.stmt import BlockRealize, For, PrimFunc, Stmt


class TensorizeForms:
    """``blockize`` and ``tensorize`` (a mixin of ``Schedule``)."""

    if TYPE_CHECKING:  # provided by Schedule
        _func: PrimFunc

        def _block(self, rv: BlockRV, primitive: str) -> tuple[BlockRealize, tuple[Stmt, ...]]: ...

        def _loop(self, rv: LoopRV, primitive: str) -> tuple[For, tuple[Stmt, ...]]: ...

        def _block_name(self, rv: BlockRV, primitive: str) -> str: ...

        def _loop_var(self, rv: LoopRV, primitive: str) -> Var: ...

    @instruction(inputs={"target": "loop_or_blocks"}, returns="block")
    def blockize(self, target: LoopRV | list[BlockRV], preserve_unit_iters: bool = True) -> BlockRV:
        """Wrap the subtree under a loop in a new block (TVM's ``blockize``); returns it.

        The block under ``target`` is divided into an outer block ``<block>_o`` over the loops
        above ``target`` and an inner block over the loops from ``target`` down: its bindings
        must split into a tile index (outer) times the tile size plus an index in the tile
        (inner), as after ``split``; a use of the old iter var ``v`` becomes
        ``v_o * tile + v_i``. The outer block reads and writes the inner block's tile; a
        reduction's ``init`` moves to the outer block (a loop nest over ``<block>_init``).

        Parameters
        ----------
        target
            A loop whose subtree is a chain of loops over one block, or a list of sibling
            blocks (consecutive statements of one loop or block; the outer block
            ``outer_<b1>_<b2>_`` runs their loop nests in order).
        preserve_unit_iters
            Keep unit (extent-1) outer loops in the outer bindings (TVM's flag); False
            replaces them by their value.

        Returns
        -------
        BlockRV
            The new outer block.

        Raises
        ------
        ScheduleError
            When the subtree holds several blocks or other statements, or the bindings (or
            the predicate) do not divide between the loops outside and inside; the error
            marks the block.

        Examples
        --------
        On a 64x32 elementwise block tiled 16x8 (``i_0, j_0, i_1, j_1``),
        ``sch.blockize(i_1)`` gives (as TVM 0.27)::

            for i_0 in T.serial(4):
                for j_0 in T.serial(4):
                    with T.block("B_o"):
                        v_i_o = T.axis.spatial(4, i_0)
                        v_j_o = T.axis.spatial(4, j_0)
                        T.reads(A[v_i_o * 16:v_i_o * 16 + 16, v_j_o * 8:v_j_o * 8 + 8])
                        T.writes(B[v_i_o * 16:v_i_o * 16 + 16, v_j_o * 8:v_j_o * 8 + 8])
                        for i_1 in T.serial(16):
                            for j_1 in T.serial(8):
                                with T.block("B"):
                                    v_i_i = T.axis.spatial(16, i_1)
                                    v_j_i = T.axis.spatial(8, j_1)
                                    T.reads(A[v_i_o * 16 + v_i_i, v_j_o * 8 + v_j_i])
                                    T.writes(B[v_i_o * 16 + v_i_i, v_j_o * 8 + v_j_i])
                                    B[v_i_o * 16 + v_i_i, v_j_o * 8 + v_j_i] = ...

        (tests/golden/schedule/blockize_spatial.txt has the whole function.)
        """
        from loopir.schedule import blockize as B

        pui = check_bool(preserve_unit_iters, "preserve_unit_iters", "blockize")
        if isinstance(target, LoopRV):
            var = self._loop_var(target, "blockize")
            return _result(*B.blockize(self._func, var, pui))
        if isinstance(target, BlockRV) or not all(isinstance(b, BlockRV) for b in target):
            raise ScheduleError(
                f"blockize takes a LoopRV or a list of BlockRVs, got {target!r}", primitive="blockize"
            )  # fmt: skip
        names = [self._block_name(b, "blockize") for b in target]
        return _result(*B.blockize_blocks(self._func, names, pui))
