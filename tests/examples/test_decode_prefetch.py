"""``examples.decode_attention(prefetch=...)`` (issue 33): K and / or V tiles fetched one KV tile
ahead into shared memory by ``cp.async`` (a two-stage pipeline of the KV loop).

* ``decode_attention_func(staged=...)`` (the tiles copied into ``K_s`` / ``V_s`` first) equals
  float64 attention on the CPU executor.
* Each ``prefetch`` value's kernel, lowered (pipelined), equals the default schedule's bit for bit
  and float64 attention within fp16's tolerance on the CPU executor, in random thread order, at
  symbolic KV lengths that are not multiples of the tile (one tile, fewer keys than chunks,
  ragged last tiles), with GQA, a few causal queries, and a paged cache; the race checker
  proves it (a RaceCheckWarning is an error here).
* The CUDA source issues the next tile's copies before this tile's K loads and waits before
  ``P V``, reads the staged rows as 16-byte shared loads, and compiles without spills.
* On a GPU: equal to the CPU executor.
"""

from __future__ import annotations

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
from loopir.ir.expr import Var
from tests.examples.test_attention import _inputs, _source
from tests.examples.test_decode_attention import _decode_run
from tests.examples.test_paged_decode import _paged_inputs, _paged_run
from tests.tensor_intrin.kernels import from_storage

PREFETCH = ["v", "kv", "k"]


def _lowered(sch: loopir.Schedule) -> loopir.PrimFunc:
    """``sch`` lowered for the CUDA target's race checker and for the CPU executor, warnings
    (a pair the race checker could not decide) as errors."""
    from loopir.passes.race_check import check_races

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_races(loopir.lower(sch.func, target="cuda"))
        return loopir.lower(sch.func)


def _assert_pipelined(lowered: loopir.PrimFunc, prefetch: str) -> None:
    """The prefetch really happened: cp.async groups and two versions of each staged tile."""
    text = lowered.script()
    assert "cp_async_wait(1)" in text and "loopir.async_copy" in text
    for x in "KV":
        staged = x.lower() in prefetch
        assert (f"{x}_s = T.allocate((2, " in text) == staged, (x, prefetch)


@settings(max_examples=6, deadline=None)
@given(staged=st.sampled_from(PREFETCH), group=st.sampled_from([1, 2]), skv=st.integers(1, 120),
       splits=st.integers(1, 4), sq=st.integers(1, 2), dtype=st.sampled_from(["float16", "bfloat16"]))  # fmt: skip
def test_staged_program_equals_float64_attention(staged: str, group: int, skv: int, splits: int, sq: int,
                                                 dtype: str) -> None:  # fmt: skip
    from loopir.examples.decode import decode_attention_func

    func = decode_attention_func(1, 2 * group, skv, 16, dtype, 2, splits=splits, block_n=16, seq_q=sq,
                                 causal=sq > 1, staged=staged)  # fmt: skip
    loopir.verify(func)
    text = func.script()
    assert ("K_load" in text) == ("k" in staged) and ("V_load" in text) == ("v" in staged)
    _decode_run(func, 1, 2 * group, skv, 16, 2, dtype, seed=skv * 7 + splits, sq=sq, causal=sq > 1)


@pytest.mark.parametrize("prefetch", PREFETCH)
def test_prefetch_equals_the_default_schedule_on_the_cpu(prefetch: str) -> None:
    """GQA 4:2, 2 causal queries (4 rows a block), head_dim 32 (4 lanes, tiles of 8 keys),
    3 chunks, a symbolic KV length: 1 key (one tile, the prologue and epilogue only), 7, 37
    and 300 keys (ragged last tiles, chunks past the keys), random thread order."""
    from loopir.examples.decode import decode_attention

    kw = dict(splits=3, seq_q=2, causal=True)
    lowered = _lowered(decode_attention(2, 4, Var("seq_kv"), 32, "float16", 2, prefetch=prefetch, **kw))
    _assert_pipelined(lowered, prefetch)
    default = loopir.lower(decode_attention(2, 4, Var("seq_kv"), 32, "float16", 2, **kw).func)
    _equals_the_default(lowered, default, (2, 4, 2, 32, 2), (1, 7, 37, 300), sq=2, causal=True)


def _equals_the_default(lowered: loopir.PrimFunc, default: loopir.PrimFunc, shape: tuple[int, int, int, int, int],
                        lengths: tuple[int, ...], **kw: object) -> None:  # fmt: skip
    """``lowered`` (a staged schedule) and the ``default`` one give the same outputs bit for bit
    (the same sums in the same order: staging changes where a value is read from) at each KV
    length, and ``lowered`` equals float64; ``shape``: batch, heads, queries, head_dim, KV heads."""
    b, h, sq, d, kh = shape
    for skv in lengths:
        outs = []
        for func in (lowered, default):
            arrays = _inputs((b, h, sq, skv, d), kh, "float16", seed=skv)
            loopir.build(func, target="cpu", thread_order="random")(*arrays)
            outs.append(from_storage(arrays[3], "float16"))
        np.testing.assert_array_equal(outs[0], outs[1])
        _decode_run(lowered, b, h, skv, d, kh, "float16", seed=skv, order="random", **kw)


@pytest.mark.parametrize("prefetch, dtype, d", [("v", "bfloat16", 24), ("kv", "float32", 16)])
def test_prefetch_other_vectors_on_the_cpu(prefetch: str, dtype: str, d: int) -> None:
    """bf16 head_dim 24 (3 lanes, 6-key tiles), fp32 head_dim 16 (4 lanes of 4 floats), one
    query, MHA, random thread order."""
    from loopir.examples.decode import decode_attention

    lowered = _lowered(decode_attention(1, 2, Var("seq_kv"), d, dtype, 2, splits=2, prefetch=prefetch))
    _assert_pipelined(lowered, prefetch)
    for skv in (2, 41):
        _decode_run(lowered, 1, 2, skv, d, 2, dtype, seed=skv, order="random")


@pytest.mark.parametrize("prefetch", ["v", "kv"])
def test_prefetch_over_a_paged_cache_on_the_cpu(prefetch: str) -> None:
    """Pages of 16 with the staged rows found through the page table, symbolic pool and table
    sizes, a sequence without keys, GQA 4:2, random thread order (NaN pages show any key
    read that is not the sequence's)."""
    from loopir.examples.decode import decode_attention

    sch = decode_attention(3, 4, Var("max_pages"), 32, "float16", 2, splits=3, page_size=16,
                           num_pages=Var("num_pages"), prefetch=prefetch)  # fmt: skip
    lowered = _lowered(sch)
    _assert_pipelined(lowered, prefetch)
    _paged_run(lowered, [0, 37, 90], 4, 2, 32, 16, 7, "float16", seed=5, order="random")
    arrays, _ = _paged_inputs([16, 1, 3], 4, 2, 32, 16, 1, "float16", seed=6)
    default = loopir.lower(decode_attention(3, 4, Var("max_pages"), 32, "float16", 2, splits=3, page_size=16,
                                            num_pages=Var("num_pages")).func)  # fmt: skip
    outs = []
    for func in (lowered, default):
        copy = [a.copy() for a in arrays]
        loopir.build(func, target="cpu", thread_order="random")(*copy)
        outs.append(copy[-1])
    np.testing.assert_array_equal(outs[0], outs[1])


def test_prefetch_issues_the_next_tiles_copies_first() -> None:
    """head_dim 128 fp16: in the steady state the copies of tile ``j0 + 1`` come before this
    tile's K loads, the wait for tile ``j0``'s V before ``P V``, which reads each row's 16
    bytes as one shared load (the emitter's vector_shared_loads; without it eight 2-byte
    loads)."""
    from loopir.codegen_cuda.vector_compute import VECTOR_SHARED_KEY
    from loopir.examples.decode import decode_attention

    sch = decode_attention(8, 32, Var("seq_kv"), 128, "float16", 32, prefetch="v")
    src = _source(sch)
    split = src[src.index("decode_attention_kernel0"):src.index("decode_attention_kernel1")]
    steady = split[split.index("for (int j0_steady"):]
    copy = steady.index("loopir_cp_async<16>(V_s + (j0_steady + 1) % 2 * 4096")
    k_load = steady.index("const uint4 K_v")
    wait = steady.index("loopir_cp_async_wait<1>();")
    v_read = steady.index("const uint4 V_s_v = *(uint4*)(V_s + j0_steady % 2 * 4096")
    assert copy < k_load < wait < v_read, (copy, k_load, wait, v_read)
    assert "V_v" not in split  # no global V load left
    pv = sch.get_loops(sch.get_block("PV"))[-1]
    sch.unannotate(pv, VECTOR_SHARED_KEY)  # the opt-in is what makes the vector
    plain = _source(sch)
    assert "V_s_v" not in plain and "(float)V_s[" in plain

    kv = _source(decode_attention(8, 32, Var("seq_kv"), 128, "float16", 32, prefetch="kv"))
    steady = kv[kv.index("for (int j0_steady"):]
    k_copy, v_copy = (steady.index(f"loopir_cp_async<16>({x}_s + (j0_steady + 1) % 2") for x in "KV")
    k_read = steady.index("const uint4 K_s_v = *(uint4*)(K_s + j0_steady % 2")
    assert k_copy < v_copy < steady.index("loopir_cp_async_wait<1>();") < k_read
    assert "const uint4 K_v" not in kv and "const uint4 V_v" not in kv


@pytest.mark.parametrize("stages", [3, 4])
def test_deeper_pipelines_equal_the_default_schedule_on_the_cpu(stages: int) -> None:
    """``stages`` 3 and 4: the copies two and three tiles ahead (as many versions of each
    tile), the same outputs bit for bit; a symbolic KV length of 1 to 300 keys (fewer tiles than
    the pipeline is deep included), random thread order."""
    from loopir.examples.decode import decode_attention

    kw = dict(splits=2, seq_q=1, vec=4, block_n=8)
    lowered = _lowered(decode_attention(1, 2, Var("seq_kv"), 16, "float16", prefetch="kv", stages=stages, **kw))
    text = lowered.script()
    assert f"cp_async_wait({stages - 1})" in text
    assert f"K_s = T.allocate(({stages}, " in text and f"V_s = T.allocate(({stages}, " in text
    default = loopir.lower(decode_attention(1, 2, Var("seq_kv"), 16, "float16", **kw).func)
    _equals_the_default(lowered, default, (1, 2, 1, 16, 2), (1, 9, 30, 300))


def test_prefetch_bad_values_are_refused() -> None:
    from loopir.examples.decode import decode_attention, decode_attention_func

    for stages, prefetch in ((1, "kv"), (2.0, "kv"), (True, "kv"), (3, None)):
        with pytest.raises(ScheduleError, match=re.escape(f"stages (the prefetch pipeline's depth) must be an int of "
                                                          f"at least 2, with a prefetch for more than 2, got "
                                                          f"stages={stages!r}, prefetch={prefetch!r}")):  # fmt: skip
            decode_attention(1, 4, 64, 16, prefetch=prefetch, stages=stages)  # type: ignore[arg-type]

    for bad in ("q", "", "vk", True, ["v"]):
        msg = f"prefetch must be None or one of 'k', 'v', 'kv' (the tiles fetched a tile ahead), got {bad!r}"
        with pytest.raises(ScheduleError, match=re.escape(msg)):
            decode_attention(1, 4, 64, 16, prefetch=bad)  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match="staged must be None or one of 'k', 'v', 'kv', got 'x'"):
        decode_attention_func(1, 4, 64, 16, staged="x")


#: (kv_heads, seq_q, dtype, paged) at batch 8, 32 heads, head_dim 128: MHA fp16 and bf16, GQA 4:1,
#: 4 causal queries (4 rows a block), a paged cache (pages of 16)
_NVCC_CASES = [(32, 1, "float16", False), (32, 1, "bfloat16", False), (8, 1, "bfloat16", False),
               (32, 4, "float16", False), (8, 1, "float16", True)]  # fmt: skip


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("prefetch", PREFETCH)
def test_prefetch_compiles_without_spills(prefetch: str, arch: str, tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    from loopir.examples.decode import decode_attention

    # For CI's time: on sm_90a every prefetch form compiles the case with the most registers (4
    # rows a block) and a share of the others, all five covered across the forms; sm_80 (no
    # wgmma, the same cp.async and shared loads) the first case only
    i = PREFETCH.index(prefetch)
    others = _NVCC_CASES[:3] + _NVCC_CASES[4:]
    cases = [_NVCC_CASES[3], *(c for j, c in enumerate(others) if j % len(PREFETCH) == i)]
    for kv_heads, sq, dtype, paged in cases if arch == "sm_90a" else _NVCC_CASES[:1]:
        kv = dict(page_size=16, num_pages=Var("num_pages")) if paged else {}
        sch = decode_attention(8, 32, Var("max_pages" if paged else "seq_kv"), 128, dtype, kv_heads, seq_q=sq,
                               causal=sq > 1, prefetch=prefetch, **kv)  # type: ignore[arg-type]  # fmt: skip
        src = _source(sch)
        assert "cp.async.cg.shared.global" in src
        binary = compile_cuda(src, arch=arch, cache_dir=tmp_path)
        for res in binary.resources.values():
            assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0 and res.stack_frame_bytes == 0, (
                kv_heads, sq, dtype, paged, res)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("prefetch", PREFETCH)
@pytest.mark.parametrize("skv", [1, 1000, 4133])
def test_prefetch_gpu_equals_the_cpu(prefetch: str, skv: int) -> None:
    """One build for every length, GQA 4:1, 2 causal queries, head_dim 128 fp16: the GPU equals
    the lowered kernel on the CPU executor."""
    torch = pytest.importorskip("torch")
    from loopir.examples.decode import decode_attention

    sch = decode_attention(2, 8, Var("seq_kv"), 128, "float16", 2, seq_q=2, causal=True, prefetch=prefetch)
    mod = loopir.build(sch.func, target="cuda")
    arrays = _inputs((2, 8, 2, skv, 128), 2, "float16", seed=skv)
    cpu = [a.copy() for a in arrays]
    loopir.build(loopir.lower(sch.func), target="cpu")(*cpu)
    q, k, v, o = (torch.from_numpy(a).cuda() for a in arrays)
    o.fill_(float("nan"))
    mod(q, k, v, o)
    np.testing.assert_allclose(from_storage(o.cpu().numpy(), "float16"), from_storage(cpu[3], "float16"),
                               rtol=2e-3, atol=2e-3)  # fmt: skip
