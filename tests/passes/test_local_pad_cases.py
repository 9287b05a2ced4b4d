"""LocalPadding on hand-built kernels: the tricky cases of issue 4.

Every case checks the structure (what was inlined, kept, refused) *and* that the padded kernel
computes the same as the unpadded one and numpy on the CPU executor (and, where threads
cooperate, on the SIMT executor).
"""

from __future__ import annotations

import itertools
import logging
import os

import numpy as np
import pytest
from _passes_kernels import Ctx, reference, row_reduce
from _passes_util import assert_close, guard_of, inputs, nodes, run_cpu, run_simt, store_to, text
from hypothesis import event, given, settings
from hypothesis import strategies as st

from loopir.ir import (
    Allocate,
    Buffer,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Select,
    Var,
    op,
    seq,
)
from loopir.passes import LocalPadding, Simplify


def pad(f: PrimFunc) -> tuple[PrimFunc, LocalPadding]:
    lp = LocalPadding(explain=True)
    return Simplify()(lp(f)), lp


def check_numeric(f: PrimFunc, g: PrimFunc, kind: str, sizes: dict[str, int] | None = None) -> None:
    x = inputs(f, seed=3, sizes=sizes)
    want = reference(x[0], kind)
    assert_close(run_cpu(f, x)[1], want)
    assert_close(run_cpu(g, x)[1], want)
    assert_close(run_simt(g, x)[1], want)


def fetch_select(g: PrimFunc) -> Select | None:
    (st,) = store_to(g, "A_sh")
    return st.value if isinstance(st.value, Select) else None


def conj_texts(e: object) -> list[str]:
    from loopir.passes._walk import conjuncts

    return [text(c) for c in conjuncts(e)]


ROW, KK = "bx * 4 + tx < 10", "k0 * 4 + kk < 10"
NOT_TEXT = text(op.not_(Var("k0") * 4 + Var("kk") >= 10))


def _orders():
    a = lambda c: c.row < c.M  # noqa: E731
    b = lambda c: c.k < c.K  # noqa: E731
    yield "a&&b", lambda c: op.all_(a(c), b(c))
    yield "b&&a", lambda c: op.all_(b(c), a(c))
    yield "nested-and", lambda c: op.all_(op.all_(b(c), c.kk >= 0), a(c))
    yield "nested-if", lambda c: [b(c), a(c)]
    yield "if-of-and", lambda c: [op.all_(a(c), c.tx >= 0), b(c)]


@pytest.mark.parametrize("name,guard", list(_orders()), ids=[n for n, _ in _orders()])
def test_conjuncts_in_every_order_and_nested(name: str, guard) -> None:  # noqa: ANN001
    f = row_reduce(fetch_guard=guard, compute_guard=guard)
    g, lp = pad(f)
    sel = fetch_select(g)
    assert sel is not None, str(lp.report)
    assert sorted(t for t in conj_texts(sel.condition) if t in (ROW, KK)) == sorted([ROW, KK])
    (st,) = store_to(g, "A_sh")
    assert guard_of(g, st) == []  # nothing protects the store: all inlined
    (upd,) = [s for s in store_to(g, "acc") if nodes(s.value, Select) == [] and "A_sh" in str(s)]
    assert guard_of(g, upd) == []
    check_numeric(f, g, "sum")


def test_guard_mixing_store_and_load_index_vars() -> None:
    # k0*4 + kk < K mixes kk (a store index) with k0 (load only): it is still inlineable,
    # because the store A_sh[tx, kk] stays in bounds and injective without it.
    f = row_reduce(K=7)
    g, lp = pad(f)
    (rep,) = lp.report.by_buffer("A_sh")
    assert [c.inlined for c in rep.conjuncts] == [True, True]
    check_numeric(f, g, "sum")


def test_store_protecting_guard_is_kept_by_proof_not_syntax() -> None:
    """A guard ``tx < 128`` over a store index ``tx * 4 + j`` into 512 elements must stay."""
    a = Buffer("A", (1024,), "float32")
    out = Buffer("O", (1,), "float32")
    sh = Buffer("S", (512,), "float32", scope="shared")
    acc = Buffer("acc", (1,), "float32", scope="local")
    tx, j, r = Var("tx"), Var("j"), Var("r")
    fetch = For(j, 0, 4, ForKind.SERIAL, IfThenElse(op.all_(tx < 128, j < 3),
                BufferStore(sh, a[tx * 4 + j], (tx * 4 + j,))))  # fmt: skip
    body = Allocate(sh, seq(
        For(tx, 0, 256, ForKind.SERIAL, fetch),
        Allocate(acc, seq(
            BufferStore(acc, 0.0, (0,)),
            For(r, 0, 512, ForKind.SERIAL, IfThenElse(r % 4 < 3, BufferStore(acc, acc[0] + sh[r] * 2.0, (0,)))),
            BufferStore(out, acc[0], (0,)),
        )),
    ))  # fmt: skip
    f = PrimFunc((a, out), body)
    g, lp = pad(f)
    (rep,) = lp.report.by_buffer("S")
    kept = {c.text: c for c in rep.conjuncts}
    assert not kept["tx < 128"].inlined and "could leave [0, 512)" in kept["tx < 128"].reason
    assert kept["j < 3"].inlined
    (st,) = store_to(g, "S")
    assert [text(c) for c in guard_of(g, st)] == ["tx < 128"]
    assert isinstance(st.value, Select)
    x = inputs(f)
    want = x[0][:512].reshape(128, 4)[:, :3].astype(np.float64).sum() * 2
    assert_close(run_cpu(g, x)[1], np.array([want]))
    assert_close(run_cpu(f, x)[1], np.array([want]))


def test_duplicate_writes_keep_the_guard() -> None:
    """Without ``r < 1`` every r would write the same element: a pad would clobber it."""
    f = row_reduce()
    # replace the fetch by one whose store index ignores a loop: A_sh[tx, kk] for r in 2
    a_sh = next(x.buffer for x in nodes(f.body, Allocate) if x.buffer.name == "A_sh")
    r = Var("r")

    from loopir.ir.functor import Mutator

    class Dup(Mutator):
        def visit_For(self, node: For) -> For:
            node = self.generic_visit(node)
            if node.loop_var.name == "kk":
                inner = node.body
                assert isinstance(inner, IfThenElse)
                cond = op.all_(inner.condition, r < 1)
                return For(r, 0, 2, ForKind.SERIAL, For(node.loop_var, 0, node.extent, node.kind, IfThenElse(cond, inner.then_case)))
            return node

    f2 = f.with_body(Dup().visit(f.body))
    g, lp = pad(f2)
    (rep,) = lp.report.by_buffer("A_sh")
    dec = {c.text: c for c in rep.conjuncts}
    assert not dec["r < 1"].inlined and "same element" in dec["r < 1"].reason
    assert a_sh is not None
    check_numeric(f2, g, "sum")


@pytest.mark.parametrize(
    "guard,expect_kept",
    [
        (lambda c: op.all_(op.any_(c.row < c.M, c.k < 0), c.k < c.K), ["bx * 4 + tx < 10 or k0 * 4 + kk < 0"]),
        (lambda c: op.all_(c.row < c.M, c.k < c.K, c.kk == c.kk), ["kk == kk"]),
        (lambda c: op.all_(c.row < c.M, c.k < c.K, op.not_(c.k >= c.K)), [NOT_TEXT]),
        (lambda c: op.all_(c.k < c.K, c.kk != 5, c.row < c.M), ["kk != 5"]),
    ],
    ids=["or", "eq", "not", "ne"],
)
def test_atomic_conjuncts_are_never_split_or_dropped(guard, expect_kept: list[str]) -> None:  # noqa: ANN001
    f = row_reduce(fetch_guard=guard)
    lp = LocalPadding()
    raw = lp(f)  # structure before Simplify, which may fold an always-true atomic conjunct
    (rep,) = lp.report.by_buffer("A_sh")
    kept = [c for c in rep.conjuncts if not c.inlined]
    assert len(kept) == 1 and "never" in kept[0].reason
    assert len([c for c in rep.conjuncts if c.inlined]) == len(rep.conjuncts) - 1
    (st,) = store_to(raw, "A_sh")
    (cond,) = guard_of(raw, st)
    assert text(cond) == kept[0].text == expect_kept[0]
    check_numeric(f, Simplify()(raw), "sum")


def test_max_reduction_pads_with_minus_inf() -> None:
    f = row_reduce(kind="max")
    g, lp = pad(f)
    sel = fetch_select(g)
    assert sel is not None and sel.false_value.value == float("-inf")
    comp = [c for c in lp.report.candidates if c.kind == "compute"][0]
    assert comp.outcome == "guard reduced" and all(c.inlined for c in comp.conjuncts)
    check_numeric(f, g, "max")


def test_min_reduction_pads_with_plus_inf_and_int_highest() -> None:
    f = row_reduce(kind="min")
    g, _ = pad(f)
    assert fetch_select(g).false_value.value == float("inf")
    check_numeric(f, g, "min")
    fi = row_reduce(kind="min", dtype="int32")
    gi, _ = pad(fi)
    assert fetch_select(gi).false_value.value == np.iinfo(np.int32).max
    check_numeric(fi, gi, "min")


def test_max_of_products_is_refused() -> None:
    f = row_reduce(kind="maxprod")
    g, lp = pad(f)
    (rep,) = lp.report.by_buffer("A_sh")
    assert rep.outcome == "refused" and "identity" in rep.reason
    assert fetch_select(g) is None
    comp = [c for c in lp.report.candidates if c.kind == "compute"][0]
    assert comp.outcome == "unchanged"
    check_numeric(f, g, "maxprod")


def test_non_constant_init_is_refused() -> None:
    f = row_reduce(init=lambda c: op.cast(c.tx, "float32") * 0.0)
    g, lp = pad(f)
    (init,) = [c for c in lp.report.candidates if c.kind == "init"]
    assert init.outcome == "refused" and "not a constant" in init.reason
    check_numeric(f, g, "sum")


def test_two_different_init_values_are_refused() -> None:
    f = row_reduce()
    acc = next(x.buffer for x in nodes(f.body, Allocate) if x.buffer.name == "acc")
    from loopir.ir.functor import Mutator

    class TwoInits(Mutator):
        def visit_IfThenElse(self, node: IfThenElse) -> object:
            st = node.then_case
            if isinstance(st, BufferStore) and st.buffer is acc and not nodes(st.value, type(acc[0])):
                other = IfThenElse(node.condition > node.condition, BufferStore(acc, 1.0, (0,)))  # never runs
                return seq(node, other)
            return self.generic_visit(node)

    f2 = f.with_body(TwoInits().visit(f.body))
    g, lp = pad(f2)
    inits = [c for c in lp.report.candidates if c.kind == "init"]
    assert inits and all(c.outcome == "refused" and "different values" in c.reason for c in inits)
    check_numeric(f2, g, "sum")


def test_k_extent_not_divisible_by_k_tile() -> None:
    f = row_reduce(M=9, K=11, KT=4)
    g, lp = pad(f)
    assert fetch_select(g) is not None
    check_numeric(f, g, "sum")


def test_vectorized_fetch_select_is_correct() -> None:
    f = row_reduce(vectorize=True)
    g, _ = pad(f)
    (loop,) = [x for x in nodes(g.body, For) if x.loop_var.name == "kk"]
    assert loop.kind is ForKind.VECTORIZED and isinstance(fetch_select(g), Select)
    check_numeric(f, g, "sum")


def test_symbolic_extent() -> None:
    M = Var("M")
    f = row_reduce(M=M)
    g, lp = pad(f)
    sel = fetch_select(g)
    assert sel is not None and "M" in text(sel.condition)
    (rep,) = lp.report.by_buffer("A_sh")
    assert all(c.inlined for c in rep.conjuncts)
    check_numeric(f, g, "sum", sizes={"M": 13})


def test_store_in_else_branch_is_refused() -> None:
    f = row_reduce()
    from loopir.ir.functor import Mutator

    class Else(Mutator):
        def visit_IfThenElse(self, node: IfThenElse) -> object:
            st = node.then_case
            if isinstance(st, BufferStore) and st.buffer.name == "A_sh":
                return IfThenElse(op.not_(node.condition), BufferStore(st.buffer, op.const(0.0, "float32"), st.indices), IfThenElse(node.condition, st))
            return self.generic_visit(node)

    f2 = f.with_body(Else().visit(f.body))
    _, lp = pad(f2)
    assert any(c.outcome == "refused" and "else-branch" in c.reason for c in lp.report.by_buffer("A_sh"))


def test_consumer_not_a_reduction_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    f = row_reduce(kind="copy")  # acc = A_sh[tx, kc] * 2: the tile is read by a plain store
    caplog.set_level(logging.DEBUG, logger="loopir.passes.local_pad")
    lp = LocalPadding()
    g = Simplify()(lp(f))
    (a,) = lp.report.by_buffer("A_sh")
    assert a.outcome == "refused" and "not inside a recognized reduction" in a.reason
    assert fetch_select(g) is None
    assert any("LocalPadding report" in r.getMessage() for r in caplog.records)
    check_numeric(f, g, "copy")


def test_two_reductions_no_single_identity() -> None:
    f = row_reduce(kind="sum+max")  # the tile feeds a sum and a max: 0 and -inf disagree
    g, lp = pad(f)
    (a,) = lp.report.by_buffer("A_sh")
    assert a.outcome == "refused" and "no single identity" in a.reason
    assert fetch_select(g) is None
    inits = [c for c in lp.report.candidates if c.kind == "init"]
    assert {c.buffer for c in inits} == {"acc", "acc2"}  # each accumulator has one identity
    check_numeric(f, g, "sum+max")


def test_every_permutation_of_three_conjuncts_gives_one_answer() -> None:
    answers = set()
    for perm in itertools.permutations(range(3)):
        def guard(c: Ctx, perm=perm):  # noqa: ANN202
            parts = [c.row < c.M, c.k < c.K, c.tx < 4]
            return op.all_(*[parts[i] for i in perm])

        f = row_reduce(fetch_guard=guard)
        g, lp = pad(f)
        (rep,) = lp.report.by_buffer("A_sh")
        answers.add(frozenset((c.text, c.inlined) for c in rep.conjuncts))
        check_numeric(f, g, "sum")
    assert len(answers) == 1


def test_reader_of_an_older_round_value_is_refused() -> None:
    """A tile that outlives a round keeps old values where a guarded fetch does not write; an
    unguarded reader that uses them must not see pads instead."""
    x_buf = Buffer("X", (4,), "float32")
    out = Buffer("O", (1,), "float32")
    tile = Buffer("L", (4,), "float32", scope="local")
    acc = Buffer("acc", (1,), "float32", scope="local")
    r, i, j = Var("r"), Var("i"), Var("j")
    body = Allocate(tile, Allocate(acc, seq(
        BufferStore(acc, 0.0, (0,)),
        For(r, 0, 2, ForKind.SERIAL, seq(
            For(i, 0, 4, ForKind.SERIAL, IfThenElse(i + r < 4, BufferStore(tile, x_buf[i + r], (i,)))),
            For(j, 0, 4, ForKind.SERIAL, BufferStore(acc, acc[0] + tile[j], (0,))),
        )),
        BufferStore(out, acc[0], (0,)),
    )))  # fmt: skip
    f = PrimFunc((x_buf, out), body)
    g, lp = pad(f)
    (rep,) = lp.report.by_buffer("L")
    assert rep.outcome == "refused" and "older value" in rep.reason
    x = inputs(f)
    v = x[0].astype(np.float64)
    want = v.sum() + v[1:].sum() + v[3]
    assert_close(run_cpu(g, x)[1], np.array([want]))
    assert_close(run_cpu(f, x)[1], np.array([want]))


@st.composite
def _guards(draw):  # noqa: ANN001, ANN201
    """A guard family: the exact bounds plus redundant and atomic conjuncts, shuffled, nested."""
    def parts(c: Ctx) -> list:
        return [c.row < c.M, c.k < c.K, c.kk >= 0, c.tx < 10**6, op.any_(c.k < c.K, c.k < 0),
                c.kk == c.kk]  # fmt: skip

    chosen = draw(st.lists(st.integers(2, 5), max_size=3, unique=True))
    order = draw(st.permutations([0, 1, *chosen]))
    nest = draw(st.integers(0, 2))

    def guard(c: Ctx):  # noqa: ANN202
        ps = [parts(c)[i] for i in order]
        if nest == 0:
            return op.all_(*ps)
        if nest == 1:
            return [op.all_(*ps[:1]), op.all_(*ps[1:])] if len(ps) > 1 else ps[0]
        return op.all_(op.all_(*ps[: len(ps) // 2]), op.all_(*ps[len(ps) // 2:]))

    return guard


@settings(deadline=None, max_examples=30 if os.environ.get("CI") else 15)  # CI: 100 until session 22, 60 until 24 (CI time)
@given(
    st.integers(1, 13), st.integers(1, 13), st.sampled_from([1, 2, 4]), st.sampled_from([1, 3, 4]),
    st.sampled_from(["sum", "max", "min"]), st.sampled_from(["float32", "int32"]), st.booleans(),
    _guards(), _guards(),
)
def test_random_guard_families_keep_results(  # noqa: PLR0913
    M: int, K: int, T: int, KT: int, kind: str, dtype: str, vec: bool, fg, cg  # noqa: ANN001
) -> None:
    f = row_reduce(M=M, K=K, T=T, KT=KT, kind=kind, fetch_guard=fg, compute_guard=cg,
                   vectorize=vec, dtype=dtype)  # fmt: skip
    g, lp = pad(f)
    event("A_sh " + lp.report.by_buffer("A_sh")[0].outcome)
    x = inputs(f, seed=M * 31 + K)
    want = reference(x[0], kind)
    assert_close(run_simt(f, x)[1], want.astype(x[1].dtype) if dtype == "int32" else want)
    assert_close(run_simt(g, x)[1], want.astype(x[1].dtype) if dtype == "int32" else want)


def test_init_of_an_accumulator_that_outlives_a_round_is_refused() -> None:
    """``if r < 1: L = 0`` must not become ``L = 0`` every round: round 1 keeps accumulating."""
    x_buf = Buffer("X", (2,), "float32")
    out = Buffer("O", (2,), "float32")
    acc = Buffer("L", (1,), "float32", scope="local")
    r = Var("r")
    body = Allocate(acc, For(r, 0, 2, ForKind.SERIAL, seq(
        IfThenElse(r < 1, BufferStore(acc, 0.0, (0,))),
        BufferStore(acc, acc[0] + x_buf[r], (0,)),
        BufferStore(out, acc[0], (r,)),
    )))  # fmt: skip
    f = PrimFunc((x_buf, out), body)
    g, lp = pad(f)
    (init,) = [c for c in lp.report.candidates if c.kind == "init"]
    assert init.outcome == "refused" and "older value" in init.reason
    x = inputs(f)
    want = np.cumsum(x[0].astype(np.float64))
    assert_close(run_cpu(g, x)[1], want)
