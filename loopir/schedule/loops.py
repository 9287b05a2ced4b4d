"""Loop primitives as pure functions on PrimFunc: split, fuse, reorder, bind, vectorize,
unroll, parallel.

Loops are named by their loop Var. Every function checks its preconditions and raises
:class:`~loopir.errors.ScheduleError` (primitive name, offending value, IR with the offending
node marked) without building anything when they fail. Semantics follow TVM's TensorIR
schedule; where TVM leaves a case to later passes, these refuse it early and say why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs

from loopir.errors import ScheduleError
from loopir.ir import verifier_limits as limits
from loopir.ir.buffer import Range
from loopir.ir.expr import IntImm, PrimExpr, Var
from loopir.ir.functor import collect_vars, substitute
from loopir.ir.reducer import match_reducer
from loopir.ir.stmt import THREAD_TAGS, BlockRealize, For, ForKind, IterKind, PrimFunc, Stmt
from loopir.schedule import tree
from loopir.schedule.cross_thread_consumers import check_no_new_conflict


def _loop(func: PrimFunc, loop_var: Any, primitive: str) -> tuple[For, tuple[Stmt, ...]]:
    if not isinstance(loop_var, Var):
        raise ScheduleError(f"expected a loop Var, got {loop_var!r}", primitive=primitive)
    hit = tree.find_loop(func, loop_var)
    if hit is None:
        raise ScheduleError(
            f"loop {loop_var.name} is not in the function", primitive=primitive, func=func
        )
    return hit


def _require_unbound(func: PrimFunc, loop: For, primitive: str) -> None:
    """Refuse a thread-bound loop for split/fuse (TVM's HasAnnotationOrThreadBindingError too).

    A vectorized, unrolled or parallel loop is accepted and its new loops are serial, as in
    TVM: the kind is a hint that does not change the sequential meaning. A binding is kept
    refused because it fixes the kernel's launch shape, which the new loops would not have.
    """
    if loop.kind is ForKind.THREAD_BINDING:
        raise ScheduleError(
            f"loop {loop.loop_var.name} is bound to {loop.thread_tag}; {primitive} needs an "
            f"unbound loop (as in TVM: the binding fixes the launch shape; apply {primitive} "
            "before binding the loop)",
            primitive=primitive,
            func=func,
            node=loop,
        )


def _same_loop_in(func: PrimFunc, loop: For) -> For:
    """The loop of ``func`` with ``loop``'s var (to mark it in the unchanged function)."""
    hit = tree.find_loop(func, loop.loop_var)
    return loop if hit is None else hit[0]


def _const(e: PrimExpr) -> int | None:
    return int(e.value) if isinstance(e, IntImm) else None


# --------------------------------------------------------------------------------------------
# split
# --------------------------------------------------------------------------------------------


def split(
    func: PrimFunc, loop_var: Var, factors: Sequence[int | None], disable_predication: bool = False
) -> tuple[PrimFunc, list[Var]]:
    """Split a loop into nested loops of the given extents (outermost first).

    The loop must not be thread-bound (as in TVM); a vectorized, unrolled or parallel loop is
    split into serial loops. At most one factor may be None; it is inferred as ``ceildiv(extent, product of others)``.
    The product of the factors must be at least the extent. When it is larger (an inexact
    split) the outermost blocks below get the predicate ``fused < extent`` (conjoined with
    their existing one), so every original iteration runs exactly once. Block bindings are
    rewritten to the new loop vars and simplified.

    Before / after ``split(i, [None, 32])`` on ``for i in range(100)``::

        for i in T.serial(100):              for i_0 in T.serial(4):
            with T.block("B"):                   for i_1 in T.serial(32):
                v_i = T.axis.spatial(100, i)         with T.block("B"):
                ...                                      v_i = T.axis.spatial(100, i_0 * 32 + i_1)
                                                         T.where(i_0 * 32 + i_1 < 100)

    With ``disable_predication`` (TVM's flag) no predicate is added: the caller asserts that
    the factors' product divides a symbolic extent the analyzer cannot prove it divides (e.g.
    ``n`` known to be a multiple of 32). A split that is provably inexact (constant extent
    and factors) is then refused: the extra iterations would read and write past the
    iteration domain. With a symbolic extent that is not in fact a multiple, the result is
    wrong, as in TVM.

    Returns
    -------
    (PrimFunc, list of Var)
        The new function and the new loop vars, outermost first (named ``i_0``, ``i_1``...).
    """
    P = "split"
    if not isinstance(disable_predication, bool):
        raise ScheduleError(
            f"disable_predication must be a bool, got {disable_predication!r}",
            primitive=P, func=func,
        )  # fmt: skip
    loop, anc = _loop(func, loop_var, P)
    if isinstance(factors, (str, bytes)) or not isinstance(factors, Sequence) or len(factors) == 0:
        raise ScheduleError(
            f"factors must be a non-empty list of ints (at most one None), got {factors!r}",
            primitive=P, func=func, node=loop,
        )  # fmt: skip
    nones = [k for k, f in enumerate(factors) if f is None]
    if len(nones) > 1:
        raise ScheduleError(
            f"at most one factor may be None (inferred), got {list(factors)!r}",
            primitive=P, func=func, node=loop,
        )  # fmt: skip
    for f in factors:
        if f is not None and (isinstance(f, bool) or not isinstance(f, int) or f <= 0):
            raise ScheduleError(
                f"factors must be positive ints or None, got {f!r} in {list(factors)!r}",
                primitive=P, func=func, node=loop,
            )  # fmt: skip
    _require_unbound(func, loop, P)
    dtype = loop_var.dtype
    extent = loop.extent
    ranges = tree.loop_ranges(anc)
    known = math.prod(f for f in factors if f is not None)
    exprs: list[PrimExpr] = []
    if nones:
        const_ext = _const(extent)
        inferred: PrimExpr = (
            IntImm(-(-const_ext // known), dtype) if const_ext is not None
            else tree.simplify((extent + (known - 1)) // known, ranges)
        )  # fmt: skip
        exprs = [inferred if f is None else IntImm(f, dtype) for f in factors]
    else:
        exprs = [IntImm(f, dtype) for f in factors if f is not None]  # no None here: nones is empty
        if not tree.can_prove(IntImm(known, dtype) >= extent, ranges):
            relation = "smaller than" if _const(extent) is not None else "not provably at least"
            raise ScheduleError(
                f"the product of factors {list(factors)!r} is {known}, {relation} the extent "
                f"{extent} of loop {loop_var.name} (it would drop iterations)",
                primitive=P, func=func, node=loop,
            )  # fmt: skip
    new_vars = [Var(f"{loop_var.name}_{k}", dtype) for k in range(len(factors))]
    fused: PrimExpr = new_vars[0]
    for v, size in zip(new_vars[1:], exprs[1:]):
        fused = fused * size + v
    value = fused if _const(loop.min) == 0 else loop.min + fused
    body = substitute(loop.body, {loop_var: value})
    inner_ranges = dict(ranges)
    for v, size in zip(new_vars, exprs):
        inner_ranges[v] = Range(IntImm(0, dtype), size)
    guard = fused < extent
    consts = [_const(f) for f in exprs]
    const_ext = _const(extent)
    if const_ext is not None and all(c is not None for c in consts):
        exact = math.prod(c for c in consts if c is not None) == const_ext  # all are not None
    else:
        exact = tree.can_prove(guard, inner_ranges)
    if not exact and disable_predication:
        if const_ext is not None and all(c is not None for c in consts):
            product = math.prod(c for c in consts if c is not None)
            raise ScheduleError(
                f"disable_predication=True, but the factors {consts!r} (product {product}) do "
                f"not split the extent {const_ext} of loop {loop_var.name} exactly; without the predicate the extra iterations would "
                "run past the iteration domain (leave predication on, or choose factors "
                "whose product is the extent)",
                primitive=P, func=func, node=loop,
            )  # fmt: skip
    elif not exact:
        # Inexact split: keep every original iteration exactly once.
        body = tree.append_predicate(body, guard)
    nest: Stmt = body
    for v, size in reversed(list(zip(new_vars, exprs))):
        nest = For(v, IntImm(0, dtype), size, ForKind.SERIAL, nest)
    nest = tree.simplify_bindings(nest, ranges)
    return tree.replace(func, loop, nest), new_vars


# --------------------------------------------------------------------------------------------
# fuse
# --------------------------------------------------------------------------------------------


def fuse(func: PrimFunc, loop_vars: Sequence[Var]) -> tuple[PrimFunc, Var]:
    """Fuse a chain of perfectly nested loops (outermost first) into one loop.

    Each loop's body must be exactly the next loop, and none may be thread-bound (vectorized,
    unrolled or parallel loops are fused into a serial loop, as in TVM). The fused loop ``f``
    (named ``i_j_fused``) has the product extent; the old loop vars become ``f // n`` and
    ``f % n`` (mixed radix for more loops) in the block bindings, simplified.

    As in TVM, a loop feeding a block's spatial iter var may be fused with one feeding its
    reduce iter var: the fused loop runs the same iterations in the same order, so each
    reduction still starts at its init. Such a loop is a reduction loop for ``bind``,
    ``vectorize`` and ``parallel`` (refused there).

    Before / after ``fuse(i, j)``::

        for i in T.serial(4):                for i_j_fused in T.serial(32):
            for j in T.serial(8):                with T.block("B"):
                with T.block("B"):                   v_i = T.axis.spatial(4, i_j_fused // 8)
                    v_i = T.axis.spatial(4, i)       v_j = T.axis.spatial(8, i_j_fused % 8)
                    v_j = T.axis.spatial(8, j)

    Returns
    -------
    (PrimFunc, Var)
        The new function and the fused loop var.
    """
    P = "fuse"
    if len(loop_vars) == 0:
        raise ScheduleError("needs at least one loop", primitive=P)
    found = [_loop(func, v, P) for v in loop_vars]
    loops = [f for f, _ in found]
    seen: set[Var] = set()
    for lp in loops:
        if lp.loop_var in seen:
            raise ScheduleError(
                f"loop {lp.loop_var.name} is given twice", primitive=P, func=func, node=lp
            )
        seen.add(lp.loop_var)
    for lp in loops:
        _require_unbound(func, lp, P)
    for outer, inner in zip(loops, loops[1:]):
        if outer.body is not inner:
            raise ScheduleError(
                f"loops {outer.loop_var.name} and {inner.loop_var.name} are not adjacent: the "
                f"body of {outer.loop_var.name} must be exactly the loop {inner.loop_var.name} "
                "(fuse takes perfectly nested loops, outermost first)",
                primitive=P, func=func, node=inner,
            )  # fmt: skip
    outer_vars = set(seen)
    for lp in loops:
        if any(v in outer_vars for v in collect_vars(lp.min) + collect_vars(lp.extent)):
            raise ScheduleError(
                f"the range of loop {lp.loop_var.name} depends on another fused loop",
                primitive=P, func=func, node=lp,
            )  # fmt: skip
    top, anc = found[0]
    ranges = tree.loop_ranges(anc)
    dtype = top.loop_var.dtype
    fvar = Var("_".join(lp.loop_var.name for lp in loops) + "_fused", dtype)
    extent: PrimExpr = loops[0].extent
    for lp in loops[1:]:
        extent = extent * lp.extent
    extent = tree.simplify(extent, ranges)
    vmap: dict[Var, PrimExpr] = {}
    stride: PrimExpr = IntImm(1, dtype)
    n = len(loops)
    for k in range(n - 1, -1, -1):
        lp = loops[k]
        q: PrimExpr = fvar if k == n - 1 else fvar // stride
        if k > 0:  # the outermost needs no modulo: f // stride < its extent
            q = q % lp.extent
        vmap[lp.loop_var] = q if _const(lp.min) == 0 else lp.min + q
        stride = tree.simplify(stride * lp.extent, ranges)
    body = substitute(loops[-1].body, vmap)
    nest: Stmt = For(fvar, IntImm(0, dtype), extent, ForKind.SERIAL, body)
    nest = tree.simplify_bindings(nest, ranges)
    return tree.replace(func, top, nest), fvar


# --------------------------------------------------------------------------------------------
# reorder
# --------------------------------------------------------------------------------------------


def reorder(func: PrimFunc, loop_vars: Sequence[Var]) -> PrimFunc:
    """Reorder loops of one chain into the given order (outermost first).

    As in TVM, the loops must lie on one path (each an ancestor of the next deeper one) with
    nothing but single loops between the outermost and innermost of them; loops on that path
    that are not listed keep their positions. Loop headers move; bodies and bindings do not
    change.

    Before / after ``reorder(k, i)`` on ``for i: for j: for k: B``::

        for i in T.serial(4):           for k in T.serial(2):
            for j in T.serial(8):           for j in T.serial(8):
                for k in T.serial(2):           for i in T.serial(4):
                    B                               B
    """
    P = "reorder"
    if len(loop_vars) == 0:
        raise ScheduleError("needs at least one loop", primitive=P)
    found = [_loop(func, v, P) for v in loop_vars]
    seen: set[Var] = set()
    for lp, _ in found:
        if lp.loop_var in seen:
            raise ScheduleError(
                f"loop {lp.loop_var.name} is given twice", primitive=P, func=func, node=lp
            )
        seen.add(lp.loop_var)
    by_depth = sorted(found, key=lambda fa: len(fa[1]))
    for (outer, _), (inner, inner_anc) in zip(by_depth, by_depth[1:]):
        if not any(a is outer for a in inner_anc):
            raise ScheduleError(
                f"loops {_with_blocks(outer)} and {_with_blocks(inner)} are not in one chain "
                "(neither is nested in the other); reorder takes loops of one loop nest",
                primitive=P, func=func, node=inner,
            )  # fmt: skip
    top, top_anc = by_depth[0]
    bottom, bottom_anc = by_depth[-1]
    path: list[For] = [top]
    for node in bottom_anc[len(top_anc) + 1:]:
        if not isinstance(node, For):
            raise ScheduleError(
                f"loop {path[-1].loop_var.name} reaches loop {bottom.loop_var.name} through a "
                f"{type(node).__name__}, not through loops only; reorder needs a single-branch "
                "chain of loops",
                primitive=P, func=func, node=path[-1],
            )  # fmt: skip
        path.append(node)
    if bottom is not top:
        path.append(bottom)
    for outer, inner in zip(path, path[1:]):
        if outer.body is not inner:
            raise ScheduleError(
                f"loop {outer.loop_var.name} has statements besides loop {inner.loop_var.name}; "
                "reorder needs a single-branch chain of loops",
                primitive=P, func=func, node=outer,
            )  # fmt: skip
    _check_no_mixed_reorder(func, path, bottom)
    listed = {lp.loop_var for lp, _ in found}
    order = iter([lp for lp, _ in found])
    new_headers = [next(order) if lp.loop_var in listed else lp for lp in path]
    # A loop's range may only use loop vars that stay outside it.
    outside: set[Var] = set()
    for lp in new_headers:
        used = set(collect_vars(lp.min)) | set(collect_vars(lp.extent))
        inner_path = {p.loop_var for p in path} - outside
        bad = [v for v in used if v in inner_path]
        if bad:
            raise ScheduleError(
                f"the range of loop {lp.loop_var.name} uses {bad[0].name}, which the new order "
                "would place inside it",
                primitive=P, func=func, node=lp,
            )  # fmt: skip
        outside.add(lp.loop_var)
    nest: Stmt = bottom.body
    for lp in reversed(new_headers):
        nest = attrs.evolve(lp, body=nest)
    return tree.replace(func, top, nest)


def _with_blocks(loop: For) -> str:
    """``i (of block 'C')``: a loop named with the blocks below it (loop names repeat across
    blocks)."""
    names = [r.block.name for r in tree.child_blocks(loop)]
    if not names:
        return loop.loop_var.name
    label = "block" if len(names) == 1 else "blocks"
    return f"{loop.loop_var.name} (of {label} {', '.join(map(repr, names))})"


def _check_no_mixed_reorder(func: PrimFunc, path: list[For], bottom: For) -> None:
    """Refuse to reorder a chain holding a loop that feeds both a spatial and a reduce iter var
    of a block that still has its ``init`` (a loop made by fusing a spatial with a reduce loop).

    The init of a reduction runs where its reduce iter vars are at their minimum, which is only
    the first iteration of each output point when the point's iterations run in reduce order.
    ``fuse`` keeps that order; a reorder of the chain may not (split the fused loop, reorder the
    parts: a later iteration re-initializes the point and drops the earlier ones; found by
    running it). TVM's reorder does not check this. After ``decompose_reduction`` the order no
    longer matters.
    """
    chain = {lp.loop_var for lp in path}
    for node, _ in tree.walk(bottom.body):
        if not isinstance(node, BlockRealize) or node.block.init is None:
            continue
        users: dict[IterKind, dict[Var, str]] = {IterKind.SPATIAL: {}, IterKind.REDUCE: {}}
        for iv, value in zip(node.block.iter_vars, node.iter_values):
            for v in collect_vars(value):
                if v in chain:
                    users.setdefault(iv.kind, {}).setdefault(v, iv.var.name)
        for v, sv in users[IterKind.SPATIAL].items():
            rv = users[IterKind.REDUCE].get(v)
            if rv is None:
                continue
            raise ScheduleError(
                f"loop {v.name} feeds both spatial iter var {sv} and reduce iter var {rv} of "
                f"block {node.block.name!r}; reordering its chain could run a reduction step of "
                "a point before that point's init, which would then discard it (TVM's reorder "
                "does not check this); reorder before fusing, or decompose_reduction first",
                primitive="reorder", func=func, node=next(lp for lp in path if lp.loop_var is v),
            )  # fmt: skip


# --------------------------------------------------------------------------------------------
# bind / vectorize / unroll / parallel
# --------------------------------------------------------------------------------------------


def _check_data_parallel(
    func: PrimFunc, loop: For, primitive: str, what: str, cross_thread: str | None = None
) -> None:
    """Refuse when a block below binds a non-spatial iter var to an expression of the loop.

    Running such a loop in parallel (threads, vector lanes, parallel workers) would race on the
    reduction; TVM's CheckLoopParallelizableInBlock refuses it the same way. With
    ``cross_thread`` (the ``threadIdx.x/y/z`` tag being bound) a loop that feeds only reduce
    iter vars of a sum/max/min reduction block is accepted: LowerCrossThreadReduction combines
    the threads' parts (:mod:`loopir.passes.cross_thread`).
    """
    for node, _ in tree.walk(loop.body):
        if not isinstance(node, BlockRealize):
            continue
        if cross_thread and _cross_thread_ok(func, loop, node, primitive, cross_thread):
            continue
        for iv, value in zip(node.block.iter_vars, node.iter_values):
            if iv.kind is IterKind.SPATIAL:
                continue
            if loop.loop_var in collect_vars(value):
                raise ScheduleError(
                    f"cannot {what} loop {loop.loop_var.name}: block {node.block.name!r} binds its "
                    f"{iv.kind.value} iter var {iv.var.name} to it (a reduction cannot run in "
                    "parallel)",
                    primitive=primitive, func=func, node=loop,
                )  # fmt: skip


def _cross_thread_ok(func: PrimFunc, loop: For, node: BlockRealize, primitive: str, tag: str) -> bool:
    """Whether ``loop`` may run ``node``'s reduction across threads (then lowered by
    LowerCrossThreadReduction); raises when it feeds the reduction in a way that cannot be."""
    fed = {
        iv.kind: iv.var.name for iv, value in zip(node.block.iter_vars, node.iter_values)
        if loop.loop_var in collect_vars(value)
    }  # fmt: skip
    if set(fed) <= {IterKind.SPATIAL}:
        return True  # data parallel for this block
    reduce = next(name for kind, name in fed.items() if kind is not IterKind.SPATIAL)
    if IterKind.SPATIAL in fed:
        raise ScheduleError(
            f"cannot bind loop {loop.loop_var.name} to {tag}: it feeds spatial iter var "
            f"{fed[IterKind.SPATIAL]} and reduce iter var {reduce} of block {node.block.name!r} "
            "(a fused loop); a cross-thread reduction needs a loop of the reduction alone "
            "(split or fuse differently)",
            primitive=primitive, func=func, node=loop,
        )  # fmt: skip
    red = match_reducer(node.block)
    if isinstance(red, str):
        raise ScheduleError(
            f"cannot bind loop {loop.loop_var.name} to {tag} as a cross-thread reduction of "
            f"reduce iter var {reduce}: {red}",
            primitive=primitive, func=func, node=loop,
        )  # fmt: skip
    return True


def bind(func: PrimFunc, loop_var: Var, thread_axis: str) -> PrimFunc:
    """Bind a loop to a thread axis (``blockIdx``/``threadIdx``/``vthread`` ``.x/.y/.z``).

    As in TVM the loop may already be vectorized, unrolled, parallel or bound: the binding
    replaces that kind (binding to the tag it already has changes nothing). Preconditions: a
    valid tag; a constant extent for ``threadIdx``/``vthread`` (``blockIdx`` may be symbolic:
    it is the grid size); no reduction iter var bound to the loop; within one kernel (the
    subtree of the outermost thread-bound loop) every loop with this tag has the same extent;
    and the CUDA launch limits (:mod:`loopir.ir.verifier_limits`): a constant extent at most
    the tag's limit (threadIdx.x/y 1024, threadIdx.z 64, blockIdx.x 2**31 - 1, blockIdx.y/z
    65535) and at most 1024 threads per block over the kernel's threadIdx loops. A reduction
    made cross-thread may not have a block accessing its output among its reduction loops
    (:mod:`loopir.schedule.cross_thread_consumers`).

    Before / after ``bind(i, "threadIdx.x")``::

        for i in T.serial(256):         for i in T.thread_binding(256, thread="threadIdx.x"):
    """
    P = "bind"
    if not isinstance(thread_axis, str) or thread_axis not in THREAD_TAGS:
        raise ScheduleError(
            f"invalid thread tag {thread_axis!r}; expected one of {', '.join(THREAD_TAGS)}",
            primitive=P,
        )
    loop, anc = _loop(func, loop_var, P)
    if loop.kind is ForKind.THREAD_BINDING and loop.thread_tag == thread_axis:
        return func  # already so: a no-op, as in TVM
    if not thread_axis.startswith("blockIdx") and _const(loop.extent) is None:
        raise ScheduleError(
            f"cannot bind loop {loop_var.name} with non-constant extent {loop.extent} to "
            f"{thread_axis}: thread extents must be constants",
            primitive=P, func=func, node=loop,
        )  # fmt: skip
    cross = thread_axis if thread_axis.startswith("threadIdx.") else None
    _check_data_parallel(func, loop, P, f"bind to {thread_axis}", cross_thread=cross)
    _check_tag_limit(func, loop, thread_axis, P)
    new_loop = attrs.evolve(loop, kind=ForKind.THREAD_BINDING, thread_tag=thread_axis)
    new_func = tree.replace(func, loop, new_loop)
    # Same tag, same extent within one kernel: a kernel launches one block/grid shape.
    _, new_anc = tree.find_loop(new_func, loop_var)  # type: ignore[misc]
    kernel: For = new_loop
    for a in new_anc:
        if isinstance(a, For) and a.kind is ForKind.THREAD_BINDING:
            kernel = a
            break
    ranges = tree.loop_ranges(new_anc)
    # Binding an outer loop can also join inner loops bound earlier into one kernel, so every
    # tag of the kernel is checked, not only the new one.
    first: dict[str, For] = {thread_axis: new_loop}
    for node, _ in tree.walk(kernel):
        if not (isinstance(node, For) and node.kind is ForKind.THREAD_BINDING):
            continue
        tag = str(node.thread_tag)
        seen = first.setdefault(tag, node)
        if seen is node or tree.can_prove(node.extent == seen.extent, ranges):
            continue
        new_is_seen = seen.loop_var is loop_var
        other = node if new_is_seen else seen
        this = seen if new_is_seen else node
        raise ScheduleError(
            f"{tag} is already bound with extent {other.extent} (loop {other.loop_var.name}) "
            f"in the same kernel; loop {this.loop_var.name} has extent {this.extent}"
            + ("" if tag == thread_axis else f" (binding {loop_var.name} to {thread_axis} "
               "puts both in one kernel)"),
            primitive=P, func=func, node=_same_loop_in(func, other),
        )  # fmt: skip
    _check_nested_same_tag(func, new_func, kernel, P)
    if cross is not None:
        check_no_new_conflict(func, new_func, P, loop)
    problem = limits.block_threads_problem({t: lp.extent for t, lp in first.items()})
    if problem is not None:
        raise ScheduleError(
            f"cannot bind loop {loop_var.name} to {thread_axis}: {problem}",
            primitive=P, func=func, node=loop,
        )  # fmt: skip
    return new_func


def _check_tag_limit(func: PrimFunc, loop: For, tag: str, prim: str) -> None:
    """Refuse a constant extent over the CUDA limit of ``tag`` (a symbolic grid extent is the
    launch's to check: its value is only known then)."""
    problem = limits.extent_problem(tag, loop.extent)
    if problem is not None:
        raise ScheduleError(
            f"cannot bind loop {loop.loop_var.name} to {tag}: {problem} (split the loop and "
            "bind a part of it)",
            primitive=prim, func=func, node=loop,
        )  # fmt: skip


def _check_nested_same_tag(func: PrimFunc, new_func: PrimFunc, kernel: For, prim: str) -> None:
    """A loop nested in another loop of the same tag becomes the same hardware index.

    That is only sound for work that does not depend on the outer loop (the cooperative fetch
    of semantics.md: sequentially the copy repeats identically per outer iteration, on the GPU
    each thread copies its share). A block under the inner loop whose bindings or predicate use
    the outer loop (its own, or those of a block around it) would see only the diagonal of the
    two loops once lowered, so refuse it.
    """
    for node, anc in tree.walk(kernel):
        if not isinstance(node, BlockRealize):
            continue
        bound = [a for a in anc if isinstance(a, For) and a.kind is ForKind.THREAD_BINDING]
        # a nested block depends on the outer loops through the blocks around it too
        realizes = [node, *(a for a in anc if isinstance(a, BlockRealize))]
        used = {v for r in realizes for e in (*r.iter_values, r.predicate) for v in collect_vars(e)}
        for k, outer in enumerate(bound):
            inner = next((b for b in bound[k + 1:] if b.thread_tag == outer.thread_tag), None)
            if inner is not None and outer.loop_var in used:
                raise ScheduleError(
                    f"loops {outer.loop_var.name} and {inner.loop_var.name} are nested and both "
                    f"bound to {outer.thread_tag}, but block {node.block.name!r} under the inner "
                    f"one depends on the outer one; on the GPU they are one index, so only the "
                    "diagonal would be computed (nest the same tag only around work that does "
                    "not depend on the outer loop, like a cooperative fetch)",
                    primitive=prim, func=func, node=_same_loop_in(func, inner),
                )  # fmt: skip


def _annotate(func: PrimFunc, loop_var: Var, kind: ForKind, primitive: str) -> PrimFunc:
    loop, _ = _loop(func, loop_var, primitive)
    if loop.kind is kind:
        return func
    if kind is ForKind.VECTORIZED:
        ext = _const(loop.extent)
        if ext is None:
            raise ScheduleError(
                f"cannot vectorize loop {loop_var.name} with non-constant extent {loop.extent}",
                primitive=primitive, func=func, node=loop,
            )  # fmt: skip
    if kind in (ForKind.VECTORIZED, ForKind.PARALLEL):
        _check_data_parallel(func, loop, primitive, primitive)
    # As in TVM, the new kind replaces the old one (a binding included): every kind runs the
    # same sequential iterations, so only the checks of the new kind matter.
    return tree.replace(func, loop, attrs.evolve(loop, kind=kind, thread_tag=None))


def vectorize(func: PrimFunc, loop_var: Var) -> PrimFunc:
    """Mark a loop with a constant extent as vectorized (spatial iterations only).

    As in TVM the new kind replaces the loop's current one (serial, unrolled, parallel or a
    thread binding); the same holds for :func:`unroll` and :func:`parallel`.

    Before / after: ``for v in T.serial(4)`` becomes ``for v in T.vectorized(4)``.
    """
    return _annotate(func, loop_var, ForKind.VECTORIZED, "vectorize")


def unroll(func: PrimFunc, loop_var: Var) -> PrimFunc:
    """Mark a loop as unrolled: ``for k in T.serial(4)`` becomes ``T.unroll(4)``."""
    return _annotate(func, loop_var, ForKind.UNROLLED, "unroll")


def parallel(func: PrimFunc, loop_var: Var) -> PrimFunc:
    """Mark a loop parallel (spatial iterations only): ``T.serial`` becomes ``T.parallel``."""
    return _annotate(func, loop_var, ForKind.PARALLEL, "parallel")
