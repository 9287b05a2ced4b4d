"""A SIMT reference executor for lowered IR (test helper).

The CPU executor runs the IR sequentially, which is the meaning of *scheduled* IR but not of
the lowered form after UnifyThreadLoops: there a cooperative fetch copies only each thread's
share and ``storage_sync`` barriers order the threads. This helper runs lowered IR as a GPU
would, adversarially: the threads of a ``threadIdx`` loop are Python generators, each run from
one barrier to the next in thread order, so a missing barrier shows up as a wrong result
(thread 0 reads a tile element thread 255 has not fetched yet, or overwrites a tile other
threads still need). Allocations are filled with NaN (or a sentinel integer) so that reading an
element nobody wrote poisons the output; indices are bounds-checked.

Lowered IR is compiled to Python source once; it is slow (pure Python) and meant for small
shapes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer
from loopir.ir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    BufferLoad,
    Call,
    Cast,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    Not,
    Or,
    PrimExpr,
    Select,
    Sub,
    Var,
)  # fmt: skip
from loopir.ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
)  # fmt: skip

_BIN = {Add: "+", Sub: "-", Mul: "*", Div: "/", FloorDiv: "//", FloorMod: "%", LT: "<",
        LE: "<=", GT: ">", GE: ">=", EQ: "==", NE: "!="}  # fmt: skip
_MATH = {"exp": "math.exp", "log": "math.log", "sqrt": "math.sqrt", "tanh": "math.tanh",
         "fabs": "abs", "erf": "math.erf"}  # fmt: skip


class SimtError(Exception):
    """Barrier divergence, out-of-bounds access or unsupported IR."""


def _chk(i: int, n: int, name: str) -> int:
    if not 0 <= i < n:
        raise SimtError(f"index {i} out of bounds [0, {n}) of {name}")
    return i


def _run_threads(gens: list) -> None:
    alive = list(gens)
    while alive:
        done = []
        for g in alive:
            try:
                next(g)
            except StopIteration:
                done.append(g)
        if done and len(done) != len(alive):
            raise SimtError(
                f"barrier divergence: {len(done)} threads finished while {len(alive) - len(done)} "
                "wait at a barrier"
            )
        alive = [g for g in alive if g not in done]


class _Gen:
    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.lines: list[str] = []
        self.names: dict[Any, str] = {}
        self.bufs: dict[Buffer, str] = {}
        self.nthread = 0

    def name(self, v: Var) -> str:
        if v not in self.names:
            self.names[v] = f"v{len(self.names)}_{v.name}"
        return self.names[v]

    def buf(self, b: Buffer) -> str:
        if b not in self.bufs:
            self.bufs[b] = f"b{len(self.bufs)}_{b.name}"
        return self.bufs[b]

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def expr(self, e: PrimExpr) -> str:
        if isinstance(e, IntImm):
            return str(bool(e.value)) if dt.is_bool(e.dtype) else str(e.value)
        if isinstance(e, FloatImm):
            return repr(e.value) if math.isfinite(e.value) else f"float('{e.value}')"
        if isinstance(e, Var):
            return self.name(e)
        if type(e) in _BIN:
            a, b = self.expr(e.a), self.expr(e.b)
            return f"({a} {_BIN[type(e)]} {b})"
        if isinstance(e, Min):
            return f"min({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, Max):
            return f"max({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, And):
            return f"({self.expr(e.a)} and {self.expr(e.b)})"
        if isinstance(e, Or):
            return f"({self.expr(e.a)} or {self.expr(e.b)})"
        if isinstance(e, Not):
            return f"(not {self.expr(e.a)})"
        if isinstance(e, Select):
            return (f"({self.expr(e.true_value)} if {self.expr(e.condition)} "
                    f"else {self.expr(e.false_value)})")  # fmt: skip
        if isinstance(e, Cast):
            conv = "float" if dt.is_float(e.dtype) else "bool" if dt.is_bool(e.dtype) else "int"
            return f"{conv}({self.expr(e.value)})"
        if isinstance(e, BufferLoad):
            return f"{self.buf(e.buffer)}[{self.index(e.buffer, e.indices)}]"
        if isinstance(e, Call) and e.op in _MATH:
            return f"{_MATH[e.op]}({', '.join(self.expr(a) for a in e.args)})"
        raise SimtError(f"simt: unsupported expression {type(e).__name__}: {e}")

    def index(self, b: Buffer, idx: tuple[PrimExpr, ...]) -> str:
        parts = [
            f"_chk({self.expr(i)}, {self.expr(n)}, {b.name!r})" for i, n in zip(idx, b.shape)
        ]
        return ", ".join(parts) + ("," if len(parts) == 1 else "")

    def stmt(self, s: Stmt, depth: int, in_thread: bool) -> None:
        if isinstance(s, SeqStmt):
            for c in s.seq:
                self.stmt(c, depth, in_thread)
        elif isinstance(s, BufferStore):
            self.emit(depth, f"{self.buf(s.buffer)}[{self.index(s.buffer, s.indices)}] = "
                             f"{self.expr(s.value)}")  # fmt: skip
        elif isinstance(s, Evaluate):
            if isinstance(s.value, Call) and s.value.op == "tvm_storage_sync":
                self.emit(depth, "yield" if in_thread else "pass")
            else:
                self.emit(depth, "pass")
        elif isinstance(s, IfThenElse):
            self.emit(depth, f"if {self.expr(s.condition)}:")
            self.stmt(s.then_case, depth + 1, in_thread)
            self.emit(depth + 1, "pass")
            if s.else_case is not None:
                self.emit(depth, "else:")
                self.stmt(s.else_case, depth + 1, in_thread)
                self.emit(depth + 1, "pass")
        elif isinstance(s, Allocate):
            b = s.buffer
            shape = ", ".join(self.expr(n) for n in b.shape) + ","
            fill = "np.nan" if dt.is_float(b.dtype) else "-12345"
            self.emit(depth, f"{self.buf(b)} = np.full(({shape}), {fill}, "
                             f"dtype=np.{dt.to_numpy(b.dtype).name})")  # fmt: skip
            self.stmt(s.body, depth, in_thread)
        elif isinstance(s, For):
            v = self.name(s.loop_var)
            rng = f"range({self.expr(s.min)}, {self.expr(s.min)} + {self.expr(s.extent)})"
            is_thread = s.kind is ForKind.THREAD_BINDING and (s.thread_tag or "").startswith("threadIdx")
            if is_thread and in_thread:
                raise SimtError(f"simt: nested thread loop {s.thread_tag} (run lower() first)")
            if is_thread:
                self.nthread += 1
                fn = f"_thread{self.nthread}"
                self.emit(depth, f"def {fn}({v}):")
                self.stmt(s.body, depth + 1, True)
                self.emit(depth + 1, "yield")  # every thread ends with one final barrier
                self.emit(depth, f"_run_threads([{fn}({v}) for {v} in {rng}])")
            else:
                self.emit(depth, f"for {v} in {rng}:")
                self.stmt(s.body, depth + 1, in_thread)
                self.emit(depth + 1, "pass")
        elif isinstance(s, (Block, BlockRealize)):
            raise SimtError("simt: blocks are not supported (lower the function first)")
        else:
            raise SimtError(f"simt: unsupported statement {type(s).__name__}")


def build_simt(func: PrimFunc):  # noqa: ANN201
    """Compile lowered ``func`` to a callable on numpy arrays (outputs written in place)."""
    g = _Gen(func)
    params = [g.buf(b) for b in func.params]
    body_lines_start = len(g.lines)
    g.stmt(func.body, 1, False)
    body = g.lines[body_lines_start:]
    head = [f"def kernel({', '.join(params)}):"]
    # bind symbolic sizes from the argument shapes
    for b in func.params:
        for d, n in enumerate(b.shape):
            if isinstance(n, Var):
                head.append(f"    {g.name(n)} = {g.buf(b)}.shape[{d}]")
    src = "\n".join(head + body + ["    pass"])
    env: dict[str, Any] = {"np": np, "math": math, "_chk": _chk, "_run_threads": _run_threads}
    exec(compile(src, "<simt>", "exec"), env)  # noqa: S102 - test helper compiling our own IR
    kernel = env["kernel"]
    kernel.source = src
    return kernel
