"""LowerCrossThreadReduction against TVM 0.27 (issue 29): the IR after the pass is a golden,
and its structure (loops, their bindings and order, the blocks ``S_in_thread_init``,
``S_in_thread``, ``S_cross_thread``, ``S_write_back`` and the write-back's predicate) is the
one TVM produces for the same schedule (tests/golden/passes/tvm/, written by
tests/passes/_tvm_cross_thread_reference.py). TVM combines with ``tvm_thread_allreduce`` on any
thread axes; loopir's ``S_cross_thread`` is ``thread_allreduce`` over threadIdx.x rows and a
shared-memory tree otherwise (the combine's inside is not compared)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import loopir
from loopir import te
from loopir.passes import LowerCrossThreadReduction
from loopir.testing import check_equivalent

TVM_DIR = Path(__file__).parent.parent / "golden" / "passes" / "tvm"


def _func(rows: int, n: int) -> loopir.PrimFunc:
    A = te.placeholder((rows, n), "float32", name="A")
    k = te.reduce_axis(n, name="k")
    S = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="S")
    return te.create_prim_func([A, S])


def _k_outside(sch: loopir.Schedule) -> None:
    i, k = sch.get_loops(sch.get_block("S"))
    _, k1 = sch.split(k, [None, 64])
    sch.bind(i, "blockIdx.x")
    sch.bind(k1, "threadIdx.x")


def _three_way(sch: loopir.Schedule) -> None:
    i, k = sch.get_loops(sch.get_block("S"))
    _, k1, _ = sch.split(k, [None, 32, 4])
    sch.bind(i, "blockIdx.x")
    sch.bind(k1, "threadIdx.x")


def _y_reduce(sch: loopir.Schedule) -> None:
    i, k = sch.get_loops(sch.get_block("S"))
    k0, k1 = sch.split(k, [None, 16])
    sch.reorder(k1, k0)
    sch.reorder(i, k1)
    sch.bind(i, "threadIdx.x")
    sch.bind(k1, "threadIdx.y")


def _xy_reduce(sch: loopir.Schedule) -> None:
    i, k = sch.get_loops(sch.get_block("S"))
    _, k1, k2 = sch.split(k, [None, 4, 8])
    sch.bind(i, "blockIdx.x")
    sch.bind(k1, "threadIdx.y")
    sch.bind(k2, "threadIdx.x")


CASES = {"k_outside": (4, 1000, _k_outside), "three_way": (4, 1000, _three_way),
         "y_reduce": (8, 100, _y_reduce), "xy_reduce": (8, 100, _xy_reduce)}  # fmt: skip

_FOR = re.compile(r"for (?P<vars>[\w, ]+) in (?P<call>[\w.]+)\((?P<args>.*)\):$")
_BLOCK = re.compile(r'with T\.s?block\("(?P<name>\w+)"\):$')


def skeleton(text: str) -> list[str]:
    """Loops and blocks of a printed function, one line each with its depth: ``for`` lines
    give the variable, the extent and the binding (``T.grid`` of TVM's printer expands to its
    loops), the write-back gives its predicate."""
    out: list[str] = []
    stack: list[tuple[int, int]] = []  # (indent, depth of the last node at it)
    write_back: int | None = None  # the depth of the write-back block being read
    for line in text.splitlines():
        body = line.strip()
        indent = len(line) - len(line.lstrip())
        if write_back is not None and body.startswith("T.where("):
            out.append(f"{'  ' * (write_back + 1)}where {body[len('T.where('):-1]}")
            continue
        m_for, m_block = _FOR.match(body), _BLOCK.match(body)
        if not (m_for or m_block):
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        depth = stack[-1][1] + 1 if stack else 0
        if m_block:
            write_back = depth if m_block["name"].endswith("_write_back") else None
            out.append(f"{'  ' * depth}block {m_block['name']}")
        else:
            assert m_for is not None
            write_back = None
            names = [v.strip() for v in m_for["vars"].split(",")]
            args = [a.strip() for a in m_for["args"].split(",")]
            call = m_for["call"]
            for k, v in enumerate(names):
                if call == "T.thread_binding":
                    kind = args[1].split("=")[1].strip('"')
                    ext = args[0]
                else:  # range / T.serial / T.grid
                    kind, ext = "serial", args[k if call == "T.grid" else 0]
                out.append(f"{'  ' * (depth + k)}for {v} {ext} {kind}")
            depth += len(names) - 1
        stack.append((indent, depth))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_lowering_has_tvms_structure(case, golden) -> None:
    rows, n, schedule = CASES[case]
    base = _func(rows, n)
    sch = loopir.Schedule(base)
    schedule(sch)
    after = loopir.script(LowerCrossThreadReduction()(sch.func))
    golden(f"passes/cross_thread_{case}_pass", after)
    tvm = (TVM_DIR / f"cross_thread_{case}.txt").read_text()
    assert skeleton(after) == skeleton(tvm)
    check_equivalent(base, loopir.lower(sch.func), thread_order="random")


def test_skeleton_reads_tvms_grid_and_loopirs_loops() -> None:
    """The comparison sees loops, bindings and blocks (so it can fail)."""
    text = (TVM_DIR / "cross_thread_three_way.txt").read_text()
    sk = skeleton(text)
    assert sk[:3] == ["for i 4 blockIdx.x", "  for k_1 32 threadIdx.x", "    block S_in_thread_init"]
    assert ["    for k_0 8 serial", "      for k_2 4 serial", "        block S_in_thread"] == sk[3:6]
    assert sk[-2:] == ["    block S_write_back", "      where k_1 == 0"]
    sch = loopir.Schedule(_func(4, 1000))
    _three_way(sch)
    unlowered = skeleton(loopir.script(sch.func))
    assert unlowered == ["for i 4 blockIdx.x", "  for k_0 8 serial", "    for k_1 32 threadIdx.x",
                         "      for k_2 4 serial", "        block S"]  # fmt: skip
    assert unlowered != sk
