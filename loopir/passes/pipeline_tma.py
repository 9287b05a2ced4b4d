"""TMA copies in a software pipeline: ``loopir.pipeline_tma``.

With the annotation [`TMA_KEY`][loopir.passes.pipeline_tma.TMA_KEY] on a loop that
InjectSoftwarePipeline pipelines, the statements of its async stage are box copies of global
tiles into shared ones (two serial loops, ``S[v, f(r, c)] = G[o0 + r, o1 + c]``, with ``f`` the
identity or the layout a TMA swizzle writes; for a padded operand the value may be
``Select(bounds, G[...], 0)``, TMA filling the zeros) and become one TMA issue per step instead
of ``cp.async`` groups:

* one mbarrier per buffer version, ``<loop>_tma_bar[V]``, initialized (count 1) by thread 0
  before the prologue, then a block barrier;
* the copies of iteration ``j`` (relative to the loop's start) are issued by thread 0:
  ``mbarrier_arrive_expect_tx(bar[j % V], bytes)`` then one ``tma_load`` per copy, the tile
  ``S[j % V, 0, 0]``, the box ``G[o0, o1]`` (zero-filled where it leaves ``G``);
* the wait for what a consumer of iteration ``j`` reads, in place of ``cp.async.wait_group``, is
  ``mbarrier_wait(bar[j % V], j // V % 2)`` by every thread, then the block barrier it had.

Why that parity: the copies of iterations ``j``, ``j + V``, ``j + 2V``, ... complete phases 0,
1, 2, ... of ``bar[j % V]`` (one arrival a phase, thread 0's, in that order), and the wait for
phase ``j // V`` polls its parity. A version is rewritten (phase ``j // V + 1`` started) only by
the copies of iteration ``j + V``, issued after the barrier that follows the wait of iteration
``j + V - d`` (``d``: how far the copies run ahead, less than ``V``), which comes after every
read of iteration ``j``: the pipeline's own order, which the race checker proves
([`loopir.passes.race_tma`][loopir.passes.race_tma]).

The CPU executor runs the copies where they are issued and the mbarrier calls as no-ops, which
is what the statements they replace did (a box copy and TMA's zero fill are the same values).

Example (before / after; the GEMM's A tile, 3 versions, copies one step ahead)::

    for k in T.serial(n):                        if tx == 0: mbarrier_init(bar[0..2], 1)
        for r, c in T.grid(128, 64):             storage_sync()
            A_s[r, sw(r, c)] = A[m + r, k * 64 + c]    if tx == 0:
        compute(A_s)                                 mbarrier_arrive_expect_tx(bar[0], 16384)
                                                     tma_load(A_s[0, 0, 0], A[m, 0], bar[0], (128, 64), 128)
                                                 for k in T.serial(n - 1):
                                                     mbarrier_wait(bar[k % 3], k // 3 % 2)
                                                     storage_sync()
                                                     if tx == 0: ... tma_load(A_s[(k + 1) % 3, 0, 0], ...)
                                                     compute(A_s[k % 3])
                                                 ...
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loopir import arith
from loopir.arith.vectorized import NotEnumerable
from loopir.arith.vectorized import evaluate as _eval
from loopir.errors import PassError
from loopir.ir import dtype as dt
from loopir.ir import op
from loopir.ir import tma as T
from loopir.ir.buffer import Buffer
from loopir.ir.expr import (
    GE,
    LT,
    And,
    BufferLoad,
    Call,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    PrimExpr,
    Select,
    Var,
)
from loopir.ir.functor import collect_vars, post_order_stmts, substitute
from loopir.ir.stmt import BufferStore, Evaluate, For, ForKind, IfThenElse, Stmt, seq
from loopir.tensor_intrin.tma import tile_element

__all__ = ["TMA_KEY", "BoxCopy", "TmaPipeline", "box_copy"]

TMA_KEY = "loopir.pipeline_tma"
"""On a pipelined loop (``software_pipeline_stage`` with one async stage): the async stage's
box copies become TMA copies on one mbarrier per version (module doc)."""

_SWIZZLES = (128, 64, 32, 0)
#: The most iterations of an outer loop of box copies issued as that many boxes.
_MAX_UNROLL = 8


def _const_int(e: PrimExpr) -> int | None:
    """``e``'s value when it is a constant."""
    return e.value if isinstance(e, IntImm) else None


def _simplified(s: Stmt) -> Stmt:
    """``s`` with its expressions simplified (the boxes' origins after unrolling)."""
    from loopir.passes.simplify import simplify_stmt

    return simplify_stmt(s)


def _fail(loop: For, why: str) -> PassError:
    return PassError(f"pass InjectSoftwarePipeline: loop {loop.loop_var.name}: {TMA_KEY}: {why}")


class BoxCopy:
    """A statement that copies one box of a global buffer into a shared tile: the tile's first
    element ``dst``, the box's origin ``src``, its extents and the swizzle of its layout."""

    def __init__(
        self, dst: BufferLoad, src: BufferLoad, box: tuple[int, ...], swizzle: int
    ) -> None:
        self.dst, self.src, self.box, self.swizzle = dst, src, box, swizzle

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.box)) * dt.bits(self.dst.dtype) // 8

    def call(self, bar: PrimExpr) -> Call:
        return T.tma_load(self.dst, self.src, bar, self.box, self.swizzle)


def box_copy(s: Stmt) -> BoxCopy | str:
    """``s`` as a [`BoxCopy`][loopir.passes.pipeline_tma.BoxCopy], or why it is not one.

    ``s`` must be serial loops ``r0, r1, ...`` (no guards, no vectors) around
    ``S[p..., f(r)] = G[o + r]``: ``G`` a global buffer of the rank of the box, ``o`` free of
    the loops, ``S`` shared with its last dimensions the box, ``f`` what a TMA copy with one of
    the swizzles writes (checked at every point of the box: its cost is the box's size, a
    constant). The value may be ``Select(c, G[o + r], 0)`` (a padded operand's fetch) where each
    conjunct of ``c`` is ``o[d] + r[d] < G.shape[d]`` or ``o[d] + r[d] >= 0``: TMA's zero fill
    outside the tensor is then the same value (where ``c`` holds, the copy reads ``G`` in
    bounds, as the program it replaces did)."""
    loops: list[For] = []
    while isinstance(s, For):
        if s.kind is not ForKind.SERIAL or not isinstance(s.min, IntImm) or s.min.value != 0 \
                or not isinstance(s.extent, IntImm):  # fmt: skip
            return f"loop {s.loop_var.name} is not a serial loop from 0 over a constant extent"
        loops.append(s)
        s = s.body
    if not isinstance(s, BufferStore):
        return "the body is not a store"
    value: PrimExpr = s.value
    cond: PrimExpr | None = None
    if isinstance(s.value, Select) and _is_zero(s.value.false_value):
        value, cond = s.value.true_value, s.value.condition
        if isinstance(cond, IntImm) and cond.value:  # a guard proven true (a tile inside the tensor)
            cond = None
    if not isinstance(value, BufferLoad):
        return "the body is not a copy (a store of a load, or of a select of a load and zero)"
    store, load = s, value
    # a source of higher rank than the loops: its leading dimensions are the box's extents of 1
    # (a tile of one (batch, head) of a 4-D tensor), selecting where the tile lies
    unit = len(load.indices) - len(loops)
    iters = [Var(f"box_unit{d}", "int32") for d in range(max(unit, 0))] + [f.loop_var for f in loops]
    box = (1,) * max(unit, 0) + tuple(f.extent.value for f in loops)  # type: ignore[attr-defined]
    if store.buffer.scope != "shared" or load.buffer.scope != "global" or unit < 0 \
            or not loops or dt.lanes(store.value.dtype) != 1:  # fmt: skip
        return f"{store.buffer.name}[...] = {load.buffer.name}[...] is not a global-to-shared copy of a {len(box)}-d box"
    if any(set(collect_vars(i)) & set(iters) for i in load.indices[:unit]):
        return f"the source's leading indices {load.indices[:unit]} depend on the box's loops"
    load = BufferLoad(load.buffer, tuple(i + v if d < unit else i for d, (i, v) in enumerate(zip(load.indices, iters, strict=True))))
    zero = {v: IntImm(0, v.dtype) for v in iters}
    origin = tuple(arith.simplify(substitute(i, zero)) for i in load.indices)
    for i, o, v in zip(load.indices, origin, iters, strict=True):
        if not isinstance(d := arith.simplify(i - o - v), IntImm) or d.value:
            return f"source index {i} is not the box's origin plus loop {v.name}"
    if cond is not None and (why := _bounds_problem(cond, load)) is not None:
        return why
    if any(set(collect_vars(o)) & set(iters) for o in origin):
        return "the box's origin depends on its loops"
    k = len(loops)
    prefix = store.indices[: len(store.indices) - k]
    if any(set(collect_vars(p)) & set(iters) for p in prefix):
        return f"the tile's leading indices {prefix} depend on the box's loops"
    dst = BufferLoad(store.buffer, (*prefix, *(IntImm(0, "int32") for _ in range(k))))
    src = BufferLoad(load.buffer, origin)
    grid = np.indices(box).reshape(len(box), -1)
    env = {v: grid[d].astype(np.int64) for d, v in enumerate(iters)}
    try:
        have = [_eval(i, env, grid.shape[1]) for i in store.indices[len(prefix) :]]
    except NotEnumerable:
        return "the tile's indices cannot be evaluated"
    inner = box[-1] * dt.bits(store.buffer.dtype) // 8
    for swizzle in _SWIZZLES:
        if swizzle and inner != swizzle:
            continue
        copy = BoxCopy(dst, src, box, swizzle)
        try:
            call = copy.call(
                BufferLoad(Buffer("bar", (1,), "uint64", scope="shared"), (IntImm(0, "int32"),))
            )
        except TypeError as e:
            return str(e)
        want = tile_element(call, iters)[len(prefix) :]
        if all(
            np.array_equal(h, _eval(w, env, grid.shape[1])) for h, w in zip(have, want, strict=True)
        ):
            return copy
    return (f"the tile's layout {tuple(str(i) for i in store.indices[len(prefix):])} is not one a TMA copy "
            f"writes (no swizzle, or 32/64/128 bytes)")  # fmt: skip


def _is_zero(e: PrimExpr) -> bool:
    return isinstance(e, (IntImm, FloatImm)) and e.value == 0


def _bounds_problem(cond: PrimExpr, load: BufferLoad) -> str | None:
    """Why ``cond`` is not a conjunction of bounds of ``load``'s indices (``box_copy``)."""
    parts, todo = [], [cond]
    while todo:
        c = todo.pop()
        if isinstance(c, And):
            todo += [c.a, c.b]
        else:
            parts.append(c)
    for c in parts:
        ok = False
        for g, n in zip(load.indices, load.buffer.shape, strict=True):
            if isinstance(c, LT):  # g < n, in any form: a - b == g - n
                ok = ok or _zero(c.a - c.b - (g - n))
            elif isinstance(c, GE):  # g >= 0: a - b == g
                ok = ok or _zero(c.a - c.b - g)
        if not ok:
            return f"the select's condition {c} is not a bound of {load} (TMA fills zeros only outside the tensor)"
    return None


def _zero(e: PrimExpr) -> bool:
    d = arith.simplify(e)
    return isinstance(d, IntImm) and d.value == 0


class TmaPipeline:
    """The TMA form of one pipelined loop (module doc): the barrier buffer, the issuing thread's
    guard and the statements that replace the copies and the ``cp.async`` waits."""

    def __init__(
        self, loop: For, versions: int, threads: Sequence[For], body: Sequence[Stmt]
    ) -> None:
        self.loop, self.versions = loop, versions
        self.bar = Buffer(f"{loop.loop_var.name}_tma_bar", (versions,), "uint64", scope="shared")
        self.threads = list(threads)
        tx = [f for f in threads if f.thread_tag == "threadIdx.x"]
        self.tx_extent: PrimExpr | None = None
        if not tx:  # threadIdx.x bound inside the statements: the issue gets a loop of its own
            found: list[For] = []
            for s in body:
                post_order_stmts(
                    s,
                    lambda n: (
                        found.append(n)
                        if isinstance(n, For) and n.thread_tag == "threadIdx.x"
                        else None
                    ),
                )
            if found:
                self.tx_extent = found[0].extent

    def _one_thread(self, s: Stmt) -> Stmt:
        cond = op.all_(*(f.loop_var == f.min for f in self.threads)) if self.threads else None
        if self.tx_extent is not None:
            tx = Var("tma_tx", "int32")
            cond = tx == 0 if cond is None else op.all_(cond, tx == 0)
            return For(
                tx,
                0,
                self.tx_extent,
                ForKind.THREAD_BINDING,
                IfThenElse(cond, s),
                thread_tag="threadIdx.x",
            )
        return s if cond is None else IfThenElse(cond, s)

    def element(self, j: PrimExpr) -> BufferLoad:
        return self.bar[FloorMod(j, IntImm(self.versions, j.dtype))]

    def init(self) -> Stmt:
        """Thread 0 initializes the barriers (one arrival a phase), then a block barrier."""
        inits = [Evaluate(T.mbarrier_init(self.bar[v], 1)) for v in range(self.versions)]
        return seq(self._one_thread(seq(*inits)), Evaluate(op.storage_sync("shared")))

    def issue(self, j: PrimExpr, copies: Sequence[Stmt]) -> Stmt:
        """Thread 0 issues the copies of relative iteration ``j`` (the statements ``copies``)."""
        boxes = [c for s in copies for c in self._boxes(s)]
        bar = self.element(j)
        for c in boxes:
            idx = arith.simplify(c.dst.indices[0]) if len(c.dst.indices) > len(T.tile_box(c.dst.buffer.shape, c.box) or c.box) else None
            if idx is None or not isinstance(arith.simplify(idx - bar.indices[0]), IntImm) \
                    or arith.simplify(idx - bar.indices[0]).value != 0:  # type: ignore[attr-defined]  # fmt: skip
                raise _fail(self.loop, f"the tile {c.dst} is not the version {bar.indices[0]} of its barrier "
                                       "(the copies must fill versioned buffers)")  # fmt: skip
        total = sum(c.nbytes for c in boxes)
        body = [
            Evaluate(T.mbarrier_arrive_expect_tx(bar, total)),
            *(Evaluate(c.call(bar)) for c in boxes),
        ]
        return self._one_thread(seq(*body))

    def _boxes(self, s: Stmt) -> list[BoxCopy]:
        """``s`` as box copies: one, or one per iteration of its outer serial loops of a few
        constant iterations (a head_dim 128 tile is two 64-column swizzled boxes)."""
        c = box_copy(s)
        if not isinstance(c, str):
            return [c]
        n = _const_int(s.extent) if isinstance(s, For) and s.kind is ForKind.SERIAL else None
        if n is None or n > _MAX_UNROLL or not isinstance(s, For):
            raise _fail(self.loop, f"a statement of the async stage is not a box copy: {c}")
        return [b for i in range(n)
                for b in self._boxes(_simplified(substitute(s.body, {s.loop_var: s.min + i})))]  # fmt: skip

    def wait(self, j: PrimExpr) -> Stmt:
        """Every thread waits for the copies of relative iteration ``j``."""
        v = IntImm(self.versions, j.dtype)
        return Evaluate(
            T.mbarrier_wait(self.element(j), FloorMod(FloorDiv(j, v), IntImm(2, j.dtype)))
        )
