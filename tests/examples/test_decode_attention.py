"""``examples.decode_attention`` (issue 33): flash-decoding's split-KV chunks and their combine.

* The program equals a float64 attention of one query per sequence on the CPU executor: drawn
  lengths and chunk counts, chunks past the keys included, grouped-query heads.
* The GPU schedule computes the same on the CPU executor in random thread order with a symbolic
  KV length, and compiles with nvcc for sm_90a without spills.
* On a GPU: equal to torch's scaled_dot_product_attention.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.errors import ScheduleError
from loopir.ir.expr import Var
from tests.examples.test_attention import _check, _inputs, _source, reference
from tests.tensor_intrin.kernels import from_storage


def _decode_run(func: loopir.PrimFunc, batch: int, heads: int, skv: int, d: int, kv_heads: int, dtype: str,
                seed: int, order: str = "sequential") -> None:  # fmt: skip
    arrays = _inputs((batch, heads, 1, skv, d), kv_heads, dtype, seed)
    loopir.build(func, target="cpu", thread_order=order)(*arrays)
    q, k, v = (from_storage(a, dtype) for a in arrays[:3])
    _check(from_storage(arrays[3], dtype), reference(q, k, v, False)[0], dtype)


@settings(max_examples=6, deadline=None)
@given(batch=st.integers(1, 2), kv_heads=st.integers(1, 2), group=st.sampled_from([1, 4]), skv=st.integers(1, 200),
       splits=st.integers(1, 6), dtype=st.sampled_from(["float16", "bfloat16"]))  # fmt: skip
def test_decode_equals_float64_attention(batch: int, kv_heads: int, group: int, skv: int, splits: int,
                                         dtype: str) -> None:  # fmt: skip
    """Drawn lengths and chunk counts, chunks past the keys included (they weigh nothing)."""
    from loopir.examples.decode import decode_attention_func

    heads = kv_heads * group
    func = decode_attention_func(batch, heads, skv, 16, dtype, kv_heads, splits=splits, block_n=16)
    loopir.verify(func)
    _decode_run(func, batch, heads, skv, 16, kv_heads, dtype, seed=skv * 10 + splits)


def test_decode_gpu_schedule_computes_the_same_on_the_cpu() -> None:
    """The GPU schedule with a symbolic KV length, in random thread order: a thread block per
    (batch, KV head, chunk) whose threads split the keys of a tile (the row maximum and sum
    combined across them) and the output columns, then the combine."""
    from loopir.examples.decode import decode_attention

    sch = decode_attention(2, 8, Var("seq_kv"), 32, "float16", 2, splits=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lowered = loopir.lower(sch.func)
    for skv in (1, 75, 300):
        _decode_run(lowered, 2, 8, skv, 32, 2, "float16", seed=skv, order="random")
    src = _source(sch)
    assert src.count('extern "C" __global__') == 2  # the chunks, then the combine


@pytest.mark.nvcc
def test_decode_compiles_with_nvcc(tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda
    from loopir.examples.decode import decode_attention

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    binary = compile_cuda(_source(decode_attention(8, 32, Var("seq_kv"), 128, "bfloat16", 8)), arch="sm_90a",
                          cache_dir=tmp_path)  # fmt: skip
    for res in binary.resources.values():
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, binary.log


def test_decode_bad_arguments_are_refused() -> None:
    from loopir.examples.decode import decode_attention_func

    with pytest.raises(ScheduleError, match="splits must be a positive int, got 0"):
        decode_attention_func(1, 4, 64, 16, splits=0)
    with pytest.raises(ScheduleError, match="kv_heads = 3 must divide heads = 4"):
        decode_attention_func(1, 4, 64, 16, kv_heads=3)


@pytest.mark.gpu
@pytest.mark.parametrize("skv", [1, 1000, 4096])
def test_decode_gpu_matches_torch_sdpa(skv: int) -> None:
    torch = pytest.importorskip("torch")
    from loopir.examples.decode import decode_attention

    mod = loopir.build(decode_attention(4, 32, Var("seq_kv"), 128, "float16", 8).func, target="cuda")
    gen = torch.Generator(device="cuda").manual_seed(skv)
    q = torch.randn(4, 32, 1, 128, device="cuda", dtype=torch.float16, generator=gen)
    k = torch.randn(4, 8, skv, 128, device="cuda", dtype=torch.float16, generator=gen)
    v = torch.randn(4, 8, skv, 128, device="cuda", dtype=torch.float16, generator=gen)
    o = torch.empty_like(q)
    mod(q, k, v, o)
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(4, 1),
                                                            v.float().repeat_interleave(4, 1))
    torch.testing.assert_close(o.float(), want, rtol=2e-2, atol=2e-2)


