"""The race checker's model of TMA copies (``loopir.passes.race_tma``): the copy's write is in
flight, by no thread, from the issue to the barrier count of the first wait on its barrier
element; readers must come after a block barrier after that wait. A copy with no such wait is
refused naming it; accesses in the window are races."""

from __future__ import annotations

import numpy as np
import pytest

import loopir
from loopir.codegen_cuda import lower_for_cuda
from loopir.errors import CodegenError
from loopir.examples.tma import tma_copy
from loopir.ir import op
from loopir.ir import tma as T
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Var
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Stmt,
    seq,
)
from loopir.passes.race_check import check_races, find_races

G = Buffer("G", (64, 64), "float16")
OUT = Buffer("OUT", (64, 64), "float16")
TILE = Buffer("tile", (16, 64), "float16", scope="shared")
BAR = Buffer("bar", (2,), "uint64", scope="shared")
TX, I = Var("tx"), Var("i")


def _load(bar: int = 0) -> Evaluate:
    return Evaluate(T.tma_load(TILE[0, 0], G[0, 0], BAR[bar], (16, 64)))


def _wait(bar: int = 0) -> Evaluate:
    return Evaluate(T.mbarrier_wait(BAR[bar], 0))


def _sync() -> Evaluate:
    return Evaluate(op.storage_sync())


def _reads() -> For:
    """Every thread reads row ``i * 8 + tx // 16`` of the tile and stores it."""
    r, c = I * 8 + TX // 16, TX % 16 * 4
    body = For(Var("j"), 0, 4, ForKind.SERIAL, BufferStore(OUT, TILE[r, c], (r, c)))
    return For(I, 0, 2, ForKind.SERIAL, body)


def _kernel(*stmts: Stmt) -> PrimFunc:
    init = IfThenElse(TX == 0, Evaluate(T.mbarrier_init(BAR[0], 1)))
    body = seq(init, _sync(), *stmts)
    k = For(TX, 0, 128, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")
    return PrimFunc((G, OUT), Allocate(TILE, Allocate(BAR, k)), name="k")


def _issue(*after: Stmt) -> IfThenElse:
    return IfThenElse(TX == 0, seq(Evaluate(T.mbarrier_arrive_expect_tx(BAR[0], 2048)), _load(), *after))


def test_the_example_is_proven_race_free() -> None:
    lowered = lower_for_cuda(tma_copy(100, 72, (16, 64)))
    report = find_races(lowered)
    assert not report.races and not report.unproven
    check_races(lowered)


def test_everyone_waits_then_a_barrier_then_the_reads_passes() -> None:
    check_races(_kernel(_issue(), _wait(), _sync(), _reads()))
    check_races(_kernel(_issue(_wait()), _sync(), _reads()))  # the issuing thread alone waits


@pytest.mark.parametrize(("stmts", "match"), [
    ((_issue(), _sync(), _reads()), r"is never waited on \(bar\[0\]\)"),
    ((_reads(), _issue()), r"is never waited on \(bar\[0\]\)"),
    ((_issue(_wait(1)), _sync(), _reads()), r"is never waited on \(bar\[0\]\)"),  # another barrier's wait
    ((For(Var("k"), 0, 2, ForKind.SERIAL, _issue()), _wait(), _sync(), _reads()),
     r"is in loop k and not waited on in its iteration"),
    ((_issue(IfThenElse(TX < 1, _wait())), _sync(), _reads()), r"is never waited on"),  # a conditional wait is none
    ((_issue(Evaluate(T.mbarrier_arrive_expect_tx(BAR[0], 2048)), _wait()), _sync(), _reads()),
     r"is not waited on before mbarrier_arrive_expect_tx\(bar\[0\]\) starts another phase"),
])  # fmt: skip
def test_a_copy_without_its_wait_is_refused_naming_the_copy(stmts: tuple[Stmt, ...], match: str) -> None:
    with pytest.raises(CodegenError, match=r"race check \(k\): the TMA copy " + match + r"(.|\n)*ptx_tma_load\(tile"):
        check_races(_kernel(*stmts))
    with loopir.PassContext(config={"cuda.race_check": False}):
        check_races(_kernel(*stmts))  # the key turns it off with the race check


@pytest.mark.parametrize(("stmts", "buffer"), [
    ((_issue(_sync()), _wait(), _reads()), "tile"),  # a barrier before the wait: still in flight
    ((_issue(_reads(), _wait()), _sync()), "tile"),  # the issuing thread reads before its wait
    ((_issue(BufferStore(G, G[1, 1] + 1, (1, 1)), _wait()), _sync(), _reads()), "G"),  # the source, read until done
])  # fmt: skip
def test_accesses_while_the_copy_is_in_flight_race_with_it(stmts: tuple[Stmt, ...], buffer: str) -> None:
    with pytest.raises(CodegenError, match=rf"data race on (shared|global) buffer {buffer}\[(.|\n)*ptx_tma_load"):
        check_races(_kernel(*stmts))


def test_reads_without_a_barrier_after_the_wait_race_with_the_copy() -> None:
    # every thread waits, but the model orders other threads only through a block barrier
    racy = _kernel(_issue(), _wait(), _reads())
    with pytest.raises(CodegenError, match=r"data race on shared buffer tile"):
        check_races(racy)


def test_a_second_copy_into_a_tile_still_being_read_races() -> None:
    second = Evaluate(T.mbarrier_wait(BAR[0], 1))  # phase 1 of the barrier
    again = IfThenElse(TX == 0, seq(Evaluate(T.mbarrier_arrive_expect_tx(BAR[0], 2048)), _load(), second))
    racy = _kernel(_issue(), _wait(), _sync(), _reads(), again, _sync(), _reads())
    with pytest.raises(CodegenError, match=r"data race on shared buffer tile"):
        check_races(racy)
    check_races(_kernel(_issue(), _wait(), _sync(), _reads(), _sync(), again, _sync(), _reads()))
    # without its own arrival the copy's bytes count toward no phase it waits for (phase 0 is
    # complete: the wait returns at once); with the arrival, on parity 0 again, the same
    no_arrival = IfThenElse(TX == 0, seq(_load(), _wait()))
    with pytest.raises(CodegenError, match=r"the TMA copy does not follow its own mbarrier_arrive_expect_tx"):
        check_races(_kernel(_issue(), _wait(), _sync(), _reads(), _sync(), no_arrival, _sync(), _reads()))
    stale = IfThenElse(TX == 0, seq(Evaluate(T.mbarrier_arrive_expect_tx(BAR[0], 2048)), _load(), _wait()))
    with pytest.raises(CodegenError, match=r"the mbarrier arrival is waited on with parity 0, not proven"):
        check_races(_kernel(_issue(), _wait(), _sync(), _reads(), _sync(), stale, _sync(), _reads()))


def test_thread_sync_plans_the_barriers_the_model_needs() -> None:
    # written without barriers: ThreadSync adds one after the init and one before the reads
    init = IfThenElse(TX == 0, Evaluate(T.mbarrier_init(BAR[0], 1)))
    body = seq(init, _issue(), _wait(), _reads())
    k = For(TX, 0, 128, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")
    blk = For(Var("b"), 0, 1, ForKind.THREAD_BINDING, Allocate(TILE, Allocate(BAR, k)), thread_tag="blockIdx.x")
    lowered = lower_for_cuda(PrimFunc((G, OUT), blk, name="k"))
    text = lowered.script()
    assert text.count("tvm_storage_sync") == 2
    assert text.index("ptx_mbarrier_init") < text.index("tvm_storage_sync") < text.index("ptx_tma_load")
    assert text.index("ptx_mbarrier_wait") < text.rindex("tvm_storage_sync") < text.index("OUT[")
    check_races(lowered)


def test_a_loop_of_copies_needs_the_readers_done_before_the_next_copy() -> None:
    k = Var("k")
    issue = IfThenElse(TX == 0, seq(Evaluate(T.mbarrier_arrive_expect_tx(BAR[0], 2048)), _load()))
    step = seq(issue, Evaluate(T.mbarrier_wait(BAR[0], k % 2)), _sync(), _reads())
    racy = _kernel(For(k, 0, 3, ForKind.SERIAL, step))
    with pytest.raises(CodegenError, match=r"data race on shared buffer tile"):
        check_races(racy)
    check_races(_kernel(For(k, 0, 3, ForKind.SERIAL, seq(_sync(), step))))
    lowered = lower_for_cuda(tma_copy(100, 72, (16, 64), tiles=3))  # the example writes that barrier
    assert not find_races(lowered).unproven


def _doc_pipeline(read_version: int) -> PrimFunc:
    """The example of ``loopir.passes.race_tma``'s module doc: two stages, three tiles."""
    G3 = Buffer("G", (48, 64), "float16")
    out = Buffer("OUT", (48, 64), "float16")
    s = Buffer("S", (2, 16, 64), "float16", scope="shared")
    k, i = Var("k"), Var("i")

    def issue(j, cond=None):
        v = j % 2
        body = seq(Evaluate(T.mbarrier_arrive_expect_tx(BAR[v], 2048)),
                   Evaluate(T.tma_load(s[v, 0, 0], G3[j * 16, 0], BAR[v], (16, 64))))  # fmt: skip
        return IfThenElse(TX == 0 if cond is None else op.all_(TX == 0, cond), body)

    r, c = i * 8 + TX // 16, TX % 16 * 4
    reads = For(i, 0, 2, ForKind.SERIAL, BufferStore(out, s[(k + read_version) % 2, r, c], (k * 16 + r, c)))
    step = seq(Evaluate(T.mbarrier_wait(BAR[k % 2], k // 2 % 2)), _sync(), issue(k + 1, k < 2), reads)
    init = IfThenElse(TX == 0, seq(Evaluate(T.mbarrier_init(BAR[0], 1)), Evaluate(T.mbarrier_init(BAR[1], 1))))
    body = seq(init, _sync(), issue(0), For(k, 0, 3, ForKind.SERIAL, step))
    kern = For(TX, 0, 128, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")
    return PrimFunc((G3, out), Allocate(s, Allocate(BAR, kern)), name="k")


def test_the_module_doc_example() -> None:
    report = find_races(_doc_pipeline(0))
    assert not report.races and not report.unproven
    with pytest.raises(CodegenError, match=r"data race on shared buffer S\[(.|\n)*ptx_tma_load\(S\[\(k \+ 1\) % 2"):
        check_races(_doc_pipeline(1))
    a = np.arange(48 * 64).reshape(48, 64).astype("float16")
    b = np.zeros_like(a)
    loopir.build(_doc_pipeline(0), target="cpu")(a, b)  # the sequential meaning: a copy
    np.testing.assert_array_equal(a[:, ::4], b[:, ::4])  # the columns the readers store


def test_the_phase_proof_refuses_a_loop_it_does_not_follow() -> None:
    # two copies on one barrier in a loop without barriers: the second is phase 1, which a
    # walk that stops at the loop would take for phase 0 (the init before it)
    k = Var("k")
    body = _issue(_wait())
    with pytest.raises(CodegenError, match=r"the mbarrier arrival is in loop k, whose earlier iterations"):
        check_races(_kernel(For(k, 0, 2, ForKind.SERIAL, body), _sync(), _reads()))


def test_the_phase_proof_needs_one_arrival_a_phase_by_one_thread() -> None:
    ok = (_issue(), _wait(), _sync(), _reads())
    check_races(_kernel(*ok))
    init2 = IfThenElse(TX == 0, Evaluate(T.mbarrier_init(BAR[0], 2)))
    body = seq(init2, _sync(), *ok)
    k = For(TX, 0, 128, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")
    with pytest.raises(CodegenError, match=r"the phase proof counts one arrival a phase \(count 1\)"):
        check_races(PrimFunc((G, OUT), Allocate(TILE, Allocate(BAR, k)), name="k"))
    everyone = seq(Evaluate(T.mbarrier_arrive_expect_tx(BAR[0], 2048)), IfThenElse(TX == 0, _load()))
    with pytest.raises(CodegenError, match=r"the mbarrier arrival is made by every thread of threadIdx.x"):
        check_races(_kernel(everyone, _wait(), _sync(), _reads()))
    copies = seq(IfThenElse(TX == 0, Evaluate(T.mbarrier_arrive_expect_tx(BAR[0], 2048))), _load())
    with pytest.raises(CodegenError, match=r"the TMA copy is made by every thread of threadIdx.x(.|\n)*ptx_tma_load"):
        check_races(_kernel(copies, _wait(), _sync(), _reads()))


def _announcing(nbytes: object, *copies: Stmt) -> IfThenElse:
    return IfThenElse(TX == 0, seq(Evaluate(T.mbarrier_arrive_expect_tx(BAR[0], nbytes)), *copies))


@pytest.mark.parametrize("nbytes", [1024, 4096, 0])
def test_expect_tx_must_announce_the_copies_bytes(nbytes: int) -> None:
    """A 16 x 64 fp16 box brings 2048 bytes: announcing fewer completes the phase while the copy
    still lands (the waits order nothing), more never completes it (they hang)."""
    check_races(_kernel(_announcing(2048, _load()), _wait(), _sync(), _reads()))
    with pytest.raises(CodegenError, match=rf"the mbarrier arrival announces {nbytes} bytes, but its phase's "
                                           r"copies bring 2048 \(= 2048 bytes\)(.|\n)*expect_tx\(bar\[0\], "
                                           rf"{nbytes}\)"):  # fmt: skip
        check_races(_kernel(_announcing(nbytes, _load()), _wait(), _sync(), _reads()))


def test_expect_tx_is_proven_symbolically_and_counts_every_copy_of_the_phase() -> None:
    """The count is an expression of the loops around the arrival (proven equal over their
    ranges); an arrival with no copy announces no bytes; two copies of a phase add up."""
    k = Var("k")
    other = Buffer("other", (16, 64), "float16", scope="shared")
    odd = IfThenElse(TX == 0, seq(Evaluate(T.mbarrier_arrive_expect_tx(BAR[0], k * 512 + 2048)), _load()))
    check_races(_kernel(For(k, 0, 1, ForKind.SERIAL, seq(odd, _wait(), _sync())), _reads()))  # k is 0
    with pytest.raises(CodegenError, match=r"announces k \* 512 \+ 2048 bytes"):  # k may be 1
        check_races(_kernel(For(k, 0, 2, ForKind.SERIAL, seq(odd, _wait(), _sync())), _reads()))
    with pytest.raises(CodegenError, match=r"announces 2048 bytes, but its phase's copies bring no copy"):
        check_races(_kernel(_announcing(2048), _wait(), _sync(), _reads()))
    two = _announcing(4096, _load(), Evaluate(T.tma_load(other[0, 0], G[16, 0], BAR[0], (16, 64))))
    func = _kernel(two, _wait(), _sync(), _reads())
    func = PrimFunc(func.params, Allocate(other, func.body), name="k")
    check_races(func)
    with pytest.raises(CodegenError, match=r"announces 2048 bytes, but its phase's copies bring 2048 \+ 2048"):
        check_races(PrimFunc(func.params, Allocate(other, _kernel(
            _announcing(2048, _load(), Evaluate(T.tma_load(other[0, 0], G[16, 0], BAR[0], (16, 64)))),
            _wait(), _sync(), _reads()).body), name="k"))  # fmt: skip


def test_a_copy_under_a_condition_its_arrival_is_not_under_is_refused() -> None:
    """``if i < n: tma_load(...)`` after an unconditional arrival: when the copy is skipped the
    announced bytes never come and the phase never completes."""
    n = Var("n")
    rows = Buffer("rows", (n,), "int32")  # a kernel argument whose length is n
    skipped = _announcing(2048, IfThenElse(n > 16, _load()))
    func = _kernel(skipped, _wait(), _sync(), _reads())
    with pytest.raises(CodegenError, match=r"the TMA copy is under a condition that its arrival "
                                           r"T.ptx_mbarrier_arrive_expect_tx\(bar\[0\], 2048\) is not under"):  # fmt: skip
        check_races(PrimFunc((*func.params, rows), func.body, name="k"))
