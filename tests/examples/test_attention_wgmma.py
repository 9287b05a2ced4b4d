"""``examples.attention(..., wgmma=True)`` (issue 33, FlashAttention 3 on Hopper): both GEMMs on
``wgmma`` (sm_90a; ``wgmma="qk"``: the first only), S, P and the output in the fragments'
registers as FlashAttention 2's schedule (``loopir.examples.attention_fragments``).

* The schedule computes softmax attention on the CPU executor (``ptx_wgmma`` with its PTX
  meaning: the tiles read through the 128-byte swizzle, K-major Q and K, MN-major V, P from
  the registers), sequentially and lowered in random thread order, with no RaceCheckWarning:
  drawn shapes (causal or not, GQA, lengths off the tiles, one or two warpgroups, head_dim 64
  and 128), symbolic lengths (one build for every length), equal to float64.
* The CUDA: S accumulated by ``wgmma`` straight into its fragment registers from the swizzled
  Q and K tiles, the output by ``wgmma`` from P's registers and the swizzled V tile (no
  ``ldmatrix``, no ``mma.sync``; compact 1024-byte aligned tiles); nvcc compiles it for sm_90a
  without spills at head_dim 64 and 128.
* ``overlap=True`` (FlashAttention 3's intra-warpgroup overlap, ``attention_fragments.pipeline_overlap``):
  the same properties on the CPU (drawn shapes, fp16/bf16, causal, GQA, head_dim 64 and 128,
  symbolic lengths, lengths off the tiles, one and two warpgroups, ``block_n`` 64/96/128), the
  race checker proving it; the CUDA issues S and ``P V`` asynchronously, ``wait_group 1`` before
  the softmax and ``wait_group 0`` before P; no register buffer gets a second version (no
  dynamic index: no local memory), ``V_s`` three; the causal mask is proven true in the steady
  loop; nvcc compiles every tile without spills and without ptxas serializing the wgmma
  (C7515).
* Bad parameters are refused by name.
* On a GPU (the H200): equal to float64, and to the CPU executor's lowered kernel (also with
  ``overlap``).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.errors import CodegenError, ScheduleError
from loopir.examples.attention import attention
from loopir.ir.expr import Var
from tests.examples.test_attention import _inputs, _lowered, _run, _source, reference
from tests.tensor_intrin.kernels import from_storage


@settings(max_examples=3, deadline=None)  # 5 until session 24 (CI time; fresh draws each run)
@given(kv_heads=st.integers(1, 2), group=st.integers(1, 2), sq=st.integers(1, 140), skv=st.integers(1, 140),
       causal=st.booleans(), tiles=st.sampled_from([(64, 16), (64, 64), (128, 32), (64, 128)]),
       dtype=st.sampled_from(["float16", "bfloat16"]), wgmma=st.sampled_from([True, "qk"]),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_schedule_computes_the_same_on_the_cpu(kv_heads: int, group: int, sq: int, skv: int, causal: bool,
                                               tiles: tuple[int, int], dtype: str, wgmma: bool | str,
                                               seed: int) -> None:  # fmt: skip
    shape = (1, kv_heads * group, sq, skv, 64)
    block_m, block_n = tiles
    sch = attention(*shape, dtype, causal, kv_heads, lse=True, block_m=block_m, block_n=block_n, wgmma=wgmma)
    loopir.verify(sch.func)
    text = sch.func.script()
    t = "f16" if dtype == "float16" else "bf16"
    second = [f"wgmma_rs_m64n64k{block_n}_{t}{t}f32"] if wgmma is True else [f"mma_{t}{t}f32", f"mma_ldmatrix_{t}_b"]
    for intrin in (f"wgmma_m64n{block_n}k64_{t}{t}f32", "mma_fill_f32", f"frag_row_max_f32_n{block_n}_quad", *second):
        assert f'"loopir.tensorized": "{intrin}"' in text
    assert f'"loopir.tensorized": "mma_ldmatrix_{t}_b_trans"' not in text  # K is read by wgmma
    assert (f'"loopir.tensorized": "mma_{t}{t}f32"' in text) == (wgmma == "qk")
    _run(sch.func, shape, kv_heads, dtype, causal, True, seed=seed)
    _run(_lowered(sch), shape, kv_heads, dtype, causal, True, seed=seed + 1, order="random")


@settings(max_examples=3, deadline=None)  # 5 until session 24 (CI time; fresh draws each run)
@given(kv_heads=st.integers(1, 2), group=st.integers(1, 2), sq=st.integers(1, 200), skv=st.integers(1, 200),
       causal=st.booleans(), tiles=st.sampled_from([(64, 64), (128, 64), (64, 96), (64, 128), (128, 32)]),
       dtype=st.sampled_from(["float16", "bfloat16"]), head_dim=st.sampled_from([64, 128]),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_overlap_computes_the_same_on_the_cpu(kv_heads: int, group: int, sq: int, skv: int, causal: bool,
                                              tiles: tuple[int, int], dtype: str, head_dim: int, seed: int) -> None:  # fmt: skip
    """FlashAttention 3's pipelined form: sequentially and lowered in random thread order, equal
    to float64 (the logsumexp too), the race checker proving the kernel (``_source``)."""
    shape = (1, kv_heads * group, sq, skv, head_dim)
    sch = attention(*shape, dtype, causal, kv_heads, lse=True, block_m=tiles[0], block_n=tiles[1], wgmma=True,
                    overlap=True)  # fmt: skip
    loopir.verify(sch.func)
    text = sch.func.script()
    assert '"loopir.tensorized": "frag_row_sum_f32_n' in text and '"loopir.wgmma_async": 1' in text
    _run(sch.func, shape, kv_heads, dtype, causal, True, seed=seed)
    _run(_lowered(sch), shape, kv_heads, dtype, causal, True, seed=seed + 1, order="random")
    _source(sch)  # race-proven, the accumulators untouched in flight


@pytest.mark.parametrize("d, causal, kwargs, block_n", [
    (64, False, {}, 96),  # measured 4-6 % faster than 64 (session 20)
    (64, True, {}, 64),  # causal: block_n = block_m, the tiles below the diagonal mask-free
    (128, False, {}, 64),  # 96 measured 1.3x slower at head_dim 128
    (64, False, {"block_n": 64}, 64),  # given: kept
    (64, False, {"overlap": False}, 64),  # the synchronous form: not measured
    (64, False, {"tma": True}, 64),  # the TMA form's boxes: 64 keys
])  # fmt: skip
def test_the_default_key_tile(d: int, causal: bool, kwargs: dict, block_n: int) -> None:
    sch = attention(1, 2, Var("s"), Var("s"), d, "float16", causal, wgmma=True, **kwargs)
    text = sch.func.script()
    assert re.search(rf"K_s = T.alloc_buffer\(\((\d+, )?{block_n}, 64\)", text), text[:2000]


def test_overlap_symbolic_lengths_serve_every_length() -> None:
    sch = attention(1, 2, Var("seq_q"), Var("seq_kv"), 64, "float16", True, 1, lse=True, block_n=32, wgmma=True,
                    overlap=True)  # fmt: skip
    lowered = _lowered(sch)
    for sq, skv in ((5, 40), (65, 65), (70, 7), (1, 1), (130, 200), (64, 129)):
        _run(lowered, (1, 2, sq, skv, 64), 1, "float16", True, True, seed=sq + skv, order="random")
    _source(sch)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_overlap_issues_both_gemms_asynchronously(head_dim: int) -> None:
    """The steady loop: one barrier, the K and V copies, S issued, acc rescaled, P V issued,
    wait_group 1 (S retired, P V in flight) before the softmax, wait_group 0 before P; P and
    the statistics single registers (no version index), V_s three versions, K_s two."""
    # 64 keys a tile (head_dim 64 takes 96 by default: the same form, other names)
    kernel = _source(attention(4, 32, 1024, 1024, head_dim, wgmma=True, overlap=True, block_n=64)).split("__global__")[1]
    steady = kernel.split("for (int j0_steady")[1].split("\n  }\n")[0]
    s_name = "loopir_wgmma_async_m64n64k64_f16" if head_dim == 64 else "loopir_wgmma_async_m64n64k128_f16_ka512_kb512"
    lbo = 1 if head_dim == 64 else 64 * 64 * 2 // 16
    marks = [f"{s_name}(&S[0]", "acc[ax", f"loopir_wgmma_async_m64n{head_dim}k64_f16_rs_tb{lbo}(&acc[0], &P[0]",
             "loopir_wgmma_wait<1>(); loopir_wgmma_fence_n64(&S[0]);", "loopir_ex2(",
             f"loopir_wgmma_wait<0>(); loopir_wgmma_fence_n{head_dim}(&acc[0]);", "P[ax"]  # fmt: skip
    where = [steady.find(m) for m in marks]
    assert -1 not in where and where == sorted(where), list(zip(marks, where))
    assert steady.count("__syncthreads()") == 1 and steady.count("loopir_cp_async_wait<0>()") == 1
    assert "loopir_wgmma_m64" not in kernel  # no synchronous wgmma left
    assert "half P[32];" in kernel and "float alpha[2];" in kernel and "float S[32];" in kernel
    assert re.search(rf"half V_s\[{3 * 64 * head_dim}\]|half\* V_s = ", kernel)
    assert re.search(r"V_s\[\(?j0_steady( \+ \d)?\)? % 3 \* ", steady) and re.search(r"K_s\[\(?j0_steady( \+ 1)?\)? % 2 \* ", steady)


def test_overlap_keeps_the_causal_mask_off_the_steady_tiles() -> None:
    kernel = _source(attention(1, 4, 1024, 1024, 64, "float16", True, wgmma=True, overlap=True)).split("__global__")[1]
    steady = kernel.split("for (int j0_steady")[1].split("\n  }\n")[0]
    assert re.search(r"S\[[^]]*\] = true \? S\[", steady) and " <= " not in steady.split("loopir_ex2")[0]
    assert re.search(r"S\[[^]]*\] = \([^;]*<[^;]*\) \? S\[", kernel.split("for (int j0_steady")[1])  # the peeled tile


def test_the_wgmma_waits_are_refused_when_misplaced() -> None:
    """check_accumulators refuses the overlapped kernel with its wait before the softmax
    allowing two groups (S, the older, then still in flight)."""
    from loopir.codegen_cuda import emit_function, lower_for_cuda
    from tests.passes.test_wgmma_waits import _with_pending

    func = lower_for_cuda(attention(1, 2, 256, 256, 64, wgmma=True, overlap=True).func)
    emit_function(func)
    with pytest.raises(CodegenError, match="the accumulator S of an asynchronous wgmma .* is touched"):
        emit_function(_with_pending(func, "S", 2))


@pytest.mark.parametrize("shape, kv_heads, causal, dtype, wgmma", [
    ((1, 2, 150, 200, 128), 1, True, "float16", True),  # two 64-column swizzled blocks per row
    ((2, 2, 100, 77, 128), 2, False, "bfloat16", True),
    ((1, 2, 70, 130, 128), 2, True, "bfloat16", "qk"),
])  # fmt: skip
def test_head_dim_128_computes_the_same_on_the_cpu(shape: tuple, kv_heads: int, causal: bool, dtype: str,
                                                   wgmma: bool | str) -> None:  # fmt: skip
    sch = attention(*shape, dtype, causal, kv_heads, lse=True, wgmma=wgmma, overlap=False)
    _run(_lowered(sch), shape, kv_heads, dtype, causal, True, seed=11, order="random")


def test_symbolic_lengths_serve_every_length() -> None:
    sch = attention(1, 2, Var("seq_q"), Var("seq_kv"), 64, "float16", True, 1, lse=True, block_n=32, wgmma=True,
                    overlap=False)  # fmt: skip
    lowered = _lowered(sch)
    for sq, skv in ((5, 40), (65, 65), (70, 7), (1, 1), (130, 200)):
        _run(lowered, (1, 2, sq, skv, 64), 1, "float16", True, True, seed=sq + skv, order="random")


@pytest.mark.parametrize("head_dim", [64, 128])
def test_both_gemms_are_wgmma_on_the_fragments(head_dim: int) -> None:
    """S (32 floats a thread at block_n 64) is wgmma's accumulator as it is, and so is the
    output (head_dim / 2 floats); P (32 halves) is the second wgmma's A as it is; Q, K and V
    are 1024-byte aligned compact tiles (no row padding), read by no ldmatrix; no mma.sync."""
    kernel = _source(attention(4, 32, 1024, 1024, head_dim, wgmma=True, overlap=False)).split("__global__")[1]
    assert "float S[32];" in kernel and f"float acc[{head_dim // 2}];" in kernel and "half P[32];" in kernel
    # the whole head_dim in one call: at 128 its two 64-column blocks 4096 elements apart
    s_name = "loopir_wgmma_m64n64k64_f16" if head_dim == 64 else f"loopir_wgmma_m64n64k{head_dim}_f16_ka512_kb512"
    calls = re.findall(rf"{s_name}\(&S\[0\], &Q_s\[[^]]*\], &K_s\[[^]]*\]\);", kernel)
    assert len(calls) == 2  # the pipelined loop and its peeled last tile
    lbo = 1 if head_dim == 64 else 64 * 64 * 2 // 16
    pv = re.findall(rf"loopir_wgmma_m64n{head_dim}k64_f16_rs_tb{lbo}\(&acc\[0\], &P\[0\], &V_s\[[^]]*\]\);", kernel)
    assert len(pv) == 2
    for tile in ("Q_s", "K_s", "V_s"):  # static and compact, or (past 48 KiB) dynamic shared memory
        size = (1 if tile == "Q_s" else 2) * 64 * head_dim
        assert re.search(rf"__shared__ __align__\(1024\) half {tile}\[{size}\]|half\* {tile} = ", kernel)
    assert "loopir_ldmatrix" not in kernel and "loopir_mma_m16n8k16" not in kernel


@pytest.mark.parametrize("hopper", [False, True])
def test_auto_is_wgmma_where_a_hopper_is_visible_and_the_sizes_allow(hopper: bool, monkeypatch) -> None:
    import importlib

    ex = importlib.import_module("loopir.examples.attention")  # the module (the package exports the function)
    monkeypatch.setattr(ex, "_hopper_visible", lambda: hopper)
    kernel = _source(attention(1, 2, 128, 128, 64)).split("__global__")[1]  # wgmma="auto"
    # on a Hopper the default is also FlashAttention 3's overlap (overlap="auto"): asynchronous issues
    # (64 x 96 tiles at head_dim 64, not causal: WGMMA_D64_BLOCK_N)
    assert ("loopir_wgmma_async_m64n96k64_f16" in kernel) is hopper
    assert ("loopir_mma_m16n8k16" in kernel) is not hopper
    # sizes wgmma=True refuses fall back to FA2 on mma.sync: head_dim 80, a 32-row query tile
    for kw in (dict(head_dim=80), dict(head_dim=64, block_m=32)):
        args = dict(batch=1, heads=2, seq_q=128, seq_kv=128) | kw
        kernel = _source(attention(**args)).split("__global__")[1]  # type: ignore[arg-type]
        assert "loopir_wgmma" not in kernel and "loopir_mma_m16n8k16" in kernel


def test_qk_only_keeps_p_v_on_mma_sync() -> None:
    kernel = _source(attention(4, 32, 1024, 1024, 64, wgmma="qk")).split("__global__")[1]
    assert "loopir_wgmma_m64n64k64_f16(&S[0]" in kernel and "_rs_tb" not in kernel
    assert re.search(r"loopir_mma_m16n8k16\(&acc\[[^]]*\], &P\[", kernel)
    assert re.search(r"loopir_ldmatrix<4, true>\(&[^;]*V_s", kernel)


#: The overlapped form's (head_dim, block_m, block_n, causal) compiled: every head_dim, key tile
#: and causality, block_m alternating so that every pair of two parameters' values is compiled
#: (12 of the 24 combinations: CI time; the GPU tests run the defaults among them)
_OVERLAP_NVCC = [(d, 128 if ((d == 128) + (bn == 96) + c) % 2 else 64, bn, c)
                 for d in (64, 128) for bn in (64, 96, 128) for c in (False, True)]  # fmt: skip

#: (shape, params) of the compile test: head_dim 64 and 128, one and two warpgroups, both GEMMs
#: on wgmma or the first only.
NVCC_CASES = {
    "d64": ((2, 8, 1000, 1000, 64, "float16", True, 2), dict(overlap=False)),
    "d64_bn128": ((2, 8, 1000, 1000, 64, "float16", False, 2), dict(block_n=128, overlap=False)),
    "d64_qk": ((2, 8, 1000, 1000, 64, "float16", True, 2), dict(wgmma="qk")),
    "d128": ((1, 4, Var("seq_q"), Var("seq_kv"), 128, "bfloat16", False, None), dict(overlap=False)),
    "d128_bm128": ((1, 4, 1024, 1024, 128, "float16", True, None), dict(block_m=128, overlap=False)),
    "d128_qk": ((1, 4, 1024, 1024, 128, "bfloat16", False, None), dict(wgmma="qk")),
    **{f"overlap_d{d}_bm{bm}_bn{bn}{'_causal' if c else ''}": (
        (2, 8, 1000 if c else 1024, 1000 if c else 1024, d, "float16", c, 2), dict(overlap=True, block_m=bm, block_n=bn))
       for d, bm, bn, c in _OVERLAP_NVCC},
    "overlap_d128_symbolic": ((1, 4, Var("seq_q"), Var("seq_kv"), 128, "bfloat16", True, None), dict(overlap=True)),
}


@pytest.mark.nvcc
@pytest.mark.parametrize("name", list(NVCC_CASES))
def test_compiles_with_nvcc(name: str, tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    args, params = NVCC_CASES[name]
    src = _source(attention(*args, lse=True, **({"wgmma": True} | params)))  # type: ignore[arg-type]
    assert "wgmma.mma_async.sync.aligned.m64n" in src and "fence.proxy.async.shared::cta" in src
    binary = compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)
    for res in binary.resources.values():
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0 and res.stack_frame_bytes == 0, binary.log
    assert "C7515" not in binary.log, binary.log  # ptxas did not serialize the wgmma (overlap)


@pytest.mark.parametrize("kwargs, what", [
    (dict(fragments=False), "wgmma=True needs fragments=True"),
    (dict(head_dim=96), "head_dim a multiple of 64.*96"),
    (dict(block_m=32), "block_m a multiple of 64.*32"),
    (dict(block_n=8), "block_n a multiple of 16 from 16 to 256.*8"),
    (dict(block_n=272), "block_n a multiple of 16 from 16 to 256.*272"),
    (dict(wgmma=1), "wgmma must be a bool, 'qk' .* or 'auto', got 1"),
    (dict(wgmma="pv"), "wgmma must be a bool, 'qk' .* or 'auto', got 'pv'"),
    (dict(head_dim=320), "head_dim at most 256 .*320"),
    (dict(overlap=True, wgmma="qk"), "overlap=True .* needs wgmma=True .*got wgmma='qk'"),
    (dict(overlap="yes"), "overlap must be a bool or 'auto', got 'yes'"),
])  # fmt: skip
def test_bad_arguments_are_refused(kwargs: dict, what: str) -> None:
    args = dict(batch=1, heads=2, seq_q=64, seq_kv=64, head_dim=64, wgmma=True) | kwargs
    with pytest.raises(ScheduleError, match=what) as info:
        attention(**args)  # type: ignore[arg-type]
    assert info.value.primitive == "examples.attention"


# --- on the GPU (sm_90a) ---------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("wgmma", [True, "qk", "overlap"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("head_dim, tiles", [(64, (64, 64)), (64, (64, 96)), (64, (128, 128)), (128, (64, 64)),
                                             (128, (128, 32))])  # fmt: skip
def test_gpu_equals_float64(dtype: str, causal: bool, head_dim: int, tiles: tuple[int, int], wgmma: bool | str) -> None:
    """GQA, lengths off the tiles, the logsumexp."""
    shape = (2, 8, 300, 333, head_dim)
    sch = attention(*shape, dtype, causal, 2, lse=True, block_m=tiles[0], block_n=tiles[1],
                    wgmma=True if wgmma == "overlap" else wgmma, overlap=wgmma == "overlap")  # fmt: skip
    gpu_equals_float64(sch, shape, dtype, causal, seed=head_dim + causal)


def gpu_equals_float64(sch: loopir.Schedule, shape: tuple[int, int, int, int, int], dtype: str, causal: bool,
                       seed: int) -> None:  # fmt: skip
    """``sch`` (2 KV heads, with the LSE) run on the GPU at ``shape`` equals the float64
    reference: the output within 2e-2 (fp16) / 4e-2 (bf16), the fast-math exponentials' error,
    the LSE within 1e-2."""
    torch = pytest.importorskip("torch")
    mod = loopir.build(sch.func, target="cuda")
    arrays = _inputs(shape, 2, dtype, seed=seed)
    q, k, v, o = (torch.from_numpy(a).cuda() for a in arrays)
    lse = torch.full(shape[:3], float("nan"), device="cuda")
    mod(q, k, v, o, lse)
    want, want_lse = reference(*(from_storage(a, dtype) for a in arrays[:3]), causal)
    tol = 2e-2 if dtype == "float16" else 4e-2
    np.testing.assert_allclose(from_storage(o.cpu().numpy(), dtype), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(lse.cpu().numpy(), want_lse, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("sq, skv", [(130, 300), (300, 130), (1, 77)])
def test_gpu_equals_the_cpu_at_symbolic_lengths(sq: int, skv: int, head_dim: int, overlap: bool) -> None:
    """One build for every length, causal (bottom-right), seq_q != seq_kv: the GPU equals the
    lowered kernel on the CPU executor."""
    sch = attention(1, 4, Var("sq"), Var("skv"), head_dim, "float16", True, 2, lse=True, wgmma=True, overlap=overlap)
    gpu_equals_the_cpu_at_symbolic_lengths(sch, sq, skv, head_dim, 5e-3)


def gpu_equals_the_cpu_at_symbolic_lengths(sch: loopir.Schedule, sq: int, skv: int, head_dim: int, tol: float) -> None:
    """``sch`` (fp16, batch 1, 4 heads over 2 KV heads, symbolic lengths, with the LSE) run at
    ``sq x skv`` on the GPU equals its lowered kernel on the CPU executor: the output within
    ``tol``, the LSE within 1e-3."""
    torch = pytest.importorskip("torch")
    mod = loopir.build(sch.func, target="cuda")
    arrays = _inputs((1, 4, sq, skv, head_dim), 2, "float16", seed=sq + skv)
    cpu = [a.copy() for a in arrays] + [np.full((1, 4, sq), np.nan, np.float32)]
    loopir.build(loopir.lower(sch.func), target="cpu")(*cpu)
    q, k, v, o = (torch.from_numpy(a).cuda() for a in arrays)
    lse = torch.full((1, 4, sq), float("nan"), device="cuda")
    mod(q, k, v, o, lse)
    np.testing.assert_allclose(from_storage(o.cpu().numpy(), "float16"), from_storage(cpu[3], "float16"),
                               rtol=tol, atol=tol)  # fmt: skip
    np.testing.assert_allclose(lse.cpu().numpy(), cpu[4], rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim, tiles", [(64, (64, 64)), (64, (64, 96)), (64, (128, 128)), (64, (128, 96)),
                                             (128, (64, 64)), (128, (128, 64)), (128, (64, 128))])  # fmt: skip
def test_gpu_overlap_equals_the_synchronous_kernel(head_dim: int, tiles: tuple[int, int], causal: bool) -> None:
    """The overlapped kernel and the synchronous one (same tiles) on the GPU, at 1000 x 1000:
    equal up to the row sums' rounding (float32 exponentials against fp16 P), both near float64."""
    torch = pytest.importorskip("torch")
    shape = (2, 4, 1000, 1000, head_dim)
    arrays = _inputs(shape, 2, "float16", seed=7 + head_dim)
    outs = []
    for overlap in (False, True):
        sch = attention(*shape, "float16", causal, 2, block_m=tiles[0], block_n=tiles[1], wgmma=True, overlap=overlap)
        q, k, v, o = (torch.from_numpy(a).cuda() for a in arrays)
        loopir.build(sch.func, target="cuda")(q, k, v, o)
        outs.append(from_storage(o.cpu().numpy(), "float16"))
    np.testing.assert_allclose(outs[1], outs[0], rtol=5e-3, atol=5e-3)
    want, _ = reference(*(from_storage(a, "float16") for a in arrays[:3]), causal)
    np.testing.assert_allclose(outs[1], want, rtol=2e-2, atol=2e-2)
