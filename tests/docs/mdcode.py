"""Fenced code blocks of Markdown files, with the markers that say how a docs test treats them.

A block is run when its language is ``python`` / ``py`` / ``pycon``-free Python, unless:

- it is an *IR listing* (its first line is ``@T.prim_func``, or it uses the printer's ``T``
  namespace without defining it): printed output, checked to parse as Python (dedented) but
  not run, since ``T`` is not a module;
- an HTML comment right above the fence says ``<!-- skip: needs GPU -->`` (run only when a
  CUDA GPU is visible) or ``<!-- needs: nvcc -->`` (run only when nvcc is found); or the fence
  has ``title="needs a GPU"``.

Any other ``<!-- skip: ... -->`` reason is an error: only GPU-bound examples may be skipped.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)(?P<rest>.*)$")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>skip|needs)\s*:\s*(?P<what>.*?)\s*-->\s*$", re.I)
PYTHON = {"python", "py", "python3"}


@dataclass
class CodeBlock:
    """One fenced block: where it starts, its language, text and markers."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    info: str
    text: str
    markers: list[tuple[str, str]] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def is_python(self) -> bool:
        return self.lang.lower() in PYTHON

    @property
    def is_ir_listing(self) -> bool:
        """Printer output rather than code: it starts with ``@T.prim_func``, or it uses the
        TVMScript namespace ``T`` without defining it (an excerpt such as one loop)."""
        first = next((ln.strip() for ln in self.text.splitlines() if ln.strip()), "")
        if first.startswith("@T.prim_func"):
            return True
        try:
            tree = ast.parse(textwrap.dedent(self.text))
        except SyntaxError:
            return False
        used = defined = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "T":
                used |= isinstance(node.ctx, ast.Load)
                defined |= isinstance(node.ctx, ast.Store)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                defined |= any((a.asname or a.name) == "T" for a in node.names)
        return used and not defined

    def requirement(self) -> str | None:
        """``"gpu"``, ``"nvcc"`` or None; raises ValueError for a skip that is not GPU-bound."""
        if "needs a gpu" in self.info.lower():
            return "gpu"
        for kind, what in self.markers:
            w = what.lower()
            if "gpu" in w:
                return "gpu"
            if kind.lower() == "needs" and "nvcc" in w:
                return "nvcc"
            raise ValueError(
                f"{self.where}: marker <!-- {kind}: {what} --> is not allowed; only examples that "
                "need a GPU (<!-- skip: needs GPU -->) or nvcc (<!-- needs: nvcc -->) may be skipped"
            )
        return None


def code_blocks(path: Path) -> list[CodeBlock]:
    """Every fenced block of ``path``, in order.

    Raises
    ------
    ValueError
        For a fence that is never closed.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[CodeBlock] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"])
        markers = []
        j = i - 1
        while j >= 0 and (MARKER.match(lines[j]) or not lines[j].strip()):
            mk = MARKER.match(lines[j])
            if mk:
                markers.append((mk["kind"], mk["what"]))
            elif markers:
                break  # a blank line above the markers ends them
            j -= 1
        body = []
        k = i + 1
        while k < len(lines):
            close = lines[k].strip()
            if close.startswith(fence[0] * len(fence)) and not close.strip(fence[0]):
                break
            body.append(lines[k][indent:] if lines[k][:indent].isspace() else lines[k])
            k += 1
        else:
            raise ValueError(f"{path.name}:{i + 1}: code fence is never closed")
        blocks.append(CodeBlock(path, i + 1, m["lang"], m["rest"], "\n".join(body) + "\n", markers))
        i = k + 1
    return blocks
