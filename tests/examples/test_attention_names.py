"""Symbolic lengths named like the attention templates' own variables (issue 33).

``attention_func`` and ``decode_attention_func`` write their programs as script text and parse
it. A ``loopir.Var`` length used to enter the text by its name, so a length named ``b`` (the
template's batch loop), ``h``, ``d``, ``jj``... was read as that loop's variable: the KV loop
of ``attention_func(2, 8, Var("a"), Var("b"), ...)`` ran ``ceildiv(batch index, 64)`` tiles and
the result was wrong without an error. The lengths are now the given Var objects themselves,
whatever their names.
"""

from __future__ import annotations

import numpy as np
import pytest

import loopir
from loopir.examples.attention import attention_func
from loopir.examples.decode import decode_attention_func
from loopir.ir.expr import Var
from tests.examples.test_attention import _run


def _params_use(func: loopir.PrimFunc, var: Var) -> bool:
    return any(e is var for p in func.params for e in p.shape)


@pytest.mark.parametrize("names", [("a", "b"), ("h", "d"), ("ii", "jj"), ("vb", "i0"), ("b", "b")])
@pytest.mark.parametrize("fragments", [False, True])
def test_prefill_lengths_named_like_template_variables(names: tuple[str, str], fragments: bool) -> None:
    sq, skv = Var(names[0]), Var(names[1])
    func = attention_func(2, 4, sq, skv, 16, "float32", True, 2, lse=True, block_m=16, block_n=16,
                          fragments=fragments)  # fmt: skip
    assert _params_use(func, sq) and _params_use(func, skv)  # the caller's Vars, not look-alikes
    for lengths in ((5, 37), (20, 3)):
        _run(func, (2, 4, *lengths, 16), 2, "float32", True, True, seed=sum(lengths))


@pytest.mark.parametrize("name", ["b", "kh", "sp", "r", "d", "j0"])
def test_decode_length_named_like_a_template_variable(name: str) -> None:
    skv = Var(name)
    func = decode_attention_func(2, 4, skv, 16, "float32", 2, splits=2, block_n=8)
    assert _params_use(func, skv)
    rng = np.random.default_rng(1)
    n = 29
    q = rng.standard_normal((2, 4, 1, 16)).astype(np.float32)
    k = rng.standard_normal((2, 2, n, 16)).astype(np.float32)
    v = rng.standard_normal((2, 2, n, 16)).astype(np.float32)
    o = np.full((2, 4, 1, 16), np.nan, np.float32)
    loopir.build(func, target="cpu")(q, k, v, o)
    kr, vr = np.repeat(k, 2, 1).astype(np.float64), np.repeat(v, 2, 1).astype(np.float64)
    s = q.astype(np.float64) @ np.swapaxes(kr, -1, -2) / 4.0
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(o, (p / p.sum(-1, keepdims=True)) @ vr, rtol=1e-5, atol=1e-5)
