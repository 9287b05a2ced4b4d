"""PrivatizeThreadLocals and the row kept in registers (``stage_row_registers``)."""

from __future__ import annotations

import re

import pytest

import loopir
from loopir.codegen_cuda import emit_cuda
from loopir.examples.reductions import layernorm_func, rmsnorm_func, softmax_func
from loopir.ir.buffer import Buffer
from loopir.ir.expr import Var
from loopir.ir.stmt import Allocate, BufferStore, For, ForKind, PrimFunc, SeqStmt
from loopir.passes.base import RecordIRInstrument
from loopir.passes.thread_registers import THREAD_REGISTERS_ATTR, privatize_thread_locals
from loopir.schedule.default_gpu import default_gpu_schedule, per_row

FUNCS = {"softmax": (softmax_func, ["M", "S"]), "layernorm": (layernorm_func, ["S1", "S2"]),
         "rmsnorm": (rmsnorm_func, ["S"])}  # fmt: skip


def _registers(name: str, rows: int, cols: int, dtype: str, threads: int) -> PrimFunc:
    f, stats = FUNCS[name]
    sch = loopir.Schedule(f(rows, cols, dtype))
    per_row(sch, "Y", stats, threads, 8, cache_row="X", cache_scope="local")
    return sch.func


def test_the_thread_axis_is_dropped_before_and_after(golden) -> None:
    rec = RecordIRInstrument()
    with loopir.PassContext(instruments=[rec]):
        loopir.lower(_registers("rmsnorm", 4, 2048, "float16", 128), target="cuda")
    names = [n for n, _ in rec.history]
    k = names.index("PrivatizeThreadLocals")
    before, after = rec.history[k - 1][1], rec.history[k][1]
    assert after.attrs[THREAD_REGISTERS_ATTR] == ("X_local",)
    golden("passes/privatize_thread_locals", f"# before\n{before.script()}\n# after\n{after.script()}")


def _two_loops(second_index) -> PrimFunc:
    """A local buffer written at ``[tx]`` in one threadIdx loop and read at ``second_index(t2)``
    in another."""
    R, Y = Buffer("R", (32,), "float32", scope="local"), Buffer("Y", (32,), "float32")
    tx, t2 = Var("tx"), Var("t2")
    w = For(tx, 0, 32, ForKind.THREAD_BINDING, BufferStore(R, tx.astype("float32"), (tx,)), thread_tag="threadIdx.x")
    r = For(t2, 0, 32, ForKind.THREAD_BINDING, BufferStore(Y, R[second_index(t2)], (t2,)), thread_tag="threadIdx.x")
    bx = Var("bx")
    return PrimFunc((Y,), For(bx, 0, 1, ForKind.THREAD_BINDING, Allocate(R, SeqStmt((w, r))), thread_tag="blockIdx.x"))


def test_only_a_slot_indexed_by_its_own_thread_is_dropped() -> None:
    same = privatize_thread_locals(_two_loops(lambda t: t))
    assert same.attrs[THREAD_REGISTERS_ATTR] == ("R",)
    other = _two_loops(lambda t: (t + 1) % 32)  # reads another thread's slot: left alone
    assert privatize_thread_locals(other) is other
    with pytest.raises(loopir.CodegenError, match="local buffer R"):
        emit_cuda(other)
    emit_cuda(same)  # accepted under both thread loops


def test_a_slot_shared_by_threadidx_y_threads_is_left_alone() -> None:
    """``R[tx]`` allocated above a threadIdx.y loop: the ty threads share the slot in the IR."""
    R, Y = Buffer("R", (32,), "float32", scope="local"), Buffer("Y", (4, 32), "float32")
    tx, t2, ty = Var("tx"), Var("t2"), Var("ty")
    w = For(tx, 0, 32, ForKind.THREAD_BINDING, BufferStore(R, tx.astype("float32"), (tx,)), thread_tag="threadIdx.x")
    r = For(t2, 0, 32, ForKind.THREAD_BINDING, BufferStore(Y, R[t2], (ty, t2)), thread_tag="threadIdx.x")
    body = For(ty, 0, 4, ForKind.THREAD_BINDING, SeqStmt((w, r)), thread_tag="threadIdx.y")
    f = PrimFunc((Y,), For(Var("bx"), 0, 1, ForKind.THREAD_BINDING, Allocate(R, body), thread_tag="blockIdx.x"))
    assert privatize_thread_locals(f) is f


@pytest.mark.parametrize("name", sorted(FUNCS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_register_row_means_the_unscheduled_function(name, dtype) -> None:
    g = _registers(name, 3, 2048, dtype, 64)
    loopir.testing.check_equivalent(FUNCS[name][0](3, 2048, dtype), g, rtol=2e-2, atol=2e-2)
    (text,) = emit_cuda(loopir.lower(g, target="cuda")).kernel_texts
    # the row read once, in 16-byte vectors (a loop of 4 per thread), then only registers
    assert len(re.findall(r"const uint4 X_v = \*\(const uint4\*\)\(X(_base\w*)? \+ ", text)) == 1 and "X[" not in text
    assert f"{'half' if dtype == 'float16' else 'nv_bfloat16'} X_local[32];" in text


def test_the_row_rule_keeps_16_bit_rows_in_registers() -> None:
    """Asked for (``row_registers``; off by default until measured on a GPU)."""
    for name, (f, _) in FUNCS.items():
        sch = loopir.Schedule(f(8, 4096, "float16"))
        assert default_gpu_schedule(sch, row_registers=True)[0].endswith("X in registers)"), name
        assert "registers" not in default_gpu_schedule(loopir.Schedule(f(8, 4096, "float16")))[0]
        sch32 = loopir.Schedule(f(8, 4096, "float32"))
        assert "registers" not in default_gpu_schedule(sch32, row_registers=True)[0]
    wide = loopir.Schedule(softmax_func(8, 16384, "float16"))  # 64 halves per thread: too many
    assert "registers" not in default_gpu_schedule(wide, row_registers=True)[0]


@pytest.mark.nvcc
def test_register_rows_compile_without_local_memory(tmp_path) -> None:
    from loopir.codegen_cuda.compile import compile_cuda

    for f, _ in FUNCS.values():
        for cols in (1024, 4096, 8192):
            with loopir.PassContext(config={"cuda.fast_math": True, "cuda.default_schedule.row_registers": True}):
                source = emit_cuda(loopir.lower(f(8, cols, "bfloat16"), target="cuda")).source
            assert "X_local[" in source
            res = compile_cuda(source, arch="sm_90a", cache_dir=tmp_path).resources
            assert res and all(r.stack_frame_bytes == 0 and r.spill_store_bytes == 0 for r in res.values()), res


def _ty_tx_loops(read_ty_index) -> PrimFunc:
    """``R[ty, tx]`` allocated above both thread loops, written in one (ty, tx) nest and read at
    ``R[read_ty_index(ty2), t2]`` in another: a warp per row's register row."""
    R, Y = Buffer("R", (4, 32), "float32", scope="local"), Buffer("Y", (4, 32), "float32")
    ty, tx, ty2, t2 = Var("ty"), Var("tx"), Var("ty2"), Var("t2")

    def nest(y: Var, x: Var, body) -> For:
        inner = For(x, 0, 32, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")
        return For(y, 0, 4, ForKind.THREAD_BINDING, inner, thread_tag="threadIdx.y")

    w = nest(ty, tx, BufferStore(R, (ty * 32 + tx).astype("float32"), (ty, tx)))
    r = nest(ty2, t2, BufferStore(Y, R[read_ty_index(ty2), t2], (ty2, t2)))
    bx = Var("bx")
    return PrimFunc((Y,), For(bx, 0, 1, ForKind.THREAD_BINDING, Allocate(R, SeqStmt((w, r))), thread_tag="blockIdx.x"))


def test_slots_indexed_by_both_thread_axes_are_dropped() -> None:
    same = privatize_thread_locals(_ty_tx_loops(lambda t: t))
    assert same.attrs[THREAD_REGISTERS_ATTR] == ("R",)
    assert "R = T.allocate([], " in same.script() or "R[()]" in same.script() or "(1,)" not in same.script()
    emit_cuda(same)
    other = _ty_tx_loops(lambda t: (t + 1) % 4)  # reads another warp's slot: left alone
    assert privatize_thread_locals(other) is other
    with pytest.raises(loopir.CodegenError, match="local buffer R"):
        emit_cuda(other)


@pytest.mark.parametrize("name", sorted(FUNCS))
@pytest.mark.parametrize(("rows", "threads", "rows_per_block"), [(8, 32, 4), (6, 32, 4), (8, 64, 2), (5, 32, 8)])
def test_rows_per_block_mean_the_unscheduled_function(name, rows, threads, rows_per_block) -> None:
    """A warp (or two) per row, several rows a block (the last block partly empty), the row in
    registers: equal to the unscheduled function in a random thread order, proven race-free."""
    from loopir.passes.race_check import check_races

    f, stats = FUNCS[name]
    sch = loopir.Schedule(f(rows, 512, "float16"))
    per_row(sch, "Y", stats, threads, 8, cache_row="X", cache_scope="local", rows_per_block=rows_per_block)
    lowered = loopir.lower(sch.func, target="cuda")
    loopir.testing.check_equivalent(f(rows, 512, "float16"), lowered, rtol=2e-2, atol=2e-2, thread_order="random")
    check_races(lowered)
    (text,) = emit_cuda(lowered).kernel_texts
    assert f"half X_local[{512 // threads}];" in text  # each lane's part of its own row only
    if rows % rows_per_block == 0:  # (else the loads are guarded per element: scalar)
        assert len(re.findall(r"const uint4 X_v = \*\(const uint4\*\)\(X(_base\w*)? \+ ", text)) == 1 and "X[" not in text


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(FUNCS))
@pytest.mark.parametrize(("rows", "cols", "dtype"), [(64, 1024, "float16"), (10, 512, "bfloat16"), (9, 4096, "float16")])
def test_the_row_rule_on_the_gpu_matches_float64(name, rows, cols, dtype) -> None:
    """The default schedule's row forms (a warp per row and 4 rows a block up to 1024 columns,
    the last block partly empty at 10 rows; 128 threads at 4096) through ``mod()``, fast math on."""
    import numpy as np

    f, _ = FUNCS[name]
    rng = np.random.default_rng()
    x = (rng.random((rows, cols)) * 4 - 2).astype("float32")
    w = (rng.random(cols) + 0.5).astype("float32")
    b = (rng.random(cols) - 0.5).astype("float32")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    tdt = getattr(torch, dtype)
    tx, tw, tb = (torch.tensor(a, device="cuda").to(tdt) for a in (x, w, b))
    y = torch.full_like(tx, float("nan"))
    with loopir.PassContext(config={"cuda.fast_math": True}):
        mod = loopir.build(f(rows, cols, dtype), target="cuda")
    args = {"softmax": (tx, y), "layernorm": (tx, tw, tb, y), "rmsnorm": (tx, tw, y)}[name]
    mod(*args)
    xd, wd, bd = (a.double() for a in (tx, tw, tb))
    F = torch.nn.functional
    ref = {"softmax": lambda: torch.softmax(xd, -1), "layernorm": lambda: F.layer_norm(xd, (cols,), wd, bd, 1e-5),
           "rmsnorm": lambda: F.rms_norm(xd, (cols,), wd, 1e-6)}[name]()  # fmt: skip
    err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < 1e-2, err
