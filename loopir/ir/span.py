"""Source locations of IR nodes written as scripts (``loopir.script``).

The script parser records where each statement, block, loop, buffer and function it builds was
written; errors about those nodes (``loopir.verify``'s, a parse error's) then show the source
line. Locations live in a table keyed weakly by node identity, outside the nodes, so IR built
any other way is unaffected and a node rebuilt by a schedule or pass simply has none.
"""

from __future__ import annotations

import weakref
from typing import Any

import attrs

__all__ = ["Span", "set_span", "span_of", "locate"]


@attrs.frozen
class Span:
    """A source range: 1-based lines, 0-based columns (as Python's ``ast`` gives them).

    Attributes
    ----------
    file
        The file name (``"<string>"`` for text without one).
    line, col
        Where the construct starts.
    end_line, end_col
        Where it ends (``end_col`` is exclusive).
    source_line
        The text of line ``line`` (shown under the location).
    """

    file: str
    line: int
    col: int
    end_line: int
    end_col: int
    source_line: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"

    def show(self) -> str:
        """The location and the source line with the construct underlined by ``^``."""
        head = f"  --> {self}"
        if not self.source_line:
            return head
        text = self.source_line.rstrip("\n")
        end = self.end_col if self.end_line == self.line else len(text)
        end = max(min(end, len(text)), self.col + 1)
        num = str(self.line)
        pad = " " * len(num)
        return (
            f"{head}\n{pad} |\n{num} | {text}\n"
            f"{pad} | {' ' * self.col}{'^' * (end - self.col)}"
        )


_SPANS: weakref.WeakKeyDictionary[Any, Span] = weakref.WeakKeyDictionary()


def set_span(node: Any, span: Span) -> None:
    """Record where ``node`` was written (the parser calls this)."""
    try:
        _SPANS[node] = span
    except TypeError:  # pragma: no cover - every IR node is weakly referenceable
        pass


def span_of(node: Any) -> Span | None:
    """Where ``node`` was written, or None (not parsed from a script, or rebuilt since)."""
    try:
        return _SPANS.get(node)
    except TypeError:
        return None


def locate(root: Any, node: Any) -> list[tuple[Any, Span]]:
    """The nodes on the path from ``root`` down to ``node`` (itself included) that were parsed
    from a script, innermost first, with their locations; empty when ``node`` is not under
    ``root`` or nothing on the path has a location."""
    from loopir.ir.functor import _child_fields, _is_node

    if not _SPANS or node is None:
        return []
    path: list[Any] = []

    def walk(n: Any) -> bool:
        if n is node:
            path.append(n)
            return True
        if isinstance(n, (list, tuple)):
            return any(walk(x) for x in n)
        if not _is_node(n):
            return False
        for name in _child_fields(type(n)):
            if walk(getattr(n, name)):
                path.append(n)
                return True
        return False

    if not walk(root):
        return []
    out = []
    for n in path:  # innermost first
        span = span_of(n)
        if span is not None:
            out.append((n, span))
    return out
