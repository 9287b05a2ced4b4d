"""``pad``: pad an einsum block's iteration space to multiples of given factors.

pad_einsum semantics (issue 3): every block iter var's extent is rounded up to a multiple of
its factor; inputs whose shape grows are read through padded copies (``A_pad``) filled with
the reduction identity outside the real extent, and an output whose shape grows is computed
into a padded buffer (``C_pad``) that a write-back block copies to the real output.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import attrs

from loopir.errors import ScheduleError
from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer, Range
from loopir.ir.expr import (
    Add,
    BufferLoad,
    Cast,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    PrimExpr,
    Var,
    make_const,
)
from loopir.ir.functor import collect_vars, post_order_visit
from loopir.ir.stmt import (
    Block,
    BlockRealize,
    BufferStore,
    For,
    IfThenElse,
    IterKind,
    IterVar,
    PrimFunc,
    Stmt,
    seq,
)
from loopir.schedule import region as rg
from loopir.schedule import tree

if TYPE_CHECKING:
    from loopir.arith import Analyzer

logger = logging.getLogger(__name__)

PRIM = "pad"


def _fail(msg: str, func: PrimFunc, node: object = None) -> ScheduleError:
    return ScheduleError(msg, primitive=PRIM, func=func, node=node)


def _factors_of(func: PrimFunc, blk: Block, factors: Sequence[int]) -> list[int]:
    if isinstance(factors, (str, bytes)) or not isinstance(factors, Sequence):
        raise _fail(f"factors must be a list of positive ints, got {factors!r}", func, blk)
    out = []
    for f in factors:
        if isinstance(f, bool) or not isinstance(f, int) or f < 1:
            raise _fail(f"padding factor {f!r} is not a positive int", func, blk)
        out.append(f)
    if len(out) != len(blk.iter_vars):
        raise _fail(
            f"block {blk.name!r} has {len(blk.iter_vars)} iter vars "
            f"({', '.join(iv.var.name for iv in blk.iter_vars)}) but {len(out)} factors were "
            "given",
            func,
            blk,
        )
    return out


def _product_leaves(e: PrimExpr) -> list[PrimExpr] | None:
    """The factors of a product of (cast) loads and constants, or None for another shape."""
    while isinstance(e, Cast):
        e = e.value
    if isinstance(e, Mul):
        a, b = _product_leaves(e.a), _product_leaves(e.b)
        return None if a is None or b is None else a + b
    if isinstance(e, (BufferLoad, IntImm, FloatImm)):
        return [e]
    return None


def pad(func: PrimFunc, block: str, factors: Sequence[int]) -> PrimFunc:
    """Pad ``block``'s iteration domain to multiples of ``factors``.

    The block is a spatial einsum ``Y[v] = f(X[v'], ...)`` (a cache copy, an elementwise op;
    as in TVM) or a single-reduction einsum: ``C[s] = C[s] + prod(loads)`` (sum) or
    ``C[s] = max/min(C[s], load)``, every access index a block iter var, every accessed
    dimension spanning its iter var's whole extent, and any other writer of its output
    running after it, outside its loops. Padding is correct because padded input elements hold the reduction identity (0
    for sum: one zero factor zeroes the product; -inf / +inf for max / min), so padded
    reduction points contribute nothing, and padded output points are never copied back.

    As TVM's pad_einsum, a loop grows with its iter var only where it binds it one to one
    (its variable is the whole binding, it runs over the whole domain, and no other block is
    under it); split, fused, compute_at-offset or shared loops stay as they are, with their
    predicate, and visit only the real points. The copies sit right around the block's own
    loops (inside loops it shares with other blocks, so that they see what those blocks
    produced in the same iteration).

    Parameters
    ----------
    func
        The function.
    block
        Name of the einsum block.
    factors
        One positive int per block iter var (in iter var order).

    Returns
    -------
    PrimFunc
        The padded function (unchanged when every extent is already a multiple).

    Raises
    ------
    ScheduleError
        When the block is not an einsum of that form, or the factors do not match.

    Examples
    --------
    Before (``M = 127``)::

        for i, j, k in grid(127, 128, 64):
            with block("C"):
                with init(): C[vi, vj] = 0.0
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    After ``pad(func, "C", [32, 32, 8])``::

        for ax0, ax1 in grid(128, 64):
            with block("A_pad"):
                if v0 < 127: A_pad[v0, v1] = A[v0, v1]
                else: A_pad[v0, v1] = 0.0
        for i, j, k in grid(128, 128, 64):
            with block("C"):
                with init(): C_pad[vi, vj] = 0.0
                C_pad[vi, vj] = C_pad[vi, vj] + A_pad[vi, vk] * B[vk, vj]
        for ax0, ax1 in grid(127, 128):
            with block("C_pad"): C[v0, v1] = C_pad[v0, v1]
    """
    realize, anc = rg.get_block(func, block, PRIM)
    blk = realize.block
    facs = _factors_of(func, blk, factors)
    rg.root_block(func, PRIM)
    body = blk.body
    if not isinstance(body, BufferStore):
        raise _fail(f"block {block!r} must have a single BufferStore body", func, blk)
    out_buf = body.buffer
    if len(blk.writes) != 1 or (blk.init is not None and getattr(blk.init, "buffer", None) is not out_buf):
        raise _fail(f"block {block!r} must write exactly one buffer", func, blk)
    if blk.init is None:
        leaves, identity = _spatial_leaves(func, blk, body), make_const(0, out_buf.dtype)
    else:
        if not isinstance(blk.init, BufferStore):
            raise _fail(f"block {block!r} is not a reduction block with a single init store", func, blk)
        leaves, identity = _reduction_leaves(func, blk, body)
    loads = [x for x in leaves if isinstance(x, BufferLoad)]
    # --- indices are iter vars spanning whole buffer dimensions ---------------------------
    ivs = {iv.var: iv for iv in blk.iter_vars}
    ana = rg.make_analyzer()
    for acc in [*loads, body]:
        assert isinstance(acc, (BufferLoad, BufferStore))
        for d, e in enumerate(acc.indices):
            if not (isinstance(e, Var) and e in ivs):
                raise _fail(
                    f"block {block!r} is not an einsum: {acc.buffer.name} is indexed by {e} at "
                    f"dimension {d}, not by a block iter var",
                    func,
                    blk,
                )
            dom = ivs[e].dom
            if not (
                ana.can_prove_equal(dom.min, 0) and ana.can_prove_equal(dom.extent, acc.buffer.shape[d])
            ):
                raise _fail(
                    f"block {block!r}: {acc.buffer.name} dimension {d} (extent "
                    f"{acc.buffer.shape[d]}) is not spanned by iter var {e} (domain {dom})",
                    func,
                    blk,
                )
    # --- the loops that grow with their iter var ----------------------------------------
    top = rg.highest_own_stmt(realize, anc)
    loop_of = _grown_loops(blk, realize, _own_loops(top, realize), ana)
    _check_other_writers(func, realize, top, out_buf)
    # every padded reduction var must index at least one (identity-padded) factor
    padded: dict[Var, PrimExpr] = {}
    for iv, f in zip(blk.iter_vars, facs):
        new_ext = ana.simplify((iv.dom.extent + (f - 1)) // f * f)
        if not ana.can_prove_equal(new_ext, iv.dom.extent):
            padded[iv.var] = new_ext
    for v in padded:
        if ivs[v].kind is IterKind.REDUCE and not any(
            any(e is v for e in ld.indices) for ld in loads
        ):
            raise _fail(
                f"block {block!r}: reduction iter var {v.name} indexes none of the loads, so "
                "padding it would add terms to the reduction",
                func,
                blk,
            )
        if ivs[v].kind is IterKind.SPATIAL and not any(e is v for e in body.indices):
            raise _fail(
                f"block {block!r}: spatial iter var {v.name} does not index the output "
                f"{out_buf.name}, so its padded points would write (or accumulate into) the "
                "real output elements",
                func,
                blk,
            )
    if not padded:
        logger.debug("pad %s: extents already multiples of %s", block, facs)
        return func

    def new_shape(acc_indices: Sequence[PrimExpr]) -> tuple[PrimExpr, ...]:
        # Every access index was checked above to be one of the block's iter vars.
        index_vars = [cast(Var, e) for e in acc_indices]
        return tuple(padded.get(v, ivs[v].dom.extent) for v in index_vars)

    taken: set[str] = set()
    mapping: dict[Buffer, Buffer] = {}
    pre: list[Stmt] = []
    post: list[Stmt] = []
    new_bufs: list[Buffer] = []
    accesses: list[BufferLoad | BufferStore] = [*loads, body]
    for acc in accesses:
        buf = acc.buffer
        if buf in mapping or not any(e in padded for e in acc.indices):
            continue
        name = tree.fresh_name(func, f"{buf.name}_pad", taken)
        taken.add(name)
        pbuf = Buffer(name, new_shape(acc.indices), buf.dtype, buf.scope)
        mapping[buf] = pbuf
        new_bufs.append(pbuf)
        if buf is out_buf:
            post.append(_copy(name, pbuf, buf, buf.shape, None, identity))
        else:
            grown = [e in padded for e in acc.indices]
            # A spatial block's padded points are never written back: any fill works, 0 of the
            # input's own dtype keeps the copy well-typed.
            # The identity in the input's own dtype (an fp16 operand of an fp32 sum holds an
            # fp16 zero).
            fill = _as_dtype(identity, buf.dtype) if blk.init is not None else make_const(0, buf.dtype)
            pre.append(_copy(name, buf, pbuf, pbuf.shape, (buf.shape, grown), fill))
    redirect = rg.BufferRedirect(mapping)
    new_ivars = tuple(
        attrs.evolve(iv, dom=Range(iv.dom.min, padded[iv.var])) if iv.var in padded else iv
        for iv in blk.iter_vars
    )
    new_blk = attrs.evolve(redirect.visit(blk), iter_vars=new_ivars)
    new_top = _rebuild(top, realize, attrs.evolve(realize, block=new_blk), padded, loop_of)
    out = tree.replace(func, top, seq(*pre, new_top, *post))
    out = rg.with_root_alloc(out, new_bufs, PRIM)
    for b in new_bufs:
        rg.check_order(out, b.name, PRIM, node=blk, shown=func)
    logger.debug("pad %s by %s: padded %s", block, facs, [b.name for b in new_bufs])
    return out


def _spatial_leaves(func: PrimFunc, blk: Block, body: BufferStore) -> list[PrimExpr]:
    """The loads of a spatial einsum ``Y[v] = f(X[v'], ...)`` (a cache copy, an elementwise op).

    Any ``f`` is fine (TVM's pad_einsum takes spatial blocks too): a real output point reads
    only real input points, and the padded points, computed from the zero-filled copies, are
    never written back. Refused: reading the output (no einsum), and an integer division or
    modulo by a loaded value, which the zero fill would turn into a division by zero.
    """
    loads: list[PrimExpr] = []
    post_order_visit(body.value, lambda n: loads.append(n) if isinstance(n, BufferLoad) else None)
    for ld in loads:
        if ld.buffer is body.buffer:  # type: ignore[attr-defined]
            raise _fail(
                f"block {blk.name!r} reads the buffer {body.buffer.name} it writes; it is not an "
                "einsum",
                func,
                blk,
            )
    divs: list[PrimExpr] = []
    post_order_visit(
        body.value,
        lambda n: divs.append(n) if isinstance(n, (Div, FloorDiv, FloorMod)) and not dt.is_float(n.dtype) else None,
    )
    for d in divs:
        held: list[PrimExpr] = []
        post_order_visit(d.b, lambda n, acc=held: acc.append(n) if isinstance(n, BufferLoad) else None)  # type: ignore[attr-defined, misc]
        if held:
            raise _fail(
                f"block {blk.name!r} divides by the loaded value {d.b}; padding fills inputs "  # type: ignore[attr-defined]
                "with zeros, so a padded point would divide by zero",
                func,
                blk,
            )
    return loads


def _reduction_leaves(func: PrimFunc, blk: Block, body: BufferStore) -> tuple[list[PrimExpr], PrimExpr]:
    """The factors of an einsum reduction's update and the identity its padding holds."""
    block, out_buf = blk.name, body.buffer
    val = body.value
    lhs: PrimExpr | None
    rhs: PrimExpr | None
    if isinstance(val, (Add, Max, Min)):
        lhs, rhs = val.a, val.b
        if not (isinstance(lhs, BufferLoad) and lhs.buffer is out_buf):
            lhs, rhs = rhs, lhs
    else:
        lhs = rhs = None
    if not (
        isinstance(lhs, BufferLoad)
        and lhs.buffer is out_buf
        and all(a is b for a, b in zip(lhs.indices, body.indices))
    ):
        raise _fail(
            f"block {block!r} is not an einsum reduction: expected {out_buf.name}[...] = "
            f"{out_buf.name}[...] + f(...) (or max/min), got {val}",
            func,
            blk,
        )
    assert rhs is not None
    leaves = _product_leaves(rhs)
    if isinstance(val, Add):
        identity = make_const(0, out_buf.dtype)
        if leaves is None:
            raise _fail(
                f"block {block!r}: the summand {rhs} is not a product of loads; padding with "
                "zeros would change the result",
                func,
                blk,
            )
    else:
        ident = dt.min_value(out_buf.dtype) if isinstance(val, Max) else dt.max_value(out_buf.dtype)
        identity = make_const(ident, out_buf.dtype)
        inner = rhs
        while isinstance(inner, Cast):
            inner = inner.value
        if not isinstance(inner, BufferLoad):
            raise _fail(
                f"block {block!r}: a max/min reduction can only be padded over a single load, "
                f"got {rhs}",
                func,
                blk,
            )
        leaves = [inner]
    return leaves, identity


def _grown_loops(
    blk: Block, realize: BlockRealize, own_loops: list[For], ana: Analyzer
) -> dict[Var, For]:
    """The loops that grow with their iter var (as TVM's pad_einsum): per iter var, the loop
    of the block's own nest (no other block under it) whose variable is the iter var's whole
    binding, running from 0 over the iter var's domain, and used by no other binding nor the
    predicate.

    The other iter vars keep their loops (split, fused, shared with other blocks, offset by
    compute_at, constant): the loops then visit only the real points. That is right as well:
    padded output points are never copied back, and a padded reduction point would add only
    the identity.
    """
    used: Counter[Var] = Counter()
    for e in (*realize.iter_values, realize.predicate):
        used.update(set(collect_vars(e)))
    out: dict[Var, For] = {}
    for iv, v in zip(blk.iter_vars, realize.iter_values):
        lp = next((x for x in own_loops if x.loop_var is v), None)
        # used once: in this binding alone (the predicate counts too)
        if lp is not None and used[lp.loop_var] == 1 and (
            ana.can_prove_equal(lp.min, 0) and ana.can_prove_equal(lp.extent, iv.dom.extent)
        ):
            out[iv.var] = lp
    return out


def _check_other_writers(
    func: PrimFunc, realize: BlockRealize, top: Stmt, out_buf: Buffer
) -> None:
    """Refuse a block whose output another block also writes, unless the write-back cannot
    overwrite that block's elements: the block's nest runs once (at the root) and every other
    writer runs after it (a decomposed init and its update). Otherwise the write-back, which
    copies the whole padded buffer, would copy over what the other block wrote (a decomposed
    init under a loop it shares with its update, or the in-bound part of a decomposed
    padding that leaves the border to a fill)."""
    others = [
        r.block.name for r in rg.leaf_blocks(func)
        if r is not realize and rg.writes_buffer(r.block, out_buf)
    ]  # fmt: skip
    if not others:
        return
    root = rg.root_block(func, PRIM)
    kids = rg.body_children(root.body)
    at = next((i for i, k in enumerate(kids) if k is top), None)
    before = [
        n for n in others
        if at is None or any(rg.contains_block(k, {n}) for k in kids[: at + 1])
    ]  # fmt: skip
    if before or rg.is_param(func, out_buf):
        name = (before or others)[0]
        raise _fail(
            f"block {realize.block.name!r} is not the only writer of {out_buf.name} (block "
            f"{name!r} writes it too, "
            + ("before it or in a loop they share" if before else "and it is a parameter")
            + "); the write-back of the padded buffer would overwrite what that block writes",
            func,
            realize.block,
        )


def _own_loops(top: object, realize: BlockRealize) -> list[For]:
    out = []
    node = top
    while node is not realize:
        assert isinstance(node, For)
        out.append(node)
        node = node.body
    return out


def _rebuild(
    node: Stmt, realize: BlockRealize, new_realize: BlockRealize,
    padded: dict[Var, PrimExpr], loop_of: dict[Var, For],
) -> Stmt:
    if node is realize:
        return new_realize
    assert isinstance(node, For)
    ext = node.extent
    for v, lp in loop_of.items():
        if lp is node and v in padded:
            ext = padded[v]
    return attrs.evolve(node, extent=ext, body=_rebuild(node.body, realize, new_realize, padded, loop_of))


def _as_dtype(value: PrimExpr, dtype: str) -> PrimExpr:
    """The constant ``value`` as a ``dtype`` constant (a Cast of anything else)."""
    if value.dtype == dtype:
        return value
    if isinstance(value, (IntImm, FloatImm)):
        return make_const(value.value, dtype)
    return Cast(dtype, value)


def _copy(
    name: str, src: Buffer, dst: Buffer, extents: Sequence[PrimExpr],
    real: tuple[Sequence[PrimExpr], Sequence[bool]] | None, identity: PrimExpr,
) -> Stmt:
    """Copy block over ``extents``; with ``real`` = (shape, grown dims), points beyond the
    real shape in a grown dimension get ``identity``."""
    loops = [Var(f"ax{d}") for d in range(len(extents))]
    ivars = [Var(f"v{d}") for d in range(len(extents))]
    store = BufferStore(dst, src[tuple(ivars)], tuple(ivars))
    body: Stmt = store
    if real is not None:
        shape, grown = real
        conds = [v < r for v, r, g in zip(ivars, shape, grown) if g]
        body = IfThenElse(
            rg.conjunction(conds), store, BufferStore(dst, identity, tuple(ivars))
        )
    blk = Block(
        name,
        tuple(IterVar(v, Range.from_extent(e), IterKind.SPATIAL) for v, e in zip(ivars, extents)),
        (rg.point_region(src, ivars),),
        (rg.point_region(dst, ivars),),
        body,
    )
    realize = BlockRealize(tuple(loops), IntImm(1, "bool"), blk)
    return rg.make_loop_nest(list(zip(loops, extents)), realize)
