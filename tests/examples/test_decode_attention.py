"""``examples.decode_attention`` (issue 33): flash-decoding's split-KV chunks and their combine.

* The program equals a float64 attention of one query per sequence on the CPU executor: drawn
  lengths and chunk counts, chunks past the keys included, grouped-query heads.
* The GPU schedule computes the same on the CPU executor in random thread order with a symbolic
  KV length, and compiles with nvcc for sm_90a without spills.
* The split kernel reads K and V as 16-byte vectors (lanes across a row's columns), sums the
  lanes' partial dot products through shared memory, and uses the fast exponential; the chunk
  count defaults to enough thread blocks for an H200 from ``batch * kv_heads``.
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
                seed: int, order: str = "sequential", sq: int = 1, causal: bool = False) -> None:  # fmt: skip
    arrays = _inputs((batch, heads, sq, skv, d), kv_heads, dtype, seed)
    loopir.build(func, target="cpu", thread_order=order)(*arrays)
    q, k, v = (from_storage(a, dtype) for a in arrays[:3])
    _check(from_storage(arrays[3], dtype), reference(q, k, v, causal)[0], dtype)


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


@settings(max_examples=6, deadline=None)
@given(kv_heads=st.integers(1, 2), group=st.sampled_from([1, 2]), sq=st.integers(2, 4), skv=st.integers(1, 90),
       splits=st.integers(1, 4), causal=st.booleans())  # fmt: skip
def test_decode_of_a_few_queries_equals_float64_attention(kv_heads: int, group: int, sq: int, skv: int,
                                                          splits: int, causal: bool) -> None:  # fmt: skip
    """Speculative decoding's draft tokens: ``seq_q`` queries per sequence, the causal mask
    aligned to the bottom right (with fewer keys than queries the first positions see none:
    0), drawn lengths and chunk counts."""
    from loopir.examples.decode import decode_attention_func

    heads = kv_heads * group
    func = decode_attention_func(1, heads, skv, 16, "float16", kv_heads, splits=splits, block_n=16, seq_q=sq,
                                 causal=causal)  # fmt: skip
    loopir.verify(func)
    _decode_run(func, 1, heads, skv, 16, kv_heads, "float16", seed=skv * 10 + sq, sq=sq, causal=causal)


def test_decode_gpu_schedule_of_a_few_queries_on_the_cpu() -> None:
    """The GPU schedule with 3 causal queries, GQA 2:1 (6 rows a block), a symbolic KV length
    (2 keys: the first position sees none), random thread order."""
    from loopir.examples.decode import decode_attention

    sch = decode_attention(1, 4, Var("seq_kv"), 32, "float16", 2, splits=3, seq_q=3, causal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lowered = loopir.lower(sch.func)
    for skv in (2, 70):
        _decode_run(lowered, 1, 4, skv, 32, 2, "float16", seed=skv, order="random", sq=3, causal=True)


def test_decode_gpu_schedule_computes_the_same_on_the_cpu() -> None:
    """The GPU schedule with a symbolic KV length, in random thread order: a thread block per
    (batch, KV head, chunk) whose lanes split the columns of every key and of the output (the
    partial dot products summed through shared memory, the tile's maximum and sum across the
    lanes), then the combine."""
    from loopir.examples.decode import decode_attention

    sch = decode_attention(2, 8, Var("seq_kv"), 32, "float16", 2, splits=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lowered = loopir.lower(sch.func)
    for skv in (1, 75, 300):
        _decode_run(lowered, 2, 8, skv, 32, 2, "float16", seed=skv, order="random")
    src = _source(sch)
    assert src.count('extern "C" __global__') == 2  # the chunks, then the combine


@pytest.mark.parametrize("dtype, d, group, splits", [("float32", 16, 1, 3), ("bfloat16", 24, 2, 5)])
def test_decode_gpu_schedule_other_vectors_on_the_cpu(dtype: str, d: int, group: int, splits: int) -> None:
    """Lanes of 4 fp32 (head_dim 16: 4 lanes) and of 8 bf16 (head_dim 24: 3 lanes, a tile of
    6 keys), odd chunk counts, symbolic KV length, random thread order."""
    from loopir.examples.decode import decode_attention

    sch = decode_attention(1, 2 * group, Var("seq_kv"), d, dtype, 2, splits=splits)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lowered = loopir.lower(sch.func)
    for skv in (2, 37):
        _decode_run(lowered, 1, 2 * group, skv, d, 2, dtype, seed=skv, order="random")


@pytest.mark.parametrize("kw", [dict(vec=4), dict(vec=2, block_n=32), dict(vec=4, block_n=24, prefetch="kv")])
def test_decode_lane_shapes_on_the_cpu(kw: dict[str, object]) -> None:
    """``vec`` (a lane's elements of a key: 8 and 16 lanes at head_dim 32) and ``block_n`` (a
    tile of one to four keys a lane), prefetched or not: symbolic KV length, random order,
    lengths off the tile and chunks past the keys."""
    from loopir.examples.decode import decode_attention

    sch = decode_attention(2, 8, Var("seq_kv"), 32, "bfloat16", 2, splits=3, **kw)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lowered = loopir.lower(sch.func)
    for skv in (1, 75, 300):
        _decode_run(lowered, 2, 8, skv, 32, 2, "bfloat16", seed=skv, order="random")


def test_decode_split_kernel_reads_kv_as_16_byte_vectors() -> None:
    """head_dim 128 in fp16, ``vec=8``: 16 lanes (one thread block of half a warp), tiles of 32
    keys, each key's row one 16-byte load per lane for K and for V; the partial dot products go
    through shared memory (no shuffle reduction per key: only the tile's maximum and sum use
    one), fast exponentials."""
    from loopir.examples.decode import decode_attention

    src = _source(decode_attention(8, 32, Var("seq_kv"), 128, "float16", 32, vec=8))
    split = src[src.index("decode_attention_kernel0"):src.index("decode_attention_kernel1")]
    assert "__launch_bounds__(16)" in src
    assert "const uint4 K_v = *(const uint4*)(K + " in split
    assert "const uint4 V_v = *(const uint4*)(V + " in split
    assert "float S_rf_local[32];" in split and "float acc[8];" in split  # registers
    assert split.count("loopir_allreduce<16>") == 2  # the tile's maximum and sum
    assert "loopir_ex2(fmaf(" in split and " expf(" not in split and "(expf(" not in split  # the folded ex2.approx


def test_decode_default_is_a_whole_warp_at_one_row_a_block() -> None:
    """head_dim 128 in 16 bits, one query head a KV head: 32 lanes of 8-byte loads, 96 keys a
    tile (3 a lane), chunks for 8 resident blocks an SM; grouped heads, several queries, a
    prefetch or a page table keep the half warp."""
    from loopir.examples.decode import WHOLE_WARP, decode_attention, default_splits

    assert WHOLE_WARP == (4, 96)
    sch = decode_attention(8, 32, Var("seq_kv"), 128, "bfloat16", 32)
    split = (src := _source(sch))[src.index("decode_attention_kernel0"):src.index("decode_attention_kernel1")]
    assert "__launch_bounds__(32) decode_attention_kernel0" in src and "const uint2 K_v = *(const uint2*)(K + " in split
    assert "float S_rf_local[96];" in split and "float acc[4];" in split
    (m_part,) = [buf for buf in sch.func.body.block.alloc_buffers if buf.name == "M_part"]
    assert int(m_part.shape[-1]) == default_splits(8, 32, 8)
    for kw in (dict(kv_heads=8), dict(seq_q=2), dict(prefetch="k"), dict(dtype="float32"), dict(head_dim=64)):
        args = dict(batch=8, heads=32, seq_kv=Var("seq_kv"), head_dim=128, dtype="float16", kv_heads=32) | kw
        assert "S_rf_local[96];" not in _source(decode_attention(**args)), kw  # type: ignore[arg-type]


def test_decode_default_splits() -> None:
    """Two waves of 12 resident blocks on 132 SMs, a power of two, at most MAX_SPLITS; the
    schedule's partials have that many chunks unless ``splits`` says otherwise."""
    from loopir.examples.decode import MAX_SPLITS, decode_attention, default_splits

    assert default_splits(8, 32) == 16  # 4096 blocks
    assert default_splits(8, 8) == 64
    assert default_splits(1, 1) == MAX_SPLITS == 128
    assert default_splits(64, 64) == 1
    assert default_splits(256, 64) == 1
    for b, kh in ((1, 1), (2, 8), (8, 32), (16, 32), (128, 8)):
        s = default_splits(b, kh)
        assert s & (s - 1) == 0 and (b * kh * s >= 2 * 132 * 12 or s == MAX_SPLITS)

    def chunks(sch: loopir.Schedule) -> int:
        (m_part,) = [buf for buf in sch.func.body.block.alloc_buffers if buf.name == "M_part"]
        return int(m_part.shape[-1])

    assert chunks(decode_attention(8, 32, Var("seq_kv"), 128, "float16", 32)) == 16
    assert chunks(decode_attention(8, 32, Var("seq_kv"), 128, "float16", 32, splits=6)) == 6


@pytest.mark.nvcc
def test_decode_compiles_with_nvcc(tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda
    from loopir.examples.decode import decode_attention

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    for kv_heads, seq_q in ((8, 1), (16, 2)):  # GQA 4:1, and 2:1 with 2 queries: 4 rows a block
        sch = decode_attention(8, 32, Var("seq_kv"), 128, "bfloat16", kv_heads, seq_q=seq_q, causal=True)
        binary = compile_cuda(_source(sch), arch="sm_90a", cache_dir=tmp_path)
        for res in binary.resources.values():
            assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, binary.log


def test_decode_bad_arguments_are_refused() -> None:
    from loopir.examples.decode import decode_attention_func

    with pytest.raises(ScheduleError, match="splits must be a positive int, got 0"):
        decode_attention_func(1, 4, 64, 16, splits=0)
    with pytest.raises(ScheduleError, match=r"seq_q must be a positive int \(the queries of a decode step\), got 0"):
        decode_attention_func(1, 4, 64, 16, seq_q=0)
    with pytest.raises(ScheduleError, match="causal must be a bool, got 1"):
        decode_attention_func(1, 4, 64, 16, causal=1)  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match="kv_heads = 3 must divide heads = 4"):
        decode_attention_func(1, 4, 64, 16, kv_heads=3)
    from loopir.examples.decode import decode_attention

    with pytest.raises(ScheduleError, match="splits must be a positive int, got 0"):
        decode_attention(1, 4, 64, 16, splits=0)
    with pytest.raises(ScheduleError, match="batch must be a positive int, got 0"):
        decode_attention(0, 4, 64, 16)
    with pytest.raises(ScheduleError, match="kv_heads must be a positive int, got 0"):
        decode_attention(1, 4, 64, 16, kv_heads=0)
    for vec in (3, 16, 0, True):
        with pytest.raises(ScheduleError, match=rf"vec \(the elements a lane loads of a key\) must be a power of two "
                                                rf"dividing head_dim 128 of at most 16 bytes \(8 float16\), got {vec!r}"):
            decode_attention(1, 4, 64, 128, vec=vec)
    with pytest.raises(ScheduleError, match=r"vec .* dividing head_dim 24 .*got 16"):
        decode_attention(1, 4, 64, 24, "float32", vec=16)
    for bn in (48, 0, 16.0):
        with pytest.raises(ScheduleError, match=rf"block_n \(a KV tile's keys\) must be a positive multiple of the "
                                                rf"32 lanes \(head_dim 128 / vec 4\), got {bn!r}"):
            decode_attention(1, 4, 64, 128, vec=4, block_n=bn)  # type: ignore[arg-type]
    from loopir.examples.decode import default_splits

    with pytest.raises(ScheduleError, match="batch must be a positive int, got -1"):
        default_splits(-1, 8)


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


@pytest.mark.gpu
@pytest.mark.parametrize(("kw", "kv_heads"), [
    ({}, 32), (dict(vec=8), 32), (dict(vec=4), 8), (dict(vec=4, block_n=96), 8),
    (dict(vec=4, block_n=32, prefetch="kv"), 8), (dict(vec=4, prefetch="k"), 8), (dict(vec=8), 8)])  # fmt: skip
def test_decode_lane_shapes_on_the_gpu(kw: dict[str, object], kv_heads: int) -> None:
    """The default at one query head a KV head (a whole warp of 8-byte loads, 96-key tiles),
    the half warp of 16-byte loads (``vec=8``), and whole warps with GQA 4:1 (4 rows a block),
    other tiles, prefetched, against float64: one symbolic build for lengths off the tile, one
    key and chunks past the keys."""
    torch = pytest.importorskip("torch")
    from loopir.examples.decode import decode_attention

    mod = loopir.build(decode_attention(2, 32, Var("seq_kv"), 128, "float16", kv_heads, **kw).func,  # type: ignore[arg-type]
                       target="cuda")  # fmt: skip
    for skv in (1, 1000, 4133):
        arrays = _inputs((2, 32, 1, skv, 128), kv_heads, "float16", seed=skv)
        q, k, v, o = (torch.from_numpy(a).cuda() for a in arrays)
        mod(q, k, v, o)
        want, _ = reference(*(from_storage(a, "float16") for a in arrays[:3]), False)
        _check(o.float().cpu().numpy(), want, "float16")


@pytest.mark.gpu
@pytest.mark.parametrize("skv", [3, 1000])
def test_decode_of_a_few_causal_queries_on_the_gpu(skv: int) -> None:
    """4 draft tokens, GQA 4:1 (16 rows a block: spilling, still right), head_dim 128, a causal
    float64 reference (bottom right)."""
    torch = pytest.importorskip("torch")
    from loopir.examples.decode import decode_attention

    mod = loopir.build(decode_attention(2, 16, Var("seq_kv"), 128, "float16", 4, seq_q=4, causal=True).func,
                       target="cuda")  # fmt: skip
    gen = torch.Generator(device="cuda").manual_seed(skv)
    q = torch.randn(2, 16, 4, 128, device="cuda", dtype=torch.float16, generator=gen)
    k = torch.randn(2, 4, skv, 128, device="cuda", dtype=torch.float16, generator=gen)
    v = torch.randn(2, 4, skv, 128, device="cuda", dtype=torch.float16, generator=gen)
    o = torch.full_like(q, float("nan"))
    mod(q, k, v, o)
    want, _ = reference(q.cpu().numpy(), k.cpu().numpy(), v.cpu().numpy(), True)
    _check(o.float().cpu().numpy(), want, "float16")
