"""Statements of scripts: loops, ``if``, stores, allocations, evaluations and sequences."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any, NoReturn

from loopir.ir import dtype as dt
from loopir.ir.buffer import Buffer, Range
from loopir.ir.expr import Call, PrimExpr, Var, make_const
from loopir.ir.stmt import (
    THREAD_TAGS,
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    SeqStmt,
    Stmt,
)
from loopir.script.exprs import NS, Evaluator, is_weak
from loopir.script.source import Source

__all__ = ["StmtParser", "LOOP_KINDS"]

LOOP_KINDS: dict[str, ForKind] = {
    "serial": ForKind.SERIAL, "parallel": ForKind.PARALLEL, "vectorized": ForKind.VECTORIZED,
    "unroll": ForKind.UNROLLED, "thread_binding": ForKind.THREAD_BINDING,
}  # fmt: skip

_AUG: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}  # fmt: skip

_BLOCK_ONLY = ("reads", "writes", "where", "block_attr", "alloc_buffer", "sblock_alloc_buffer", "init", "axis")

_UNSUPPORTED: dict[str, str] = {
    "While": "loopir has no while loop; write a for loop",
    "Return": "a PrimFunc returns nothing: its outputs are buffers",
    "Assert": "loopir has no assert statement",
    "FunctionDef": "nested functions are not part of the script language",
    "ClassDef": "classes are not part of the script language",
    "Delete": "del is not part of the script language",
    "Import": "imports belong outside the function",
    "ImportFrom": "imports belong outside the function",
    "Global": "global is not part of the script language",
    "Nonlocal": "nonlocal is not part of the script language",
    "Try": "try is not part of the script language",
    "Raise": "raise is not part of the script language",
    "Break": "break is not part of the script language: loops run their whole range",
    "Continue": "continue is not part of the script language: use an if",
    "AnnAssign": "annotated assignments are not part of the script language",
    "AsyncFor": "async for is not part of the script language",
    "AsyncWith": "async with is not part of the script language",
}


class StmtParser:
    """Parses statement lists into IR (blocks: [`BlockParser`][loopir.script.blocks.BlockParser])."""

    src: Source
    ev: Evaluator
    # the ranges of the loops around the current statement (for T.axis.remap)
    loops: dict[Var, Range]

    # --- helpers ----------------------------------------------------------------------------
    def fail(self, message: str, node: ast.AST | None) -> NoReturn:
        self.src.error(message, node)

    def ns_call(self, node: ast.AST) -> tuple[str, ast.Call] | None:
        """``(name, call)`` when ``node`` is a call of a T construct (``T.axis.spatial(...)``)."""
        if not isinstance(node, ast.Call):
            return None
        f = node.func
        parts: list[str] = []
        while isinstance(f, ast.Attribute):
            parts.append(f.attr)
            f = f.value
        if not isinstance(f, ast.Name):
            return None
        found, base = self.ev.lookup(f.id)
        if not found or not isinstance(base, NS):
            return None
        return ".".join([*base.path, *reversed(parts)]), node

    def block_stmt(self, s: ast.stmt) -> Stmt:  # implemented by BlockParser
        raise NotImplementedError

    # --- sequences --------------------------------------------------------------------------
    def body(self, stmts: list[ast.stmt], top: bool = False) -> Stmt:
        """A statement list as one Stmt: one statement as itself, others as a SeqStmt.

        ``X = T.allocate(...)`` takes the rest of the list as its body, as the printer writes it.
        """
        items: list[Stmt] = []
        for k, s in enumerate(stmts):
            call = self.ns_call(s.value) if isinstance(s, ast.Assign) else None
            if call is not None and call[0] == "allocate":
                assert isinstance(s, ast.Assign)
                buf = self.allocation(s, call[1])
                rest = self.body(stmts[k + 1 :])
                alloc = Allocate(buf, rest)
                self.src.mark(alloc, s)
                items.append(alloc)
                break
            items.append(self.stmt(s))
        if len(items) == 1:
            return items[0]
        return SeqStmt(tuple(items))

    def allocation(self, s: ast.Assign, call: ast.Call) -> Buffer:
        target = s.targets[0]
        if len(s.targets) != 1 or not isinstance(target, ast.Name):
            self.fail("T.allocate is assigned to one name: X = T.allocate(...)", s)
        name = target.id
        buf = self.allocate_buffer(name, call)
        self.ev.define(name, buf)
        self.src.mark(buf, s)
        return buf

    def allocate_buffer(self, name: str, call: ast.Call) -> Buffer:
        args, kw = self.ev.expect(call, 2, 3, ("scope", "strides"))
        scope = args[2] if len(args) > 2 else kw.get("scope", "global")
        return self.make_buffer(name, args[0], args[1], scope, kw.get("strides"), call, "T.allocate")

    def make_buffer(self, name: str, shape: Any, dtype: Any, scope: Any, strides: Any,
                    node: ast.Call, what: str) -> Buffer:  # fmt: skip
        d = self.ev.dtype(dtype, node, f"{what}'s dtype")
        sc = self.ev.string(scope, node, f"{what}'s scope")
        dims = self.shape(shape, node, what)
        st = None if strides is None else self.shape(strides, node, f"{what}'s strides")
        try:
            return Buffer(name, dims, d, sc, st)
        except (TypeError, ValueError) as e:
            return self.fail(f"{what}: {e}", node)

    def shape(self, shape: Any, node: ast.AST, what: str) -> tuple[PrimExpr, ...]:
        items = shape if isinstance(shape, (tuple, list)) else (shape,)
        out = []
        for v in items:
            e = self.ev.to_expr(v, node, what=f"an extent of {what}")
            if not dt.is_int(e.dtype):
                self.fail(f"{what}: extents must be integers, got {e} ({e.dtype})", node)
            out.append(e)
        return tuple(out)

    # --- statements -------------------------------------------------------------------------
    def stmt(self, s: ast.stmt) -> Stmt:
        kind = type(s).__name__
        if kind in _UNSUPPORTED:
            return self.fail(_UNSUPPORTED[kind], s)
        method = getattr(self, "stmt_" + kind, None)
        if method is None:
            return self.fail(f"{kind} statements are not part of the script language", s)
        out: Stmt = method(s)
        if not isinstance(out, SeqStmt):
            self.src.mark(out, s)
        return out

    def stmt_Pass(self, s: ast.Pass) -> Stmt:
        return SeqStmt(())

    def stmt_Expr(self, s: ast.Expr) -> Stmt:
        call = self.ns_call(s.value)
        if call is not None:
            name, node = call
            if name == "evaluate":
                args, _ = self.ev.expect(node, 1, 1)
                return Evaluate(self.ev.to_expr(args[0], node.args[0]))
            head = name.split(".")[0]
            if head in _BLOCK_ONLY:
                return self.fail(f"T.{name} belongs directly in a block (with T.block(...):)", s)
            if head == "func_attr":
                return self.fail("T.func_attr belongs at the function's top level", s)
        value = self.ev.eval(s.value)
        if isinstance(value, Call):
            return Evaluate(value)
        return self.fail(
            "an expression statement must be T.evaluate(...) or a call of an intrinsic", s
        )

    def stmt_Assign(self, s: ast.Assign) -> Stmt:
        if len(s.targets) != 1:
            return self.fail("chained assignment is not part of the script language", s)
        target = s.targets[0]
        if isinstance(target, ast.Subscript):
            return self.store(target, self.ev.eval(s.value), s.value)
        call = self.ns_call(s.value)
        if call is not None:
            head = call[0].split(".")[0]
            if head in ("alloc_buffer", "sblock_alloc_buffer", "axis"):
                return self.fail(f"T.{call[0]} belongs directly in a block (or, T.alloc_buffer, at the function's top level)", s)
            if head == "match_buffer" or (len(call[0].split(".")) == 1 and not call[1].args):
                return self.fail(f"T.{call[0]} belongs at the function's top level", s)
        return self.fail(
            "loopir has no let binding: `name = expr` is not a statement; write the expression "
            "where it is used, or store it in a buffer (T.alloc_buffer / T.allocate)", s
        )

    def stmt_AugAssign(self, s: ast.AugAssign) -> Stmt:
        if not isinstance(s.target, ast.Subscript):
            return self.fail("only a buffer element can be updated in place (A[i] += x)", s)
        fn = _AUG.get(type(s.op))
        if fn is None:
            return self.fail(f"operator {type(s.op).__name__} in an augmented assignment is not supported", s)
        old = self.ev.eval(s.target)
        rhs = self.ev.eval(s.value)
        a, b = self.ev.operands(old, rhs, s, "an augmented assignment")
        try:
            value = fn(a, b)
        except (TypeError, ValueError) as e:
            return self.fail(str(e), s)
        return self.store(s.target, value, s.value)

    def store(self, target: ast.Subscript, value: Any, value_node: ast.AST) -> Stmt:
        buf = self.ev.eval(target.value)
        if not isinstance(buf, Buffer):
            return self.fail(f"only buffer elements can be assigned, not {ast.unparse(target.value)}", target)
        idx = self.ev.indices(target.slice)
        if len(idx) != buf.ndim:
            self.fail(f"buffer {buf.name} has {buf.ndim} dimensions, indexed with {len(idx)}", target)
        indices = []
        for i, n in idx:
            if isinstance(i, slice):
                self.fail("a store takes indices, not slices", n)
            indices.append(self.ev.to_expr(i, n, what="an index"))
        lanes = max((dt.lanes(i.dtype) for i in indices), default=1)
        v = self.ev.to_expr(value, value_node, dtype=dt.with_lanes(buf.dtype, lanes) if is_weak(value) else None)
        return BufferStore(buf, v, tuple(indices))

    def stmt_If(self, s: ast.If) -> Stmt:
        cond = self.ev.to_bool(self.ev.eval(s.test), s.test)
        with self.ev.scope():
            then = self.body(s.body)
        other = None
        if s.orelse:
            with self.ev.scope():
                other = self.body(s.orelse)
        return IfThenElse(cond, then, other)

    def stmt_With(self, s: ast.With) -> Stmt:
        if len(s.items) != 1:
            return self.fail("a with statement takes one T.block / T.init / T.allocate", s)
        item = s.items[0]
        call = self.ns_call(item.context_expr)
        name = call[0] if call is not None else ""
        if name in ("block", "sblock"):
            if item.optional_vars is not None:
                self.fail("with T.block(...) takes no `as` name", item.optional_vars)
            return self.block_stmt(s)
        if name == "allocate" and call is not None:
            if not isinstance(item.optional_vars, ast.Name):
                return self.fail("with T.allocate(...) as X: names its buffer", s)
            buf = self.allocate_buffer(item.optional_vars.id, call[1])
            self.src.mark(buf, s)
            with self.ev.scope():
                self.ev.define(item.optional_vars.id, buf)
                return Allocate(buf, self.body(s.body))
        if name == "init":
            return self.fail("with T.init(): belongs directly in a block", s)
        return self.fail(
            f"with {ast.unparse(item.context_expr)}: is not a T.block, T.init or T.allocate", item.context_expr
        )

    # --- loops ------------------------------------------------------------------------------
    def stmt_For(self, s: ast.For) -> Stmt:
        if s.orelse:
            return self.fail("for ... else is not part of the script language", s.orelse[0])
        it = s.iter
        if not isinstance(it, ast.Call):
            return self.fail("a loop iterates over range(...), T.grid(...) or a T loop kind (T.serial, ...)", it)
        call = self.ns_call(it)
        if call is None:
            if isinstance(it.func, ast.Name) and it.func.id == "range":
                found, value = self.ev.lookup("range")
                if not found or value is range:
                    return self.loop(s, "serial", it)
            return self.fail(
                f"{ast.unparse(it.func)} is not a loop kind: use range, T.grid, T.serial, T.parallel, "
                "T.vectorized, T.unroll or T.thread_binding", it.func
            )
        name = call[0]
        if name == "grid":
            return self.grid(s, it)
        if name not in LOOP_KINDS:
            return self.fail(f"T.{name} is not a loop kind", it.func)
        return self.loop(s, name, it)

    def loop_var(self, target: ast.expr, rng: Range) -> Var:
        if not isinstance(target, ast.Name):
            return self.fail("a loop variable is a plain name", target)
        return Var(target.id, rng.extent.dtype)

    def loop(self, s: ast.For, kind: str, it: ast.Call) -> Stmt:
        args, kw = self.ev.args(it)
        allowed = ("annotations", "thread") if kind == "thread_binding" else ("annotations",)
        for k in kw:
            if k not in allowed:
                self.fail(f"{ast.unparse(it.func)}: unexpected keyword argument {k!r}", it)
        tag = kw.get("thread")
        if kind == "thread_binding" and tag is None and args and isinstance(args[-1], str):
            tag = args.pop()
        if kind == "thread_binding":
            tag = self.ev.string(tag, it, "T.thread_binding's thread")
            if tag not in THREAD_TAGS:
                self.fail(f"T.thread_binding: unknown thread {tag!r}; expected one of {', '.join(THREAD_TAGS)}", it)
        if not 1 <= len(args) <= 2:
            self.fail(f"{ast.unparse(it.func)} takes an extent or a begin and an end, got {len(args)} arguments", it)
        rng = self.loop_range(args, it)
        anns = kw.get("annotations") or {}
        if not isinstance(anns, dict):
            self.fail("annotations must be a dict", it)
        var = self.loop_var(s.target, rng)
        with self.ev.scope():
            self.ev.define(var.name, var)
            self.loops[var] = rng
            try:
                body = self.body(s.body)
            finally:
                del self.loops[var]
        try:
            return For(var, rng.min, rng.extent, LOOP_KINDS[kind], body, tag, anns)
        except (TypeError, ValueError) as e:
            return self.fail(str(e), s)

    def loop_range(self, args: list[Any], it: ast.Call) -> Range:
        if len(args) == 1:
            ext = self.ev.to_expr(args[0], it.args[0], what="a loop extent")
            if not dt.is_int(ext.dtype):
                self.fail(f"a loop extent must be an integer, got {ext} ({ext.dtype})", it.args[0])
            return Range(make_const(0, ext.dtype), ext)
        return self.ev.bounds(args[0], args[1], it, it.args[1])

    def grid(self, s: ast.For, it: ast.Call) -> Stmt:
        args, _ = self.ev.expect(it, 1, 64)
        targets = s.target.elts if isinstance(s.target, ast.Tuple) else [s.target]
        if len(targets) != len(args):
            self.fail(f"T.grid has {len(args)} extents but the loop names {len(targets)} variables", s.target)
        rngs = [self.loop_range([a], _one_arg(it, n)) for n, a in enumerate(args)]
        vs = [self.loop_var(t, r) for t, r in zip(targets, rngs)]
        with self.ev.scope():
            for v, r in zip(vs, rngs):
                self.ev.define(v.name, v)
                self.loops[v] = r
            try:
                body = self.body(s.body)
            finally:
                for v in vs:
                    del self.loops[v]
        for v, r in reversed(list(zip(vs, rngs))):
            body = For(v, r.min, r.extent, ForKind.SERIAL, body)
            self.src.mark(body, s)
        return body


def _one_arg(call: ast.Call, n: int) -> ast.Call:
    """A call node whose only argument is the ``n``-th of ``call`` (for per-extent errors)."""
    node = ast.Call(func=call.func, args=[call.args[n]], keywords=[])
    return ast.copy_location(node, call.args[n])

