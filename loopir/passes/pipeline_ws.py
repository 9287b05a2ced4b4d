"""Producer/consumer warp specialization of a TMA pipeline: ``loopir.warp_specialize``.

With the annotation [`WS_KEY`][loopir.passes.pipeline_ws.WS_KEY] next to
[`TMA_KEY`][loopir.passes.pipeline_tma.TMA_KEY] on the K loop, InjectSoftwarePipeline emits the
loop as CUTLASS 3's sm90 "warpspecialized" mainloop (and FlashAttention 3's) instead of the
software-pipelined steps:

* one more **producer warpgroup**: the ``threadIdx.y`` loop around the pipeline (one warp per
  ``threadIdx.y``, ``threadIdx.z`` of extent 1, ``wy`` consumer warps, ``wy % 4 == 0``) grows
  by 4; the warps ``wy .. wy + 3`` are the producer, every other statement of the block
  (accumulator fill, epilogue) runs in the consumers only (``threadIdx.y < wy``), the block
  barriers outside the loop in every thread;
* two mbarriers per buffer version ``v``: ``full[v]`` (count 1: the producer's
  ``arrive_expect_tx``, completed by the copies' bytes) and ``empty[v]`` (count ``wy``: one
  arrival per consumer warp), initialized by thread 0 before a block barrier;
* the producer, one elected thread (``threadIdx.y == wy``, ``threadIdx.x == 0``), for each
  iteration ``j`` (relative to the loop's start), ``V`` versions::

      if j >= V: mbarrier_wait(empty[j % V], (j // V + 1) % 2)    # consumers released j - V
      mbarrier_arrive_expect_tx(full[j % V], bytes); tma_load(...) ...

* every consumer thread, for each ``j``::

      mbarrier_wait(full[j % V], j // V % 2)                      # its own wait: no __syncthreads
      compute(j)                                                  # wgmma on version j % V
      [wgmma_wait(1) retiring j - 1]                              # asynchronous wgmma
      if threadIdx.x == 0: mbarrier_arrive(empty[(j - 1) % V])    # (j % V when synchronous)

  and after the loop the last retiring wait (``wait_group 0``) and arrival;
* optionally (the annotation's value ``(dec, inc)``) ``setmaxnreg`` in each branch: the
  producer gives registers back (``dec``), the consumers take them (``inc``).

Why the parities: ``full[v]`` completes phase ``p`` with the copies of iteration ``v + pV``
(one arrival a phase); ``empty[v]``'s phase ``p`` completes when the ``wy`` consumer warps have
released iteration ``v + pV``, and the producer's copy of iteration ``j >= V`` waits for phase
``j // V - 1``, parity ``(j // V + 1) % 2``. [`loopir.passes.race_ws`][loopir.passes.race_ws]
proves these from the kernel (not from this construction) and the race checker orders the
copies and reads by them.

Persistent kernels (``hopper_gemm(persistent=...)``): when the loop sits directly in a serial
**tile loop** ``t`` (under the thread loops, extent ``T`` tiles of this block), the roles go around
that loop instead: [`persistent_tiles`][loopir.passes.pipeline_ws_tiles.persistent_tiles] first
lifts the split's predicate into ``t``'s extent, then the producer's one loop runs every step
``g`` of ``T * n`` (the copies of tile ``g // n``, K step ``g % n``, version ``g % V``), and the
consumers run ``t`` with their K loop, accumulator fill and epilogue, at the **global step**
``t * n + k`` (wait on ``full[(t * n + k) % V]``, parity ``(t * n + k) // V % 2``; the tail's
release of ``t * n + n - 1`` after ``wgmma_wait(0)``): the producer fills the next tile's stages
while the consumers store this one's accumulators, as CUTLASS's sm90 persistent kernels do.

The CPU executor runs the mbarriers of a thread region as barriers (a wait suspends its fiber
until the phase completes, ``loopir.runtime.c_fibers``): sequentially the program is the GEMM.

Example (before / after, ``V = 2``, synchronous ``wgmma``, 4 consumer warps)::

    for ty in thread_binding(4, "threadIdx.y"):      for ty in thread_binding(8, "threadIdx.y"):
        fill(C)                                          if ty < 4: fill(C)
        for k in serial(n):                              init full[0..1] (1), empty[0..1] (4); sync
            A_s[...] = A[..., k * 64 + ...]              if ty >= 4:   # producer
            compute(A_s)                                     if ty == 4 and tx == 0:
        store(C)                                                 for k in serial(n):
                                                                     if k >= 2: wait(empty[k % 2], (k // 2 + 1) % 2)
                                                                     expect_tx(full[k % 2], ...); tma_load(...)
                                                         else:         # consumers
                                                             for k in serial(n):
                                                                 wait(full[k % 2], k // 2 % 2)
                                                                 compute(A_s[k % 2])
                                                                 if tx == 0: arrive(empty[k % 2], 1)
                                                         if ty < 4: store(C)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from loopir.errors import PassError
from loopir.ir import op
from loopir.ir import tma as T
from loopir.ir.buffer import Buffer
from loopir.ir.expr import GE, LT, BufferLoad, Call, FloorDiv, FloorMod, IntImm, Max, PrimExpr, Var
from loopir.ir.functor import (
    Mutator,
    fresh_loop_vars,
    post_order_stmts,
    post_order_visit,
    substitute,
)
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    SeqStmt,
    Stmt,
    seq,
)
from loopir.passes.pipeline_mma import WgmmaAsync, set_pending
from loopir.passes.pipeline_tma import TmaPipeline
from loopir.passes.pipeline_ws_tiles import WS_KEY, persistent_tiles, ws_child

__all__ = ["PRODUCER_WARPS", "WS_KEY", "WsPipeline", "absorb_neighbours", "grow_thread_loop", "persistent_tiles",
           "ws_child", "ws_registers"]

#: Warps of the producer warpgroup.
PRODUCER_WARPS = 4


def _fail(loop: For, why: str) -> PassError:
    return PassError(f"pass InjectSoftwarePipeline: loop {loop.loop_var.name}: {WS_KEY}: {why}")


def ws_registers(loop: For) -> tuple[int, int] | None:
    """The ``(dec, inc)`` of ``setmaxnreg`` the annotation asks for (None: none)."""
    value: Any = loop.annotations.get(WS_KEY)
    if value is True:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) and 24 <= v <= 256 and v % 8 == 0 for v in value
    ):
        return int(value[0]), int(value[1])
    raise _fail(loop, f"must be True or (dec, inc) register counts (24 to 256, multiples of 8), got {value!r}")


@attrs.frozen
class _Threads:
    """The thread loops around the pipeline: ``ty`` (one warp per value), its extent ``wy``."""

    ty: For
    wy: int


def _inner_ty(loop: For) -> For | None:
    """A ``threadIdx.y`` loop standing for those of ``loop``'s statements (each binds its own,
    all over one constant extent: the warps of a schedule binding every block itself, as
    ``examples.attention``); None when they bind none."""
    found: list[For] = []
    post_order_stmts(loop.body, lambda n: found.append(n) if isinstance(n, For) and n.thread_tag == "threadIdx.y" else None)
    if not found:
        return None
    extents = {f.extent.value if isinstance(f.extent, IntImm) else None for f in found}
    if len(extents) != 1 or None in extents or any(not (isinstance(f.min, IntImm) and f.min.value == 0) for f in found):
        raise _fail(loop, f"the statements bind threadIdx.y over different or non-constant ranges: "
                          f"{sorted(str(f.extent) for f in found)}")  # fmt: skip
    return For(Var("ws_ty", "int32"), 0, found[0].extent, ForKind.THREAD_BINDING, Evaluate(IntImm(0, "int32")),
               thread_tag="threadIdx.y")  # fmt: skip


def _threads(loop: For, threads: Sequence[For], tx_extent: PrimExpr | None) -> _Threads:
    ty = [f for f in threads if f.thread_tag == "threadIdx.y"]
    if not ty and (inner := _inner_ty(loop)) is not None:
        ty = [inner]
    others = [f for f in threads if f.thread_tag not in ("threadIdx.y", "threadIdx.z")]
    tz = [f for f in threads if f.thread_tag == "threadIdx.z"]
    if len(ty) != 1 or others or any(not (isinstance(f.extent, IntImm) and f.extent.value == 1) for f in tz):
        raise _fail(loop, "needs the loop under one threadIdx.y loop (a warp each) and threadIdx.z of extent 1, "
                          f"threadIdx.x bound inside; got {[f'{f.thread_tag}({f.extent})' for f in threads]}")  # fmt: skip
    if not (isinstance(tx_extent, IntImm) and tx_extent.value == 32):
        raise _fail(loop, f"needs threadIdx.x of extent 32 bound in the loop's statements (one warp per "
                          f"threadIdx.y), got {tx_extent}")  # fmt: skip
    wy = ty[0].extent
    lo = ty[0].min
    if not isinstance(wy, IntImm) or wy.value % PRODUCER_WARPS or not (isinstance(lo, IntImm) and lo.value == 0):
        raise _fail(loop, f"needs threadIdx.y from 0 over a constant multiple of {PRODUCER_WARPS} (whole "
                          f"consumer warpgroups), got extent {wy}")  # fmt: skip
    return _Threads(ty[0], wy.value)


class WsPipeline:
    """The warp-specialized form of one TMA pipeline (module doc): its barriers and the
    producer's and consumers' loops."""

    def __init__(self, loop: For, tma: TmaPipeline, tiles: For | None = None, step: Var | None = None) -> None:
        self.loop, self.tma = loop, tma
        # persistent (``tiles``: the serial tile loop around the K loop, module doc): the
        # statements index the tiles' versions by ``step``, the global step t * n + k
        self.tiles, self.step_var = tiles, step
        self.th = _threads(loop, tma.threads, tma.tx_extent)
        # the statements bind threadIdx.y themselves: the roles get a threadIdx.y loop of their
        # own, in which each statement's is its variable
        self.hoisted = not any(f.thread_tag == "threadIdx.y" for f in tma.threads)
        self.regs = ws_registers(loop)
        name = loop.loop_var.name
        v = tma.versions
        # the full barriers are the TMA pipeline's own (allocated with its first tile)
        self.full = tma.bar
        self.empty = Buffer(f"{name}_empty_bar", (v,), "uint64", scope="shared")

    @property
    def ty(self) -> Var:
        return self.th.ty.loop_var

    def _warp_lane0(self, cond: PrimExpr | None, s: Stmt, name: str) -> Stmt:
        """``s`` in lane 0 of the warps where ``cond`` holds (a loop binding threadIdx.x)."""
        tx = Var(name, "int32")
        c = tx == 0 if cond is None else op.all_(cond, tx == 0)
        return For(tx, 0, 32, ForKind.THREAD_BINDING, IfThenElse(c, s), thread_tag="threadIdx.x")

    def init(self) -> Stmt:
        """Thread 0 initializes ``full`` (count 1) and ``empty`` (one arrival per consumer
        warp), then a block barrier."""
        v = self.tma.versions
        inits = [Evaluate(T.mbarrier_init(self.full[i], 1)) for i in range(v)]
        inits += [Evaluate(T.mbarrier_init(self.empty[i], self.th.wy)) for i in range(v)]
        return seq(self._warp_lane0(self.ty == 0, seq(*inits), "ws_init_tx"), Evaluate(op.storage_sync("shared")))

    def around(self, s: Stmt) -> Stmt:
        """``s`` (the init and the roles) in the roles' own threadIdx.y loop when the statements
        bound theirs (``hoisted``), the producer warpgroup's warps included: one thread region
        (the CPU executor runs the mbarrier waits of a region as barriers)."""
        if not self.hoisted:
            return s
        return For(self.ty, 0, self.th.wy + PRODUCER_WARPS, ForKind.THREAD_BINDING, s, thread_tag="threadIdx.y",
                   annotations={HOISTED_ROLES: 1})  # fmt: skip

    def step(self, it: PrimExpr) -> PrimExpr:
        """The global step of the consumers' iteration ``it`` of the K loop: ``it``, or in a
        tile loop ``t * n + it`` (the stage and the parity go on across tiles)."""
        if self.tiles is None:
            return it
        return (self.tiles.loop_var - self.tiles.min) * self.loop.extent + it

    def steps(self) -> PrimExpr:
        """The producer's iterations: the K loop's, or every (tile, k) of the tile loop."""
        return self.loop.extent if self.tiles is None else self.tiles.extent * self.loop.extent

    def _ver(self, j: PrimExpr) -> PrimExpr:
        return FloorMod(j, IntImm(self.tma.versions, j.dtype))

    def _parity(self, j: PrimExpr, ahead: int) -> PrimExpr:
        v = IntImm(self.tma.versions, j.dtype)
        return FloorMod(FloorDiv(j, v) + ahead, IntImm(2, j.dtype))

    def producer(self, copies: Any) -> Stmt:
        """The elected producer thread's loop: ``copies(j)`` are the statements of relative
        iteration ``j``'s async stage."""
        loop = self.loop
        j = Var(f"{loop.loop_var.name}_produce", loop.loop_var.dtype)
        v = IntImm(self.tma.versions, j.dtype)
        wait = IfThenElse(GE(j, v), Evaluate(T.mbarrier_wait(self.empty[self._ver(j)], self._parity(j, 1))))
        issue = self.tma.issue(j, copies(j))
        while isinstance(issue, For) and issue.thread_tag == "threadIdx.x":  # the TMA form's own lane loop
            issue = issue.body
            assert isinstance(issue, IfThenElse)
            issue = issue.then_case
        body = For(j, 0, self.steps(), ForKind.SERIAL, seq(wait, issue))
        out: Stmt = self._warp_lane0(self.ty == self.th.wy, body, "ws_producer_tx")
        if self.regs is not None:
            out = seq(Evaluate(T.setmaxnreg(self.regs[0], False)), out)
        return out

    def _release(self, j: PrimExpr) -> Stmt:
        return self._warp_lane0(None, Evaluate(T.mbarrier_arrive(self.empty[self._ver(j)], 1)), "ws_release_tx")

    def consumer(self, stmts: Sequence[Stmt], computes: Sequence[int], retire: dict[int, int],
                 lags: dict[int, int] | None = None) -> Stmt:  # fmt: skip
        """The consumer warps' loop: ``stmts[i]`` for ``i`` in ``computes`` (in order), each
        retiring wait (``retire``: wait -> compute) one iteration later, then the release.
        ``lags``: statements of later stages of the consumers' pipeline (FlashAttention's ``P V``
        a step after ``S``), run at iteration ``j - lag`` (guarded ``j >= lag``, the last ones
        after the loop); the release, at the step's end, is then of iteration ``j - max lag``."""
        loop = self.loop
        var, lo = loop.loop_var, loop.min
        j = Var(f"{var.name}_consume", var.dtype)
        lags = lags or {}

        def at(i: int, it: PrimExpr) -> Stmt:
            sub = {var: lo + it} if self.step_var is None else {var: lo + it, self.step_var: self.step(it)}
            s = fresh_loop_vars(substitute(stmts[i], sub))
            return _OwnWarp(self.ty).visit(s) if self.hoisted else s

        def lagged(i: int, it: PrimExpr) -> Stmt:
            d = lags.get(i, 0)
            return at(i, it) if d == 0 else IfThenElse(GE(it, IntImm(d, it.dtype)), at(i, it - d))

        waits = [i for i in computes if i in retire]
        now = [i for i in computes if i not in retire]
        top = max(lags.values(), default=0)
        if top > 1:
            raise _fail(loop, f"the consumers' statements span stages {sorted(set(lags.values()))} after the first; "
                              "one later stage is supported")  # fmt: skip
        if waits and top:
            raise _fail(loop, "retiring wgmma waits (loopir.mma_in_flight) and consumer stages of their own "
                              "(statements a step later) cannot be combined")  # fmt: skip
        g = self.step(j)
        full_wait = Evaluate(T.mbarrier_wait(self.full[self._ver(g)], self._parity(g, 0)))
        peeled: Stmt | None = None
        if top:
            # the first step peeled (no later stage yet), the loop from 1 with the later stage
            # unguarded: each wgmma issue and its wait in one straight-line body (an issue under
            # a condition waited for outside it: ptxas serializes every wgmma, C7515), S_j's
            # issue directly followed by P_{j-1} V_{j-1}'s
            zero = IntImm(0, j.dtype)
            g0 = self.step(zero)
            peeled = IfThenElse(GE(loop.extent, IntImm(1, loop.extent.dtype)), seq(
                Evaluate(T.mbarrier_wait(self.full[self._ver(g0)], self._parity(g0, 0))),
                *(at(i, zero) for i in now if not lags.get(i))))  # fmt: skip
            body: list[Stmt] = [full_wait, *(at(i, j - lags[i]) if lags.get(i) else at(i, j) for i in now),
                                self._release(g - top)]  # fmt: skip
        else:
            body = [full_wait, *(lagged(i, j) for i in now)]
        if waits:  # asynchronous wgmma: iteration j - 1 retires (its tiles read) after j's issue
            body.append(IfThenElse(GE(j, IntImm(1, j.dtype)), seq(*(at(w, j - 1) for w in waits),
                                                                   self._release(g - 1))))  # fmt: skip
        elif not top:
            body.append(self._release(g))
        out: list[Stmt] = []
        if self.regs is not None:
            out.append(Evaluate(T.setmaxnreg(self.regs[1], True)))
        if peeled is not None:
            one = IntImm(1, j.dtype)
            out += [peeled, For(j, one, Max(loop.extent - one, IntImm(0, j.dtype)), ForKind.SERIAL, seq(*body))]
        else:
            out.append(For(j, 0, loop.extent, ForKind.SERIAL, seq(*body)))
        if waits:  # the last iteration's wgmma retire after the loop (wait_group 0)
            last = loop.extent - 1
            tail = seq(*(set_pending(at(w, last)) for w in waits), self._release(self.step(last)))
            out.append(IfThenElse(GE(last, IntImm(0, last.dtype)), tail))
        if top:  # the later stage's last iteration (nothing waits for its release)
            last = loop.extent - 1
            late = [at(i, last) for i in now if lags.get(i)]
            # its wgmma retired here, in the consumers' branch (the producer warps hold no group)
            late += [fresh_loop_vars(WgmmaAsync(0).visit(x)) for x in late if _only_wgmma(x)]
            out.append(IfThenElse(GE(last, IntImm(0, last.dtype)), seq(*late)))
        return seq(*out)

    def stmt(self, producer: Stmt, consumer: Stmt) -> Stmt:
        """Both roles: the producer warpgroup's branch and the consumers'."""
        wy = IntImm(self.th.wy, self.ty.dtype)
        if self.hoisted:  # the consumers' guard a then-branch's ty < wy: their warps' registers only
            return IfThenElse(LT(self.ty, wy), consumer, producer)
        return IfThenElse(GE(self.ty, wy), producer, consumer)


def _only_wgmma(s: Stmt) -> bool:
    """Whether ``s`` is thread loops around ``ptx_wgmma`` calls only."""
    kinds: list[bool] = []
    post_order_visit(s, lambda n: kinds.append(isinstance(n, Evaluate) and isinstance(n.value, Call)
                                               and n.value.op == "ptx_wgmma") if isinstance(n, (Evaluate, BufferStore)) else None)  # fmt: skip
    return bool(kinds) and all(kinds)


class _OwnWarp(Mutator):
    """A statement's threadIdx.y loop replaced by the roles' variable (``WsPipeline.hoisted``:
    the consumer warps are those the statement's loop ranged over)."""

    def __init__(self, ty: Var) -> None:
        super().__init__()
        self.ty = ty

    def visit_For(self, s: For) -> Stmt:
        out: Stmt = self.visit(substitute(s.body, {s.loop_var: self.ty})) if s.thread_tag == "threadIdx.y" \
            else self.generic_visit(s)  # fmt: skip
        return out


def grow_thread_loop(ty: For, wy: int, pipelines: Sequence[Stmt], regs: bool = False) -> For:
    """The ``threadIdx.y`` loop ``ty`` around warp-specialized ``pipelines`` (their statements,
    by identity) with the producer warpgroup added (extent ``wy + 4``). Where the rest of the
    body has no block barrier (the accumulator fill before the pipeline, the epilogue after
    it), it moves into the consumers' branch: each role one branch of one if/else, as
    ``setmaxnreg`` needs (``regs``), the producer's registers free of the accumulators. Else
    (the epilogue through shared memory) every other statement is guarded ``ty < wy``, but the
    block barriers, which every thread passes, the producer's too (no ``setmaxnreg`` then)."""
    keep = {id(p) for p in pipelines}
    consumers = LT(ty.loop_var, IntImm(wy, ty.loop_var.dtype))

    def has_sync(s: Stmt) -> bool:
        found: list[bool] = []
        post_order_visit(s, lambda n: found.append(True) if op.is_barrier(n) else None)
        return bool(found)

    def merge(s: Stmt) -> Stmt | None:
        if isinstance(s, (Allocate, For)) and not (isinstance(s, For) and s.kind is ForKind.SERIAL):
            inner = merge(s.body)
            return None if inner is None else attrs.evolve(s, body=inner)
        if not isinstance(s, SeqStmt):
            return None
        roles = [i for i, x in enumerate(s.seq) if id(x) in keep and isinstance(x, IfThenElse) and x.else_case is not None]
        if len(roles) != 1:
            return None
        r = roles[0]
        role = s.seq[r]
        assert isinstance(role, IfThenElse) and role.else_case is not None
        mine = [i for i, x in enumerate(s.seq) if id(x) in keep]  # the init and its barrier, the roles
        pre = [x for i, x in enumerate(s.seq[:r]) if i not in mine]
        post = list(s.seq[r + 1 :])
        if any(has_sync(x) for x in (*pre, *post)) or any(i > r for i in mine):
            return None
        heads = [x for i, x in enumerate(s.seq[:r]) if i in mine]
        return seq(*heads, attrs.evolve(role, else_case=seq(*pre, role.else_case, *post)))

    def guard(s: Stmt) -> Stmt:
        if id(s) in keep:
            return s
        if isinstance(s, SeqStmt):
            return seq(*(guard(x) for x in s.seq))
        if not has_sync(s):
            return IfThenElse(consumers, s)
        if isinstance(s, Evaluate):  # the barrier itself
            return s
        if isinstance(s, (Allocate, For)):
            return attrs.evolve(s, body=guard(s.body))
        if isinstance(s, IfThenElse) and s.else_case is None:
            return attrs.evolve(s, then_case=guard(s.then_case))
        raise PassError(f"pass InjectSoftwarePipeline: {WS_KEY}: cannot keep the producer warpgroup out of "
                        f"a statement with block barriers under threadIdx.y:\n{s}")  # fmt: skip

    body = merge(ty.body)
    if body is None:
        if regs:
            raise PassError(f"pass InjectSoftwarePipeline: {WS_KEY}: setmaxnreg needs each role one branch of one "
                            "if/else, but the statements around the pipeline under threadIdx.y have block barriers "
                            "(an epilogue through shared memory, as for sizes off the block tile); use True")  # fmt: skip
        body = guard(ty.body)
    return attrs.evolve(ty, extent=IntImm(wy + PRODUCER_WARPS, "int32"), body=body)


#: The attribute marking the roles' own threadIdx.y loop (``WsPipeline.hoisted``), for
#: ``absorb_neighbours``.
HOISTED_ROLES = "loopir.ws_hoisted_roles"


def _roles_loop(s: Stmt) -> tuple[list[Allocate], For] | None:
    """The allocations and the hoisted roles' loop of ``s`` (``WsPipeline.around``), or None."""
    allocs: list[Allocate] = []
    while isinstance(s, Allocate):
        allocs.append(s)
        s = s.body
    if isinstance(s, For) and s.annotations.get(HOISTED_ROLES):
        return allocs, s
    return None


def _movable(s: Stmt, wy: int) -> bool:
    """Whether ``s`` is a ``threadIdx.y`` loop over the ``wy`` consumer warps touching only
    their registers (warp and local buffers) and global memory, with no barrier: what the
    consumers' branch can run instead (the accumulator's fill, the statistics', the epilogue)."""
    if not (isinstance(s, For) and s.thread_tag == "threadIdx.y" and isinstance(s.extent, IntImm)
            and s.extent.value == wy and isinstance(s.min, IntImm) and s.min.value == 0):  # fmt: skip
        return False
    bad: list[bool] = []

    def visit(n: object) -> None:
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer.scope not in ("warp", "local", "global"):
            bad.append(True)
        elif isinstance(n, Evaluate) and (op.is_barrier(n) or isinstance(n.value, Call)):
            bad.append(True)

    post_order_visit(s, visit)
    return not bad


def absorb_neighbours(stmts: Sequence[Stmt]) -> list[Stmt]:
    """``stmts`` (a sequence) with the statements right before and after a hoisted roles' loop
    that only the consumer warps run on their registers (``_movable``) moved into the
    consumers' branch: the producer's branch then starts with no accumulator live, so that
    ``setmaxnreg.dec`` needs no spill of it (``grow_thread_loop``'s merge, for statements that
    bind threadIdx.y themselves)."""
    out = list(stmts)
    for i, s in enumerate(out):
        found = _roles_loop(s)
        if found is None:
            continue
        allocs, loop = found
        body = loop.body
        assert isinstance(body, SeqStmt)
        roles = body.seq[-1]
        assert isinstance(roles, IfThenElse) and isinstance(roles.condition, LT) and isinstance(roles.condition.b, IntImm)
        wy = roles.condition.b.value
        lo = i
        while lo > 0 and _movable(out[lo - 1], wy):
            lo -= 1
        hi = i + 1
        while hi < len(out) and _movable(out[hi], wy):
            hi += 1
        own = _OwnWarp(loop.loop_var)
        consumer = seq(*(own.visit(x) for x in out[lo:i]), roles.then_case, *(own.visit(x) for x in out[i + 1:hi]))
        loop = attrs.evolve(loop, body=seq(*body.seq[:-1], attrs.evolve(roles, then_case=consumer)))
        new: Stmt = loop
        for a in reversed(allocs):
            new = attrs.evolve(a, body=new)
        return [*out[:lo], new, *absorb_neighbours(out[hi:])]
    return out
