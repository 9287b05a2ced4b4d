"""The race checker on a persistent kernel's epilogue (issue 32): the global stores of C at the
tile ``it * ctas + bx`` (``hopper_gemm(persistent=...)``).

* Proven symbolically (``race_problem._fuse_sums``: the sum under ``//`` and ``%`` one variable,
  its digits the tile's row and column, then ``it`` and ``bx`` separated), whatever the sizes:
  whole tiles, padded ones (guarded stores straight from the fragments), raster orders, and a
  grid far too large to enumerate.
* Still caught: a wrong tile index (the CTAs' stride one short, two blocks on one tile, the tile
  loop dropped) is a race the checker reports with a witness: its enumeration takes the tile
  loop, whose extent is a function of ``blockIdx.x``, over its exact range.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from loopir.codegen_cuda import lower_for_cuda
from loopir.errors import CodegenError
from loopir.examples import hopper_gemm
from loopir.ir.expr import FloorDiv, IntImm, Mul, PrimExpr, Var
from loopir.ir.functor import Mutator, collect_vars, substitute
from loopir.ir.stmt import BufferStore, PrimFunc, Stmt
from loopir.passes.race_check import check_races, find_races
from loopir.passes.race_phase import check_phases
from tests.examples.test_hopper_gemm_tma import SMALL


def _lowered(shape: tuple[int, int, int], ctas: int, **params: object) -> PrimFunc:
    params = dict(dict(SMALL, stages=2), **params)
    sch = hopper_gemm(*shape, **params, tma=True, warp_specialized=True, persistent=ctas)  # type: ignore[arg-type]
    return lower_for_cuda(sch.func)


@pytest.mark.parametrize(
    ("shape", "ctas", "params"),
    [
        ((192, 64, 96), 4, {}),  # 9 tiles over 4 CTAs
        ((190, 64, 90), 4, dict(out_dtype="float16")),  # padded: guarded stores of D
        ((512, 128, 96), 5, dict(raster=4)),  # 24 tiles in groups of 4 rows, over 5 CTAs
        ((4096, 4096, 4096), 132, dict(block=(128, 256, 64), wn=256, stages=4)),  # the default tile
        ((65536, 64, 65536), 132, dict(block=(128, 256, 64), wn=256, stages=4, raster=8)),  # 131072 tiles
    ],
    ids=["whole tiles", "padded", "raster", "4096^3", "huge grid"],
)
def test_the_epilogue_stores_are_proven(shape: tuple[int, int, int], ctas: int, params: dict) -> None:
    f = _lowered(shape, ctas, **params)
    report = find_races(f)
    assert report.races == () and report.unproven == (), report.unproven[:1]
    check_phases(f)  # check_races' other part (find_races above is its race part)


def _tile_vars(s: BufferStore) -> tuple[Var, Var]:
    """The tile loop's variable and blockIdx.x's in a store of the epilogue."""
    names = {v.name: v for i in s.indices for v in collect_vars(i)}
    t = next(v for n, v in names.items() if n.endswith("fused_0"))
    bx = next(v for n, v in names.items() if n.endswith("fused_1"))
    return t, bx


def _mutate_stores(f: PrimFunc, how: Callable[[PrimExpr, Var, Var], PrimExpr]) -> PrimFunc:
    """``f`` with every index of its global stores of C / D rewritten by ``how(index, t, bx)``."""

    class Rewrite(Mutator):
        def visit_BufferStore(self, s: BufferStore) -> Stmt:
            if s.buffer.name not in ("C", "D"):
                out: Stmt = self.generic_visit(s)
                return out
            t, bx = _tile_vars(s)
            return attrs.evolve(s, indices=tuple(how(i, t, bx) for i in s.indices))

    return attrs.evolve(f, body=Rewrite().visit(f.body))


def _stride(ctas: int, new: int) -> Callable[[PrimExpr, Var, Var], PrimExpr]:
    def how(i: PrimExpr, t: Var, bx: Var) -> PrimExpr:
        class Stride(Mutator):
            def visit_Mul(self, e: Mul) -> PrimExpr:
                if e.a is t and isinstance(e.b, IntImm) and e.b.value == ctas:
                    return Mul(e.a, IntImm(new, e.b.dtype))
                out: PrimExpr = self.generic_visit(e)
                return out

        out: PrimExpr = Stride().visit(i)
        return out

    return how


MUTATIONS = {
    # it * 3 + bx: tile 3 is block 0's second and block 3's first
    "the CTAs' stride one short": _stride(4, 3),
    # blocks 0 and 1 store tile 0 (bx // 2)
    "two blocks on one tile": lambda i, t, bx: substitute(i, {bx: FloorDiv(bx, IntImm(2, bx.dtype))}),
    # it * 1 + bx: block 1's first tile is block 0's second
    "the tiles one apart": _stride(4, 1),
}


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("name", list(MUTATIONS))
def test_a_wrong_tile_index_is_a_race_with_a_witness(name: str, padded: bool) -> None:
    shape = (190, 64, 90) if padded else (192, 64, 96)
    f = _lowered(shape, 4)
    assert find_races(f).races == ()
    bad = _mutate_stores(f, MUTATIONS[name])
    report = find_races(bad)
    assert report.races, report.unproven[:1]
    assert report.races[0].startswith("data race on global buffer C[")
    with pytest.raises(CodegenError, match=r"race check .*data race on global buffer C\["):
        check_races(bad)


def _staged_epilogue(m: int, n: int) -> PrimFunc:
    """``hopper_gemm`` (not persistent) with sizes off the tile: C stored from its shared tile
    in a fused loop ``s = a * 128 + ty * 32 + tx``, rows ``i0 * 64 + s // n``, guarded by ``s <
    64 * n`` (the tile's elements)."""
    from tests.examples.hopper_forms import hopper_gemm as forms

    return lower_for_cuda(forms(m, 64, n, block=(64, 32, 64), wn=32, stages=2, async_mma=False, dtype="float16",
                                tma=True, warp_specialized=True).func)  # fmt: skip


@pytest.mark.parametrize("m, n", [(100, 19), (140, 19), (130, 7)])
def test_the_guard_of_a_staged_epilogue_bounds_its_rows(m: int, n: int) -> None:
    """Two blocks never store one row: the fused sum's bound comes from the guard ``s < 64 n``
    (``_fuse_sums`` puts the sum's variable into the guards too), not from the loop's extent
    (``ceil(64 n / 128) * 128``, past the tile). Unproven before session 23 (a warning that
    ``test_ws_equals_tma_and_float64_on_the_cpu`` drew at M = 100, N = 19)."""
    report = find_races(_staged_epilogue(m, n))
    assert report.races == () and report.unproven == (), report.unproven[:1]


def test_a_staged_epilogue_guard_past_the_tile_is_not_proven() -> None:
    """The same kernel with the guard loosened to the loop's extent (``s < 1280`` at N = 19: rows
    64 to 67 of block ``i0``, which block ``i0 + 1`` stores too) is reported, never proven."""
    f = _staged_epilogue(100, 19)

    class Loosen(Mutator):
        def visit_IntImm(self, e: IntImm) -> IntImm:
            return IntImm(1280, e.dtype) if e.value == 1216 else e

    bad = attrs.evolve(f, body=Loosen().visit(f.body))
    assert "< 1280" in bad.script()
    report = find_races(bad)
    assert report.races or report.unproven
