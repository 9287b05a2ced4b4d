"""Blocks placed among the loops of a cross-thread reduction that access its output.

A reduction whose loops are bound to ``threadIdx`` (see :mod:`loopir.passes.cross_thread`)
has its total only after the threads combine their parts, which LowerCrossThreadReduction
writes after the reduction's loops. A block under the reduction's outermost reduction loop
that reads or writes the reduction's output (a consumer moved there by
``reverse_compute_at``, or one already there when ``bind`` makes the reduction cross-thread)
cannot be lowered: TVM 0.27 accepts such schedules and fails in LowerCrossThreadReduction
("the reduction block isn't the last block under its first reduction-related loop"); loopir's
``reverse_compute_at`` and ``bind`` refuse them up front.
"""

from __future__ import annotations

from loopir.errors import ScheduleError
from loopir.ir.functor import collect_vars
from loopir.ir.stmt import Block, BlockRealize, For, ForKind, IterKind, PrimFunc, Stmt
from loopir.schedule import region as rg
from loopir.schedule import tree

__all__ = ["Conflict", "check_no_new_conflict", "conflicts"]

#: (reduction block, the thread loop it runs across, its outermost reduction loop, the other
#: block, the output buffer's name)
Conflict = tuple[str, str, str, str, str]


def _loops(anc: tuple[Stmt, ...]) -> list[For]:
    """The loops around a block inside its block scope, outermost first."""
    out: list[For] = []
    for a in anc:
        if isinstance(a, Block):
            out = []
        elif isinstance(a, For):
            out.append(a)
    return out


def conflicts(func: PrimFunc) -> set[Conflict]:
    """Every block lying under the outermost reduction loop of a cross-thread reduction and
    accessing that reduction's output."""
    found: set[Conflict] = set()
    for node, anc in tree.walk(func):
        if not isinstance(node, BlockRealize) or node.block.init is None:
            continue
        feeds = {
            v for iv, e in zip(node.block.iter_vars, node.iter_values)
            if iv.kind is not IterKind.SPATIAL for v in collect_vars(e)
        }  # fmt: skip
        related = [lp for lp in _loops(anc) if lp.loop_var in feeds]
        thread = next((lp for lp in related if lp.kind is ForKind.THREAD_BINDING
                       and str(lp.thread_tag).startswith("threadIdx.")), None)  # fmt: skip
        if thread is None:
            continue
        outputs = [w.buffer for w in node.block.writes]
        for other in rg.block_realizes(related[0]):
            if other is node:
                continue
            hit = next((b for b in outputs if rg.reads_buffer(other.block, b)
                        or rg.writes_buffer(other.block, b)), None)  # fmt: skip
            if hit is not None:
                found.add((node.block.name, f"{thread.loop_var.name} is bound to {thread.thread_tag}",
                           related[0].loop_var.name, other.block.name, hit.name))  # fmt: skip
    return found


def check_no_new_conflict(before: PrimFunc, after: PrimFunc, primitive: str, node: object) -> None:
    """Raise a ScheduleError when ``after`` (what ``primitive`` made of ``before``) has a block
    among the loops of a cross-thread reduction accessing its output that ``before`` had not."""
    new = conflicts(after) - conflicts(before)
    if not new:
        return
    red, thread, outer, other, buf = sorted(new)[0]
    raise ScheduleError(
        f"block {other!r} would lie under loop {outer}, among the reduction loops of block "
        f"{red!r}, whose reduction runs across threads (loop {thread}), and it accesses its "
        f"output {buf}: the total exists only once the threads have combined their parts, after "
        f"those loops, so LowerCrossThreadReduction could not lower it (TVM 0.27 accepts the "
        f"schedule and fails there); place {other!r} outside loop {outer}",
        primitive=primitive, func=before, node=node,
    )  # fmt: skip
