"""TVM's ``s_tir.Schedule`` forms on ``loopir.schedule.Schedule``, and the primitives a
TensorIR user reaches for beyond the core ones.

``TVMForms`` is a mixin of ``loopir.schedule.Schedule``: the IRModule a schedule
may be made of (``sch.mod``, ``work_on``, ``func_working_on``), TVM's names
(``get_sblock``, ``pad_einsum``), the no-ops a pasted TVM trace calls (``enter_postproc``),
``show``, the random state (``seed``, ``fork_seed``), and the primitives ``reindex``,
``add_unit_loop``, ``get_output_blocks``, ``decompose_padding``, ``can_decompose_padding``
and ``loop_partition`` (pure functions in ``loopir.schedule.reindex``,
``loopir.schedule.partition``, ``loopir.schedule.decompose_padding``,
``loopir.schedule.deps``). docs/tvm_differences.md lists every method of TVM 0.27's
``s_tir.Schedule`` with its status here.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from loopir.errors import ScheduleError
from loopir.ir.module import IRModule
from loopir.ir.stmt import PrimFunc
from loopir.schedule.recording import _result, check_bool, instruction
from loopir.schedule.trace import BlockRV, Instruction, LoopRV

if TYPE_CHECKING:
    from loopir.ir.expr import Var
    from loopir.ir.stmt import BlockRealize, For, Stmt
    from loopir.schedule.trace import Trace


def _block_layout_args(sch: Any, args: dict[str, Any]) -> None:
    """transform_block_layout: the index map as its text (the block's loop-bound iter vars
    are its parameters)."""
    from loopir.schedule import layout

    index_map = args["index_map"]
    if not isinstance(index_map, str) and callable(index_map):
        import inspect

        try:
            n = len(inspect.signature(index_map).parameters)
        except (TypeError, ValueError):
            raise ScheduleError("transform_block_layout: index_map must be a lambda of the block's "
                                "loop-bound iter vars, or its text", primitive="transform_block_layout") from None
        args["index_map"] = layout.index_map_text(index_map, n)
    elif not isinstance(index_map, str):
        raise ScheduleError(f"transform_block_layout: index_map must be a lambda or its text, got "
                            f"{type(index_map).__name__}", primitive="transform_block_layout")  # fmt: skip


def schedule_target(mod: Any) -> tuple[IRModule | None, PrimFunc | None]:
    """What ``Schedule(mod)`` works on: the module (None for a PrimFunc) and the function --
    the PrimFunc, a module's only function or its ``"main"``; None when a module of several
    functions has no ``"main"`` (``work_on`` picks one then, as in TVM)."""
    if isinstance(mod, PrimFunc):
        return None, mod
    if isinstance(mod, IRModule):
        if len(mod) == 1:
            return mod, mod[mod.names[0]]
        return mod, mod["main"] if "main" in mod else None
    raise ScheduleError(
        f"Schedule needs a loopir.PrimFunc or a loopir.IRModule, got {type(mod).__name__}",
        primitive="Schedule",
    )


def check_tvm_options(debug_mask: Any, error_render_level: Any, enable_check: Any) -> None:
    """TVM's ``Schedule`` options, accepted with the values TVM takes. loopir checks every
    primitive's preconditions and renders every error with the IR whatever they say."""
    if not (debug_mask in ("none", "all") or (isinstance(debug_mask, int) and not isinstance(debug_mask, bool))):
        raise ScheduleError(f"debug_mask must be 'none', 'all' or an int, got {debug_mask!r}",
                            primitive="Schedule")  # fmt: skip
    if error_render_level not in ("detail", "fast", "none"):
        raise ScheduleError(
            f"error_render_level must be 'detail', 'fast' or 'none', got {error_render_level!r}",
            primitive="Schedule",
        )
    check_bool(enable_check, "enable_check", "Schedule")


def _reindex_args(sch: Any, args: dict[str, Any]) -> None:
    """reindex: the buffer as the ``[kind, index]`` a trace records."""
    from loopir.schedule import reindex as R

    block = args["block"]
    if isinstance(block, BlockRV):
        realize, _ = sch._block(block, "reindex")
        buf, kind = R.resolve_access(sch._func, realize.block, args["buffer"], "reindex")
        args["buffer"] = R.spec_for(realize.block, buf, kind)


class TVMForms:
    """TVM's API forms and the further TVM primitives (a mixin of ``Schedule``)."""

    if TYPE_CHECKING:  # provided by Schedule
        _module: IRModule | None
        _func_name: str | None
        _func: PrimFunc
        _rng: random.Random
        _instructions: list[Instruction]

        @property
        def trace(self) -> Trace: ...

        def _block(self, rv: BlockRV, primitive: str) -> tuple[BlockRealize, tuple[Stmt, ...]]: ...

        def _loop(self, rv: LoopRV, primitive: str) -> tuple[For, tuple[Stmt, ...]]: ...

        def _block_name(self, rv: BlockRV, primitive: str) -> str: ...

        def _loop_var(self, rv: LoopRV, primitive: str) -> Var: ...

        def get_block(self, name: str, func_name: str | None = None) -> BlockRV: ...

        def pad(self, block: BlockRV, factors: list[int]) -> None: ...

    # --- the module and the function worked on ----------------------------------------------
    @property
    def mod(self) -> IRModule:
        """The module being scheduled, with the current function (TVM's ``sch.mod``): the
        IRModule given, or ``{name: func}`` for a PrimFunc."""
        self._require_function("mod")
        assert self._func_name is not None
        if self._module is None:
            return IRModule({self._func_name: self._func})
        return self._module.with_function(self._func_name, self._func)

    @property
    def func_working_on(self) -> str | None:
        """The name of the function worked on (TVM returns its GlobalVar); None while a
        module of several functions without ``"main"`` waits for ``work_on``."""
        return self._func_name

    def work_on(self, func_name: str) -> None:
        """Work on function ``func_name`` of the module (TVM's ``work_on``).

        loopir schedules one function per Schedule: the choice is made before the first
        instruction (naming the function already worked on is always fine). Not recorded: a
        trace applies to the function its schedule works on.

        Raises
        ------
        ScheduleError
            For a name the module does not have, or a switch after instructions were applied
            (the message says how to schedule the other function).
        """
        self._check_func_name(func_name)

    def _check_func_name(self, func_name: Any) -> None:
        names = self._module.names if self._module is not None else (self._func_name,)
        if not isinstance(func_name, str) or func_name not in names:
            raise ScheduleError(
                f"no function named {func_name!r}; the module has {', '.join(map(str, names))}",
                primitive="work_on",
            )
        if func_name == self._func_name:
            return
        if self._instructions:
            raise ScheduleError(
                f"this schedule works on {self._func_name!r} and has {len(self._instructions)} "
                f"instructions; loopir schedules one function per Schedule, chosen before the "
                f"first instruction: schedule {func_name!r} with s = loopir.Schedule(sch.mod); "
                f"s.work_on({func_name!r})",
                primitive="work_on",
            )
        from loopir.schedule.schedule import _check_unique_names

        assert self._module is not None  # a PrimFunc schedule has one name, checked above
        func = self._module[func_name]
        _check_unique_names(func)
        self._func, self._func_name = func, func_name

    def _require_function(self, primitive: str) -> None:
        if self._func_name is None:
            assert self._module is not None
            raise ScheduleError(
                f"the module has functions {', '.join(self._module.names)} and none is 'main': "
                "choose the one to schedule with sch.work_on(name) (or "
                "get_block(name, func_name=...)), as in TVM",
                primitive=primitive,
            )

    # --- TVM's names and no-ops ------------------------------------------------------------
    def get_sblock(self, name: str, func_name: str | None = None) -> BlockRV:
        """TVM 0.27's name of ``get_block`` (recorded as ``get_block``)."""
        return self.get_block(name, func_name)

    def pad_einsum(self, block: BlockRV, padding: list[int]) -> None:
        """TVM's name of ``pad`` (recorded as ``pad``)."""
        self.pad(block, padding)

    def enter_postproc(self) -> None:
        """A no-op marking where postprocessing starts in a TVM trace (not recorded)."""

    def seed(self, seed: int) -> None:
        """Reseed the random state that sampling instructions draw from (TVM's ``seed``)."""
        if isinstance(seed, bool) or not hasattr(seed, "__index__"):
            raise ScheduleError(f"seed must be an int, got {seed!r}", primitive="seed")
        self._rng.seed(seed.__index__())

    def fork_seed(self) -> int:
        """A seed for a new schedule, drawn from this one's random state (TVM's ``fork_seed``)."""
        return self._rng.randrange(1, 2**31)

    def show(self, style: str | None = None, black_format: bool = False) -> None:
        """Print the module being scheduled, then the trace (TVM's ``show``).

        ``style`` and ``black_format`` are TVM's highlighting options: loopir prints plain
        text, already formatted, whatever they say.
        """
        print(self.mod)
        print(self.trace.as_python())

    # --- queries -----------------------------------------------------------------------------
    @instruction(inputs={"scope_block": "block"}, returns="blocks")
    def get_output_blocks(self, scope_block: BlockRV) -> list[BlockRV]:
        """Handles to the blocks under ``scope_block`` that write a buffer their scope does not
        allocate (TVM's ``get_output_blocks``); see ``loopir.schedule.deps.get_output_blocks``.

        Examples
        --------
        For ``C = A @ B; D = C + bias; E = relu(D)`` (C, D allocated in the root block),
        ``sch.get_output_blocks(sch.get_block("root"))`` is ``[BlockRV(E)]``.
        """
        from loopir.schedule import deps

        name = self._block_name(scope_block, "get_output_blocks")
        return _result(self._func, deps.get_output_blocks(self._func, name))

    # --- loops -------------------------------------------------------------------------------
    @instruction(inputs={"block": "block"}, returns="loops", resolve=_block_layout_args)
    def transform_block_layout(self, block: BlockRV, index_map: Any) -> list[LoopRV]:
        """Iterate a spatial block through a bijective index map of its loop-bound iter vars
        (TVM's ``transform_block_layout``), e.g. ``lambda i, j: (i // 16, j // 16,
        *MMA_C.to_lane_local(i % 16, j % 16))`` so that a block over a tile of ``mma``
        accumulator fragments iterates ``(tile, lane, local)``: bind the lane loop to
        ``threadIdx.x`` and each lane touches only its registers.

        The loops directly above the block (containing nothing else) are replaced by loops over
        the map's image; the trace records the map as the text of a lambda. Returns the new
        loops, outermost first. See
        [`loopir.schedule.block_layout.transform_block_layout`][loopir.schedule.block_layout.transform_block_layout].
        """
        from loopir.schedule import block_layout

        name = self._block_name(block, "transform_block_layout")
        return _result(*block_layout.transform_block_layout(self._func, name, index_map))

    @instruction(inputs={"block_or_loop": "any"}, returns="loop")
    def add_unit_loop(self, block_or_loop: BlockRV | LoopRV) -> LoopRV:
        """Put a loop ``u`` of extent 1 above a block or loop (TVM's ``add_unit_loop``).

        Examples
        --------
        ``with T.block("C"): C[()] = A[()] + B[()]`` becomes ``for u in T.serial(1): with
        T.block("C"): ...``; see ``loopir.schedule.partition.add_unit_loop``.
        """
        from loopir.schedule import partition

        if isinstance(block_or_loop, BlockRV):
            target: str | Var = self._block_name(block_or_loop, "add_unit_loop")
        else:
            target = self._loop_var(block_or_loop, "add_unit_loop")
        return _result(*partition.add_unit_loop(self._func, target))

    @instruction(inputs={"loop": "loop"}, returns="loops", unrecorded=("preserve_unit_iters",))
    def loop_partition(
        self, loop: LoopRV, factors: list[int | None], preserve_unit_iters: bool = True
    ) -> list[LoopRV]:
        """Cut ``loop`` into consecutive loops of the given extents (TVM's ``loop_partition``).

        Parameters
        ----------
        loop
            A loop with a constant range, no thread binding and no annotation.
        factors
            The partitions' extents, at most one None (the rest). They must sum to less than
            the extent; without a None the remainder is one more partition.
        preserve_unit_iters
            Accepted and not recorded (TVM's loop_partition does not use it either).

        Returns
        -------
        list of LoopRV
            The partitions' loops, in order.

        Examples
        --------
        ``sch.loop_partition(i, [3, None])`` on ``for i in T.serial(10)`` gives ``for i0 in
        T.serial(3)`` over block ``B_i0`` and then ``for i1 in T.serial(7)`` over ``B_i1``
        (bound to ``i1 + 3``; TVM writes ``range(3, 10)`` and wraps each partition in a block
        ``B_i<k>_partition``; see
        ``loopir.schedule.partition.loop_partition``).
        """
        from loopir.schedule import partition

        check_bool(preserve_unit_iters, "preserve_unit_iters", "loop_partition")
        var = self._loop_var(loop, "loop_partition")
        return _result(*partition.loop_partition(self._func, var, factors))

    # --- data movement -----------------------------------------------------------------------
    @instruction(inputs={"block": "block"}, returns="block", resolve=_reindex_args)
    def reindex(self, block: BlockRV, buffer: Any) -> BlockRV:
        """Stage one buffer access of ``block`` through a buffer indexed by its iter vars
        (TVM's ``reindex``); returns the copy block.

        Parameters
        ----------
        block
            A leaf block alone in a loop nest of its scope, accessing the buffer with one
            index pattern.
        buffer
            ``("read", i)`` / ``("write", i)``, the buffer's name or the Buffer; recorded
            as ``["read", i]`` / ``["write", i]``.

        Examples
        --------
        On ``B[vi, vj] = A[vj, vi] * 2.0``, ``sch.reindex(b, ("read", 0))`` adds the block
        ``A_reindex_reindex``: ``A_reindex[v0, v1] = A[v1, v0]`` before B's loops, and B
        reads ``A_reindex[vi, vj]``; see ``loopir.schedule.reindex.reindex``.
        """
        from loopir.schedule import reindex as R

        name = self._block_name(block, "reindex")
        return _result(*R.reindex(self._func, name, buffer))

    @instruction(inputs={"block": "block", "loop": "loop"}, returns="block")
    def decompose_padding(self, block: BlockRV, loop: LoopRV) -> BlockRV:
        """Split a padding block into a constant fill placed before ``loop`` and a copy of the
        in-bound points (TVM's ``decompose_padding``); returns the fill block.

        Examples
        --------
        ``y[vi] = T.if_then_else(vi >= 6 and vi < 134, x[vi - 6], 0)`` over 140 points
        becomes ``y[vi] = 0`` over 140 points (block ``block_pad_const``) then ``y[vi + 6] =
        x[vi]`` over 128; see ``loopir.schedule.decompose_padding.decompose_padding``.
        """
        from loopir.schedule import decompose_padding as D

        name = self._block_name(block, "decompose_padding")
        var = self._loop_var(loop, "decompose_padding")
        return _result(*D.decompose_padding(self._func, name, var))

    def can_decompose_padding(self, block: BlockRV, loop: LoopRV) -> bool:
        """Whether ``decompose_padding`` applies to ``block`` at ``loop`` (not recorded)."""
        from loopir.schedule import decompose_padding as D

        name = self._block_name(block, "can_decompose_padding")
        var = self._loop_var(loop, "can_decompose_padding")
        return D.can_decompose_padding(self._func, name, var)
