"""A GPU schedule fuzzer and campaign driver: structured random thread-bound schedules.

The generic schedule fuzzer ([`loopir.testing.fuzz`][loopir.testing.fuzz]) binds only top-level loop
nests, so it never builds the kernels that were found wrong on a GPU: sibling threadIdx nests that
share a shared buffer, cooperative fetches bound to the compute's thread tags, transposes through
shared tiles, two-level reductions (per-thread partials in shared memory, combined by a second
stage), 2-D thread blocks with extent-1 axes, local accumulators written back under the thread loop,
inexact splits and virtual threads.
[`random_gpu_schedule`][loopir.testing.gpu_fuzz.random_gpu_schedule] draws such schedules with the
public [`Schedule`][loopir.schedule.schedule.Schedule] API from a few workload families, and
[`run_case`][loopir.testing.gpu_fuzz.run_case] checks one: the scheduled and the lowered function on
the CPU executor (the lowered one with threads in random order, so a missing barrier shows), then
the CUDA build, and on a GPU the kernel's outputs against the CPU executor's.

Campaign (a process pool, one CUDA context and one cache directory per worker)::

    python -m loopir.testing.gpu_fuzz --schedules 2000 --workers 16 --target cuda --out r.json

Outcomes of [`run_case`][loopir.testing.gpu_fuzz.run_case]
([`OUTCOMES`][loopir.testing.gpu_fuzz.OUTCOMES]): ``equal``; ``wrong`` (the GPU differs from the
CPU); ``refused`` (a clear ScheduleError, PassError or CodegenError); ``race-refused`` (the race
checker refused a proven race); ``cpu-mismatch`` (the scheduled or lowered function differs from the
workload on the CPU); ``crash`` (anything else); ``gen-refused`` (a core step of the generated
schedule was refused: nothing to check). ``compiled`` is ``equal``'s counterpart for
``target="compile"`` (nvcc built the module; nothing ran on a GPU).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from loopir.errors import CodegenError, LoopIRError, PassError, ScheduleError
from loopir.ir.expr import IntImm
from loopir.ir.stmt import Block, For, PrimFunc

logger = logging.getLogger(__name__)

OUTCOMES = ("equal", "compiled", "wrong", "refused", "race-refused", "cpu-mismatch", "crash",
            "gen-refused")  # fmt: skip
"""Every outcome [`run_case`][loopir.testing.gpu_fuzz.run_case] can return."""
BAD_OUTCOMES = frozenset({"wrong", "cpu-mismatch", "crash"})
"""Outcomes that are bugs: the campaign exits 1 when any occurs."""
FAMILIES = ("matmul", "matmul_bias", "transpose", "ew_chain", "row_reduce", "two_level")
"""Workload families [`random_gpu_schedule`][loopir.testing.gpu_fuzz.random_gpu_schedule] draws
from."""


@attrs.frozen(eq=False, repr=False)
class GpuCase:
    """One generated case (its repr is one line: how to draw it again, and what it is).

    Attributes
    ----------
    seed
        The seed it was drawn from (``random_gpu_schedule(seed)`` gives it again).
    family
        The workload family (one of [`FAMILIES`][loopir.testing.gpu_fuzz.FAMILIES]).
    base
        The unscheduled workload function: the reference.
    func
        The scheduled function; None when a core step was refused (see ``error``).
    sizes
        The workload's sizes, by name (all static; for the description).
    description
        One line: family, sizes and the schedule's main choices.
    trace
        The schedule's trace as runnable Python (``def apply_trace(sch): ...``).
    skipped
        Optional steps that were refused with a ScheduleError and skipped, one line each.
    error
        Why generation stopped, when ``func`` is None.
    """

    seed: int
    family: str
    base: PrimFunc
    func: PrimFunc | None
    sizes: dict[str, int]
    description: str
    trace: str
    skipped: tuple[str, ...] = ()
    error: str | None = None

    def __repr__(self) -> str:
        return f"<GpuCase random_gpu_schedule({self.seed}, {self.family!r}): {self.description}>"


@attrs.frozen
class Outcome:
    """What [`run_case`][loopir.testing.gpu_fuzz.run_case] found: ``kind`` (one of
    [`OUTCOMES`][loopir.testing.gpu_fuzz.OUTCOMES]), a message (the first line of the error, the max
    error of a wrong result, or a traceback for a crash) and the maximum absolute error when the GPU
    result was compared."""

    kind: str
    message: str = ""
    max_error: float | None = None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


class _Gen:
    """State of one generation: the schedule, the random source, notes and skipped steps."""

    def __init__(self, rng: random.Random, base: PrimFunc) -> None:
        from loopir.schedule import Schedule

        self.rng = rng
        self.sch = Schedule(base)
        self.notes: list[str] = []
        self.skipped: list[str] = []

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, options: Sequence[Any]) -> Any:
        return self.rng.choice(list(options))

    def optional(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run an optional step; a refusal (ScheduleError) skips it and is recorded."""
        before = self.sch.func
        try:
            out = fn()
        except ScheduleError as e:
            self.skipped.append(f"{what}: {_first_line(e)}")
            if self.sch.func is not before:
                # the steps before the refused one stay (e.g. a fetch left serial)
                self.notes.append(f"{what} (partly: refused midway)")
            return None
        self.notes.append(what)
        return out

    def extent(self, loop: Any) -> int:
        node = self.sch.get(loop)
        # the workloads have static shapes: every loop has a constant extent
        if not isinstance(node, For) or not isinstance(node.extent, IntImm):
            raise TypeError(f"expected a loop of constant extent, got {node!r}")
        return node.extent.value

    def threads(self) -> tuple[int, int]:
        """(ty, tx) extents of a 2-D thread block; either may be 1, ty * tx <= 256."""
        ty = self.pick([1, 1, 2, 3, 4, 8])
        tx = self.pick([1, 2, 4, 8, 16, 32] if ty <= 8 else [1, 2, 4])
        return ty, tx

    def fetch(self, block: Any, first: int, ty: int, tx: int, what: str) -> None:
        """Cooperative fetch: fuse the copy loops of ``block`` below position ``first`` and
        bind parts of them to threadIdx: the compute's (ty, tx), other extents, only
        threadIdx.x, or nothing (every thread copies everything)."""
        sch = self.sch
        loops = sch.get_loops(block)[first:]
        if not loops:
            return
        # mismatched extents of one tag in a kernel are refused by bind: keep them rare
        mode = self.pick(["same"] * 6 + ["x", "other", "serial"])
        if mode == "serial":
            self.notes.append(f"{what} serial")
            return
        fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        if mode == "same":
            parts = sch.split(fused, [None, ty, tx])
            sch.bind(parts[1], "threadIdx.y")
            sch.bind(parts[2], "threadIdx.x")
        elif mode == "x":
            parts = sch.split(fused, [None, ty * tx])
            sch.bind(parts[1], "threadIdx.x")
        else:
            oy, ox = self.pick([1, 2, 4]), self.pick([1, 2, 8, 32])
            parts = sch.split(fused, [None, oy, ox])
            sch.bind(parts[1], "threadIdx.y")
            sch.bind(parts[2], "threadIdx.x")
            mode = f"other {oy}x{ox}"
        self.notes.append(f"{what} fetch {mode}")


def _te() -> Any:
    from loopir import te

    return te


def _dim(rng: random.Random, hi: int) -> int:
    """A size: often 1 or tiny, often not a multiple of anything."""
    return rng.choice([1, rng.randint(1, 8), rng.randint(1, hi), rng.randint(hi // 2, hi)])


# -- workload families ----------------------------------------------------------------------


def _matmul(g: _Gen, bias: bool) -> None:
    sch, pick = g.sch, g.pick
    blk = sch.get_block("C")
    i, j, k = sch.get_loops(blk)
    ty, tx = g.threads()
    vt = pick([1, 1, 2]) if g.chance(0.5) else 1
    ti, tj, tk = pick([1, 1, 2, 3, 4]), pick([1, 1, 2, 4]), pick([1, 2, 4, 5, 8])
    i0, iv, i1, i2 = sch.split(i, [None, vt, ty, ti])
    j0, j1, j2 = sch.split(j, [None, tx, tj])
    k0, k1 = sch.split(k, [None, tk])
    sch.reorder(i0, j0, iv, i1, j1, k0, k1, i2, j2)
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    if vt > 1 or g.chance(0.2):
        sch.bind(iv, "vthread.y")
    sch.bind(i1, "threadIdx.y")
    sch.bind(j1, "threadIdx.x")
    g.notes.append(f"tiles i[{vt},{ty},{ti}] j[{tx},{tj}] k[{tk}]")
    if g.chance(0.6):
        g.optional("C local at j1", lambda: sch.reverse_compute_at(sch.cache_write(blk, "C", "local"), j1))
    for name in ("A", "B"):
        if not g.chance(0.7):
            continue
        at, pos = (k0, 6) if g.chance(0.75) else (j0, 2)

        def shared(name: str = name, at: Any = at, pos: int = pos) -> None:
            sh = sch.cache_read(blk, name, "shared")
            sch.compute_at(sh, at, preserve_unit_loops=True)
            g.fetch(sh, pos, ty, tx, f"{name}_shared@{'k0' if pos == 6 else 'j0'}")

        g.optional(f"{name} shared", shared)
    if g.chance(0.5):
        g.optional("decompose at k0", lambda: sch.decompose_reduction(blk, k0))
    if bias:
        d = sch.get_block("D")
        how = pick(["at j1", "own kernel", "own kernel"])
        if how == "at j1":
            g.optional("D at j1", lambda: sch.reverse_compute_at(d, j1))
        else:
            _own_kernel(g, d)


def _own_kernel(g: _Gen, blk: Any) -> None:
    """Bind a 2-D stage as its own kernel: blockIdx.y/x over tiles, threadIdx.y/x inside."""
    sch = g.sch
    i, j = sch.get_loops(blk)
    ty, tx = g.threads()
    i0, i1 = sch.split(i, [None, ty])
    j0, j1 = sch.split(j, [None, tx])
    sch.reorder(i0, j0, i1, j1)
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    sch.bind(i1, "threadIdx.y")
    sch.bind(j1, "threadIdx.x")
    block = sch.get(blk)
    assert isinstance(block, Block)  # the node of a BlockRV
    g.notes.append(f"{block.name} own kernel {ty}x{tx}")


def _transpose(g: _Gen) -> None:
    sch, pick = g.sch, g.pick
    b = sch.get_block("B")
    j, i = sch.get_loops(b)
    tj, ti = pick([4, 8, 16, 32, 12]), pick([4, 8, 16, 32, 10])
    ty = pick([d for d in (1, 2, 4, 8, 3) if d <= tj])
    j0, j1 = sch.split(j, [None, tj])
    i0, i1 = sch.split(i, [None, ti])
    j10, j11 = sch.split(j1, [None, ty])
    sch.reorder(j0, i0, j11, i1, j10)
    sch.bind(j0, "blockIdx.y")
    sch.bind(i0, "blockIdx.x")
    sch.bind(j11, "threadIdx.y")
    sch.bind(i1, "threadIdx.x")
    g.notes.append(f"tile {tj}x{ti} threads {ty}x{ti}")
    if g.chance(0.85):
        def shared() -> None:
            ash = sch.cache_read(b, "A", "shared")
            sch.compute_at(ash, i0, preserve_unit_loops=True)
            ax0, ax1 = sch.get_loops(ash)[2:]
            mode = pick(["same", "same", "fused", "serial"])
            if mode == "same":
                # rows of the tile over threadIdx.y, its columns over threadIdx.x (ti wide)
                a0, a1 = sch.split(ax0, [None, ty])
                c0, c1 = sch.split(ax1, [None, ti])
                sch.reorder(a0, c0, a1, c1)
                sch.bind(a1, "threadIdx.y")
                sch.bind(c1, "threadIdx.x")
            elif mode == "fused":
                _, t1, t2 = sch.split(sch.fuse(ax0, ax1), [None, ty, ti])
                sch.bind(t1, "threadIdx.y")
                sch.bind(t2, "threadIdx.x")
            g.notes.append(f"A_shared fetch {mode}")

        g.optional("A shared", shared)


def _ew_chain(g: _Gen) -> None:
    sch, pick = g.sch, g.pick
    c = sch.get_block("C")
    i, j = sch.get_loops(c)
    ty, tx = g.threads()
    vt = pick([1, 2]) if g.chance(0.4) else 1
    i0, i1, i2 = sch.split(i, [None, ty, pick([1, 2, 3])])
    j0, jv, j1 = sch.split(j, [None, vt, tx])
    sch.reorder(i0, j0, jv, i1, j1, i2)
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    if vt > 1:
        sch.bind(jv, "vthread.x")
    sch.bind(i1, "threadIdx.y")
    sch.bind(j1, "threadIdx.x")
    g.notes.append(f"threads {ty}x{tx} vthread {vt}")
    t = sch.get_block("T")
    how = pick(["inline", "shared", "shared", "at block", "own kernel"])
    if how == "inline":
        g.optional("T inline", lambda: sch.compute_inline(t))
    elif how == "own kernel":
        _own_kernel(g, t)
    elif how == "at block":
        # T computed per block into the global intermediate by the block's threads
        def at_block() -> None:
            sch.compute_at(t, j0, preserve_unit_loops=True)
            g.fetch(t, 2, ty, tx, "T@j0")

        g.optional("T at j0", at_block)
    else:
        def shared() -> None:
            ts = sch.cache_read(c, "T", "shared")
            sch.compute_at(ts, j0, preserve_unit_loops=True)
            g.fetch(ts, 2, ty, tx, "T_shared@j0")

        g.optional("T shared", shared)
        if g.chance(0.5):
            g.optional("T inline", lambda: sch.compute_inline(t))
        else:
            _own_kernel(g, t)
    if g.chance(0.3):
        g.optional("C local at j1", lambda: sch.reverse_compute_at(sch.cache_write(c, "C", "local"), j1))


def _row_reduce(g: _Gen) -> None:
    sch, pick = g.sch, g.pick
    s = sch.get_block("S")
    i, k = sch.get_loops(s)
    ty, tx = g.threads()
    tk = pick([1, 2, 4, 7, 8, 16])
    i0, i1, i2 = sch.split(i, [None, ty, tx])
    k0, k1 = sch.split(k, [None, tk])
    sch.bind(i0, "blockIdx.x")
    sch.bind(i1, "threadIdx.y")
    sch.bind(i2, "threadIdx.x")
    g.notes.append(f"threads {ty}x{tx} k[{tk}]")
    if g.chance(0.5):
        g.optional("S local at i2", lambda: sch.reverse_compute_at(sch.cache_write(s, "S", "local"), i2))
    if g.chance(0.7):
        at, pos = (k0, 4) if g.chance(0.6) else (i0, 1)

        def shared() -> None:
            ash = sch.cache_read(s, "A", "shared")
            sch.compute_at(ash, at, preserve_unit_loops=True)
            g.fetch(ash, pos, ty, tx, f"A_shared@{'k0' if pos == 4 else 'i0'}")

        g.optional("A shared", shared)
    if g.chance(0.4):
        g.optional("decompose at k0", lambda: sch.decompose_reduction(s, k0))


def _two_level(g: _Gen) -> None:
    """Stage P writes per-thread partials (P[i, t] over a chunk of the row), S combines them."""
    sch, pick = g.sch, g.pick
    s = sch.get_block("S")
    i, u = sch.get_loops(s)
    nt = g.extent(u)
    ty = pick([1, 1, 2, 4])
    # S: one row per thread of a (ty, nt) block; P: the same threads, threadIdx.x over the
    # partial index t, threadIdx.y over the block's rows (ty at a time)
    i0, i1, i2 = sch.split(i, [None, ty, nt])
    sch.bind(i0, "blockIdx.x")
    sch.bind(i1, "threadIdx.y")
    sch.bind(i2, "threadIdx.x")
    p = sch.get_block("P")
    where = pick(["shared", "shared", "shared", "global"])
    if where == "shared":
        ps = sch.cache_write(p, "P", "shared")
        sch.compute_inline(ps)  # S now reads P_shared
    sch.compute_at(p, i0, preserve_unit_loops=True)
    ax0, ax1 = sch.get_loops(p)[1:3]
    _, a1 = sch.split(ax0, [None, ty])
    sch.bind(a1, "threadIdx.y")
    sch.bind(ax1, "threadIdx.x")
    g.notes.append(f"partials {where}, threads {ty}x{nt}")
    if g.chance(0.3):
        g.optional("P local", lambda: sch.reverse_compute_at(sch.cache_write(p, 0, "local"), ax1))
    if g.chance(0.3):
        g.optional("decompose S", lambda: sch.decompose_reduction(s, sch.get_loops(s)[-1]))


def _workload(family: str, rng: random.Random) -> tuple[PrimFunc, dict[str, int]]:
    te = _te()
    if family in ("matmul", "matmul_bias"):
        M, K, N = _dim(rng, 48), _dim(rng, 40), _dim(rng, 48)
        A = te.placeholder((M, K), "float32", name="A")
        B = te.placeholder((K, N), "float32", name="B")
        k = te.reduce_axis(K, name="k")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        if family == "matmul":
            return te.create_prim_func([A, B, C]), {"M": M, "K": K, "N": N}
        bias = te.placeholder((N,), "float32", name="bias")
        D = te.compute((M, N), lambda i, j: C[i, j] + bias[j], name="D")
        return te.create_prim_func([A, B, bias, D]), {"M": M, "K": K, "N": N}
    if family == "transpose":
        R, Cn = _dim(rng, 100), _dim(rng, 100)
        A = te.placeholder((R, Cn), "float32", name="A")
        B = te.compute((Cn, R), lambda j, i: A[i, j], name="B")
        return te.create_prim_func([A, B]), {"R": R, "C": Cn}
    if family == "ew_chain":
        M, N = _dim(rng, 64), _dim(rng, 64)
        A = te.placeholder((M, N), "float32", name="A")
        B = te.placeholder((M, N), "float32", name="B")
        T = te.compute((M, N), lambda i, j: A[i, j] + B[i, j], name="T")
        # relu(A + B) * B with the intermediate T
        C = te.compute((M, N), lambda i, j: te.if_then_else(T[i, j] > 0.0, T[i, j], 0.0) * B[i, j],
                       name="C")
        return te.create_prim_func([A, B, C]), {"M": M, "N": N}
    if family == "row_reduce":
        M, K = _dim(rng, 64), _dim(rng, 64)
        A = te.placeholder((M, K), "float32", name="A")
        k = te.reduce_axis(K, name="k")
        red = rng.choice([te.sum, te.max])
        S = te.compute((M,), lambda i: red(A[i, k], axis=k), name="S")
        return te.create_prim_func([A, S]), {"M": M, "K": K, "op": 0 if red is te.sum else 1}
    if family == "two_level":
        M, R, nt = _dim(rng, 32), rng.choice([1, 2, 3, 4, 8]), rng.choice([1, 2, 4, 8, 16, 32])
        K = max(1, R * nt - rng.choice([0, 0, R // 2]))  # a last chunk may be short
        A = te.placeholder((M, K), "float32", name="A")
        r = te.reduce_axis(R, name="r")
        P = te.compute((M, nt), lambda i, t: te.sum(A[i, t * R + r], axis=r, where=t * R + r < K),
                       name="P")
        u = te.reduce_axis(nt, name="u")
        S = te.compute((M,), lambda i: te.sum(P[i, u], axis=u), name="S")
        return te.create_prim_func([A, S]), {"M": M, "K": K, "R": R, "T": nt}
    raise LoopIRError(f"gpu_fuzz: unknown family {family!r}; known: {', '.join(FAMILIES)}")


_SCHEDULERS: dict[str, Callable[[_Gen], None]] = {
    "matmul": lambda g: _matmul(g, bias=False),
    "matmul_bias": lambda g: _matmul(g, bias=True),
    "transpose": _transpose,
    "ew_chain": _ew_chain,
    "row_reduce": _row_reduce,
    "two_level": _two_level,
}


def random_gpu_schedule(seed: int, family: str | None = None) -> GpuCase:
    """A random workload of one of [`FAMILIES`][loopir.testing.gpu_fuzz.FAMILIES] with a random
    thread-bound schedule.

    Deterministic per ``seed`` (and ``family``, which defaults to one drawn from the seed).
    Optional steps that a primitive refuses are skipped (listed in ``GpuCase.skipped``); a
    refused core step gives a case with ``func=None`` and the error.
    """
    rng = random.Random(seed)
    family = family if family is not None else rng.choice(FAMILIES)
    base, sizes = _workload(family, rng)
    g = _Gen(rng, base)
    error = None
    try:
        _SCHEDULERS[family](g)
    except ScheduleError as e:
        error = _first_line(e)
    size_text = ",".join(f"{k}={v}" for k, v in sizes.items())
    desc = f"{family}({size_text}): " + "; ".join(g.notes)
    if error is not None:
        desc += f"; refused: {error}"
    return GpuCase(
        seed=seed, family=family, base=base, func=None if error else g.sch.func, sizes=sizes,
        description=desc, trace=g.sch.trace.as_python(), skipped=tuple(g.skipped), error=error,
    )  # fmt: skip


# -- features of generated IR (what the tests assert the generator reaches) ------------------


def features(func: PrimFunc) -> set[str]:
    """Which of the GPU-fuzz features the scheduled ``func`` has.

    - ``sibling-shared``: a shared buffer written under one threadIdx-bound loop and read
      under a different (sibling) one: a cooperative fetch, a transpose tile, partials.
    - ``2d-block-extent1``: threadIdx.x and threadIdx.y both bound, one loop of extent 1.
    - ``two-level-reduction``: a reduction block reads a shared buffer that another
      reduction block writes.
    - ``transpose-shared``: a shared tile read with its index axes swapped.
    - ``vthread``: a loop bound to ``vthread.*``.
    - ``predicate``: a block with a non-trivial predicate (an inexact split).
    - ``local-accumulator``: a local buffer written by a reduction block.
    """
    from loopir.ir.stmt import BlockRealize, IterKind

    found: set[str] = set()
    tags: dict[str, list[int]] = {}
    writers: dict[Any, list[tuple[tuple[int, ...], bool]]] = {}
    readers: dict[Any, list[tuple[tuple[int, ...], bool, Block]]] = {}

    def walk(node: Any, threads: tuple[int, ...]) -> None:
        if isinstance(node, For):
            tag = node.thread_tag
            if tag:
                if isinstance(node.extent, IntImm):
                    tags.setdefault(tag, []).append(int(node.extent.value))
                if tag.startswith("vthread"):
                    found.add("vthread")
                if tag.startswith("threadIdx"):
                    threads = (*threads, id(node))
            walk(node.body, threads)
            return
        if isinstance(node, BlockRealize):
            if not (isinstance(node.predicate, IntImm) and node.predicate.value):
                found.add("predicate")
            blk = node.block
            red = any(iv.kind is IterKind.REDUCE for iv in blk.iter_vars)
            for w in blk.writes:
                writers.setdefault(w.buffer, []).append((threads, red))
                if red and w.buffer.scope == "local":
                    found.add("local-accumulator")
            for r in blk.reads:
                readers.setdefault(r.buffer, []).append((threads, red, blk))
            walk(blk.body, threads)
            return
        for child in _children(node):
            walk(child, threads)

    walk(func.body, ())
    if {"threadIdx.x", "threadIdx.y"} <= set(tags) and 1 in tags["threadIdx.x"] + tags["threadIdx.y"]:
        found.add("2d-block-extent1")
    for buf, ws in writers.items():
        if buf.scope != "shared":
            continue
        for rt, rred, rblk in readers.get(buf, []):
            for wt, wred in ws:
                if wt and rt and wt != rt:
                    found.add("sibling-shared")
                if wred and rred:
                    found.add("two-level-reduction")
            if _swapped_read(rblk, buf):
                found.add("transpose-shared")
    return found


def _children(node: Any) -> list[Any]:
    from loopir.ir.stmt import Stmt

    out = []
    for f in attrs.fields(type(node)):
        v = getattr(node, f.name)
        if isinstance(v, Stmt):
            out.append(v)
        elif isinstance(v, tuple):
            out.extend(x for x in v if isinstance(x, Stmt))
    return out


def _swapped_read(blk: Any, buf: Any) -> bool:
    """Whether ``blk`` reads 2-D ``buf`` at [v1, v0] for its iter vars (v0, v1)."""
    from loopir.ir.expr import BufferLoad, Var
    from loopir.ir.functor import post_order_visit

    ivs = [iv.var for iv in blk.iter_vars]
    hit = False

    def visit(n: Any) -> None:
        nonlocal hit
        if isinstance(n, BufferLoad) and n.buffer is buf and len(n.indices) == 2 and len(ivs) == 2:
            a, b = n.indices
            hit = hit or (isinstance(a, Var) and isinstance(b, Var) and a is ivs[1] and b is ivs[0])

    post_order_visit(blk.body, visit)
    return hit


# -- running a case ---------------------------------------------------------------------------


def _cpu_options() -> dict[str, Any]:
    from loopir.testing.fuzz_support import _fast_build_options

    return _fast_build_options()


def run_case(case: GpuCase, target: str = "cuda", cache_dir: str | Path | None = None) -> Outcome:
    """Check one case: CPU first, then the CUDA build (and, with ``target="cuda"``, a run).

    Parameters
    ----------
    case
        From [`random_gpu_schedule`][loopir.testing.gpu_fuzz.random_gpu_schedule].
    target : {"cuda", "compile"}
        ``"compile"`` stops once nvcc compiled the module (no GPU needed).
    cache_dir
        nvcc cache directory of the CUDA build.

    Returns
    -------
    Outcome
        See [`OUTCOMES`][loopir.testing.gpu_fuzz.OUTCOMES].
    """
    import loopir
    from loopir.testing import EquivalenceError, check_equivalent

    if target not in ("cuda", "compile"):
        raise LoopIRError(f"run_case: target must be 'cuda' or 'compile', got {target!r}")
    if case.func is None:
        return Outcome("gen-refused", case.error or "")
    opts = _cpu_options()
    stage = "cpu"
    try:
        # the schedule keeps the workload's meaning (sequential), ...
        check_equivalent(case.base, case.func, build_options=opts)
        stage = "lower"
        try:
            lowered = loopir.lower(case.func)
        except (PassError, ScheduleError, CodegenError) as e:
            return Outcome("refused", f"lower: {_first_line(e)}")
        stage = "cpu-lowered"
        # ... and so does the lowered function with its threads in a random order
        try:
            check_equivalent(case.base, lowered, build_options=opts)
        except EquivalenceError as e:
            return _random_order_mismatch(case, lowered, e, opts, cache_dir)
        stage = "build"
        if target == "compile":
            mod = loopir.build(case.func, target="cuda", cache_dir=cache_dir)
            if not mod.kernels and not mod.library_calls:
                return Outcome("crash", "the CUDA module has no kernel")
            return Outcome("compiled")
        stage = "gpu"
        return _run_gpu(case, cache_dir)
    except EquivalenceError as e:
        return Outcome("cpu-mismatch", f"{stage}: {_first_line(e)}")
    except CodegenError as e:
        if str(e).startswith("race check"):
            return Outcome("race-refused", _first_line(e))
        return Outcome("refused", f"{stage}: {_first_line(e)}")
    except (PassError, ScheduleError) as e:
        return Outcome("refused", f"{stage}: {_first_line(e)}")
    except Exception as e:  # a crash is a finding: keep its traceback
        return Outcome("crash", f"{stage}: {_first_line(e)}\n{traceback.format_exc(limit=8)}")


def _random_order_mismatch(case: GpuCase, lowered: PrimFunc, err: Exception,
                           opts: dict[str, Any], cache_dir: str | Path | None) -> Outcome:
    """The lowered function's threads race on the CPU. Still right in thread order: a race
    the CUDA build's race checker must refuse ("race-refused"); if the checker lets it
    through, or the function is wrong even sequentially, it is a "cpu-mismatch"."""
    import loopir
    from loopir.testing import EquivalenceError, check_equivalent

    msg = f"cpu-lowered: {_first_line(err)}"
    try:
        check_equivalent(case.base, lowered, build_options=opts, thread_order="sequential")
    except EquivalenceError as e:
        return Outcome("cpu-mismatch", f"cpu-lowered (sequential order): {_first_line(e)}")
    try:
        loopir.build(case.func, target="cuda", cache_dir=cache_dir)
    except CodegenError as e:
        if str(e).startswith("race check"):
            return Outcome("race-refused", f"{_first_line(e)} (random-order CPU run differs too)")
        return Outcome("cpu-mismatch", f"{msg}; the CUDA build refuses it: {_first_line(e)}")
    except (PassError, ScheduleError) as e:
        return Outcome("cpu-mismatch", f"{msg}; the CUDA build refuses it: {_first_line(e)}")
    return Outcome("cpu-mismatch", f"{msg}; the race checker lets it through")


def _run_gpu(case: GpuCase, cache_dir: str | Path | None) -> Outcome:
    import loopir
    from loopir.testing import TOLERANCES, random_inputs, run_cpu

    mod = loopir.build(case.func, target="cuda", cache_dir=cache_dir)
    inputs = random_inputs(case.base, seed=case.seed)
    expected = run_cpu(case.base, inputs, _cpu_options())
    got = [np.array(x, copy=True) for x in inputs]
    mod(*got)
    rtol, atol = TOLERANCES["float32"]
    worst = 0.0
    for p, x, y in zip(case.base.params, expected, got):
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        bad = ~np.isclose(x64, y64, rtol=rtol, atol=atol, equal_nan=True)
        err = float(np.nanmax(np.abs(x64 - y64), initial=0.0))
        if np.isnan(y64).any() != np.isnan(x64).any():
            err = float("inf")
        worst = max(worst, err)
        if bad.any():
            idx = tuple(int(v) for v in np.argwhere(bad)[0])
            return Outcome(
                "wrong",
                f"parameter {p.name} differs at {idx}: {x[idx]!r} (CPU) vs {y[idx]!r} (GPU); "
                f"{int(bad.sum())} of {bad.size} elements; max error {err:.3g}",
                err,
            )
    return Outcome("equal", max_error=worst)


# -- the campaign -----------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _init_worker(root: str, target: str) -> None:
    import tempfile
    import warnings

    from loopir.passes.race_check import RaceCheckWarning

    # the race checker's "cannot prove" warnings are expected here; the counts matter
    warnings.simplefilter("ignore", RaceCheckWarning)
    logging.getLogger("loopir").setLevel(logging.ERROR)
    _WORKER["cache"] = tempfile.mkdtemp(prefix="worker-", dir=root)
    _WORKER["target"] = target


def _work(seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        case = random_gpu_schedule(seed)
    except Exception as e:
        return {"seed": seed, "family": "?", "outcome": "crash", "description": "generation",
                "message": f"{_first_line(e)}\n{traceback.format_exc(limit=8)}", "seconds": 0.0}
    out = run_case(case, _WORKER["target"], cache_dir=_WORKER["cache"])
    return {
        "seed": seed, "family": case.family, "outcome": out.kind, "description": case.description,
        "message": out.message, "max_error": out.max_error, "skipped": list(case.skipped),
        "seconds": round(time.perf_counter() - t0, 3),
    }  # fmt: skip


def campaign(
    n: int, first_seed: int = 0, workers: int = 1, target: str = "cuda",
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Run ``n`` cases (seeds ``first_seed...``) in a spawn-context process pool; returns one
    record per case (seed, family, outcome, description, message, seconds)."""
    import multiprocessing as mp
    import tempfile

    records: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="loopir-gpu-fuzz-") as root:
        ctx = mp.get_context("spawn")
        with ctx.Pool(max(1, workers), initializer=_init_worker, initargs=(root, target)) as pool:
            seeds = range(first_seed, first_seed + n)
            for rec in pool.imap_unordered(_work, seeds, chunksize=1):
                records.append(rec)
                if progress is not None and (len(records) % 100 == 0 or len(records) == n):
                    counts = Counter(r["outcome"] for r in records)
                    progress(f"[{len(records)}/{n}] {time.perf_counter() - t0:.0f}s "
                             + " ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    return sorted(records, key=lambda r: r["seed"])


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``python -m loopir.testing.gpu_fuzz --schedules N --first-seed S --workers W
    --target cuda|compile --out results.json``; exits 1 on any wrong, cpu-mismatch or crash."""
    ap = argparse.ArgumentParser(prog="python -m loopir.testing.gpu_fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--schedules", type=int, default=100)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--target", choices=("cuda", "compile"), default="cuda")
    ap.add_argument("--out", type=Path, default=None, help="JSON file for every non-equal case")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    records = campaign(args.schedules, args.first_seed, args.workers, args.target,
                       progress=lambda line: print(line, flush=True))
    counts = Counter(r["outcome"] for r in records)
    fam = Counter((r["family"], r["outcome"]) for r in records)
    print(f"{len(records)} schedules in {time.perf_counter() - t0:.0f}s ({args.target}):")
    for kind in OUTCOMES:
        if counts[kind]:
            per = ", ".join(f"{f} {fam[f, kind]}" for f in FAMILIES if fam[f, kind])
            print(f"  {kind:13s} {counts[kind]:6d}   ({per})")
    bad = [r for r in records if r["outcome"] in BAD_OUTCOMES]
    for r in bad[:20]:
        print(f"  {r['outcome']} seed {r['seed']}: {r['description']}\n    {r['message'].splitlines()[0]}")
    if args.out is not None:
        keep = [r for r in records if r["outcome"] not in ("equal", "compiled")]
        args.out.write_text(json.dumps({"target": args.target, "counts": dict(counts), "cases": keep}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
