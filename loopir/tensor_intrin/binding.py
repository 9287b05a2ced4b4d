"""How a tensorized block refers to its operands: intrinsic parameters bound to regions.

TVM binds the implementation's parameters with ``T.match_buffer`` to regions of the real
buffers and lowers the match later. loopir's IR has no match_buffer: ``tensorize`` substitutes
the binding right away. A parameter ``P`` of rank ``r`` bound to buffer ``R`` of rank
``n >= r`` at the region start ``(b_0, ..., b_{n-1})`` becomes ``R`` everywhere:

- ``P[i_1, ..., i_r]`` (a load or a store) becomes
  ``R[b_0, ..., b_{n-r-1}, b_{n-r} + i_1, ..., b_{n-1} + i_r]`` (leading dimensions of the
  region have extent 1); a ``Ramp``/``Broadcast`` index stays a vector of the same lanes;
- a region ``P[lo:lo+e, ...]`` likewise.

So the result is ordinary IR over the function's own buffers: the CPU executor, lowering
and the CUDA backend need nothing new.

An intrinsic *call* that takes an operand by address (``ldmatrix``, ``mma.sync``) writes it
in the implementation as a load of the operand's first element, ``A[0, 0]``; tensorize
makes it ``A_real[b_0, b_1]``, the element at the region's start, whose address (with the
real buffer's strides, from its shape) the code generator passes to the instruction.

[`with_descriptions`][loopir.tensor_intrin.binding.with_descriptions] goes the other way for
executors that cannot run an implementation's calls: every tensorized block runs its
intrinsic's *description*, bound to the same regions (semantics.md: "the description is also
the meaning").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs

from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import Broadcast, BufferLoad, IntImm, PrimExpr, Ramp, Var
from loopir.ir.functor import Mutator
from loopir.ir.stmt import Allocate, Block, BlockRealize, BufferStore, For, IterVar, PrimFunc, Stmt

__all__ = [
    "TENSORIZED", "RegionBinding", "bind_params", "description_body", "fresh_copy",
    "region_bindings", "with_descriptions",
]  # fmt: skip

TENSORIZED = "loopir.tensorized"
"""The annotation ``tensorize`` puts on the block it rewrites: the intrinsic's name."""


@attrs.frozen
class RegionBinding:
    """Intrinsic parameter ``param`` bound to ``buffer`` from the region start ``base``
    (one index per dimension of ``buffer``)."""

    param: Buffer
    buffer: Buffer
    base: tuple[PrimExpr, ...]

    def index(self, indices: Sequence[PrimExpr]) -> tuple[PrimExpr, ...]:
        """The index into ``buffer`` of ``param[indices]``."""
        lead = len(self.base) - len(indices)
        return (*self.base[:lead], *(_add(b, i) for b, i in zip(self.base[lead:], indices)))


def _add(base: PrimExpr, index: PrimExpr) -> PrimExpr:
    if isinstance(base, IntImm) and base.value == 0:
        return index
    if isinstance(index, Ramp):
        return Ramp(_add(base, index.base), index.stride, index.lanes)
    if isinstance(index, Broadcast):
        return Broadcast(_add(base, index.value), index.lanes)
    if isinstance(index, IntImm) and index.value == 0:
        return base
    return base + index


class _Bind(Mutator):
    def __init__(self, bindings: Mapping[Buffer, RegionBinding]) -> None:
        self.bindings = bindings

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        out = self.generic_visit(node)
        b = self.bindings.get(out.buffer)
        return out if b is None else BufferLoad(b.buffer, b.index(out.indices))

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        out = self.generic_visit(node)
        b = self.bindings.get(out.buffer)
        return out if b is None else BufferStore(b.buffer, out.value, b.index(out.indices))

    def visit_BufferRegion(self, node: BufferRegion) -> BufferRegion:
        out: BufferRegion = self.generic_visit(node)
        b = self.bindings.get(out.buffer)
        if b is None:
            return out
        mins = b.index([r.min for r in out.region])
        lead = len(b.base) - len(out.region)
        exts = [IntImm(1, m.dtype) for m in mins[:lead]] + [r.extent for r in out.region]
        return BufferRegion(b.buffer, tuple(Range(m, e) for m, e in zip(mins, exts)))


def bind_params(node: Stmt, bindings: Sequence[RegionBinding]) -> Stmt:
    """``node`` with every access to a bound parameter redirected into its region."""
    out: Stmt = _Bind({b.param: b for b in bindings}).visit(node)
    return out


def region_bindings(
    desc: PrimFunc, writes: Sequence[BufferRegion], reads: Sequence[BufferRegion]
) -> dict[Buffer, RegionBinding]:
    """Bind the description's parameters to the regions a block writes and reads.

    The description's root block lists its regions; the block's ``writes`` and ``reads``
    correspond to them position by position (``tensorize`` checked that). Each parameter is
    bound at the start of the first region of it.

    Returns
    -------
    dict
        The binding of each description parameter found in the root block's regions.
    """
    root = root_block(desc)
    out: dict[Buffer, RegionBinding] = {}
    for mine, theirs in ((root.writes, writes), (root.reads, reads)):
        for d, real in zip(mine, theirs):
            if d.buffer not in out:
                out[d.buffer] = RegionBinding(d.buffer, real.buffer, tuple(r.min for r in real.region))
    return out


def root_block(func: PrimFunc) -> Block:
    """The root block of an intrinsic's description or implementation."""
    if not isinstance(func.body, BlockRealize):
        raise TypeError(f"{func.name}: an intrinsic's body must be its root block, got {type(func.body).__name__}")
    return func.body.block


def fresh_copy(node: Stmt, block_name: Callable[[str], str] = lambda n: n) -> Stmt:
    """A copy of ``node`` whose loops, iter vars and allocated buffers are new objects (a
    function defines each at most once, and an intrinsic is substituted many times); blocks
    are renamed by ``block_name``."""
    return _Fresh(block_name).visit(node)  # type: ignore[no-any-return]


class _Fresh(Mutator):
    def __init__(self, block_name: Callable[[str], str]) -> None:
        self.block_name = block_name
        self.vars: dict[Var, PrimExpr] = {}
        self.bufs: dict[Buffer, Buffer] = {}

    def visit_Var(self, node: Var) -> PrimExpr:
        return self.vars.get(node, node)

    def visit_Buffer(self, node: Buffer) -> Buffer:
        return self.bufs.get(node, node)

    def _new_buf(self, b: Buffer) -> Buffer:
        nb = attrs.evolve(b)
        self.bufs[b] = nb
        return nb

    def visit_For(self, node: For) -> Stmt:
        nv = Var(node.loop_var.name, node.loop_var.dtype)
        self.vars[node.loop_var] = nv
        out = self.generic_visit(node)
        return attrs.evolve(out, loop_var=nv)  # type: ignore[no-any-return]

    def visit_Allocate(self, node: Allocate) -> Stmt:
        nb = self._new_buf(node.buffer)
        return Allocate(nb, self.visit(node.body))

    def visit_Block(self, node: Block) -> Stmt:
        ivs = []
        for iv in node.iter_vars:
            nv = Var(iv.var.name, iv.var.dtype)
            self.vars[iv.var] = nv
            ivs.append(IterVar(nv, self.visit(iv.dom), iv.kind))
        allocs = tuple(self._new_buf(b) for b in node.alloc_buffers)
        out = self.generic_visit(attrs.evolve(node, iter_vars=()))
        return attrs.evolve(out, name=self.block_name(node.name), iter_vars=tuple(ivs), alloc_buffers=allocs)  # type: ignore[no-any-return]


def description_body(block: Block, desc: PrimFunc) -> Stmt:
    """The body of ``desc``'s root block bound to the regions ``block`` writes and reads
    (``block`` being one that ``tensorize`` rewrote with the intrinsic of ``desc``)."""
    bindings = region_bindings(desc, block.writes, block.reads)
    return bind_params(fresh_copy(root_block(desc).body), list(bindings.values()))


def with_descriptions(func: PrimFunc, lookup: Callable[[str], PrimFunc] | None = None) -> PrimFunc:
    """``func`` with every tensorized block running its intrinsic's description instead of
    its implementation (for an executor that cannot run the implementation's calls).

    Parameters
    ----------
    func
        A function with blocks annotated ``loopir.tensorized`` by ``Schedule.tensorize``.
    lookup
        The description of an intrinsic name (default: the registry's).
    """
    if lookup is None:
        from loopir.tensor_intrin import get

        def lookup(name: str) -> PrimFunc:
            return get(name).desc

    find = lookup

    class _Describe(Mutator):
        def visit_Block(self, node: Block) -> Stmt:
            out: Block = self.generic_visit(node)
            name = out.annotations.get(TENSORIZED)
            if not isinstance(name, str):
                return out
            return attrs.evolve(out, body=description_body(out, find(name)))

    return func.with_body(_Describe().visit(func.body))

