"""Errors of scripts name the file, line and column and mark the construct; verification
failures of a parsed function point at its source."""

from __future__ import annotations

import re
import textwrap

import pytest

import loopir
from loopir.errors import IRValidationError, ScriptError
from loopir.script import T, from_source

HEAD = 'def f(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8,), "float32")):\n'


def fails(body: str, match: str) -> ScriptError:
    """Parse HEAD + ``body`` (in k.py); the error must match and show the marked source."""
    text = HEAD + textwrap.indent(textwrap.dedent(body), "    ")
    with pytest.raises(ScriptError, match=match) as info:
        from_source(text, file="k.py")
    e = info.value
    assert e.span is not None and e.span.file == "k.py"
    shown = str(e)
    line = text.splitlines()[e.span.line - 1]
    assert f"--> k.py:{e.span.line}:{e.span.col + 1}" in shown
    assert line in shown
    marks = [ln for ln in shown.splitlines() if re.fullmatch(r"\s*\|\s*\^+", ln)]
    assert len(marks) == 1  # the construct is underlined
    return e


@pytest.mark.parametrize(
    ("body", "match", "where"),
    [
        ("B[0] = x\n", "name 'x' is not defined", (2, 12)),
        ("x = A[0, 0]\n", "loopir has no let binding", (2, 5)),
        ("while True:\n    pass\n", "loopir has no while loop", (2, 5)),
        ("for i in T.serial(8):\n    B[i] = A[i]\n", "buffer A has 2 dimensions, indexed with 1", (3, 16)),
        ("for i in T.spiral(8):\n    pass\n", "T.spiral is not a loop kind", (2, 14)),
        ("B[0] = T.expp(A[0, 0])\n", r"T.expp is not a construct, a dtype or a registered intrinsic", (2, 12)),
        ("for i in T.thread_binding(8, thread='threadIdx.w'):\n    pass\n", "unknown thread 'threadIdx.w'", (2, 14)),
        ("T.reads(A[0, 0])\n", r"T.reads belongs directly in a block", (2, 5)),
        ("with T.block('b'):\n    v = T.axis.spatial(8)\n", "T.axis.spatial takes a domain and the value", (3, 13)),
        ("for i in range(8):\n    with T.block('b'):\n        v = T.axis.scan(8, i)\n",
         r"T.axis.scan: loopir blocks have spatial and reduce axes only", (4, 17)),
        ("with T.block('b'):\n    v, w = T.axis.remap('SS', [1, 2])\n", "T.axis.remap binds loop variables", (3, 35)),
        ("B[0] = A[0, 0] ** 2\n", r"\*\* is not an IR operator; use T.pow", (2, 12)),
        ("for i in range(8):\n    B[i] = i / 2\n", "'/' on integer expressions", (3, 16)),
        ("if B[0]:\n    pass\n", "expected a bool condition", (2, 8)),
        ("return\n", "a PrimFunc returns nothing", (2, 5)),
        ("B[0] = A[0:2, 0]\n", "a load takes indices, not slices", (2, 14)),
        ("B[0] = print(1)\n", "name 'print' is not defined", (2, 12)),
        ("B[0] = A.shape.count(8)\n", r"A.shape.count is not a T construct: a script never calls Python", (2, 12)),
    ],
)  # fmt: skip
def test_parse_errors_point_at_the_construct(body: str, match: str, where: tuple[int, int]) -> None:
    e = fails(body, match)
    assert (e.span.line, e.span.col + 1) == where


def test_a_syntax_error_has_its_position() -> None:
    with pytest.raises(ScriptError, match="invalid Python syntax") as info:
        from_source(HEAD + "    for i in :\n", file="k.py")
    assert info.value.span.line == 2


def test_one_function_is_expected() -> None:
    with pytest.raises(ScriptError, match="expected one function definition, found 2"):
        from_source(HEAD + "    pass\n" + HEAD + "    pass\n")


def test_errors_in_a_decorated_function_name_its_file_and_line() -> None:
    with pytest.raises(ScriptError) as info:

        @T.prim_func
        def f(A: T.Buffer((4,), "float32")):
            A[0] = undefined_name  # noqa: F821

    e = info.value
    assert e.span.file == __file__
    assert e.span.line == test_errors_in_a_decorated_function_name_its_file_and_line.__code__.co_firstlineno + 5
    assert "A[0] = undefined_name" in str(e)


def test_a_function_without_source_is_refused_helpfully() -> None:
    ns: dict[str, object] = {"T": T}
    exec("def f(A: T.Buffer((4,), 'float32')):\n    pass\n", ns)  # noqa: S102 - no file on purpose
    with pytest.raises(ScriptError, match="cannot read the source of f.*from_source"):
        T.prim_func(ns["f"])


def test_verification_failures_point_at_the_source_block() -> None:
    text = HEAD + textwrap.indent(textwrap.dedent("""\
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi, 0])
                T.writes(B[vi])
                B[vi] = A[i, 0]
    """), "    ")  # fmt: skip
    f = from_source(text, file="k.py")
    with pytest.raises(IRValidationError) as info:
        loopir.verify(f)
    shown = str(info.value).split("offending node")[0]
    assert info.value.check == "undefined-var"
    assert "variable 'i' is defined outside block 'B'" in shown
    assert "--> k.py:7:13" in shown and "B[vi] = A[i, 0]" in shown
    assert "in block 'B' written at k.py:3:9" in shown


def test_the_docs_show_the_real_message() -> None:
    """docs/script.md's error example prints what its text block shows."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "script.md").read_text()
    code = page.split("from_source('''", 1)[1].split("''', file=", 1)[0]
    shown = page.split("prints\n\n```text\n", 1)[1].split("\n```", 1)[0]
    with pytest.raises(ScriptError) as info:
        from_source(code, file="square.py")
    assert str(info.value) == shown
