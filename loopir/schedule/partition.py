"""``loop_partition`` and ``add_unit_loop`` as pure functions on PrimFunc (TVM 0.27 semantics).

``loop_partition`` cuts a loop into consecutive loops, each over a copy of the body with its
blocks renamed as in TVM (``B`` -> ``B_i0``, ``B_i1``...). TVM also wraps each partition in a
block ``B_i0_partition`` and all of them in ``B_i_common``; loopir's blocks may use only their
iter vars (a block nested in a loop nest cannot see the loops around it), so the partitions
are sibling loops in the scope of the original loop instead, and ``get_loops`` of a block in a
partition includes the loops above it. ``add_unit_loop`` puts a loop of extent 1 above a
block or loop.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import attrs

from loopir.errors import ScheduleError
from loopir.ir.buffer import Range
from loopir.ir.expr import IntImm, PrimExpr, Var
from loopir.ir.functor import Mutator, substitute
from loopir.ir.stmt import Block, BlockRealize, For, ForKind, IterKind, IterVar, PrimFunc, Stmt, seq
from loopir.schedule import tree
from loopir.schedule.region import BufferRedirect

logger = logging.getLogger(__name__)

_P = "loop_partition"


def _const(e: PrimExpr) -> int | None:
    return int(e.value) if isinstance(e, IntImm) else None


def _sizes(func: PrimFunc, loop: For, factors: Any) -> list[int]:
    """The partitions' extents: the factors with None inferred, plus the remainder when no
    factor is None (TVM's rule: the given factors must sum to less than the extent)."""
    extent = _const(loop.extent)
    if _const(loop.min) is None or extent is None:
        raise ScheduleError(
            f"loop {loop.loop_var.name} has a symbolic range (min {loop.min}, extent "
            f"{loop.extent}); loop_partition needs constant ones, as in TVM",
            primitive=_P, func=func, node=loop,
        )  # fmt: skip
    if isinstance(factors, (str, bytes)) or not isinstance(factors, Sequence) or not factors:
        raise ScheduleError(
            f"factors must be a non-empty list of positive ints (at most one None), got {factors!r}",
            primitive=_P, func=func, node=loop,
        )  # fmt: skip
    nones = [k for k, f in enumerate(factors) if f is None]
    if len(nones) > 1:
        raise ScheduleError(
            f"at most one factor may be None (inferred), got {list(factors)!r}",
            primitive=_P, func=func, node=loop,
        )  # fmt: skip
    for f in factors:
        if f is not None and (isinstance(f, bool) or not isinstance(f, int) or f <= 0):
            raise ScheduleError(
                f"factors must be positive ints or None, got {f!r} in {list(factors)!r}",
                primitive=_P, func=func, node=loop,
            )  # fmt: skip
    given = sum(f for f in factors if f is not None)
    if given >= extent:
        raise ScheduleError(
            f"the factors {list(factors)!r} sum to {given}, not less than the extent {extent} of "
            f"loop {loop.loop_var.name}; loop_partition needs a non-empty last partition (as "
            "in TVM, factors that fill the loop exactly are refused: leave the last one out)",
            primitive=_P, func=func, node=loop,
        )  # fmt: skip
    if nones:
        return [extent - given if f is None else f for f in factors]
    return [*factors, extent - given]


class _Copy(Mutator):
    """A copy of a loop body for one partition: new loop vars and iter vars (the IR defines
    each variable once), blocks renamed ``<name>_<suffix>`` (buffers they allocate too), and
    the domain of an iter var
    bound to the partition's loop var narrowed to the partition (as TVM)."""

    def __init__(self, suffix: str, part_var: PrimExpr, dom: Range, taken: set[str]) -> None:
        super().__init__()
        self.suffix = suffix
        self.part_var = part_var
        self.dom = dom
        self.taken = taken

    def visit_For(self, node: For) -> Stmt:
        new_var = Var(node.loop_var.name, node.loop_var.dtype)
        body = self.visit(substitute(node.body, {node.loop_var: new_var}))
        return attrs.evolve(node, loop_var=new_var, body=body)

    def visit_BlockRealize(self, node: BlockRealize) -> Stmt:
        blk = node.block
        new_vars = [Var(iv.var.name, iv.var.dtype) for iv in blk.iter_vars]
        ivs = []
        for iv, value, nv in zip(blk.iter_vars, node.iter_values, new_vars):
            # A reduce iter var keeps its domain: its init runs where it is at the domain's
            # minimum, which narrowed would be the start of every partition (TVM narrows it,
            # and each partition of a reduction loop starts the sum again).
            narrow = value is self.part_var and iv.kind is IterKind.SPATIAL
            dom = self.dom if narrow else iv.dom
            ivs.append(IterVar(nv, dom, iv.kind))
        vmap = {iv.var: nv for iv, nv in zip(blk.iter_vars, new_vars)}
        renamed = substitute(attrs.evolve(blk, iter_vars=tuple(ivs)), vmap)
        assert isinstance(renamed, Block)
        if blk.alloc_buffers:
            # a block nested in another (blockize) may allocate: each copy its own buffers
            bmap = {b: attrs.evolve(b, name=_fresh(f"{b.name}_{self.suffix}", self.taken))
                    for b in blk.alloc_buffers}  # fmt: skip
            renamed = BufferRedirect(bmap).visit(renamed)
        name = _fresh(f"{blk.name}_{self.suffix}", self.taken)
        inner = self.visit(renamed.body)
        init = None if renamed.init is None else self.visit(renamed.init)
        new_blk = attrs.evolve(renamed, name=name, body=inner, init=init)
        return attrs.evolve(node, block=new_blk)


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name = f"{base}_{k}"
        k += 1
    taken.add(name)
    return name


def loop_partition(func: PrimFunc, loop_var: Var, factors: Sequence[int | None]) -> tuple[PrimFunc, list[Var]]:
    """Cut a loop into consecutive loops over copies of its body (TVM's ``loop_partition``).

    ``factors`` are the partitions' extents, at most one None (inferred as the rest); they
    must sum to less than the extent, and when none is None the remainder is one more
    partition. The loop needs a constant range and no thread binding or annotation (as in
    TVM); its kind is dropped (the new loops are serial). Partition ``k`` is the loop
    ``<loop><k>`` over its slice, from 0 (TVM writes ``range(start, end)``; here the old
    loop var is ``<loop><k> + start``); its copy of each block is renamed
    ``<block>_<loop><k>``, and a spatial block iter var bound to the loop
    itself gets the slice as its domain. The partitions replace the loop in its scope (TVM
    wraps them in the blocks ``<block>_<loop><k>_partition`` and ``<block>_<loop>_common``,
    which loopir's IR cannot express for a loop nested in other loops; see the module
    docstring).

    Before / after ``loop_partition(i, [3, None])`` on ``for i in T.serial(10)``::

        for i in T.serial(10):                 for i0 in T.serial(3):
            for j in T.serial(8):                  for j in T.serial(8):
                with T.block("B"):                     with T.block("B_i0"):
                    v_i = T.axis.spatial(10, i)            v_i = T.axis.spatial(3, i0)
                    v_j = T.axis.spatial(8, j)             ...
                    ...                        for i1 in T.serial(7):
                                                   for j_1 in T.serial(8):
                                                       with T.block("B_i1"):
                                                           v_i = T.axis.spatial((3, 10), i1 + 3)

    Returns
    -------
    (PrimFunc, list of Var)
        The new function and the partitions' loop vars, in order.
    """
    hit = tree.find_loop(func, loop_var) if isinstance(loop_var, Var) else None
    if hit is None:
        raise ScheduleError(f"loop {loop_var!r} is not in the function", primitive=_P, func=func)
    loop, _ = hit
    if loop.kind is ForKind.THREAD_BINDING or loop.annotations:
        what = f"bound to {loop.thread_tag}" if loop.kind is ForKind.THREAD_BINDING else "annotated"
        raise ScheduleError(
            f"loop {loop.loop_var.name} is {what}; loop_partition needs a loop without thread "
            "binding or annotations (as in TVM: partition before binding or annotating)",
            primitive=_P, func=func, node=loop,
        )  # fmt: skip
    sizes = _sizes(func, loop, factors)
    taken = set(tree.block_names(func))
    start = _const(loop.min)
    assert start is not None  # _sizes checked it
    parts: list[Stmt] = []
    new_vars: list[Var] = []
    dtype = loop.loop_var.dtype
    for k, size in enumerate(sizes):
        var = Var(f"{loop.loop_var.name}{k}", dtype)
        lo, ext = IntImm(start, dtype), IntImm(size, dtype)
        # Each partition's loop runs from 0 (the old loop var is ``var + start``): loopir's
        # thread binding, race checker and code generators take loops from 0.
        value: PrimExpr = var if start == 0 else var + lo
        copy = _Copy(var.name, value, Range(lo, ext), taken)
        body = copy.visit(substitute(loop.body, {loop.loop_var: value}))
        parts.append(For(var, IntImm(0, dtype), ext, ForKind.SERIAL, body))
        new_vars.append(var)
        start += size
    logger.debug("loop_partition %s into %s", loop.loop_var.name, sizes)
    return tree.replace(func, loop, seq(*parts)), new_vars


# --------------------------------------------------------------------------------------------
# add_unit_loop
# --------------------------------------------------------------------------------------------


def add_unit_loop(func: PrimFunc, target: str | Var) -> tuple[PrimFunc, Var]:
    """Put a serial loop ``u`` of extent 1 directly above a block (by name) or a loop.

    Before / after ``add_unit_loop("C")``::

        with T.block("C"):                 for u in T.serial(1):
            C[()] = A[()] + B[()]              with T.block("C"):
                                                   C[()] = A[()] + B[()]

    Raises
    ------
    ScheduleError
        For the root block (nothing can be above it), or an unknown block or loop.
    """
    P = "add_unit_loop"
    node: Stmt
    if isinstance(target, str):
        hit = tree.find_block_realize(func, target)
        if hit is None:
            raise ScheduleError(f"no block named {target!r}", primitive=P, func=func)
        node, anc = hit
        if not anc:
            raise ScheduleError(
                f"block {target!r} is the root block; add_unit_loop adds a loop above a block "
                "inside the function (as in TVM)",
                primitive=P, func=func, node=node,
            )  # fmt: skip
    else:
        found = tree.find_loop(func, target)
        if found is None:
            raise ScheduleError(f"loop {target!r} is not in the function", primitive=P, func=func)
        node = found[0]
    u = Var("u", "int32")
    return tree.replace(func, node, For(u, IntImm(0, "int32"), IntImm(1, "int32"), ForKind.SERIAL, node)), u
