"""Compare IR printed by TVM 0.27 with IR printed by loopir, up to syntax and names.

``normalize(text)`` turns either printer's text into one canonical form:

- TVM's syntax becomes loopir's: ``T.sblock`` -> ``T.block``, ``range(n)`` -> ``T.serial(n)``,
  ``for a, b in T.grid(x, y)`` -> nested loops, ``T.axis.remap("SR", [i, k])`` -> one
  ``T.axis.spatial/reduce(extent, var)`` line per axis, ``T.float32(2.0)`` -> ``T.float32(2)``;
  headers, imports, ``T.func_attr`` and blank lines are dropped;
- every loop and iter var gets a canonical name in order of definition (``x0``, ``x1``, ...),
  since the printers disambiguate clashing names differently (TVM prints two loops named
  ``i_1`` where loopir prints ``i_1`` and ``i_1_1``);
- with ``sort_regions``, the entries of ``T.reads``/``T.writes`` are sorted (TVM unions the
  regions of several blocks in hash order) and ``x:x + (x + 1 - x)`` is ``x``.

Everything else (loop structure, bindings, predicates, regions, bodies) must be equal.
"""

from __future__ import annotations

import re

_DROP = re.compile(r"^\s*(# from|# TVM|T\.func_attr|# with T\.s?block\(\"root\"\))")
_GRID = re.compile(r"^(\s*)for ([\w, ]+) in T\.grid\((.*)\):$")
_FOR = re.compile(r"^(\s*)for (\w+) in (?:T\.(\w+)|range)\(([^,)]*)(.*)\):$")
_REMAP = re.compile(r'^(\s*)([\w, ]+) = T\.axis\.remap\("(\w+)", \[([\w, ]+)\]\)$')
_AXIS = re.compile(r"^\s*(\w+) = T\.axis\.\w+\(")
_FLOAT = re.compile(r"T\.(float\d+)\((-?\d+)\.0\)")
_ALLOC = re.compile(r'T\.alloc_buffer\((\([^()]*\)), "float32"')


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated parts of ``text``."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _expand(lines: list[str]) -> list[str]:
    """Expand ``T.grid`` and ``T.axis.remap`` into loopir's one-per-line forms."""
    out: list[str] = []
    shifts: list[tuple[int, int]] = []  # (indent of a grid line, extra indent below it)
    extents: dict[str, str] = {}
    for line in lines:
        indent = len(line) - len(line.lstrip())
        while shifts and indent <= shifts[-1][0]:
            shifts.pop()
        extra = sum(s for _, s in shifts)
        body = line.strip()
        pad = " " * (indent + extra)
        m = _GRID.match(line)
        if m:
            names = [n.strip() for n in m.group(2).split(",")]
            exts = _split_args(m.group(3))
            for k, (n, e) in enumerate(zip(names, exts)):
                out.append(f"{pad}{'    ' * k}for {n} in T.serial({e}):")
                extents[n] = e
            shifts.append((indent, 4 * (len(names) - 1)))
            continue
        m = _REMAP.match(line)
        if m:
            names = [n.strip() for n in m.group(2).split(",")]
            loops = [n.strip() for n in m.group(4).split(",")]
            for n, kind, lp in zip(names, m.group(3), loops):
                axis = "spatial" if kind == "S" else "reduce"
                out.append(f"{pad}{n} = T.axis.{axis}({extents.get(lp, '?')}, {lp})")
            continue
        body = re.sub(r"\brange\(", "T.serial(", body)
        m = _FOR.match(" " * indent + body)
        if m:
            extents[m.group(2)] = m.group(4).strip()
        out.append(pad + body)
    return out


def _rename(lines: list[str]) -> list[str]:
    """Canonical names for loop and iter vars, in order of definition (a definition's own
    expressions use the names defined before it)."""
    names: dict[str, str] = {}
    out = []
    for line in lines:
        m_for, m_axis = _FOR.match(line), _AXIS.match(line)
        if m_for:
            old = m_for.group(2)
            new = f"x{len(out)}"
            line = _subst(line, {k: v for k, v in names.items() if k != old})
            line = line.replace(f"for {old} in", f"for {new} in", 1)
            names[old] = new
        elif m_axis:
            old = m_axis.group(1)
            new = f"x{len(out)}"
            head, _, rest = line.partition(" = ")
            line = head.replace(old, new) + " = " + _subst(rest, names)
            names[old] = new
        else:
            line = _subst(line, names)
        out.append(line)
    return out


def _subst(text: str, names: dict[str, str]) -> str:
    if not names:
        return text
    pattern = re.compile(r"(?<![\w.\"])(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")(?![\w\"])")
    return pattern.sub(lambda m: names[m.group(1)], text)


def _sort_regions(line: str) -> str:
    line = re.sub(r"([\w ]+?):\1 \+ \(\1 \+ 1 - \1\)", lambda m: m.group(1).strip(), line)
    m = re.match(r"^(\s*T\.(?:reads|writes))\((.*)\)$", line)
    if not m:
        return line
    return f"{m.group(1)}({', '.join(sorted(_split_args(m.group(2))))})"


def normalize(text: str, sort_regions: bool = False) -> list[str]:
    """The canonical lines of a printed function (see the module docstring)."""
    lines = []
    for line in text.splitlines():
        if not line.strip() or _DROP.match(line):
            continue
        line = line.replace("@T.prim_func(s_tir=True)", "@T.prim_func")
        line = line.replace("T.sblock_alloc_buffer", "T.alloc_buffer").replace("T.sblock(", "T.block(")
        line = _FLOAT.sub(r"T.\1(\2)", line)
        line = _ALLOC.sub(r"T.alloc_buffer(\1", line)  # TVM leaves out the default dtype
        lines.append(line.rstrip())
    out = _rename(_expand(lines))
    if sort_regions:
        out = [_sort_regions(line) for line in out]
    return out
