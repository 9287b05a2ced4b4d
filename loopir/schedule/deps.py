"""``get_producers`` and ``get_consumers``: the dataflow neighbours of a block in its scope.

As in TVM, the relation is the block scope's dependence graph restricted to read-after-write
and write-after-write edges: a producer of block ``X`` is a block of ``X``'s scope (the blocks
directly under the same enclosing block) that runs before ``X`` and writes a buffer ``X``
reads or writes; a consumer runs after ``X`` and reads or writes a buffer ``X`` writes.
Blocks nested inside a sibling block belong to that sibling's scope and are not listed (the
sibling is, when its region declarations mention the buffer). Results are in execution
(pre-order) order, without repetitions.
"""

from __future__ import annotations

from loopir.errors import ScheduleError
from loopir.ir.buffer import Buffer, BufferRegion
from loopir.ir.stmt import Block, PrimFunc
from loopir.schedule import region as rg
from loopir.schedule import tree


def _scope_blocks(func: PrimFunc, block: str, primitive: str) -> tuple[list[Block], int]:
    """The blocks of ``block``'s scope in execution order, and ``block``'s position there."""
    realize, anc = rg.get_block(func, block, primitive)
    scope = tree.enclosing_block(anc)
    if scope is None:
        raise ScheduleError(
            f"block {block!r} is the root block; it has no scope siblings to depend on",
            primitive=primitive,
            func=func,
            node=realize.block,
        )
    # the scope block's children: its body may itself be a block (blockize of a whole nest)
    siblings = [r.block for r in tree.child_blocks(scope)]
    index = next(i for i, b in enumerate(siblings) if b is realize.block)
    return siblings, index


def _buffers(regions: tuple[BufferRegion, ...]) -> set[Buffer]:
    return {r.buffer for r in regions}


def get_producers(func: PrimFunc, block: str) -> list[str]:
    """Names of the blocks that produce what ``block`` reads (or also writes).

    Parameters
    ----------
    func
        The function.
    block
        Name of a (non-root) block.

    Returns
    -------
    list of str
        Blocks of the same scope that run before ``block`` and write a buffer it reads
        (read-after-write) or writes (write-after-write), in execution order.

    Raises
    ------
    ScheduleError
        Unknown block, or the root block.

    Examples
    --------
    In ``B = A * 2; C = B + 1; D = C * C`` (three root-level nests),
    ``get_producers(func, "C") == ["B"]`` and ``get_producers(func, "B") == []``; after
    ``decompose_reduction`` of a matmul the update's producer is its init block.
    """
    siblings, here = _scope_blocks(func, block, "get_producers")
    me = siblings[here]
    touched = _buffers(me.reads) | _buffers(me.writes)
    return [b.name for b in siblings[:here] if _buffers(b.writes) & touched]


def get_consumers(func: PrimFunc, block: str) -> list[str]:
    """Names of the blocks that consume (or overwrite) what ``block`` writes.

    Parameters
    ----------
    func
        The function.
    block
        Name of a (non-root) block.

    Returns
    -------
    list of str
        Blocks of the same scope that run after ``block`` and read (read-after-write) or
        write (write-after-write) a buffer it writes, in execution order.

    Raises
    ------
    ScheduleError
        Unknown block, or the root block.

    Examples
    --------
    In ``B = A * 2; C = B + 1; D = C * C``, ``get_consumers(func, "C") == ["D"]`` and
    ``get_consumers(func, "D") == []`` (D writes the output, which no block reads).
    """
    siblings, here = _scope_blocks(func, block, "get_consumers")
    written = _buffers(siblings[here].writes)
    return [
        b.name for b in siblings[here + 1:] if (_buffers(b.reads) | _buffers(b.writes)) & written
    ]


def get_output_blocks(func: PrimFunc, scope_block: str) -> list[str]:
    """Names of the blocks under ``scope_block`` that write a buffer their scope does not
    allocate (TVM's ``get_output_blocks``).

    Every block nested below ``scope_block`` (at any depth) is considered with its own scope,
    the innermost block around it: it is an output block when one of its writes is not
    allocated by that block (a parameter of the function, or a buffer allocated further out).

    Parameters
    ----------
    func
        The function.
    scope_block
        Name of the block whose body is searched (``"root"`` for the whole function).

    Returns
    -------
    list of str
        The output blocks in execution (pre-order) order.

    Examples
    --------
    In ``C = A @ B; D = C + bias; E = max(D, 0)`` with ``C`` and ``D`` allocated in the root
    block, ``get_output_blocks(func, "root") == ["E"]``.
    """
    realize, _ = rg.get_block(func, scope_block, "get_output_blocks")
    out: list[str] = []
    for node, anc in tree.walk(realize.block.body):
        if not isinstance(node, Block):
            continue
        scope = tree.enclosing_block(anc) or realize.block
        allocated = set(scope.alloc_buffers)
        if any(r.buffer not in allocated for r in node.writes):
            out.append(node.name)
    return out
