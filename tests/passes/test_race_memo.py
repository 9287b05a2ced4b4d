"""The remembered answers of the race proof (loopir.passes.race_memo): a question asked again is
answered without a new proof, and a question that differs in anything the proof reads (the
statement's context, the launch extents, the flags) is proven on its own."""

from __future__ import annotations

from typing import Any

import pytest

import loopir
from loopir import examples
from loopir.codegen_cuda import emit_function, lower_for_cuda
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Cast, IntImm, Var
from loopir.ir.stmt import BufferStore, Evaluate, For, ForKind, Stmt, seq
from loopir.passes import race_check, race_memo, race_prove
from loopir.passes.race_prove import BLOCK_TAGS, GRID_TAGS, prove_exclusive


def _c(v: int) -> IntImm:
    return IntImm(v, "int32")


@pytest.fixture
def proofs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The questions that reached the proof itself (not answered from the table), with an
    empty table."""
    monkeypatch.setattr(race_memo, "ANSWERS", race_memo.Answers())
    calls: list[Any] = []
    real = race_prove._prove_exclusive

    def counting(*args: Any) -> bool:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(race_prove, "_prove_exclusive", counting)
    return calls


def _launch(**extents: int) -> Any:
    tags = {"tx": "threadIdx.x", "bx": "blockIdx.x"}
    named = {tags[k]: v for k, v in extents.items()}
    return lambda tag: named.get(tag, 1)


def test_one_store_in_two_summaries_is_proven_once(proofs: list[Any]) -> None:
    # ThreadSync's case: the store's accesses collected twice (a compound statement's summary
    # and the store's own) are two objects asking one question
    S = Buffer("S", (128,), "float32", scope="shared")
    tx = Var("tx")
    store = BufferStore(S, Cast("float32", tx), (tx,))
    loop = For(tx, 0, 128, ForKind.THREAD_BINDING, store, thread_tag="threadIdx.x")
    (a,) = race_check.collect_accesses(store, [loop])
    (b,) = race_check.collect_accesses(store, [loop])
    assert a is not b
    ext = _launch(tx=128)
    assert prove_exclusive(ext, a, a, BLOCK_TAGS, GRID_TAGS)
    assert prove_exclusive(ext, b, b, BLOCK_TAGS, GRID_TAGS)
    assert len(proofs) == 1


def test_one_store_under_two_guards_is_proven_for_each() -> None:
    # every thread stores element 0: a race, unless a guard lets one thread only. The same
    # statement object under the two contexts must not share an answer.
    S = Buffer("S", (4,), "float32", scope="shared")
    tx = Var("tx")
    store = BufferStore(S, Cast("float32", tx), (_c(0),))
    loop = For(tx, 0, 32, ForKind.THREAD_BINDING, store, thread_tag="threadIdx.x")
    ext = _launch(tx=32)
    (free,) = race_check.collect_accesses(store, [loop])
    (guarded,) = race_check.collect_accesses(store, [loop], [tx == 0])
    assert not prove_exclusive(ext, free, free, BLOCK_TAGS, GRID_TAGS)
    assert prove_exclusive(ext, guarded, guarded, BLOCK_TAGS, GRID_TAGS)
    assert not prove_exclusive(ext, free, free, BLOCK_TAGS, GRID_TAGS)


def test_other_loop_extents_are_another_question() -> None:
    # ``S[tx % 4]`` is one thread's element when there are 4 threads, not when there are 8
    S = Buffer("S", (4,), "float32", scope="shared")
    tx = Var("tx")
    store = BufferStore(S, Cast("float32", tx), (tx % 4,))
    accs = [race_check.collect_accesses(store, [For(tx, 0, n, ForKind.THREAD_BINDING, store,
                                                    thread_tag="threadIdx.x")])[0]
            for n in (4, 8, 4)]  # fmt: skip
    got = [prove_exclusive(_launch(tx=8), a, a, BLOCK_TAGS, GRID_TAGS) for a in accs]
    assert got == [True, False, True]


def test_the_launch_extents_the_proof_read_are_part_of_the_answer(proofs: list[Any]) -> None:
    # a store with no threadIdx.x loop runs on every thread of the tag: its extent, read from
    # the launch, decides the answer
    S = Buffer("S", (4,), "float32", scope="shared")
    bx = Var("bx")
    store = BufferStore(S, Cast("float32", bx), (_c(0),))
    grid = For(bx, 0, 2, ForKind.THREAD_BINDING, store, thread_tag="blockIdx.x")
    (a,) = race_check.collect_accesses(store, [grid])
    assert prove_exclusive(_launch(tx=1), a, a, BLOCK_TAGS, GRID_TAGS)
    assert not prove_exclusive(_launch(tx=64), a, a, BLOCK_TAGS, GRID_TAGS)
    assert prove_exclusive(_launch(tx=1), a, a, BLOCK_TAGS, GRID_TAGS)
    assert len(proofs) == 2
    # an extent the proof never read (blockIdx.x's: its loop gives it) does not matter
    assert prove_exclusive(_launch(tx=1, bx=7), a, a, BLOCK_TAGS, GRID_TAGS)
    assert len(proofs) == 2


def test_the_flags_are_part_of_the_question(proofs: list[Any]) -> None:
    # all threads store one pure value to one element: no race only with ``same_value``
    S = Buffer("S", (4,), "float32", scope="shared")
    tx = Var("tx")
    store = BufferStore(S, Cast("float32", _c(1)), (_c(0),))
    loop = For(tx, 0, 32, ForKind.THREAD_BINDING, store, thread_tag="threadIdx.x")
    (a,) = race_check.collect_accesses(store, [loop])
    ext = _launch(tx=32)
    assert not prove_exclusive(ext, a, a, BLOCK_TAGS, GRID_TAGS)
    assert prove_exclusive(ext, a, a, BLOCK_TAGS, GRID_TAGS, same_value=True)
    assert not prove_exclusive(ext, a, a, BLOCK_TAGS, GRID_TAGS)
    assert prove_exclusive(ext, a, a, GRID_TAGS)  # blocks, not threads: another question
    assert len(proofs) == 3


def _fill_then_read(tx: Var, k: Var, S: Buffer, refill_barrier: bool = True) -> Stmt:
    """Thread ``tx`` fills ``S[tx]``, a barrier, then reads ``S[31 - tx]`` (and, with
    ``refill_barrier``, a barrier before the next round's fill), 4 times."""
    O = Buffer("O", (32,), "float32")
    body = seq(
        BufferStore(S, Cast("float32", tx), (tx,)),
        Evaluate(op.storage_sync("shared")),
        BufferStore(O, S[31 - tx], (tx,)),
        *([Evaluate(op.storage_sync("shared"))] if refill_barrier else []),
    )
    return For(tx, 0, 32, ForKind.THREAD_BINDING, For(k, 0, 4, ForKind.SERIAL, body),
               thread_tag="threadIdx.x")  # fmt: skip


def test_equal_barrier_counts_are_asked_for_unless_both_are_one_constant() -> None:
    S = Buffer("S", (32,), "float32", scope="shared")
    tx, k = Var("tx"), Var("k")
    store, load = [a for a in race_check.collect_accesses(_fill_then_read(tx, k, S))
                   if a.buffer is S]  # fmt: skip
    ext = _launch(tx=32)
    # the counts differ along the loop: they alone prove the fill and the read apart
    assert not race_memo.vacuous_counts(store, load)
    assert not prove_exclusive(ext, store, load, BLOCK_TAGS, GRID_TAGS)
    assert prove_exclusive(ext, store, load, BLOCK_TAGS, GRID_TAGS, counts=True)
    # without the barrier before the refill, a round's read (after its barrier) and the next
    # round's fill (before it) have equal counts: not proven apart (session 12: they were)
    store, load = [a for a in race_check.collect_accesses(_fill_then_read(tx, k, S, refill_barrier=False))
                   if a.buffer is S]  # fmt: skip
    assert not prove_exclusive(ext, store, load, BLOCK_TAGS, GRID_TAGS, counts=True)
    # one constant count on both sides (a write-back after the loop): nothing to ask
    after = race_check.collect_accesses(seq(_fill_then_read(tx, k, S),
                                            BufferStore(S, Cast("float32", tx), (_c(0),))))
    last = after[-1]
    assert not last.barrier_loops and race_memo.vacuous_counts(last, last)
    assert prove_exclusive(ext, last, last, BLOCK_TAGS, GRID_TAGS, counts=True) == \
        prove_exclusive(ext, last, last, BLOCK_TAGS, GRID_TAGS)  # fmt: skip


def test_dense_asks_each_question_once_across_thread_sync_and_the_race_check(
    proofs: list[Any],
) -> None:
    # the DietCode schedule: ThreadSync's write-back question, asked again by its second summary
    # and by the emitted kernel's race check, is proven once; the outputs are unchanged
    with loopir.PassContext(config={"tir.enable_local_pad": True}):
        lowered = lower_for_cuda(examples.dense(960, 770, 2304).func)
        emit_function(lowered)  # the race check of the emitted kernel
    asked = [(w.buffer.name, tuple(who), counts) for _e, w, _x, who, _f, counts, _s, _i in proofs]
    assert asked.count(("C", tuple(BLOCK_TAGS), False)) == 1
    assert ("C", tuple(BLOCK_TAGS), True) not in asked  # one constant count: the same question
    report = race_check.find_races(lowered)
    assert not report.races and not report.unproven
