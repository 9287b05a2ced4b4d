"""InjectSoftwarePipeline: multi-stage pipelines of annotated loops, with ``cp.async`` copies.

TVM's annotations, on a serial loop whose body (after lowering) is a sequence of statements::

    sch.annotate(ko, "software_pipeline_stage", [0, 0, 1])     # stage of each statement
    sch.annotate(ko, "software_pipeline_order", [0, 1, 2])     # their order in one step
    sch.annotate(ko, "software_pipeline_async_stages", [0])    # stages whose copies are async

A statement of stage ``s`` runs iteration ``k`` at step ``k + s``: with ``S`` the largest
stage, the loop ``for k in range(n): S0(k); S1(k); C(k)`` with stages ``[0, 0, 1]`` becomes ::

    S0(0); S1(0)                                   # prologue: steps 0 .. S-1 (guarded k < n)
    for i in range(n - 1):                         # steady state: steps S .. n-1
        S0(i + 1); S1(i + 1); C(i)
    C(n - 1)                                       # epilogue: steps n .. n+S-1 (guarded k >= 0)

A buffer written in stage ``s_w`` and read in a later stage ``s_r`` gets ``s_r - s_w + 1``
versions (a new leading axis, indexed by the iteration modulo the versions), so that the copy
of iteration ``k + 1`` does not overwrite what ``C(k)`` reads; one fewer when the step's order
puts the reader before the writer (the reader of iteration ``k`` is then done when the writer
of iteration ``k + s_r - s_w`` runs, in the same step: a buffer read in the next stage needs no
second version, as TVM's pass). ThreadSync then orders what is
left (the reuse of a version one step later). Buffers allocated in the loop's body (caches
placed at that loop, such as the register fragments of a tensor-core K step) are allocated
around the pipelined loop instead, versioned like the others when they pass between stages:
``fragment_stages=2`` of ``examples.tc_gemm`` double-buffers its fragments so.

Async stages: their global-to-shared copies are emitted by the CUDA backend as ``cp.async``
(16-byte ``.cg`` for whole vectors, 4/8-byte ``.ca`` otherwise, a predicated fetch as a
zero-fill with ``src-size`` 0: the guards of local padding). Each step commits one group
(``cp.async.commit_group``, also when it issued nothing, so that counting is uniform) and before
a statement that reads their buffers waits until at most ``s_r - s_w - 1`` (+1 when this step's
commit came before it) groups are pending (``cp.async.wait_group``), then synchronizes the
block: the copies of other threads are visible only after both. The CPU executor runs copies
synchronously and the two intrinsics as no-ops, so the pipelined IR computes what the input
did.

Example (before / after, the 2-stage dense schedule; ``tests/passes/test_software_pipeline.py``
checks both as golden files)::

    for k_0 in T.serial(4):                       A_shared = T.allocate((2, 128, 4), ...)
        A_shared[..] = A[.., k_0 * 4 + ..]        A_shared[0, ..] = A[.., 0 * 4 + ..]   # k = 0
        compute(A_shared[..])                     for k_0 in T.serial(3):
                                                      A_shared[(k_0 + 1) % 2, ..] = A[.., (k_0 + 1) * 4 + ..]
                                                      compute(A_shared[k_0 % 2, ..])
                                                  compute(A_shared[3 % 2, ..])
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import attrs

from loopir import arith
from loopir.errors import PassError
from loopir.ir import dtype as dt
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import (
    GE,
    LT,
    And,
    BufferLoad,
    Call,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    PrimExpr,
    Var,
)
from loopir.ir.functor import (
    Mutator,
    Visitor,
    fresh_loop_vars,
    post_order_stmts,
    substitute,
)
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
    seq,
)
from loopir.passes import storage_align
from loopir.passes._walk import int_of
from loopir.passes.base import Pass, require_lowered
from loopir.passes.context import PassContext
from loopir.passes.pipeline_mma import MMA_IN_FLIGHT_KEY, set_pending, with_retiring_waits
from loopir.passes.pipeline_tma import TMA_KEY, TmaPipeline
from loopir.passes.pipeline_ws import (
    WS_KEY,
    WsPipeline,
    absorb_neighbours,
    grow_thread_loop,
    persistent_tiles,
    ws_child,
    ws_registers,
)
from loopir.tensor_intrin.calls import touches, written_operands

__all__ = [
    "ASYNC_KEY", "ASYNC_COPY_KEY", "DEPTH_KEY", "MMA_IN_FLIGHT_KEY", "ORDER_KEY", "STAGE_KEY", "TMA_KEY", "WAIT_FIRST_KEY",
    "InjectSoftwarePipeline",
    "cp_async_commit", "cp_async_wait", "pipeline_requested",
]  # fmt: skip

logger = logging.getLogger(__name__)

STAGE_KEY = "software_pipeline_stage"
DEPTH_KEY = "loopir.software_pipeline_depth"
"""loopir's shorthand (a single int, so that a design space can sample it): depth ``d`` means
every statement but the last in stage 0, the last in stage ``d - 1``, stage 0 async; 1 is no
pipeline. With ``MMA_IN_FLIGHT_KEY`` the last is in stage ``d - 2`` from ``d = 3`` (its retiring
wait in ``d - 1``), and below 3 the key is dropped."""
ORDER_KEY = "software_pipeline_order"
ASYNC_KEY = "software_pipeline_async_stages"
WAIT_FIRST_KEY = "loopir.pipeline_wait_first"
"""With an async stage: each step first waits for the copies its consumers read and synchronizes
the block, then issues its copies and computes (``cp.async.wait_group; __syncthreads(); copies;
commit; compute``, as CUTLASS's multistage mainloop). That one barrier also orders the step's
copies after the previous step's reads of the version they overwrite (complete in every thread:
the consumers are synchronous), and ThreadSync proves the copies and the reads of the same step
disjoint (one iteration, two versions), so a step has one barrier where the default order
(copies, wait, barrier, compute) needs two. The wait allows one group fewer pending: this step's
group is not committed yet."""
ASYNC_COPY_KEY = "loopir.async_copy"
"""Set by the pass on the statements of async stages: the CUDA backend emits their
global-to-shared copies as cp.async."""


def cp_async_commit() -> Call:
    """``cp.async.commit_group``: close the group of the copies issued since the last one."""
    return Call("int32", "loopir.cp_async_commit", ())


def cp_async_wait(pending: int) -> Call:
    """``cp.async.wait_group pending``: wait until at most ``pending`` groups are in flight."""
    return Call("int32", "loopir.cp_async_wait", (IntImm(pending, "int32"),))


def pipeline_requested(func: PrimFunc | None) -> bool:
    """Whether some loop of ``func`` carries ``software_pipeline_stage``."""
    if func is None:
        return False
    found: list[bool] = []
    post_order_stmts(func.body, lambda n: found.append(True) if isinstance(n, For) and (
        STAGE_KEY in n.annotations or DEPTH_KEY in n.annotations) else None)  # fmt: skip
    return bool(found)


def _ints(value: Any, what: str, loop: For) -> list[int]:
    vals = list(value) if isinstance(value, (list, tuple)) else None
    if vals is None or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in vals):
        raise PassError(f"pass InjectSoftwarePipeline: loop {loop.loop_var.name}: {what} must be a list of "
                        f"non-negative ints, got {value!r}")  # fmt: skip
    return vals


class _Accessed(Visitor):
    def __init__(self) -> None:
        self.reads: set[Buffer] = set()
        self.writes: set[Buffer] = set()

    def visit_BufferLoad(self, n: BufferLoad) -> None:
        self.reads.add(n.buffer)
        self.generic_visit(n)

    def visit_BufferStore(self, n: BufferStore) -> None:
        self.writes.add(n.buffer)
        self.generic_visit(n)

    def visit_Evaluate(self, n: Evaluate) -> None:
        v = n.value
        if isinstance(v, Call) and v.op == "ptx_wgmma_wait":
            # it reads the tiles of the MMAs it retires; their accumulator is named for the
            # emitter only (the MMA happened at the issue)
            self.reads.update(t.buffer for t in touches(v))
            return
        if isinstance(v, Call) and op.is_tensor_core_call(v):
            # a tensor-core call writes through an operand (an ldmatrix its fragment)
            self.writes.update(a.buffer for a in written_operands(v))
        self.generic_visit(n)


def _accessed(stmt: Stmt) -> tuple[set[Buffer], set[Buffer]]:
    v = _Accessed()
    v.visit(stmt)
    return v.reads, v.writes


def _multi_buffered(buf: Buffer, versions: int) -> Buffer:
    """``buf`` with a leading axis of ``versions`` copies. Padded (``storage_align``) strides
    are kept, the new axis striding over one whole copy rounded up to 16 bytes, so that every
    copy starts as aligned as the first (the ``cp.async.cg`` and vector loads need it)."""
    shape = (IntImm(versions, "int32"), *buf.shape)
    if buf.strides is None:
        return Buffer(buf.name, shape, buf.dtype, scope=buf.scope)
    try:
        span = storage_align.allocation_size([int_of(e) for e in buf.shape], [int_of(e) for e in buf.strides])
    except TypeError:
        raise PassError(f"pass InjectSoftwarePipeline: {buf.name} has padded strides (storage_align) and a "
                        f"non-constant shape {buf.shape}; a multi-buffered tile needs a constant one") from None  # fmt: skip
    lanes = max(1, 128 // max(1, dt.bits(buf.dtype)))
    span = -(-span // lanes) * lanes
    return attrs.evolve(buf, shape=shape, strides=(IntImm(span, "int32"), *buf.strides))


class _Versioned(Mutator):
    """Accesses of versioned buffers get a leading index ``(loop_var - min) % versions``."""

    def __init__(self, new: dict[Buffer, tuple[Buffer, int]], loop: For, step: Var | None = None) -> None:
        super().__init__()
        self.new, self.loop, self.step = new, loop, step

    def _index(self, versions: int) -> PrimExpr:
        # ``step``: a variable standing for the global step (a persistent pipeline's t * n + k)
        rel = self.loop.loop_var - self.loop.min if self.step is None else self.step
        return FloorMod(rel, IntImm(versions, rel.dtype))

    def visit_BufferLoad(self, e: BufferLoad) -> PrimExpr:
        e = self.generic_visit(e)
        if e.buffer in self.new:
            buf, v = self.new[e.buffer]
            return BufferLoad(buf, (self._index(v), *e.indices))
        return e

    def visit_BufferStore(self, s: BufferStore) -> Stmt:
        s = self.generic_visit(s)
        if s.buffer in self.new:
            buf, v = self.new[s.buffer]
            return BufferStore(buf, s.value, (self._index(v), *s.indices))
        return s


class _Rewrite(Mutator):
    def __init__(self, func: PrimFunc) -> None:
        super().__init__()
        self.func = func
        self.allocs: dict[Buffer, Allocate] = {}
        self.replaced: dict[Buffer, Buffer] = {}
        self.loops = 0
        self.threads: list[For] = []  # the thread-bound loops around the loop being visited
        self.bars: dict[Buffer, list[Buffer]] = {}  # a TMA pipeline's barriers, allocated with its first tile
        # warp-specialized pipelines: (threadIdx.y var, wy, statement, setmaxnreg)
        self.ws: list[tuple[Var, int, Stmt, bool]] = []
        # a persistent one: the tile loop (its guard lifted) and its K loop's variable while it
        # is visited; then the producer's role, put around the tile loop by visit_For
        self.tiles: tuple[For, Var] | None = None
        self.roles: tuple[WsPipeline, Stmt] | None = None

    def visit_SeqStmt(self, s: SeqStmt) -> Stmt:
        out: Stmt = self.generic_visit(s)
        # a warp-specialized pipeline whose statements bound threadIdx.y themselves: the
        # consumers' register-only neighbours into their branch (pipeline_ws.absorb_neighbours)
        return seq(*absorb_neighbours(out.seq)) if isinstance(out, SeqStmt) else out

    def visit_Allocate(self, s: Allocate) -> Stmt:
        self.allocs[s.buffer] = s
        out = self.generic_visit(s)
        assert isinstance(out, Allocate)
        new = self.replaced.get(s.buffer)
        if new is None:
            return out
        if s.buffer in set().union(*_accessed(out.body)):
            raise PassError(f"pass InjectSoftwarePipeline: {s.buffer.name} gets versions for a pipelined loop "
                            "but is also accessed outside it")  # fmt: skip
        body = out.body
        for bar in self.bars.get(s.buffer, []):
            body = Allocate(bar, body)
        return Allocate(new, body)

    def visit_For(self, s: For) -> Stmt:
        bound = s.kind is ForKind.THREAD_BINDING and str(s.thread_tag).startswith("threadIdx")
        if bound:
            self.threads.append(s)
        outer = self.tiles
        k_var = ws_child(s) if s.kind is ForKind.SERIAL and self.threads and not s.annotations else None
        if k_var is not None:  # a persistent kernel's tile loop (pipeline_ws_tiles)
            s = persistent_tiles(s)
            self.tiles = (s, k_var)
        try:
            s = self.generic_visit(s)
        finally:
            if bound:
                self.threads.pop()
            self.tiles = outer
        assert isinstance(s, For)
        if k_var is not None and self.roles is not None:
            # the roles around the tile loop: the producer over every (tile, k) step, the
            # consumers the tile loop (their K loop, epilogue)
            ws, producer = self.roles
            self.roles = None
            out = seq(ws.init(), ws.stmt(producer, s))
            self._record_ws(out, ws.loop)
            return out
        mine = [w for w in self.ws if w[0] is s.loop_var]
        if mine:  # the producer warpgroup of its warp-specialized pipelines (WS_KEY)
            self.ws = [w for w in self.ws if w[0] is not s.loop_var]
            s = grow_thread_loop(s, mine[0][1], [w[2] for w in mine], mine[0][3])
        if DEPTH_KEY in s.annotations and STAGE_KEY not in s.annotations:
            s = _expand_depth(s)
        if STAGE_KEY not in s.annotations:
            return s
        self.loops += 1
        return self.pipeline(s)

    def pipeline(self, loop: For) -> Stmt:
        name = loop.loop_var.name
        if loop.kind is not ForKind.SERIAL:
            raise PassError(f"pass InjectSoftwarePipeline: loop {name} is {loop.kind.value}; only serial loops pipeline")
        # buffers allocated in the body (fragments cached at this loop) are hoisted around
        # the pipelined loop, so that they can carry values between stages
        inner: list[Allocate] = []
        body = loop.body
        while isinstance(body, Allocate):
            inner.append(body)
            self.allocs[body.buffer] = body
            body = body.body
        stmts = list(body.seq) if isinstance(body, SeqStmt) else [body]
        stages = _ints(loop.annotations[STAGE_KEY], STAGE_KEY, loop)
        order = _ints(loop.annotations.get(ORDER_KEY, list(range(len(stmts)))), ORDER_KEY, loop)
        async_stages = set(_ints(loop.annotations.get(ASYNC_KEY, []), ASYNC_KEY, loop))
        if len(stages) != len(stmts) or sorted(order) != list(range(len(stmts))):
            raise PassError(
                f"pass InjectSoftwarePipeline: loop {name} has {len(stmts)} statements after lowering, "
                f"but {STAGE_KEY}={stages} and {ORDER_KEY}={order} (one stage per statement, the "
                "order a permutation of them)"
            )  # fmt: skip
        if len(async_stages) > 1:
            raise PassError(f"pass InjectSoftwarePipeline: loop {name}: one async stage is supported, got {sorted(async_stages)}")
        if loop.annotations.get("loopir.prefetch_shared"):
            raise PassError(f"pass InjectSoftwarePipeline: loop {name} also asks for the register prefetch; "
                            "a pipelined loop needs none (drop loopir.prefetch_shared)")  # fmt: skip
        # asynchronous wgmma: a wait statement after each compute, one stage later
        stmts, stages, order, retire = with_retiring_waits(loop, stmts, stages, order)
        accesses = [_accessed(s) for s in stmts]
        versions = self._versions(name, stages, accesses, order)
        if loop.annotations.get(TMA_KEY) and async_stages:
            # one barrier per version for every tile of a step: the tiles versioned alike, as
            # many as the one read latest needs (FlashAttention's V, read a stage after K)
            tiles = {b for st, (_, w) in zip(stages, accesses) if st in async_stages for b in w}
            most = max((versions.get(b, 1) for b in tiles), default=1)
            versions.update({b: most for b in tiles if most > 1})
        new = {}
        for buf, v in versions.items():
            new[buf] = (_multi_buffered(buf, v), v)
            self.replaced[buf] = new[buf][0]
        persistent = self.tiles is not None and self.tiles[1] is loop.loop_var and bool(loop.annotations.get(WS_KEY))
        step = Var(f"{name}_step", loop.loop_var.dtype) if persistent else None
        stmts = [_Versioned(new, loop, step).visit(s) for s in stmts]
        producers = {b for s, (_, w) in zip(stages, accesses) if s in async_stages for b in w}
        async_src = next(iter(async_stages), None)
        tma = None
        if loop.annotations.get(TMA_KEY):
            tma = self._tma(loop, stmts, stages, async_src, new)
        if loop.annotations.get(WS_KEY):
            out = self._ws(loop, stmts, stages, order, async_src, retire, tma, step)
        else:
            out = self._steps(loop, stmts, stages, order, async_src, producers, accesses, retire, tma)
            if tma is not None:
                out = seq(tma.init(), out)
        for a in reversed(inner):
            for bar in self.bars.pop(a.buffer, []):  # a TMA pipeline's barriers, with its tile
                out = Allocate(bar, out)
            out = Allocate(new.get(a.buffer, (a.buffer, 1))[0], out)
        if loop.annotations.get(WS_KEY) and not persistent and any(f.thread_tag == "threadIdx.y" for f in self.threads):
            self._record_ws(out, loop)  # (else the roles have a threadIdx.y loop of their own)
        return out

    def _record_ws(self, out: Stmt, loop: For) -> None:
        """Record the roles ``out`` of ``loop``'s pipeline for the enclosing threadIdx.y loop."""
        ty = next(f for f in self.threads if f.thread_tag == "threadIdx.y")
        # by identity: the enclosing threadIdx.y loop keeps these out of its consumers' guard
        # (a sequence is flattened into its parent's: its parts are recorded too)
        for part in [out, *(out.seq if isinstance(out, SeqStmt) else [])]:
            self.ws.append((ty.loop_var, ty.extent.value, part, ws_registers(loop) is not None))  # type: ignore[attr-defined]

    def _ws(self, loop: For, stmts: list[Stmt], stages: list[int], order: list[int], async_src: int | None,
            retire: dict[int, int], tma: TmaPipeline | None, step: Var | None = None) -> Stmt:  # fmt: skip
        """The warp-specialized form of the loop (``WS_KEY``, ``loopir.passes.pipeline_ws``):
        the producer's loop of the async stage's copies, the consumers' of the others. In a
        persistent kernel's tile loop (``step``: the statements' version variable), the
        consumers' loop only: the producer's, over every (tile, k), waits in ``self.roles``
        for the tile loop (``visit_For``)."""
        if tma is None:
            raise PassError(f"pass InjectSoftwarePipeline: loop {loop.loop_var.name}: {WS_KEY} needs {TMA_KEY} "
                            "(the producer issues TMA copies)")  # fmt: skip
        tiles = self.tiles[0] if step is not None and self.tiles is not None else None
        ws = WsPipeline(loop, tma, tiles, step)
        self.bars[next(b for b, bars in self.bars.items() if tma.bar in bars)].append(ws.empty)
        var, lo = loop.loop_var, loop.min
        copies = [i for i in order if stages[i] == async_src]
        computes = [i for i in order if stages[i] != async_src]

        def at(j: PrimExpr) -> list[Stmt]:
            if tiles is None or step is None:
                sub = {var: lo + j}
            else:  # step j of the flattened (tile, k) sequence
                n = loop.extent
                sub = {var: lo + FloorMod(j, n), tiles.loop_var: tiles.min + FloorDiv(j, n), step: j}
            return [fresh_loop_vars(substitute(stmts[c], sub)) for c in copies]

        first = min((stages[i] for i in computes if i not in retire), default=0)
        consumer = ws.consumer(stmts, computes, retire, {i: stages[i] - first for i in computes if i not in retire})
        if tiles is not None:
            self.roles = (ws, ws.producer(at))
            return consumer
        return ws.around(seq(ws.init(), ws.stmt(ws.producer(at), consumer)))

    def _tma(self, loop: For, stmts: list[Stmt], stages: list[int], async_src: int | None,
             new: dict[Buffer, tuple[Buffer, int]]) -> TmaPipeline:  # fmt: skip
        """The TMA form of the loop (``TMA_KEY``): one version count for the async stage's
        tiles, their barriers allocated with the first."""
        name = loop.loop_var.name
        if async_src is None:
            raise PassError(f"pass InjectSoftwarePipeline: loop {name}: {TMA_KEY} needs an async stage "
                            "(software_pipeline_async_stages) whose copies become TMA copies")  # fmt: skip
        orig = {nb: (b, v) for b, (nb, v) in new.items()}  # the statements name the versioned buffers
        written = [orig[b][0] if b in orig else b for s, st in zip(stmts, stages) if st == async_src
                   for b in _accessed(s)[1]]  # fmt: skip
        counts = {new[b][1] if b in new else 1 for b in written}
        if len(counts) != 1 or 1 in counts or not written:
            raise PassError(f"pass InjectSoftwarePipeline: loop {name}: {TMA_KEY} needs the async stage's tiles "
                            f"({', '.join(b.name for b in written)}) versioned alike, got "
                            f"{sorted(counts)} versions")  # fmt: skip
        tma = TmaPipeline(loop, counts.pop(), self.threads, stmts)
        self.bars[written[0]] = [tma.bar]
        return tma

    def _versions(self, name: str, stages: list[int], accesses: list[tuple[set[Buffer], set[Buffer]]],
                  order: list[int]) -> dict[Buffer, int]:  # fmt: skip
        """The versions of each buffer passing between stages: the iterations whose values are
        live at once. The reader of iteration ``k`` (stage ``s_r``) runs in step ``k + s_r``,
        after the writers of iterations ``k + 1 .. k + s_r - s_w - 1``, and after that of ``k +
        s_r - s_w`` too when the step's order puts the writer first: ``s_r - s_w + 1``
        versions, one fewer when the reader comes first in the step (so a register buffer
        written in stage 0 after its stage-1 reader in the step's order needs no second
        version, and no dynamic index)."""
        pos = {i: p for p, i in enumerate(order)}
        out: dict[Buffer, int] = {}
        for w, (sw, (_, writes)) in enumerate(zip(stages, accesses)):
            for r, (sr, (reads, _)) in enumerate(zip(stages, accesses)):
                for b in writes & reads:
                    if sr < sw:
                        raise PassError(f"pass InjectSoftwarePipeline: loop {name}: {b.name} is written in stage "
                                        f"{sw} and read in the earlier stage {sr}")  # fmt: skip
                    if sr > sw:
                        if b not in self.allocs or b.scope not in ("shared", "local", "warp"):
                            raise PassError(f"pass InjectSoftwarePipeline: loop {name}: {b.name} passes between "
                                            "stages but is not a shared, local or warp buffer allocated around "
                                            "the loop")  # fmt: skip
                        need = sr - sw + (1 if pos[w] < pos[r] else 0)
                        if need > 1:
                            out[b] = max(out.get(b, 1), need)
        return out

    def _steps(self, loop: For, stmts: list[Stmt], stages: list[int], order: list[int], async_src: int | None,
               producers: set[Buffer], accesses: list[tuple[set[Buffer], set[Buffer]]],
               retire: dict[int, int], tma: TmaPipeline | None = None) -> Stmt:  # fmt: skip
        top = max(stages)
        wait_first = bool(loop.annotations.get(WAIT_FIRST_KEY)) and async_src is not None
        n, lo, var = loop.extent, loop.min, loop.loop_var
        ana = arith.Analyzer()
        last_async = max((p for p, i in enumerate(order) if stages[i] == async_src), default=None)

        def at(i: int, step: PrimExpr) -> Stmt:
            # each copy of a statement (prologue, steady state, epilogue) defines its own loops
            s: Stmt = fresh_loop_vars(substitute(stmts[i], {var: lo + (step - stages[i])}))
            if stages[i] == async_src:
                s = _mark_async(s)
            return s

        def consumes(i: int, live: Sequence[int]) -> bool:
            # a wgmma wait reads the tiles its compute read: the copies were waited for then
            return i not in retire and async_src is not None and bool(accesses[i][0] & producers) and stages[i] > async_src and i in live

        consumer_stages = {stages[i] for i in range(len(stmts)) if consumes(i, range(len(stmts)))}
        if tma is not None and len(consumer_stages) != 1:
            raise PassError(f"pass InjectSoftwarePipeline: loop {var.name}: {TMA_KEY} needs the copies' readers "
                            f"in one stage, got stages {sorted(consumer_stages)}")  # fmt: skip

        def tma_wait(i: int, step: PrimExpr, guard: Any) -> Stmt:
            assert tma is not None
            g, w = guard(i), tma.wait(step - stages[i])
            return w if g is None else IfThenElse(g, w)

        def step_body(step: PrimExpr, live: Sequence[int], guard: Any) -> Stmt:
            out: list[Stmt] = []
            first = [i for i in order if consumes(i, live)] if wait_first else []
            if first:  # one wait and one barrier before the step's copies (WAIT_FIRST_KEY)
                assert async_src is not None
                s_min = min(stages[i] for i in first)
                if tma is not None:
                    out.append(tma_wait(next(i for i in first if stages[i] == s_min), step, guard))
                else:
                    out.append(Evaluate(cp_async_wait(s_min - async_src - 1)))
                out.append(Evaluate(op.storage_sync("shared")))
            issued = False
            for pos, i in enumerate(order):
                if consumes(i, live) and not wait_first:
                    assert async_src is not None
                    if tma is not None:
                        out.append(tma_wait(i, step, guard))
                    else:
                        committed = last_async is not None and last_async < pos
                        out.append(Evaluate(cp_async_wait(stages[i] - async_src - 1 + int(committed))))
                    out.append(Evaluate(op.storage_sync("shared")))
                if tma is not None and i in live and stages[i] == async_src:
                    if not issued:  # the step's copies, one issue (all in stage async_src: one guard)
                        copies = [fresh_loop_vars(substitute(stmts[c], {var: lo + (step - stages[c])}))
                                  for c in order if c in live and stages[c] == async_src]  # fmt: skip
                        g = guard(i)
                        body = tma.issue(step - stages[i], copies)
                        out.append(body if g is None else IfThenElse(g, body))
                        issued = True
                    continue
                if i in live:
                    g = guard(i)
                    body = at(i, step)
                    if i in retire and retire[i] not in live:
                        body = set_pending(body)  # the last wait: nothing issued after its MMAs
                    out.append(body if g is None else IfThenElse(g, body))
                if async_src is not None and pos == last_async and tma is None:
                    out.append(Evaluate(cp_async_commit()))
            return seq(*out)

        def cond(e: PrimExpr) -> PrimExpr | None:
            return None if ana.can_prove(e) else e

        prologue = [step_body(IntImm(p, var.dtype), [i for i in range(len(stmts)) if stages[i] <= p],
                              lambda i, p=p: cond(LT(IntImm(p - stages[i], n.dtype), n))) for p in range(top)]  # fmt: skip
        i_var = Var(f"{var.name}_steady", var.dtype)
        body = For(i_var, 0, ana.simplify(Max(n - top, IntImm(0, n.dtype))), ForKind.SERIAL,
                   step_body(i_var + top, range(len(stmts)), lambda i: None))  # fmt: skip
        # an epilogue step before ``top`` (fewer iterations than stages) ran in the prologue
        epilogue = [step_body(n + e, [i for i in range(len(stmts)) if stages[i] > e],
                              lambda i, e=e: cond(And(GE(n + (e - stages[i]), IntImm(0, n.dtype)),
                                                      GE(n + e, IntImm(top, n.dtype)))))
                    for e in range(top)]  # fmt: skip
        return seq(*prologue, body, *epilogue)


def _expand_depth(loop: For) -> For:
    """The stage annotations [`DEPTH_KEY`][loopir.passes.software_pipeline.DEPTH_KEY] stands for
    (the loop unchanged for depth 1)."""
    depth = loop.annotations[DEPTH_KEY]
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise PassError(f"pass InjectSoftwarePipeline: loop {loop.loop_var.name}: {DEPTH_KEY} must be a "
                        f"positive int, got {depth!r}")  # fmt: skip
    if depth == 1:
        return loop
    n = len(loop.body.seq) if isinstance(loop.body, SeqStmt) else 1
    if n < 2:
        raise PassError(f"pass InjectSoftwarePipeline: loop {loop.loop_var.name}: {DEPTH_KEY} needs fetches "
                        "followed by a compute statement; the body has one statement")  # fmt: skip
    ann = {**loop.annotations, STAGE_KEY: [0] * (n - 1) + [depth - 1], ASYNC_KEY: [0]}
    if ann.get(MMA_IN_FLIGHT_KEY):
        # a sampled depth with wgmma in flight (a design space): the compute a stage earlier, so
        # that its retiring wait takes the last; below 3 stages no version is left for the
        # group in flight, and the MMAs complete in their step
        if depth >= 3:
            ann[STAGE_KEY] = [0] * (n - 1) + [depth - 2]
        else:
            del ann[MMA_IN_FLIGHT_KEY]
    return attrs.evolve(loop, annotations=ann)


def _mark_async(s: Stmt) -> Stmt:
    """Mark the statement's loops (or the statement, wrapped in a unit loop) as async copies."""
    if isinstance(s, For):
        return attrs.evolve(s, annotations={**s.annotations, ASYNC_COPY_KEY: 1})
    if isinstance(s, IfThenElse):
        return attrs.evolve(s, then_case=_mark_async(s.then_case))
    v = Var("async_unit", "int32")
    return For(v, 0, 1, ForKind.SERIAL, s, annotations={ASYNC_COPY_KEY: 1})


class InjectSoftwarePipeline(Pass):
    """Pipeline loops annotated ``software_pipeline_stage`` (see the module docstring)."""

    name = "InjectSoftwarePipeline"
    opt_level = 0
    required = False

    def transform(self, func: PrimFunc, ctx: PassContext) -> PrimFunc:
        require_lowered(func, self.name)
        rw = _Rewrite(func)
        body = rw.visit(func.body)
        if not rw.loops:
            return func
        from loopir.passes.simplify import Simplify

        # the steps' iteration expressions (i + S - s) folded into the indices
        return Simplify()(func.with_body(body))
