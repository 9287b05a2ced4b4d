"""Unrolled accumulations fed by vector loads (``emit_vector_accumulate``)."""

from __future__ import annotations

import pytest

import loopir
from loopir.codegen_cuda import emit_cuda
from loopir.examples.reductions import layernorm_func, rmsnorm_func, row_sum, softmax_func
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Cast, IntImm, Var
from loopir.ir.stmt import Allocate, BufferStore, For, ForKind, PrimFunc, SeqStmt
from loopir.schedule.default_gpu import default_gpu_schedule, per_row

FUNCS = {"softmax": softmax_func, "layernorm": layernorm_func, "rmsnorm": rmsnorm_func}


def _default(name: str, rows: int, cols: int, dtype: str) -> PrimFunc:
    sch = loopir.Schedule(FUNCS[name](rows, cols, dtype))
    default_gpu_schedule(sch, row_registers=True)
    return sch.func


STATS = {"softmax": ["M", "S"], "layernorm": ["S1", "S2"], "rmsnorm": ["S"]}


@pytest.mark.parametrize("name,passes", [("softmax", 3), ("layernorm", 3), ("rmsnorm", 2)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_pass_over_the_row_reads_16_byte_vectors(name, passes, dtype) -> None:
    sch = loopir.Schedule(FUNCS[name](8, 1024, dtype))
    per_row(sch, "Y", STATS[name], 128, 8)  # no row cache: each pass reads the row
    (text,) = emit_cuda(loopir.lower(sch.func, target="cuda")).kernel_texts
    assert text.count("const uint4 X_v") == passes  # the reductions' passes and the output's
    assert "X[" not in text  # no scalar read of the row is left
    # the default schedule keeps the row in registers (opted in): one 16-byte read, no other
    (dflt,) = emit_cuda(loopir.lower(_default(name, 8, 1024, dtype), target="cuda")).kernel_texts
    assert dflt.count("const uint4 X_v") == 1 and "X[" not in dflt


def _acc_loop(offset: int, index_uses_v: bool = False) -> PrimFunc:
    """``for t: acc = 0; for v in unroll(4): acc[.] += float(X[t * 4 + offset + v]); Y[t] = acc``."""
    X, Y = Buffer("X", (260,), "float16"), Buffer("Y", (64,), "float32")
    acc = Buffer("acc", (4,), "float32", scope="local")
    t, v = Var("t"), Var("v")
    slot = v if index_uses_v else IntImm(0, "int32")
    upd = BufferStore(acc, acc[slot] + Cast("float32", X[t * 4 + offset + v]), (slot,))
    body = SeqStmt((BufferStore(acc, IntImm(0, "int32").astype("float32"), (IntImm(0, "int32"),)),
                    For(v, 0, 4, ForKind.UNROLLED, upd), BufferStore(Y, acc[0], (t,))))  # fmt: skip
    loop = For(t, 0, 64, ForKind.THREAD_BINDING, Allocate(acc, body), thread_tag="threadIdx.x")
    return PrimFunc((X, Y), loop)


def test_an_accumulation_takes_one_vector_load_and_keeps_the_lane_order() -> None:
    (text,) = emit_cuda(_acc_loop(0)).kernel_texts
    assert text.count("const uint2 X_v = *(const uint2*)(X + ") == 1
    updates = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("acc[0] = acc[0] +")]
    assert updates == [f"acc[0] = acc[0] + ((float)X_v_{k});" for k in range(4)]


def _guarded_chunk(increasing: bool) -> PrimFunc:
    """``for t: for o in range(4): for v in unroll(8): acc = max(acc, g ? X[...] : -inf)``, the
    guard ``g`` the same for the 8 lanes and ``(t * 4 + o) < 100`` (true up to some ``o``) or,
    ``increasing`` False, ``(t * 4 - o) < 100`` (false up to some ``o``)."""
    from loopir.ir.expr import FloatImm, Max, Select

    X, Y = Buffer("X", (32, 32, 8), "float16"), Buffer("Y", (32,), "float32")
    acc = Buffer("acc", (1,), "float32", scope="local")
    t, o, v = Var("t"), Var("o"), Var("v")
    zero = IntImm(0, "int32")
    g = (t * 4 + o if increasing else t * 4 - o) < 100
    pad = FloatImm(float("-inf"), "float32")
    upd = BufferStore(acc, Max(acc[zero], Select(g, Cast("float32", X[t, o, v]), pad)), (zero,))
    body = SeqStmt((BufferStore(acc, pad, (zero,)),
                    For(o, 0, 4, ForKind.SERIAL, For(v, 0, 8, ForKind.UNROLLED, upd)), BufferStore(Y, acc[0], (t,))))  # fmt: skip
    return PrimFunc((X, Y), For(t, 0, 32, ForKind.THREAD_BINDING, Allocate(acc, body), thread_tag="threadIdx.x"))


def test_a_loop_whose_guard_holds_up_to_an_iteration_is_unswitched() -> None:
    # the guard at the last iteration decides for every iteration: one loop without the guard
    # (16-byte loads nvcc can all issue first), the other as it was (each vector's branch)
    (text,) = emit_cuda(_guarded_chunk(True)).kernel_texts
    assert "if (t < 25) {" in text  # t * 4 + 3 < 100, the last iteration's guard, simplified
    assert text.count("const uint4 X_v") == 2 and text.count("for (int o") == 2
    assert "? ((float)" not in text  # no select per element in either loop
    # a guard that may fail before the last iteration and hold at it: not unswitched
    (down,) = emit_cuda(_guarded_chunk(False)).kernel_texts
    assert down.count("for (int o") == 1 and down.count("const uint4 X_v") == 1


@pytest.mark.parametrize("index_uses_v", [False, True])
def test_unaligned_loads_stay_scalar(index_uses_v) -> None:
    (text,) = emit_cuda(_acc_loop(1, index_uses_v)).kernel_texts
    assert "uint2" not in text and "#pragma unroll" in text


def test_per_lane_registers_take_their_lane_of_one_vector_load() -> None:
    (text,) = emit_cuda(_acc_loop(0, index_uses_v=True)).kernel_texts
    assert text.count("const uint2 X_v = *(const uint2*)(X + ") == 1
    updates = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("acc[")]
    assert updates[1:5] == [f"acc[{k}] = acc[{k}] + ((float)X_v_{k});" for k in range(4)]
    f = _acc_loop(0, index_uses_v=True)
    loopir.testing.check_equivalent(f, loopir.lower(f, target="cuda"), thread_order="random")


def test_the_vector_fed_loop_means_the_scalar_loop() -> None:
    f = _acc_loop(0)
    loopir.testing.check_equivalent(f, loopir.lower(f, target="cuda"), thread_order="random")
    g = row_sum(4, 2048, "float16").func
    loopir.testing.check_equivalent(g, loopir.lower(g, target="cuda"), thread_order="random")


@pytest.mark.nvcc
def test_vector_fed_reductions_compile(tmp_path) -> None:
    from loopir.codegen_cuda.compile import compile_cuda

    for name in FUNCS:
        for dtype in ("float16", "bfloat16"):
            source = emit_cuda(loopir.lower(_default(name, 8, 4096, dtype), target="cuda")).source
            compile_cuda(source, arch="sm_90a", cache_dir=tmp_path)
    compile_cuda(emit_cuda(_acc_loop(0)).source, arch="sm_90a", cache_dir=tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(FUNCS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cols", [1024, 4096, 1000])
def test_default_rows_match_the_cpu_executor(name, dtype, cols) -> None:
    f = FUNCS[name](6, cols, dtype)
    loopir.testing.check_equivalent(f, f, target2="cuda", seed=cols, rtol=2e-2, atol=2e-2)


def test_an_unaligned_row_length_keeps_scalar_reads() -> None:
    (text,) = emit_cuda(loopir.lower(_default("softmax", 8, 1000, "float16"), target="cuda")).kernel_texts
    assert "uint4" not in text and "X[" in text
