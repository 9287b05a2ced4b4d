"""``examples.attention(..., tma=True)`` (issue 33, FlashAttention 3's warp specialization):
the K and V tiles of the KV loop by TMA (4-D boxes ``(1, 1, block_n, 64)`` of the
``(batch, kv_heads, seq, head_dim)`` tensors, zero-filled past ``seq_kv``), issued by a producer
warpgroup on full/empty mbarriers, the consumers keeping FlashAttention 3's overlap order
(``P V`` of a step one step later than ``S``: its V version released a step later).

* The CPU executor (sequential and random thread order) computes softmax attention equal to
  float64, with no RaceCheckWarning (drawn shapes: fp16/bf16, causal, GQA, head_dim 64/128,
  lengths off the tiles).
* The race checker proves the producer/consumer protocol (``race_ws``) and refuses it with the
  consumers' full wait removed.
* nvcc compiles it for sm_90a without spills, local memory or C7515 (64 x 64, 128 x 64 with
  ``setmaxnreg``).
* Bit for bit the ``cp.async`` overlap kernel on the CPU.
* On a GPU (``gpu``): equal to float64 (fp16/bf16, causal, GQA, LSE, 64 and 128 query rows,
  ``setmaxnreg``), and to the CPU executor at symbolic lengths.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.errors import CodegenError, ScheduleError
from loopir.examples.attention import attention
from loopir.ir.expr import IntImm, Var
from tests.examples.test_attention import _inputs, _lowered, _run, _source
from tests.examples.test_attention_wgmma import (
    gpu_equals_float64,
    gpu_equals_the_cpu_at_symbolic_lengths,
)
from tests.tensor_intrin.kernels import from_storage


@settings(max_examples=5, deadline=None)  # 8 until session 24 (CI time; fresh draws each run)
@given(d=st.sampled_from([64, 128]), causal=st.booleans(), dtype=st.sampled_from(["float16", "bfloat16"]),
       kv_heads=st.sampled_from([1, 2]), seq_q=st.integers(1, 150), seq_kv=st.integers(1, 200),
       order=st.sampled_from(["sequential", "random"]), block_m=st.sampled_from([64, 128]),
       block_n=st.sampled_from([64, 128]), tma=st.sampled_from([True, (24, 240)]), lse=st.booleans())  # fmt: skip
def test_equals_float64_on_the_cpu(d: int, causal: bool, dtype: str, kv_heads: int, seq_q: int, seq_kv: int,
                                   order: str, block_m: int, block_n: int, tma: object, lse: bool) -> None:  # fmt: skip
    shape = (1, 2, seq_q, seq_kv, d)
    sch = attention(*shape, dtype, causal, kv_heads, lse=lse, wgmma=True, overlap=True, tma=tma,  # type: ignore[arg-type]
                    block_m=block_m, block_n=block_n)  # fmt: skip
    _run(_lowered(sch), shape, kv_heads, dtype, causal, lse, order=order)


@pytest.mark.parametrize("d, causal", [(64, False), (128, True)])
def test_equals_the_cp_async_overlap_kernel_bit_for_bit(d: int, causal: bool) -> None:
    """The same arithmetic in the same order as ``overlap=True`` with ``cp.async``: TMA's zeros
    are the template's guard, the producer only moves the copies."""
    shape = (1, 4, 77, 141, d)
    outs = []
    for tma in (False, True):
        arrays = _inputs(shape, 2, "float16", 1)
        # one key tile for both (without TMA, head_dim 64 would take 96 keys by default)
        f = _lowered(attention(*shape, "float16", causal, 2, wgmma=True, overlap=True, tma=tma, block_n=64))
        loopir.build(f, target="cpu", thread_order="random")(*arrays)
        outs.append(arrays[3])
    assert not np.isnan(from_storage(outs[0], "float16")).any()
    np.testing.assert_array_equal(outs[0], outs[1])


def test_symbolic_lengths_one_build_for_every_length() -> None:
    """``seq_q``, ``seq_kv`` as Vars: the tensor maps take the lengths at the launch; the tail's
    ``P V`` guarded by the KV loop's symbolic extent (the race checker's proof takes it)."""
    sch = attention(1, 2, Var("seq_q"), Var("seq_kv"), 128, "bfloat16", True, 1, lse=True, wgmma=True, overlap=True,
                    tma=True)  # fmt: skip
    f = _lowered(sch)
    for sq, skv in ((70, 130), (128, 64), (1, 200), (200, 1)):
        _run(f, (1, 2, sq, skv, 128), 1, "bfloat16", True, True)
    assert "cp.async.bulk.tensor.4d" in _source(sch)


def _tma_128(causal: bool) -> loopir.Schedule:
    """The 128 x 128 TMA form (``setmaxnreg``) at symbolic lengths, GQA 2:1, with the LSE."""
    return attention(1, 4, Var("sq"), Var("skv"), 128, "float16", causal, 2, lse=True, wgmma=True, overlap=True,
                     tma=(24, 240), block_m=128, block_n=128)  # fmt: skip


def test_not_causal_symbolic_lengths_one_build_for_every_length() -> None:
    """Not causal at symbolic lengths (refused until session 21: race_ws now takes the tail's
    ``P V`` version ``(ceildiv(seq_kv, 128) - 1) % 3`` as a function of the loop's extent
    ``ceildiv(seq_kv, 128)``, one symbolic size): one, two and three KV tiles, off the tile."""
    f = _lowered(_tma_128(False))
    for sq, skv in ((70, 100), (130, 256), (1, 300), (200, 385)):
        _run(f, (1, 4, sq, skv, 128), 2, "float16", False, True, order="random")


def test_a_wrong_tail_version_is_refused_at_symbolic_lengths() -> None:
    """The proof of the test above fails when the tail's ``P V`` reads version
    ``ceildiv(seq_kv, 128) % 3`` (the copy after the last, never waited for)."""
    from loopir.codegen_cuda import lower_for_cuda
    from loopir.ir.expr import BufferLoad, Call, FloorMod, Sub
    from loopir.ir.functor import Mutator
    from loopir.passes.race_check import check_races, find_races

    f = lower_for_cuda(_tma_128(False).func)
    report = find_races(f)
    assert not report.races and not report.unproven, report.unproven[:1]

    class _Tail(Mutator):
        def visit_Call(self, c: Call) -> Call:
            if c.op == "ptx_wgmma_async":
                args = tuple(self._skip_last(a) for a in c.args)
                return c if args == c.args else Call(c.dtype, c.op, args)
            return c

        def _skip_last(self, a: object) -> object:
            if isinstance(a, BufferLoad) and a.buffer.name == "V_s" and isinstance(a.indices[0], FloorMod):
                m = a.indices[0]
                if isinstance(m.a, Sub) and "skv" in str(m.a):
                    return BufferLoad(a.buffer, (FloorMod(m.a.a, m.b), *a.indices[1:]))
            return a

    bad = f.with_body(_Tail().visit(f.body))
    assert str(bad) != str(f)
    with pytest.raises(CodegenError, match="the consumers read a tile version"):
        check_races(bad)


def test_the_race_checker_proves_the_protocol() -> None:
    src = _source(attention(1, 2, 100, 150, 64, wgmma=True, overlap=True, tma=True))  # a refusal raises
    assert "mbarrier.arrive" in src and "cp.async.bulk.tensor.4d" in src and "cp.async.cg" not in src


def _wrong_parity(orig: object) -> object:
    # the consumers wait for the next phase of full[j % V] (the copies of iteration j + V):
    # iteration j's copy is not waited for
    return lambda self, j, ahead: orig(self, j, 1 if ahead == 0 else ahead)  # type: ignore[operator]


def _release_in_use(orig: object) -> object:
    # the consumers release the version they read next (iteration j + 1's, not j's)
    return lambda self, j: orig(self, j + 1)  # type: ignore[operator]


def _peel_wrong_parity(orig: object) -> object:
    # only the peeled first step (iteration 0, a constant) waits for phase 1 of full[0]
    return lambda self, j, ahead: orig(self, j, 1 if isinstance(j, IntImm) and ahead == 0 else ahead)  # type: ignore[operator]


def _peel_wrong_version(orig: object) -> object:
    # only the peeled first step waits on (and reads) version 1, whose copy is iteration 1's
    return lambda self, j: IntImm(1, j.dtype) if isinstance(j, IntImm) else orig(self, j)  # type: ignore[operator]


@pytest.mark.parametrize("method, mutate, what", [
    ("_parity", _wrong_parity, "(consumers' wait is not|peeled first step does not wait on) .* parity"),
    ("_release", _release_in_use, "(consumers' release is not on|released in the loop)"),
    ("_parity", _peel_wrong_parity, "peeled first step does not wait on .* with parity 0"),
    ("_ver", _peel_wrong_version, "peeled first step does not wait on .*\\[0\\]"),
])  # fmt: skip
def test_the_race_checker_refuses_a_protocol_error(monkeypatch: pytest.MonkeyPatch, method: str, mutate: object,
                                                   what: str) -> None:  # fmt: skip
    from loopir.passes import pipeline_ws

    monkeypatch.setattr(pipeline_ws.WsPipeline, method, mutate(getattr(pipeline_ws.WsPipeline, method)))  # type: ignore[operator]
    with pytest.raises(CodegenError, match=f"race check .*{what}"):
        _source(attention(1, 2, 100, 150, 64, wgmma=True, overlap=True, tma=True))


@pytest.mark.nvcc
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("tma, block_m, block_n", [(True, 64, 64), (True, 128, 64), ((24, 240), 128, 64),
                                                   ((24, 240), 128, 128)])  # fmt: skip
def test_compiles_with_nvcc(d: int, tma: object, block_m: int, block_n: int, tmp_path: Path) -> None:
    """No spills; causal, but with 128-key tiles (the default's form, not causal: causal spills
    4 bytes at head_dim 128, the docstring says)."""
    from loopir.codegen_cuda import compile_cuda

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    causal = block_n != 128
    src = _source(attention(2, 8, 1000, 1000, d, "float16", causal, 2, lse=True, wgmma=True, overlap=True, tma=tma,  # type: ignore[arg-type]
                            block_m=block_m, block_n=block_n))  # fmt: skip
    assert "cp.async.bulk.tensor.4d" in src
    assert ("setmaxnreg" in src) == (tma is not True)
    binary = compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)
    for res in binary.resources.values():
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0 and res.stack_frame_bytes == 0, binary.log
    assert "C7515" not in binary.log, binary.log


@pytest.mark.parametrize("kwargs, what", [
    (dict(tma="yes"), "tma must be False, True, 'auto' or .*got 'yes'"),
    (dict(tma=True, overlap=False), "tma .* needs wgmma=True and overlap=True"),
])  # fmt: skip
def test_bad_arguments_are_refused(kwargs: dict, what: str) -> None:
    with pytest.raises(ScheduleError, match=what):
        attention(1, 2, 128, 128, 64, **({"wgmma": True} | kwargs))


@pytest.mark.parametrize("sq, skv, what", [
    (300, 130, "differ in range"),  # two KV tiles of 128 keys
    (64, 100, "waits on no empty barrier"),  # one
])  # fmt: skip
def test_one_or_two_constant_kv_tiles_are_refused(sq: object, skv: object, what: str) -> None:
    """Known gap (session 20), refused by the build's race check with a clear error, never run
    wrong: with one or two KV tiles of constant length the pipeline degenerates into forms
    race_ws does not recognize (a symbolic length builds, and runs any tile count).
    ``tma="auto"`` takes this form only at constant lengths of at least 1024 (8 tiles)."""
    from loopir.errors import CodegenError

    sch = attention(1, 4, sq, skv, 128, "float16", False, 2, wgmma=True, overlap=True, tma=(24, 240), block_m=128,
                    block_n=128)  # type: ignore[arg-type]  # fmt: skip
    with pytest.raises(CodegenError, match=f"race check .*warp-specialized pipeline: .*{what}"):
        _source(sch)


@pytest.mark.parametrize("block_m, sq, skv", [(128, 300, 333), (64, 333, 300), (128, 333, 300)])
def test_causal_at_lengths_whose_tile_count_is_clamped(block_m: int, sq: int, skv: int) -> None:
    """Causal with constant lengths where a query tile's KV tile count ``min(ceildiv(seq_kv, 64),
    ceildiv((i0 + 1) * block_m + seq_kv - seq_q, 64))`` takes both arms: the consumers' last
    ``P V`` after the loop reads the V version ``(min(...) - 1) % 3``, which race_ws proves
    (since session 21: the count is one opaque value; refused before, found on the H200 in
    session 17), and the kernel equals float64 on the CPU (the GPU: test_gpu_equals_float64)."""
    shape = (1, 4, sq, skv, 64)
    sch = attention(*shape, "float16", True, 2, block_m=block_m, wgmma=True, overlap=True, tma=True)
    _source(sch)  # the build's race check proves it
    _run(_lowered(sch), shape, 2, "float16", True, False, order="random")


@pytest.mark.parametrize("sq, skv", [(300, 333), (333, 300), (256, 256), (384, 257)])
def test_causal_128_key_tiles_at_clamped_lengths(sq: int, skv: int) -> None:
    """Causal 128 x 128 tiles at constant lengths where a query tile's KV tile count is clamped:
    the tail's ``P V`` version ``(n - 1) % 3`` simplifies to ``min(4 - i0, 3) - 1`` (300 x 333)
    or ``2 - i0`` (333 x 300), the ``% 3`` dropped as the simplifier knows the block index's
    range; race_ws proves it from that range (``_window_lag``; refused before session 23) and
    the kernel equals float64 on the CPU."""
    shape = (1, 1, sq, skv, 128)
    sch = attention(*shape, "float16", True, 1, block_m=128, block_n=128, wgmma=True, overlap=True, tma=(24, 240))
    _source(sch)  # the build's race check proves it
    if (sq, skv) == (300, 333):  # one head: the CPU run is most of this test's time
        _run(_lowered(sch), shape, 1, "float16", True, False, order="random")


def test_a_wrong_tail_version_at_clamped_lengths_is_refused() -> None:
    """The proof above is not vacuous: the tail's ``P V`` made to read the version after the
    last one (``min(4 - i0, 3)``, one whose copy the consumers never waited for) is refused."""
    from loopir.codegen_cuda import lower_for_cuda
    from loopir.ir.expr import BufferLoad
    from loopir.ir.functor import Mutator
    from loopir.ir.printer import script
    from loopir.passes.race_check import check_races

    class Later(Mutator):
        def visit_BufferLoad(self, e: BufferLoad) -> BufferLoad:
            if e.buffer.name == "V_s" and script(e.indices[0]) == "T.min(4 - i0, 3) - 1":
                return attrs.evolve(e, indices=(e.indices[0] + 1, *e.indices[1:]))
            return e

    sch = attention(1, 2, 300, 333, 128, "float16", True, 1, block_m=128, block_n=128, wgmma=True, overlap=True,
                    tma=(24, 240))  # fmt: skip
    f = lower_for_cuda(sch.func)
    check_races(f)  # as built: proven
    bad = attrs.evolve(f, body=Later().visit(f.body))
    assert script(bad) != script(f)
    with pytest.raises(CodegenError, match="the consumers read a tile version T.min\\(4 - i0, 3\\)"):
        check_races(bad)


def test_window_lag_is_exact() -> None:
    """``race_ws._window_lag``: an expression count of a few values over the block indices'
    ranges matches ``(n - d) % v`` only where it is that version."""
    from loopir.ir.expr import Min
    from loopir.passes.race_ws import _lag

    i0 = Var("i0")
    n = Min(IntImm(4, "int32") - i0, IntImm(3, "int32"))
    at = {i0: (0, 3)}
    assert _lag(n - 1, n, 3, None, 1, at) == 1
    assert _lag(n - 2, n, 3, None, 1, at) == 2  # (n - 2) % 3 wherever n >= 2
    assert _lag(n, n, 3, None, 1, at) is None  # n % 3 is 0 at n = 3: not the version n
    assert _lag(n - 1, n, 2, None, 1, at) is None  # n - 1 in [0, 2]: not (n - 1) % 2 at n = 3
    assert _lag(n - 1, n, 3, None, 1, {i0: (0, 6)}) == 1  # n down to -1: only n >= 1 is a version
    assert _lag(IntImm(2, "int32") - i0, IntImm(3, "int32") - i0, 3, None, 1, at) == 1
    assert _lag(IntImm(2, "int32") - i0, IntImm(3, "int32") - i0, 3, None, 1, {i0: (-1, 3)}) is None  # n = 4


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("head_dim, block_m, block_n, tma", [(64, 64, 64, True), (128, 64, 64, True),
                                                             (64, 128, 64, (24, 240)), (128, 128, 64, (24, 240)),
                                                             (64, 128, 128, (24, 240)), (128, 128, 128, (24, 240))])  # fmt: skip
def test_gpu_equals_float64(dtype: str, causal: bool, head_dim: int, block_m: int, block_n: int, tma: object) -> None:
    """GQA, lengths off the tiles, the logsumexp (causal with 128-row tiles at 300 x 333: the tile
    counts clamped, test_causal_at_lengths_whose_tile_count_is_clamped and, with 128-key tiles,
    test_causal_128_key_tiles_at_clamped_lengths)."""
    shape = (2, 8, 300, 333, head_dim)
    sch = attention(*shape, dtype, causal, 2, lse=True, block_m=block_m, block_n=block_n, wgmma=True,  # type: ignore[arg-type]
                    overlap=True, tma=tma)  # fmt: skip
    gpu_equals_float64(sch, shape, dtype, causal, seed=head_dim + causal)


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("sq, skv", [(130, 300), (300, 130), (1, 77)])
def test_gpu_equals_the_cpu_at_symbolic_lengths(sq: int, skv: int, head_dim: int) -> None:
    """One build for every length (the tensor maps take them at the launch), causal: the GPU
    equals the lowered kernel on the CPU executor."""
    sch = attention(1, 4, Var("sq"), Var("skv"), head_dim, "float16", True, 2, lse=True, wgmma=True, overlap=True,
                    tma=True)  # fmt: skip
    gpu_equals_the_cpu_at_symbolic_lengths(sch, sq, skv, head_dim, 2e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("sq, skv", [(130, 300), (300, 130), (64, 100), (1, 77), (1000, 1024)])
def test_gpu_not_causal_128_tiles_equal_the_cpu_at_symbolic_lengths(sq: int, skv: int) -> None:
    """The 128 x 128 form not causal at symbolic lengths: one to eight KV tiles."""
    gpu_equals_the_cpu_at_symbolic_lengths(_tma_128(False), sq, skv, 128, 2e-3)


def test_the_peeled_first_step_runs_exactly_iteration_0() -> None:
    """``race_ws_peel``: the consumers' loop after the peeled step runs ``[1, n)`` and the step
    exactly when ``n >= 1`` (symbolic ``n``), else the proof does not take it as iteration 0."""
    from loopir.ir.expr import Max
    from loopir.ir.stmt import Evaluate, For, ForKind
    from loopir.passes.race_ws_peel import peeled_range

    n, j = Var("n"), Var("j")
    one, zero = IntImm(1, "int32"), IntImm(0, "int32")
    body = Evaluate(zero)
    loop = For(j, one, Max(n - one, zero), ForKind.SERIAL, body)
    assert peeled_range(loop, n, [(n >= one, True)]) is None
    assert "exactly when" in str(peeled_range(loop, n, []))  # n may be 0: step 0 waits for no copy
    assert "exactly when" in str(peeled_range(loop, n, [(n >= 2, True)]))
    assert "does not run" in str(peeled_range(For(j, one, n, ForKind.SERIAL, body), n, [(n >= one, True)]))
    assert "does not run" in str(peeled_range(For(j, zero, n, ForKind.SERIAL, body), n, [(n >= one, True)]))


@pytest.mark.parametrize("kwargs, keys", [
    (dict(seq=4096, d=128, causal=False), 128),  # 128 x 128, setmaxnreg: 1.15x (session 20)
    (dict(seq=1024, d=128, causal=False), 128),  # 1.14x
    (dict(seq=8192, d=128, causal=False), 128),
    (dict(seq=1000, d=128, causal=False), None),  # below 1k: not measured
    (dict(seq=4096, d=128, causal=False, block_n=64), 64),  # 128 x 64 from 4k (session 19)
    (dict(seq=1024, d=128, causal=False, block_n=64), None),  # ... at 1k the same or slower
    (dict(seq=4096, d=128, causal=True), None),  # causal: slower (128-row diagonal tiles) below 16k
    (dict(seq=16384, d=128, causal=True), 128),  # 1.04-1.05x at 16k (session 23)
    (dict(seq=16384, d=128, causal=True, block_n=64), None),  # causal 128 x 64: slower at 16k (session 22)
    (dict(seq=16384, d=64, causal=True), None),  # head_dim 64 causal: slower at 16k (session 22)
    (dict(seq=4096, d=64, causal=False), None),  # head_dim 64 below 16k: slower (0.97x at 4k)
    (dict(seq=16384, d=64, causal=False), 128),  # 1.05x at 16k (session 22)
    (dict(seq=16384, d=64, causal=False, block_n=64), None),  # 128 x 64: not measured at head_dim 64
    (dict(seq=4096, d=128, causal=False, block_m=64), None),  # a tile the rule did not measure
    (dict(seq=4096, d=128, causal=False, block_n=96), None),
    (dict(seq=Var("s"), d=128, causal=False), None),  # a symbolic length: nothing known
])  # fmt: skip
def test_auto_takes_the_tma_form_where_it_measured_faster(kwargs: dict, keys: int | None) -> None:
    seq, d, causal = kwargs.pop("seq"), kwargs.pop("d"), kwargs.pop("causal")
    sch = attention(1, 2, seq, seq, d, "float16", causal, wgmma=True, overlap=True, **kwargs)
    text = sch.func.script()
    assert ("loopir.warp_specialize" in text) is (keys is not None)
    if keys is not None:  # two consumer warpgroups: 128 query rows a block
        lead = "2, " if d == 128 else ""  # 64-column parts of head_dim 128
        assert re.search(rf"Q_s = T.alloc_buffer\(\({lead}128, 64\)", text)
        assert re.search(rf"K_s = T.alloc_buffer\(\({lead}{keys}, 64\)", text)
        assert ("[24, 240]" in text) is (keys == 128)  # setmaxnreg with the 128-key tiles
