"""Local padding (``tir.enable_local_pad``) and the attention kernels (issue 33).

Issue 33 asks for local padding's effect on the ragged tails. LocalPadding removes the bound
guards of ``shared``/``local`` stores where padding makes them unnecessary, turning a guarded
fetch into ``if_then_else(in_bounds, value, pad)``. The attention programs are written in that
form already: a K or V row past ``seq_kv`` (a Q row past ``seq_q``) is loaded as 0 by the load's
own ``if_then_else``, with no block predicate, and the scores of invalid keys are masked to
``-inf`` inside the softmax blocks' values. So the pass finds nothing to do: the CUDA source is
the same byte for byte with it on and off, for every form (FA2 on ``mma.sync``, FA3's ``wgmma``, the
shared-memory schedule, causal or not, lengths off the tile and symbolic) and for decode. If a
form ever gains a guarded local store, this test names it, and its timing on and off belongs in
docs/benchmarks.md.
"""

from __future__ import annotations

import warnings

import pytest

import loopir
from loopir.codegen_cuda import prepare_function
from loopir.examples import attention, decode_attention
from loopir.ir.expr import Var


def _source(sch: loopir.Schedule, pad: bool) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the race checker's notes are not this test's business
        with loopir.PassContext(config={"tir.enable_local_pad": pad}):
            return prepare_function(sch.func).emitted.source


_FORMS = [{"wgmma": True}, {"wgmma": True, "overlap": False}, {"wgmma": False}, {"wgmma": False, "fragments": False}]
_LENGTHS = [(1000, 1000), (70, 130), ("sq", "skv")]


#: every form at every length, causal and not alternating: each pair of two parameters' values
#: is built (12 of the 24 combinations: CI time)
@pytest.mark.parametrize(("form", "causal", "lengths"), [
    (form, bool((i + j) % 2), lengths) for i, form in enumerate(_FORMS) for j, lengths in enumerate(_LENGTHS)])
def test_prefill_is_the_same_with_local_padding(form: dict[str, object], causal: bool,
                                                lengths: tuple[object, object]) -> None:  # fmt: skip
    sq, skv = (Var(x) if isinstance(x, str) else x for x in lengths)
    head_dim = 64
    sch = attention(2, 4, sq, skv, head_dim, "float16", causal, 2, **form)  # type: ignore[arg-type]
    off, on = _source(sch, False), _source(sch, True)  # one schedule: padding is a lowering option
    assert "if (" in off or "?" in off  # the ragged tails are guarded somewhere in the kernel
    assert on == off


def test_decode_is_the_same_with_local_padding() -> None:
    sch = decode_attention(2, 8, Var("seq_kv"), 128, "float16", 2)
    assert _source(sch, True) == _source(sch, False)
