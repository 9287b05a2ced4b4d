"""SinkWgmmaWaits (``loopir.passes.wgmma_waits``, issue 33): synchronous ``ptx_wgmma`` issued
asynchronously, each ``wgmma.wait_group`` sunk to the first statement that needs its group.

On small hand-written kernels (one warpgroup: ``threadIdx.y`` 4 warps x 32 lanes):

* the module doc's example as a golden file (FlashAttention 3's step: ``S`` and ``P V`` issued,
  ``wait_group 1`` before the softmax touches ``S``, ``wait_group 0`` before ``P`` is written);
* where each wait goes: before a write of the group's tiles, before the back-edge of a loop with
  nothing after the issue, after a condition holding the issue (counting the groups of a branch
  as the fewest), one wait per issue for a loop of issues, at the end of an allocation's body;
* the result computes what the input did on the CPU executor, and ``check_accumulators``
  accepts it; it refuses the same kernel with a wait moved past a toucher or allowing one group
  too many (the checker's groups retire in order);
* nothing changes without ``loopir.wgmma_async`` or ``cuda.wgmma_async``.
"""

from __future__ import annotations

import numpy as np
import pytest

import loopir
from loopir.codegen_cuda.wgmma_async import check_accumulators
from loopir.errors import CodegenError
from loopir.ir import op
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Call, FloatImm, IntImm, Var
from loopir.ir.functor import post_order_visit
from loopir.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
    seq,
)
from loopir.passes import PassContext, SinkWgmmaWaits
from loopir.passes.wgmma_waits import WGMMA_ASYNC_KEY
from tests.tensor_intrin.kernels import to_storage

Q_s = Buffer("Q_s", (64, 64), "float16", scope="shared")
K_s = Buffer("K_s", (64, 64), "float16", scope="shared")
V_s = Buffer("V_s", (64, 64), "float16", scope="shared")
S = Buffer("S", (4, 4, 32, 8), "float32", scope="warp")
P = Buffer("P", (4, 4, 32, 8), "float16", scope="warp")
acc = Buffer("acc", (4, 4, 32, 8), "float32", scope="warp")
X = Buffer("X", (4, 32), "float32")


def _threads(body: object) -> Stmt:
    """``body(ty, tx)`` under the warpgroup's thread loops (fresh variables each time)."""
    ty, tx = Var("ty"), Var("tx")
    inner = For(tx, 0, 32, ForKind.THREAD_BINDING, body(ty, tx), thread_tag="threadIdx.x")  # type: ignore[operator]
    return For(ty, 0, 4, ForKind.THREAD_BINDING, inner, thread_tag="threadIdx.y")


def _s_gemm() -> Stmt:
    return _threads(lambda ty, tx: Evaluate(op.ptx_wgmma(Q_s[ty * 16, 0], K_s[0, 0], S[ty, 0, tx, 0], 64, 64)))


def _pv_gemm() -> Stmt:
    return _threads(lambda ty, tx: Evaluate(op.ptx_wgmma(P[ty, 0, tx, 0], V_s[0, 0], acc[ty, 0, tx, 0], 64, 64, True)))


def _each(buf: Buffer, value: object) -> Stmt:
    """Every element of a thread's fragment of ``buf`` set to ``value(ty, tx, t, v)``."""
    def body(ty: Var, tx: Var) -> Stmt:
        t, v = Var("t"), Var("v")
        store = BufferStore(buf, value(ty, tx, t, v), (ty, t, tx, v))  # type: ignore[operator]
        return For(t, 0, 4, ForKind.SERIAL, For(v, 0, 8, ForKind.UNROLLED, store))
    return _threads(body)


def _scale_s() -> Stmt:
    return _each(S, lambda ty, tx, t, v: S[ty, t, tx, v] * FloatImm(0.5, "float32"))


def _convert_p() -> Stmt:
    return _each(P, lambda ty, tx, t, v: op_cast("float16", S[ty, t, tx, v]))


def op_cast(dtype: str, e: object) -> object:
    from loopir.ir.expr import Cast

    return Cast(dtype, e)  # type: ignore[arg-type]


def _other() -> Stmt:
    return _threads(lambda ty, tx: BufferStore(X, FloatImm(1.0, "float32"), (ty, tx)))


def _func(body: Stmt, annotate: bool = True) -> PrimFunc:
    """``body`` in a one-iteration region loop (annotated ``loopir.wgmma_async``)."""
    region = For(Var("blk"), 0, 1, ForKind.THREAD_BINDING, body, thread_tag="blockIdx.x",
                 annotations={WGMMA_ASYNC_KEY: 1} if annotate else {})  # fmt: skip
    return PrimFunc((Q_s, K_s, V_s, S, P, acc, X), region, name="k")


def _step(n: int = 3) -> PrimFunc:
    """FlashAttention 3's step: S and P V issued, other work, the softmax on S, P written."""
    j = Var("j")
    return _func(For(j, 0, n, ForKind.SERIAL, seq(_s_gemm(), _pv_gemm(), _other(), _scale_s(), _convert_p())))


def _sunk(func: PrimFunc) -> PrimFunc:
    out = SinkWgmmaWaits()(func)
    loopir.verify(out)
    return out


def _calls(func: PrimFunc) -> list[str]:
    """The wgmma calls and stores in program order: ``issue S``, ``wait 1 S``, ``store X``."""
    out: list[str] = []

    def visit(s: Stmt) -> None:
        if isinstance(s, Evaluate) and isinstance(s.value, Call):
            v = s.value
            if v.op == "ptx_wgmma_wait":
                acc_ = v.args[4]
                out.append(f"wait {v.args[0].value} {acc_.buffer.name}")  # type: ignore[attr-defined]
            elif v.op in op.WGMMA_ISSUES:
                kind = "issue" if v.op == "ptx_wgmma_async" else "sync"
                out.append(f"{kind} {v.args[3].buffer.name}")  # type: ignore[attr-defined]
        elif isinstance(s, BufferStore):
            out.append(f"store {s.buffer.name}")
        elif isinstance(s, SeqStmt):
            for c in s.seq:
                visit(c)
        elif isinstance(s, (For, Allocate)):
            visit(s.body)
        elif isinstance(s, IfThenElse):
            out.append("if")
            visit(s.then_case)
            if s.else_case is not None:
                out.append("else")
                visit(s.else_case)
            out.append("endif")

    visit(func.body)
    return out


def test_golden_flash_attention_step(golden) -> None:
    before = _step()
    after = _sunk(before)
    golden("passes/wgmma_waits", f"# before\n{before.script()}\n# after\n{after.script()}")
    assert _calls(after) == ["issue S", "issue acc", "store X", "wait 1 S", "store S", "wait 0 acc", "store P"]


def test_check_accumulators_accepts_the_result_and_refuses_a_wrong_placement() -> None:
    after = _sunk(_step())
    check_accumulators("k", after.body)
    with pytest.raises(CodegenError, match=r"kernel k: the accumulator S of an asynchronous wgmma .* is touched"):
        check_accumulators("k", _with_pending(after, "S", 2).body)  # S is the older of two groups
    with pytest.raises(CodegenError, match=r"kernel k: the accumulator P of an asynchronous wgmma .* is touched"):
        check_accumulators("k", _with_pending(after, "acc", 1).body)  # P V still in flight when P is written
    with pytest.raises(CodegenError, match="the accumulator S of an asynchronous wgmma"):
        check_accumulators("k", _swapped(after).body)


def _with_pending(func: PrimFunc, acc_name: str, pending: int) -> PrimFunc:
    from loopir.ir.functor import Mutator

    class Edit(Mutator):
        def visit_Call(self, e: Call) -> object:
            if e.op == "ptx_wgmma_wait" and e.args[4].buffer.name == acc_name:  # type: ignore[attr-defined]
                return Call(e.dtype, e.op, (IntImm(pending, "int32"), *e.args[1:]))
            return self.generic_visit(e)

    return func.with_body(Edit().visit(func.body))


def _swapped(func: PrimFunc) -> PrimFunc:
    """The S wait moved after the statement that touches S."""
    from loopir.ir.functor import Mutator

    class Swap(Mutator):
        def visit_SeqStmt(self, s: SeqStmt) -> Stmt:
            out = list(self.generic_visit(s).seq)  # type: ignore[attr-defined]
            for i, c in enumerate(out[:-1]):
                if "wait 1 S" in _calls(_func(c, False)):
                    out[i], out[i + 1] = out[i + 1], out[i]
                    break
            return SeqStmt(tuple(out))

    return func.with_body(Swap().visit(func.body))


def test_the_result_computes_what_the_input_did_on_the_cpu() -> None:
    rng = np.random.default_rng(1)
    tiles = [to_storage(rng.standard_normal((64, 64)), "float16") for _ in range(3)]
    frags = [rng.standard_normal((4, 4, 32, 8)).astype(np.float32),
             to_storage(rng.standard_normal((4, 4, 32, 8)), "float16"),
             rng.standard_normal((4, 4, 32, 8)).astype(np.float32), np.zeros((4, 32), np.float32)]  # fmt: skip
    outs = []
    for func in (_step(), _sunk(_step())):
        args = [a.copy() for a in tiles + frags]
        loopir.build(func, target="cpu", thread_order="random")(*args)
        outs.append(args)
    for a, b in zip(*outs):
        assert np.array_equal(a, b)
    assert not np.array_equal(outs[0][5], frags[2])  # acc changed: the MMAs ran


def test_a_write_of_the_tiles_stops_the_wait() -> None:
    """The tensor cores read K_s until the wait: a store of K_s (any thread's) comes after it."""
    k_store = _threads(lambda ty, tx: BufferStore(K_s, op_cast("float16", FloatImm(0.0, "float32")), (ty, tx)))
    after = _sunk(_func(seq(_s_gemm(), _other(), k_store, _scale_s())))
    assert _calls(after) == ["issue S", "store X", "wait 0 S", "store K_s", "store S"]


def test_a_loop_without_a_later_toucher_waits_before_its_back_edge() -> None:
    j = Var("j")
    after = _sunk(_func(seq(For(j, 0, 2, ForKind.SERIAL, seq(_scale_s(), _s_gemm(), _other())), _convert_p())))
    assert _calls(after) == ["store S", "issue S", "store X", "wait 0 S", "store P"]


def test_a_branch_counts_its_fewest_groups_and_the_wait_leaves_the_condition() -> None:
    """The S issue under a condition: its wait comes after the condition, where the softmax is;
    the P V issue in a branch without an else counts no group (the branch may not run)."""
    n = Var("n")
    guarded_s = IfThenElse(n > 0, _s_gemm())
    guarded_pv = IfThenElse(n > 1, _pv_gemm())
    after = _sunk(_func(For(n, 0, 3, ForKind.SERIAL, seq(guarded_s, guarded_pv, _scale_s(), _convert_p()))))
    assert _calls(after) == ["if", "issue S", "endif", "if", "issue acc", "endif", "wait 0 S", "store S",
                             "wait 0 acc", "store P"]  # fmt: skip
    both = IfThenElse(n > 1, _pv_gemm(), _pv_gemm())  # both branches issue: one group either way
    after = _sunk(_func(For(n, 0, 3, ForKind.SERIAL, seq(_s_gemm(), both, _scale_s(), _convert_p()))))
    assert _calls(after) == ["issue S", "if", "issue acc", "else", "issue acc", "endif", "wait 1 S", "store S",
                             "wait 0 acc", "wait 0 acc", "store P"]  # fmt: skip  (one wait per branch's issue)
    check_accumulators("k", after.body)


def test_statements_under_one_condition_share_it_and_keep_their_waits_inside() -> None:
    """A pipeline's guarded epilogue step (every statement under ``if n > 1``) becomes one
    ``if``: the waits follow their issues inside it (ptxas serializes a kernel's wgmma when an
    issue under a condition is waited for outside it)."""
    n = Var("n")
    step = [IfThenElse(n > 1, s) for s in (_s_gemm(), _pv_gemm(), _scale_s(), _convert_p())]
    after = _sunk(_func(For(n, 0, 3, ForKind.SERIAL, seq(*step, _other()))))
    assert _calls(after) == ["if", "issue S", "issue acc", "wait 1 S", "store S", "wait 0 acc", "store P", "endif",
                             "store X"]  # fmt: skip
    check_accumulators("k", after.body)


def test_a_loop_of_issues_gets_a_loop_of_waits() -> None:
    """Two issues into S (columns 0-63, then K's second half): one wait nest, the same loop."""
    k = Var("kk")
    issues = For(k, 0, 2, ForKind.SERIAL, _threads(
        lambda ty, tx: Evaluate(op.ptx_wgmma(Q_s[ty * 16, 0], K_s[0, 0], S[ty, k, tx, 0], 16, 64))))  # fmt: skip
    after = _sunk(_func(seq(issues, _pv_gemm(), _other(), _scale_s(), _convert_p())))
    assert _calls(after) == ["issue S", "issue acc", "store X", "wait 1 S", "store S", "wait 0 acc", "store P"]
    text = after.script()
    assert text.count("T.ptx_wgmma_wait(1") == 1 and "for kk_1 in T.serial(2)" in text  # the copied loop
    check_accumulators("k", after.body)


def test_an_allocation_keeps_its_waits() -> None:
    """A group issued inside an allocation's body is retired before the body ends."""
    tmp = Buffer("tmp", (1,), "float32", scope="local")
    inner = Allocate(tmp, seq(_s_gemm(), _threads(lambda ty, tx: BufferStore(tmp, FloatImm(0.0, "float32"), (0,)))))
    after = _sunk(_func(seq(inner, _scale_s())))
    assert _calls(after) == ["issue S", "store tmp", "wait 0 S", "store S"]


def test_nothing_changes_unless_asked() -> None:
    func = _step()
    plain = _func(func.body.body, annotate=False)  # type: ignore[attr-defined]
    assert SinkWgmmaWaits()(plain) is plain
    with PassContext(config={"cuda.wgmma_async": True}):
        everywhere = SinkWgmmaWaits()(plain)
    assert _calls(everywhere) == _calls(_sunk(func))
    no_wgmma = _func(_other())
    assert SinkWgmmaWaits()(no_wgmma) is no_wgmma
    assert all(c.startswith("sync") or c.startswith("store") for c in _calls(plain))


def test_lowering_runs_it_only_when_asked() -> None:
    from loopir.passes import default_pipeline

    def names(func: PrimFunc | None, **cfg: object) -> list[str]:
        with PassContext(config=cfg):
            return [p.name for p in default_pipeline(func=func).passes]

    assert "SinkWgmmaWaits" in names(_step())
    assert "SinkWgmmaWaits" not in names(_func(_step().body.body, annotate=False))  # type: ignore[attr-defined]
    assert "SinkWgmmaWaits" in names(None, **{"cuda.wgmma_async": True})
    order = names(_step())
    assert order.index("SinkWgmmaWaits") < order.index("ThreadSync")


def _issues(func: PrimFunc) -> list[Call]:
    found: list[Call] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, Call) and n.op in op.WGMMA_ISSUES else None)
    return found
