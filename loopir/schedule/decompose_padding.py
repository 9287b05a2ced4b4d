"""``decompose_padding``: split a padding block into a constant fill and an in-bound copy
(TVM 0.27's ``decompose_padding``).

A padding block stores ``Select(cond, value, pad)`` with a constant ``pad``. The primitive puts
a block ``<block>_pad_const`` that stores ``pad`` at every point right before the given loop,
and trims the block to the points where ``cond`` holds, so that it stores ``value`` without
the ``Select``: the in-bound part becomes a plain copy that later primitives (vectorize,
tensorize) handle.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import attrs

from loopir.errors import ScheduleError
from loopir.ir import op
from loopir.ir.buffer import Range
from loopir.ir.expr import GE, GT, LE, LT, BufferLoad, FloatImm, IntImm, PrimExpr, Select, Var
from loopir.ir.functor import Mutator, collect_vars, substitute
from loopir.ir.stmt import (
    Block,
    BlockRealize,
    BufferStore,
    For,
    ForKind,
    IterKind,
    IterVar,
    PrimFunc,
    Stmt,
    seq,
)
from loopir.schedule import region as rg
from loopir.schedule import tree

logger = logging.getLogger(__name__)

_P = "decompose_padding"


def _fail(msg: str, func: PrimFunc, node: Any) -> ScheduleError:
    return ScheduleError(msg, primitive=_P, func=func, node=node)


def _pattern(func: PrimFunc, realize: BlockRealize) -> tuple[BufferStore, Select]:
    """The block's store of ``Select(cond, value, constant)`` (TVM's padding pattern), after
    the checks of a complete block (spatial iter vars, the only writer of its one output,
    which it does not read)."""
    blk = realize.block
    if any(iv.kind is not IterKind.SPATIAL for iv in blk.iter_vars) or blk.init is not None:
        raise _fail(f"block {blk.name!r} is a reduction; decompose_padding needs a spatial "
                    "(complete) block, as in TVM", func, blk)  # fmt: skip
    store = blk.body
    if not isinstance(store, BufferStore) or len(blk.writes) != 1:
        raise _fail(f"block {blk.name!r} does not match the padding pattern: its body must be "
                    "one store of T.if_then_else(cond, value, pad) to its output", func, blk)  # fmt: skip
    sel = store.value
    if not isinstance(sel, Select):
        raise _fail(f"block {blk.name!r} stores {sel}, not a padding T.if_then_else(cond, value, "
                    "pad)", func, blk)  # fmt: skip
    if not isinstance(sel.false_value, (IntImm, FloatImm)):
        raise _fail(f"the pad value {sel.false_value} of block {blk.name!r} is not a constant",
                    func, blk)  # fmt: skip
    buf = store.buffer
    if rg.reads_buffer(blk, buf):
        raise _fail(f"block {blk.name!r} reads its output {buf.name!r}; the constant fill would "
                    "change what it reads", func, blk)  # fmt: skip
    writers = [r.block.name for r in rg.leaf_blocks(func) if rg.writes_buffer(r.block, buf)]
    if writers != [blk.name]:
        others = ", ".join(n for n in writers if n != blk.name)
        raise _fail(f"buffer {buf.name!r} is also written by {others}; decompose_padding needs "
                    "the block to be its only writer (a complete block, as in TVM)", func, blk)  # fmt: skip
    return store, sel


def _bounds(func: PrimFunc, blk: Block, cond: PrimExpr) -> dict[Var, tuple[list[PrimExpr], list[PrimExpr]]]:
    """Per iter var, the lower bounds (inclusive) and upper bounds (exclusive) that the
    condition's terms put on it; every term must bound one iter var (coefficient +-1)."""
    ivars = [iv.var for iv in blk.iter_vars]
    out: dict[Var, tuple[list[PrimExpr], list[PrimExpr]]] = {}
    ana = rg.make_analyzer()
    for term in rg.conjuncts(cond):
        used = [v for v in ivars if v in collect_vars(term)]
        if not isinstance(term, (LT, LE, GT, GE)) or len(used) != 1:
            raise _fail(f"padding condition term {term} does not bound one iter var of block "
                        f"{blk.name!r} (TVM: the block iters are not independent wrt the padding "
                        "condition)", func, blk)  # fmt: skip
        v = used[0]
        lin = ana.detect_linear(term.a - term.b, [v])
        coef = lin[0] if lin is not None else None
        if lin is None or not isinstance(coef, IntImm) or coef.value not in (1, -1):
            raise _fail(f"padding condition term {term} is not v + c compared with a bound "
                        f"(iter var {v.name})", func, blk)  # fmt: skip
        # the term is coef * v + base OP 0: a bound on v (inclusive below, exclusive above)
        base = lin[1]
        lo, hi = out.setdefault(v, ([], []))
        if coef.value == -1:  # -v + base OP 0  <=>  v OP' base
            term_kind = {LT: GT, LE: GE, GT: LT, GE: LE}[type(term)]
            bound = base
        else:
            term_kind, bound = type(term), -base
        if term_kind is LT:
            hi.append(bound)
        elif term_kind is LE:
            hi.append(bound + 1)
        elif term_kind is GT:
            lo.append(bound + 1)
        else:
            lo.append(bound)
    return out


def _in_bound_region(
    func: PrimFunc, blk: Block, cond: PrimExpr
) -> list[tuple[PrimExpr, PrimExpr]]:
    """``(lo, extent)`` per iter var: the points of its domain where ``cond`` holds."""
    bounds = _bounds(func, blk, cond)
    region: list[tuple[PrimExpr, PrimExpr]] = []
    trivial = True
    ana = rg.make_analyzer()
    for iv in blk.iter_vars:
        los, his = bounds.get(iv.var, ([], []))
        lo: PrimExpr = iv.dom.min
        hi: PrimExpr = iv.dom.min + iv.dom.extent
        for b in los:
            lo = op.max_(lo, b)
        for b in his:
            hi = op.min_(hi, b)
        lo, hi = ana.simplify(lo), ana.simplify(hi)
        extent = ana.simplify(hi - lo)
        if not ana.can_prove(extent >= 0):
            raise _fail(f"the padding condition {cond} leaves iter var {iv.var.name} the range "
                        f"[{lo}, {hi}), not provably non-empty", func, blk)  # fmt: skip
        if not (ana.can_prove_equal(lo, iv.dom.min) and ana.can_prove_equal(extent, iv.dom.extent)):
            trivial = False
        region.append((lo, extent))
    if trivial:
        raise _fail(f"the padding condition {cond} of block {blk.name!r} holds at every point "
                    "(TVM: the in-bound predicate is trivial); nothing to decompose", func, blk)  # fmt: skip
    return region


def _chain_top(realize: BlockRealize, loops: Sequence[For], pos: For) -> list[For]:
    """The loops from the innermost up, each the whole body of the one above, at most up to
    ``pos``: their ranges may change for the in-bound part (TVM's in_bound_filling_pos)."""
    out: list[For] = []
    node: Stmt = realize
    for lp in reversed(loops):
        if lp.body is not node:
            break
        out.append(lp)
        node = lp
        if lp is pos:
            break
    out.reverse()
    return out


def decompose_padding(func: PrimFunc, block: str, loop_var: Var) -> tuple[PrimFunc, str]:
    """Split padding block ``block`` into a constant fill before ``loop`` and an in-bound copy.

    Parameters
    ----------
    func
        The function.
    block
        A spatial block storing ``T.if_then_else(cond, value, pad)`` (``pad`` a constant)
        to its one output, which no other block writes and it does not read; each term of
        ``cond`` bounds one iter var (``v >= 1``, ``v < 5``, ``v + 1 <= n``...).
    loop_var
        A loop above the block, in the block's scope: the fill is placed right before it.

    Returns
    -------
    (PrimFunc, str)
        The new function and the name of the fill block (``<block>_pad_const``).

    Examples
    --------
    Before / after ``decompose_padding(func, "block", i)`` (TVM's example)::

        for i in T.serial(140):                      for i in T.serial(140):
            with T.block("block"):                       with T.block("block_pad_const"):
                vi = T.axis.spatial(140, i)                  vi = T.axis.spatial(140, i)
                y[vi] = T.if_then_else(                      y[vi] = 0
                    vi >= 6 and vi < 134,            for i in T.serial(128):
                    x[vi - 6], 0)                        with T.block("block"):
                                                             vi = T.axis.spatial(128, i)
                                                             y[vi + 6] = x[vi + 6 - 6]

    The fill's loops are copies of ``loop`` and the loops inside it down to the block, with
    their kinds (TVM makes them serial; kept here so that a fill under a thread-bound loop is
    shared by the same threads). A loop of the in-bound part that binds exactly one iter var
    and encloses only the block gets the in-bound range; otherwise the in-bound points are
    selected by the block's predicate.
    """
    realize, anc = rg.get_block(func, block, _P)
    blk = realize.block
    loops = tree.enclosing_loops(anc)
    hit = tree.find_loop(func, loop_var) if isinstance(loop_var, Var) else None
    if hit is None:
        raise ScheduleError(f"loop {loop_var!r} is not in the function", primitive=_P, func=func)
    pos = hit[0]
    if not any(lp is pos for lp in loops):
        raise _fail(f"loop {pos.loop_var.name} is not above block {blk.name!r} in its scope",
                    func, pos)  # fmt: skip
    store, sel = _pattern(func, realize)
    region = _in_bound_region(func, blk, sel.condition)
    inner = loops[next(i for i, lp in enumerate(loops) if lp is pos):]
    const = _const_nest(func, realize, store, sel, inner)
    in_bound, top = _in_bound_nest(realize, store, sel, region, loops, _chain_top(realize, loops, pos))
    new_pos = in_bound if top is pos else tree.replace_in(pos, top, in_bound)
    out = tree.replace(func, pos, seq(const[0], new_pos))
    logger.debug("decompose_padding %s at %s: region %s", block, pos.loop_var.name, region)
    return out, const[1]


def _const_nest(
    func: PrimFunc, realize: BlockRealize, store: BufferStore, sel: Select, inner: Sequence[For]
) -> tuple[Stmt, str]:
    """``buf[indices] = pad`` at every point, in copies of the loops from the position in."""
    blk = realize.block
    vmap: dict[Var, PrimExpr] = {}
    new_loops = []
    for lp in inner:
        nv = Var(lp.loop_var.name, lp.loop_var.dtype)
        vmap[lp.loop_var] = nv
        new_loops.append((lp, nv))
    ivars = [Var(iv.var.name, iv.var.dtype) for iv in blk.iter_vars]
    imap = {iv.var: v for iv, v in zip(blk.iter_vars, ivars)}
    indices = tuple(substitute(e, imap) for e in store.indices)
    name = _fresh_block(func, f"{blk.name}_pad_const")
    new_blk = Block(
        name,
        tuple(IterVar(v, iv.dom, IterKind.SPATIAL) for v, iv in zip(ivars, blk.iter_vars)),
        (),
        (rg.point_region(store.buffer, indices),),
        BufferStore(store.buffer, sel.false_value, indices),
    )
    body: Stmt = BlockRealize(
        tuple(substitute(v, vmap) for v in realize.iter_values),
        substitute(realize.predicate, vmap),
        new_blk,
    )
    for lp, nv in reversed(new_loops):
        body = attrs.evolve(lp, loop_var=nv, min=substitute(lp.min, vmap),
                            extent=substitute(lp.extent, vmap), body=body)  # fmt: skip
    return body, name


def _in_bound_nest(
    realize: BlockRealize, store: BufferStore, sel: Select,
    region: Sequence[tuple[PrimExpr, PrimExpr]], loops: Sequence[For], chain: Sequence[For],
) -> tuple[Stmt, Stmt]:  # fmt: skip
    """The trimmed block (and the rebuilt chain of loops around it), and the statement of the
    old tree it replaces."""
    blk = realize.block
    chain_vars = {lp.loop_var: lp for lp in chain}
    ana = rg.make_analyzer(loops)
    new_vars = [Var(iv.var.name, iv.var.dtype) for iv in blk.iter_vars]
    vmap: dict[Var, PrimExpr] = {}
    loop_shift: dict[Var, PrimExpr] = {}
    new_ranges: dict[Var, PrimExpr] = {}
    bindings: list[PrimExpr] = []
    guards: list[PrimExpr] = []
    for iv, value, nv, (lo, ext) in zip(blk.iter_vars, realize.iter_values, new_vars, region):
        vmap[iv.var] = nv + lo
        lp = chain_vars.get(value) if isinstance(value, Var) else None
        whole = ana.can_prove_equal(lo, iv.dom.min) and ana.can_prove_equal(ext, iv.dom.extent)
        if whole and ana.can_prove_equal(lo, 0):
            bindings.append(value)  # the binding already lies in the domain: nothing to trim
        elif lp is not None and _own_loop(realize, lp, lo, ext, ana):
            # the loop itself runs over the in-bound range: l' in [0, ext), l = l' + lo
            new_ranges[lp.loop_var] = ext
            loop_shift[lp.loop_var] = lp.loop_var + lo
            bindings.append(lp.loop_var)
        else:
            bindings.append(ana.simplify(value - lo))
            if not whole:
                guards += [lo <= value, value < lo + ext]
    shift = dict(loop_shift)
    pred = substitute(realize.predicate, shift)
    conds = [substitute(g, shift) for g in guards]
    new_ana = rg.make_analyzer([attrs.evolve(lp, min=IntImm(0, lp.loop_var.dtype), extent=new_ranges[lp.loop_var])
                                if lp.loop_var in new_ranges else lp for lp in loops])  # fmt: skip
    kept = [ana_c for ana_c in (new_ana.simplify(c) for c in conds) if not new_ana.can_prove(ana_c)]
    predicate = rg.conjunction([c for c in rg.conjuncts(pred)] + kept)
    indices = tuple(tree.simplify(substitute(e, vmap)) for e in store.indices)
    value = _SimplifyIndices().visit(substitute(sel.true_value, vmap))
    new_blk = attrs.evolve(
        blk,
        iter_vars=tuple(IterVar(nv, Range(IntImm(0, nv.dtype), ext), IterKind.SPATIAL)
                        for nv, (_, ext) in zip(new_vars, region)),  # fmt: skip
        reads=tuple(attrs.evolve(r, region=tuple(Range(tree.simplify(substitute(x.min, vmap)), x.extent)
                                                 for x in r.region)) for r in blk.reads),  # fmt: skip
        writes=(rg.point_region(store.buffer, indices),),
        body=BufferStore(store.buffer, value, indices),
    )
    out: Stmt = BlockRealize(tuple(bindings), predicate, new_blk)
    for lp in reversed(chain):
        if lp.loop_var in new_ranges:
            out = attrs.evolve(lp, min=IntImm(0, lp.loop_var.dtype), extent=new_ranges[lp.loop_var], body=out)
        else:
            out = attrs.evolve(lp, body=out)
    return out, (chain[0] if chain else realize)


class _SimplifyIndices(Mutator):
    """Simplify the indices of loads (``x[vi + 6 - 6]`` is ``x[vi]``), leaving the value's
    arithmetic as written."""

    def visit_BufferLoad(self, node: BufferLoad) -> PrimExpr:
        return BufferLoad(node.buffer, tuple(tree.simplify(i) for i in node.indices))


def _own_loop(realize: BlockRealize, lp: For, lo: PrimExpr, ext: PrimExpr, ana: Any) -> bool:
    """Whether loop ``lp`` may take the in-bound range: it feeds only this binding (not the
    predicate or another iter var), is not bound to a thread (the launch shape stays), and
    runs over the whole in-bound range."""
    uses = sum(lp.loop_var in collect_vars(v) for v in realize.iter_values)
    if uses != 1 or lp.loop_var in collect_vars(realize.predicate):
        return False
    if lp.kind is ForKind.THREAD_BINDING:
        return False
    return bool(ana.can_prove(lp.min <= lo) and ana.can_prove(lo + ext <= lp.min + lp.extent))


def _fresh_block(func: PrimFunc, base: str) -> str:
    names = set(tree.block_names(func))
    name, k = base, 1
    while name in names:
        name, k = f"{base}_{k}", k + 1
    return name


def can_decompose_padding(func: PrimFunc, block: str, loop_var: Var) -> bool:
    """Whether ``decompose_padding`` applies (TVM's ``can_decompose_padding``)."""
    try:
        decompose_padding(func, block, loop_var)
    except ScheduleError:
        return False
    return True
