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
* nvcc compiles it for sm_90a without spills and without C7515.
* On a GPU: equal to float64 (``@pytest.mark.gpu``).
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
from loopir.errors import CodegenError, ScheduleError
from loopir.examples.attention import attention
from tests.examples.test_attention import _inputs, _run, reference
from tests.tensor_intrin.kernels import from_storage


def _lowered(sch: loopir.Schedule) -> loopir.PrimFunc:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RaceCheckWarning
        return loopir.lower(sch.func)


@settings(max_examples=6, deadline=None)
@given(d=st.sampled_from([64, 128]), causal=st.booleans(), dtype=st.sampled_from(["float16", "bfloat16"]),
       kv_heads=st.sampled_from([1, 2]), seq_q=st.integers(1, 150), seq_kv=st.integers(1, 200),
       order=st.sampled_from(["sequential", "random"]))  # fmt: skip
def test_equals_float64_on_the_cpu(d: int, causal: bool, dtype: str, kv_heads: int, seq_q: int, seq_kv: int,
                                   order: str) -> None:  # fmt: skip
    shape = (1, 2, seq_q, seq_kv, d)
    sch = attention(*shape, dtype, causal, kv_heads, wgmma=True, overlap=True, tma=True)
    _run(_lowered(sch), shape, kv_heads, dtype, causal, False, order=order)


def _source(sch: loopir.Schedule) -> str:
    from loopir.codegen_cuda import prepare_function

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return prepare_function(sch.func).emitted.source


def test_the_race_checker_proves_the_protocol_and_refuses_a_missing_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    sch = attention(1, 2, 100, 150, 64, wgmma=True, overlap=True, tma=True)
    src = _source(sch)  # proven (a refusal raises CodegenError)
    assert "mbarrier.try_wait" in src or "mbarrier_wait" in src
    from loopir.passes import pipeline_ws

    orig = pipeline_ws.WsPipeline._parity
    # mutation: the consumers wait for the wrong phase of their full barrier (one ahead)
    monkeypatch.setattr(pipeline_ws.WsPipeline, "_parity",
                        lambda self, j, ahead: orig(self, j, 1 if ahead == 0 else ahead))  # fmt: skip
    with pytest.raises(CodegenError, match="race check"):
        _source(attention(1, 2, 100, 150, 64, wgmma=True, overlap=True, tma=True))


@pytest.mark.nvcc
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("tma", [True, (24, 240)])
def test_compiles_with_nvcc(d: int, tma: object, tmp_path: Path) -> None:
    from loopir.codegen_cuda import compile_cuda

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    src = _source(attention(2, 8, 1000, 1000, d, "float16", True, 2, wgmma=True, overlap=True, tma=tma))  # type: ignore[arg-type]
    assert "cp.async.bulk.tensor.4d" in src
    assert ("setmaxnreg" in src) == (tma is not True)
    binary = compile_cuda(src, arch="sm_90a", cache_dir=tmp_path)
    for res in binary.resources.values():
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, binary.log
    assert "C7515" not in binary.log, binary.log


@pytest.mark.parametrize("kwargs, what", [
    (dict(tma="yes"), "tma must be False, True or .*got 'yes'"),
    (dict(tma=True, overlap=False), "tma .* needs wgmma=True and overlap=True"),
])  # fmt: skip
def test_bad_arguments_are_refused(kwargs: dict, what: str) -> None:
    with pytest.raises(ScheduleError, match=what):
        attention(1, 2, 128, 128, 64, **({"wgmma": True} | kwargs))


@pytest.mark.gpu
@pytest.mark.parametrize("d, causal", [(64, False), (128, False), (64, True), (128, True)])
def test_gpu_equals_float64(d: int, causal: bool) -> None:
    shape = (2, 4, 333, 517, d)
    arrays = _inputs(shape, 2, "float16", 0)
    f = loopir.build(attention(*shape, "float16", causal, 2, wgmma=True, overlap=True, tma=True).func, target="cuda")
    f(*arrays)
    q, k, v = (from_storage(a, "float16") for a in arrays[:3])
    want, _ = reference(q, k, v, causal)
    np.testing.assert_allclose(from_storage(arrays[3], "float16"), want, rtol=2e-3, atol=2e-3)
