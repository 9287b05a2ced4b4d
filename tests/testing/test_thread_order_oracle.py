"""check_equivalent and the fuzzer's oracle run lowered functions in random thread order
(issue 11): a missing barrier is a difference, not a silent pass."""

from __future__ import annotations

import numpy as np
import pytest

from loopir import te
from loopir.errors import LoopIRError
from loopir.ir.buffer import Buffer
from loopir.ir.expr import BufferLoad, Var
from loopir.ir.op import storage_sync
from loopir.ir.stmt import Allocate, BufferStore, Evaluate, For, ForKind, PrimFunc, seq
from loopir.testing import EquivalenceError, EquivalenceResult, check_equivalent, is_lowered
from loopir.testing.fuzz import FuzzFinding, ScheduleFuzzer
from loopir.testing.workloads import Workload

T, NB = 8, 2


def _t(var: Var, extent: int, body, tag: str) -> For:
    return For(var, 0, extent, ForKind.THREAD_BINDING, body, thread_tag=tag)


def reference() -> PrimFunc:
    A = te.placeholder((NB, T, T), "float32", name="A")
    B = te.compute((NB, T, T), lambda b, x, y: A[b, y, x] + 1.0, name="B")
    return te.create_prim_func([A, B])


def lowered_transpose(barrier: bool) -> PrimFunc:
    """The reference by hand in lowered form: one threadIdx nest fills a shared tile, a
    sibling nest reads it transposed (with or without the barrier between them)."""
    A, B = Buffer("A", (NB, T, T), "float32"), Buffer("B", (NB, T, T), "float32")
    S = Buffer("S", (T, T), "float32", scope="shared")
    bx, ty, tx, ty2, tx2 = Var("bx"), Var("ty"), Var("tx"), Var("ty2"), Var("tx2")
    fill = _t(ty, T, _t(tx, T, BufferStore(S, BufferLoad(A, (bx, ty, tx)), (ty, tx)), "threadIdx.x"), "threadIdx.y")
    load = BufferStore(B, BufferLoad(S, (tx2, ty2)) + 1.0, (bx, ty2, tx2))
    read = _t(ty2, T, _t(tx2, T, load, "threadIdx.x"), "threadIdx.y")
    body = seq(fill, Evaluate(storage_sync("shared")), read) if barrier else seq(fill, read)
    return PrimFunc((A, B), _t(bx, NB, Allocate(S, body), "blockIdx.x"))


def test_missing_barrier_is_a_difference() -> None:
    with pytest.raises(EquivalenceError, match=r"parameter B differs .*thread_order='random', seed=0"):
        check_equivalent(reference(), lowered_transpose(barrier=False))


def test_sequential_order_is_blind_to_the_race_when_asked() -> None:
    # the old behaviour, now only on request: the racy kernel "passes"
    res = check_equivalent(reference(), lowered_transpose(barrier=False), thread_order="sequential")
    assert res.thread_order == "sequential" and res.seeds == ()


def test_result_is_small_and_names_the_orders() -> None:
    res = check_equivalent(reference(), lowered_transpose(barrier=True))
    assert isinstance(res, EquivalenceResult)
    assert res.thread_order == "random" and res.seeds == (0, 1, 2)
    assert repr(res) == "<EquivalenceResult: 2 parameters equal; thread_order='random', seeds (0, 1, 2)>"
    # still indexable like the list of f1's outputs it used to be
    assert len(res) == 2 and res[-1].shape == (NB, T, T) and np.isfinite(res[1]).all()
    assert [a.shape for a in res] == [(NB, T, T)] * 2


def test_functions_with_blocks_run_sequentially() -> None:
    res = check_equivalent(reference(), reference())
    assert res.thread_order == "sequential" and res.seeds == ()
    assert is_lowered(lowered_transpose(True)) and not is_lowered(reference())


def test_order_seeds_are_used() -> None:
    res = check_equivalent(reference(), lowered_transpose(barrier=True), order_seeds=[5, 9])
    assert res.seeds == (5, 9)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"thread_order": "shuffled"}, r"thread_order must be None, 'sequential' or 'random', got 'shuffled'"),
        ({"thread_order": "random", "build_options": {"thread_order": "sequential"}},
         r"thread_order='random' contradicts build_options\['thread_order'\]='sequential'"),
        ({"order_seeds": ()}, r"order_seeds must be a non-empty sequence of ints, got \(\)"),
        ({"order_seeds": [0, 1.5]}, r"order_seeds must be .* got \[0, 1.5\]"),
    ],
)  # fmt: skip
def test_bad_thread_order_arguments(kwargs, match) -> None:
    with pytest.raises(LoopIRError, match="check_equivalent: " + match):
        check_equivalent(reference(), lowered_transpose(barrier=True), **kwargs)


def test_fuzz_oracle_runs_lowered_functions_in_random_order() -> None:
    fz = ScheduleFuzzer(Workload("transpose", reference()), seed=3, gpu_lowering=False)
    assert fz.order_seeds == (3, 4)
    fz._check_outputs(lowered_transpose(barrier=True), "lowered", "lower")
    with pytest.raises(FuzzFinding, match=r"(?s)\[lower\] lowered \(thread_order='random', seed=3\): parameter B"
                                          r".*thread_order='random', seed=3\)\(\.\.\.\)  # differs"):
        fz._check_outputs(lowered_transpose(barrier=False), "lowered", "lower")
