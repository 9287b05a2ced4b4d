"""The one-read cross-entropy forward (``loopir.examples.reductions.cross_entropy_func``)."""

from __future__ import annotations

import numpy as np
import pytest

import loopir
from loopir.codegen_cuda import emit_cuda
from loopir.examples.reductions import cross_entropy_func
from loopir.schedule.default_gpu import default_gpu_schedule


def _inputs(rows: int, vocab: int, chunk: int, dtype: str, seed: int):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, vocab)) * 3).astype(dtype if dtype != "bfloat16" else "float32")
    t = rng.integers(0, vocab, rows).astype("int32")
    chunks = -(-vocab // min(chunk, vocab))
    return x, t, np.full(rows, np.nan, "float32"), np.full((rows, chunks, 2), np.nan, "float32")


def _reference(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    xd = x.astype("float64")
    m = xd.max(1)
    return np.log(np.exp(xd - m[:, None]).sum(1)) + m - xd[np.arange(len(t)), t]


@pytest.mark.parametrize("vocab,chunk", [(8192, 4096), (6000, 1000), (6000, 1024), (4099, 1024), (300, 16384)])
def test_the_chunked_form_is_the_cross_entropy(vocab, chunk) -> None:
    """Any vocabulary: a last chunk cut short (6000 / 1024, an odd 4099) and one chunk shorter
    than the default (300) too."""
    x, t, loss, p = _inputs(5, vocab, chunk, "float16", vocab)
    loopir.build(cross_entropy_func(5, vocab, "float16", chunk), target="cpu")(x, t, loss, p)
    np.testing.assert_allclose(loss, _reference(x, t), rtol=1e-5, atol=1e-5)


def test_bad_sizes_are_refused() -> None:
    for vocab, chunk in ((0, 1024), (4096, 0), (4096.0, 1024)):
        with pytest.raises(ValueError, match=r"cross_entropy_func: vocab and chunk must be positive ints"):
            cross_entropy_func(5, vocab, "float16", chunk)


@pytest.mark.parametrize("vocab", [6000, 4099])
def test_a_ragged_last_chunk_on_the_default_schedule(vocab) -> None:
    """The default GPU schedule of a vocabulary that is no multiple of the chunk, in random
    thread order, race-free: 16-byte loads under a guard the same for their 8 lanes where the
    rows are aligned (6000), scalar guarded loads where they are not (4099)."""
    from loopir.passes.race_check import check_races

    f = cross_entropy_func(3, vocab, "float16", chunk=1024)
    low = loopir.lower(f, target="cuda")
    check_races(low)
    loopir.testing.check_equivalent(f, low, rtol=1e-4, atol=1e-4, thread_order="random",
                                    inputs=list(_inputs(3, vocab, 1024, "float16", 2)))  # fmt: skip
    (first, *_rest) = emit_cuda(low).kernel_texts
    if vocab % 8 == 0:
        # the max's and the sum's 16-byte loads, each in a branch on the guard (one per vector,
        # the same for its 8 lanes), and no select per element
        assert first.count("const uint4 X_v") == 2 and "X[" not in first
        assert first.count(" < 750) {") == 2 and first.count("} else {") == 2 and "< 750) ?" not in first
    else:
        assert "uint4" not in first and "< 4099) ? " in first


def test_the_default_schedule_reads_each_chunk_in_one_block() -> None:
    f = cross_entropy_func(4, 16384, "float16", chunk=8192)  # 2 chunks a row
    sch = loopir.Schedule(f)
    assert default_gpu_schedule(sch)[-1] == "rows P <- Mc, Sc (256 threads, statistics x 8 lanes)"
    loopir.testing.check_equivalent(f, sch.func, rtol=1e-4, atol=1e-4, inputs=list(_inputs(4, 16384, 8192, "float16", 1)))
    (first, *_rest) = emit_cuda(loopir.lower(f, target="cuda")).kernel_texts
    assert first.count("const uint4 X_v") == 2 and "X[" not in first  # the max's pass, the sum's pass


@pytest.mark.parametrize(("rows", "vocab", "warps"), [(3, 4096, True), (2, 3072, False)])
def test_chunks_of_1024_take_a_warp_each(rows, vocab, warps) -> None:
    """Chunks of up to 1024 16-bit logits: a warp per (row, chunk), 4 a block, when the chunks of
    a row come in fours (3 chunks a row: a block's 4 would span two rows, not a box: a block
    per chunk), in random thread order, race-free."""
    from loopir.passes.race_check import check_races

    f = cross_entropy_func(rows, vocab, "float16", chunk=1024)
    sch = loopir.Schedule(f)
    lines = default_gpu_schedule(sch)
    want = "rows P <- Mc, Sc (32 threads, 4 rows a block, statistics x 8 lanes)" if warps else \
        "rows P <- Mc, Sc (128 threads, statistics x 8 lanes)"  # fmt: skip
    assert want in lines, lines
    low = loopir.lower(sch.func, target="cuda")
    check_races(low)
    loopir.testing.check_equivalent(f, low, rtol=1e-4, atol=1e-4, thread_order="random",
                                    inputs=list(_inputs(rows, vocab, 1024, "float16", rows)))  # fmt: skip
    (first, *_rest) = emit_cuda(low).kernel_texts
    assert ("loopir_allreduce<32>" in first) == warps


@pytest.mark.nvcc
def test_cross_entropy_kernels_compile(tmp_path) -> None:
    from loopir.codegen_cuda.compile import compile_cuda

    for dtype, vocab in (("float16", 131072), ("bfloat16", 131072), ("float16", 128256), ("bfloat16", 50257)):
        with loopir.PassContext(config={"cuda.fast_math": True}):
            source = emit_cuda(loopir.lower(cross_entropy_func(8, vocab, dtype), target="cuda")).source
        compile_cuda(source, arch="sm_90a", cache_dir=tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("chunk, vocab", [(16384, 131072), (8192, 131072), (1024, 131072), (16384, 128256),
                                          (16384, 50257)])  # fmt: skip
def test_cross_entropy_on_the_gpu(fast, chunk, vocab) -> None:
    """The default chunk, the previous one, a warp a chunk; LLaMA 3's and GPT-2's vocabularies
    (a last chunk cut short: guarded 16-byte loads, then scalar loads of unaligned rows)."""
    x, t, loss, p = _inputs(16, vocab, chunk, "float16", 7)
    with loopir.PassContext(config={"cuda.fast_math": fast}):
        loopir.build(cross_entropy_func(16, vocab, "float16", chunk=chunk), target="cuda")(x, t, loss, p)
    np.testing.assert_allclose(loss, _reference(x, t), rtol=1e-4, atol=1e-4)
