"""Helpers shared by the pass tests: running functions, inspecting lowered IR."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

import loopir
from loopir.ir import dtype as dt
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Stmt,
)
from loopir.passes import (
    CompactBufferAllocation,
    InjectVirtualThread,
    LocalPadding,
    LowerBlocks,
    Pass,
    PassContext,
    Sequential,
    Simplify,
    ThreadSync,
)


def inputs(func: PrimFunc, seed: int = 0, sizes: dict[str, int] | None = None) -> list[np.ndarray]:
    """Random never-zero arrays for every param (outputs too; they are overwritten)."""
    rng = np.random.default_rng(seed)
    out = []
    for b in func.params:
        shape = []
        for s in b.shape:
            shape.append(int(s.value) if hasattr(s, "value") else int((sizes or {})[s.name]))
        if dt.is_float(b.dtype):
            mag = rng.uniform(0.5, 1.5, size=shape)
            sign = rng.choice([-1.0, 1.0], size=shape)
            out.append((mag * sign).astype(dt.to_numpy(b.dtype)))
        else:
            v = rng.integers(1, 6, size=shape) * rng.choice([-1, 1], size=shape)
            out.append(v.astype(dt.to_numpy(b.dtype)))
    return out


def run_cpu(func: PrimFunc, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    args = [a.copy() for a in arrays]
    loopir.build(func, target="cpu")(*args)
    return args


def run_simt(func: PrimFunc, arrays: Sequence[np.ndarray], seeds: int = 3) -> list[np.ndarray]:
    """Run lowered ``func`` as a GPU may: the CPU executor with the threads of each block in
    a seeded random order between barriers (shared memory starts as junk), for ``seeds``
    orders that must agree bit for bit; returns the first order's outputs."""
    mod = loopir.build(func, target="cpu", thread_order="random", seed=0)
    first: list[np.ndarray] | None = None
    for seed in range(seeds):
        args = [a.copy() for a in arrays]
        mod.seed = seed
        mod(*args)
        if first is None:
            first = args
        else:
            for x, y in zip(first, args):
                np.testing.assert_array_equal(x, y, err_msg=f"thread order {seed} differs")
    assert first is not None
    return first


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    if dt.is_float(str(got.dtype)):
        assert not np.isnan(got).any(), "NaN in output: an element nobody wrote was read"
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    else:
        np.testing.assert_array_equal(got, want)


def sequential_pipeline(pad: bool) -> Pass:
    """The pipeline minus UnifyThreadLoops: keeps the sequential meaning the CPU executor runs."""
    passes: list[Pass] = [LowerBlocks(), CompactBufferAllocation()]
    if pad:
        passes.append(LocalPadding())
    passes += [Simplify(), InjectVirtualThread(), ThreadSync()]
    return Sequential(passes, name="sequential_lower")


def lower_with(func: PrimFunc, pad: bool) -> PrimFunc:
    with PassContext(config={"tir.enable_local_pad": pad}):
        return loopir.lower(func)


def nodes(node: object, cls: type | tuple[type, ...]) -> list:
    out: list = []

    def f(n: object) -> None:
        if isinstance(n, cls):
            out.append(n)

    post_order_visit(node, f)
    return out


def paths(stmt: Stmt) -> Iterator[list[Stmt]]:
    """Every root-to-leaf chain of statements."""
    from loopir.ir.stmt import SeqStmt

    if isinstance(stmt, SeqStmt):
        for s in stmt.seq:
            yield from paths(s)
        return
    kids: list[Stmt] = []
    if isinstance(stmt, (For, Allocate)):
        kids = [stmt.body]
    elif isinstance(stmt, IfThenElse):
        kids = [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    if not kids:
        yield [stmt]
        return
    for k in kids:
        for p in paths(k):
            yield [stmt, *p]


def assert_lowered_form(func: PrimFunc) -> None:
    """The lowered-form contract: well formed, no blocks, each thread tag once on a path."""
    loopir.verify(func)
    assert not nodes(func.body, (Block, BlockRealize))
    for p in paths(func.body):
        tags = [s.thread_tag for s in p if isinstance(s, For) and s.kind is ForKind.THREAD_BINDING]
        assert len(tags) == len(set(tags)), f"thread tag repeated on a path: {tags}"


def store_to(func: PrimFunc, name: str) -> list[BufferStore]:
    return [s for s in nodes(func.body, BufferStore) if s.buffer.name == name]


def guard_of(func: PrimFunc, store: BufferStore) -> list:
    """Conditions of the ifs enclosing ``store`` (outermost first)."""
    found: list = []

    def walk(s: Stmt, conds: list) -> bool:
        if s is store:
            found.extend(conds)
            return True
        if isinstance(s, IfThenElse):
            if walk(s.then_case, [*conds, s.condition]):
                return True
            return s.else_case is not None and walk(s.else_case, conds)
        from loopir.ir.stmt import SeqStmt

        if isinstance(s, SeqStmt):
            return any(walk(c, conds) for c in s.seq)
        if isinstance(s, (For, Allocate)):
            return walk(s.body, conds)
        return False

    assert walk(func.body, []), "store not found"
    return found


def text(e: object) -> str:
    from loopir.ir.printer import expr_to_str

    return expr_to_str(e)


Check = Callable[[PrimFunc], None]
