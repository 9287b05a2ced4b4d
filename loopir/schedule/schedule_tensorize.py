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

    @instruction(inputs={"block_or_loop": "any"})
    def tensorize(
        self, block_or_loop: BlockRV | LoopRV, tensor_intrin: str, preserve_unit_iters: bool = True
    ) -> None:
        """Replace a block (or a loop's subtree) by a tensor intrinsic (TVM's ``tensorize``).

        A loop is blockized first (``preserve_unit_iters`` is passed on). The block must match
        the description of the intrinsic registered as ``tensor_intrin``
        (``loopir.tensor_intrin.register``) structurally: the same loops, block structure,
        dtypes, scopes and index pattern relative to its tile; its body then becomes the
        implementation's, the implementation's parameters bound to the matched regions of the
        real buffers (substituted at the tile's start). The block is annotated
        ``"loopir.tensorized": tensor_intrin``. As in TVM, the tile must be exact (no
        predicate): split by divisors, or pad first.

        Parameters
        ----------
        block_or_loop
            The block (e.g. from ``blockize``) or the loop whose subtree to tensorize.
        tensor_intrin
            The registered intrinsic's name.
        preserve_unit_iters
            Passed to ``blockize`` for a loop.

        Raises
        ------
        ScheduleError
            For an unknown intrinsic, or a block that does not match the description: the
            message names what differs (dtype, scope, extent, index pattern, ...), shows the
            description with its differing node marked, and the function with the block's.

        Examples
        --------
        With the 4x4x4 ``C += A @ B`` tile registered as ``"test.mm4"`` (its implementation
        a ``k``-outer loop nest; ``loopir.testing.intrinsics``), on a 16x16x16 matmul tiled by
        4 and decomposed, ``sch.tensorize(i_1, "test.mm4")`` makes the update block (as TVM
        0.27, with the implementation's parameters substituted where TVM has
        ``T.match_buffer``)::

            with T.block("C_o"):
                v_i_o = T.axis.spatial(4, i_0)
                v_j_o = T.axis.spatial(4, j_0)
                v_k_o = T.axis.reduce(4, k_0)
                T.reads(C[v_i_o * 4:v_i_o * 4 + 4, v_j_o * 4:v_j_o * 4 + 4], A[...], B[...])
                T.writes(C[v_i_o * 4:v_i_o * 4 + 4, v_j_o * 4:v_j_o * 4 + 4])
                T.block_attr({"loopir.tensorized": "test.mm4"})
                for k in T.serial(4):
                    for ij in T.unroll(16):
                        C[v_i_o * 4 + ij // 4, v_j_o * 4 + ij % 4] = ...

        (tests/golden/schedule/tensorize_mm4.txt has the whole function.)
        """
        from loopir.schedule import tensorize as TZ

        pui = check_bool(preserve_unit_iters, "preserve_unit_iters", "tensorize")
        target: Any
        if isinstance(block_or_loop, BlockRV):
            target = self._block_name(block_or_loop, "tensorize")
        else:
            target = self._loop_var(block_or_loop, "tensorize")
        func, _ = TZ.tensorize(self._func, target, tensor_intrin, pui)
        return _result(func)
