"""``examples.attention`` (issue 33, first step): FlashAttention's online softmax as TensorIR.

* The program equals a float64 softmax attention (numpy) on the CPU executor: drawn shapes,
  causal or not (bottom-right aligned), grouped-query heads, lengths off the tiles, rows with
  no valid key (0), the logsumexp output; symbolic lengths (one function for every length).
* The GPU schedule (both GEMMs on tensor cores, the softmax a warp per row, the K/V tiles
  cp.async-pipelined) computes the same on the CPU executor (whose ldmatrix / mma are the PTX
  semantics), in random thread order and for tiles off the defaults, lowers with no
  RaceCheckWarning, and compiles with nvcc for sm_80 and sm_90a without spills; its padded
  shared rows are bank-conflict free (a bank model of each access pattern), and one block
  (8 warps at block_m 128) fits an SM's shared memory.
* On a GPU: equal to torch's scaled_dot_product_attention.
"""

from __future__ import annotations

import math
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopir
from loopir.errors import ScheduleError
from loopir.examples.attention import attention as _attention
from loopir.examples.attention import attention_func
from loopir.ir.expr import Var
from tests.tensor_intrin.kernels import from_storage, to_storage


def attention(*args: object, **kwargs: object) -> loopir.Schedule:
    """The shared-memory schedule (``fragments=False``), which these tests cover; the default,
    the fragments' schedule, is tests/examples/test_attention_fragments.py's."""
    return _attention(*args, fragments=False, **kwargs)  # type: ignore[arg-type]


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """float64 softmax attention and the logsumexp of the scaled scores (written here from the
    definition: GQA by repeating KV heads, the causal mask aligned to the bottom right; a row
    with no valid key gives 0 and -inf)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    sq, skv = s.shape[-2:]
    if causal:
        hidden = np.arange(skv)[None, :] > np.arange(sq)[:, None] + (skv - sq)
        s = np.where(hidden, -np.inf, s)
    top = s.max(-1, keepdims=True)
    empty = np.isneginf(top)
    p = np.exp(s - np.where(empty, 0.0, top))
    total = p.sum(-1, keepdims=True)
    out = np.where(empty, 0.0, p @ v / np.where(empty, 1.0, total))
    lse = np.where(empty, -np.inf, np.log(np.where(empty, 1.0, total)) + np.where(empty, 0.0, top))[..., 0]
    return out, lse


def _inputs(shape: tuple[int, ...], kv_heads: int, dtype: str, seed: int) -> list[np.ndarray]:
    batch, heads, sq, skv, d = shape
    rng = np.random.default_rng(seed)
    q = to_storage(rng.standard_normal((batch, heads, sq, d)), dtype)
    k = to_storage(rng.standard_normal((batch, kv_heads, skv, d)), dtype)
    v = to_storage(rng.standard_normal((batch, kv_heads, skv, d)), dtype)
    o = to_storage(np.full((batch, heads, sq, d), np.nan), dtype)
    return [q, k, v, o]


def _check(out: np.ndarray, want: np.ndarray, dtype: str) -> None:
    assert not np.isnan(out).any()
    tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


def _run(func: loopir.PrimFunc, shape: tuple[int, ...], kv_heads: int, dtype: str, causal: bool, lse: bool,
         seed: int = 0, order: str = "sequential") -> None:  # fmt: skip
    arrays = _inputs(shape, kv_heads, dtype, seed)
    if lse:
        arrays.append(np.full(shape[:3], np.nan, np.float32))
    loopir.build(func, target="cpu", thread_order=order)(*arrays)
    q, k, v = (from_storage(a, dtype) for a in arrays[:3])
    want, want_lse = reference(q, k, v, causal)
    _check(from_storage(arrays[3], dtype), want, dtype)
    if lse:
        # the row sums add P rounded to the input type (what the second GEMM multiplies)
        tol = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}[dtype]
        np.testing.assert_allclose(arrays[4], want_lse, rtol=tol, atol=tol)


@settings(max_examples=8, deadline=None)
@given(batch=st.integers(1, 2), kv_heads=st.integers(1, 2), group=st.integers(1, 3), sq=st.integers(1, 70),
       skv=st.integers(1, 70), d=st.sampled_from([8, 16]), causal=st.booleans(), lse=st.booleans(),
       dtype=st.sampled_from(["float16", "bfloat16", "float32"]), longest_first=st.booleans())  # fmt: skip
def test_equals_float64_attention(batch: int, kv_heads: int, group: int, sq: int, skv: int, d: int, causal: bool,
                                  lse: bool, dtype: str, longest_first: bool) -> None:  # fmt: skip
    shape = (batch, kv_heads * group, sq, skv, d)
    func = attention_func(*shape, dtype, causal, kv_heads, lse=lse, block_m=16, block_n=16,
                          longest_first=longest_first)  # fmt: skip
    loopir.verify(func)
    _run(func, shape, kv_heads, dtype, causal, lse, seed=sq * 100 + skv)


@pytest.mark.parametrize("longest_first", [False, True])
def test_symbolic_lengths_serve_every_length(longest_first: bool) -> None:
    func = attention_func(1, 2, Var("seq_q"), Var("seq_kv"), 16, causal=True, block_m=16, block_n=16, lse=True,
                          longest_first=longest_first)  # fmt: skip
    assert {p.name for p in func.params} == {"Q", "K", "V", "O", "LSE"}
    for sq, skv in ((5, 40), (33, 33), (40, 7), (1, 1)):
        _run(func, (1, 2, sq, skv, 16), 2, "float16", True, True, seed=sq + skv)


def test_causal_query_tiles_run_longest_first() -> None:
    """``longest_first`` (by default ``causal``): iteration ``i0`` of the tile loop (``blockIdx.x``)
    computes tile ``n - 1 - i0``, the one with the most KV tiles first; the same order otherwise."""
    def order(text: str) -> str:
        m = re.search(r"vi0 = T.axis.spatial\(.*, ([^,]*)\)\n", text)
        assert m is not None
        return m.group(1)

    assert order(attention(1, 2, 256, 256, 64, "float16", True, block_m=64).func.script()) == "3 - i0"  # 4 tiles
    assert order(attention(1, 2, 256, 256, 64, "float16", False).func.script()) == "i0"
    assert order(attention(1, 2, 256, 256, 64, "float16", True, longest_first=False).func.script()) == "i0"
    with pytest.raises(ScheduleError, match="longest_first must be a bool or None"):
        attention(1, 2, 256, 256, 64, "float16", True, longest_first="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("shape, kv_heads, causal, dtype, order, block_m", [
    ((2, 4, 50, 130, 32), 2, True, "float16", "sequential", 32),
    ((1, 2, 70, 100, 64), 1, True, "bfloat16", "random", None),
    ((1, 2, 20, 90, 128), 2, False, "float16", "random", None),
])  # fmt: skip
def test_gpu_schedule_computes_the_same_on_the_cpu(shape: tuple, kv_heads: int, causal: bool, dtype: str, order: str,
                                                   block_m: int | None) -> None:  # fmt: skip
    sch = attention(*shape, dtype, causal, kv_heads, lse=True, block_m=block_m)
    loopir.verify(sch.func)
    text = sch.func.script()
    for intrin in ("mma_ldmatrix_{t}_a", "mma_ldmatrix_{t}_b_trans", "mma_ldmatrix_{t}_b", "mma_store_f32_shared"):
        assert f'"loopir.tensorized": "{intrin.format(t="f16" if dtype == "float16" else "bf16")}"' in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RaceCheckWarning
        lowered = loopir.lower(sch.func)
    _run(lowered, shape, kv_heads, dtype, causal, True, order=order)


@pytest.mark.parametrize("shape, kv_heads, causal, block_m, block_n", [
    ((1, 2, 40, 50, 16), 1, False, 32, 16),  # rows and keys narrower than a warp (guarded lanes)
    ((1, 2, 100, 20, 16), 2, True, 32, 32),  # seq_q > seq_kv: the first query tiles visit no KV tile
    ((1, 1, 33, 70, 48), 1, True, 32, 48),
])  # fmt: skip
def test_gpu_schedule_other_tiles_compute_the_same(shape: tuple, kv_heads: int, causal: bool, block_m: int,
                                                   block_n: int) -> None:  # fmt: skip
    """Tiles off the defaults (a KV loop of trip count 0 in the pipeline, lanes past a row's
    end) in random thread order."""
    sch = attention(*shape, "float16", causal, kv_heads, lse=True, block_m=block_m, block_n=block_n)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lowered = loopir.lower(sch.func)
    _run(lowered, shape, kv_heads, "float16", causal, True, order="random")


def _row_strides(func: loopir.PrimFunc) -> dict[str, int]:
    """The row stride (elements) of each shared tile of the lowered ``func``."""
    from loopir.ir.functor import post_order_visit
    from loopir.ir.stmt import Allocate

    found: dict[str, int] = {}

    def visit(node: object) -> None:
        if isinstance(node, Allocate) and node.buffer.scope == "shared" and len(node.buffer.shape) >= 2:
            strides = node.buffer.strides
            found[node.buffer.name] = int(strides[-2]) if strides else int(node.buffer.shape[-1])

    post_order_visit(func.body, visit)
    return found


def _conflicts(words: list[list[int]]) -> int:
    """The bank conflict degree of one shared-memory wavefront: the most distinct 4-byte words
    any of the 32 banks serves, ``words`` being each lane's words (a broadcast is free)."""
    banks: dict[int, set[int]] = {}
    for lane in words:
        for w in lane:
            banks.setdefault(w % 32, set()).add(w)
    return max(len(v) for v in banks.values())


def test_gpu_schedule_shared_accesses_are_conflict_free() -> None:
    """The padded rows (storage_align) make every shared access pattern of the schedule
    conflict-free: an ldmatrix phase (8 rows of 16 bytes) of Q, K, V and P, the C-fragment
    float2 store of S and PV (a half-warp: 4 rows x 4 pairs), a 16-byte tile-load store (a
    quarter-warp: 8 x 16 bytes of a 64-wide row), and the per-row passes (a warp's lanes along
    one row). At the unpadded stride of 64 the first two would be 8-way and 4-way."""
    lowered = loopir.lower(attention(1, 2, 256, 256, 64).func)
    strides = _row_strides(lowered)
    assert {strides[b] for b in ("Q_s", "K_s", "V_s", "P")} == {72}  # halves: 8 mod 16
    assert {strides[b] for b in ("S", "PV")} == {72}  # floats: 8 mod 32

    def ldmatrix(stride: int) -> int:  # fp16, stride in halves
        return _conflicts([[(r * stride * 2 + c) // 4 for c in range(0, 16, 4)] for r in range(8)])

    def c_store(stride: int) -> int:  # fp32 pairs
        return _conflicts([[(lane // 4) * stride + lane % 4 * 2 + e for e in (0, 1)] for lane in range(16)])

    for buf in ("Q_s", "K_s", "V_s", "P"):
        assert ldmatrix(strides[buf]) == 1 and ldmatrix(64) == 8
        load = [[((lane // 8) * strides[buf] * 2 + lane % 8 * 16 + c) // 4 for c in range(0, 16, 4)]
                for lane in range(8)]  # fmt: skip
        assert _conflicts(load) == 1
    for buf in ("S", "PV"):
        assert c_store(strides[buf]) == 1 and c_store(64) == 4
        assert _conflicts([[5 * strides[buf] + lane] for lane in range(32)]) == 1  # a row pass
    assert _conflicts([[(5 * strides["P"] * 2 + 2 * lane) // 4] for lane in range(32)]) == 1


def test_gpu_schedule_resources() -> None:
    """At block_m 128, head_dim 64: 8 warps, the row reductions as warp shuffles, the K/V tiles
    by 16-byte cp.async two versions deep, fast-math exponentials, and shared memory for one
    block on an H100/H200 SM (227 KiB) with 16 KiB and more to spare."""
    from loopir.codegen_cuda import prepare_function

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        emitted = prepare_function(attention(4, 32, 1024, 1024, 64).func).emitted
    (kernel,) = emitted.kernels
    assert tuple(int(n) for n in kernel.spec.block) == (32, 8, 1)
    assert kernel.shared_bytes + kernel.dynamic_shared_bytes <= 227 * 1024 - 16 * 1024
    src = emitted.source
    assert "loopir_allreduce<32>" in src and "loopir_cp_async<16>" in src and "*(uint4*)(Q_s" in src
    assert "loopir_ex2(fmaf(" in src and "__fdividef(" in src  # exp(S * scale - m): one FFMA and ex2.approx
    assert re.search(r"(?<![\w])expf\(", src) is None


def _source(sch: loopir.Schedule) -> str:
    from loopir.codegen_cuda import prepare_function

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return prepare_function(sch.func).emitted.source


def _lowered(sch: loopir.Schedule) -> loopir.PrimFunc:
    """The schedule's function lowered, with no race-check warning (the attention tests' shared helper)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RaceCheckWarning
        return loopir.lower(sch.func)


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("args", [
    (2, 8, 1000, 1000, 64, "float16", True, 2),
    (1, 4, Var("seq_q"), Var("seq_kv"), 128, "bfloat16", False, None),
])  # fmt: skip
@pytest.mark.parametrize("fragments", [False, True])  # both schedules (the default is True)
def test_compiles_with_nvcc(args: tuple, arch: str, fragments: bool, tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    src = _source(_attention(*args, lse=True, fragments=fragments))  # type: ignore[arg-type]
    assert "loopir_mma_m16n8k16" in src and "loopir_ldmatrix<4, true>" in src
    binary = compile_cuda(src, arch=arch, cache_dir=tmp_path)
    for res in binary.resources.values():
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0 and res.stack_frame_bytes == 0, binary.log


@pytest.mark.parametrize("kwargs, what", [
    (dict(kv_heads=3), "kv_heads = 3 must divide heads = 4"),
    (dict(dtype="int8"), "dtype must be"),
    (dict(block_m=0), "block_m must be a positive int"),
    (dict(seq_q=0), "seq_q must be a positive int or a loopir.Var"),
    (dict(seq_kv=Var("n", "int64")), "seq_kv must be an int32 Var"),
])  # fmt: skip
def test_bad_arguments_are_refused(kwargs: dict, what: str) -> None:
    args = dict(batch=1, heads=4, seq_q=8, seq_kv=8, head_dim=16) | kwargs
    with pytest.raises(ScheduleError, match=what) as info:
        attention_func(**args)
    assert info.value.primitive == "examples.attention"


@pytest.mark.parametrize("kwargs, what", [
    (dict(dtype="float32"), "attention on tensor cores takes 'float16' or 'bfloat16'"),
    (dict(block_m=48), "block_m = 48 must be a multiple of 32"),
    (dict(head_dim=24), "head_dim = 24 multiples of 16"),
])  # fmt: skip
def test_bad_gpu_schedule_arguments_are_refused(kwargs: dict, what: str) -> None:
    args = dict(batch=1, heads=4, seq_q=8, seq_kv=8, head_dim=16) | kwargs
    with pytest.raises(ScheduleError, match=what):
        attention(**args)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_matches_torch_sdpa(dtype: str, causal: bool) -> None:
    torch = pytest.importorskip("torch")
    shape = (2, 8, 300, 300, 64)
    mod = loopir.build(attention(*shape, dtype, causal, 2).func, target="cuda")
    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 8, 300, 64, device="cuda", dtype=tdt, generator=gen)
    k = torch.randn(2, 2, 300, 64, device="cuda", dtype=tdt, generator=gen)
    v = torch.randn(2, 2, 300, 64, device="cuda", dtype=tdt, generator=gen)
    o = torch.empty_like(q)
    mod(q, k, v, o)
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(4, 1),
                                                            v.float().repeat_interleave(4, 1), is_causal=causal)
    torch.testing.assert_close(o.float(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("sq, skv", [(130, 300), (300, 130), (1, 77)])
def test_gpu_causal_is_aligned_bottom_right(sq: int, skv: int) -> None:
    """Symbolic lengths with seq_q != seq_kv, causal: equal to the float64 reference (torch's
    ``is_causal`` aligns the mask top left, so it is not the reference here); rows with no valid
    key are 0."""
    pytest.importorskip("torch")
    import torch

    mod = loopir.build(attention(1, 4, Var("sq"), Var("skv"), 64, "float16", True, 2).func, target="cuda")
    arrays = _inputs((1, 4, sq, skv, 64), 2, "float16", seed=sq + skv)
    q, k, v, o = (torch.from_numpy(a).cuda() for a in arrays)
    mod(q, k, v, o)
    out = from_storage(o.cpu().numpy(), "float16")
    want = reference(*(from_storage(a, "float16") for a in arrays[:3]), True)[0]
    np.testing.assert_allclose(out, want, rtol=2e-2, atol=2e-2)


def test_causal_tiles_past_the_diagonal_are_not_visited() -> None:
    """With ``causal`` a query tile's KV loop ends at the tile of its last row's diagonal: for
    seq 256 and 64 x 64 tiles, query tile t visits t + 1 KV tiles (10 of 16 in all), each of
    them needed (its first key is valid for the tile's last row)."""
    text = attention_func(1, 1, 256, 256, 16, causal=True).script()
    extent = re.search(r"for j0 in T.serial\((.*)\):", text)
    assert extent is not None and "vi0" in extent.group(1)
    counts = [eval(extent.group(1).replace("T.max", "max").replace("T.min", "min").replace("T.int32", "int"),  # noqa: S307
                   {"vi0": t}) for t in range(4)]  # fmt: skip
    assert counts == [1, 2, 3, 4]
    full = attention_func(1, 1, 256, 256, 16).script()
    assert "for j0 in T.serial((T.int32(256) + 64 - 1) // 64)" in full
