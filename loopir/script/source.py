"""The text being parsed: where its lines came from, and errors that point into it."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any, NoReturn

from loopir.errors import ScriptError
from loopir.ir.span import Span, set_span

__all__ = ["Source", "function_source"]


class Source:
    """Script text plus the file and position it starts at (for spans into the real file).

    Parameters
    ----------
    text
        The script (dedented; ``col_offset`` says by how much).
    file
        The file name shown in errors.
    first_line
        The file's line number of ``text``'s first line.
    col_offset
        Columns removed from every line by dedenting.
    """

    def __init__(self, text: str, file: str = "<string>", first_line: int = 1, col_offset: int = 0) -> None:
        self.text = text
        self.file = file
        self.first_line = first_line
        self.col_offset = col_offset
        self.lines = text.splitlines()

    def parse(self) -> ast.Module:
        """The text's AST; a Python syntax error becomes a ScriptError at its position."""
        try:
            return ast.parse(self.text, filename=self.file)
        except SyntaxError as e:
            line = e.lineno or 1
            col = max((e.offset or 1) - 1, 0)
            raise ScriptError(
                f"invalid Python syntax: {e.msg}", self._span(line, col, line, col + 1)
            ) from None

    def _span(self, line: int, col: int, end_line: int, end_col: int) -> Span:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        shift = self.col_offset
        return Span(
            self.file,
            line + self.first_line - 1,
            col + shift,
            end_line + self.first_line - 1,
            end_col + shift,
            " " * shift + text,
        )

    def span(self, node: ast.AST) -> Span:
        """The span of an AST node (statements: their first line)."""
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        end_line = getattr(node, "end_lineno", None) or line
        end_col = getattr(node, "end_col_offset", None)
        if end_col is None:
            end_col = col + 1
        if isinstance(node, (ast.For, ast.With, ast.If, ast.FunctionDef)):
            # a compound statement is shown by its header line
            end_line, end_col = line, len(self.lines[line - 1]) if line <= len(self.lines) else col + 1
        return self._span(line, col, end_line, end_col)

    def error(self, message: str, node: ast.AST | None) -> NoReturn:
        """Raise a ScriptError about ``node``."""
        raise ScriptError(message, None if node is None else self.span(node))

    def mark(self, ir_node: Any, node: ast.AST) -> None:
        """Record that ``ir_node`` was written at ``node``."""
        set_span(ir_node, self.span(node))


def function_source(func: Callable[..., Any]) -> Source:
    """The source of a Python function (its decorators included), dedented.

    Raises
    ------
    ScriptError
        When Python cannot find the source (a function typed into an interactive prompt, or
        made by ``exec`` of text that is not in ``linecache``).
    """
    name = getattr(func, "__qualname__", repr(func))
    try:
        lines, first = inspect.getsourcelines(func)
        file = inspect.getsourcefile(func) or inspect.getfile(func)
    except (OSError, TypeError) as e:
        raise ScriptError(
            f"@T.prim_func: cannot read the source of {name} ({e}); the parser reads the "
            "function's text and never runs it. Define it in a file, or pass the text to "
            "loopir.script.from_source"
        ) from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    first_text = next((ln for ln in lines if ln.strip()), "")
    first_dedented = next((ln for ln in dedented.splitlines() if ln.strip()), "")
    shift = len(first_text) - len(first_text.lstrip()) - (len(first_dedented) - len(first_dedented.lstrip()))
    return Source(dedented, file, max(first, 1), shift)
