"""The traced Schedule: handles and every primitive's entry point.

Primitives are pure functions on PrimFunc (``loops.py``, ``cache.py``, ``compute_at.py``, ...).
A Schedule method only resolves handles to block names / loop Vars, calls the pure function
and returns the targets it produced; the ``instruction`` decorator
(``loopir.schedule.recording``) does everything else once for all primitives: argument checks,
recording into the trace, making output handles, and committing the new function only when the
primitive succeeded (a primitive that raises leaves func and trace unchanged). The primitives
TVM users reach for beyond these (``reindex``, ``loop_partition``, ...) and TVM's API forms
(``mod``, ``work_on``, ``get_sblock``, ``pad_einsum``) are in ``loopir.schedule.schedule_tvm``;
``blockize`` and ``tensorize`` in ``loopir.schedule.schedule_tensorize``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from loopir.errors import ScheduleError
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Var
from loopir.ir.module import IRModule
from loopir.ir.stmt import Block, BlockRealize, For, PrimFunc, Stmt
from loopir.schedule import sampling, tree
from loopir.schedule.recording import Target, _result, check_bool, instruction
from loopir.schedule.schedule_tensorize import TensorizeForms
from loopir.schedule.schedule_tvm import TVMForms, check_tvm_options, schedule_target
from loopir.schedule.trace import (
    _RV,
    INSTRUCTION_KINDS,
    BlockRV,
    ExprRV,
    Instruction,
    InstructionKind,
    LoopRV,
    Param,
    Trace,
)

logger = logging.getLogger(__name__)

__all__ = ["INSTRUCTION_KINDS", "BlockRV", "ExprRV", "LoopRV", "Schedule", "Trace", "instruction"]

def _cache_buffer_arg(param: str, primitive: str) -> Callable[[Schedule, dict[str, Any]], None]:
    """Resolve a Buffer (or te Tensor) given for ``param`` to its index in the block's
    reads/writes: traces hold literals, and TVM's cache_read/cache_write accept a buffer."""

    def resolve(sch: Schedule, args: dict[str, Any]) -> None:
        from loopir.schedule import cache

        block = args["block"]
        if isinstance(block, BlockRV):
            name = sch._block_name(block, primitive)
            args[param] = cache.buffer_index(sch.func, name, args[param], primitive)

    return resolve


def _layout_args(sch: Schedule, args: dict[str, Any]) -> None:
    """transform_layout: the buffer as its write index (TVM's ``("write", i)`` too), the index
    map as its text."""
    from loopir.schedule import cache, layout
    from loopir.schedule.reindex import access_spec

    block = args["block"]
    if isinstance(block, BlockRV):
        name = sch._block_name(block, "transform_layout")
        realize = sch._locations().blocks[name][0]
        spec = access_spec(args["buffer"], "transform_layout")
        if spec is not None:
            args["buffer"] = _write_index(sch, realize.block, spec)
        args["buffer"] = cache.buffer_index(sch.func, name, args["buffer"], "transform_layout")
        buf = cache._pick_buffer(sch.func, realize.block, args["buffer"], realize.block.writes,
                                 "writes", "transform_layout")  # fmt: skip
        args["index_map"] = layout.index_map_text(args["index_map"], len(buf.shape))


def _write_index(sch: Schedule, blk: Block, spec: tuple[str, int]) -> int:
    """The index into ``blk``'s writes of the buffer a ``("read" | "write", i)`` specifier
    names; a buffer the block only reads is refused, naming the block that writes it."""
    from loopir.schedule import cache

    kind, index = spec
    regions = blk.reads if kind == "read" else blk.writes
    buf = cache._pick_buffer(sch.func, blk, index, regions, f"{kind}s", "transform_layout")
    for i, r in enumerate(blk.writes):
        if r.buffer is buf:
            return i
    writers = [s.name for s, _ in tree.walk(sch.func) if isinstance(s, Block) and s is not blk
               and any(w.buffer is buf for w in s.writes)]  # fmt: skip
    hint = (
        f"transform_layout(sch.get_block({writers[0]!r}), {buf.name!r}, ...)" if writers
        else "the block that writes it"
    )
    raise ScheduleError(
        f"({kind!r}, {index}) of block {blk.name!r} is {buf.name!r}, which the block does not "
        f"write; loopir's transform_layout takes a buffer through a block that writes it: "
        f"write {hint}",
        primitive="transform_layout",
        func=sch.func,
        node=blk,
    )


def _check_unique_names(func: PrimFunc) -> None:
    """Handles resolve by block name and loop Var, so both must be unique in the function."""
    names: set[str] = set()
    loops: set[Var] = set()
    for s, _ in tree.walk(func):
        if isinstance(s, Block):
            if s.name in names:
                raise ScheduleError(
                    f"block names must be unique, but {s.name!r} names two blocks",
                    primitive="Schedule", func=func, node=s,
                )  # fmt: skip
            names.add(s.name)
        elif isinstance(s, For):
            if s.loop_var in loops:
                raise ScheduleError(
                    f"loop var {s.loop_var.name} defines two loops; each loop needs its own Var",
                    primitive="Schedule", func=func, node=s,
                )  # fmt: skip
            loops.add(s.loop_var)


class Schedule(TVMForms, TensorizeForms):
    """A traced schedule of a PrimFunc (TensorIR style).

    The IR is immutable, so the schedule simply holds the current function: ``sch.func``. Handles
    ([`BlockRV`][loopir.schedule.trace.BlockRV], [`LoopRV`][loopir.schedule.trace.LoopRV]) resolve
    through the schedule's symbol table to a block name or a loop Var; they stay valid across
    rewrites until their block or loop disappears (e.g. a loop consumed by ``split`` or ``fuse``),
    after which using them raises a ScheduleError naming the instruction that consumed them.

    Parameters
    ----------
    mod
        The function to schedule, or a ``loopir.IRModule``: its only function, or its
        ``"main"`` (``work_on`` picks another before the first instruction); ``sch.mod``
        is the module with the current function.
    seed
        Seed of the random state that sampling instructions draw from (``random.Random``);
        None means 0, so that an unseeded schedule is deterministic too.
    debug_mask, error_render_level, enable_check
        TVM's options, accepted with TVM's values: loopir checks every precondition and
        shows the IR in every error whatever they say.

    Examples
    --------
    >>> sch = loopir.Schedule(func)
    >>> i, j, k = sch.get_loops(sch.get_block("C"))
    >>> i0, i1 = sch.split(i, [None, 32])
    >>> print(sch.trace)
    def apply_trace(sch):
        b0 = sch.get_block("C")
        l1, l2, l3 = sch.get_loops(b0)
        l4, l5 = sch.split(l1, [None, 32], disable_predication=False)
    """

    def __init__(
        self,
        mod: PrimFunc | IRModule,
        seed: int | None = None,
        *,
        debug_mask: str | int = "none",
        error_render_level: str = "detail",
        enable_check: bool = True,
    ) -> None:
        if seed is not None and (isinstance(seed, bool) or not hasattr(seed, "__index__")):
            raise ScheduleError(f"seed must be an int or None, got {seed!r}", primitive="Schedule")
        check_tvm_options(debug_mask, error_render_level, enable_check)
        module, func = schedule_target(mod)
        self._rng = random.Random(0 if seed is None else seed.__index__())  # numpy ints too
        # Sampled values of this schedule, by identity (ExprRVs compare by value).
        self._exprs: dict[int, ExprRV] = {}
        # The IRModule given (None for a PrimFunc) and the name of the function worked on
        # (None until work_on picks one in a module of several functions without "main").
        self._module: IRModule | None = module
        self._func_name: str | None = None
        if func is None:  # a placeholder: sch.func and get_block refuse until work_on
            assert module is not None  # schedule_target gives a PrimFunc's own function
            self._func = module[module.names[0]]
        else:
            self._func = func
        self._instructions: list[Instruction] = []
        self._symbols: dict[_RV, Target] = {}
        # Handles whose block/loop vanished: (instruction index, kind) that removed it.
        self._stale: dict[_RV, tuple[int, str]] = {}
        self._where: tree.Locations | None = None  # of self._func, see _locations
        if func is not None:
            _check_unique_names(func)
            self._func_name = func.name

    # --- state -----------------------------------------------------------------------------
    @property
    def func(self) -> PrimFunc:
        """The current function (the one worked on, for a schedule of an IRModule)."""
        self._require_function("func")
        return self._func

    @property
    def trace(self) -> Trace:
        """The instructions applied so far (an immutable snapshot)."""
        return Trace(self._instructions)

    def copy(self) -> Schedule:
        """A fork with the same function, trace, handles and random state (the copy draws
        what the original would); later changes are independent."""
        other = Schedule.__new__(Schedule)
        other._rng = random.Random()
        other._rng.setstate(self._rng.getstate())
        other._exprs = dict(self._exprs)
        other._func = self._func
        other._instructions = list(self._instructions)
        other._symbols = dict(self._symbols)
        other._stale = dict(self._stale)
        other._where = self._where  # of the same (immutable) function
        other._module = self._module
        other._func_name = self._func_name
        return other

    def __repr__(self) -> str:
        return f"<Schedule of {self._func.name}: {len(self._instructions)} instructions>"

    # --- handles ---------------------------------------------------------------------------
    def _check_handle(self, rv: Any, p: Param, kind: str) -> None:
        want = {"block": BlockRV, "loop": LoopRV}.get(p.handle_type, _RV)
        if not isinstance(rv, want):
            what = {"block": "BlockRV", "loop": "LoopRV"}.get(p.handle_type, "BlockRV or LoopRV")
            raise ScheduleError(
                f"argument {p.name} must be a {what}, got {type(rv).__name__}: {rv!r}",
                primitive=kind,
            )
        self._target(rv, kind)

    def _target(self, rv: _RV, primitive: str) -> Target:
        target = self._symbols.get(rv)
        if target is None:
            raise ScheduleError(
                f"handle {rv!r} does not belong to this schedule (it comes from another "
                "Schedule, or from a Trace that was not applied to this one)",
                primitive=primitive,
            )
        stale = self._stale.get(rv)
        if stale is not None:
            index, kind = stale
            what = "block" if isinstance(rv, BlockRV) else "loop"
            raise ScheduleError(
                f"handle {rv!r} is stale: its {what} was removed by instruction {index} ({kind})",
                primitive=primitive,
                func=self._func,
            )
        return target

    def _locations(self) -> tree.Locations:
        """The block and loop locations of the current function, found once per rewrite."""
        if self._where is None or self._where.root is not self._func:
            self._where = tree.Locations.of(self._func)
        return self._where

    def _block(self, rv: BlockRV, primitive: str) -> tuple[BlockRealize, tuple[Stmt, ...]]:
        name = self._target(rv, primitive)
        hit = self._locations().blocks.get(str(name))
        if hit is None:  # pragma: no cover - _mark_stale catches removals
            raise ScheduleError(f"block {name!r} is not in the function", primitive=primitive,
                                func=self._func)
        return hit

    def _loop(self, rv: LoopRV, primitive: str) -> tuple[For, tuple[Stmt, ...]]:
        var = self._target(rv, primitive)
        if isinstance(var, sampling.Mark):
            raise ScheduleError(
                f"handle {rv!r} is the {var.name} mark of sample_compute_location, not a loop; "
                "only compute_at and reverse_compute_at take it", primitive=primitive,
            )  # fmt: skip
        assert isinstance(var, Var)  # a LoopRV that is not a mark maps to its loop var
        hit = self._locations().loops.get(var)
        if hit is None:  # pragma: no cover - _mark_stale catches removals
            raise ScheduleError(f"loop {var} is not in the function", primitive=primitive,
                                func=self._func)
        return hit

    def _block_name(self, rv: BlockRV, primitive: str) -> str:
        return self._block(rv, primitive)[0].block.name

    def _loop_var(self, rv: LoopRV, primitive: str) -> Var:
        return self._loop(rv, primitive)[0].loop_var

    def _make_outputs(self, spec: InstructionKind, targets: Any) -> list[_RV | ExprRV]:
        if spec.returns is None:
            return []
        items = list(targets) if spec.returns_list else [targets]
        cls = spec.output_type
        out: list[_RV | ExprRV] = []
        for t in items:
            if cls is ExprRV:
                expr = ExprRV(t)
                self._exprs[id(expr)] = expr
                out.append(expr)
            else:
                assert cls is not None and issubclass(cls, _RV)
                rv = cls(t if isinstance(t, str) else t.name)
                self._symbols[rv] = t
                out.append(rv)
        return out

    def _mark_stale(self, index: int, kind: str) -> None:
        where = self._locations()
        names, loops = where.block_names, where.loops
        for rv, target in self._symbols.items():
            if rv in self._stale or isinstance(target, sampling.Mark):
                continue
            alive = target in names if isinstance(target, str) else target in loops
            if not alive:
                self._stale[rv] = (index, kind)

    def get(self, rv: BlockRV | LoopRV | ExprRV) -> Block | For | int | None:
        """The IR node behind a handle: the Block of a BlockRV, the For of a LoopRV (None
        for a root/inline mark of ``sample_compute_location``), the int of an ExprRV."""
        if isinstance(rv, ExprRV):
            return int(rv)
        if isinstance(rv, BlockRV):
            return self._block(rv, "get")[0].block
        if isinstance(rv, LoopRV):
            if isinstance(self._target(rv, "get"), sampling.Mark):
                return None
            return self._loop(rv, "get")[0]
        raise ScheduleError(f"expected a BlockRV or LoopRV, got {type(rv).__name__}: {rv!r}",
                            primitive="get")

    # --- queries (recorded: they define handles) --------------------------------------------
    @instruction(returns="block", unrecorded=("func_name",))
    def get_block(self, name: str, func_name: str | None = None) -> BlockRV:
        """Handle to the block called ``name`` (block names are unique).

        ``func_name`` (TVM's ``get_sblock``) names the function of a module to look in: the
        one the schedule works on (``work_on``); in a module of several functions
        without ``"main"`` it picks that function as ``work_on`` does. It is not recorded:
        a trace applies to the function its schedule works on.

        Raises
        ------
        ScheduleError
            When no block has that name (the message lists the blocks).
        """
        if func_name is not None:
            self._check_func_name(func_name)
        self._require_function("get_block")
        if not isinstance(name, str):
            raise ScheduleError(f"block name must be a str, got {name!r}", primitive="get_block")
        if name not in self._locations().blocks:
            raise ScheduleError(
                f"no block named {name!r}; blocks: {tree.block_names(self._func)}",
                primitive="get_block",
                func=self._func,
            )
        return _result(self._func, name)

    @instruction(inputs={"block": "block"}, returns="loops")
    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        """Handles to the loops above ``block``, outermost first, up to the enclosing block.

        Returns
        -------
        list of LoopRV
            ``[i, j, k]`` for ``for i: for j: for k: block``; loops outside the enclosing
            block (e.g. above the root) are not included.
        """
        _, anc = self._block(block, "get_loops")
        return _result(self._func, [f.loop_var for f in tree.enclosing_loops(anc)])

    @instruction(inputs={"block_or_loop": "any"}, returns="blocks")
    def get_child_blocks(self, block_or_loop: BlockRV | LoopRV) -> list[BlockRV]:
        """Handles to the blocks directly below a block or loop (not nested in another block)."""
        if isinstance(block_or_loop, BlockRV):
            root: Stmt = self._block(block_or_loop, "get_child_blocks")[0].block
        else:
            root = self._loop(block_or_loop, "get_child_blocks")[0]
        names = [r.block.name for r in tree.child_blocks(root)]
        return _result(self._func, names)

    @instruction(inputs={"block": "block"}, returns="blocks")
    def get_producers(self, block: BlockRV) -> list[BlockRV]:
        """Handles to the blocks of ``block``'s scope that produce what it reads (or writes).

        As TVM's ``get_producers``: earlier blocks under the same enclosing block that write
        a buffer ``block`` reads (read-after-write) or writes (write-after-write), in
        execution order. See ``loopir.schedule.deps.get_producers``.

        Examples
        --------
        For ``B = A * 2; C = B + 1; D = C * C``: ``sch.get_producers(sch.get_block("C"))``
        is ``[BlockRV(B)]``.
        """
        from loopir.schedule import deps

        name = self._block_name(block, "get_producers")
        return _result(self._func, deps.get_producers(self._func, name))

    @instruction(inputs={"block": "block"}, returns="blocks")
    def get_consumers(self, block: BlockRV) -> list[BlockRV]:
        """Handles to the blocks of ``block``'s scope that consume (or overwrite) its output.

        As TVM's ``get_consumers``: later blocks under the same enclosing block that read
        (read-after-write) or write (write-after-write) a buffer ``block`` writes, in
        execution order. See ``loopir.schedule.deps.get_consumers``.
        """
        from loopir.schedule import deps

        name = self._block_name(block, "get_consumers")
        return _result(self._func, deps.get_consumers(self._func, name))

    # --- loop primitives ---------------------------------------------------------------------
    @instruction(inputs={"loop": "loop"}, returns="loops", unrecorded=("preserve_unit_iters",))
    def split(
        self,
        loop: LoopRV,
        factors: list[int | None],
        preserve_unit_iters: bool = True,
        disable_predication: bool = False,
    ) -> list[LoopRV]:
        """Split ``loop`` into ``len(factors)`` nested loops, outermost first.

        Parameters
        ----------
        loop
            A serial loop.
        factors
            Extents of the new loops; at most one None, inferred as ``ceildiv(extent,
            product of the others)``. The product must be at least the extent; when it is
            larger, the blocks below get the predicate ``fused < extent``.
        preserve_unit_iters
            Accepted for TVM compatibility and not recorded: loopir always simplifies an
            extent-1 loop out of the block bindings (the form TVM gives with ``False``); the
            computation is the same either way.
        disable_predication
            Add no predicate (TVM's flag): the caller asserts that the product divides a
            symbolic extent; a provably inexact split is then refused.

        Returns
        -------
        list of LoopRV
            The new loops, outermost first.

        Examples
        --------
        ``sch.split(i, [None, 32])`` on ``for i in T.serial(100)`` gives ``for i_0 in
        T.serial(4): for i_1 in T.serial(32)`` with bindings ``i_0 * 32 + i_1`` and
        ``T.where(i_0 * 32 + i_1 < 100)``; see ``loopir.schedule.loops.split``.
        """
        from loopir.schedule import loops

        check_bool(preserve_unit_iters, "preserve_unit_iters", "split")
        var = self._loop_var(loop, "split")
        return _result(*loops.split(self._func, var, factors, disable_predication))

    @instruction(inputs={"loops": "*loops"}, returns="loop", unrecorded=("preserve_unit_iters",))
    def fuse(self, *loops: LoopRV, preserve_unit_iters: bool = True) -> LoopRV:
        """Fuse perfectly nested adjacent loops (outermost first) into one loop.

        ``preserve_unit_iters`` is accepted (and not recorded) as for ``split``.

        Returns
        -------
        LoopRV
            The fused loop ``i_j_fused``; the old loop vars become ``f // n_j`` and ``f % n_j``
            in the bindings. See ``loopir.schedule.loops.fuse``.
        """
        from loopir.schedule import loops as L

        check_bool(preserve_unit_iters, "preserve_unit_iters", "fuse")
        return _result(*L.fuse(self._func, [self._loop_var(lp, "fuse") for lp in loops]))

    @instruction(inputs={"ordered_loops": "*loops"})
    def reorder(self, *ordered_loops: LoopRV) -> None:
        """Reorder loops of one chain into the given order.

        The loops must be nested in one another with only single loops in between; the
        listed loops take the positions they occupy, in the order given, and unlisted loops
        between them stay where they are. See ``loopir.schedule.loops.reorder``.
        """
        from loopir.schedule import loops as L

        vars_ = [self._loop_var(lp, "reorder") for lp in ordered_loops]
        return _result(L.reorder(self._func, vars_))

    @instruction(inputs={"loop": "loop"})
    def bind(self, loop: LoopRV, thread_axis: str) -> None:
        """Bind ``loop`` to a thread axis.

        Parameters
        ----------
        loop
            A serial loop with a constant extent (``blockIdx`` may be symbolic) to which no
            reduction iter var is bound.
        thread_axis
            ``"blockIdx.x"``... ``"threadIdx.z"``, ``"vthread.x"``... One tag has one extent
            per kernel. See ``loopir.schedule.loops.bind``.
        """
        from loopir.schedule import loops as L

        return _result(L.bind(self._func, self._loop_var(loop, "bind"), thread_axis))

    @instruction(inputs={"loop": "loop"})
    def vectorize(self, loop: LoopRV) -> None:
        """Mark a serial, constant-extent, data-parallel ``loop`` vectorized.

        ``for v in T.serial(4)`` becomes ``for v in T.vectorized(4)``; see
        ``loopir.schedule.loops.vectorize``.
        """
        from loopir.schedule import loops as L

        return _result(L.vectorize(self._func, self._loop_var(loop, "vectorize")))

    @instruction(inputs={"loop": "loop"})
    def unroll(self, loop: LoopRV) -> None:
        """Mark a serial ``loop`` unrolled: ``T.serial(4)`` becomes ``T.unroll(4)``."""
        from loopir.schedule import loops as L

        return _result(L.unroll(self._func, self._loop_var(loop, "unroll")))

    @instruction(inputs={"loop": "loop"})
    def parallel(self, loop: LoopRV) -> None:
        """Mark a serial, data-parallel ``loop`` parallel: ``T.serial`` becomes ``T.parallel``."""
        from loopir.schedule import loops as L

        return _result(L.parallel(self._func, self._loop_var(loop, "parallel")))

    # --- data movement (pure functions by the data-movement modules) --------------------------
    @instruction(inputs={"block": "block", "consumer_blocks": "blocks"}, returns="block", resolve=_cache_buffer_arg("read_buffer_index", "cache_read"))
    def cache_read(
        self,
        block: BlockRV,
        read_buffer_index: str | int | Buffer,
        storage_scope: str,
        consumer_blocks: list[BlockRV] | None = None,
    ) -> BlockRV:
        """Read ``block``'s input buffer through a copy in ``storage_scope``.

        Parameters
        ----------
        block
            The consumer block.
        read_buffer_index
            The buffer, by name or by index into the block's reads.
        storage_scope
            ``"global"``, ``"shared"`` or ``"local"``.
        consumer_blocks
            The blocks that should read the copy (default: every reader).

        Returns
        -------
        BlockRV
            The new copy block (named e.g. ``A_shared``, ``A_shared_1``).
        """
        from loopir.schedule import cache

        name = self._block_name(block, "cache_read")
        consumers = (
            None if consumer_blocks is None
            else [self._block_name(b, "cache_read") for b in consumer_blocks]
        )  # fmt: skip
        return _result(*cache.cache_read(self._func, name, read_buffer_index, storage_scope, consumers))

    @instruction(inputs={"block": "block", "consumer_blocks": "blocks"}, returns="block", resolve=_cache_buffer_arg("write_buffer_index", "cache_write"))
    def cache_write(
        self,
        block: BlockRV,
        write_buffer_index: str | int | Buffer,
        storage_scope: str,
        consumer_blocks: list[BlockRV] | None = None,
    ) -> BlockRV:
        """Write ``block``'s output through a copy in ``storage_scope``.

        Parameters
        ----------
        block
            The producer block.
        write_buffer_index
            The buffer, by name or by index into the block's writes.
        storage_scope
            ``"global"``, ``"shared"`` or ``"local"``.
        consumer_blocks
            Consumers that should read the cache directly (default: none, every consumer
            reads the written-back buffer), as in TVM.

        Returns
        -------
        BlockRV
            The new write-back block (named e.g. ``C_local``).
        """
        from loopir.schedule import cache

        name = self._block_name(block, "cache_write")
        consumers = (
            None if consumer_blocks is None
            else [self._block_name(b, "cache_write") for b in consumer_blocks]
        )  # fmt: skip
        return _result(
            *cache.cache_write(self._func, name, write_buffer_index, storage_scope, consumers)
        )

    @instruction(inputs={"block": "block"}, resolve=_cache_buffer_arg("buffer_index", "set_scope"))
    def set_scope(
        self, block: BlockRV, buffer_index: str | int | Buffer, storage_scope: str
    ) -> None:
        """Move a buffer ``block`` writes to ``storage_scope`` in place (TVM's ``set_scope``).

        Parameters
        ----------
        block
            A block writing the buffer.
        buffer_index
            The buffer, by name or by index into the block's writes; it must be allocated in
            the function (not a parameter).
        storage_scope
            ``"global"``, ``"shared"`` or ``"local"``.

        Notes
        -----
        No copy is made (unlike cache_write). Set the scope before ``compute_at`` of the
        producer: the region computed there follows the scope in force at that time. See
        ``loopir.schedule.scope.set_scope``.
        """
        from loopir.schedule import scope

        name = self._block_name(block, "set_scope")
        return _result(scope.set_scope(self._func, name, buffer_index, storage_scope))

    @instruction(inputs={"block": "block"}, resolve=_layout_args,
                 unrecorded=("pad_value", "assume_injective_transform"))  # fmt: skip
    def transform_layout(
        self,
        block: BlockRV,
        buffer: str | int | Buffer | tuple[str, int],
        index_map: Any,
        pad_value: Any = None,
        *,
        assume_injective_transform: bool = False,
    ) -> None:
        """Store a buffer ``block`` writes in the layout of ``index_map`` (TVM's
        ``transform_layout``), e.g. ``lambda i, j: (j // 4, i, j % 4)``, or the XOR swizzle of a
        64-column fp16 tile free of bank conflicts for ``ldmatrix``, ``lambda i, j: (i, (j // 8
        ^ i % 8) * 8 + j % 8)``.

        ``buffer`` is a name, an index into the block's writes, the Buffer or TVM's
        ``("write", i)`` (``("read", i)`` of a buffer the block also writes). The trace records
        the buffer as its write index and the map as the text of a lambda (``"lambda i, j:
        ((j // 4), i, (j % 4))"``), read back by a parser that evaluates nothing; the text is
        accepted here too. ``pad_value`` must be None (maps are bijections onto the new shape,
        without padding: proven for permutations, splits, fusions and XOR swizzles, else
        checked element by element);
        ``assume_injective_transform`` is accepted and not recorded: the map is checked
        whatever it says. See
        [`loopir.schedule.layout.transform_layout`][loopir.schedule.layout.transform_layout].
        """
        from loopir.schedule import layout

        if pad_value is not None:
            raise ScheduleError(
                f"pad_value={pad_value!r}: loopir's transform_layout takes one-to-one maps "
                "without padding; pad the block first (pad / pad_einsum) and use a map whose "
                "image fills the new shape",
                primitive="transform_layout",
            )
        check_bool(assume_injective_transform, "assume_injective_transform", "transform_layout")
        name = self._block_name(block, "transform_layout")
        assert not isinstance(buffer, tuple)  # _layout_args made a specifier its write index
        return _result(layout.transform_layout(self._func, name, buffer, index_map))

    @instruction(inputs={"block": "block"}, resolve=_cache_buffer_arg("buffer_index", "storage_align"))
    def storage_align(
        self, block: BlockRV, buffer_index: str | int | Buffer, axis: int, factor: int, offset: int
    ) -> None:
        """Pad the stride of ``axis`` of a buffer ``block`` writes to ``k * factor + offset``
        (TVM's ``storage_align``; e.g. ``factor=32, offset=1`` on a shared tile's rows avoids
        bank conflicts on column reads). Applied when lowering compacts the allocation. See
        ``loopir.schedule.scope.storage_align``.
        """
        from loopir.schedule import scope

        name = self._block_name(block, "storage_align")
        return _result(scope.storage_align(self._func, name, buffer_index, axis, factor, offset))

    @instruction(inputs={"block": "block", "loop": "loop"})
    def compute_at(
        self, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool = False, index: int = -1
    ) -> None:
        """Move producer ``block`` under ``loop``, computing just the region its consumers need.

        ``index`` picks the position in the loop body as in TVM: ``-1`` the last valid one
        (before the first consumer), ``-2`` the first (after the last producer of the block's
        inputs), or a statement position in between. ``loop`` may be a mark from
        ``sample_compute_location``: root does nothing, inline inlines (as TVM). See
        ``loopir.schedule.compute_at.compute_at``.
        """
        from loopir.schedule import compute_at as C

        name = self._block_name(block, "compute_at")
        mark = self._target(loop, "compute_at")
        if mark is sampling.ROOT_MARK:  # TVM: compute_at to the root mark does nothing
            return _result(self._func)
        if mark is sampling.INLINE_MARK:
            from loopir.schedule import inline

            return _result(inline.compute_inline(self._func, name))
        var = self._loop_var(loop, "compute_at")
        return _result(C.compute_at(self._func, name, var, preserve_unit_loops, index))

    @instruction(inputs={"block": "block", "loop": "loop"})
    def reverse_compute_at(
        self, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool = False, index: int = -1
    ) -> None:
        """Move consumer ``block`` under ``loop``, consuming just the region produced there.

        ``index`` and marks as for [`compute_at`][loopir.schedule.schedule.Schedule.compute_at]
        (inline: reverse_compute_inline). See ``loopir.schedule.compute_at.reverse_compute_at``.
        """
        from loopir.schedule import compute_at as C

        name = self._block_name(block, "reverse_compute_at")
        mark = self._target(loop, "reverse_compute_at")
        if mark is sampling.ROOT_MARK:
            return _result(self._func)
        if mark is sampling.INLINE_MARK:
            from loopir.schedule import inline

            return _result(inline.reverse_compute_inline(self._func, name))
        var = self._loop_var(loop, "reverse_compute_at")
        return _result(C.reverse_compute_at(self._func, name, var, preserve_unit_loops, index))

    @instruction(inputs={"block": "block"})
    def compute_inline(self, block: BlockRV) -> None:
        """Inline the producer ``block`` into its consumers."""
        from loopir.schedule import inline

        return _result(inline.compute_inline(self._func, self._block_name(block, "compute_inline")))

    @instruction(inputs={"block": "block"})
    def reverse_compute_inline(self, block: BlockRV) -> None:
        """Inline the consumer ``block`` into its producer."""
        from loopir.schedule import inline

        name = self._block_name(block, "reverse_compute_inline")
        return _result(inline.reverse_compute_inline(self._func, name))

    @instruction(inputs={"block": "block", "loop": "loop"}, returns="block")
    def decompose_reduction(self, block: BlockRV, loop: LoopRV) -> BlockRV:
        """Hoist ``block``'s init into a separate block placed before ``loop``; returns it."""
        from loopir.schedule import reduction

        name = self._block_name(block, "decompose_reduction")
        var = self._loop_var(loop, "decompose_reduction")
        return _result(*reduction.decompose_reduction(self._func, name, var))

    @instruction(inputs={"loop": "loop"}, returns="block")
    def rfactor(self, loop: LoopRV, factor_axis: int) -> BlockRV:
        """Factor reduction loop ``loop`` into a buffer of partials (TVM's ``rfactor``); returns the
        rfactor block (see [`loopir.schedule.rfactor.rfactor`][loopir.schedule.rfactor.rfactor])."""
        from loopir.schedule import rfactor as R

        var = self._loop_var(loop, "rfactor")
        return _result(*R.rfactor(self._func, var, factor_axis))

    @instruction(inputs={"block": "block"})
    def pad(self, block: BlockRV, factors: list[int]) -> None:
        """pad_einsum: round each block iter's extent up to a multiple of its factor (also
        callable by TVM's name, ``pad_einsum``)."""
        from loopir.schedule import pad as P

        return _result(P.pad(self._func, self._block_name(block, "pad"), factors))

    # --- annotations (pure functions in annotate.py) -------------------------------------------
    def _annotation_target(self, rv: BlockRV | LoopRV, primitive: str) -> str | Var:
        if isinstance(rv, BlockRV):
            return self._block_name(rv, primitive)
        return self._loop_var(rv, primitive)

    @instruction(inputs={"block_or_loop": "any"})
    def annotate(
        self, block_or_loop: BlockRV | LoopRV, ann_key: str, ann_val: bool | int | float | str | list[Any]
    ) -> None:
        """Set annotation ``ann_key = ann_val`` on a block or loop (TVM's ``annotate``).

        Values are bool, int, float, str or lists of those. ``"loopir.prefetch_shared": True``
        on a serial loop asks lowering to prefetch the loop's next shared-memory tile into
        registers (docs/prefetch.md). See ``loopir.schedule.annotate.annotate``.
        """
        from loopir.schedule import annotate as A

        target = self._annotation_target(block_or_loop, "annotate")
        return _result(A.annotate(self._func, target, ann_key, ann_val))

    @instruction(inputs={"block_or_loop": "any"})
    def unannotate(self, block_or_loop: BlockRV | LoopRV, ann_key: str) -> None:
        """Remove annotation ``ann_key`` from a block or loop (TVM's ``unannotate``)."""
        from loopir.schedule import annotate as A

        target = self._annotation_target(block_or_loop, "unannotate")
        return _result(A.unannotate(self._func, target, ann_key))

    # --- sampling (bodies and docs in sampling.py; decisions are recorded) ------------------
    sample_perfect_tile = instruction(inputs={"loop": "loop"}, returns="exprs")(sampling.sample_perfect_tile)
    sample_categorical = instruction(returns="expr")(sampling.sample_categorical)
    sample_compute_location = instruction(inputs={"block": "block"}, returns="loop")(sampling.sample_compute_location)
