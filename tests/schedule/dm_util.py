"""Workloads and helpers for the data-movement / inline / reduction / pad primitive tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import loopir
from loopir import te
from loopir.ir.expr import IntImm, Var
from loopir.ir.stmt import Block, BlockRealize, For, PrimFunc
from loopir.schedule import loops as L
from loopir.schedule import tree

# --------------------------------------------------------------------------------------------
# workloads
# --------------------------------------------------------------------------------------------


def matmul(m: int = 16, k: int = 8, n: int = 12) -> PrimFunc:
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C])


def matmul_max(m: int = 16, k: int = 8) -> PrimFunc:
    """Row-wise max: ``C[i] = max_k A[i, k]``."""
    A = te.placeholder((m, k), "float32", name="A")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m,), lambda i: te.max(A[i, r], axis=r), name="C")
    return te.create_prim_func([A, C])


def matmul_bias_relu(m: int = 16, k: int = 8, n: int = 12) -> PrimFunc:
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    bias = te.placeholder((n,), "float32", name="bias")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = te.compute((m, n), lambda i, j: C[i, j] + bias[j], name="D")
    E = te.compute((m, n), lambda i, j: te.max(D[i, j], 0.0), name="E")
    return te.create_prim_func([A, B, bias, E])


def chain(m: int = 16, n: int = 8) -> PrimFunc:
    """``B = A * 2; C = B + 1; D = C * C``: an elementwise chain."""
    A = te.placeholder((m, n), "float32", name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((m, n), lambda i, j: C[i, j] * C[i, j], name="D")
    return te.create_prim_func([A, D])


def conv2d_nhwc(
    n: int = 1, h: int = 6, w: int = 5, ci: int = 3, co: int = 4, kh: int = 3, kw: int = 3,
    pad: int = 1,
) -> PrimFunc:
    """NHWC conv2d with zero padding (a pad stage, then the reduction), stride 1."""
    X = te.placeholder((n, h, w, ci), "float32", name="X")
    W = te.placeholder((kh, kw, ci, co), "float32", name="W")
    hp, wp = h + 2 * pad, w + 2 * pad
    P = te.compute(
        (n, hp, wp, ci),
        lambda b, y, x, c: te.if_then_else(
            (y >= pad) & (y < h + pad) & (x >= pad) & (x < w + pad),
            X[b, y - pad, x - pad, c],
            0.0,
        ),
        name="P",
    )
    ho, wo = hp - kh + 1, wp - kw + 1
    ry = te.reduce_axis(kh, name="ry")
    rx = te.reduce_axis(kw, name="rx")
    rc = te.reduce_axis(ci, name="rc")
    Y = te.compute(
        (n, ho, wo, co),
        lambda b, y, x, f: te.sum(P[b, y + ry, x + rx, rc] * W[ry, rx, rc, f], axis=[ry, rx, rc]),
        name="Y",
    )
    return te.create_prim_func([X, W, Y])


# --------------------------------------------------------------------------------------------
# IR helpers
# --------------------------------------------------------------------------------------------


def realize_of(func: PrimFunc, name: str) -> tuple[BlockRealize, tuple[Any, ...]]:
    hit = tree.find_block_realize(func, name)
    assert hit is not None, f"no block {name}"
    return hit


def block_of(func: PrimFunc, name: str) -> Block:
    return realize_of(func, name)[0].block


def loops_of(func: PrimFunc, name: str) -> list[For]:
    _, anc = realize_of(func, name)
    return tree.enclosing_loops(anc)


def loop_vars(func: PrimFunc, name: str) -> list[Var]:
    return [lp.loop_var for lp in loops_of(func, name)]


def extents(func: PrimFunc, name: str) -> list[int]:
    out = []
    for lp in loops_of(func, name):
        assert isinstance(lp.extent, IntImm), f"non-constant extent {lp.extent}"
        out.append(lp.extent.value)
    return out


def block_order(func: PrimFunc) -> list[str]:
    return [n for n in tree.block_names(func) if n != "root"]


def is_true(e: Any) -> bool:
    return isinstance(e, IntImm) and e.value == 1


def tile(func: PrimFunc, block: str, factors: Sequence[Sequence[int | None] | None]) -> tuple[PrimFunc, list[list[Var]]]:
    """Split each loop of ``block`` (outermost first) by its factors (None: keep)."""
    vars_ = loop_vars(func, block)
    out: list[list[Var]] = []
    for v, fs in zip(vars_, factors):
        if fs is None:
            out.append([v])
            continue
        func, new = L.split(func, v, list(fs))
        out.append(new)
    return func, out


# --------------------------------------------------------------------------------------------
# execution
# --------------------------------------------------------------------------------------------


def random_args(func: PrimFunc, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in func.params:
        shape = tuple(int(s.value) for s in p.shape)  # type: ignore[attr-defined]
        # magnitudes away from 0 (a zero hides wrong indexing), both signs (relu, max)
        mag = rng.uniform(0.5, 1.5, size=shape)
        sign = rng.choice([-1.0, 1.0], size=shape)
        out.append((mag * sign).astype(p.dtype))
    return out


def run(func: PrimFunc, args: list[np.ndarray]) -> list[np.ndarray]:
    arrays = [a.copy() for a in args]
    loopir.build(func, target="cpu")(*arrays)
    return arrays


def assert_equivalent(before: PrimFunc, after: PrimFunc, seed: int = 0, rtol: float = 1e-4) -> None:
    """Verify ``after``, run both on the same random data; every argument must match."""
    loopir.verify(after)
    args = random_args(before, seed)
    ref = run(before, args)
    got = run(after, args)
    for p, r, g in zip(before.params, ref, got):
        np.testing.assert_allclose(g, r, rtol=rtol, atol=rtol, err_msg=f"buffer {p.name}")


def golden_pair(golden: Any, name: str, before: PrimFunc, after: PrimFunc) -> None:
    golden(f"schedule/{name}", f"# before\n{before.script()}\n\n# after\n{after.script()}")


def check_schedule(func: PrimFunc, sch: loopir.Schedule, sizes: dict[str, int] | None = None) -> None:
    """``sch.func`` computes what ``func`` does on the CPU executor, unlowered and lowered with
    local padding off and on (random thread order), and ``sch``'s trace replays through its
    JSON and through its Python text to a structurally equal function. ``sizes``: values of
    symbolic sizes."""
    import json

    from loopir.testing import check_equivalent

    check_equivalent(func, sch.func, sizes=sizes)
    for pad in (False, True):
        with loopir.PassContext(config={"tir.enable_local_pad": pad}):
            check_equivalent(func, loopir.lower(sch.func), sizes=sizes)
    replay = loopir.Schedule(func)
    loopir.Trace.from_json(json.dumps(sch.trace.as_json())).apply_to(replay)
    loopir.assert_structural_equal(sch.func, replay.func)
    ns: dict[str, Any] = {}
    exec(sch.trace.as_python(), ns)  # noqa: S102 - the trace's own Python text
    again = loopir.Schedule(func)
    ns["apply_trace"](again)
    loopir.assert_structural_equal(sch.func, again.func)
