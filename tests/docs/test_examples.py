"""Every Python example in README.md, docs/*.md and docs/concepts/*.md runs.

The blocks of one page run in order in one namespace, like a notebook, in a temporary working
directory. IR listings (``@T.prim_func`` ...) are checked to parse (a whole function with the
script parser, ``loopir.script.from_source``); blocks marked as needing a
GPU run only when one is visible, blocks marked as needing nvcc only when it is found (see
``tests/docs/mdcode.py``).
"""

from __future__ import annotations

import ast
import linecache
import textwrap
import traceback
from pathlib import Path

import pytest

from loopir.cli.env import probe_gpu, probe_nvcc
from loopir.errors import ScriptError
from loopir.script import from_source

from .mdcode import code_blocks

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "concepts").glob("*.md")])
FILES = [ROOT / "README.md", *PAGES]

#: Examples in pages owned by others that are known to fail, keyed by (page, first line of the
#: block, exception type): the test xfails with the reason only when exactly that block fails
#: that way, so any other failure still fails. Remove an entry when the page is fixed.
KNOWN_BROKEN: dict[tuple[str, str, str], str] = {
}


def _available(req: str | None) -> tuple[bool, str]:
    if req == "gpu":
        return probe_gpu()
    if req == "nvcc":
        return probe_nvcc()
    return True, ""


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ns: dict[str, object] = {"__name__": f"docs_{path.stem}"}
    skipped = []
    for block in code_blocks(path):
        if not block.is_python:
            continue
        if block.is_ir_listing:
            try:
                ast.parse(textwrap.dedent(block.text))
            except SyntaxError as exc:
                pytest.fail(f"{block.where}: IR listing does not parse as Python: {exc}")
            if block.text.lstrip().startswith("@T.prim_func"):
                # a whole printed function: it must be IR the script parser reads back
                try:
                    from_source(textwrap.dedent(block.text), file=block.where)
                except ScriptError as exc:
                    pytest.fail(f"{block.where}: IR listing is not a valid script:\n{exc}")
            continue
        ok, why = _available(block.requirement())
        if not ok:
            skipped.append(f"{block.where} ({why})")
            continue
        filename = f"{path}:{block.line}"
        # @T.prim_func reads a function's text with inspect: let it find this block's
        linecache.cache[filename] = (len(block.text), None, block.text.splitlines(True), filename)
        code = compile(block.text, filename, "exec")
        try:
            exec(code, ns)
        except Exception as exc:
            first = block.text.strip().splitlines()[0]
            key = (path.relative_to(ROOT).as_posix(), first, type(exc).__name__)
            if key in KNOWN_BROKEN:
                pytest.xfail(KNOWN_BROKEN[key])
            pytest.fail(f"{block.where}: the example raised\n{block.text}\n{traceback.format_exc()}")
    if skipped:
        print("skipped (not available here):", "; ".join(skipped))


def test_pages_exist_and_have_examples() -> None:
    names = {p.relative_to(ROOT / "docs").as_posix() for p in PAGES}
    for required in ("index.md", "getting_started.md", "concepts/ir.md", "concepts/schedules.md",
                     "concepts/passes.md", "concepts/local_padding.md", "concepts/cuda.md",
                     "concepts/testing.md"):  # fmt: skip
        assert required in names, f"docs/{required} is missing"
    gs = [b for b in code_blocks(ROOT / "docs" / "getting_started.md") if b.is_python]
    runnable = [b for b in gs if not b.is_ir_listing and b.requirement() is None]
    assert len(runnable) >= 8, "getting_started.md should walk through runnable examples"


def test_readme_has_the_two_commands_and_a_python_example() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = text.split("```bash\n", 1)[1].splitlines()[0]
    assert first.startswith("python3 -m pip install -e . && "), first
    assert "&& python3 -m loopir demo" in first, first
    assert 'python3 -m pip install -e ".[test]" && python3 -m pytest -q' in text
    # CI runs the README's test command as written: it lists the 15 slowest tests
    test_line = next(line for line in text.splitlines() if '-e ".[test]" && python3 -m pytest' in line)
    assert "--durations=15" in test_line.split("#", 1)[0], test_line
    assert any(b.is_python for b in code_blocks(ROOT / "README.md"))


def _cli_lines() -> list[tuple[str, str]]:
    """``(where, arguments)`` of every ``python -m loopir ...`` line in shell blocks."""
    found = []
    for path in FILES:
        for block in code_blocks(path):
            if block.lang.lower() not in ("bash", "sh", "shell", "console", ""):
                continue
            for line in block.text.splitlines():
                for part in line.split("#", 1)[0].split("&&"):
                    words = part.split()
                    if words[:2] in (["python", "-m"], ["python3", "-m"]) and words[2:3] == ["loopir"]:
                        found.append((block.where, " ".join(words[3:])))
    return found


def test_command_lines_in_the_docs_parse() -> None:
    import shlex

    from loopir.cli import build_parser

    lines = _cli_lines()
    assert any(args == "demo" for _, args in lines), "the README's demo command was not found"
    for where, args in lines:
        try:
            build_parser().parse_args(shlex.split(args))
        except SystemExit:
            pytest.fail(f"{where}: `python -m loopir {args}` is not a valid command line")
