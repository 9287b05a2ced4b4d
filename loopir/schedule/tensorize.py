"""``tensorize``: replace a block's body by a tensor intrinsic's implementation.

As TVM 0.27's ``tensorize``: a loop is first blockized
([`loopir.schedule.blockize.blockize`][loopir.schedule.blockize.blockize]); the block is then
matched structurally against the intrinsic's description
([`loopir.schedule.tensorize_match`][loopir.schedule.tensorize_match]), which binds every
description parameter to a region of a real buffer; the block's body becomes the
implementation's (a fresh copy), its parameters bound to the same regions
([`loopir.tensor_intrin.binding`][loopir.tensor_intrin.binding]: substituted into the real
buffers at the region's start, where TVM writes ``T.match_buffer``). The block keeps its iter
vars, regions and ``init``; it gets the implementation root block's annotations and
``"loopir.tensorized": <intrinsic name>``.

As in TVM, the tile must be exact: a block whose loops are inexact splits (a predicate) does
not match a description without one; pad the workload first (``pad_einsum``) or split by a
divisor.
"""

from __future__ import annotations

import logging

import attrs

from loopir import tensor_intrin
from loopir.errors import ScheduleError
from loopir.ir.expr import Var
from loopir.ir.printer import script
from loopir.ir.stmt import Block, BlockRealize, PrimFunc, Stmt
from loopir.schedule import region as rg
from loopir.schedule import tree
from loopir.schedule.blockize import blockize
from loopir.schedule.tensorize_match import Matcher, Mismatch
from loopir.tensor_intrin.binding import (
    TENSORIZED,
    bind_params,
    fresh_copy,
    region_bindings,
    root_block,
)

logger = logging.getLogger(__name__)

__all__ = ["tensorize"]

_P = "tensorize"


def _intrin(name: str, func: PrimFunc) -> tensor_intrin.TensorIntrin:
    if not isinstance(name, str):
        raise ScheduleError(f"the intrinsic must be named by a str, got {name!r}", primitive=_P)
    try:
        intrin = tensor_intrin.get(name)
    except tensor_intrin.TensorIntrinError as exc:
        raise ScheduleError(str(exc), primitive=_P, func=func) from None
    for what, f in (("description", intrin.desc), ("implementation", intrin.impl)):
        if not isinstance(f.body, BlockRealize):
            raise ScheduleError(
                f"tensor intrinsic {name!r}: its {what} must be a root block, got a "
                f"{type(f.body).__name__}",
                primitive=_P,
            )  # fmt: skip
    return intrin


def _mismatch_error(func: PrimFunc, realize: BlockRealize, intrin: tensor_intrin.TensorIntrin, m: Mismatch) -> ScheduleError:
    desc = script(intrin.desc, mark=m.rhs)
    return ScheduleError(
        f"block {realize.block.name!r} does not match tensor intrinsic {intrin.name!r}: "
        f"{m.what}\nthe intrinsic's description (the differing node marked):\n{desc}\n"
        "the function (the block's differing node marked):",
        primitive=_P, func=func, node=m.lhs,
    )  # fmt: skip


def tensorize(
    func: PrimFunc, target: str | Var, intrin_name: str, preserve_unit_iters: bool = True
) -> tuple[PrimFunc, str]:
    """Tensorize block ``target`` (a name) or the subtree of loop ``target`` (a Var) with the
    tensor intrinsic registered as ``intrin_name``.

    Returns
    -------
    (PrimFunc, str)
        The new function and the name of the tensorized block (for a loop, the block that
        blockize made, ``<block>_o``).

    Raises
    ------
    ScheduleError
        For an unknown intrinsic, a loop that cannot be blockized, or a block that does not
        match the description: the message names what differs (dtype, scope, extent, index
        pattern, ...), shows the description with its differing node marked, and the
        function with the block's node marked.
    """
    intrin = _intrin(intrin_name, func)
    if isinstance(target, Var):
        try:
            func, name = blockize(func, target, preserve_unit_iters)
        except ScheduleError as exc:
            exc.primitive = _P
            raise
    else:
        name = target
    realize, _ = rg.get_block(func, name, _P)
    if realize.block.annotations.get(TENSORIZED) is not None:
        raise ScheduleError(
            f"block {name!r} is already tensorized with "
            f"{realize.block.annotations[TENSORIZED]!r}",
            primitive=_P, func=func, node=realize,
        )  # fmt: skip
    try:
        Matcher().match(realize, intrin.desc.body)  # type: ignore[arg-type]
    except Mismatch as m:
        raise _mismatch_error(func, realize, intrin, m) from None
    blk = realize.block
    # the implementation's own scratch buffers: new ones per use, in the block's allocations
    scratch = {b: attrs.evolve(b, name=tree.fresh_name(func, b.name))
               for b in root_block(intrin.impl).alloc_buffers}  # fmt: skip
    body = rg.BufferRedirect(scratch).visit(_implementation(func, blk, intrin))
    new = attrs.evolve(
        blk, body=body, annotations=_annotations(blk, intrin),
        alloc_buffers=(*blk.alloc_buffers, *scratch.values()),
    )  # fmt: skip
    logger.debug("tensorize %s with %s", name, intrin.name)
    return tree.replace(func, realize, attrs.evolve(realize, block=new)), name


def _implementation(func: PrimFunc, blk: Block, intrin: tensor_intrin.TensorIntrin) -> Stmt:
    """The implementation's body, copied fresh, its parameters bound where the description's
    are (parameters correspond by position)."""
    bindings = region_bindings(intrin.desc, blk.writes, blk.reads)
    impl_bindings = []
    for d, i in zip(intrin.desc.params, intrin.impl.params):
        b = bindings.get(d)
        if b is None:
            raise ScheduleError(
                f"tensor intrinsic {intrin.name!r}: its description's root block lists no "
                f"region of parameter {d.name}; tensorize binds parameters through those regions",
                primitive=_P,
            )  # fmt: skip
        impl_bindings.append(attrs.evolve(b, param=i))
    taken = set(tree.block_names(func))

    def block_name(base: str) -> str:
        out = tree.fresh_name(func, base, taken)
        taken.add(out)
        return out

    body = fresh_copy(root_block(intrin.impl).body, block_name)
    return bind_params(body, impl_bindings)


def _annotations(blk: Block, intrin: tensor_intrin.TensorIntrin) -> dict[str, object]:
    out = dict(blk.annotations)
    for key, value in root_block(intrin.impl).annotations.items():
        # as TVM: the schedule's value wins over the intrinsic's on a conflict
        out.setdefault(key, value)
    out[TENSORIZED] = intrin.name
    return out
