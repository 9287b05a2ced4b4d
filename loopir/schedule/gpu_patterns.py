"""What the default GPU schedule and the tuner's design spaces recognize in a function.

Read-only questions about the blocks of a [`Schedule`][loopir.schedule.schedule.Schedule] (no
instruction is recorded): which root-level blocks are unscheduled, whether a block is alone in its
loop nest, whether a spatial block and reductions form rows (softmax), whether a reduction is long
and contiguous, whether a block transposes, and how many vector lanes its accesses allow.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Add, BufferLoad, IntImm, PrimExpr, Var
from loopir.ir.functor import collect_vars, post_order_visit, substitute
from loopir.ir.stmt import Block, BlockRealize, BufferStore, For, IterKind
from loopir.schedule import tree
from loopir.schedule.schedule import Schedule

__all__ = [
    "RowPattern", "constant_extents", "constant_shape", "is_gemm", "nest_loops", "operand_names", "realize", "reduce_loop_count",
    "reduction_pattern", "row_pattern", "transpose_operand", "unscheduled_blocks", "vector_lanes", "vector_width",
]  # fmt: skip

#: The reduction rule's limits: at most this many outputs, at least this long a reduction.
MAX_REDUCTION_OUTPUTS = 16384
MIN_CROSS_THREAD_EXTENT = 128


def vector_width(dtype: str) -> int:
    """Elements of ``dtype`` in one 16-byte vector (4 floats, 8 halves)."""
    return 16 // max(1, dt.bits(dtype) // 8)


def realize(sch: Schedule, name: str) -> tuple[BlockRealize, tuple[Any, ...]]:
    """The BlockRealize of block ``name`` and its ancestors."""
    found = tree.find_block_realize(sch.func, name)
    assert found is not None, name
    return found


def unscheduled_blocks(sch: Schedule) -> list[str]:
    """Names of the blocks directly under the root block none of whose loops is bound to a
    thread axis, in program order."""
    names = []
    for name in tree.block_names(sch.func):
        br, anc = realize(sch, name)
        parent = tree.enclosing_block(anc)
        if parent is None or parent.name != "root" or br.block.name == "root":
            continue
        if not any(getattr(a, "thread_tag", None) for a in anc):
            names.append(name)
    return names


def nest_loops(sch: Schedule, name: str) -> list[For] | None:
    """The loops above block ``name`` when they hold nothing else (a perfect nest), else None."""
    br, anc = realize(sch, name)
    loops = tree.enclosing_loops(anc)
    inner = [*loops[1:], br]
    return loops if all(f.body is nxt for f, nxt in zip(loops, inner)) else None


def constant_extents(loops: list[For]) -> list[int] | None:
    """The loops' extents when all are constants."""
    exts = [f.extent.value if isinstance(f.extent, IntImm) else None for f in loops]
    return None if None in exts else [e for e in exts if e is not None]


def reduce_loop_count(br: BlockRealize, loops: list[For]) -> int | None:
    """How many of the innermost loops feed reduce iter vars (None: they are interleaved with
    spatial ones)."""
    reduce_vars: set[Var] = set()
    for iv, val in zip(br.block.iter_vars, br.iter_values):
        if iv.kind is IterKind.REDUCE:
            reduce_vars |= set(collect_vars(val))
    kinds = [f.loop_var in reduce_vars for f in loops]
    n = sum(kinds)
    return n if not any(kinds[: len(kinds) - n]) else None


def _loads(block: Block) -> list[BufferLoad]:
    found: list[BufferLoad] = []
    post_order_visit(block.body, lambda n: found.append(n) if isinstance(n, BufferLoad) else None)
    return found


def operand_names(block: Block) -> list[str]:
    """The buffers ``block`` loads, other than those it writes, in first-use order."""
    written = {w.buffer for w in block.writes}
    names: list[str] = []
    for ld in _loads(block):
        if ld.buffer not in written and ld.buffer.name not in names:
            names.append(ld.buffer.name)
    return names


def _accesses(br: BlockRealize) -> list[BufferLoad]:
    """The block's loads (and its store, as a load) in terms of the loop vars."""
    vmap = {iv.var: val for iv, val in zip(br.block.iter_vars, br.iter_values)}
    out = [BufferLoad(ld.buffer, tuple(substitute(ix, vmap) for ix in ld.indices)) for ld in _loads(br.block)]
    body = br.block.body
    if isinstance(body, BufferStore):
        out.append(BufferLoad(body.buffer, tuple(substitute(ix, vmap) for ix in body.indices)))
    return out


def _uses(index: PrimExpr, var: Var) -> bool:
    return var in set(collect_vars(index))


@attrs.frozen
class RowPattern:
    """A spatial block reading reductions one row at a time (softmax, layernorm)."""

    stats: list[str]  # the reductions, in program order
    depth: int  # how many leading loops make a row
    cols: int | None  # the row length (None: symbolic)
    dtype: str  # the output's dtype


def row_pattern(sch: Schedule, name: str, pending: list[str]) -> RowPattern | None:
    """Whether spatial block ``name`` reads reduction blocks of ``pending`` (directly or
    through each other) at its leading iter vars, each reduction being over the same rows."""
    br = realize(sch, name)[0]
    blk = br.block
    loops = nest_loops(sch, name)
    if loops is None or any(iv.kind is IterKind.REDUCE for iv in blk.iter_vars) or len(blk.iter_vars) < 2:
        return None
    writers = {}
    for other in pending:
        ob = realize(sch, other)[0].block
        if len(ob.writes) == 1:
            writers[ob.writes[0].buffer] = ob
    stats: list[str] = []
    depth = None
    frontier = [blk]
    while frontier:
        for load in _loads(frontier.pop()):
            src = writers.get(load.buffer)
            if src is None or src.name in stats:
                continue
            n = sum(iv.kind is IterKind.SPATIAL for iv in src.iter_vars)
            if src.init is None or n == 0 or (depth is not None and n != depth):
                return None
            depth = n
            stats.append(src.name)
            frontier.append(src)
    if depth is None or depth >= len(blk.iter_vars):
        return None
    row_vars = [iv.var for iv in blk.iter_vars[:depth]]
    for load in _loads(blk):
        if load.buffer in writers and writers[load.buffer].name in stats:
            if not all(isinstance(ix, Var) and ix is v for ix, v in zip(load.indices, row_vars)):
                return None
    exts = constant_extents(loops[depth:])
    return RowPattern([n for n in pending if n in stats], depth, None if exts is None else math.prod(exts),
                      blk.writes[0].buffer.dtype)  # fmt: skip


def is_gemm(sch: Schedule, name: str, min_spatial: int = 1, min_reduce: int = 1) -> bool:
    """Whether block ``name`` is GEMM-like: alone in its nest, an init, iter vars ``[batch..,]
    i, j, k`` (spatial, spatial, one reduce), the loops bound to them in that order, two
    operands, and (when constant) ``i``, ``j`` at least ``min_spatial``, ``k`` at least
    ``min_reduce``."""
    br = realize(sch, name)[0]
    blk = br.block
    loops = nest_loops(sch, name)
    kinds = [iv.kind for iv in blk.iter_vars]
    if loops is None or blk.init is None or len(kinds) < 3 or kinds.count(IterKind.REDUCE) != 1 \
            or kinds[-1] is not IterKind.REDUCE or len(loops) != len(kinds):  # fmt: skip
        return False
    if not all(v is f.loop_var for v, f in zip(br.iter_values, loops)) or len(operand_names(blk)) != 2:
        return False
    lows = [min_spatial, min_spatial, min_reduce]
    return all(not isinstance(f.extent, IntImm) or f.extent.value >= lo for f, lo in zip(loops[-3:], lows))


def reduction_pattern(sch: Schedule, name: str) -> tuple[int, int] | None:
    """``(reduce loops, reduction length)`` of a reduction block with at most
    ``MAX_REDUCTION_OUTPUTS`` outputs, at least ``MIN_CROSS_THREAD_EXTENT`` reduced
    elements and its innermost reduced index contiguous in some operand (so that threads
    sharing the reduction read coalesced), else None."""
    br = realize(sch, name)[0]
    loops = nest_loops(sch, name)
    if loops is None or br.block.init is None:
        return None
    n_red = reduce_loop_count(br, loops)
    exts = constant_extents(loops)
    if not n_red or n_red == len(loops) or exts is None:
        return None
    outputs, length = math.prod(exts[: len(loops) - n_red]), math.prod(exts[len(loops) - n_red :])
    if outputs > MAX_REDUCTION_OUTPUTS or length < MIN_CROSS_THREAD_EXTENT:
        return None
    inner = loops[-1].loop_var
    if not any(ac.indices and _uses(ac.indices[-1], inner) for ac in _accesses(br)):
        return None
    return n_red, length


def transpose_operand(sch: Schedule, name: str) -> str | None:
    """The buffer a 2-D spatial block reads with its two indices swapped, if any."""
    br = realize(sch, name)[0]
    blk = br.block
    loops = nest_loops(sch, name)
    if loops is None or len(loops) != 2 or len(blk.iter_vars) != 2 or blk.init is not None:
        return None
    if any(iv.kind is IterKind.REDUCE for iv in blk.iter_vars) or not all(isinstance(v, Var) for v in br.iter_values):
        return None
    a, b = (iv.var for iv in blk.iter_vars)
    for ld in _loads(blk):
        if len(ld.indices) == 2 and ld.indices[0] is b and ld.indices[1] is a:
            return ld.buffer.name
    return None


def _offset_of(e: PrimExpr, v: Var) -> bool:
    return e is v or isinstance(e, Add) and (
        e.a is v and isinstance(e.b, IntImm) or e.b is v and isinstance(e.a, IntImm))  # fmt: skip


def vector_lanes(sch: Schedule, name: str, threads: int = 1) -> int | None:
    """Lanes (up to 16 bytes) of one vector per thread when block ``name``'s loops are fused
    and split over ``threads``: every access's last index must be the innermost loop's var (or
    not use it), which no other index uses, and the sizes must divide; 1 otherwise. None when
    the block is not alone in a nest of spatial loops."""
    br = realize(sch, name)[0]
    loops = nest_loops(sch, name)
    if loops is None or not loops or br.block.init is not None or not isinstance(br.block.body, BufferStore):
        return None
    if any(iv.kind is IterKind.REDUCE for iv in br.block.iter_vars):
        return None
    exts = constant_extents(loops)
    if exts is None:
        return 1
    inner = loops[-1].loop_var
    accesses = _accesses(br)
    width = min(vector_width(ac.buffer.dtype) for ac in accesses)
    for ac in accesses:
        if ac.indices and (any(_uses(ix, inner) for ix in ac.indices[:-1])
                           or _uses(ac.indices[-1], inner) and not _offset_of(ac.indices[-1], inner)):  # fmt: skip
            return 1
    while width > 1 and (exts[-1] % width or math.prod(exts) % (threads * width)):
        width //= 2
    return width


def constant_shape(buffer: Buffer) -> tuple[int, ...] | None:
    """``buffer``'s shape as ints, or None when a dimension is symbolic."""
    dims = [d.value if isinstance(d, IntImm) else None for d in buffer.shape]
    return None if None in dims else tuple(d for d in dims if d is not None)
