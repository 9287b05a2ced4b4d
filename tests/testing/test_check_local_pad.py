"""loopir.testing.check_local_pad: the padded lowering against the unpadded one, in one call."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import pytest

import loopir
from loopir.errors import LoopIRError, PassError
from loopir.ir.expr import FloatImm, Var
from loopir.ir.functor import Mutator
from loopir.ir.stmt import BufferStore, PrimFunc
from loopir.passes import pipeline
from loopir.passes.local_pad import LocalPadding
from loopir.passes.thread_sync import ThreadSync
from loopir.testing import EquivalenceError, check_local_pad


@pytest.fixture(scope="module")
def dense() -> PrimFunc:
    """The DietCode dense schedule at a size none of its tiles divide (padding has work)."""
    return loopir.examples.dense(50, 20, 70).func


def _lower(func: PrimFunc, pad: bool) -> PrimFunc:
    with loopir.PassContext(config={"tir.enable_local_pad": pad}):
        return loopir.lower(func)


def test_padding_changes_the_dense_lowering(dense: PrimFunc) -> None:
    """The tests below compare two different functions, not one function with itself."""
    assert not loopir.structural_equal(_lower(dense, False), _lower(dense, True))


def test_dense_is_equal_in_random_thread_order(dense: PrimFunc) -> None:
    result = check_local_pad(dense)
    assert result.thread_order == "random"
    assert result.seeds == loopir.testing.ORDER_SEEDS
    a, b, c = result.outputs
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-5)  # the unpadded result is right


def test_symbolic_size(dense: PrimFunc) -> None:
    func = loopir.examples.dense(Var("M"), 20, 70).func
    result = check_local_pad(func, sizes={"M": 37}, order_seeds=(5,))
    assert result.seeds == (5,)
    assert result.outputs[2].shape == (37, 70)
    with pytest.raises(LoopIRError, match=r"check_local_pad: .*symbolic size 'M'.*sizes="):
        check_local_pad(func)


class _InitToHalf(Mutator):
    """Make every ``x = 0.0`` store ``x = 0.5``: a wrong accumulator initialization."""

    def visit_BufferStore(self, node: BufferStore) -> Any:
        if isinstance(node.value, FloatImm) and node.value.value == 0.0:
            return attrs.evolve(node, value=FloatImm(0.5, node.value.dtype))
        return self.generic_visit(node)


def test_a_wrong_padded_lowering_is_caught(dense: PrimFunc, monkeypatch: pytest.MonkeyPatch) -> None:
    original = LocalPadding.transform

    def broken(self: LocalPadding, func: PrimFunc, ctx: Any) -> PrimFunc:
        out = original(self, func, ctx)
        body = _InitToHalf().visit(out.body)
        assert body is not out.body, "the corruption must change the padded function"
        return out.with_body(body)

    monkeypatch.setattr(LocalPadding, "transform", broken)
    with pytest.raises(EquivalenceError) as info:
        check_local_pad(dense)
    msg = str(info.value)
    assert msg.startswith(f"check_local_pad: {dense.name} lowered with tir.enable_local_pad=True")
    assert "parameter C differs at index" in msg


def test_a_racy_padded_lowering_is_caught(dense: PrimFunc, monkeypatch: pytest.MonkeyPatch) -> None:
    """No barriers in the padded lowering only: its threads race, and the error names the
    random thread order's seed that showed it."""
    original = ThreadSync.transform

    def no_barriers_when_padded(self: ThreadSync, func: PrimFunc, ctx: Any) -> PrimFunc:
        return func if ctx.get("tir.enable_local_pad") else original(self, func, ctx)

    monkeypatch.setattr(ThreadSync, "transform", no_barriers_when_padded)
    with pytest.raises(EquivalenceError, match=r"check_local_pad: .*thread_order='random', seed="):
        check_local_pad(dense)


def test_lowers_under_the_current_context(dense: PrimFunc, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[dict[str, Any], int]] = []
    original = pipeline.lower

    def spy(func: PrimFunc, target: str | None = None) -> PrimFunc:
        ctx = loopir.PassContext.current()
        seen.append((dict(ctx.config), ctx.opt_level))
        return original(func, target)

    monkeypatch.setattr(pipeline, "lower", spy)
    with loopir.PassContext(config={"tir.prefetch_shared": True}, opt_level=3):
        check_local_pad(dense, order_seeds=(0,))
    assert seen == [
        ({"tir.prefetch_shared": True, "tir.enable_local_pad": False}, 3),
        ({"tir.prefetch_shared": True, "tir.enable_local_pad": True}, 3),
    ]


def test_a_failed_lowering_names_the_setting(dense: PrimFunc, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: LocalPadding, func: PrimFunc, ctx: Any) -> PrimFunc:
        raise PassError("LocalPadding: refused")

    monkeypatch.setattr(LocalPadding, "transform", refuse)
    expected = r"check_local_pad: lowering .* tir.enable_local_pad=True failed: LocalPadding: refused"
    with pytest.raises(PassError, match=expected):
        check_local_pad(dense)


def test_not_a_primfunc() -> None:
    sch = loopir.examples.dense(50, 20, 70)
    with pytest.raises(LoopIRError, match="check_local_pad: expected a PrimFunc, got Schedule"):
        check_local_pad(sch)  # type: ignore[arg-type]
