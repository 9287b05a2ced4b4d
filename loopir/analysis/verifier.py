"""Well-formedness checks for PrimFuncs: ``loopir.verify(func)``.

Each failed check raises [`loopir.errors.IRValidationError`][loopir.errors.IRValidationError] whose
``check`` names it:

``undefined-var``
    A variable is used where it is not defined. Defined are: the symbolic shape vars of the
    parameters (everywhere), a loop's var (in its body), a block's iter vars (in the block,
    nested blocks included). As in TensorIR, a block is isolated from the loops around it:
    inside it only its own iter vars, those of the blocks enclosing it (the inner block of
    ``blockize`` indexes with the outer block's), the function's shape vars and vars defined
    inside the block are visible (outer loop vars reach a block only through its bindings).
``undefined-buffer``
    A buffer is accessed that is neither a parameter nor allocated (block ``alloc_buffers`` or
    ``Allocate``) around the access.
``duplicate-var`` / ``duplicate-buffer``
    A variable or buffer is defined twice (two loops with one var, a param allocated again...).
``index-arity``
    A load, store or region has a different number of indices than the buffer's rank.
``store-dtype``
    A store's value dtype differs from the buffer's dtype (with the index lanes).
``block-binding``
    A block's bindings do not fit its iter vars: count, dtype, or a binding that leaves its
    iter var's domain
    (checked exactly when the loop ranges are constant: see ``loopir.analysis.verifier_eval``).
``region-cover``
    An access inside a block is not covered by the block's read/write regions (the buffer is
    missing, or, when the ranges are constant, an accessed index lies outside every region).
``thread-extent``
    Within one kernel (the subtree of an outermost thread-bound loop) a thread tag is bound
    with two different extents.
``thread-limit``
    A thread-bound loop exceeds a CUDA launch limit (``loopir.ir.verifier_limits``): a constant
    extent over its tag's limit (threadIdx.x/y 1024, threadIdx.z 64, blockIdx.x 2**31 - 1,
    blockIdx.y/z 65535), or a kernel whose threadIdx extents multiply to more than 1024.
``tensor-core-call``
    A tensor-core call (``ptx_ldmatrix``, ``ptx_mma``, ``mma_fill``, ``mma_store``) whose
    operands break its conventions (``loopir.ir.op.tensor_core_problem``: operand kinds,
    scopes, dtypes, constants).
``tma-call``
    A TMA or mbarrier call (``ptx_tma_load``, ``ptx_mbarrier_*``) whose operands break its
    conventions (``loopir.ir.tma.tma_problem``).

Checks that cannot be decided cheaply (symbolic extents, huge spaces) are accepted rather
than guessed: the verifier never rejects valid IR.
"""

from __future__ import annotations

import logging
from typing import Any

from loopir.analysis.verifier_regions import check_binding_range, check_coverage, const_ranges
from loopir.errors import IRValidationError
from loopir.ir import dtype as dt
from loopir.ir import op
from loopir.ir import verifier_limits as limits
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import BufferLoad, Call, IntImm, PrimExpr, Select, Var
from loopir.ir.functor import Visitor, collect_vars
from loopir.ir.span import locate
from loopir.ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Stmt,
)
from loopir.ir.tma import is_tma_call, tma_problem

__all__ = ["verify"]

logger = logging.getLogger(__name__)


def _err(check: str, message: str, node: Any) -> IRValidationError:
    return IRValidationError(message, check=check, node=node)


class _Access:
    """One load or store found directly in a block (not inside a nested block)."""

    __slots__ = ("buffer", "indices", "is_store", "conds", "loops", "node")

    def __init__(
        self,
        buffer: Buffer,
        indices: tuple[PrimExpr, ...],
        is_store: bool,
        conds: list[PrimExpr],
        loops: dict[int, tuple[Var, PrimExpr, PrimExpr]],
        node: Any,
    ) -> None:
        self.buffer = buffer
        self.indices = indices
        self.is_store = is_store
        self.conds = conds
        self.loops = loops
        self.node = node


class _BlockCtx:
    """Per-block state: the accesses found directly in the block (for region-cover)."""

    def __init__(self, block: Block | None) -> None:
        self.block = block
        self.accesses: list[_Access] = []


class _Verifier(Visitor):
    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        # visible variables: id -> Var; a block replaces this scope (isolation)
        self.vars: dict[int, Var] = {}
        # every var defined so far anywhere (for duplicate-var); also names where it was
        self.defined: dict[int, str] = {}
        self.func_vars: dict[int, Var] = {}
        self.buffers: dict[int, Buffer] = {}
        self.buffers_defined: dict[int, str] = {}
        # loops (and parent iter vars) visible for binding range checks: id -> (var, min, ext)
        self.loops: dict[int, tuple[Var, PrimExpr, PrimExpr]] = {}
        # guard conditions around the current statement, inside the current block
        self.conds: list[PrimExpr] = []
        self.threads: dict[str, For] | None = None
        self.block_ctx = _BlockCtx(None)
        self.stmt_stack: list[Any] = [func]
        # vars defined outside the current block, for a helpful undefined-var message
        self.outer_vars: dict[int, Var] = {}
        self.block_names: list[str] = []
        # iter vars of the enclosing blocks (visible in nested blocks), with their domains
        self.block_iters: dict[int, tuple[Var, PrimExpr, PrimExpr]] = {}

    # --- definitions --------------------------------------------------------------------------
    def define_var(self, v: Var, where: str, node: Any) -> None:
        prev = self.defined.get(id(v))
        if prev is not None:
            raise _err(
                "duplicate-var",
                f"variable {v.name!r} is defined twice: {prev} and {where}",
                node,
            )
        self.defined[id(v)] = where
        self.vars[id(v)] = v

    def define_buffer(self, b: Buffer, where: str, node: Any) -> None:
        prev = self.buffers_defined.get(id(b))
        if prev is not None:
            raise _err(
                "duplicate-buffer", f"buffer {b.name!r} is defined twice: {prev} and {where}", node
            )
        self.buffers_defined[id(b)] = where
        self.buffers[id(b)] = b
        for e in (*b.shape, *(b.strides or ())):
            self.check_expr(e)

    # --- uses ---------------------------------------------------------------------------------
    def check_expr(self, e: PrimExpr) -> None:
        self.visit(e)

    def visit_Var(self, v: Var) -> None:
        if id(v) in self.vars:
            return
        stmt = self.stmt_stack[-1]
        if id(v) in self.outer_vars:
            raise _err(
                "undefined-var",
                f"variable {v.name!r} is defined outside block {self.block_names[-1]!r} but "
                "used inside it; a block may use only its iter vars (bind outer loop vars "
                "through the block's bindings)",
                stmt,
            )
        raise _err("undefined-var", f"variable {v.name!r} is used but never defined here", stmt)

    def use_buffer(self, b: Buffer, n_indices: int, what: str, node: Any) -> None:
        if id(b) not in self.buffers:
            raise _err(
                "undefined-buffer",
                f"{what} of buffer {b.name!r}, which is neither a parameter nor allocated "
                "around this point",
                node,
            )
        if n_indices != len(b.shape):
            raise _err(
                "index-arity",
                f"{what} of buffer {b.name!r} uses {n_indices} indices, but the buffer has "
                f"{len(b.shape)} dimensions",
                node,
            )

    def visit_BufferLoad(self, e: BufferLoad) -> None:
        self.use_buffer(e.buffer, len(e.indices), "load", e)
        for i in e.indices:
            self.check_expr(i)
        # the statement holding the load is the more helpful node to show
        self.record(e.buffer, e.indices, False, self.stmt_stack[-1])

    def visit_Call(self, e: Call) -> None:
        if op.is_tensor_core_call(e):
            problem = op.tensor_core_problem(e)
            if problem is not None:
                raise _err("tensor-core-call", problem, self.stmt_stack[-1])
        if is_tma_call(e) and (problem := tma_problem(e)) is not None:
            raise _err("tma-call", problem, self.stmt_stack[-1])
        self.generic_visit(e)

    def visit_Select(self, e: Select) -> None:
        # Loads in a branch happen only under its condition (for region coverage).
        self.check_expr(e.condition)
        self.conds.append(e.condition)
        self.check_expr(e.true_value)
        self.conds[-1] = ~e.condition
        self.check_expr(e.false_value)
        self.conds.pop()

    def visit_BufferRegion(self, r: BufferRegion) -> None:
        self.use_buffer(r.buffer, len(r.region), "region", r)
        for rg in r.region:
            self.check_expr(rg.min)
            self.check_expr(rg.extent)

    def visit_Range(self, r: Range) -> None:
        self.check_expr(r.min)
        self.check_expr(r.extent)

    def record(self, b: Buffer, idx: tuple[PrimExpr, ...], store: bool, node: Any) -> None:
        self.block_ctx.accesses.append(
            _Access(b, idx, store, list(self.conds), dict(self.loops), node)
        )

    # --- statements ---------------------------------------------------------------------------
    def visit(self, node: Any) -> None:
        if isinstance(node, Stmt):
            self.stmt_stack.append(node)
            try:
                super().visit(node)
            finally:
                self.stmt_stack.pop()
        else:
            super().visit(node)

    def visit_BufferStore(self, s: BufferStore) -> None:
        self.use_buffer(s.buffer, len(s.indices), "store", s)
        for i in s.indices:
            self.check_expr(i)
        self.check_expr(s.value)
        lanes = max((dt.lanes(i.dtype) for i in s.indices), default=1)
        want = dt.with_lanes(s.buffer.dtype, lanes)
        if s.value.dtype != want:
            raise _err(
                "store-dtype",
                f"store of a {s.value.dtype} value into buffer {s.buffer.name!r} of dtype {want}",
                s,
            )
        self.record(s.buffer, s.indices, True, s)

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        self.check_expr(s.condition)
        self.conds.append(s.condition)
        self.visit(s.then_case)
        self.conds.pop()
        if s.else_case is not None:
            self.conds.append(~s.condition)
            self.visit(s.else_case)
            self.conds.pop()

    def visit_Allocate(self, s: Allocate) -> None:
        self.define_buffer(s.buffer, "by an Allocate", s)
        self.visit(s.body)
        del self.buffers[id(s.buffer)]

    def visit_For(self, s: For) -> None:
        self.check_expr(s.min)
        self.check_expr(s.extent)
        self.define_var(s.loop_var, f"by loop {s.loop_var.name}", s)
        opened_kernel = False
        if s.kind is ForKind.THREAD_BINDING:
            tag = s.thread_tag or ""
            if self.threads is None:
                self.threads = {}
                opened_kernel = True
            prev = self.threads.get(tag)
            if prev is None:
                self.threads[tag] = s
            elif not _same_extent(prev.extent, s.extent):
                raise _err(
                    "thread-extent",
                    f"thread tag {tag} is bound with extent {s.extent} here but with "
                    f"extent {prev.extent} by loop {prev.loop_var.name} in the same kernel",
                    s,
                )
            self.check_limits(s, tag)
        self.loops[id(s.loop_var)] = (s.loop_var, s.min, s.extent)
        try:
            self.visit(s.body)
        finally:
            del self.loops[id(s.loop_var)]
            del self.vars[id(s.loop_var)]
            if opened_kernel:
                self.threads = None

    def check_limits(self, s: For, tag: str) -> None:
        problem = limits.extent_problem(tag, s.extent)
        if problem is None and self.threads is not None:
            problem = limits.block_threads_problem({t: f.extent for t, f in self.threads.items()})
        if problem is not None:
            raise _err("thread-limit", f"loop {s.loop_var.name} bound to {tag}: {problem}", s)

    def visit_BlockRealize(self, s: BlockRealize) -> None:
        blk = s.block
        for v in s.iter_values:
            self.check_expr(v)
        self.check_expr(s.predicate)
        self.check_bindings(s)
        self.enter_block(blk, s)

    def visit_Block(self, blk: Block) -> None:
        # A Block without its BlockRealize (only as a standalone verify target).
        self.enter_block(blk, None)

    def check_bindings(self, s: BlockRealize) -> None:
        blk = s.block
        if len(s.iter_values) != len(blk.iter_vars):
            raise _err(
                "block-binding",
                f"block {blk.name!r} has {len(blk.iter_vars)} iter vars but "
                f"{len(s.iter_values)} bindings",
                s,
            )
        for iv, value in zip(blk.iter_vars, s.iter_values):
            if value.dtype != iv.var.dtype:
                raise _err(
                    "block-binding",
                    f"block {blk.name!r}: iter var {iv.var.name} ({iv.var.dtype}) is bound to "
                    f"{value} of dtype {value.dtype}",
                    s,
                )
        ranges = const_ranges(self.loops)
        for iv, value in zip(blk.iter_vars, s.iter_values):
            problem = check_binding_range(iv, value, s.predicate, ranges, self.loops)
            if problem is not None:
                raise _err("block-binding", f"block {blk.name!r}: {problem}", s)

    def enter_block(self, blk: Block, realize: BlockRealize | None) -> None:
        saved = (self.vars, self.loops, self.conds, self.block_ctx, self.outer_vars, self.threads,
                 self.block_iters)  # fmt: skip
        self.outer_vars = {**self.outer_vars, **self.vars}
        self.vars = {**self.func_vars, **{k: v for k, (v, _, _) in self.block_iters.items()}}
        self.loops = dict(self.block_iters)
        self.conds = []
        self.block_ctx = _BlockCtx(blk)
        self.block_names.append(blk.name)
        try:
            for iv in blk.iter_vars:
                self.visit_Range(iv.dom)
            for iv in blk.iter_vars:
                self.define_var(iv.var, f"as iter var of block {blk.name!r}", realize or blk)
                self.loops[id(iv.var)] = (iv.var, iv.dom.min, iv.dom.extent)
            self.block_iters = {
                **self.block_iters,
                **{id(iv.var): (iv.var, iv.dom.min, iv.dom.extent) for iv in blk.iter_vars},
            }
            for b in blk.alloc_buffers:
                self.define_buffer(b, f"in alloc_buffers of block {blk.name!r}", realize or blk)
            for r in (*blk.reads, *blk.writes):
                self.visit_BufferRegion(r)
            if blk.init is not None:
                self.visit(blk.init)
            self.visit(blk.body)
            problem = check_coverage(blk, self.block_ctx.accesses)
            if problem is not None:
                message, node = problem
                raise _err("region-cover", f"block {blk.name!r}: {message}", node)
            for b in blk.alloc_buffers:
                del self.buffers[id(b)]
        finally:
            (self.vars, self.loops, self.conds, self.block_ctx, self.outer_vars, self.threads,
             self.block_iters) = saved  # fmt: skip
            self.block_names.pop()

    # --- entry --------------------------------------------------------------------------------
    def run(self) -> None:
        f = self.func
        for n, b in enumerate(f.params):
            for e in (*b.shape, *(b.strides or ())):
                for v in collect_vars(e):
                    self.func_vars[id(v)] = v
            if id(b) in self.buffers_defined:
                raise _err(
                    "duplicate-buffer",
                    f"buffer {b.name!r} is passed twice (parameter {n})",
                    b,
                )
            self.buffers_defined[id(b)] = f"as parameter {n}"
            self.buffers[id(b)] = b
        for vid, v in self.func_vars.items():
            self.defined[vid] = f"as a shape variable of the parameters ({v.name})"
        self.vars = dict(self.func_vars)
        self.visit(f.body)


def _same_extent(a: PrimExpr, b: PrimExpr) -> bool:
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return a.value == b.value
    from loopir.ir.equality import structural_equal

    return structural_equal(a, b, map_free_vars=False)


def verify(func: PrimFunc) -> None:
    """Check that ``func`` is well-formed; raise
    [`IRValidationError`][loopir.errors.IRValidationError] otherwise.

    Parameters
    ----------
    func
        The function to check.

    Raises
    ------
    IRValidationError
        With ``check`` set to the name of the failed check (see
        [`loopir.analysis.verifier`][loopir.analysis.verifier]) and a message naming the offending
        variable/buffer/block and showing the offending node.
    """
    if not isinstance(func, PrimFunc):
        raise IRValidationError(
            f"verify expects a PrimFunc, got {type(func).__name__}", check="input"
        )
    try:
        _Verifier(func).run()
    except IRValidationError as e:
        located = _with_source(func, e)
        if located is None:
            raise
        raise located from None
    logger.debug("verify: %s is well-formed", func.name)


def _with_source(func: PrimFunc, e: IRValidationError) -> IRValidationError | None:
    """``e`` with the script lines of its node and block, for a function parsed from a script
    (``loopir.script``); None when the offending node has no source."""
    hits = locate(func, e.node)
    if not hits:
        return None
    node, span = hits[0]
    text = f"{e.message}\n{span.show()}"
    block = next(((n, s) for n, s in hits if isinstance(n, (Block, BlockRealize))), None)
    if block is not None and block[0] is not node:
        b = block[0].block if isinstance(block[0], BlockRealize) else block[0]
        text += f"\n  in block {b.name!r} written at {block[1]}"
    return IRValidationError(text, check=e.check, node=e.node)
