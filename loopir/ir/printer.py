"""TVMScript-like printer for PrimFuncs, statements and expressions.

The output is meant for people (and golden tests): it reads like TVM's TVMScript, is fully
deterministic and never raises on valid IR. Conventions:

* integer constants of dtype int32 print bare (``32``), other integer types as
  ``T.int64(5)``; bool constants as ``True``/``False``; float constants always carry their
  dtype (``T.float32(0)``, ``T.float16(0.5)``, ``T.float32("-inf")``).
* parentheses are minimal under Python's precedence rules; operands of the same precedence on
  the right side are parenthesised, so the printed tree is exactly the IR tree.
* Vars and Buffers share one namespace. The first object (in printing order) with a given
  name keeps it; a *different* object with the same name is printed ``name_1``, ``name_2``...
* ``mark=node`` underlines the line(s) that show ``node`` with ``^^^^`` (a loop or block header, an
  ``if`` line, a store, the definition of a buffer or loop var, or the statement containing a marked
  expression), for error messages such as [`ScheduleError`][loopir.errors.ScheduleError].

The text of a function is a script: [`loopir.script.from_source`][loopir.script.parser.from_source]
reads it back into a structurally equal function. So the printer spells out what the parser
would otherwise guess differently: every block's ``T.reads``/``T.writes`` (absent, they are
inferred), the root block unless it is the one the parser adds (shown as the comment
``# with T.block("root"):``), ``with T.allocate(...) as X:`` for an allocation whose scope ends
before the statements that follow it (``X = T.allocate(...)`` scopes the rest of the list),
``pass`` for an empty sequence, ``T.int32(2) + 3`` where two bare numbers would be computed in
Python, ``n = T.int64()`` for a size that is not an int32, and ``T.call_intrin(dtype, ...)`` for a
call whose type is not its intrinsic's default.
"""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Mapping
from typing import Any

from loopir.errors import register_ir_printer
from loopir.ir.buffer import Buffer, BufferRegion, Range
from loopir.ir.expr import (
    BITWISE_OPS,
    EQ,
    GE,
    GT,
    INTRINSICS,
    LE,
    LT,
    NE,
    Add,
    And,
    BinaryOp,
    Broadcast,
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
    Ramp,
    Select,
    StringImm,
    Sub,
    Var,
)
from loopir.ir.functor import collect_vars, post_order_visit
from loopir.ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    IterKind,
    IterVar,
    PrimFunc,
    SeqStmt,
    Stmt,
)

__all__ = ["script", "expr_to_str", "stmt_to_str", "Namer"]

INDENT = "    "

# Python precedence levels (higher binds tighter).
(_P_OR, _P_AND, _P_NOT, _P_CMP, _P_BOR, _P_BXOR, _P_BAND, _P_SHIFT, _P_ADD, _P_MUL, _P_UNARY,
 _P_ATOM) = range(1, 13)

# Python precedence of the bitwise intrinsics, printed with Python's operators (BITWISE_OPS).
_BITWISE_PREC = {
    "bitwise_or": _P_BOR, "bitwise_xor": _P_BXOR, "bitwise_and": _P_BAND, "shift_left": _P_SHIFT,
    "shift_right": _P_SHIFT,
}  # fmt: skip

# Python precedence of the classes printed infix; the operator is the class's own symbol.
_BIN_PREC: dict[type[PrimExpr], int] = {
    Add: _P_ADD, Sub: _P_ADD, Mul: _P_MUL, Div: _P_MUL, FloorDiv: _P_MUL, FloorMod: _P_MUL,
    EQ: _P_CMP, NE: _P_CMP, LT: _P_CMP, LE: _P_CMP, GT: _P_CMP, GE: _P_CMP, And: _P_AND, Or: _P_OR,
}  # fmt: skip


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Namer:
    """Assigns printed names to Vars and Buffers in order of first appearance.

    Vars and Buffers share one namespace; a different object whose name is already taken gets
    the first free ``name_<k>`` (k = 1, 2, ...).
    """

    def __init__(self) -> None:
        # keyed by id(); the object is kept in the value so that its id stays valid.
        self._names: dict[int, tuple[Any, str]] = {}
        # T is the namespace; range and float are what scripts read as Python's builtins
        self._used: set[str] = {"T", "range", "float"}

    def name(self, obj: Var | Buffer) -> str:
        hit = self._names.get(id(obj))
        if hit is not None:
            return hit[1]
        base = obj.name if _IDENT.match(obj.name) else (re.sub(r"\W", "_", obj.name) or "v")
        if not _IDENT.match(base):
            base = "v_" + base
        if keyword.iskeyword(base):
            base += "_"  # keep the script valid Python: `in` -> `in_`
        name = base
        k = 0
        while name in self._used:
            k += 1
            name = f"{base}_{k}"
        self._used.add(name)
        self._names[id(obj)] = (obj, name)
        return name


def _float_str(value: float, dtype: str) -> str:
    if math.isnan(value):
        return f'T.{dtype}("nan")'
    if math.isinf(value):
        return f'T.{dtype}("{"-" if value < 0 else ""}inf")'
    if value == int(value) and abs(value) < 1e16:
        return f"T.{dtype}({int(value)})"
    return f"T.{dtype}({value!r})"


class _Printer:
    """Stateful printer: a Namer, the output lines and the set of lines to mark."""

    def __init__(self, mark: Any = None) -> None:
        self.namer = Namer()
        self.mark = mark
        # several nodes can be marked at once (a race shows both accesses)
        self.marks: tuple[Any, ...] = (
            () if mark is None else tuple(mark) if isinstance(mark, (tuple, list)) else (mark,)
        )
        self.lines: list[str] = []
        self.marked: set[int] = set()
        # marked lines where only a part (start, end) is underlined
        self.spans: dict[int, tuple[int, int]] = {}
        # set while printing an expression that contains the marked expression; the next
        # emitted line is then marked.
        self._hit = False
        self._mark_var_done = False

    # --- expressions ------------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> str:
        return self._expr(e)[0]

    def _note(self, e: Any) -> None:
        if any(e is m for m in self.marks):
            # A marked Var or Buffer is shown only where it first appears (its definition when
            # printed in a function), not at every use.
            if isinstance(e, (Var, Buffer)):
                if self._mark_var_done:
                    return
                self._mark_var_done = True
            self._hit = True

    def _wrap(self, e: PrimExpr, min_prec: int) -> str:
        text, prec = self._expr(e)
        return f"({text})" if prec < min_prec else text

    def _expr(self, e: PrimExpr) -> tuple[str, int]:
        self._note(e)
        if isinstance(e, Var):
            return self.namer.name(e), _P_ATOM
        if isinstance(e, IntImm):
            if e.dtype == "bool":
                return ("True" if e.value else "False"), _P_ATOM
            if e.dtype == "int32":
                return str(e.value), (_P_UNARY if e.value < 0 else _P_ATOM)
            return f"T.{e.dtype}({e.value})", _P_ATOM
        if isinstance(e, FloatImm):
            return _float_str(e.value, e.dtype), _P_ATOM
        if isinstance(e, StringImm):
            return _quote(e.value), _P_ATOM
        prec = _BIN_PREC.get(type(e))
        if prec is not None:
            assert isinstance(e, (BinaryOp, And, Or))  # the classes of _BIN_PREC
            # comparisons chain in Python: both sides must bind tighter.
            if _is_weak(e.a) and _is_weak(e.b):
                # two bare numbers would be computed by the parser: keep the node
                left = self.strong(e.a)
            else:
                left = self._wrap(e.a, prec + 1 if prec == _P_CMP else prec)
            right = self._wrap(e.b, prec + 1)
            return f"{left} {type(e).symbol} {right}", prec
        if isinstance(e, Not):
            operand = self.strong(e.a) if _is_weak(e.a) else self._wrap(e.a, _P_NOT)
            return f"not {operand}", _P_NOT
        if isinstance(e, (Min, Max)):
            fn = "min" if isinstance(e, Min) else "max"
            return f"T.{fn}({self.expr(e.a)}, {self.expr(e.b)})", _P_ATOM
        if isinstance(e, Select):
            c, t, f = (self.expr(x) for x in (e.condition, e.true_value, e.false_value))
            return f"T.Select({c}, {t}, {f})", _P_ATOM
        if isinstance(e, Cast):
            return f'T.Cast("{e.dtype}", {self.expr(e.value)})', _P_ATOM
        if isinstance(e, BufferLoad):
            return self.load(e.buffer, e.indices), _P_ATOM
        if isinstance(e, Call):
            if e.op in _BITWISE_PREC and len(e.args) == 2:
                bp = _BITWISE_PREC[e.op]
                a, b = self._wrap(e.args[0], bp), self._wrap(e.args[1], bp + 1)
                return f"{a} {BITWISE_OPS[e.op]} {b}", bp
            if e.op == "bitwise_not" and len(e.args) == 1:
                return f"~{self._wrap(e.args[0], _P_UNARY)}", _P_UNARY
            args = ", ".join(self.expr(a) for a in e.args)
            if e.dtype == _call_dtype(e) and _DOTTED.match(e.op):
                return f"T.{e.op}({args})", _P_ATOM
            # a result type of its own (or a name that is no attribute path): say it
            return f'T.call_intrin("{e.dtype}", {_quote(e.op)}{", " if args else ""}{args})', _P_ATOM
        if isinstance(e, Ramp):
            return f"T.Ramp({self.expr(e.base)}, {self.expr(e.stride)}, {e.lanes})", _P_ATOM
        if isinstance(e, Broadcast):
            return f"T.Broadcast({self.expr(e.value)}, {e.lanes})", _P_ATOM
        # Unknown expression kinds (added later by other modules) still print.
        return f"<{type(e).__name__}>", _P_ATOM

    def strong(self, e: PrimExpr) -> str:
        """A constant with its type spelled out (``T.int32(2)``, ``T.bool(True)``): what the
        parser keeps as a node where a bare number would be a Python value."""
        self._note(e)
        assert isinstance(e, IntImm)
        return f"T.{e.dtype}({self.expr(e)})"

    def load(self, buffer: Buffer, indices: tuple[PrimExpr, ...]) -> str:
        self._note(buffer)
        name = self.namer.name(buffer)
        if not indices:
            return f"{name}[()]"
        return f"{name}[{', '.join(self.expr(i) for i in indices)}]"

    def region(self, r: BufferRegion) -> str:
        self._note(r)
        self._note(r.buffer)
        name = self.namer.name(r.buffer)
        parts = [self.range_slice(rg) for rg in r.region]
        return f"{name}[{', '.join(parts)}]" if parts else f"{name}[()]"

    def range_slice(self, rg: Range) -> str:
        self._note(rg)
        if isinstance(rg.extent, IntImm) and rg.extent.value == 1:
            return self.expr(rg.min)
        return f"{self.expr(rg.min)}:{self.range_end(rg.min, rg.extent)}"

    def range_end(self, lo: PrimExpr, extent: PrimExpr) -> str:
        """``lo + extent``, folded when both are integer constants or ``lo`` is 0."""
        if isinstance(lo, IntImm) and isinstance(extent, IntImm) and lo.dtype == extent.dtype:
            return self.expr(IntImm(lo.value + extent.value, lo.dtype))
        if isinstance(lo, IntImm) and lo.value == 0:
            return self.expr(extent)
        lo_s = self._wrap(lo, _P_ADD)
        return f"{lo_s} + {self._wrap(extent, _P_ADD + 1)}"

    def shape(self, shape: tuple[PrimExpr, ...]) -> str:
        parts = [self.expr(s) for s in shape]
        return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"

    def buffer_decl_args(self, b: Buffer) -> str:
        text = f'{self.shape(b.shape)}, "{b.dtype}"'
        if b.strides is not None:
            text += f", strides={self.shape(b.strides)}"
        if b.scope != "global":
            text += f', scope="{b.scope}"'
        return text

    def value(self, v: Any) -> str:
        """Annotation / attribute values: expressions printed, containers recursively."""
        if isinstance(v, PrimExpr):
            # a bare number here is a Python value: an IR constant says its type
            return self.strong(v) if _is_weak(v) else self.expr(v)
        if isinstance(v, float) and not math.isfinite(v):
            return f'float("{v}")'
        if isinstance(v, (Var, Buffer)):
            return self.namer.name(v)
        if isinstance(v, Mapping):
            items = ", ".join(f"{self.value(k)}: {self.value(x)}" for k, x in v.items())
            return "{" + items + "}"
        if isinstance(v, list):
            return "[" + ", ".join(self.value(x) for x in v) + "]"
        if isinstance(v, tuple):
            inner = ", ".join(self.value(x) for x in v)
            return f"({inner},)" if len(v) == 1 else f"({inner})"
        if isinstance(v, str):
            return _quote(v)
        return repr(v)

    # --- statements -------------------------------------------------------------------------
    def emit(self, depth: int, text: str, mark: bool = False) -> None:
        if mark or self._hit:
            self.marked.add(len(self.lines))
        self._hit = False
        self.lines.append(INDENT * depth + text)

    def is_marked(self, *nodes: Any) -> bool:
        return any(n is m for n in nodes for m in self.marks)

    def stmt(self, s: Stmt, depth: int, tail: bool = True) -> None:
        """Print ``s``; ``tail``: nothing follows it in its sequence (an Allocate there takes
        the short form, its body unindented)."""
        if isinstance(s, SeqStmt):
            if not s.seq:
                self.emit(depth, "pass", self.is_marked(s))
            for i, x in enumerate(s.seq):
                start = len(self.lines)
                self.stmt(x, depth, tail and i == len(s.seq) - 1)
                if i == 0 and self.is_marked(s) and len(self.lines) > start:
                    self.marked.add(start)
            return
        if isinstance(s, BufferStore):
            target = self.load(s.buffer, s.indices)
            self.emit(depth, f"{target} = {self.expr(s.value)}", self.is_marked(s))
        elif isinstance(s, Evaluate):
            v = s.value
            text = self.expr(v) if isinstance(v, Call) else f"T.evaluate({self.expr(v)})"
            self.emit(depth, text, self.is_marked(s))
        elif isinstance(s, IfThenElse):
            self.emit(depth, f"if {self.expr(s.condition)}:", self.is_marked(s))
            self.stmt(s.then_case, depth + 1)
            if s.else_case is not None:
                self.emit(depth, "else:")
                self.stmt(s.else_case, depth + 1)
        elif isinstance(s, For):
            self.for_(s, depth)
        elif isinstance(s, Allocate):
            b = s.buffer
            self._note(b)
            name = self.namer.name(b)
            args = f'{self.shape(b.shape)}, "{b.dtype}", "{b.scope}"'
            if b.strides is not None:
                args += f", strides={self.shape(b.strides)}"
            if tail:
                # As in TVMScript, the allocation's body follows at the same indentation.
                self.emit(depth, f"{name} = T.allocate({args})", self.is_marked(s))
                self.stmt(s.body, depth)
            else:
                # statements follow that are not in its scope
                self.emit(depth, f"with T.allocate({args}) as {name}:", self.is_marked(s))
                self.stmt(s.body, depth + 1)
        elif isinstance(s, BlockRealize):
            self.block(s.block, s, depth)
        elif isinstance(s, Block):
            self.block(s, None, depth)
        else:
            self.emit(depth, f"<{type(s).__name__}>", self.is_marked(s))

    def for_(self, s: For, depth: int) -> None:
        var = self.expr(s.loop_var)
        if isinstance(s.min, IntImm) and s.min.value == 0:
            bounds = self.expr(s.extent)
        else:
            bounds = f"{self.expr(s.min)}, {self.range_end(s.min, s.extent)}"
        kind = {
            ForKind.SERIAL: "serial",
            ForKind.PARALLEL: "parallel",
            ForKind.VECTORIZED: "vectorized",
            ForKind.UNROLLED: "unroll",
            ForKind.THREAD_BINDING: "thread_binding",
        }[s.kind]
        extra = ""
        if s.kind is ForKind.THREAD_BINDING:
            extra += f', thread="{s.thread_tag}"'
        if s.annotations:
            extra += f", annotations={self.value(dict(s.annotations))}"
        self.emit(depth, f"for {var} in T.{kind}({bounds}{extra}):", self.is_marked(s))
        self.stmt(s.body, depth + 1)

    def iter_var_line(self, iv: IterVar, value: PrimExpr | None, depth: int) -> None:
        kind = "spatial" if iv.kind is IterKind.SPATIAL else "reduce"
        if isinstance(iv.dom.min, IntImm) and iv.dom.min.value == 0:
            dom = self.expr(iv.dom.extent)
        else:
            dom = f"({self.expr(iv.dom.min)}, {self.range_end(iv.dom.min, iv.dom.extent)})"
        name = self.expr(iv.var)
        bound = "" if value is None else f", {self.expr(value)}"
        self.emit(depth, f"{name} = T.axis.{kind}({dom}{bound})", self.is_marked(iv))

    def block_items(self, blk: Block, realize: BlockRealize | None, depth: int, root: bool = False) -> None:
        """Everything inside ``with T.block(...)``: axes, where, regions, allocs, init, body
        (``root``: the implicit root block, which has no regions)."""
        values = realize.iter_values if realize is not None else (None,) * len(blk.iter_vars)
        for iv, v in zip(blk.iter_vars, values):
            self.iter_var_line(iv, v, depth)
        if realize is not None and not _is_true(realize.predicate):
            self.emit(depth, f"T.where({self.expr(realize.predicate)})")
        if not root:  # always shown: absent, the parser would infer them
            self.emit(depth, f"T.reads({', '.join(self.region(r) for r in blk.reads)})")
            self.emit(depth, f"T.writes({', '.join(self.region(r) for r in blk.writes)})")
        if blk.annotations:
            self.emit(depth, f"T.block_attr({self.value(dict(blk.annotations))})")
        for b in blk.alloc_buffers:
            self._note(b)
            name = self.namer.name(b)
            self.emit(depth, f"{name} = T.alloc_buffer({self.buffer_decl_args(b)})")
        if blk.init is not None:
            self.emit(depth, "with T.init():")
            self.stmt(blk.init, depth + 1)
        self.stmt(blk.body, depth)

    def block(self, blk: Block, realize: BlockRealize | None, depth: int) -> None:
        self.emit(depth, f"with T.block({_quote(blk.name)}):", self.is_marked(blk, realize))
        self.block_items(blk, realize, depth + 1)

    def func(self, f: PrimFunc) -> None:
        self.emit(0, "@T.prim_func")
        params = []
        span: tuple[int, int] | None = None
        pos = len(f"def {f.name}(")
        for b in f.params:
            name = self.namer.name(b)
            params.append(f"{name}: T.Buffer({self.buffer_decl_args(b)})")
            if self.is_marked(b):
                # a marked parameter is underlined within the signature
                span = (pos, pos + len(params[-1]))
                self._mark_var_done = True  # uses of the buffer stay unmarked
            pos += len(params[-1]) + 2
        self.emit(0, f"def {f.name}({', '.join(params)}):", self.is_marked(f))
        if span is not None:
            self.spans[len(self.lines) - 1] = span
        for v in _shape_vars(f):
            if v.dtype != "int32":  # an undeclared size is an int32
                self.emit(1, f"{self.namer.name(v)} = T.{v.dtype}()")
        if f.attrs:
            self.emit(1, f"T.func_attr({self.value(dict(f.attrs))})")
        body = f.body
        if _is_implicit_root(body):
            # The implicit root block: shown as a comment with its contents unindented.
            assert isinstance(body, BlockRealize)
            self.emit(1, '# with T.block("root"):', self.is_marked(body, body.block))
            self.block_items(body.block, body, 1, root=True)
        else:
            self.stmt(body, 1)

    def render(self) -> str:
        out: list[str] = []
        for i, line in enumerate(self.lines):
            out.append(line)
            if i in self.spans:
                start, end = self.spans[i]
                out.append(" " * start + "^" * (end - start))
            elif i in self.marked:
                stripped = line.lstrip(" ")
                pad = len(line) - len(stripped)
                out.append(" " * pad + "^" * max(len(stripped), 1))
        return "\n".join(out)


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _is_weak(e: Any) -> bool:
    """An IntImm the printer writes as a bare Python number (int32) or True/False (bool)."""
    return isinstance(e, IntImm) and e.dtype in ("int32", "bool")


def _call_dtype(e: Call) -> str:
    """The result type a script's ``T.<op>(...)`` gets (the intrinsic's, else its first
    argument's)."""
    spec = INTRINSICS.get(e.op)
    if spec is not None and spec.result != "same":
        return spec.result
    return e.args[0].dtype if e.args else "int32"


def _shape_vars(f: PrimFunc) -> list[Var]:
    """The symbolic sizes of ``f``'s parameters, in order of appearance."""
    out: dict[int, Var] = {}
    for b in f.params:
        for e in (*b.shape, *(b.strides or ())):
            for v in collect_vars(e):
                out.setdefault(id(v), v)
    return list(out.values())


def _is_implicit_root(body: Stmt) -> bool:
    """Whether ``body`` is the root block a script parser adds by itself (TVM's rule): named
    "root", nothing but allocations and a body, and the body holds blocks or there are
    allocations, but the body is not itself one block without iter vars (which the parser
    would take for the root)."""
    if not (isinstance(body, BlockRealize) and _is_true(body.predicate)):
        return False
    blk = body.block
    if blk.name != "root" or blk.iter_vars or blk.reads or blk.writes or blk.annotations or blk.init:
        return False
    inner = blk.body
    if not blk.alloc_buffers:
        explicit = isinstance(inner, BlockRealize) and not inner.block.iter_vars and _is_true(inner.predicate)
        return not explicit and _has_block(inner)
    return True


def _has_block(s: Stmt) -> bool:
    found: list[bool] = []

    def visit(n: Any) -> None:
        if isinstance(n, Block):
            found.append(True)

    post_order_visit(s, visit)
    return bool(found)


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _is_true(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.dtype == "bool" and e.value == 1


def script(node: Any, mark: Any = None) -> str:
    """Print ``node`` (PrimFunc, Stmt, PrimExpr, Buffer, BufferRegion or Range) as text.

    Parameters
    ----------
    node
        What to print.
    mark
        A node inside ``node`` to highlight (a loop, block, block realize, statement,
        expression, iter var, buffer or loop var), or a tuple of such nodes; its line is
        underlined with ``^``. A mark that does not occur in ``node`` adds a note at the end.

    Returns
    -------
    str
        The text, without a trailing newline.
    """
    p = _Printer(mark)
    if isinstance(node, PrimFunc):
        p.func(node)
    elif isinstance(node, Stmt):
        p.stmt(node, 0)
    elif isinstance(node, PrimExpr):
        p.emit(0, p.expr(node))
    elif isinstance(node, Buffer):
        p._note(node)
        name = p.namer.name(node)
        p.emit(0, f"{name} = T.Buffer({p.buffer_decl_args(node)})")
    elif isinstance(node, BufferRegion):
        p.emit(0, p.region(node))
    elif isinstance(node, Range):
        p.emit(0, f"T.Range({p.expr(node.min)}, {p.range_end(node.min, node.extent)})")
    elif isinstance(node, IterVar):
        p.iter_var_line(node, None, 0)
    else:
        p.emit(0, repr(node))
    text = p.render()
    if mark is not None and not p.marked and not p.spans:
        text += f"\n# note: the marked {type(mark).__name__} does not occur in the printed IR"
    return text


def expr_to_str(e: PrimExpr) -> str:
    """One-line text of an expression (free names kept, clashes suffixed)."""
    p = _Printer()
    return p.expr(e)


def stmt_to_str(s: Stmt) -> str:
    """Multi-line text of a statement (no indentation at the top level)."""
    return script(s)


def _show_for_errors(func: Any, node: Any) -> str:
    return script(func, mark=node)


register_ir_printer(_show_for_errors)
