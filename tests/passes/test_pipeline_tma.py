"""``loopir.passes.pipeline_tma.box_copy``: which fetches become one TMA copy, and why not.

A box copy is serial loops over the box around ``S[p, f(r, c)] = G[o0 + r, o1 + c]`` (or a
select of that load and zero whose condition bounds the load's indices by ``G``'s shape: TMA's
zero fill); ``f`` is checked at every point of the box against the layout TMA writes."""

from __future__ import annotations

import re

import pytest

from loopir.ir.buffer import Buffer
from loopir.ir.expr import Select, Var
from loopir.ir.op import bitwise_xor, const
from loopir.ir.stmt import BufferStore, For, ForKind, Stmt
from loopir.passes.pipeline_tma import BoxCopy, box_copy

G = Buffer("G", (100, 136), "float16")
S = Buffer("S", (2, 16, 64), "float16", scope="shared")
R, C, K = Var("r"), Var("c"), Var("k")


def _nest(value: object, col: object = None, rows: int = 16, cols: int = 64) -> Stmt:
    store = BufferStore(S, value, (K % 2, R, C if col is None else col))  # type: ignore[arg-type]
    return For(R, 0, rows, ForKind.SERIAL, For(C, 0, cols, ForKind.SERIAL, store))


def _load() -> object:
    return G[K * 16 + R, C + 8]


def test_a_plain_copy_is_a_box_without_swizzle() -> None:
    copy = box_copy(_nest(_load()))
    assert isinstance(copy, BoxCopy)
    assert (copy.box, copy.swizzle, str(copy.dst), str(copy.src)) == (
        (16, 64),
        0,
        "S[k % 2, 0, 0]",
        "G[k * 16, 8]",
    )
    assert copy.nbytes == 16 * 64 * 2


def test_the_128_byte_swizzle_is_recognized() -> None:
    col = bitwise_xor(C // 8 % 8, R % 8) * 8 + C % 8  # what hopper_gemm's layout stores
    copy = box_copy(_nest(_load(), col))
    assert isinstance(copy, BoxCopy) and copy.swizzle == 128


def test_a_padding_select_bounded_by_the_tensor_is_a_box() -> None:
    cond = (K * 16 + R < 100).__and__(C < 128)  # C + 8 < 136, written another way
    copy = box_copy(_nest(Select(cond, _load(), const(0, "float16"))))  # type: ignore[arg-type]
    assert isinstance(copy, BoxCopy)


@pytest.mark.parametrize(("stmt", "why"), [
    (_nest(Select(C < 32, G[K * 16 + R, C + 8], const(0, "float16"))),  # type: ignore[arg-type]
     r"the select's condition c < 32 is not a bound of G\[k \* 16 \+ r, c \+ 8\]"),
    (_nest(Select(K * 16 + R < 100, G[K * 16 + R, C + 8], const(1, "float16"))),  # type: ignore[arg-type]
     r"not a copy"),
    (_nest(G[K * 16 + R, C * 2]), r"source index c \* 2 is not the box's origin plus loop c"),
    (_nest(G[K * 16 + R, C], (C + 8) % 64), r"is not one a TMA copy writes"),
    (_nest(G[R, C], rows=16, cols=60), r"must be compact with its last 2 dimensions equal to the box|not one"),
])  # fmt: skip
def test_other_fetches_are_not_boxes_with_the_reason(stmt: Stmt, why: str) -> None:
    got = box_copy(stmt)
    assert isinstance(got, str)
    assert re.search(why, got), got


@pytest.mark.parametrize("ws", [False, True])
def test_before_and_after(golden, ws: bool) -> None:
    """The K loop of a small ``hopper_gemm(tma=True)`` (4 K steps, 2 versions) before
    InjectSoftwarePipeline and after: the TMA form (one thread arrives and copies ahead, every
    thread waits, a block barrier) and the warp-specialized one (``warp_specialized=True``: a
    producer warpgroup waiting on the empty barriers from step 2, consumers waiting on the full
    ones and releasing each version)."""
    import loopir.codegen_cuda  # noqa: F401  (the CUDA target's pipeline)
    from loopir.passes import default_pipeline
    from tests.examples.hopper_forms import hopper_gemm  # the forms of before the default changed

    f = hopper_gemm(64, 256, 32, "float16", block=(64, 32, 64), wn=32, stages=2, tma=True, warp_specialized=ws).func
    passes = default_pipeline(target="cuda").passes
    at = [p.name for p in passes].index("InjectSoftwarePipeline")
    for p in passes[:at]:
        f = p(f)
    after = passes[at](f)
    golden(f"passes/pipeline_{'ws' if ws else 'tma'}", f"# before\n{f.script()}\n# after\n{after.script()}")
