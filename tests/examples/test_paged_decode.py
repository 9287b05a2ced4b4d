"""``examples.decode_attention(page_size=...)`` (issue 33's stretch goal): decode attention over a
paged KV cache, each sequence with its own length, its keys found through a page table.

The pool's pages are shuffled; pages no sequence owns and the table's entries past a sequence's
pages point at a page of NaNs, so that reading a key that is not the sequence's shows in the
output. Checked against float64 attention over each sequence's own keys (the causal mask of a
few queries aligned to each sequence's end), on the CPU executor (the program, and the GPU
schedule in random thread order with symbolic pool and table sizes), the race checker, nvcc, and
on a GPU.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.ir.expr import Var
from tests.examples.test_attention import _check, reference
from tests.tensor_intrin.kernels import from_storage, to_storage


def _paged_inputs(lens: list[int], heads: int, kv_heads: int, d: int, page: int, width: int, dtype: str,
                  seed: int, sq: int = 1) -> tuple[list[np.ndarray], list[tuple[np.ndarray, ...]]]:  # fmt: skip
    """``[Q, K pool, V pool, PT, L, O]`` and, per sequence, its float64 ``(q, k, v)``."""
    rng = np.random.default_rng(seed)
    batch = len(lens)
    owned = [-(-n // page) if n else 1 for n in lens]  # a sequence with no key still names its first page
    pool_pages = sum(owned) + 2  # + the NaN page + a page nobody owns
    order = rng.permutation(pool_pages)
    nan_page, spare = int(order[-1]), int(order[-2])
    pages = iter(order[:-2].tolist())
    kp = rng.standard_normal((pool_pages, kv_heads, page, d))
    vp = rng.standard_normal((pool_pages, kv_heads, page, d))
    kp[nan_page] = vp[nan_page] = np.nan
    kp[spare] = vp[spare] = np.nan
    table = np.full((batch, width), nan_page, np.int32)
    for b, n in enumerate(owned):
        table[b, :n] = [next(pages) for _ in range(n)]
    q = to_storage(rng.standard_normal((batch, heads, sq, d)), dtype)
    k_pool, v_pool = to_storage(kp, dtype), to_storage(vp, dtype)
    o = to_storage(np.full((batch, heads, sq, d), np.nan), dtype)
    seqs = []
    k64, v64, q64 = (from_storage(a, dtype) for a in (k_pool, v_pool, q))
    for b, n in enumerate(lens):
        j = np.arange(n)
        pages_of, rows_of = table[b, j // page], j % page  # key j of sequence b
        kb, vb = (np.moveaxis(x[pages_of, :, rows_of], 0, 1) for x in (k64, v64))  # (kv_heads, n, d)
        seqs.append((q64[b:b + 1], kb[None], vb[None]))
    return [q, k_pool, v_pool, table, np.array(lens, np.int32), o], seqs


def _paged_run(func: loopir.PrimFunc, lens: list[int], heads: int, kv_heads: int, d: int, page: int, width: int,
               dtype: str, seed: int, order: str = "sequential", sq: int = 1, causal: bool = False) -> None:  # fmt: skip
    arrays, seqs = _paged_inputs(lens, heads, kv_heads, d, page, width, dtype, seed, sq)
    loopir.build(func, target="cpu", thread_order=order)(*arrays)
    out = from_storage(arrays[-1], dtype)
    for b, (q, k, v) in enumerate(seqs):
        if k.shape[2] == 0:  # no key: 0, as FlashAttention
            np.testing.assert_array_equal(out[b], 0.0)
            continue
        _check(out[b:b + 1], reference(q, k, v, causal)[0], dtype)


@settings(max_examples=6, deadline=None)
@given(lens=st.lists(st.integers(0, 70), min_size=1, max_size=3), kv_heads=st.integers(1, 2),
       group=st.sampled_from([1, 2]), page=st.sampled_from([4, 16]), splits=st.integers(1, 4),
       dtype=st.sampled_from(["float16", "bfloat16"]))  # fmt: skip
def test_paged_decode_equals_float64_attention_per_sequence(lens, kv_heads, group, page, splits, dtype) -> None:
    """Drawn lengths per sequence (0 included: the output is 0), page sizes and chunk counts."""
    from loopir.examples.decode import decode_attention_func

    width = max(-(-max(lens) // page), 1) + 1  # one table column more than the longest needs
    heads = kv_heads * group
    func = decode_attention_func(len(lens), heads, width, 16, dtype, kv_heads, splits=splits, block_n=16,
                                 page_size=page, num_pages=Var("num_pages"))  # fmt: skip
    loopir.verify(func)
    _paged_run(func, lens, heads, kv_heads, 16, page, width, dtype, seed=sum(lens) + splits)


@settings(max_examples=4, deadline=None)
@given(lens=st.lists(st.integers(0, 40), min_size=1, max_size=2), sq=st.integers(2, 3))
def test_paged_decode_of_a_few_causal_queries(lens, sq) -> None:
    """Speculative decoding over a paged cache: the mask aligned to each sequence's own end."""
    from loopir.examples.decode import decode_attention_func

    width = max(-(-max(lens) // 8), 1)
    func = decode_attention_func(len(lens), 2, width, 16, "float16", 1, splits=2, block_n=16, seq_q=sq,
                                 causal=True, page_size=8, num_pages=Var("num_pages"))  # fmt: skip
    _paged_run(func, lens, 2, 1, 16, 8, width, "float16", seed=sum(lens) * 3 + sq, sq=sq, causal=True)


def test_paged_decode_gpu_schedule_on_the_cpu() -> None:
    """The GPU schedule (16-byte lanes, the chunk's partial dot products through shared memory)
    with a symbolic pool and table width, GQA 4:2, random thread order, proven race-free."""
    from loopir.examples.decode import decode_attention
    from loopir.passes.race_check import check_races

    sch = decode_attention(3, 4, Var("max_pages"), 32, "float16", 2, splits=3, page_size=16,
                           num_pages=Var("num_pages"))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lowered = loopir.lower(sch.func)
        check_races(loopir.lower(sch.func, target="cuda"))
    _paged_run(lowered, [0, 37, 90], 4, 2, 32, 16, 7, "float16", seed=5, order="random")
    _paged_run(lowered, [16, 1, 3], 4, 2, 32, 16, 1, "float16", seed=6, order="random")


def test_paged_decode_refuses_bad_arguments() -> None:
    from loopir.errors import ScheduleError
    from loopir.examples.decode import decode_attention_func

    with pytest.raises(ScheduleError, match="page_size must be a positive int, got 0"):
        decode_attention_func(1, 2, 4, 16, page_size=0, num_pages=8)
    with pytest.raises(ScheduleError, match="needs num_pages"):
        decode_attention_func(1, 2, 4, 16, page_size=16)
    with pytest.raises(ScheduleError, match="num_pages must be a positive int or a loopir.Var, got -1"):
        decode_attention_func(1, 2, 4, 16, page_size=16, num_pages=-1)


@pytest.mark.nvcc
def test_paged_decode_compiles_with_nvcc(tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda, prepare_function

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    sch = decode_attention_paged_llama()
    src = prepare_function(sch.func).emitted.source
    assert "PT[" in src
    for res in compile_cuda(src, arch="sm_90a", cache_dir=tmp_path).resources.values():
        assert res.stack_frame_bytes == 0 and res.spill_store_bytes == 0, res


def decode_attention_paged_llama() -> loopir.Schedule:
    """Batch 8, 32 heads, head_dim 128, fp16, pages of 16 keys, symbolic pool and table."""
    from loopir.examples.decode import decode_attention

    return decode_attention(8, 32, Var("max_pages"), 128, "float16", page_size=16, num_pages=Var("num_pages"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_paged_decode_on_the_gpu(dtype: str) -> None:
    """Through ``mod()`` on a GPU: ragged lengths 0-5000, shuffled pages of 16 keys, against
    float64 attention over each sequence's own keys."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from loopir.examples.decode import decode_attention

    lens = [5000, 0, 1, 17, 4096, 333, 2048, 16]
    width = -(-max(lens) // 16) + 3
    arrays, seqs = _paged_inputs(lens, 8, 2, 128, 16, width, dtype, seed=11)
    tdt = getattr(torch, dtype)

    def dev(a: np.ndarray):
        t = torch.from_numpy(a).cuda()
        return t.view(tdt) if a.dtype == np.uint16 else t

    q, kp, vp, pt, ln, o = (dev(a) for a in arrays)
    mod = loopir.build(decode_attention(8, 8, Var("max_pages"), 128, dtype, 2, page_size=16,
                                        num_pages=Var("num_pages")).func, target="cuda")  # fmt: skip
    mod(q, kp, vp, pt, ln, o)
    out = o.float().cpu().numpy().astype(np.float64)
    for b, (qb, kb, vb) in enumerate(seqs):
        if kb.shape[2] == 0:
            assert (out[b] == 0).all()
            continue
        _check(out[b:b + 1], reference(qb, kb, vb, False)[0], dtype)
