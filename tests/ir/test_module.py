"""loopir.IRModule: construction, naming, printing, structural equality."""

from __future__ import annotations

import pytest

import loopir
from loopir import te
from loopir.errors import IRValidationError


def _scale(n: int, factor: float):
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * factor, name="B")
    return te.create_prim_func([A, B])


def test_functions_take_their_keys_as_names_and_sort():
    f = _scale(8, 2.0)
    mod = loopir.IRModule({"twice": f, "double": f})
    assert mod.names == ("double", "twice") and len(mod) == 2 and "twice" in mod
    assert [mod[n].name for n in mod] == ["double", "twice"]
    assert f.name == "main"  # the caller's function is untouched
    import attrs

    assert loopir.structural_equal(mod["double"], attrs.evolve(f, name="double"))  # only renamed


def test_printing_shows_every_function():
    mod = loopir.IRModule({"a": _scale(8, 2.0), "b": _scale(4, 3.0)})
    text = str(mod)
    assert text.startswith("# IRModule: a, b\n")
    assert "def a(" in text and "def b(" in text and "T.float32(3)" in text
    assert repr(mod) == "IRModule(a, b)"


def test_structural_equality_compares_names_and_functions():
    a = loopir.IRModule({"x": _scale(8, 2.0), "y": _scale(4, 3.0)})
    assert loopir.structural_equal(a, loopir.IRModule({"y": _scale(4, 3.0), "x": _scale(8, 2.0)}))
    assert not loopir.structural_equal(a, loopir.IRModule({"x": _scale(8, 2.0), "y": _scale(4, 4.0)}))
    assert not loopir.structural_equal(a, loopir.IRModule({"x": _scale(8, 2.0), "z": _scale(4, 3.0)}))
    with pytest.raises(AssertionError, match="different functions"):
        loopir.assert_structural_equal(a, loopir.IRModule({"x": _scale(8, 2.0)}))


def test_with_function_replaces_one_function():
    a = loopir.IRModule({"x": _scale(8, 2.0), "y": _scale(4, 3.0)})
    sch = loopir.Schedule(a["x"])
    (i,) = sch.get_loops(sch.get_block("B"))
    sch.split(i, [None, 4])
    b = a.with_function("x", sch.func)
    assert b["x"].name == "x" and loopir.structural_equal(b["y"], a["y"])
    assert not loopir.structural_equal(a, b)


@pytest.mark.parametrize(
    ("functions", "match"),
    [
        ({"1x": None}, r"function name '1x' is not an identifier"),
        ({"a-b": None}, r"function name 'a-b' is not an identifier"),
        ({"a": "not a func"}, r"'a' maps to a str, expected a PrimFunc"),
        ({}, "at least one function"),
    ],
)
def test_bad_modules_are_refused(functions, match):
    with pytest.raises(IRValidationError, match=match):
        loopir.IRModule(functions)
    with pytest.raises(IRValidationError, match="expected a mapping"):
        loopir.IRModule([_scale(8, 2.0)])  # type: ignore[arg-type]


def test_unknown_function_name_lists_the_names():
    mod = loopir.IRModule({"x": _scale(8, 2.0)})
    with pytest.raises(KeyError, match="IRModule has no function 'q'; its functions: x"):
        mod["q"]


def test_cpu_build_of_a_module():
    import numpy as np

    rt = loopir.build(loopir.IRModule({"x": _scale(8, 2.0), "y": _scale(8, 3.0)}), target="cpu")
    a = np.arange(8, dtype=np.float32) + 1
    out = np.zeros(8, np.float32)
    rt["y"](a, out)
    np.testing.assert_array_equal(out, 3 * a)
    with pytest.raises(loopir.LaunchError, match="cpu module has no function 'z'; its functions: x, y"):
        rt["z"]
