"""``annotate`` / ``unannotate``: attach or remove a key-value annotation on a loop or block.

As in TVM's TensorIR, annotations are hints for later passes; they do not change what the
function computes. Values are JSON literals (bool, int, float, str, or lists of those) so that a
trace with annotations round-trips through JSON and Python. Known keys read by loopir's
lowering:

``"loopir.prefetch_shared"`` (bool, on a serial loop)
    :class:`loopir.passes.prefetch.InjectSharedPrefetch` prefetches the loop's next
    shared-memory tile into registers while the current one is computed (see
    ``docs/prefetch.md``).
"""

from __future__ import annotations

from typing import Any

import attrs

from loopir.errors import ScheduleError
from loopir.ir.expr import Var
from loopir.ir.stmt import For, PrimFunc
from loopir.schedule import tree

__all__ = ["annotate", "annotation_value_ok", "unannotate"]


def annotation_value_ok(value: Any) -> bool:
    """Whether ``value`` is a valid annotation value: bool/int/float/str or a list of those."""
    if isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(annotation_value_ok(v) for v in value)
    return False


def _check_key(key: Any, primitive: str) -> None:
    if not isinstance(key, str) or not key:
        raise ScheduleError(f"annotation key must be a non-empty str, got {key!r}", primitive=primitive)


def _set(func: PrimFunc, target: str | Var, key: str, value: Any, primitive: str) -> PrimFunc:
    """``func`` with the annotations of the block named / loop of ``target`` changed."""
    if isinstance(target, Var):
        hit = tree.find_loop(func, target)
        if hit is None:
            raise ScheduleError(f"loop {target.name} is not in the function", primitive=primitive)
        loop: For = hit[0]
        anns = loop.annotations.remove(key) if value is None else loop.annotations.set(key, value)
        return tree.replace(func, loop, attrs.evolve(loop, annotations=anns))
    found = tree.find_block_realize(func, target)
    if found is None:
        raise ScheduleError(f"block {target!r} is not in the function", primitive=primitive)
    realize = found[0]
    block = realize.block
    anns = block.annotations.remove(key) if value is None else block.annotations.set(key, value)
    new_block = attrs.evolve(block, annotations=anns)
    return tree.replace(func, realize, attrs.evolve(realize, block=new_block))


def annotate(func: PrimFunc, target: str | Var, ann_key: str, ann_val: Any) -> PrimFunc:
    """Set annotation ``ann_key = ann_val`` on a block (by name) or a loop (by its Var).

    Parameters
    ----------
    func
        The function.
    target
        A block name or a loop Var.
    ann_key
        Non-empty key, e.g. ``"loopir.prefetch_shared"``.
    ann_val
        bool, int, float, str or a (nested) list of those; an existing value is replaced.

    Returns
    -------
    PrimFunc
        The function with the annotation set.

    Raises
    ------
    ScheduleError
        On an empty/non-str key or a value that is not a JSON literal (None included: use
        :func:`unannotate` to remove a key).
    """
    _check_key(ann_key, "annotate")
    if isinstance(ann_val, tuple):
        ann_val = list(ann_val)
    if not annotation_value_ok(ann_val):
        raise ScheduleError(
            f"annotation {ann_key!r}: value must be a bool, int, float, str or a list of those, "
            f"got {ann_val!r}",
            primitive="annotate",
        )
    return _set(func, target, ann_key, ann_val, "annotate")


def unannotate(func: PrimFunc, target: str | Var, ann_key: str) -> PrimFunc:
    """Remove annotation ``ann_key`` from a block (by name) or a loop (by its Var).

    Raises
    ------
    ScheduleError
        If the block or loop has no annotation ``ann_key`` (the message lists the ones it has).
    """
    _check_key(ann_key, "unannotate")
    if isinstance(target, Var):
        hit = tree.find_loop(func, target)
        anns = None if hit is None else hit[0].annotations
        what = f"loop {target.name}"
    else:
        found = tree.find_block_realize(func, target)
        anns = None if found is None else found[0].block.annotations
        what = f"block {target!r}"
    if anns is None:
        raise ScheduleError(f"{what} is not in the function", primitive="unannotate")
    if ann_key not in anns:
        raise ScheduleError(
            f"{what} has no annotation {ann_key!r}; it has {sorted(anns)}",
            primitive="unannotate",
            func=func,
        )
    return _set(func, target, ann_key, None, "unannotate")
