"""The loop-and-block skeleton of a printed function, for comparing loopir's IR with TVM's.

Printers differ (TVM folds loops into ``T.grid`` and bindings into ``T.axis.remap``, names
buffers ``R_1``, prints ``range``), so functions are compared by what a schedule decides: the
loops (variable, extent, kind) and their nesting, the blocks, their bindings (values in iter
var order) and predicates. ``canonical_loops`` renames the loop variables ``l0, l1, ...`` in
order of appearance (in bindings and predicates too), for new loops that the two name
differently (``pad``'s copies: TVM ``i0``, loopir ``ax0``).
"""

from __future__ import annotations

import re

from tests.schedule.tvm_text import _split_args

_FOR = re.compile(r"for (?P<vars>[\w, ]+) in (?P<call>[\w.]+)\((?P<args>.*)\):$")
_BLOCK = re.compile(r'with T\.s?block\("(?P<name>\w+)"\):$')
_REMAP = re.compile(r'T\.axis\.remap\("\w+", \[(?P<vals>.*)\]\)$')
_AXIS = re.compile(r"T\.axis\.(spatial|reduce)\((?P<args>.*)\)$")


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses and brackets."""
    return _split_args(text)


def skeleton(text: str, canonical_loops: bool = False) -> list[str]:
    """One line per loop (``for VAR EXTENT KIND``), block (``block NAME``), block binding
    (``bind VALUE, ...``, the values in iter var order) and predicate (``where COND``),
    indented by depth."""
    out = _skeleton(text)
    return _canonical(out) if canonical_loops else out


def _canonical(lines: list[str]) -> list[str]:
    """Loop variables renamed ``l0, l1, ...`` per loop, in order; a name refers to the
    innermost enclosing loop of that name (TVM's printer reuses ``i0`` in sibling nests)."""
    out: list[str] = []
    stack: list[tuple[int, str, str]] = []  # (depth, printed name, canonical name)
    count = 0
    for line in lines:
        depth = (len(line) - len(line.lstrip())) // 2
        parts = line.split()
        if parts[0] in ("for", "block"):
            while stack and stack[-1][0] >= depth:
                stack.pop()
        if parts[0] == "for":
            stack.append((depth, parts[1], f"l{count}"))
            count += 1
        names = {name: canon for _, name, canon in stack}
        if names:
            pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")\b")
            line = pattern.sub(lambda m, table=names: table[m[1]], line)
        out.append(line)
    return out


def _skeleton(text: str) -> list[str]:
    out: list[str] = []
    stack: list[tuple[int, int]] = []  # (indent, depth of the last node at it)
    block_depth: int | None = None  # depth of the block whose header lines are being read
    for line in text.splitlines():
        body = line.strip()
        indent = len(line) - len(line.lstrip())
        m_for, m_block = _FOR.match(body), _BLOCK.match(body)
        if block_depth is not None and not (m_for or m_block):
            pad = "  " * (block_depth + 1)
            values = _binding(body)
            if values is not None:
                if out[-1].startswith(pad + "bind "):
                    out[-1] += ", " + ", ".join(values)
                else:
                    out.append(pad + "bind " + ", ".join(values))
            elif body.startswith("T.where("):
                out.append(f"{pad}where {body[len('T.where('):-1]}")
            continue
        if not (m_for or m_block):
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        depth = stack[-1][1] + 1 if stack else 0
        if m_block:
            out.append(f"{'  ' * depth}block {m_block['name']}")
            block_depth = depth
        else:
            block_depth = None
            names = [v.strip() for v in m_for["vars"].split(",")]
            args = _split_top(m_for["args"])
            call = m_for["call"]
            for k, v in enumerate(names):
                if call == "T.thread_binding":
                    kind, ext = args[1].split("=")[1].strip('"'), args[0]
                else:  # range / T.serial / T.grid / T.parallel ...
                    kind = "serial" if call in ("range", "T.serial", "T.grid") else call[2:]
                    ext = args[k if call == "T.grid" else 0]
                out.append(f"{'  ' * (depth + k)}for {v} {ext} {kind}")
            depth += len(names) - 1
        stack.append((indent, depth))
    return out


def _binding(body: str) -> list[str] | None:
    """The values a block iter var line binds (``v = T.axis.spatial(7, i)``, TVM's remap)."""
    if "=" not in body:
        return None
    rhs = body.split("=", 1)[1].strip()
    m = _REMAP.match(rhs)
    if m:
        return _split_top(m["vals"])
    m = _AXIS.match(rhs)
    if m:
        return [_split_top(m["args"])[1]]
    return None
