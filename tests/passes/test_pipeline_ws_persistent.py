"""InjectSoftwarePipeline on a persistent warp-specialized GEMM (``hopper_gemm(persistent=...)``,
``loopir.passes.pipeline_ws`` with ``loopir.passes.pipeline_ws_tiles``).

* Golden: the K loop (4 steps, 3 stages, wgmma retired a step later) in its tile loop (4 tiles
  over 3 CTAs: the split's predicate on every statement) before the pass, and after: the guard
  lifted into the tile loop's extent, the producer over the (tile, k) steps of its block, the
  consumers' tile loop around their K loop at the global step's stage and parity, the
  epilogue between.
* ``persistent_tiles`` runs exactly the iterations the guard let run (every block index, tile
  counts the CTAs do and do not divide), and refuses tile loops it cannot lift by name.
"""

from __future__ import annotations

import pytest

from loopir.arith.vectorized import evaluate
from loopir.errors import PassError
from loopir.ir.buffer import Buffer
from loopir.ir.expr import IntImm, Var
from loopir.ir.stmt import BufferStore, For, ForKind, IfThenElse, seq
from loopir.passes.pipeline_ws import WS_KEY, persistent_tiles, ws_child


def test_before_and_after(golden) -> None:
    import loopir.codegen_cuda  # noqa: F401  (the CUDA target's pipeline)
    from loopir.passes import default_pipeline
    from tests.examples.hopper_forms import hopper_gemm  # the forms of before the default changed

    f = hopper_gemm(128, 256, 64, "float16", block=(64, 32, 64), wn=32, stages=3, tma=True, warp_specialized=True,
                    persistent=3).func  # fmt: skip
    passes = default_pipeline(target="cuda").passes
    at = [p.name for p in passes].index("InjectSoftwarePipeline")
    for p in passes[:at]:
        f = p(f)
    after = passes[at](f)
    golden("passes/pipeline_ws_persistent", f"# before\n{f.script()}\n# after\n{after.script()}")


def _tile_loop(cond_of, tiles: int, ctas: int, bare: bool = False) -> tuple[For, Var]:
    """``for t in range(ceil(tiles / ctas))``: a guarded store, and a K loop with ``WS_KEY``."""
    t, bx, k = Var("t", "int32"), Var("bx", "int32"), Var("k", "int32")
    out = Buffer("out", (64,), "int32", scope="global")
    store = BufferStore(out, t * ctas + bx, (t * ctas + bx,))
    first = store if bare else IfThenElse(cond_of(t, bx), store)
    kloop = For(k, 0, 4, ForKind.SERIAL, IfThenElse(cond_of(t, bx), BufferStore(out, k, (t * ctas + bx,))),
                annotations={WS_KEY: True})  # fmt: skip
    return For(t, 0, -(-tiles // ctas), ForKind.SERIAL, seq(first, kloop)), bx


@pytest.mark.parametrize(("tiles", "ctas"), [(9, 4), (512, 132), (8, 8), (7, 3), (5, 9)])
def test_the_lifted_extent_runs_exactly_the_guarded_iterations(tiles: int, ctas: int) -> None:
    loop, bx = _tile_loop(lambda t, b: t * ctas + b < tiles, tiles, ctas)
    assert ws_child(loop) is not None
    lifted = persistent_tiles(loop)
    assert not isinstance(lifted.body.seq[0], IfThenElse)  # type: ignore[attr-defined]
    import numpy as np

    bxs = np.arange(ctas, dtype=np.int64)
    got = np.asarray(evaluate(lifted.extent, {bx: bxs}, ctas))
    want = np.array([sum(1 for t in range(-(-tiles // ctas)) if t * ctas + b < tiles) for b in range(ctas)])
    np.testing.assert_array_equal(got, want)


def test_an_unguarded_tile_loop_is_left_as_it_is() -> None:
    loop, _ = _tile_loop(lambda t, b: t * 4 + b < 8, 8, 4, bare=True)
    loop = For(loop.loop_var, 0, 2, ForKind.SERIAL, loop.body.seq[0])  # type: ignore[attr-defined]
    assert persistent_tiles(loop) is loop


def test_tile_loops_it_cannot_lift_are_refused_by_name() -> None:
    loop, _ = _tile_loop(lambda t, b: t * 4 + b < 9, 9, 4, bare=True)
    with pytest.raises(PassError, match=r"InjectSoftwarePipeline: tile loop t around a loopir.warp_specialize loop: "
                                        r"every statement .* got a statement without the guard t \* 4 \+ bx < 9"):  # fmt: skip
        persistent_tiles(loop)
    loop, _ = _tile_loop(lambda t, b: t * t + b < 9, 9, 4)
    with pytest.raises(PassError, match=r"the tile's guard t \* t \+ bx < 9 is not a bound a \* t \+ e < b"):
        persistent_tiles(loop)
    loop, _ = _tile_loop(lambda t, b: IntImm(9, "int32") - t * 4 > b, 9, 4)
    with pytest.raises(PassError, match=r"is not a bound a \* t \+ e < b"):
        persistent_tiles(loop)
