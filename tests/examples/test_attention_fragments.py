"""``examples.attention(..., fragments=True)`` (issue 33): S, P and the output in the ``mma``
fragments' registers, FlashAttention 2's schedule (``loopir.examples.attention_fragments``).

* The program (``attention_func(..., fragments=True)``) equals a float64 softmax attention on
  the CPU executor: drawn shapes, causal or not, GQA, lengths off the tiles, the logsumexp.
* The schedule computes the same on the CPU executor (its ``ldmatrix`` / ``mma`` / shuffles
  with their PTX meaning), sequentially and lowered in random thread order, with no
  RaceCheckWarning: drawn shapes (causal, GQA, tiles off the defaults, lengths off the tiles),
  symbolic lengths (one build for every length).
* The CUDA: S, P and acc are register arrays (no shared S, P, PV), the row statistics are
  shuffles (no ``loopir_allreduce``), P is the second GEMM's A operand as it is (no ldmatrix
  of P); nvcc compiles it for sm_80 and sm_90a without spills.
* On a GPU: equal to torch's scaled_dot_product_attention, and to float64 with the bottom-right
  causal mask at symbolic lengths.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.examples.attention import attention, attention_func
from loopir.ir.expr import Var
from tests.examples.test_attention import _inputs, _lowered, _run, _source, reference
from tests.tensor_intrin.kernels import from_storage


@settings(max_examples=8, deadline=None)
@given(batch=st.integers(1, 2), kv_heads=st.integers(1, 2), group=st.integers(1, 3), sq=st.integers(1, 70),
       skv=st.integers(1, 70), d=st.sampled_from([8, 16]), causal=st.booleans(), lse=st.booleans(),
       dtype=st.sampled_from(["float16", "bfloat16", "float32"]))  # fmt: skip
def test_program_equals_float64_attention(batch: int, kv_heads: int, group: int, sq: int, skv: int, d: int,
                                          causal: bool, lse: bool, dtype: str) -> None:  # fmt: skip
    shape = (batch, kv_heads * group, sq, skv, d)
    func = attention_func(*shape, dtype, causal, kv_heads, lse=lse, block_m=16, block_n=16, fragments=True)
    loopir.verify(func)
    _run(func, shape, kv_heads, dtype, causal, lse, seed=sq * 100 + skv)


@settings(max_examples=5, deadline=None)
@given(kv_heads=st.integers(1, 2), group=st.integers(1, 2), sq=st.integers(1, 80), skv=st.integers(1, 80),
       d=st.sampled_from([16, 32]), causal=st.booleans(), tiles=st.sampled_from([(32, 16), (32, 32), (64, 32)]),
       dtype=st.sampled_from(["float16", "bfloat16"]), seed=st.integers(0, 2**16))  # fmt: skip
def test_schedule_computes_the_same_on_the_cpu(kv_heads: int, group: int, sq: int, skv: int, d: int, causal: bool,
                                               tiles: tuple[int, int], dtype: str, seed: int) -> None:  # fmt: skip
    shape = (1, kv_heads * group, sq, skv, d)
    block_m, block_n = tiles
    sch = attention(*shape, dtype, causal, kv_heads, lse=True, block_m=block_m, block_n=block_n, fragments=True)
    loopir.verify(sch.func)
    text = sch.func.script()
    t = "f16" if dtype == "float16" else "bf16"
    for intrin in (f"frag_row_max_f32_n{block_n}_quad", f"frag_row_sum_{t}_n{block_n}_quad", f"mma_{t}{t}f32",
                   f"mma_ldmatrix_{t}_b_trans", f"mma_ldmatrix_{t}_b", "mma_fill_f32"):  # fmt: skip
        assert f'"loopir.tensorized": "{intrin}"' in text
    _run(_lowered(sch), shape, kv_heads, dtype, causal, True, seed=seed, order="random")


@pytest.mark.parametrize("shape, kv_heads, causal, dtype", [
    ((1, 2, 150, 200, 64), 1, True, "float16"),  # 64 x 64 tiles, 4 warps
    ((1, 2, 100, 130, 128), 2, False, "bfloat16"),  # 64 x 32 tiles, 4 warps
])  # fmt: skip
def test_default_tiles_compute_the_same_on_the_cpu(shape: tuple, kv_heads: int, causal: bool, dtype: str) -> None:
    """The GPU's default tiles, lowered, in random thread order."""
    sch = attention(*shape, dtype, causal, kv_heads, lse=True, fragments=True)
    _run(_lowered(sch), shape, kv_heads, dtype, causal, True, seed=7, order="random")


def test_symbolic_lengths_serve_every_length() -> None:
    sch = attention(1, 2, Var("seq_q"), Var("seq_kv"), 16, "float16", True, 1, lse=True, block_m=32, block_n=16,
                    fragments=True)  # fmt: skip
    lowered = _lowered(sch)
    for sq, skv in ((5, 40), (33, 33), (40, 7), (1, 1)):
        _run(lowered, (1, 2, sq, skv, 16), 1, "float16", True, True, seed=sq + skv, order="random")
    _run(sch.func, (1, 2, 20, 50, 16), 1, "float16", True, True)


def test_s_p_and_the_output_are_registers() -> None:
    """At head_dim 64 (64 x 64 tiles): each thread holds its part of its warp's 16 x 64
    tile of S (32 floats), of P (32 halves) and of its 16 x 64 of the output (32 floats), and
    its copies of its two rows' statistics (2 floats each); shared memory holds the Q, K and V
    tiles only; P goes to the second mma as its A fragment; one barrier per KV tile besides
    the two of the K/V pipeline."""
    src = _source(attention(4, 32, 1024, 1024, 64, fragments=True))
    kernel = src.split("__global__")[1]
    for decl in ("float S[32];", "half P[32];", "float acc[32];", "float m[2];", "float l[2];", "float m_prev[2];",
                 "float alpha[2];"):  # fmt: skip
        assert decl in kernel
    shared = set(re.findall(r"__shared__ __align__\(16\) \w+ (\w+)\[", kernel))
    # static or (past 48 KiB) dynamic shared memory: the Q, K and V tiles, nothing else
    assert {"K_s", "V_s"} <= shared <= {"Q_s", "K_s", "V_s"}
    loop = kernel.split("for (int j0_steady")[1].split("loopir_cp_async_commit();\n  loopir_cp_async_wait")[0]
    assert loop.count("__syncthreads();") == 3
    # two row reductions of two quad shuffles, in the pipelined loop and its epilogue
    assert "loopir_allreduce" not in src and kernel.count("__shfl_xor_sync") == 8
    assert re.search(r"loopir_mma_m16n8k16\(&acc\[[^]]*\], &P\[", kernel)
    assert not re.search(r"loopir_ldmatrix<[^>]*>\(&P", kernel)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_causal_defaults_mask_only_the_diagonal_tile(head_dim: int) -> None:
    """Issue 33: no mask work on tiles entirely below the diagonal. The causal defaults take
    block_n = block_m, so the pipeline's peeled last KV tile is the only one meeting the
    diagonal: the steady loop's mask is proven true (no comparison left), the peeled tile keeps
    it. 64 x 32 tiles (the non-causal default at 128) keep the mask in the steady loop."""
    kernel = _source(attention(1, 4, 1024, 1024, head_dim, "float16", True, fragments=True)).split("__global__")[1]
    steady, peeled = kernel.split("for (int j0_steady")[1].split("loopir_cp_async_commit();\n  loopir_cp_async_wait")
    assert re.search(r"S\[[^]]*\] = true \? S\[", steady) and " <= " not in steady.split("loopir_ex2")[0]
    assert re.search(r"S\[[^]]*\] = \([^;]*<[^;]*\) \? S\[", peeled)
    narrow = _source(attention(1, 4, 1024, 1024, head_dim, "float16", True, block_m=64, block_n=32, fragments=True))
    steady = narrow.split("__global__")[1].split("for (int j0_steady")[1].split("loopir_cp_async_commit();\n  loopir_cp_async_wait")[0]
    assert re.search(r"S\[[^]]*\] = \([^;]*<=?[^;]*\) \? S\[", steady)  # a mask (longest_first may flip it to <)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gpu_matches_torch_sdpa(dtype: str, causal: bool, head_dim: int) -> None:
    torch = pytest.importorskip("torch")
    mod = loopir.build(attention(2, 8, 300, 300, head_dim, dtype, causal, 2, fragments=True).func, target="cuda")
    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 8, 300, head_dim, device="cuda", dtype=tdt, generator=gen)
    k = torch.randn(2, 2, 300, head_dim, device="cuda", dtype=tdt, generator=gen)
    v = torch.randn(2, 2, 300, head_dim, device="cuda", dtype=tdt, generator=gen)
    o = torch.empty_like(q)
    mod(q, k, v, o)
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(4, 1),
                                                            v.float().repeat_interleave(4, 1), is_causal=causal)
    torch.testing.assert_close(o.float(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("sq, skv", [(130, 300), (300, 130), (1, 77)])
def test_gpu_causal_is_aligned_bottom_right(sq: int, skv: int) -> None:
    """Symbolic lengths, seq_q != seq_kv, causal, with the logsumexp: equal to float64."""
    torch = pytest.importorskip("torch")
    mod = loopir.build(attention(1, 4, Var("sq"), Var("skv"), 64, "float16", True, 2, lse=True,
                                 fragments=True).func, target="cuda")  # fmt: skip
    arrays = _inputs((1, 4, sq, skv, 64), 2, "float16", seed=sq + skv)
    q, k, v, o = (torch.from_numpy(a).cuda() for a in arrays)
    lse = torch.full((1, 4, sq), float("nan"), device="cuda")
    mod(q, k, v, o, lse)
    want, want_lse = reference(*(from_storage(a, "float16") for a in arrays[:3]), True)
    np.testing.assert_allclose(from_storage(o.cpu().numpy(), "float16"), want, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(lse.cpu().numpy(), want_lse, rtol=2e-3, atol=2e-3)


def test_local_padding_changes_nothing_the_program_pads_by_construction() -> None:
    """Issue 33 asks for local padding's effect on the ragged tails: the tiles are loaded with
    zeros past the lengths and the scores masked, so the pass finds nothing to pad and the
    kernel is the same with it on and off (a ragged 1000 x 1000 and a symbolic length)."""
    for seq in (1000, Var("seq")):
        sources = []
        for on in (False, True):
            with loopir.PassContext(config={"tir.enable_local_pad": on}):
                sources.append(_source(attention(2, 4, seq, seq, 64, "float16", False, fragments=True)))
        assert sources[0] == sources[1]
        # the K/V tiles' cp.async copies read 0 bytes (zero-filling) past the length
        assert re.search(r"loopir_cp_async<16>\(K_s[^;]*\? 16 : 0\)", sources[0])
